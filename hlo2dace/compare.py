"""``hlo2dace.compare``: XLA and DaCe side by side on the same inputs."""

from __future__ import annotations

import dataclasses
import math
import statistics
import textwrap
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np

from .errors import ArgumentError


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


#: How far an output of a floating-point dtype may be from XLA's and still be called right,
#: as a normwise relative error (max |DaCe - XLA| / max |XLA|) in units of rounding (the
#: dtype's eps), by the width of the dtype's floats:
#:
#: * 32 and 64 bits: 1024 units (float32 1.2e-4, float64 2.3e-13). Sums and products run in
#:   another order than XLA's (OpenBLAS against Eigen, blocked against sequential
#:   reductions); their error grows with their length and with the magnitude of their
#:   terms, which can exceed the output's own: ``tanh(a @ b)`` with 512-long products
#:   differs by 90 units in float32, the demo's 2000-long ones by 30 (measured); libm and
#:   the vector library add a few units.
#: * 16 and 8 bits: 16 units (float16 1.6e-2, bfloat16 1.3e-1). XLA and hlo2dace both
#:   compute their ops in float32 and round each result, so sums are float32-accurate and
#:   the outputs differ where a result rounds the other way, a unit per op on a chain (2
#:   units measured in a cumsum).
#:
#: Integers and booleans must be equal: XLA's integer arithmetic is exact (and wraps).
TOLERANCE_UNITS = {8: 1024, 4: 1024, 2: 16, 1: 16}


def _eps(dtype: np.dtype) -> float | None:
    """The unit of rounding of a floating-point dtype (complex: of its parts), else None."""
    if dtype.kind == "c":
        dtype = np.dtype(f"f{dtype.itemsize // 2}")
    try:
        return float(ml_dtypes.finfo(dtype).eps)
    except ValueError:  # integers, booleans (ml_dtypes' int4 too)
        return None


def tolerance(dtype: Any) -> float:
    """The normwise relative error an output of ``dtype`` may have (``TOLERANCE_UNITS``)."""
    dtype = np.dtype(dtype)
    eps = _eps(dtype)
    if eps is None:
        return 0.0
    width = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    return TOLERANCE_UNITS[width] * eps


@dataclass(frozen=True)
class OutputComparison:
    """One output, XLA's against DaCe's. The errors are None where the shapes differ."""

    index: int
    xla_shape: tuple
    dace_shape: tuple
    xla_dtype: str
    dace_dtype: str
    #: the normwise relative error below which the output is right (``tolerance``)
    tolerance: float
    #: absolute errors up to this are accepted too (for outputs whose XLA value is 0)
    atol: float = 0.0
    max_abs_error: float | None = None
    #: max abs error / max |XLA's finite elements|: the relative error that means something
    #: for sums and products, whose elements near zero have any elementwise relative error
    normwise_error: float | None = None
    #: units in the last place, over the elements not within ``tolerance * max |XLA|`` of
    #: zero (None for integers, or when no element is that large)
    max_ulp: float | None = None
    median_ulp: float | None = None
    #: how many elements are that close to zero, and left out of the ULP figures (None
    #: where no ULP are counted: integers, dtypes or shapes that differ)
    near_zero: int | None = None
    #: how many elements differ by more than the tolerance allows, and the worst of them:
    #: its index, XLA's value, DaCe's
    beyond_tolerance: int = 0
    worst: tuple | None = None
    #: with a reference (``compare(..., reference="extended")``): XLA's and DaCe's
    #: normwise distances from the nearly exact answer, max |. - exact| / max |exact|
    xla_from_exact: float | None = None
    dace_from_exact: float | None = None

    @property
    def shape_ok(self) -> bool:
        return self.xla_shape == self.dace_shape

    @property
    def dtype_ok(self) -> bool:
        return self.xla_dtype == self.dace_dtype

    @property
    def within_tolerance(self) -> bool:
        """DaCe's output within the tolerance of XLA's."""
        return (self.shape_ok and self.dtype_ok and self.max_abs_error is not None
                and (self.normwise_error <= self.tolerance or self.max_abs_error <= self.atol))

    @property
    def as_exact_as_xla(self) -> bool | None:
        """With a reference: DaCe's output at most twice as far from the exact answer as
        XLA's (and a few units of rounding, for an XLA that is exact); None without one."""
        if self.dace_from_exact is None or self.xla_from_exact is None:
            return None
        slack = 4 * (_eps(np.dtype(self.xla_dtype)) or 0.0)
        return self.shape_ok and self.dtype_ok and \
            self.dace_from_exact <= 2 * self.xla_from_exact + slack

    @property
    def ok(self) -> bool:
        """Within the tolerance of XLA's output, or, with a reference, as exact as it."""
        return self.within_tolerance or bool(self.as_exact_as_xla)

    @property
    def verdict(self) -> str:
        if self.within_tolerance:
            return "OK"
        return "OK (as exact as XLA)" if self.ok else "DIFFERS"


@dataclass(frozen=True)
class CompareReport:
    outputs: tuple[OutputComparison, ...]
    xla_seconds: float
    dace_seconds: float
    #: the first call's compilation: JAX's lowering, then the program built (True) or
    #: loaded from the cache (False); None: not known
    compile_seconds: float = field(default=math.nan)
    built: bool | None = None
    #: how the nearly exact answer was computed (``extended.describe``), or None
    reference: str | None = None

    @property
    def speedup(self) -> float:
        """XLA's median call time over DaCe's (above 1: DaCe is faster)."""
        return self.xla_seconds / self.dace_seconds if self.dace_seconds else math.nan

    @property
    def ok(self) -> bool:
        """Whether every output is within its tolerance (``OutputComparison.ok``)."""
        return all(o.ok for o in self.outputs)

    def __str__(self) -> str:
        """One row per output, the columns lined up, then a legend: a reader sees at once
        whether each output is right and why, without reading the numbers first."""
        header = ("output", "shape", "dtype", "max abs err", "normwise err", "tolerance",
                  "ULP max", "ULP median", "near 0", "verdict")
        rows = [header]
        for o in self.outputs:
            shape = str(o.xla_shape) if o.shape_ok else f"{o.xla_shape}!={o.dace_shape}"
            dtype = o.xla_dtype if o.dtype_ok else f"{o.xla_dtype}!={o.dace_dtype}"
            eps = _eps(np.dtype(o.xla_dtype))
            if o.max_abs_error is None:
                errors = ("-", "-")
            else:
                normwise = f"{o.normwise_error:.3g}"
                if eps is not None and o.normwise_error and math.isfinite(o.normwise_error):
                    normwise += f" ({o.normwise_error / eps:.3g} eps)"
                errors = (f"{o.max_abs_error:.3g}", normwise)
            ulps = ("-", "-") if o.max_ulp is None else (f"{o.max_ulp:.3g}",
                                                         f"{o.median_ulp:.3g}")
            near_zero = "-" if o.near_zero is None else str(o.near_zero)
            limit = "exact" if eps is None else f"{o.tolerance:.3g}" if o.tolerance >= 1e-3 \
                else f"{o.tolerance:.2e}"
            rows.append((str(o.index), shape, dtype, *errors, limit, *ulps, near_zero,
                         o.verdict))
        widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                 for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        if self.reference is not None:
            lines += [""] + textwrap.wrap(
                f"distance from the exact answer, max |. - exact| / max |exact|, where exact "
                f"is {self.reference}:", 92)
            rows = [("output", "XLA", "DaCe", "")]
            for o in self.outputs:
                if o.xla_from_exact is None:
                    rows.append((str(o.index), "-", "-", ""))
                    continue
                if o.as_exact_as_xla and not o.within_tolerance:
                    note = ("as exact as XLA: the formula loses these digits on both sides, "
                            "not hlo2dace")
                elif o.as_exact_as_xla:
                    note = "as exact as XLA"
                else:
                    note = "DaCe farther from the exact answer than XLA: hlo2dace's error"
                rows.append((str(o.index), f"{o.xla_from_exact:.3g}",
                             f"{o.dace_from_exact:.3g}", note))
            widths = [max(len(r[c]) for r in rows) for c in range(4)]
            lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                      for row in rows]
        for o in self.outputs:
            if o.beyond_tolerance:
                where, expected, actual = o.worst
                lines.append(f"output {o.index}: {o.beyond_tolerance} of {math.prod(o.xla_shape)} "
                             f"elements differ beyond the tolerance; the largest difference "
                             f"is at {list(where)}: XLA {expected!s}, DaCe {actual!s}")
        lines.append("")
        lines.extend(textwrap.wrap(LEGEND, 92))
        lines.append("")
        lines.append(f"median call: XLA {self.xla_seconds * 1e3:.3f} ms, "
                     f"DaCe {self.dace_seconds * 1e3:.3f} ms "
                     f"(DaCe/XLA speed-up {self.speedup:.2f}x)")
        if not math.isnan(self.compile_seconds):
            how = {True: "lowered, translated and built: a C++ build",
                   False: "lowered and loaded from the cache, not built",
                   None: "lowered, then built or loaded"}[self.built]
            lines.append(f"hlo2dace first call: {self.compile_seconds:.2f} s ({how})")
        return "\n".join(lines)


LEGEND = (
    "normwise err: max abs err / max |XLA| (the largest magnitude among XLA's finite "
    "elements), in units of the dtype's rounding (eps) in brackets. verdict: OK when that is "
    "within the tolerance (by default 1024 eps for 32- and 64-bit floats, 16 eps for narrower "
    "ones; integers and booleans exact); DIFFERS otherwise, or when the shape or dtype differs. "
    "NaN matches NaN and an infinity itself; either against a number is an infinite error. "
    "ULP: units in the last place between XLA's and DaCe's elements, except the \"near 0\" "
    "ones, whose |XLA| is within tolerance x max |XLA| of zero: rounding at the output's "
    "scale can flip their sign, so their relative error means nothing. Elements just above "
    "that can still be many ULP apart when they are sums of larger terms, whose rounding "
    "errors are relative to the terms: the verdict rests on the normwise error.")


def compare_arrays(index: int, expected: Any, actual: Any, rtol: float | None = None,
                   atol: float = 0.0, exact: np.ndarray | None = None) -> OutputComparison:
    """XLA's output ``expected`` against DaCe's ``actual``. ``rtol``: the normwise
    tolerance of a floating-point output (default: ``tolerance`` of its dtype); ``atol``:
    absolute errors up to this are accepted too; ``exact``: the output computed in a
    wider type (``extended.py``), from which both sides' distances are measured."""
    x, y = np.asarray(expected), np.asarray(actual)
    if exact is not None and np.shape(exact) == x.shape:
        from .extended import normwise_distance  # imports DaCe's types: only when asked

        distances = dict(xla_from_exact=normwise_distance(x, exact),
                         dace_from_exact=normwise_distance(y, exact)
                         if y.shape == x.shape else math.inf)
        return dataclasses.replace(compare_arrays(index, x, y, rtol, atol), **distances)
    floating = _eps(x.dtype) is not None
    limit = (rtol if rtol is not None else tolerance(x.dtype)) if floating else 0.0
    known = dict(index=index, xla_shape=tuple(x.shape), dace_shape=tuple(y.shape),
                 xla_dtype=x.dtype.name, dace_dtype=y.dtype.name, tolerance=limit, atol=atol)
    if x.shape != y.shape:
        return OutputComparison(**known)
    if not x.size:
        return OutputComparison(**known, max_abs_error=0.0, normwise_error=0.0)
    if floating:
        wide = np.complex128 if x.dtype.kind == "c" else np.float64
        xf, yf = x.astype(wide), y.astype(wide)
        same = (xf == yf) | (np.isnan(xf) & np.isnan(yf))
        with np.errstate(invalid="ignore"):  # inf - inf where the infinities differ
            diff = np.where(same, 0.0, np.abs(xf - yf))
        diff = np.where(np.isnan(diff), np.inf, diff)
        magnitude = np.abs(xf)
        finite = np.isfinite(magnitude)
    else:  # in Python integers: no wrap-around in the difference
        diff = np.abs(x.astype(object) - y.astype(object)).astype(np.float64)
        magnitude = np.abs(x.astype(np.float64))
        finite = np.ones(x.shape, bool)
    max_abs = float(diff.max())
    scale = float(magnitude[finite].max()) if finite.any() else 0.0
    normwise = max_abs / scale if scale else (0.0 if max_abs == 0 else math.inf)
    worst = np.unravel_index(int(np.argmax(diff)), x.shape)
    beyond = int(np.count_nonzero(diff > max(limit * scale, atol)))
    max_ulp = median_ulp = near_zero = None
    if floating and x.dtype == y.dtype:
        near = finite & (magnitude <= limit * scale)
        near_zero = int(np.count_nonzero(near))
        if near_zero < x.size:
            ulps = ulp_distance(x, y)[~near]
            max_ulp, median_ulp = float(ulps.max()), float(np.median(ulps))
    return OutputComparison(**known, max_abs_error=max_abs, normwise_error=normwise,
                            max_ulp=max_ulp, median_ulp=median_ulp, near_zero=near_zero,
                            beyond_tolerance=beyond,
                            worst=(tuple(int(i) for i in worst), x[worst], y[worst]))


def keep_freed_memory() -> None:
    """Keep freed buffers in the process (glibc would hand them back to the OS and the next
    call would pay page faults), as a long-running program's allocator would: benchmarks
    call this before timing."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 1 << 30)
    libc.mallopt(m_trim_threshold, (1 << 31) - 1)


def median_seconds(call: Callable[..., Any], budget: float = 0.5, max_runs: int = 200,
                   setup: Callable[[], Any] | None = None,
                   agreed: Callable[[bool], bool] = bool) -> float:
    """The median time of ``call()`` over at least 5 runs and up to ``budget`` seconds,
    after one warm-up run. With ``setup``, each run times ``call(setup())`` without the
    setup (fresh copies of arguments that a kernel overwrites). ``agreed(more)``: whether
    to run again, from this process's wish (the ranks of an MPI job decide together, or
    one runs a collective call more often than the others and the job hangs)."""
    def once() -> float:
        arguments = () if setup is None else (setup(),)
        start = time.perf_counter()
        call(*arguments)
        return time.perf_counter() - start

    once()  # warm up
    times = []
    deadline = time.perf_counter() + budget
    while agreed(len(times) < 5 or (time.perf_counter() < deadline
                                    and len(times) < max_runs)):
        times.append(once())
    return statistics.median(times)


def median_pair(first: Callable[[], Any], second: Callable[[], Any], budget: float = 0.5,
                max_runs: int = 200) -> tuple[float, float]:
    """The median times of ``first()`` and ``second()``, called in turn the same number of
    times (at least 5 each, until ``budget`` seconds have passed or ``max_runs`` each) after
    one warm-up call of each: a burst of load from other processes falls on both, and
    neither is measured over more calls than the other."""
    first()
    second()
    times: tuple[list[float], list[float]] = ([], [])
    deadline = time.perf_counter() + budget
    while len(times[0]) < 5 or (time.perf_counter() < deadline and len(times[0]) < max_runs):
        for call, kept in zip((first, second), times):
            start = time.perf_counter()
            call()
            kept.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def checked_placement(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call``, once run with JAX's host-to-device transfers disallowed: it then times a
    call whose arguments are already on the device, as a ``jax.jit`` function's are in a
    program that reuses its arrays (an array copied in each call would raise here)."""
    import jax

    with jax.transfer_guard_host_to_device("disallow"):
        call()
    return call


def place(args: tuple, kwargs: dict, static_argnums: Sequence[int] = (),
          static_argnames: Sequence[str] = ()) -> tuple[list, dict]:
    """The dynamic arguments as ``jax.Array``s on the CPU device (``jax.device_put``, once),
    the static ones as they are: what both sides of a comparison are timed on."""
    import jax

    return ([a if i in static_argnums else jax.device_put(a) for i, a in enumerate(args)],
            {k: v if k in static_argnames else jax.device_put(v) for k, v in kwargs.items()})


def compare(fun: Callable, *args: Any, timing_budget: float = 0.5,
            static_argnums: int | Sequence[int] = (), static_argnames: str | Sequence[str] = (),
            rtol: float | None = None, atol: float = 0.0, optimize: str | None = None,
            reference: str | None = None, **kwargs: Any) -> CompareReport:
    """Run ``jax.jit(fun)`` and ``hlo2dace.jit(fun)`` on the same inputs and compare every
    output (shape, dtype, errors, a verdict against the dtype's tolerance or ``rtol`` and
    ``atol``: ``compare_arrays``) and the median call time. ``args`` and the other
    keyword arguments go to ``fun``, as ``jax.jit`` would take them: ``static_argnums``
    and ``static_argnames`` as ``jax.jit``'s (an ``hlo2dace.jit`` function brings its own,
    and its optimisation level). Both sides are timed as a program calls a ``jax.jit``
    function on arrays it already holds: the arguments are put on the device once, before
    the timed calls, and the two functions are called in turn (``median_pair``).

    ``reference="extended"`` also computes a nearly exact answer, the module's ops
    evaluated in a wider type (``extended.py``: float64 for 32-bit floats, long double for
    float64), and reports how far XLA's and DaCe's outputs are from it: an output that
    differs from XLA's by more than the tolerance while DaCe is as near the exact answer as
    XLA is ``OK (as exact as XLA)``: the formula, not the translation, loses those digits."""
    import jax

    from .api import jit, unwrap_jit
    from .arguments import as_array

    if reference not in (None, "extended"):
        raise ArgumentError(f"reference={reference!r}: the reference is 'extended' (the "
                            "module evaluated in a wider floating-point type) or None")

    fun, static_argnums, static_argnames, optimize = unwrap_jit(
        fun, static_argnums, static_argnames, optimize)
    statics = dict(static_argnums=static_argnums, static_argnames=static_argnames)
    xla = jax.jit(fun, **statics)
    ours = jit(fun, optimize=optimize, **statics)
    start = time.perf_counter()
    compiled = ours.lower(*args, **kwargs).compile()
    compile_seconds = time.perf_counter() - start
    built = compiled.built
    actual = ours(*args, **kwargs)
    expected = xla(*args, **kwargs)
    expected_leaves = jax.tree_util.tree_leaves(expected)
    actual_leaves = jax.tree_util.tree_leaves(actual)
    exact, described = [None] * len(expected_leaves), None
    if reference is not None:
        from .extended import describe, evaluate

        dynamic_args, dynamic_kwargs, _ = ours.split_static(args, kwargs)
        arrays = [as_array(leaf, spec) for leaf, spec in zip(
            jax.tree_util.tree_leaves((dynamic_args, dynamic_kwargs)),
            compiled.program.arguments)]
        exact = evaluate(compiled.lowered.as_text(), arrays)
        described = describe([np.asarray(e).dtype for e in expected_leaves])
    outputs = tuple(compare_arrays(i, e, a, rtol, atol, x) for i, (e, a, x) in
                    enumerate(zip(expected_leaves, actual_leaves, exact)))
    placed_args, placed_kwargs = place(args, kwargs, static_argnums, static_argnames)
    xla_seconds, dace_seconds = median_pair(
        checked_placement(lambda: jax.block_until_ready(xla(*placed_args, **placed_kwargs))),
        lambda: jax.block_until_ready(ours(*placed_args, **placed_kwargs)), timing_budget)
    return CompareReport(outputs, xla_seconds, dace_seconds, compile_seconds, built,
                         described)
