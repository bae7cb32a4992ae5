"""pyhpc-benchmarks (github: dionhaefner/pyhpc-benchmarks) through NumPy, ``jax.jit`` and
``hlo2dace.jit``: equation_of_state, isoneutral_mixing and turbulent_kinetic_energy, in
float64 as pyhpc runs them, on one thread and on all threads. Writes docs/pyhpc.md and
docs/pyhpc.png.

    python bench/pyhpc.py --pyhpc PATH/TO/pyhpc-benchmarks [--sizes 4096 65536 ...]
                          [--no-memory]

The benchmarks' code is imported from the user's checkout, never copied. Each thread
setting runs in a fresh process, since XLA fixes its thread pool when it starts. Before
timing, freed memory is kept in the process (``mallopt``), or every backend that
allocates per call would pay page faults. The backends take turns in rounds, the best
round's median kept (``harness.interleaved``), so that a burst of load from other processes
does not decide a ratio. Every hlo2dace output is checked against XLA's at the dtype's
tolerance (``harness.check``); where one differs, each backend's distance from the
benchmark's NumPy code evaluated in long double (``long_double_errors``) says whether
hlo2dace is wrong or the formula itself loses those digits in float64. The first
``hlo2dace.jit`` call of each benchmark is timed with an empty cache (translation,
optimisation and C++ build). Peak memory: in the one-thread setting, each backend's first
call of the compiled program in a fresh process, the growth of its peak resident set
(``harness.peak_growth_mb``)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import (
    blas_kernels,
    check,
    interleaved,
    machine,
    peak_growth_mb,
    pyplot,
    thread_environment,
)

DOCS = Path(__file__).resolve().parents[1] / "docs"
BENCHMARKS = {  # name -> (module prefix, JAX entry point)
    "equation_of_state": ("eos", "gsw_dHdT"),
    "isoneutral_mixing": ("isoneutral", "isoneutral_diffusion_pre"),
    "turbulent_kinetic_energy": ("tke", "integrate_tke"),
}
SIZES = (4096, 16384, 65536, 262144, 1048576, 4194304)  # pyhpc's own


#: hlo2dace within this factor of the larger of XLA's and NumPy's distances from the
#: long-double result computes the formula as well as those float64 evaluations do
AS_CLOSE = 1.5


def _leaves(result):
    import numpy as np

    return [np.asarray(r) for r in (result if isinstance(result, (tuple, list)) else [result])]


def long_double_errors(numpy_module, inputs, results: dict) -> dict:
    """Each backend's largest normwise error (max |result - exact| / max |exact|, over the
    outputs) against the benchmark's NumPy code evaluated in long double (x86's 80-bit
    floats: 11 more bits than float64) from the same inputs: the nearest to an exact
    answer at hand."""
    import numpy as np

    exact = _leaves(numpy_module.run(*[np.asarray(a, np.longdouble) for a in inputs]))
    errors = {}
    for backend, result in results.items():
        errors[backend] = max(
            float(np.max(np.abs(np.asarray(r, np.longdouble) - e)) / np.max(np.abs(e)))
            if e.size and np.max(np.abs(e)) else 0.0 for r, e in zip(_leaves(result), exact))
    return errors


def measure(checkout: Path, sizes, budget: float) -> list[dict]:
    """One thread setting (this process's): every benchmark at every size."""
    import jax

    import hlo2dace
    from hlo2dace.compare import keep_freed_memory

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, str(checkout))
    keep_freed_memory()
    rows = []
    for name, (prefix, entry) in BENCHMARKS.items():
        package = importlib.import_module(f"benchmarks.{name}")
        numpy_module = importlib.import_module(f"benchmarks.{name}.{prefix}_numpy")
        jax_module = importlib.import_module(f"benchmarks.{name}.{prefix}_jax")
        xla = getattr(jax_module, entry)
        ours = hlo2dace.jit(getattr(xla, "__wrapped__", xla))
        for k, size in enumerate(sizes):
            row = {"benchmark": name, "size": size}
            try:
                row.update(_measure_size(package.generate_inputs(size), numpy_module, xla,
                                         ours, budget))
            except Exception as exc:  # its row says so; the other sizes and benchmarks go on
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            if k:  # the benchmark's first call is the cold one; later ones find DaCe loaded
                row["first_call"] = None
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def _measure_size(inputs, numpy_module, xla, ours, budget: float) -> dict:
    """One benchmark at one size: hlo2dace's first call, its check against XLA (and the
    long-double errors where it differs) and the three backends' times."""
    import jax
    import numpy as np

    numpy_inputs = [np.array(a) for a in inputs]
    jax_inputs = [jax.device_put(a) for a in inputs]
    start = time.perf_counter()
    result = ours(*jax_inputs)
    first_call = time.perf_counter() - start
    expected = xla(*jax_inputs)
    checked = check(_leaves(expected), _leaves(result))
    if checked["verdict"] != "OK":
        checked["long_double"] = long_double_errors(numpy_module, inputs, {
            "xla": expected, "hlo2dace": result, "numpy": numpy_module.run(*numpy_inputs)})

    def run(fun, arrays):  # as pyhpc's own harness: the same inputs every call
        return lambda: jax.block_until_ready(fun(*arrays))

    times = interleaved({"numpy": (run(numpy_module.run, numpy_inputs), None),
                         "xla": (run(xla, jax_inputs), None),
                         "hlo2dace": (run(ours, jax_inputs), None)}, budget)
    return {**times, "first_call": first_call, **checked}


def peak_growth(checkout: Path, name: str, size: int, backend: str) -> float:
    """In this (fresh) process: ``backend``'s first call of ``name`` at ``size``, compiled
    first, as the growth of the peak resident set in MB."""
    import jax

    import hlo2dace

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, str(checkout))
    prefix, entry = BENCHMARKS[name]
    package = importlib.import_module(f"benchmarks.{name}")
    xla = getattr(importlib.import_module(f"benchmarks.{name}.{prefix}_jax"), entry)
    jitted = xla if backend == "xla" else hlo2dace.jit(getattr(xla, "__wrapped__", xla))
    inputs = [jax.device_put(a) for a in package.generate_inputs(size)]
    compiled = jitted.lower(*inputs).compile()
    return peak_growth_mb(lambda: jax.block_until_ready(compiled(*inputs)))


def _run_setting(checkout: Path, sizes, budget: float, threads: int | None,
                 memory: bool) -> list[dict]:
    """Measure in a child process with ``threads`` threads (None: all) and a cold cache;
    with ``memory``, each backend's peak memory in fresh processes on that cache."""
    env = thread_environment(threads)
    with tempfile.TemporaryDirectory() as cache:
        env["HLO2DACE_CACHE_DIR"] = cache

        def child(*arguments: str) -> str:
            return subprocess.run([sys.executable, __file__, "--pyhpc", str(checkout),
                                   *arguments], env=env, check=True, stdout=subprocess.PIPE,
                                  text=True).stdout

        rows = json.loads(child("--child", "--budget", str(budget),
                                "--sizes", *map(str, sizes)))
        for row in rows:
            row["threads"] = "1" if threads == 1 else str(os.cpu_count())
            for backend in ("xla", "hlo2dace") if memory and not row.get("error") else ():
                try:
                    row[f"{backend}_peak_mb"] = json.loads(child(
                        "--memory-child", row["benchmark"], str(row["size"]), backend))
                except subprocess.CalledProcessError as exc:
                    row[f"{backend}_peak_mb"] = None
                    row[f"{backend}_peak_error"] = f"exit status {exc.returncode}"
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def formula_rounding(row: dict) -> bool:
    """hlo2dace differs from XLA beyond the tolerance, but is as close to the long-double
    result as the other float64 evaluations (XLA's, NumPy's): the formula, not the
    translation, loses those digits."""
    exact = row.get("long_double")
    return bool(exact) and exact["hlo2dace"] <= AS_CLOSE * max(exact["xla"], exact["numpy"])


def summary(rows: list[dict]) -> list[str]:
    """One line saying how every (benchmark, threads, size) went: failed, or its results
    within the dtype's tolerance of XLA's, or beyond it and then as close to the
    long-double result as XLA's (the formula's rounding) or not (wrong)."""
    failed = [r for r in rows if r.get("error")]
    differ = [r for r in rows if not r.get("error") and r["verdict"] != "OK"]
    explained = [r for r in differ if formula_rounding(r)]
    names = sorted({r["benchmark"] for r in explained})
    return [f"Checked: {len(rows)} measurements, {len(failed)} failed; "
            f"{len(rows) - len(failed) - len(differ)} within the dtype's tolerance of XLA's, "
            f"{len(differ)} beyond it"
            + (f", of which {len(explained)} ({', '.join(names)}) as close to the "
               "long-double result as XLA's and NumPy's: the formula's rounding in float64"
               if explained else "")
            + (f"; {len(differ) - len(explained)} further from it than XLA's and NumPy's: "
               "wrong" if len(differ) > len(explained) else "") + "."]


def _megabytes(row: dict, backend: str) -> str:
    grown = row.get(f"{backend}_peak_mb")
    return f"{grown:.1f}" if grown is not None else row.get(f"{backend}_peak_error", "")


def write(rows: list[dict]) -> None:
    lines = [
        "# pyhpc-benchmarks",
        "",
        "Generated by `python bench/pyhpc.py --pyhpc PATH` from a checkout of",
        "dionhaefner/pyhpc-benchmarks; do not edit. float64, median call times in ms measured",
        "in the same run; ratio = hlo2dace / XLA (below 1: hlo2dace is faster). `first call`: the",
        "first `hlo2dace.jit` call with an empty cache (translation, optimisation, C++ build).",
        "`check`: every hlo2dace output against XLA's at the dtype's tolerance (1024 units of",
        "rounding, normwise: 2.3e-13), with the largest normwise error. Where they differ",
        "beyond it, `from long double` gives each backend's normwise error against the",
        "benchmark's NumPy code evaluated in long double (80-bit) from the same inputs: where",
        f"hlo2dace's is within {AS_CLOSE:g} times the larger of XLA's and NumPy's, hlo2dace",
        "computes the formula as well as they do, and the difference is the formula's own",
        "rounding in float64, which each order of operations rounds its own way. `peak MB`",
        "(one-thread rows): the growth of the process's peak resident set during each",
        "backend's first call of the compiled program, in a fresh process.",
        f"Machine: {machine()}; load average at the end "
        f"{os.getloadavg()[0]:.1f}; {blas_kernels()}. hlo2dace's optimisation level: "
        f"`{os.environ.get('HLO2DACE_OPTIMIZE') or 'default'}`.",
        "",
        *summary(rows),
        "",
        "| benchmark | threads | size | NumPy | XLA | hlo2dace | ratio | XLA peak MB "
        "| hlo2dace peak MB | first call s | check | from long double: XLA, hlo2dace, NumPy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['benchmark']} | {r['threads']} | {r['size']:,} | | | | | | "
                         f"| | failed: {r['error']} | |")
            continue
        first = f"{r['first_call']:.1f}" if r["first_call"] is not None else ""
        exact = r.get("long_double")
        lines.append(f"| {r['benchmark']} | {r['threads']} | {r['size']:,} | "
                     f"{r['numpy'] * 1e3:.2f} | {r['xla'] * 1e3:.2f} | "
                     f"{r['hlo2dace'] * 1e3:.2f} | {r['hlo2dace'] / r['xla']:.2f} | "
                     f"{_megabytes(r, 'xla')} | {_megabytes(r, 'hlo2dace')} | {first} | "
                     f"{r['verdict']} ({r['normwise_error']:.1e}) | "
                     + (f"{exact['xla']:.2e}, {exact['hlo2dace']:.2e}, {exact['numpy']:.2e}"
                        f" ({'as close' if formula_rounding(r) else 'hlo2dace further'})"
                        if exact else "") + " |")
    lines += ["", "![pyhpc](pyhpc.png)", ""]
    (DOCS / "pyhpc.md").write_text("\n".join(lines))
    plot(rows)


def plot(rows: list[dict]) -> None:
    """pyhpc.png: each backend's time by size, one panel per benchmark and threads."""
    plt = pyplot()
    if plt is None:
        return
    settings = sorted({r["threads"] for r in rows}, key=int)
    figure, axes = plt.subplots(len(settings), len(BENCHMARKS), squeeze=False,
                                figsize=(5 * len(BENCHMARKS), 4 * len(settings)))
    for i, threads in enumerate(settings):
        for j, name in enumerate(BENCHMARKS):
            ax = axes[i][j]
            mine = [r for r in rows if r["benchmark"] == name and r["threads"] == threads
                    and not r.get("error")]
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
    parser.add_argument("--optimize", choices=["none", "default", "aggressive"],
                        help="hlo2dace's optimisation level (default: $HLO2DACE_OPTIMIZE)")
    parser.add_argument("--threads", nargs="+", default=["1", "all"], choices=["1", "all"])
    parser.add_argument("--no-memory", action="store_true",
                        help="skip peak memory (two fresh processes per benchmark and size)")
    parser.add_argument("--rows", type=Path, help="also write the measurements here (JSON)")
    parser.add_argument("--from-rows", type=Path, nargs="+",
                        help="write the document from these runs' rows (one per thread setting)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.optimize:
        os.environ["HLO2DACE_OPTIMIZE"] = args.optimize  # the measuring children inherit it
    if args.child:
        print(json.dumps(measure(args.pyhpc.resolve(), args.sizes, args.budget)))
        return
    if args.from_rows:
        write([row for path in args.from_rows for row in json.loads(path.read_text())])
        return
    if args.memory_child:
        name, size, backend = args.memory_child
        print(json.dumps(peak_growth(args.pyhpc.resolve(), name, int(size), backend)))
        return
    rows = []
    for threads in args.threads:
        rows += _run_setting(args.pyhpc.resolve(), args.sizes, args.budget,
                             1 if threads == "1" else None,
                             memory=threads == "1" and not args.no_memory)
        if args.rows:
            args.rows.write_text(json.dumps(rows, indent=0))
    if args.sizes == list(SIZES) and args.threads == ["1", "all"]:
        write(rows)
        print((DOCS / "pyhpc.md").read_text())
    else:  # a part of the run: its summary, and no document
        print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
