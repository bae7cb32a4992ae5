"""``hlo2dace.compare``: XLA and DaCe side by side on the same inputs."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Units in the last place between two float arrays of one dtype (complex: the larger
    of the real and imaginary parts), counted exactly on the ordered bit patterns and
    returned as float64. NaN against NaN is 0, NaN against a number is inf; -0.0 and +0.0
    are 0 apart."""
    a, b = np.asarray(a), np.asarray(b)
    if np.iscomplexobj(a):
        return np.maximum(ulp_distance(a.real, b.real), ulp_distance(a.imag, b.imag))
    width = a.dtype.itemsize
    signed = np.dtype(f"i{width}")
    magnitude_mask = np.iinfo(signed).max

    def ordered(x):  # sign-magnitude bits -> two's complement order, as int64
        bits = np.ascontiguousarray(x).view(signed).astype(np.int64)
        magnitude = bits & magnitude_mask
        return np.where(bits < 0, -magnitude, magnitude)

    ka, kb = ordered(a), ordered(b)
    # |ka - kb| can exceed int64 for 64-bit floats: subtract in uint64, modulo 2^64
    hi, lo = np.maximum(ka, kb).astype(np.uint64), np.minimum(ka, kb).astype(np.uint64)
    distance = (hi - lo).astype(np.float64)
    nan_a, nan_b = np.isnan(a.astype(np.float32) if width <= 2 else a), \
        np.isnan(b.astype(np.float32) if width <= 2 else b)
    distance = np.where(nan_a & nan_b, 0.0, distance)
    return np.where(nan_a ^ nan_b, np.inf, distance)


@dataclass(frozen=True)
class OutputComparison:
    index: int
    xla_shape: tuple
    dace_shape: tuple
    xla_dtype: str
    dace_dtype: str
    max_abs_error: float
    max_rel_error: float
    max_ulp: float | None
    #: max abs error / max |XLA's output|: the meaningful relative error of sums and
    #: products, whose elements near zero have large elementwise relative errors
    normwise_error: float = 0.0

    @property
    def shape_ok(self) -> bool:
        return self.xla_shape == self.dace_shape

    @property
    def dtype_ok(self) -> bool:
        return self.xla_dtype == self.dace_dtype


@dataclass(frozen=True)
class CompareReport:
    outputs: tuple[OutputComparison, ...]
    xla_seconds: float
    dace_seconds: float
    compile_seconds: float = field(default=math.nan)

    @property
    def speedup(self) -> float:
        """XLA's median call time over DaCe's (above 1: DaCe is faster)."""
        return self.xla_seconds / self.dace_seconds if self.dace_seconds else math.nan

    def ok(self, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
        return all(o.shape_ok and o.dtype_ok and (o.max_abs_error <= atol
                                                  or o.max_rel_error <= rtol
                                                  or o.normwise_error <= rtol)
                   for o in self.outputs)

    def __str__(self) -> str:
        header = ("output", "shape", "dtype", "max abs err", "max rel err",
                  "max err / max |XLA|", "max ULP")
        rows = [header]
        for o in self.outputs:
            shape = str(o.xla_shape) if o.shape_ok else f"{o.xla_shape}!={o.dace_shape}"
            dtype = o.xla_dtype if o.dtype_ok else f"{o.xla_dtype}!={o.dace_dtype}"
            ulp = "-" if o.max_ulp is None else f"{o.max_ulp:g}"
            rows.append((str(o.index), shape, dtype, f"{o.max_abs_error:.3g}",
                         f"{o.max_rel_error:.3g}", f"{o.normwise_error:.3g}", ulp))
        widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines.append("")
        lines.append(f"median call: XLA {self.xla_seconds * 1e3:.3f} ms, "
                     f"DaCe {self.dace_seconds * 1e3:.3f} ms "
                     f"(DaCe/XLA speed-up {self.speedup:.2f}x)")
        if not math.isnan(self.compile_seconds):
            lines.append(f"hlo2dace first call (lower, translate, compile): "
                         f"{self.compile_seconds:.2f} s")
        return "\n".join(lines)


def compare_arrays(index: int, expected: Any, actual: Any) -> OutputComparison:
    x, y = np.asarray(expected), np.asarray(actual)
    max_abs = max_rel = normwise = 0.0
    max_ulp: float | None = None
    if x.shape == y.shape and x.size:
        if x.dtype.kind in "fc" or x.dtype.name == "bfloat16":
            xf = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
            yf = y.astype(xf.dtype)
            both_nan = np.isnan(xf) & np.isnan(yf)
            same = (xf == yf) | both_nan
            diff = np.where(same, 0.0, np.abs(xf - yf))
            diff = np.where(np.isnan(diff), np.inf, diff)
            max_abs = float(diff.max())
            scale = np.maximum(np.abs(xf), np.abs(yf))
            rel = np.where(same, 0.0, diff / np.where(scale == 0, 1.0, scale))
            max_rel = float(np.nan_to_num(rel, nan=np.inf).max())
            finite = np.abs(xf[np.isfinite(xf)])
            largest = float(finite.max()) if finite.size else 0.0
            normwise = max_abs / largest if largest else (0.0 if max_abs == 0 else math.inf)
            if x.dtype == y.dtype:
                max_ulp = float(ulp_distance(x, y).max())
        else:
            diff = np.abs(x.astype(object) - y.astype(object)) if x.dtype.kind in "iub" \
                else np.abs(x - y)
            max_abs = float(np.max(diff)) if diff.size else 0.0
            scale = np.maximum(np.abs(x.astype(np.float64)), 1.0)
            max_rel = normwise = float(np.max(np.asarray(diff, dtype=np.float64) / scale))
    return OutputComparison(index, tuple(x.shape), tuple(y.shape), x.dtype.name, y.dtype.name,
                            max_abs, max_rel, max_ulp, normwise)


def keep_freed_memory() -> None:
    """Keep freed buffers in the process (glibc would hand them back to the OS and the next
    call would pay page faults), as a long-running program's allocator would: benchmarks
    call this before timing."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 1 << 30)
    libc.mallopt(m_trim_threshold, (1 << 31) - 1)


def median_seconds(call: Callable[[], Any], budget: float = 0.5, max_runs: int = 200) -> float:
    call()  # warm up
    times = []
    deadline = time.perf_counter() + budget
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < max_runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compare(fun: Callable, *args: Any, timing_budget: float = 0.5, **kwargs: Any) -> CompareReport:
    """Run ``jax.jit(fun)`` and ``hlo2dace.jit(fun)`` on the same inputs and compare every
    output (shape, dtype, max absolute/relative error, max ULP) and the median call time."""
    import jax

    from .api import jit

    reference = jax.jit(fun)
    ours = jit(fun)
    start = time.perf_counter()
    actual = ours(*args, **kwargs)
    compile_seconds = time.perf_counter() - start
    expected = reference(*args, **kwargs)
    expected_leaves = jax.tree_util.tree_leaves(expected)
    actual_leaves = jax.tree_util.tree_leaves(actual)
    outputs = tuple(compare_arrays(i, e, a) for i, (e, a) in
                    enumerate(zip(expected_leaves, actual_leaves)))

    def run_xla():
        jax.block_until_ready(reference(*args, **kwargs))

    def run_dace():
        ours(*args, **kwargs)

    return CompareReport(outputs, median_seconds(run_xla, timing_budget),
                         median_seconds(run_dace, timing_budget), compile_seconds)
