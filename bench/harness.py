"""What the benchmark scripts that compare frameworks share: the environment of a measuring
child process with one thread or all, and interleaved timing."""

from __future__ import annotations

import gc
import math
import os
from pathlib import Path
from typing import Callable

from hlo2dace import blas_core
from hlo2dace.compare import compare_arrays, median_seconds

#: set by ``thread_environment(1)``: the measuring child runs on one CPU
ONE_CPU = "HLO2DACE_BENCH_ONE_CPU"


def pin_to_one_cpu() -> None:
    """Run this process on one CPU when its environment asks (``ONE_CPU``). XLA sizes its
    thread pool by the CPUs a process may use, whatever its flags say: measured on a
    2-core machine, a 1000x1200 by 1200x1100 f64 product took 36 ms with
    ``--xla_cpu_multi_thread_eigen=false`` and 70 ms on one CPU."""
    if os.environ.get(ONE_CPU) and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


pin_to_one_cpu()  # before XLA starts its thread pool: measuring children import this first


def thread_environment(threads: int | None, env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) for a child that measures with one thread
    (``threads == 1``: one CPU, OpenMP, XLA's Eigen pool and OpenBLAS) or all (None). XLA fixes its
    thread pool when it starts, so every thread setting needs a process of its own. XLA reads
    no thread count: ``--intra_op_parallelism_threads=1`` in ``XLA_FLAGS`` stops the process
    (``Unknown flag in XLA_FLAGS``), the same words without ``--`` were ignored, and jaxlib
    0.10.2's CPU client takes no thread count; its pool follows the CPUs the process may use
    (``pin_to_one_cpu``)."""
    env = dict(os.environ if env is None else env)
    if threads == 1:
        env["OMP_NUM_THREADS"] = "1"
        env[ONE_CPU] = "1"
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                            ).strip()
        for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"
    return env


def machine() -> str:
    """The CPU the numbers come from, for a document's machine line: its cores, and
    /proc/cpuinfo's model name, family and model, with its widest vector instruction set
    (ratios against XLA move between CPUs: the same code measured 1.14 on an Emerald
    Rapids Xeon and 1.54 on a Zen 4 EPYC)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        return f"{os.cpu_count()} cores"
    flags = set(fields.get("flags", "").split())
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return (f"{os.cpu_count()} cores, {fields.get('model name', 'CPU model unknown')} "
            f"(family {fields.get('cpu family', '?')}, model {fields.get('model', '?')}, {isa})")


def geomean(values) -> float:
    """The geometric mean of the finite, non-zero ``values``; NaN if there are none."""
    values = [v for v in values if v and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def where_measured(rows: list[dict], unit: str) -> tuple[str, str]:
    """The machines ``rows`` were measured on, and the load average they recorded after
    each ``unit`` (rows written before they recorded it: this machine, its load now)."""
    machines = ", ".join(sorted({r.get("machine") or machine() for r in rows}))
    measured = [r["load_average"] for r in rows if "load_average" in r]
    loads = (f"load average after each {unit} {min(measured):.1f} to {max(measured):.1f}"
             if measured else f"load average when written {os.getloadavg()[0]:.1f}")
    return machines, loads


def blas_kernels() -> str:
    """Which OpenBLAS kernels the measured programs ran, for a document's machine line:
    an ``OPENBLAS_CORETYPE`` in the environment (Haswell: AVX2 even on an AVX-512 CPU,
    where XLA's own kernels use AVX-512) changes every BLAS-bound ratio."""
    core = os.environ.get("OPENBLAS_CORETYPE")
    if core:
        return f"OpenBLAS's {core} kernels (`OPENBLAS_CORETYPE={core}` in the environment)"
    chosen = blas_core.choice()
    return (f"OpenBLAS's {chosen[1]} kernels (hlo2dace's choice: unaided, the library runs its "
            f"{chosen[0]} kernels on this CPU; XLA has its own)" if chosen
            else "OpenBLAS's kernels for this CPU")


def check(expected, actual) -> dict:
    """hlo2dace's result ``actual`` against XLA's ``expected`` (pytrees, or sequences of
    arrays), every leaf at its dtype's tolerance (``hlo2dace.compare.compare_arrays``):
    ``verdict`` OK when every leaf is (and there are as many), else DIFFERS, and the
    largest ``normwise_error``."""
    import jax
    import numpy as np

    expected = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(expected)]
    actual = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(actual)]
    checks = [compare_arrays(i, e, a) for i, (e, a) in enumerate(zip(expected, actual))]
    return {"verdict": "OK" if len(expected) == len(actual) and all(
                c.verdict == "OK" for c in checks) else "DIFFERS",
            "normwise_error": max((c.normwise_error or 0.0 for c in checks), default=0.0)}


def interleaved(calls: dict[str, tuple[Callable, Callable | None]], budget: float,
                rounds: int = 3) -> dict[str, float]:
    """Per name, the best of ``rounds`` medians of its ``(call, setup)`` (``median_seconds``),
    the names taking turns, so that a burst of load from other processes does not decide a
    ratio."""
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for name, (call, setup) in calls.items():
            best[name] = min(best[name], median_seconds(call, budget / rounds, setup=setup))
    return best


def pyplot():
    """matplotlib's pyplot, drawing into files; None, with a note, where the bench extra's
    matplotlib is not installed (the documents are written without their plots)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -e '.[bench]')")
        return None
    return plt


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def peak_growth_mb(call: Callable[[], object]) -> float:
    """The growth of this process's peak resident set over its resident set before
    ``call`` (an already compiled program's call, in a fresh process: what the call itself
    allocates, not the compiler), in MB."""
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = _status_kb("VmRSS")
    result = call()
    peak = _status_kb("VmHWM")
    del result
    return round((peak - before) / 1024, 2)
