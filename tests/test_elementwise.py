"""Differential tests of every elementwise StableHLO op against XLA (``jax.jit`` on the CPU).

Every op runs on the edge cases of every dtype it accepts (NaN, +-inf, -0.0, denormals,
extremes, INT_MIN / -1, division by zero, shifts out of range, roundings' ties). Each test
compiles ONE program (compiling dominates the run time): a function over a group of dtypes
that returns {dtype: {op: result}}, so that a failure names the dtype and the op, and
every failing op of the program is reported. Ops that JAX does not emit as themselves
(integer ``power``, ``logistic``, ``compare`` with ``TOTALORDER``, complex ``maximum``...)
are tested with StableHLO text that both XLA (``hlo2dace.xla``) and hlo2dace run.

Where XLA and the StableHLO spec disagree, XLA is the reference: XLA runs with denormals
flushed to zero (FTZ/DAZ), converts f64 to f16/bf16 through f32, compares complex numbers
by their real parts in maximum/minimum, squares six times in integer power... (see the
comments in ``hlo2dace/include/h2d/``). Results must match bit for bit except where
``ULP`` below allows a few units in the last place.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import hlo2dace
from hlo2dace.errors import UnsupportedError
from hlo2dace.translate.dtypes import element_of_numpy
from hlo2dace.xla import run_module

from pass_util import code_of
from util import (
    ALL_DTYPES,
    COMPLEX_DTYPES,
    FLOAT_DTYPES,
    INTEGER_DTYPES,
    UNSIGNED_DTYPES,
    assert_arrays_match,
    assert_matches_jax,
    dtype_id,
    pairs,
    special_values,
)

INT4, UINT4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
DTYPES = tuple(np.dtype(d) for d in ALL_DTYPES) + (INT4, UINT4)
RM = lax.RoundingMethod


def category(dtype) -> str:
    """b(ool), i (signed), u(nsigned), n(arrow 4-bit), f(loat), c(omplex)."""
    dtype = np.dtype(dtype)
    if dtype in (INT4, UINT4):
        return "n"
    if dtype == np.dtype(ml_dtypes.bfloat16):
        return "f"
    return {"b": "b", "i": "i", "u": "u", "f": "f", "c": "c"}[dtype.kind]


def by_category(*kinds: str):
    return [pytest.param(d, id=dtype_id(d)) for d in DTYPES if category(d) in "".join(kinds)]


# ------------------------------------------------------------------------ comparing


def ulp_exact(expected: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """ULPs between two float arrays of one dtype, exact for every width (as Python ints:
    ``hlo2dace.compare.ulp_distance`` goes through float64, which rounds 64-bit patterns
    to multiples of 512 and so hides or inflates f64 differences)."""
    width = expected.dtype.itemsize
    signed = np.dtype(f"i{width}")

    def ordered(x):
        bits = np.ascontiguousarray(x).view(signed).astype(object)
        top = 1 << (8 * width - 1)
        return np.where(bits < 0, -(bits + top), bits)

    return np.abs(ordered(expected) - ordered(actual))


def assert_close(expected, actual, ulp: float, where: str) -> None:
    """util's checks (shape, dtype, NaNs where XLA has them, infinities, zero signs), then
    every finite element within ``ulp`` of XLA's, counted exactly."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    assert_arrays_match(expected, actual, ulp=np.inf, where=where)
    if not (expected.dtype.kind in "fc" or expected.dtype == np.dtype(ml_dtypes.bfloat16)):
        return
    parts = [(expected.real, actual.real), (expected.imag, actual.imag)] \
        if expected.dtype.kind == "c" else [(expected, actual)]
    distance = np.zeros(expected.shape, object)
    for e, a in parts:
        finite = np.isfinite(e.astype(np.float64)) & np.isfinite(a.astype(np.float64))
        distance = np.maximum(distance, np.where(finite, ulp_exact(e, a), 0))
    bad = np.flatnonzero(distance > ulp)
    if bad.size:
        e, a = np.ravel(expected), np.ravel(actual)
        raise AssertionError(
            f"{where}: {bad.size} of {e.size} elements more than {ulp} ULP from XLA's (up to "
            f"{np.max(distance)}), first at [{bad[0]}]: got {a[bad[0]]!r}, XLA gives "
            f"{e[bad[0]]!r}")


def assert_matches_xla(fun, *args, ulp: float = 0, tolerances: dict | None = None,
                       reference=None):
    """``fun`` under ``hlo2dace.jit`` and ``reference`` (default ``fun``) under ``jax.jit``:
    every output leaf as ``assert_close`` checks it; ``tolerances`` maps a leaf's path
    (``['exp']``) to its ULP."""
    expected = jax.jit(reference or fun)(*args)
    actual = hlo2dace.jit(fun)(*args)
    assert jax.tree_util.tree_structure(expected) == jax.tree_util.tree_structure(actual)
    failures = []
    for (path, e), a in zip(jax.tree_util.tree_leaves_with_path(expected),
                            jax.tree_util.tree_leaves(actual)):
        where = jax.tree_util.keystr(path)
        assert isinstance(a, jax.Array), f"{where}: result is {type(a)}, not a jax.Array"
        failures += _failure(e, a, (tolerances or {}).get(where, ulp), where)
    if failures:
        raise AssertionError("\n".join(failures))


def _failure(expected, actual, ulp, where) -> list[str]:
    try:
        assert_close(expected, actual, ulp, where)
    except AssertionError as error:
        return [str(error)]
    return []


# ---------------------------------------------------------------------------- inputs


def values(dtype) -> np.ndarray:
    """The edge cases of ``dtype``: NaN, +-inf, -0.0, denormals, extremes, INT_MIN, -1..."""
    dtype = np.dtype(dtype)
    if dtype in (INT4, UINT4):
        return np.arange(-8, 8).astype(dtype) if dtype == INT4 else \
            np.arange(16).astype(dtype)
    if dtype.kind == "c":  # built part by part: 1j * inf would put a NaN in the real part
        real = special_values(np.float32 if dtype == np.complex64 else np.float64)
        out = np.empty(real.size, dtype)
        out.real, out.imag = real, np.roll(real, 3)
        return out
    return special_values(dtype)


def unary_values(dtype) -> np.ndarray:
    """``values`` plus what the transcendental functions and roundings find hard: large
    arguments, halves, values near 1 and 0, a mid denormal, a spread over many scales."""
    dtype = np.dtype(dtype)
    base = values(dtype)
    if category(dtype) not in "fc":
        return base
    real = np.dtype(np.float32 if dtype == np.complex64 else
                    np.float64 if dtype == np.complex128 else dtype)
    finfo = ml_dtypes.finfo(real)
    extra = [20.0, -20.0, 50.0, -50.0, 100.0, -100.0, 700.0, -750.0, 89.0, -104.0,
             1e-8, -1e-8, 1e-30, float(finfo.smallest_subnormal) * 3,
             -float(finfo.smallest_subnormal), -float(finfo.tiny), float(finfo.max) / 2,
             np.pi / 2, np.pi, -np.pi, 1e10, -1e10, 0.999, 1.001, -0.999, 4.5, -3.5,
             0.49999997, 2.0**23 + 1, 2.0**52 + 1, 2.0**60, -2.0**60, 1e300, 65504.0, 65520.0,
             -1.0 + 1e-7, 1e-3, -1e-3, 65519.0,
             # ties and near-ties of f16 and bf16 rounding (XLA converts f64 via f32)
             1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30),
             1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40)]
    rng = np.random.default_rng(1)
    spread = rng.choice([-1.0, 1.0], 64) * 10.0 ** rng.uniform(-6, 6, 64)
    with np.errstate(over="ignore"):
        reals = np.concatenate([base.real.astype(np.float64) if dtype.kind == "c" else
                                base.astype(np.float64), extra, spread]).astype(real)
    if dtype.kind == "c":  # every pair of the real part's edge cases, and the rest paired
        edge = special_values(real, random=0)
        re, im = np.concatenate([np.repeat(edge, edge.size), reals]), \
            np.concatenate([np.tile(edge, edge.size), np.roll(reals, 7)])
        out = np.empty(re.size, dtype)
        out.real, out.imag = re, im
        return out
    return reals


def shift_amounts(dtype) -> np.ndarray:
    """Shift amounts: negative, in range, the bit width and beyond."""
    dtype = np.dtype(dtype)
    if dtype in (INT4, UINT4):
        return values(dtype)
    bits = dtype.itemsize * 8
    amounts = [0, 1, 2, 3, bits - 1, bits, bits + 1, 2 * bits, 64, 65, 127, 128, 255, 256,
               -1, -2, -bits, -bits - 1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]
    return np.array([a % (1 << 64) for a in amounts], np.uint64).astype(dtype)


# ------------------------------------------------------------------------ op tables


def atan2_of_flushed(y, x):
    """What hlo2dace's real atan2 is tested against: XLA's atan2 of the arguments with
    denormals read as zero, as DAZ reads every other op's (a 16-bit float is never one in
    f32, where it is computed). XLA's own result there is what libm's branches give under
    DAZ: pi/2 for f64 atan2(d, d), NaN for f32's, -pi for f64 atan2(+d, -1)
    (docs/vector-math.md)."""
    if jnp.iscomplexobj(y):
        return lax.atan2(y, x)

    def flushed(v):
        tiny = np.finfo(np.float64 if v.dtype == np.float64 else np.float32).tiny
        return jnp.where(jnp.abs(v) < tiny.astype(v.dtype), jnp.copysign(jnp.zeros_like(v), v), v)

    return lax.atan2(flushed(y), flushed(x))


#: what XLA runs for an op whose reference is not the op itself
XLA_REFERENCE = {"atan2": atan2_of_flushed}

# name -> (function, categories it is tested on). Functions reach each op with lax.*.

BINARY = {
    "add": (lax.add, "iunfc"),
    "subtract": (lax.sub, "iunfc"),
    "multiply": (lax.mul, "iunfc"),
    "divide": (lax.div, "iunfc"),
    "remainder": (lax.rem, "iunf"),
    "power": (lax.pow, "f"),  # complex: test_complex_power
    "maximum": (lax.max, "biunf"),
    "minimum": (lax.min, "biunf"),
    "atan2": (lax.atan2, "fc"),
    "and": (lax.bitwise_and, "biun"),
    "or": (lax.bitwise_or, "biun"),
    "xor": (lax.bitwise_xor, "biun"),
    "compare_EQ": (lax.eq, "biunfc"),
    "compare_NE": (lax.ne, "biunfc"),
    "compare_LT": (lax.lt, "biunf"),
    "compare_LE": (lax.le, "biunf"),
    "compare_GT": (lax.gt, "biunf"),
    "compare_GE": (lax.ge, "biunf"),
    "select": (lambda x, y: lax.select(lax.ne(x, y), x, y), "biunfc"),
    "clamp": (lambda x, y: lax.clamp(x, y, jnp.roll(x, 1)), "biunfc"),
    "select_compare_chain": (lambda x, y: lax.select(lax.eq(x, y), lax.ne(x, x), lax.eq(y, y)),
                             "biunfc"),
}

SHIFTS = {
    "shift_left": lax.shift_left,
    "shift_right_arithmetic": lax.shift_right_arithmetic,
    "shift_right_logical": lax.shift_right_logical,
}

UNARY = {
    "abs": (lax.abs, "ifc"),
    "negate": (lax.neg, "iunfc"),
    "sign": (lax.sign, "iunfc"),
    "not": (lax.bitwise_not, "biun"),
    "popcnt": (lax.population_count, "iun"),
    "count_leading_zeros": (lax.clz, "iun"),
    "sqrt": (lax.sqrt, "fc"),
    "rsqrt": (lax.rsqrt, "fc"),
    "cbrt": (lax.cbrt, "f"),
    "exponential": (lax.exp, "fc"),
    "exponential_minus_one": (lax.expm1, "fc"),
    "log": (lax.log, "fc"),
    "log_plus_one": (lax.log1p, "fc"),
    "logistic": (lax.logistic, "fc"),  # JAX lowers this to 1 / (1 + exp(-x))
    "sine": (lax.sin, "f"),  # complex sin/cos: JAX expands them into real ops
    "cosine": (lax.cos, "f"),
    "tan": (lax.tan, "fc"),
    "tanh": (lax.tanh, "fc"),
    "floor": (lax.floor, "f"),
    "ceil": (lax.ceil, "f"),
    "round_nearest_afz": (lambda x: lax.round(x, RM.AWAY_FROM_ZERO), "f"),
    "round_nearest_even": (lambda x: lax.round(x, RM.TO_NEAREST_EVEN), "f"),
    "is_finite": (lax.is_finite, "f"),
    "real": (lax.real, "c"),
    "imag": (lax.imag, "c"),
    "reduce_precision_e5m10": (lambda x: lax.reduce_precision(x, 5, 10), "f"),
    "reduce_precision_e8m7": (lambda x: lax.reduce_precision(x, 8, 7), "f"),
    "reduce_precision_e4m3": (lambda x: lax.reduce_precision(x, 4, 3), "f"),
    "reduce_precision_e5m2": (lambda x: lax.reduce_precision(x, 5, 2), "f"),
    "reduce_precision_e8m23": (lambda x: lax.reduce_precision(x, 8, 23), "f"),
    "reduce_precision_e11m52": (lambda x: lax.reduce_precision(x, 11, 52), "f"),
    "reduce_precision_e2m1": (lambda x: lax.reduce_precision(x, 2, 1), "f"),
    "reduce_precision_e8m0": (lambda x: lax.reduce_precision(x, 8, 0), "f"),
}

#: ULP tolerances by (op, dtype); everything else must match XLA bit for bit (NaNs as
#: NaNs, zeros with their signs). XLA computes exp, expm1, log, log1p, tanh and rsqrt with
#: its own approximations (f32, and log1p in f64 too), 1-3 ULP from the C library's
#: that hlo2dace calls; f16 expm1 is XLA's own too; complex functions built on them (and
#: logistic, built on exp) inherit that. f64 exp, expm1 and tanh are XLA's own
#: approximations in hlo2dace too (h2d::xla_exp, h2d::xla_expm1, h2d::xla_tanh), and f64 log
#: glibc's, which XLA calls (h2d::glibc_log): 0 ULP.
ULP = {
    ("exponential", "float32"): 1,
    ("exponential_minus_one", "float32"): 3,
    ("log", "float32"): 1,
    ("log_plus_one", "float32"): 1,
    ("logistic", "float32"): 2,
    ("rsqrt", "float32"): 2,
    ("tanh", "float32"): 3,
    ("log_plus_one", "float64"): 1,
    # XLA's f64 rsqrt depends on the CPU: with AVX-512 it is vrsqrt14pd and two Newton
    # steps (correctly rounded more often), elsewhere 1 / sqrt(x) as here (and as newer
    # XLA computes it everywhere): the two round differently by at most 1 ULP
    ("rsqrt", "float64"): 1,
    ("exponential_minus_one", "float16"): 1,
    ("exponential", "complex64"): 2,
    ("exponential_minus_one", "complex64"): 2,
    ("log", "complex64"): 1,
    ("log_plus_one", "complex64"): 1,
    ("logistic", "complex64"): 4,
    ("rsqrt", "complex64"): 2,
    ("sqrt", "complex64"): 1,
    ("tan", "complex64"): 2,
    ("tanh", "complex64"): 3,
    ("atan2", "complex64"): 1,
    ("exponential", "complex128"): 2,
    ("exponential_minus_one", "complex128"): 16,  # e^x = expm1(x) + 1 cancels: x 12
    ("log", "complex128"): 1,
    ("log_plus_one", "complex128"): 1,
    ("logistic", "complex128"): 3,
    # XLA's f64 rsqrt inside (see above): 0 ULP on AVX2 CPUs, up to 3 on AVX-512 ones
    ("rsqrt", "complex128"): 3,
    # 3 ULP from XLA's on AVX2 CPUs, 4 on AVX-512 ones: XLA's own f64 approximations in
    # its expansion of tan vectorise at the machine's width and round differently there
    ("tan", "complex128"): 4,
    ("tanh", "complex128"): 3,
    ("sine", "complex128"): 1,
    ("cosine", "complex128"): 1,
    ("power", "complex128"): 2,
    ("power", "complex64"): 1024,
}


def _ops_for(table, dtype):
    kind = category(dtype)
    ops = {name: fn for name, (fn, kinds) in table.items() if kind in kinds}
    if table is BINARY and np.dtype(dtype) in (np.float32, np.float64):
        ops["complex"] = lax.complex
    return ops


#: The dtypes each test compiles together (one program per group: compiling dominates the
#: run time). int4 has a group of its own.
GROUPS = {
    "bool_signed": (np.bool_, np.int8, np.int16, np.int32, np.int64),
    "unsigned": UNSIGNED_DTYPES,
    "int4": (INT4,),
    "uint4": (UINT4,),
    "f16_bf16": (np.float16, ml_dtypes.bfloat16),
    "f32_f64": (np.float32, np.float64),
    "complex": COMPLEX_DTYPES,
}
by_group = pytest.mark.parametrize("group", [pytest.param(tuple(np.dtype(d) for d in g), id=n)
                                             for n, g in GROUPS.items()])


#: ops whose loops call libmvec where they vectorise, by their VECTOR_ULP names
VECTORISED = {"exponential": "exp", "exponential_minus_one": "expm1", "log": "log",
              "log_plus_one": "log1p", "logistic": "exp", "sine": "sin", "cosine": "cos",
              "tan": "tan", "tanh": "tanh", "cbrt": "cbrt", "power": "pow", "atan2": "atan2"}


def _tolerance(op: str, dtype: str) -> int:
    """The op's ULP tolerance: where its loop vectorises (it does alone in a map, as at
    optimisation level none), libmvec's results are within VECTOR_ULP of XLA's; 16-bit
    floats, computed in f32, may round the other way once."""
    vector = VECTOR_ULP.get(dtype, {}).get(VECTORISED.get(op), 0) if op in VECTORISED else 0
    if op in VECTORISED and dtype in ("float16", "bfloat16"):
        vector = 1
    return max(ULP.get((op, dtype), 0), vector)


def _per_dtype(table, group):
    """{dtype name: {op name: function}} and the ULP tolerances of the ops' leaves."""
    ops = {dtype_id(d): _ops_for(table, d) for d in group}
    tolerances = {f"['{d}']['{op}']": _tolerance(op, d) for d, names in ops.items()
                  for op in names if _tolerance(op, d)}
    return ops, tolerances


# ---------------------------------------------------------------------------- tests


@by_group
def test_binary(group):
    """Every binary op (and select, clamp) on every pair of edge cases; for integers also
    the shifts, by amounts that are negative, in range, the bit width and beyond."""
    ops, tolerances = _per_dtype(BINARY, group)
    inputs = {}
    for dtype in group:
        args = pairs(values(dtype), values(dtype))
        if category(dtype) in "iun":
            args += pairs(values(dtype), shift_amounts(dtype))
        inputs[dtype_id(dtype)] = args

    def fun(inputs, xla=False):
        out = {}
        for name, (x, y, *shifted) in inputs.items():
            out[name] = {op: (XLA_REFERENCE.get(op, f) if xla else f)(x, y)
                         for op, f in ops[name].items()}
            if shifted:
                out[name].update({op: f(*shifted) for op, f in SHIFTS.items()})
        return out

    assert_matches_xla(fun, inputs, tolerances=tolerances,
                       reference=lambda inputs: fun(inputs, xla=True))


@by_group
def test_unary(group):
    """Every unary op on the edge cases and on what transcendental functions and roundings
    find hard; complex numbers: every pair of edge cases as (real, imag)."""
    ops, tolerances = _per_dtype(UNARY, group)

    def fun(inputs):
        return {name: {op: f(x) for op, f in ops[name].items()} for name, x in inputs.items()}

    assert_matches_xla(fun, {dtype_id(d): unary_values(d) for d in group},
                       tolerances=tolerances)


@pytest.mark.filterwarnings("ignore:Casting complex values to real")
@by_group
def test_convert(group):
    """Every source dtype of the group to every dtype."""
    inputs = {}
    for source in group:
        x = unary_values(source)
        if category(source) in "iu":
            big = [2**24 + 1, 2**53 + 1, 2**31 - 1, 2**63 - 1, 2**11 + 1, 2**8 + 1, 255, 256,
                   65535, 65536, 2**31, 2**32 - 1, 2**64 - 1, 2**63]
            x = np.concatenate([x, np.array(big, np.uint64).astype(source)])
        inputs[dtype_id(source)] = x

    def fun(inputs):
        return {name: {dtype_id(t): lax.convert_element_type(x, t) for t in DTYPES}
                for name, x in inputs.items()}

    assert_matches_xla(fun, inputs)


BITCAST_GROUPS = [
    (np.int8, np.uint8),
    (np.int16, np.uint16, np.float16, ml_dtypes.bfloat16),
    (np.int32, np.uint32, np.float32),
    (np.int64, np.uint64, np.float64),
]


def _bits(array):
    array = np.asarray(array)
    return array.view(np.dtype(f"u{array.dtype.itemsize}"))


def _bit_patterns(bits: int) -> np.ndarray:
    patterns = [0, 1, 2, (1 << (bits - 1)), (1 << bits) - 1, (1 << (bits - 1)) - 1]
    if bits == 16:
        patterns += [0x7C00, 0xFC00, 0x7C01, 0x7E00, 0x7D55, 0xFE01, 0x7F80, 0x7F81, 0xFFC1,
                     0x7FC0, 0x0001, 0x03FF, 0x8001, 0x7BFF, 0x0080, 0x007F]
    if bits == 32:
        patterns += [0x7F800001, 0x7FC00000, 0xFF800001, 0x7FA00001, 0x00000001, 0x807FFFFF]
    if bits == 64:
        patterns += [0x7FF0000000000001, 0x7FF8000000000000, 0xFFF0000000000001,
                     0x7FF4000000000001, 0x0000000000000001]
    rng = np.random.default_rng(2)
    raw = np.concatenate([np.array(patterns, np.uint64),
                          rng.integers(0, 1 << min(bits, 63), 32, dtype=np.uint64)])
    return raw.astype(np.dtype(f"u{bits // 8}"))


def test_bitcast_convert():
    """Every pair of one width, and the round trip through the float types: NaN payloads,
    signalling NaNs and denormals must survive, compared bit for bit."""
    def fun(inputs):
        out = {}
        for group, x in zip(BITCAST_GROUPS, inputs):
            for a in group:
                xa = lax.bitcast_convert_type(x, a)
                out[dtype_id(a)] = xa
                for b in group:
                    out[f"{dtype_id(a)}->{dtype_id(b)}"] = lax.bitcast_convert_type(xa, b)
        return out

    inputs = [_bit_patterns(np.dtype(g[0]).itemsize * 8) for g in BITCAST_GROUPS]
    expected = jax.jit(fun)(inputs)
    actual = hlo2dace.jit(fun)(inputs)
    wrong = [key for key, e in expected.items()
             if not np.array_equal(_bits(actual[key]), _bits(e))]
    assert not wrong, f"bit patterns differ: {wrong}"


def test_f16_nans_keep_their_bits_until_converted():
    """f16's signalling NaNs and payloads pass negation, abs, max and select bit for bit, as
    XLA's f16 ops pass them; converting to or from f32 quietens them, as XLA's conversions
    do."""
    halves = np.array([0x7C01, 0xFD55, 0x7E01, 0x7C00, 0x0001, 0x8001, 0x3C00, 0xFE00],
                      np.uint16).view(np.float16)
    floats = np.array([0x7F800001, 0x7FA00000, 0xFFC00001, 0x7F802000, 0x33800000,
                       0x00000001, 0x3F800000, 0x7FC00000], np.uint32).view(np.float32)
    pick = np.array([True, False, True, True, False, True, False, True])

    def fun(h, f, p):
        return {"neg": -h, "abs": jnp.abs(h), "max": jnp.maximum(h, h),
                "select": jnp.where(p, h, -h), "to_f32": h.astype(jnp.float32),
                "from_f32": f.astype(jnp.float16), "sum": h + h}

    expected = jax.jit(fun)(halves, floats, pick)
    actual = hlo2dace.jit(fun)(halves, floats, pick)
    wrong = {key: (_bits(actual[key]).tolist(), _bits(e).tolist())
             for key, e in expected.items() if not np.array_equal(_bits(actual[key]), _bits(e))}
    assert not wrong, wrong


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=dtype_id)
def test_16_bit_results_of_exact_ops_are_not_rounded_again(dtype):
    """A maximum, select, clamp, negation, abs, sign or floor of 16-bit floats is a value
    the type holds, so it is not rounded (``ElementType.fit``'s ``exact``): every one of
    the 2^16 bit patterns against another, bit for bit as XLA but for NaNs' payloads (XLA's
    maximum of a number and a NaN is its canonical NaN, of two equal NaNs that NaN)."""
    x = _bit_patterns(16).view(dtype)
    y = np.random.default_rng(0).permutation(x)

    def fun(x, y):
        return {"max": jnp.maximum(x, y), "min": jnp.minimum(x, y),
                "select": jnp.where(x > y, x, y), "clamp": lax.clamp(y, x, x + y),
                "neg_abs": -jnp.abs(x), "sign": jnp.sign(x), "floor": jnp.floor(x),
                "round": jnp.round(y)}

    expected = jax.jit(fun)(x, y)
    actual = hlo2dace.jit(fun)(x, y)
    wrong = [key for key, e in expected.items()
             if not np.array_equal(np.isnan(actual[key]), np.isnan(e))
             or not np.array_equal(_bits(actual[key])[~np.isnan(e)], _bits(e)[~np.isnan(e)])]
    assert not wrong, f"bit patterns differ: {wrong}"
    rounding = "round_f16" if dtype is np.float16 else "round_bf16"
    code = code_of(lambda x, y: jnp.maximum(jnp.floor(-x), jnp.abs(y)), x, y)
    assert rounding not in code, code


def test_bitcast_convert_changing_width():
    """Wide to narrow adds a last dimension of the bytes in memory order, narrow to wide
    removes it; float types (NaN payloads included) and integers."""
    rng = np.random.default_rng(3)
    x32 = special_values(np.float32, rng)[:12].reshape(3, 4)
    x64 = special_values(np.float64, rng)[:6]
    h16 = special_values(np.float16, rng)[:8].reshape(2, 4)

    def fun(x32, x64, h16):
        return {"f32->u8": lax.bitcast_convert_type(x32, jnp.uint8),
                "f32->bf16": lax.bitcast_convert_type(x32, jnp.bfloat16),
                "f64->i16": lax.bitcast_convert_type(x64, jnp.int16),
                "f64->f32": lax.bitcast_convert_type(x64, jnp.float32),
                "u8->f32": lax.bitcast_convert_type(
                    lax.bitcast_convert_type(x32, jnp.uint8), jnp.float32),
                "f16->u8": lax.bitcast_convert_type(h16, jnp.uint8),
                "0d->u16": lax.bitcast_convert_type(x32[0, 0], jnp.uint16),
                "pairs->f64": lax.bitcast_convert_type(x32.reshape(6, 2), jnp.float64)}

    assert_matches_xla(fun, x32, x64, h16)


@pytest.mark.filterwarnings("ignore:Casting complex values to real")
def test_empty_and_zero_dimensional():
    """Shape (0,) and () operands of every dtype, and 0-d predicates of select."""
    inputs = {}
    for dtype in DTYPES:
        v = values(dtype)
        inputs[dtype_id(dtype)] = (v[:0], v[:0], v[3], v[5], np.array(v[:6]))

    def fun(inputs):
        out = {}
        for name, (e1, e2, s1, s2, vec) in inputs.items():
            kind = category(e1.dtype)
            for shape, a, b in (("empty", e1, e2), ("scalar", s1, s2)):
                key = f"{name}/{shape}"
                if kind in "iunfc":
                    out[f"{key}/add"] = lax.add(a, b)
                    out[f"{key}/divide"] = lax.div(a, b)
                    out[f"{key}/negate"] = lax.neg(a)
                else:
                    out[f"{key}/and"] = lax.bitwise_and(a, b)
                out[f"{key}/compare_EQ"] = lax.eq(a, b)
                out[f"{key}/select"] = lax.select(lax.ne(a, b), a, b)
                out[f"{key}/convert_f32"] = lax.convert_element_type(a, jnp.float32)
                if kind == "f":
                    out[f"{key}/sqrt"] = lax.sqrt(a)
            # a 0-d predicate selects between whole arrays
            out[f"{name}/select_scalar_predicate"] = lax.select(lax.ne(s1, s2), vec,
                                                                jnp.flip(vec))
        return out

    assert_matches_xla(fun, inputs)


# ------------------------------------------------------------- StableHLO text tests


def _tensor(shape, dtype) -> str:
    dims = "".join(f"{n}x" for n in shape)
    return f"tensor<{dims}{element_of_numpy(dtype)}>"


class Module:
    """A StableHLO module under construction, ops in generic form; ``check`` runs it with
    XLA and with hlo2dace and compares every result (tests batch many ops into one)."""

    def __init__(self):
        self.arguments: list[np.ndarray] = []
        self.lines: list[str] = []
        self.types: dict[str, tuple] = {}
        self.results: dict[str, float] = {}  # value -> ULP

    def arg(self, array) -> str:
        name = f"%arg{len(self.arguments)}"
        self.arguments.append(np.asarray(array))
        self.types[name] = (np.shape(array), np.asarray(array).dtype)
        return name

    def op(self, result: str, op: str, operands, dtype=None, attributes: str = "",
           ulp: float = 0) -> str:
        shape = max((self.types[o][0] for o in operands), key=len)
        dtype = np.dtype(dtype) if dtype is not None else self.types[operands[-1]][1]
        ins = ", ".join(_tensor(*self.types[o]) for o in operands)
        attrs = f" {{{attributes}}}" if attributes else ""
        self.lines.append(f'%{result} = "stablehlo.{op}"({", ".join(operands)}){attrs} : '
                          f"({ins}) -> {_tensor(shape, dtype)}")
        self.types[f"%{result}"] = (shape, dtype)
        self.results[f"%{result}"] = ulp
        return f"%{result}"

    def text(self) -> str:
        signature = ", ".join(f"{n}: {_tensor(*self.types[n])}"
                              for n in self.types if n.startswith("%arg"))
        types = ", ".join(_tensor(*self.types[n]) for n in self.results)
        return "\n".join([f"func.func @main({signature}) -> ({types}) {{",
                          *[f"  {line}" for line in self.lines],
                          f"  return {', '.join(self.results)} : {types}", "}"])

    def check(self) -> None:
        text = self.text()
        expected = run_module(text, self.arguments)
        actual = hlo2dace.compile_text(text)(*self.arguments)
        if len(self.results) == 1:
            actual = (actual,)
        failures = []
        for (name, ulp), e, a in zip(self.results.items(), expected, actual):
            failures += _failure(e, a, ulp, name)
        if failures:
            raise AssertionError("\n".join(failures))


def test_integer_power():
    """JAX lowers integer powers to multiplications. XLA's ``power`` on integers squares
    six times (only the exponent's low six bits count), wrapping; negative exponents (and
    unsigned ones with the top bit set) give 0 except for bases 1 and -1."""
    m = Module()
    for dtype in INTEGER_DTYPES:
        x, y = pairs(values(dtype), np.concatenate([values(dtype), np.arange(-3, 70)
                                                    .astype(np.int64).astype(dtype)]))
        m.op(f"power_{dtype_id(dtype)}", "power", [m.arg(x), m.arg(y)])
    m.check()


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_remainder_by_constant_powers_of_two(dtype):
    """``h2d::rem`` computes a signed remainder by a constant 2^k with masks (GCC 12 kept a
    parity test's loop scalar): ``fmod``, jnp's floor ``%`` and ``//`` (built on ``rem``)
    and a parity test, by 1, 2, 8 and the largest power, on the edge values, against XLA."""
    x = np.concatenate([values(dtype), np.arange(-300, 300).astype(dtype)])
    powers = [dtype(1 << k) for k in (0, 1, 3, np.iinfo(dtype).bits - 2)]
    assert_matches_xla(lambda x: {f"{name}_{d}": f(x, d) for d in powers for name, f in (
        ("fmod", jnp.fmod), ("mod", jnp.mod), ("floordiv", jnp.floor_divide),
        ("odd", lambda x, d: jnp.where(x % d != 0, x, -x)))}, x)


def test_compare_totalorder():
    """TOTALORDER: -NaN < -inf < ... < -0.0 < +0.0 < ... < inf < NaN, by bits."""
    m = Module()
    for dtype in FLOAT_DTYPES:
        v = values(dtype)
        x, y = (m.arg(a) for a in pairs(v, v))
        for d in ("EQ", "NE", "LT", "LE", "GT", "GE"):
            m.op(f"{d}_{dtype_id(dtype)}", "compare", [x, y], np.bool_,
                 f"comparison_direction = #stablehlo<comparison_direction {d}>, "
                 "compare_type = #stablehlo<comparison_type TOTALORDER>")
    m.check()


def test_logistic_op():
    """``stablehlo.logistic`` itself (JAX emits 1 / (1 + exp(-x)) instead); XLA expands it
    into that, each step rounded to f16 for f16 (bf16: in f32, rounded once)."""
    m = Module()
    for dtype in FLOAT_DTYPES + COMPLEX_DTYPES:
        m.op(f"logistic_{dtype_id(dtype)}", "logistic", [m.arg(unary_values(dtype))],
             ulp=_tolerance("logistic", dtype_id(dtype)))
    m.check()


@pytest.mark.parametrize("dtype", by_category("c"))
def test_complex_power(dtype):
    """Complex power. In complex64, XLA's f32 exp/log are a few ULP off and pow multiplies
    that by |y log x|: exponents up to 20 only (beyond, the sign of cos(q) for a huge q is
    noise), and 1024 ULP."""
    v = values(dtype)
    x, y = pairs(v, v)
    if dtype == np.complex64:
        keep = ~((np.abs(y.real) > 20) & np.isfinite(y.real)) & \
            ~((np.abs(y.imag) > 20) & np.isfinite(y.imag))
        x, y = x[keep], y[keep]
    assert_matches_xla(lax.pow, x, y, ulp=ULP[("power", dtype_id(dtype))])


def test_complex_text_ops():
    """Complex ops JAX expands into real arithmetic: maximum and minimum (XLA: the left
    operand if its real part is >= (<=) the right one's, no NaN propagation), sine, cosine."""
    m = Module()
    for dtype in COMPLEX_DTYPES:
        v = values(dtype)
        x, y = (m.arg(a) for a in pairs(v, v))
        name = dtype_id(dtype)
        m.op(f"maximum_{name}", "maximum", [x, y])
        m.op(f"minimum_{name}", "minimum", [x, y])
        m.op(f"sine_{name}", "sine", [x], ulp=ULP.get(("sine", name), 0))
        m.op(f"cosine_{name}", "cosine", [x], ulp=ULP.get(("cosine", name), 0))
    m.check()


def test_text_only_ops():
    """add/multiply of booleans (or/and), real/imag of real floats, and convert bf16 -> i1
    (JAX converts with x != 0 instead): ops that JAX does not emit."""
    m = Module()
    x, y = (m.arg(a) for a in pairs(np.array([False, True]), np.array([False, True])))
    m.op("add", "add", [x, y])
    m.op("multiply", "multiply", [x, y])
    f = m.arg(unary_values(np.float32))
    m.op("real", "real", [f])
    m.op("imag", "imag", [f])
    m.op("bf16_to_bool", "convert", [m.arg(unary_values(ml_dtypes.bfloat16))], np.bool_)
    m.check()


def test_clamp_zero_dimensional_bounds():
    """``clamp`` with 0-d min and max broadcast to the operand (JAX broadcasts them itself)."""
    m = Module()
    f = m.arg(unary_values(np.float32))
    m.op("f", "clamp", [m.arg(np.float32(-1.5)), f, m.arg(np.float32(2.5))])
    i = m.arg(values(np.int8))
    m.op("i", "clamp", [m.arg(np.int8(-3)), i, m.arg(np.int8(100))])
    m.check()


def test_complex_remainder_is_unsupported():
    """The spec allows it; XLA crashes on it and JAX never emits it: a clear error rather
    than C++ that does not compile."""
    m = Module()
    x = m.arg(values(np.complex64))
    m.op("r", "remainder", [x, x])
    with pytest.raises(UnsupportedError, match="remainder of complex"):
        hlo2dace.compile_text(m.text())


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=dtype_id)
def test_complex_cbrt_is_the_principal_root(dtype):
    """XLA rejects complex cbrt (JAX never emits it); the spec's principal cube root."""
    z = np.array([3 + 4j, -8 + 0j, 1j, -1 - 1j, 0.5 - 2j], dtype)
    m = Module()
    m.op("r", "cbrt", [m.arg(z)])
    result = hlo2dace.compile_text(m.text())(z)
    expected = np.exp(np.log(z.astype(np.complex128)) / 3).astype(dtype)
    np.testing.assert_allclose(result, expected, rtol=4 * np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=dtype_id)
def test_chlo_special_functions(dtype):
    """CHLO ops JAX emits (erf, erf_inv, lgamma, digamma, polygamma, zeta, igamma, the Bessel
    functions, the inverse hyperbolics, next_after...) are legalised by jaxlib's own pass
    into StableHLO (loops included, for igamma) and run through hlo2dace. Their polynomial
    and series evaluations round each op, where XLA contracts them into FMAs: a relative
    tolerance of a few ULP per term."""
    import jax.scipy.special as sp

    x = np.concatenate([np.linspace(0.05, 0.95, 19), [0.0, -0.0, 1.0, 2.5, 7.0, 30.0, np.nan,
                                                      np.inf]]).astype(dtype)

    def f(x):
        unit = jnp.clip(x, -0.99, 0.99)
        return {"erf": lax.erf(x), "erfc": lax.erfc(x), "erf_inv": lax.erf_inv(unit),
                "lgamma": lax.lgamma(x), "digamma": lax.digamma(x),
                "polygamma": sp.polygamma(1, x), "zeta": sp.zeta(x + 1.5, x + 1),
                "igamma": lax.igamma(x + 0.5, x), "igammac": lax.igammac(x + 0.5, x),
                "i0e": lax.bessel_i0e(x), "i1e": lax.bessel_i1e(x), "asinh": jnp.arcsinh(x),
                "acosh": jnp.arccosh(x + 1), "atanh": jnp.arctanh(unit), "sinh": jnp.sinh(x),
                "cosh": jnp.cosh(x), "square": jnp.square(x),
                "next_after": jnp.nextafter(x, jnp.full_like(x, 1.0))}

    rtol = 1e-5 if dtype == np.float32 else 1e-13
    # XLA simplifies acosh(-0.0 + 1)'s inner (y - 1) back to -0.0 and returns -0.0
    assert_matches_jax(f, x, rtol=rtol, atol=rtol, signed_zeros=False)


@pytest.mark.parametrize("shape", [(400,), (20, 20), (7, 3, 5)], ids=str)
def test_f64_exp_family_is_xla_bit_for_bit(shape):
    """chlo.sinh and cosh (legalised to exp, expm1 and arithmetic: for |x| < 1,
    (expm1(x) + expm1(x) / (expm1(x) + 1)) / 2; else exp(x - ln 2) - exp(-x - ln 2)),
    exp, expm1 and logistic in f64 are XLA's bit for bit (0 ULP): h2d/transcendental.h computes f64
    exp and expm1 with XLA's own inlined approximations, FMAs where LLVM contracts, where
    libm's exp was 1-2 ULP from XLA's and so sinh up to 4."""
    rng = np.random.default_rng(int(np.prod(shape)))
    x = rng.uniform(-5, 5, shape)
    edges = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, np.nextafter(1.0, 0), 20.0, 40.0, 709.7, 709.8,
             -708.3, -708.4, -745.2, 1e-310, np.inf, -np.inf, np.nan]
    x.reshape(-1)[:len(edges)] = edges[:x.size]

    def f(x):
        return {"sinh": jnp.sinh(x), "cosh": jnp.cosh(x), "exp": jnp.exp(x),
                "expm1": jnp.expm1(x), "logistic": lax.logistic(x),
                "wide": jnp.exp(x * 150), "tiny": jnp.expm1(x * 1e-3)}

    assert_matches_jax(f, x)


@pytest.mark.parametrize("size", [4099, 5], ids=["vectorised", "scalar"])
def test_f64_log_is_xla_bit_for_bit(size):
    """f64 log is glibc's, which XLA calls, inline (``h2d::glibc_log``): XLA's results bit
    for bit on both of its paths (x - 1 within [-2^-4, 0x1.09p-4], and the table
    elsewhere) and at their edges, on every magnitude, on special values and denormals
    (read as zero), in a vectorised loop and in a short scalar one."""
    rng = np.random.default_rng(size)
    edges = np.array([1.0, np.nextafter(1.0, 0), np.nextafter(1.0, 2), 1 - 2.0**-4,
                      np.nextafter(1 - 2.0**-4, 0), 1 + float.fromhex("0x1.09p-4"),
                      np.nextafter(1 + float.fromhex("0x1.09p-4"), 2), 0.6875, 1.375, 2.0,
                      0.5, np.finfo(np.float64).max, np.finfo(np.float64).tiny, 1e-310,
                      -1e-310, 0.0, -0.0, -1.0, np.inf, -np.inf, np.nan])
    x = np.concatenate([edges, 1 + rng.uniform(-0.07, 0.07, 2000),
                        np.exp(rng.uniform(-700, 700, 2000))])
    x = np.resize(rng.permutation(x), size) if size < len(x) else np.resize(x, size)
    assert_matches_jax(jnp.log, x)
    for start in range(0, len(edges), size):  # every edge, in short arrays too
        assert_matches_jax(jnp.log, np.resize(np.roll(edges, -start), size))


MAP = """
func.func @main(%x: tensor<3x4xf32>, %n: tensor<3x4xi32>, %e: tensor<0x2xf16>)
    -> (tensor<3x4xf32>, tensor<3x4xi32>, tensor<0x2xf16>) {
  %0 = "stablehlo.map"(%x, %n) ({
  ^bb0(%a: tensor<f32>, %k: tensor<i32>):
    %c = stablehlo.constant dense<2.5> : tensor<f32>
    %f = stablehlo.convert %k : (tensor<i32>) -> tensor<f32>
    %m = stablehlo.multiply %a, %f : tensor<f32>
    %s = stablehlo.add %m, %c : tensor<f32>
    %t = stablehlo.maximum %s, %a : tensor<f32>
    stablehlo.return %t : tensor<f32>
  }) {dimensions = array<i64: 0, 1>} : (tensor<3x4xf32>, tensor<3x4xi32>) -> tensor<3x4xf32>
  %1 = "stablehlo.map"(%n) ({
  ^bb0(%k: tensor<i32>):
    %m = stablehlo.multiply %k, %k : tensor<i32>
    stablehlo.return %m : tensor<i32>
  }) {dimensions = array<i64: 0, 1>} : (tensor<3x4xi32>) -> tensor<3x4xi32>
  %2 = "stablehlo.map"(%e, %e) ({
  ^bb0(%a: tensor<f16>, %b: tensor<f16>):
    %s = stablehlo.add %a, %b : tensor<f16>
    stablehlo.return %s : tensor<f16>
  }) {dimensions = array<i64: 0, 1>} : (tensor<0x2xf16>, tensor<0x2xf16>) -> tensor<0x2xf16>
  return %0, %1, %2 : tensor<3x4xf32>, tensor<3x4xi32>, tensor<0x2xf16>
}
"""


def test_map():
    """``stablehlo.map``: a region applied element by element, NaN and wrapping included."""
    x = np.array([[1.5, -2.0, np.nan, -0.0], [np.inf, 3.0, -np.inf, 7.25],
                  [0.5, -1e30, 1e30, 2.0]], np.float32)
    n = np.array([[2, -3, 1, 0], [1, 0, 5, 2**16], [7, 8, -9, 2**20]], np.int32)
    e = np.zeros((0, 2), np.float16)
    expected = run_module(MAP, [x, n, e])
    actual = hlo2dace.compile_text(MAP)(x, n, e)
    for k, (want, got) in enumerate(zip(expected, actual)):
        assert_arrays_match(want, got, where=f"result {k}")


def test_map_with_a_non_elementwise_body_is_refused():
    text = MAP.replace("%t = stablehlo.maximum %s, %a : tensor<f32>",
                       "%t = stablehlo.reverse %s, dims = [] : tensor<f32>")
    with pytest.raises(UnsupportedError, match="only elementwise ops"):
        hlo2dace.lower_text(text).as_sdfg()


#: (function, dtype) -> ULP between hlo2dace's vectorised result and XLA's: the sum of their
#: maximum errors against correctly rounded results (docs/vector-math.md), rounded up
VECTOR_ULP = {"float32": {"exp": 0, "expm1": 7, "log": 5, "log1p": 4, "sin": 3, "cos": 3,
                          "tan": 4, "tanh": 6, "cbrt": 4, "pow": 2, "atan2": 6},
              "float64": {"exp": 0, "expm1": 0, "log": 0, "log1p": 130, "sin": 4, "cos": 4,
                          "tan": 4, "tanh": 0, "cbrt": 4, "pow": 2, "atan2": 3}}
VECTOR_FUNCTIONS = {
    "exp": lax.exp, "expm1": lax.expm1, "log": lax.log, "log1p": lax.log1p, "sin": lax.sin,
    "cos": lax.cos, "tan": lax.tan, "tanh": lax.tanh, "cbrt": lax.cbrt, "pow": lax.pow,
    "atan2": lax.atan2,
}


@pytest.mark.parametrize("name", VECTOR_FUNCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=dtype_id)
def test_vectorised_transcendentals(name, dtype):
    """Each function alone in a long map, so that its loop calls libmvec's SIMD version
    (exp, f64 expm1 and tanh: XLA's own approximations; f64 log: glibc's, which XLA calls;
    these vectorised by GCC): within a few ULP of XLA (0 for those), and NaN, infinities,
    signed zeros and denormals (special values spread through the vectorised body) exactly
    as XLA gives them (atan2: as ``atan2_of_flushed``)."""
    fun = VECTOR_FUNCTIONS[name]
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-30, 30, 3000), np.exp(rng.uniform(-60, 60, 1000))])
    x = x.astype(dtype)
    specials = unary_values(dtype)
    x[7:7 + 3 * len(specials):3] = specials
    arguments = [x]
    if name in ("pow", "atan2"):
        y = np.roll(x, 1)
        arguments.append(y)
    expected = jax.jit(atan2_of_flushed if name == "atan2" else fun)(*arguments)
    compiled = hlo2dace.jit(fun, optimize="default").lower(*arguments).compile()
    assert_close(expected, compiled(*arguments), VECTOR_ULP[np.dtype(dtype).name][name], name)
    suffix = "f" if dtype == np.float32 else ""
    library = next(compiled.folder.rglob("libh2d_*.so")).read_bytes()
    vectorised = re.search(rb"_ZGV[a-z]N\d+v+_" + (name + suffix).encode() + rb"\b", library)
    own = name == "exp" or dtype == np.float64 and name in ("expm1", "log", "tanh")
    assert bool(vectorised) == (not own), \
        f"{name}: libmvec called: {vectorised}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=dtype_id)
def test_vectorised_loops_keep_denormal_inputs(dtype):
    """libmvec reads denormal inputs as zero under DAZ, XLA's sin does not: sin(x) = x as
    XLA gives it; atan2 reads them as zero whichever libmvec variant runs (its pairs of
    denormals, zeros and ordinary values, with their signs), in loops long enough to
    vectorise and in a scalar remainder."""
    tiny = np.finfo(dtype).smallest_subnormal
    y = np.tile(np.array([tiny, -tiny, tiny * 1000, 1.0, -0.0], dtype), 13)[:65]
    x = np.tile(np.array([0.0, -1.0, 1.0, -0.0, tiny, -tiny * 7], dtype), 11)[:65]
    assert_matches_jax(jnp.sin, y)
    ours = hlo2dace.jit(jnp.arctan2)
    assert_close(jax.jit(atan2_of_flushed)(y, x), ours(y, x),
                 VECTOR_ULP[np.dtype(dtype).name]["atan2"], "atan2")
    zeros = np.array([0.0, -0.0, 0.0, -0.0], dtype)
    assert_arrays_match(np.arctan2(zeros, np.array([0.0, -1.0, -1.0, -0.0], dtype)),
                        ours(np.array([tiny, -tiny, tiny, -tiny], dtype),
                             np.array([tiny, -1.0, -1.0, -tiny], dtype)))


#: products that XLA's CPU code contracts with an add or a subtract into one fused
#: multiply-add, and ones it does not (the product has another use, or is one of two equal
#: products, which XLA's CSE makes one)
CONTRACTIONS = {
    "a*b+c": lambda a, b, c, d: a * b + c,
    "c+a*b": lambda a, b, c, d: c + a * b,
    "a*b+c*d": lambda a, b, c, d: a * b + c * d,
    "a*b-c": lambda a, b, c, d: a * b - c,
    "c-a*b": lambda a, b, c, d: c - a * b,
    "a*b-c*d": lambda a, b, c, d: a * b - c * d,
    "-(a*b)+c": lambda a, b, c, d: -(a * b) + c,
    "c+-(a*b)": lambda a, b, c, d: c + -(a * b),
    "2.5*a+c+d": lambda a, b, c, d: 2.5 * a + c + d,
    "broadcast": lambda a, b, c, d: a[:12, None] * b[None, :10] + c[:10],
    "sqrt(|a*b+c|)": lambda a, b, c, d: jnp.sqrt(jnp.abs(a * b + c)),
    "in a loop": lambda a, b, c, d: lax.fori_loop(0, 3, lambda i, x: x * b + c, a),
    "two uses": lambda a, b, c, d: (a * b + c) * (a * b),
    "also a result": lambda a, b, c, d: (a * b + c, a * b),
}


@pytest.mark.pipeline
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_products_are_contracted_where_xla_contracts_them(dtype):
    """Bit for bit: where the machine has FMA, XLA rounds ``a*b+c`` once unless the
    product has another use in the same fused code or is written to memory; hlo2dace does
    the same, and rounds twice where XLA does."""
    rng = np.random.default_rng(7)
    a, b, c, d = (rng.standard_normal(64).astype(dtype) for _ in range(4))

    def programs(a, b, c, d):
        return {name: f(a, b, c, d) for name, f in CONTRACTIONS.items()}

    assert_matches_jax(programs, a, b, c, d)


@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, *COMPLEX_DTYPES], ids=dtype_id)
def test_divisions_by_broadcasts_and_constants_round_as_xla_s(dtype):
    """Bit for bit: XLA multiplies by the reciprocal of a constant or a broadcast real
    value (``frontend/xla_rewrites.py``), and divides by anything else."""
    rng = np.random.default_rng(11)
    shape = (6, 40)
    x, y = (np.asarray(rng.standard_normal(shape) * (1 + 1j if np.dtype(dtype).kind == "c"
                                                     else 1)).astype(dtype) for _ in range(2))
    row, scalar = y[0] + dtype(3), dtype(1.7)
    table = np.asarray(np.arange(1, 41) * 0.37, dtype)

    def divisions(x, y, row, scalar):
        return {"x / 3": x / 3.0, "x / scalar": x / scalar, "x / row": x / row[None, :],
                "x / constant": x / jnp.asarray(table), "3 / x": 3.0 / x, "x / y": x / y}

    assert_matches_jax(divisions, x, y, row, scalar)


DIVISION_CHAINS = {
    "(a / b) / c": lambda a, b, c, d, s: (a / b) / c,
    "a / (b / c)": lambda a, b, c, d, s: a / (b / c),
    "(a / b) / (c / d)": lambda a, b, c, d, s: (a / b) / (c / d),
    "((a / b) / c) / d": lambda a, b, c, d, s: ((a / b) / c) / d,
    "a / (b / (c / d))": lambda a, b, c, d, s: a / (b / (c / d)),
    "(a / 3) / b": lambda a, b, c, d, s: (a / 3.0) / b,
    "(a / b) / 3": lambda a, b, c, d, s: (a / b) / 3.0,
    "3 / (a / b)": lambda a, b, c, d, s: 3.0 / (a / b),
    "(a / b) / s": lambda a, b, c, d, s: (a / b) / s,
    "s / (a / b)": lambda a, b, c, d, s: s / (a / b),
    "(a / b) / c, a / b": lambda a, b, c, d, s: ((a / b) / c, a / b),
}


@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, *COMPLEX_DTYPES], ids=dtype_id)
def test_chains_of_divisions_round_as_xla_s(dtype):
    """Bit for bit, special values too: XLA regroups a division of or by a division into
    one division of products (``frontend/xla_rewrites.py``; not for bf16), which rounds
    otherwise (a third of f64 elements, nine tenths of complex ones) and divides less."""
    rng = np.random.default_rng(13)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, 1e-30, 7.0])
    args = []
    for k in range(4):
        x = rng.uniform(0.5, 2.0, 96) * 10.0 ** rng.integers(-2, 3, 96)
        x[k::12][:len(special)] = special  # every pairing of special values
        x = x * (1 + 1j * (k + 1) / 4) if np.dtype(dtype).kind == "c" else x
        with np.errstate(over="ignore"):  # 1e30 is inf in f16
            args.append(np.asarray(x).astype(dtype))

    def chains(a, b, c, d, s):
        return {name: f(a, b, c, d, s) for name, f in DIVISION_CHAINS.items()}

    assert_matches_jax(chains, *args, dtype(1.7))


#: divisions by functions that XLA turns into products; those by an exponential only where
#: hlo2dace's exp is XLA's own (f64: ``h2d::xla_exp``), else libmvec's
FUNCTION_DIVISORS = {
    "a / rsqrt(b)": lambda a, b, c: a / lax.rsqrt(b),
    "a / rsqrt(b), rsqrt(b)": lambda a, b, c: (a / lax.rsqrt(b), lax.rsqrt(b)),
}
EXPONENTIAL_DIVISORS = {
    "a / exp(b)": lambda a, b, c: a / jnp.exp(b),
    "a / exp(b), exp(b)": lambda a, b, c: (a / jnp.exp(b), jnp.exp(b)),
    "exp(a) / exp(b)": lambda a, b, c: jnp.exp(a) / jnp.exp(b),
    "(a / exp(b)) / c": lambda a, b, c: (a / jnp.exp(b)) / c,
    "a / (exp(b) / c)": lambda a, b, c: a / (jnp.exp(b) / c),  # regrouped, then a product
}


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=dtype_id)
def test_divisions_by_functions_round_as_xla_s(dtype):
    """Bit for bit: XLA divides by no exponential or reciprocal square root
    (``A / exp(B)`` is ``A * exp(-B)``, ``exp(A) / exp(B)`` is ``exp(A - B)``,
    ``A / rsqrt(B)`` is ``A * sqrt(B)``), whatever else reads the divisor."""
    rng = np.random.default_rng(17)
    a, b, c = (rng.uniform(-3.0, 3.0, 200).astype(dtype) for _ in range(3))
    b = np.abs(b)
    b[:4] = [0.0, np.inf, 1e-30, 700.0]
    cases = {**FUNCTION_DIVISORS, **(EXPONENTIAL_DIVISORS if dtype == np.float64 else {})}

    def divisions(a, b, c):
        return {name: f(a, b, c) for name, f in cases.items()}

    # XLA's own rsqrt is not correctly rounded: 1 ULP from 1 / sqrt in a third of elements
    with np.errstate(over="ignore", under="ignore"):
        assert_matches_jax(divisions, a, b, c,
                           tolerances={"['a / rsqrt(b), rsqrt(b)'][1]": 1})


@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=dtype_id)
def test_divisions_by_powers_are_products_as_xla_s(dtype):
    """``A / pow(B, C)`` is ``A * pow(B, -C)`` in XLA; hlo2dace's ``pow`` rounds otherwise
    than XLA's, so the rewrite is checked on the module, the values within pow's error."""
    a, b, c = (np.linspace(0.5, 2.0, 64).astype(dtype) + k for k in range(3))

    def f(a, b, c):
        return a / jnp.power(b, c)

    ops = hlo2dace.jit(f).lower(a, b, c).main.body.blocks[0].ops
    producers = {result.name: op for op in ops for result in op.results}
    assert "stablehlo.divide" not in [op.name for op in ops]
    (product,) = [op for op in ops if op.name == "stablehlo.multiply"]
    power = producers[product.operands[1].name]
    assert power.name == "stablehlo.power"
    assert producers[power.operands[1].name].name == "stablehlo.negate"
    assert_matches_jax(f, a, b, c, rtol=1e-5)


PRODUCTS_OF_SCALARS = {
    "(x * 2.5) * 0.37": lambda x, s: (x * 2.5) * 0.37,
    "(x * 2.5) * s * 1.3": lambda x, s: (x * 2.5) * s * 1.3,
    "s * (2.5 * x)": lambda x, s: s * (2.5 * x),
    "(x * s) * 2.5": lambda x, s: x * s * 2.5,  # not reassociated: s is no constant
    # a scalar reshaped to one element, then broadcast (the stop of jnp.linspace): XLA
    # elides the reshape and reassociates (NPBench's mandelbrot2 is XLA's bit for bit)
    "s[None] * (x * 0.37)": lambda x, s: jnp.reshape(s, (1, 1)) * (x * 0.37),
    "x / 3 / 7": lambda x, s: x / 3.0 / 7.0,
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_products_of_broadcast_scalars_round_as_xla_s(dtype):
    """Bit for bit: XLA takes the product of a broadcast scalar constant and another
    broadcast scalar first (f16, f32, f64). Each case reads arguments of its own, so that
    no case shares a value with another."""
    rng = np.random.default_rng(5)
    xs = {name: rng.standard_normal((6, 40)).astype(dtype) for name in PRODUCTS_OF_SCALARS}
    scales = {name: dtype(1.7 + k / 8) for k, name in enumerate(PRODUCTS_OF_SCALARS)}

    def products(xs, scales):
        return {name: f(xs[name], scales[name]) for name, f in PRODUCTS_OF_SCALARS.items()}

    assert_matches_jax(products, xs, scales)
