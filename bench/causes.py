"""Issue 18's causes, timed: NPBench's JAX kernels that judge them (loops that update
carried arrays, products around BLAS) from a checkout whose path is given, and prefix
operations and colliding scatters written as a user writes them; hlo2dace against XLA,
interleaved in one run, medians, results checked against XLA's.

    python bench/causes.py /path/to/npbench [--only jacobi_2d,cumsum] [--budget 1.0]

NPBench's code is imported from the checkout at run time, never copied here. Python
integers among a kernel's arguments (step counts, sizes) are static for both compilers.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import hlo2dace
from hlo2dace.compare import keep_freed_memory

NPBENCH = ("jacobi_2d", "seidel_2d", "heat_3d", "fdtd_2d", "floyd_warshall", "deriche",
           "adi", "lu", "cholesky", "gemm", "k2mm", "mvt", "bicg", "atax", "syrk", "syr2k",
           "symm", "azimint_hist")


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def npbench_case(root: Path, name: str, preset: str):
    """(function, arguments, static positions) of one NPBench kernel at a preset."""
    info = json.loads((root / "bench_info" / f"{name}.json").read_text())["benchmark"]
    folder = root / "npbench" / "benchmarks" / info["relative_path"]
    data = dict(info["parameters"][preset])
    init = info["init"]
    made = getattr(_module(folder / f"{info['module_name']}.py"), init["func_name"])(
        *(data[a] for a in init["input_args"]))
    made = made if isinstance(made, tuple) else (made,)
    data.update(zip(init["output_args"], made))
    kernel = getattr(_module(folder / f"{info['module_name']}_jax.py"), info["func_name"])
    fun = getattr(kernel, "__wrapped__", kernel)
    args = [data[a] for a in info["input_args"]]
    static = tuple(i for i, a in enumerate(args) if isinstance(a, int))
    return fun, args, static


def everyday_cases():
    """Prefix operations and colliding scatters as a user writes them."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 4096))
    ids = rng.integers(0, 1000, 1_000_000)
    vals = rng.standard_normal(1_000_000)
    yield "cumsum axis 1 256x4096", lambda a: jnp.cumsum(a, axis=1), (x,)
    yield "cumsum axis 0 256x4096", lambda a: jnp.cumsum(a, axis=0), (x,)
    yield "cumprod axis 1", lambda a: jnp.cumprod(1 + 1e-3 * a, axis=1), (x,)
    yield "cummax axis 1", lambda a: jax.lax.cummax(a, axis=1), (x,)
    yield "reverse cummin axis 0", lambda a: jax.lax.cummin(a, axis=0, reverse=True), (x,)
    yield "cumlogsumexp axis 1", lambda a: jax.lax.cumlogsumexp(a, axis=1), (x,)
    yield "bincount 1e6 into 1000", lambda i: jnp.bincount(i, length=1000), (ids,)
    yield "segment_sum 1e6 into 1000", (
        lambda v, i: jax.ops.segment_sum(v, i, num_segments=1000)), (vals, ids)
    yield "histogram 1e6, 100 bins", lambda v: jnp.histogram(v, bins=100, range=(-4, 4)), (
        vals,)
    yield ".at[].add 1e6 into 1000", (
        lambda v, i: jnp.zeros(1000).at[i].add(v)), (vals, ids)


def measure(fun, args, static, budget: float, rounds: int = 5) -> dict:
    xla = jax.jit(fun, static_argnums=static)
    ours = hlo2dace.jit(fun, static_argnums=static)
    start = time.perf_counter()
    got = ours(*args)
    first = time.perf_counter() - start
    want = xla(*args)
    flat_got, flat_want = jax.tree.leaves(got), jax.tree.leaves(want)
    error = max((float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64))))
                 / max(float(np.max(np.abs(np.asarray(w, np.float64)))), 1e-300)
                 if np.size(w) else 0.0) for g, w in zip(flat_got, flat_want))
    times = {"xla": [], "ours": []}
    calls = {"xla": lambda: jax.block_until_ready(xla(*args)),
             "ours": lambda: jax.block_until_ready(ours(*args))}
    for _ in range(rounds):
        for key, call in calls.items():  # interleaved: load bursts hit both alike
            deadline = time.perf_counter() + budget / rounds / 2
            while True:
                t0 = time.perf_counter()
                call()
                times[key].append(time.perf_counter() - t0)
                if time.perf_counter() > deadline and len(times[key]) >= 3:
                    break
    xla_s, ours_s = statistics.median(times["xla"]), statistics.median(times["ours"])
    return {"xla_ms": xla_s * 1e3, "hlo2dace_ms": ours_s * 1e3, "ratio": ours_s / xla_s,
            "rel_error": error, "first_call_s": first}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("npbench", type=Path, help="an NPBench checkout (github: spcl/npbench)")
    parser.add_argument("--preset", default="S")
    parser.add_argument("--only", help="comma-separated case names (prefixes)")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per case")
    args = parser.parse_args()
    keep_freed_memory()
    jax.config.update("jax_enable_x64", True)  # NPBench's kernels are f64
    wanted = args.only.split(",") if args.only else None
    cases = [(n, *npbench_case(args.npbench, n, args.preset)) for n in NPBENCH
             if not wanted or any(n.startswith(w) for w in wanted)]
    cases += [(n, f, a, ()) for n, f, a in everyday_cases()
              if not wanted or any(n.startswith(w) for w in wanted)]
    ratios = []
    for name, fun, fargs, static in cases:
        row = {"case": name, **measure(fun, fargs, static, args.budget),
               "load": os.getloadavg()[0]}
        ratios.append(row["ratio"])
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v
                          for k, v in row.items()}), flush=True)
    print(f"geometric mean of the ratios: {statistics.geometric_mean(ratios):.3f}")


if __name__ == "__main__":
    main()
