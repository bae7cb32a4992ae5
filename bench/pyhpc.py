"""pyhpc-benchmarks (github: dionhaefner/pyhpc-benchmarks) through NumPy, ``jax.jit`` and
``hlo2dace.jit``: equation_of_state, isoneutral_mixing and turbulent_kinetic_energy, in
float64 as pyhpc runs them, on one thread and on all threads. Writes docs/pyhpc.md and
docs/pyhpc.png.

    python bench/pyhpc.py --pyhpc PATH/TO/pyhpc-benchmarks [--sizes 4096 65536 ...]

The benchmarks' code is imported from the user's checkout, never copied. Each thread
setting runs in a fresh process, since XLA fixes its thread pool when it starts. Before
timing, freed memory is kept in the process (``mallopt``), or every backend that
allocates per call would pay page faults. hlo2dace's outputs are checked against XLA's;
the first ``hlo2dace.jit`` call of each benchmark is timed with an empty cache (translation,
optimisation and C++ build)."""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
BENCHMARKS = {  # name -> (module prefix, JAX entry point)
    "equation_of_state": ("eos", "gsw_dHdT"),
    "isoneutral_mixing": ("isoneutral", "isoneutral_diffusion_pre"),
    "turbulent_kinetic_energy": ("tke", "integrate_tke"),
}
SIZES = (4096, 16384, 65536, 262144, 1048576)


def _quiet_malloc() -> None:
    libc = ctypes.CDLL("libc.so.6")
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 1 << 30)
    libc.mallopt(m_trim_threshold, (1 << 31) - 1)


def _median(call, budget: float) -> float:
    call()
    times = []
    deadline = time.perf_counter() + budget
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 100):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _leaves(result):
    import numpy as np

    return [np.asarray(r) for r in (result if isinstance(result, (tuple, list)) else [result])]


def measure(checkout: Path, sizes, budget: float) -> list[dict]:
    """One thread setting (this process's): every benchmark at every size."""
    import jax
    import numpy as np

    import hlo2dace

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, str(checkout))
    _quiet_malloc()
    rows = []
    for name, (prefix, entry) in BENCHMARKS.items():
        package = importlib.import_module(f"benchmarks.{name}")
        numpy_module = importlib.import_module(f"benchmarks.{name}.{prefix}_numpy")
        jax_module = importlib.import_module(f"benchmarks.{name}.{prefix}_jax")
        xla = getattr(jax_module, entry)
        ours = hlo2dace.jit(getattr(xla, "__wrapped__", xla))
        for k, size in enumerate(sizes):
            inputs = package.generate_inputs(size)
            numpy_inputs = [np.array(a) for a in inputs]
            jax_inputs = [jax.device_put(a) for a in inputs]
            start = time.perf_counter()
            result = ours(*jax_inputs)
            first_call = time.perf_counter() - start
            expected = xla(*jax_inputs)
            errors = [float(np.max(np.abs(e - a)) / max(1e-300, float(np.max(np.abs(e)))))
                      if e.size else 0.0 for e, a in zip(_leaves(expected), _leaves(result))]

            def run(fun, arrays):  # as pyhpc's own harness: the same inputs every call
                return lambda: jax.block_until_ready(fun(*arrays))

            row = {
                "benchmark": name, "size": size,
                "numpy": _median(run(numpy_module.run, numpy_inputs), budget),
                "xla": _median(run(xla, jax_inputs), budget),
                "hlo2dace": _median(run(ours, jax_inputs), budget),
                "first_call": first_call if k == 0 else None,
                "max_relative_error": max(errors),
            }
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def _run_setting(checkout: Path, sizes, budget: float, threads: int | None) -> list[dict]:
    """Measure in a child process with ``threads`` threads (None: all) and a cold cache."""
    env = dict(os.environ)
    if threads == 1:
        env["OMP_NUM_THREADS"] = "1"
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                            "intra_op_parallelism_threads=1").strip()
        for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"
    with tempfile.TemporaryDirectory() as cache:
        env["HLO2DACE_CACHE_DIR"] = cache
        output = subprocess.run(
            [sys.executable, __file__, "--pyhpc", str(checkout), "--child", "--budget",
             str(budget), "--sizes", *map(str, sizes)],
            env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    rows = json.loads(output)
    for row in rows:
        row["threads"] = "1" if threads == 1 else str(os.cpu_count())
    return rows


def write(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = [
        "# pyhpc-benchmarks",
        "",
        "Generated by `python bench/pyhpc.py --pyhpc PATH` from a checkout of",
        "dionhaefner/pyhpc-benchmarks; do not edit. float64, median call times in ms measured",
        "in the same run; ratio = hlo2dace / XLA (below 1: hlo2dace is faster). `first call`: the",
        "first `hlo2dace.jit` call with an empty cache (translation, optimisation, C++ build).",
        f"Machine: {os.cpu_count()} cores; load average at the end "
        f"{os.getloadavg()[0]:.1f}.",
        "",
        "| benchmark | threads | size | NumPy | XLA | hlo2dace | ratio | first call s "
        "| max rel. error |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        first = f"{r['first_call']:.1f}" if r["first_call"] is not None else ""
        lines.append(f"| {r['benchmark']} | {r['threads']} | {r['size']:,} | "
                     f"{r['numpy'] * 1e3:.2f} | {r['xla'] * 1e3:.2f} | "
                     f"{r['hlo2dace'] * 1e3:.2f} | {r['hlo2dace'] / r['xla']:.2f} | {first} | "
                     f"{r['max_relative_error']:.1e} |")
    lines += ["", "![pyhpc](pyhpc.png)", ""]
    (DOCS / "pyhpc.md").write_text("\n".join(lines))

    settings = sorted({r["threads"] for r in rows}, key=int)
    figure, axes = plt.subplots(len(settings), len(BENCHMARKS), squeeze=False,
                                figsize=(5 * len(BENCHMARKS), 4 * len(settings)))
    for i, threads in enumerate(settings):
        for j, name in enumerate(BENCHMARKS):
            ax = axes[i][j]
            mine = [r for r in rows if r["benchmark"] == name and r["threads"] == threads]
            for backend in ("numpy", "xla", "hlo2dace"):
                ax.loglog([r["size"] for r in mine], [r[backend] * 1e3 for r in mine],
                          marker="o", label=backend)
            ax.set_title(f"{name}, {threads} thread{'s' if threads != '1' else ''}")
            ax.set_xlabel("size")
            ax.set_ylabel("ms")
            ax.legend()
    figure.tight_layout()
    figure.savefig(DOCS / "pyhpc.png", dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyhpc", type=Path, required=True, help="a pyhpc-benchmarks checkout")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per timing")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.pyhpc.resolve(), args.sizes, args.budget)))
        return
    rows = []
    for threads in (1, None):
        rows += _run_setting(args.pyhpc.resolve(), args.sizes, args.budget, threads)
    write(rows)
    print((DOCS / "pyhpc.md").read_text())


if __name__ == "__main__":
    main()
