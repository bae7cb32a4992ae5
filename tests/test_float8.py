"""Differential tests of the 8-, 6- and 4-bit floats (f8E4M3FN, f8E5M2, f8E4M3FNUZ,
f8E5M2FNUZ, f8E4M3B11FNUZ, f8E3M4, f8E4M3, f8E8M0FNU, f6E2M3FN, f6E3M2FN, f4E2M1FN):
stored as bytes, computed in float, each op's value rounded to f16 and then to the small
type as XLA computes them (translate/dtypes.py). Every code of each type goes through
every elementwise op, against jax.jit; XLA has no f6 types, so those are checked against
ml_dtypes' conversions of the same computation. Tolerances are 0 ULP unless a comment says
otherwise."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import hlo2dace

from util import assert_arrays_match, assert_matches_jax, dtype_id

#: the small floats XLA's CPU backend runs
XLA_TYPES = (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz,
             ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e4m3b11fnuz, ml_dtypes.float8_e3m4,
             ml_dtypes.float8_e4m3, ml_dtypes.float8_e8m0fnu, ml_dtypes.float4_e2m1fn)
#: and the two it does not (jaxlib: "Invalid XLA PrimitiveType")
F6_TYPES = (ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn)
ALL_TYPES = XLA_TYPES + F6_TYPES


def codes(dtype) -> np.ndarray:
    """Every value of ``dtype``: all its bit patterns (NaNs, infinities, -0, subnormals,
    the largest finite values included)."""
    bits = ml_dtypes.finfo(dtype).bits
    return np.arange(1 << bits, dtype=np.uint8).view(np.dtype(dtype))


def arithmetic_codes(dtype) -> np.ndarray:
    """``codes`` without f8E8M0FNU's 2^-127, a float denormal: XLA flushes it (DAZ) in
    some ops and not in others, depending on whether LLVM folds the op at compile time."""
    values = codes(dtype)
    if np.dtype(dtype) == np.dtype(ml_dtypes.float8_e8m0fnu):
        values = values[1:]
    return values


def conversion_inputs(dtype) -> np.ndarray:
    """f32 values that test a conversion's rounding: every value of the type, the
    midpoints between neighbours (ties, to even), the floats next to them, values beyond
    the largest (overflow: inf, NaN or saturation by type), halves of the smallest
    subnormal, infinities and NaNs."""
    info = ml_dtypes.finfo(dtype)
    exact = codes(dtype).astype(np.float32)
    finite = np.unique(exact[np.isfinite(exact)])
    mid = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
    edges = np.array([min(float(info.max) * 1.01, 3e38), 1e30, np.inf, -np.inf, np.nan, -np.nan,
                      float(info.smallest_subnormal) / 2, float(info.smallest_subnormal) * 0.75,
                      0.0, -0.0], np.float32)
    return np.concatenate([exact, mid, np.nextafter(mid, np.float32(np.inf)),
                           np.nextafter(mid, np.float32(-np.inf)), -mid, edges])


def bit_pairs(dtype) -> tuple[np.ndarray, np.ndarray]:
    values = arithmetic_codes(dtype)
    return np.repeat(values, values.size), np.tile(values, values.size)


def _elementwise(a, b):
    return {"add": a + b, "sub": a - b, "mul": a * b, "div": a / b, "rem": lax.rem(a, b),
            "max": lax.max(a, b), "min": lax.min(a, b), "pow": lax.pow(a, b),
            "atan2": lax.atan2(a, b), "lt": a < b, "eq": a == b, "ne": a != b,
            "select": jnp.where(a < b, a, b), "clamp": lax.clamp(b, a, b[::-1])}


def _unary(a):
    return {"neg": -a, "abs": abs(a), "sign": lax.sign(a), "sqrt": lax.sqrt(a),
            "rsqrt": lax.rsqrt(a), "cbrt": lax.cbrt(a), "exp": lax.exp(a), "log": lax.log(a),
            "log1p": lax.log1p(a), "expm1": lax.expm1(a), "tanh": lax.tanh(a),
            "logistic": lax.logistic(a), "sin": lax.sin(a), "cos": lax.cos(a),
            "floor": lax.floor(a), "ceil": lax.ceil(a), "round": lax.round(a),
            "round_even": lax.round(a, lax.RoundingMethod.TO_NEAREST_EVEN),
            "is_finite": lax.is_finite(a), "square": a * a}


#: XLA's own f16 expm1 and hlo2dace's differ by up to 1 f16 ULP (test_elementwise's ULP
#: table), which rounding to f8E3M4 (4 mantissa bits) carries into one of its 256 values
UNARY_ULP = {(np.dtype(ml_dtypes.float8_e3m4), "expm1"): 1}


@pytest.mark.parametrize("dtype", XLA_TYPES, ids=dtype_id)
def test_elementwise_ops_on_every_value(dtype):
    """Every pair of values through the binary ops and every value through the unary ones:
    computed in f16 (f32 for f8E8M0FNU) and rounded to the type, NaN, infinities,
    saturation, -0 and subnormals as XLA gives them, bit for bit."""
    a, b = bit_pairs(dtype)
    values = arithmetic_codes(dtype)
    expected = jax.jit(_unary)(values)
    actual = hlo2dace.jit(_unary)(values)
    for key in expected:
        assert_arrays_match(expected[key], actual[key], where=key,
                            ulp=UNARY_ULP.get((np.dtype(dtype), key), 0))
    assert_matches_jax(_elementwise, a, b)


@pytest.mark.parametrize("dtype", XLA_TYPES, ids=dtype_id)
def test_conversions(dtype):
    """To the type from f32 and f64 (once, to nearest even, from f64 too), from f16, bf16
    and integers; from the type to every float width, to integers (saturating: XLA
    saturates f4E2M1FN's 6.0, the largest value, to the integer's maximum), to bool, to
    the other small floats; bitcasts to and from bytes keep every code, NaNs too."""
    x = conversion_inputs(dtype)
    values = codes(dtype)
    wide = np.concatenate([x.astype(np.float64), x.astype(np.float64) * (1 + 2.0 ** -40)])
    integers = np.arange(-300, 300, dtype=np.int32)

    def f(x, wide, values, integers):
        out = {"from_f32": x.astype(dtype), "from_f64": wide.astype(dtype),
               "from_f16": x.astype(jnp.float16).astype(dtype),
               "from_bf16": x.astype(jnp.bfloat16).astype(dtype),
               "from_i32": integers.astype(dtype),
               "from_u8": integers.astype(jnp.uint8).astype(dtype)}
        for target in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64, jnp.int8,
                       jnp.uint8, jnp.int32, jnp.uint32, jnp.int64, jnp.bool_,
                       ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn, ml_dtypes.int4):
            out[f"to_{np.dtype(target).name}"] = values.astype(target)
        if ml_dtypes.finfo(dtype).bits == 8:
            bits = lax.bitcast_convert_type(values, jnp.uint8)
            out |= {"bits": bits, "from_bits": lax.bitcast_convert_type(bits[::-1], dtype),
                    "to_int8": lax.bitcast_convert_type(values, jnp.int8)}
        return out

    assert_matches_jax(f, x, wide, values, integers)


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=dtype_id)
def test_conversions_match_ml_dtypes(dtype):
    """ml_dtypes is the reference of the conversions (XLA agrees except where noted): f32
    to the type and back. XLA's own deviations, which hlo2dace follows: f32 NaN becomes -0
    in the types without NaN (ml_dtypes gives the opposite sign of the NaN's), and
    f8E8M0FNU rounds a float denormal on its bits."""
    x = conversion_inputs(dtype)
    info = ml_dtypes.finfo(dtype)
    x = x[np.abs(x) >= np.float32(2.0 ** -126)]  # no float denormals
    text = jax.jit(lambda x: (x.astype(dtype), codes(dtype).astype(jnp.float32))).lower(
        x).as_text()
    narrowed, widened = hlo2dace.compile_text(text)(x)
    expected = x.astype(dtype)
    if np.isnan(np.array(np.nan, np.float32).astype(dtype)):
        assert_arrays_match(expected, narrowed)
    else:  # no NaN in the type
        nan = np.isnan(x)
        assert_arrays_match(expected[~nan], narrowed[~nan])
        assert (narrowed[nan].view(np.uint8) == 1 << (info.bits - 1)).all()  # -0
    assert_arrays_match(codes(dtype).astype(np.float32), widened)


@pytest.mark.parametrize("dtype", F6_TYPES, ids=dtype_id)
def test_f6_ops(dtype):
    """XLA has no f6 types; jax lowers them, hlo2dace runs them (results come back as
    NumPy arrays: jax.Arrays cannot hold them). Against XLA's computation in f16, rounded
    to the type by ml_dtypes, as XLA computes the other small floats."""
    a, b = bit_pairs(dtype)

    def f(a, b):
        return (a + b, a * b, a / b, lax.max(a, b), lax.sqrt(a), a < b,
                (a.astype(jnp.float32) * 1.375).astype(a.dtype), a.astype(jnp.int8))

    results = hlo2dace.jit(f)(a, b)
    assert all(isinstance(r, np.ndarray) == (r.dtype == np.dtype(dtype)) for r in results)
    in_f16 = jax.jit(f)(a.astype(np.float16), b.astype(np.float16))

    def narrow(values):  # NaN (0 / 0, sqrt(-1)) becomes -0, as XLA converts to f4E2M1FN
        values = np.asarray(values)
        return np.where(np.isnan(values), np.float16(-0.0), values).astype(dtype)

    for k in (0, 1, 2, 3, 4, 6):
        assert_arrays_match(narrow(in_f16[k]), results[k], where=f"result {k}")
    np.testing.assert_array_equal(in_f16[5], results[5])
    # saturation as XLA converts f4E2M1FN: the largest value (7.5, 28) reaches int8's
    # range end converted to the type, so it saturates to 127
    largest = float(ml_dtypes.finfo(dtype).max)
    to_int = np.where(a.astype(np.float32) >= largest, 127,
                      np.where(a.astype(np.float32) <= -largest, -128,
                               np.trunc(a.astype(np.float32)))).astype(np.int8)
    np.testing.assert_array_equal(results[-1], to_int)


FP8_MATMUL_SHAPES = [((4, 16), (16, 8)), ((3, 5), (5, 7)), ((64, 96), (96, 48)),
                     ((2, 8, 32), (2, 32, 16))]


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
                                   ml_dtypes.float8_e4m3fnuz], ids=dtype_id)
@pytest.mark.parametrize("shapes", FP8_MATMUL_SHAPES, ids=str)
def test_fp8_matmul_accumulates_in_f32(dtype, shapes):
    """``jnp.dot(a8, b8, preferred_element_type=jnp.float32)``, how models run fp8
    inference: the operands widen to f32 exactly and the sums are f32 sums. With small
    integers (exact in every f8 type) the sums are exact and must match bit for bit; with
    random values, a relative tolerance of the f32 summation order (loop nest, OpenBLAS
    and XLA's Eigen add in different orders); products in the f8 type (no preferred type)
    round the f32 sum through f16 to the type, as XLA does."""
    rng = np.random.default_rng(sum(map(sum, shapes)))
    lhs_shape, rhs_shape = shapes
    exact = tuple(rng.integers(-4, 5, shape).astype(dtype) for shape in shapes)
    random = tuple(rng.standard_normal(shape).astype(dtype) for shape in shapes)

    def f32(a, b):
        return jnp.matmul(a, b, preferred_element_type=jnp.float32)

    assert_matches_jax(f32, *exact)
    # |sum| <= K * max|a| * max|b|; f32 sums in another order: K ulps of that, at most
    k = lhs_shape[-1]
    bound = k * float(np.abs(random[0].astype(np.float32)).max() *
                      np.abs(random[1].astype(np.float32)).max()) * 2.0 ** -23
    assert_matches_jax(f32, *random, atol=bound)
    assert_matches_jax(jnp.matmul, *exact)


@pytest.mark.parametrize("dtype", XLA_TYPES, ids=dtype_id)
def test_reductions_sorts_and_windows(dtype):
    """Reducer bodies round every step (XLA rounds each partial sum to the type): sums of
    rows of up to 32 elements, which XLA folds in order, match bit for bit, and so do
    cumulative sums and maxima (reduce_window) and sorts (total order)."""
    rng = np.random.default_rng(3)
    info = ml_dtypes.finfo(dtype)
    values = arithmetic_codes(dtype)
    finite = values[np.isfinite(values.astype(np.float32))]
    x = rng.choice(finite, (16, 32))
    unit = np.abs(rng.standard_normal((12, 9))).astype(dtype)
    sortable = values
    if np.dtype(dtype) == np.dtype(ml_dtypes.float8_e5m2fnuz):
        # XLA's sort comparator sees e5m2fnuz's values below 2^-14 (f16 subnormals) as
        # equal to zero: sort the others
        sortable = values[~(np.abs(values.astype(np.float32)) < 2.0 ** -14)]
    keys = rng.choice(sortable, (8, 40))
    e8m0 = np.dtype(dtype) == np.dtype(ml_dtypes.float8_e8m0fnu)
    zero = np.array(1.0 if e8m0 else 0.0, dtype)  # f8E8M0FNU has no zero and no sign
    lowest = np.array(1.0 if e8m0 else -float(info.max), dtype)

    def f(x, unit, keys):
        return {"sum_rows": lax.reduce(x, zero, lax.add, (1,)),
                "sum_columns": lax.reduce(x, zero, lax.add, (0,)),
                "max": lax.reduce(x, lowest, lax.max, (1,)),
                "cumsum": lax.cumsum(unit, axis=1), "cummax": lax.cummax(unit, axis=0),
                "cumprod": lax.cumprod(unit[:, :4], axis=1),
                "window_sum": lax.reduce_window(unit, zero, lax.add, (2, 3), (1, 2), "SAME"),
                "sort": jnp.sort(keys, axis=1), "argsort": jnp.argsort(keys, axis=1)}

    assert_matches_jax(f, x, unit, keys)
