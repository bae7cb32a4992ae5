"""Differential tests of every elementwise StableHLO op against XLA (``jax.jit`` on the CPU).

Each test compiles ONE program: a function that applies every op of a group to the edge
cases of one dtype and returns a dict keyed by op name, so that a failure names the op.
Ops that JAX does not emit as themselves (integer ``power``, ``logistic``, ``compare`` with
``TOTALORDER``, complex ``maximum``...) are tested with StableHLO text run by both XLA
(``hlo2dace.xla``) and hlo2dace.

Tolerances are 0 ULP except where ``ULP`` below says otherwise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from util import ALL_DTYPES, assert_arrays_match, assert_matches_jax, dtype_id, pairs, \
    special_values

import hlo2dace
from hlo2dace.errors import UnsupportedError
from hlo2dace.translate.dtypes import element_of_numpy
from hlo2dace.xla import run_module

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


# ---------------------------------------------------------------------------- inputs


def values(dtype) -> np.ndarray:
    """The edge cases of ``dtype``: NaN, +-inf, -0.0, denormals, extremes, INT_MIN, -1..."""
    dtype = np.dtype(dtype)
    if dtype in (INT4, UINT4):
        return np.arange(-8, 8).astype(dtype) if dtype == INT4 else \
            np.arange(16).astype(dtype)
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
             -1.0 + 1e-7, 1e-3, -1e-3]
    rng = np.random.default_rng(1)
    spread = rng.choice([-1.0, 1.0], 64) * 10.0 ** rng.uniform(-6, 6, 64)
    with np.errstate(over="ignore"):
        reals = np.concatenate([base.real.astype(np.float64) if dtype.kind == "c" else
                                base.astype(np.float64), extra, spread]).astype(real)
    if dtype.kind == "c":
        imag = np.roll(reals, 7)
        imag[::5] = 0.0
        return (reals + 1j * imag).astype(dtype)
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
# name -> (function, categories it is tested on). Functions reach each op with lax.*.

BINARY = {
    "add": (lax.add, "iunfc"),
    "subtract": (lax.sub, "iunfc"),
    "multiply": (lax.mul, "iunfc"),
    "divide": (lax.div, "iunfc"),
    "remainder": (lax.rem, "iunf"),
    "power": (lax.pow, "fc"),
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

#: ULP tolerances, (op, dtype name) or op -> ULP; everything else is exact.
ULP: dict = {}


def _tolerances(names, dtype) -> dict:
    out = {}
    for name in names:
        ulp = ULP.get((name, dtype_id(dtype)), ULP.get(name, 0))
        if ulp:
            out[f"['{name}']"] = ulp
    return out


def _ops_for(table, dtype):
    kind = category(dtype)
    return {name: fn for name, (fn, kinds) in table.items() if kind in kinds}


# ---------------------------------------------------------------------------- tests


@pytest.mark.parametrize("dtype", by_category("biunfc"))
def test_binary(dtype):
    ops = _ops_for(BINARY, dtype)
    if np.dtype(dtype) in (np.float32, np.float64):
        ops["complex"] = lax.complex
    x, y = pairs(values(dtype), values(dtype))

    def fun(x, y):
        return {name: op(x, y) for name, op in ops.items()}

    assert_matches_jax(fun, x, y, tolerances=_tolerances(ops, dtype))


@pytest.mark.parametrize("dtype", by_category("iun"))
def test_shifts(dtype):
    x, s = pairs(values(dtype), shift_amounts(dtype))

    def fun(x, s):
        return {name: op(x, s) for name, op in SHIFTS.items()}

    assert_matches_jax(fun, x, s)


@pytest.mark.parametrize("dtype", by_category("biunfc"))
def test_unary(dtype):
    ops = _ops_for(UNARY, dtype)
    x = unary_values(dtype)

    def fun(x):
        return {name: op(x) for name, op in ops.items()}

    assert_matches_jax(fun, x, tolerances=_tolerances(ops, dtype))


@pytest.mark.parametrize("source", [pytest.param(d, id=dtype_id(d)) for d in DTYPES])
def test_convert(source):
    x = unary_values(source)
    if category(source) in "iu":
        x = np.concatenate([x, np.array([2**24 + 1, 2**53 + 1, 2**31 - 1, 2**63 - 1, 2**11 + 1,
                                         2**8 + 1, 255, 256, 65535, 65536, 2**31, 2**32 - 1,
                                         2**64 - 1, 2**63]).astype(np.uint64).astype(source)])

    def fun(x):
        return {dtype_id(t): lax.convert_element_type(x, t) for t in DTYPES}

    assert_matches_jax(fun, x)


BITCAST_GROUPS = [
    (np.int8, np.uint8),
    (np.int16, np.uint16, np.float16, ml_dtypes.bfloat16),
    (np.int32, np.uint32, np.float32),
    (np.int64, np.uint64, np.float64),
]


def _bits(array):
    array = np.asarray(array)
    return array.view(np.dtype(f"u{array.dtype.itemsize}"))


@pytest.mark.parametrize("group", [pytest.param(g, id=f"{np.dtype(g[0]).itemsize * 8}bit")
                                   for g in BITCAST_GROUPS])
def test_bitcast_convert(group):
    """Every pair of one width, and the round trip through the float types (NaN payloads,
    signalling NaNs, denormals must survive: compared bit for bit)."""
    bits = np.dtype(group[0]).itemsize * 8
    unsigned = np.dtype(f"u{bits // 8}")
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
    x = raw.astype(unsigned)

    def fun(x):
        out = {}
        for a in group:
            xa = lax.bitcast_convert_type(x, a)
            out[dtype_id(a)] = xa
            for b in group:
                out[f"{dtype_id(a)}->{dtype_id(b)}"] = lax.bitcast_convert_type(xa, b)
        return out

    expected = jax.jit(fun)(x)
    actual = hlo2dace.jit(fun)(x)
    for key, e in expected.items():
        np.testing.assert_array_equal(_bits(actual[key]), _bits(e), err_msg=key)


@pytest.mark.xfail(raises=UnsupportedError, strict=True,
                   reason="bitcast_convert between element types of different widths changes "
                          "the shape; the builder does not translate it yet")
def test_bitcast_convert_changing_width():
    x = np.arange(4, dtype=np.float32)
    assert_matches_jax(lambda x: lax.bitcast_convert_type(x, jnp.uint8), x)


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

    assert_matches_jax(fun, inputs)


# ------------------------------------------------------------- StableHLO text tests


def _tensor(shape, dtype) -> str:
    dims = "".join(f"{n}x" for n in shape)
    return f"tensor<{dims}{element_of_numpy(dtype)}>"


def assert_text_matches_xla(lines, arguments, results, *, tolerances=None):
    """``lines``: ops in generic form over ``%arg0..``, defining ``%<name>`` values;
    ``results``: {name: (shape, dtype)}. Runs the module with XLA and with hlo2dace."""
    arg_types = [_tensor(a.shape, a.dtype) for a in arguments]
    res_types = [_tensor(shape, dtype) for shape, dtype in results.values()]
    signature = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(arg_types))
    text = "\n".join([
        f"func.func @main({signature}) -> ({', '.join(res_types)}) {{",
        *[f"  {line}" for line in lines],
        f"  return {', '.join(f'%{n}' for n in results)} : {', '.join(res_types)}",
        "}"])
    expected = run_module(text, arguments)
    actual = hlo2dace.compile_text(text)(*arguments)
    if len(results) == 1:
        actual = (actual,)
    for name, e, a in zip(results, expected, actual):
        assert_arrays_match(e, a, ulp=(tolerances or {}).get(name, 0), where=name)


def _op(result, name, operands, in_types, out_type, attributes=""):
    attrs = f" {{{attributes}}}" if attributes else ""
    return (f'%{result} = "stablehlo.{name}"({", ".join(operands)}){attrs} : '
            f'({", ".join(in_types)}) -> {out_type}')


@pytest.mark.parametrize("dtype", by_category("iu"))
def test_integer_power(dtype):
    """JAX lowers integer powers to multiplications; XLA's ``power`` on integers: by
    squaring, wrapping; negative exponents give 0 except for bases 1 and -1."""
    x, y = pairs(values(dtype), np.concatenate([values(dtype), np.arange(-3, 70)
                                                .astype(np.int64).astype(dtype)]))
    t = _tensor(x.shape, dtype)
    assert_text_matches_xla([_op("power", "power", ["%arg0", "%arg1"], [t, t], t)], [x, y],
                            {"power": (x.shape, dtype)})


@pytest.mark.parametrize("dtype", [pytest.param(d, id=dtype_id(d)) for d in
                                   (np.float16, ml_dtypes.bfloat16, np.float32, np.float64)])
def test_compare_totalorder(dtype):
    """TOTALORDER: -NaN < -inf < ... < -0.0 < +0.0 < ... < inf < NaN, by bits."""
    v = values(dtype)
    x, y = pairs(v, v)
    t = _tensor(x.shape, dtype)
    b = _tensor(x.shape, np.bool_)
    lines = []
    for d in ("EQ", "NE", "LT", "LE", "GT", "GE"):
        attrs = (f"comparison_direction = #stablehlo<comparison_direction {d}>, "
                 "compare_type = #stablehlo<comparison_type TOTALORDER>")
        lines.append(_op(d, "compare", ["%arg0", "%arg1"], [t, t], b, attrs))
    assert_text_matches_xla(lines, [x, y], {d: (x.shape, np.bool_) for d in
                                            ("EQ", "NE", "LT", "LE", "GT", "GE")})


@pytest.mark.parametrize("dtype", by_category("fc"))
def test_logistic_op(dtype):
    """``stablehlo.logistic`` itself (JAX emits 1 / (1 + exp(-x)) instead)."""
    x = unary_values(dtype)
    t = _tensor(x.shape, dtype)
    assert_text_matches_xla([_op("logistic", "logistic", ["%arg0"], [t], t)], [x],
                            {"logistic": (x.shape, dtype)},
                            tolerances={"logistic": ULP.get(("logistic_op", dtype_id(dtype)),
                                                            0)})


@pytest.mark.parametrize("dtype", by_category("c"))
def test_complex_text_ops(dtype):
    """Complex ops JAX expands into real arithmetic: maximum, minimum, sine, cosine."""
    v = values(dtype)
    x, y = pairs(v, v)
    t = _tensor(x.shape, dtype)
    lines = [_op("maximum", "maximum", ["%arg0", "%arg1"], [t, t], t),
             _op("minimum", "minimum", ["%arg0", "%arg1"], [t, t], t),
             _op("sine", "sine", ["%arg0"], [t], t),
             _op("cosine", "cosine", ["%arg0"], [t], t)]
    assert_text_matches_xla(lines, [x, y], {n: (x.shape, dtype) for n in
                                            ("maximum", "minimum", "sine", "cosine")},
                            tolerances={"sine": ULP.get(("complex_sine", dtype_id(dtype)), 0),
                                        "cosine": ULP.get(("complex_cosine", dtype_id(dtype)),
                                                          0)})


def test_boolean_arithmetic_and_float_real_imag():
    """add/multiply of booleans (or/and), real/imag of real floats, abs of unsigned."""
    x, y = pairs(np.array([False, True]), np.array([False, True]))
    f = unary_values(np.float32)
    u = values(np.uint32)
    tb, tf, tu = _tensor(x.shape, np.bool_), _tensor(f.shape, np.float32), \
        _tensor(u.shape, np.uint32)
    lines = [_op("add", "add", ["%arg0", "%arg1"], [tb, tb], tb),
             _op("multiply", "multiply", ["%arg0", "%arg1"], [tb, tb], tb),
             _op("real", "real", ["%arg2"], [tf], tf),
             _op("imag", "imag", ["%arg2"], [tf], tf)]
    assert_text_matches_xla(lines, [x, y, f, u],
                            {"add": (x.shape, np.bool_), "multiply": (x.shape, np.bool_),
                             "real": (f.shape, np.float32), "imag": (f.shape, np.float32)})
    del tu


def test_clamp_zero_dimensional_bounds():
    """``clamp`` with 0-d min and max broadcast to the operand (JAX broadcasts them itself)."""
    x = unary_values(np.float32)
    lo, hi = np.array(-1.5, np.float32), np.array(np.float32(2.5))
    i = values(np.int8)
    ilo, ihi = np.array(-3, np.int8), np.array(100, np.int8)
    tf, ts = _tensor(x.shape, np.float32), _tensor((), np.float32)
    ti, tis = _tensor(i.shape, np.int8), _tensor((), np.int8)
    lines = [_op("f", "clamp", ["%arg1", "%arg0", "%arg2"], [ts, tf, ts], tf),
             _op("i", "clamp", ["%arg4", "%arg3", "%arg5"], [tis, ti, tis], ti)]
    assert_text_matches_xla(lines, [x, lo, hi, i, ilo, ihi],
                            {"f": (x.shape, np.float32), "i": (i.shape, np.int8)})
