"""Differential tests of stablehlo.convolution (translate/convolution.py) against jax.jit:
every layout (NHWC/HWIO, NCHW/OIHW, mixed and exotic permutations), 0 to 3 spatial
dimensions, strides, SAME/VALID/explicit (asymmetric, negative) padding, lhs and rhs
dilation, window reversal, feature groups (depthwise) and batch groups, gradients (which
produce all of those), conv_transpose and jnp.convolve, the element types XLA mixes
(int8 x int8 -> int32, bf16/f16 accumulated in f32), NaN and infinities, empty
dimensions, and both the im2col/BLAS path (each way it writes its result) and the loop
nest."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from dace.sdfg import nodes
from jax import lax

import hlo2dace
from hlo2dace.errors import UnsupportedError
from hlo2dace.machine import assumed, current_machine
from hlo2dace.translate import convolution

from util import (
    assert_arrays_match,
    assert_matches_jax,
    dtype_id,
    random_operand,
    special_values,
)

#: XLA sums in another order (Eigen's blocking, or its naive loop): relative tolerance per
#: element of a sum of up to a few hundred terms of size ~1
RTOL = {np.dtype(np.float32): 2e-5, np.dtype(np.complex64): 2e-5,
        np.dtype(np.float64): 1e-12, np.dtype(np.complex128): 1e-12}

NHWC = ("NHWC", "HWIO", "NHWC")
NCHW = ("NCHW", "OIHW", "NCHW")


def operand(dtype, shape, seed: int = 0) -> np.ndarray:
    return random_operand(dtype, shape, seed, exact_16_bit=True)


def check(f, *args, scale: float = 1.0, **kwargs):
    """``assert_matches_jax`` with the summation-order tolerance of the operands' and
    results' dtypes (``scale``: the size of the terms summed, for the absolute part)."""
    results = jax.tree_util.tree_leaves(jax.eval_shape(f, *args))
    rtol = max(RTOL.get(np.dtype(a.dtype), 0.0) for a in (*args, *results))
    return assert_matches_jax(f, *args, rtol=rtol, atol=rtol * scale, **kwargs)


def conv(x, w, strides=None, padding="VALID", dimension_numbers=NHWC, **kwargs):
    strides = strides or (1,) * (x.ndim - 2)
    return lax.conv_general_dilated(x, w, strides, padding, dimension_numbers=dimension_numbers,
                                    **kwargs)


def _tasklets(fun, *args) -> list[nodes.Tasklet]:
    sdfg = hlo2dace.jit(fun).lower(*args).as_sdfg()
    return [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, nodes.Tasklet)]


def _code(fun, *args) -> str:
    return "\n".join(t.code.as_string for t in _tasklets(fun, *args))


def _labels(fun, *args) -> list[str]:
    """The paths the convolutions of ``fun`` take: the GEMMs or the loop nest."""
    return sorted({t.label.rsplit("_", 1)[0] for t in _tasklets(fun, *args)}
                  & {"convolution", "convolution_blas"})


# ------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("numbers", [NHWC, NCHW, ("NHWC", "OIHW", "NCHW"),
                                     ("NCHW", "HWIO", "NHWC"), ("HNWC", "IHOW", "CWNH")],
                         ids=lambda n: "-".join(n))
def test_layouts(numbers):
    """Any permutation of the dimension numbers, on the BLAS path (a layer large enough)
    and the loop nest (a small one), with strides, padding and dilations."""
    lhs_spec, kernel_spec, _ = numbers

    def shaped(spec, sizes, seed):
        return operand(np.float32, tuple(sizes[c] for c in spec), seed)

    x = shaped(lhs_spec, {"N": 2, "C": 5, "H": 11, "W": 9}, 0)
    w = shaped(kernel_spec, {"O": 6, "I": 5, "H": 3, "W": 2}, 1)
    small = shaped(lhs_spec, {"N": 1, "C": 2, "H": 4, "W": 3}, 2)
    small_w = shaped(kernel_spec, {"O": 2, "I": 2, "H": 2, "W": 2}, 3)

    def f(x, w, small, small_w):
        return {"plain": conv(x, w, dimension_numbers=numbers),
                "same": conv(x, w, (2, 1), "SAME", dimension_numbers=numbers),
                "dilated": conv(x, w, (1, 2), ((2, 1), (0, -1)), dimension_numbers=numbers,
                                lhs_dilation=(1, 2), rhs_dilation=(2, 1)),
                "small": conv(small, small_w, padding="SAME", dimension_numbers=numbers)}

    check(f, x, w, small, small_w)


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_spatial_ranks(rank):
    """No spatial dimension (a matrix product), 1-D (NWC/NCW) and 3-D (NDHWC)."""
    letters = "DHW"[3 - rank:]
    nhwc = (f"N{letters}C", f"{letters}IO", f"N{letters}C")
    nchw = (f"NC{letters}", f"OI{letters}", f"NC{letters}")
    x = operand(np.float32, (2, *(7,) * rank, 4))
    w = operand(np.float32, ((3,) * rank) + (4, 5), seed=1)
    x_first = np.moveaxis(x, -1, 1).copy()
    w_first = np.moveaxis(w, (-1, -2), (0, 1)).copy()

    def f(x, w, x_first, w_first):
        strides = (2,) * rank
        padding = [(1, 0)] * rank
        return (conv(x, w, dimension_numbers=nhwc), conv(x, w, strides, padding,
                                                         dimension_numbers=nhwc),
                conv(x_first, w_first, strides, padding, dimension_numbers=nchw,
                     rhs_dilation=(2,) * rank))

    check(f, x, w, x_first, w_first)


def test_strides_and_padding():
    """SAME and VALID padding, explicit asymmetric and negative padding, strides larger
    than the window, windows that see nothing but padding."""
    x = operand(np.float32, (2, 10, 9, 3))
    w = operand(np.float32, (3, 4, 3, 8), seed=1)

    def f(x, w):
        return {"same": conv(x, w, (2, 3), "SAME"), "valid": conv(x, w, (3, 2), "VALID"),
                "same_lower": conv(x, w, (1, 1), "SAME_LOWER"),
                "asymmetric": conv(x, w, (1, 2), ((0, 3), (2, 1))),
                "negative": conv(x, w, (1, 1), ((-2, 1), (1, -3))),
                "wide_stride": conv(x, w, (5, 6), ((1, 1), (2, 2))),
                "only_padding": conv(x, w, (1, 1), ((6, 6), (8, 8)))}

    check(f, x, w)


def test_dilations():
    """lhs dilation (transposed convolutions, zeros between input elements) and rhs
    dilation (atrous convolutions), apart and together, with strides and padding."""
    x = operand(np.float32, (2, 8, 7, 4))
    w = operand(np.float32, (3, 2, 4, 8), seed=1)

    def f(x, w):
        return {"lhs": conv(x, w, (1, 1), ((0, 0), (0, 0)), lhs_dilation=(2, 3)),
                "rhs": conv(x, w, rhs_dilation=(3, 2)),
                "both": conv(x, w, (2, 1), ((2, 2), (1, 3)), lhs_dilation=(3, 2),
                             rhs_dilation=(2, 2)),
                "lhs_negative_padding": conv(x, w, (1, 1), ((-1, -2), (-3, 0)),
                                             lhs_dilation=(2, 2))}

    check(f, x, w)


@pytest.mark.parametrize("path", ["blas", "loops"])
def test_window_reversal(path):
    """window_reversal (JAX never writes it): the kernel read back to front along the
    reversed dimensions, like a convolution with the reversed kernel."""
    dtype, element = (np.float32, "f32") if path == "blas" else (np.int32, "i32")
    module = f"""
func.func @main(%x: tensor<2x12x10x8x{element}>, %w: tensor<3x4x8x6x{element}>)
    -> tensor<2x6x6x6x{element}> {{
  %0 = stablehlo.convolution(%x, %w)
      dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f],
      window = {{stride = [2, 1], pad = [[1, 0], [1, 1]], rhs_dilate = [1, 2],
                reverse = [true, false]}}
      {{batch_group_count = 1 : i64, feature_group_count = 1 : i64}}
      : (tensor<2x12x10x8x{element}>, tensor<3x4x8x6x{element}>) -> tensor<2x6x6x6x{element}>
  return %0 : tensor<2x6x6x6x{element}>
}}
"""
    x = operand(dtype, (2, 12, 10, 8))
    w = operand(dtype, (3, 4, 8, 6), seed=1)
    expected = jax.jit(lambda x, w: conv(x, w[::-1], (2, 1), ((1, 0), (1, 1)),
                                         rhs_dilation=(1, 2)))(x, w)
    lowered = hlo2dace.lower_text(module)
    code = "\n".join(t.code.as_string for t, _ in lowered.as_sdfg().all_nodes_recursive()
                     if isinstance(t, nodes.Tasklet))
    assert ("cblas_sgemm" in code) == (path == "blas")
    actual = lowered.compile()(x, w)
    rtol = RTOL.get(np.dtype(dtype), 0.0)
    assert_arrays_match(expected, actual, rtol=rtol, atol=rtol)


# -------------------------------------------------------------------------- groups


@pytest.mark.pipeline
@pytest.mark.parametrize("numbers", [NHWC, NCHW], ids=lambda n: n[0])
def test_feature_groups(numbers):
    """feature_group_count: depthwise (one input feature per group, with and without a
    channel multiplier: the loop nest) and groups of several features (GEMMs per group)."""
    nchw = numbers == NCHW

    def image(shape, seed):
        values = operand(np.float32, shape, seed)
        return np.moveaxis(values, -1, 1).copy() if nchw else values

    def kernel(shape, seed):
        values = operand(np.float32, shape, seed)
        return np.moveaxis(values, (-1, -2), (0, 1)).copy() if nchw else values

    x = image((2, 9, 8, 8), 0)
    depthwise = kernel((3, 3, 1, 8), 1)
    multiplier = kernel((3, 3, 1, 16), 2)
    grouped = kernel((2, 2, 4, 10), 3)

    def f(x, depthwise, multiplier, grouped):
        return {"depthwise": conv(x, depthwise, (1, 1), "SAME", numbers,
                                  feature_group_count=8),
                "multiplier": conv(x, multiplier, (2, 1), "SAME", numbers,
                                   feature_group_count=8),
                "grouped": conv(x, grouped, (1, 2), ((1, 0), (0, 1)), numbers,
                                feature_group_count=2, rhs_dilation=(2, 1))}

    assert _labels(f, x, depthwise, multiplier, grouped) == ["convolution",
                                                             "convolution_blas"]
    check(f, x, depthwise, multiplier, grouped)


@pytest.mark.pipeline
def test_batch_groups():
    """batch_group_count: the lhs batch split into groups, each convolved with its group of
    output features (as many groups as batch elements, and fewer; GEMMs per group and the
    loop nest)."""
    x = operand(np.float32, (8, 9, 7, 6))
    w4 = operand(np.float32, (3, 2, 6, 8), seed=1)
    w2 = operand(np.float32, (2, 2, 6, 12), seed=2)

    def f(x, w4, w2):
        return {"all": conv(x, w4[..., :8], (1, 1), "SAME", batch_group_count=8),
                "four": conv(x, w4, (2, 1), "VALID", batch_group_count=4),
                "two": conv(x, w2, (1, 1), ((1, 1), (0, 2)), batch_group_count=2,
                            rhs_dilation=(1, 2))}

    assert _labels(f, x, w4, w2) == ["convolution", "convolution_blas"]
    check(f, x, w4, w2)


# ------------------------------------------------------------------------ gradients


@pytest.mark.parametrize("case", ["plain", "strided", "dilated", "depthwise", "nchw"])
def test_gradients(case):
    """jax.grad with respect to input and kernel: the input gradient is a convolution with
    lhs dilation and the kernel reversed (a reverse view, read in place), the kernel
    gradient one with batch and features swapped (batch_group_count for grouped ones)."""
    numbers = NCHW if case == "nchw" else NHWC
    x = operand(np.float32, (4, 12, 11, 6))
    w = operand(np.float32, (3, 3, 1 if case == "depthwise" else 6, 8), seed=1)
    if case == "nchw":
        x, w = np.moveaxis(x, -1, 1).copy(), np.moveaxis(w, (-1, -2), (0, 1)).copy()
    options = {"plain": dict(padding="SAME"),
               "strided": dict(strides=(2, 3), padding=((1, 2), (0, 1))),
               "dilated": dict(padding=((1, 1), (2, 1)), rhs_dilation=(2, 1),
                               lhs_dilation=(1, 2)),
               "depthwise": dict(strides=(2, 1), padding="SAME", feature_group_count=2),
               "nchw": dict(strides=(1, 2), padding="SAME")}[case]
    if case == "depthwise":
        w = w[..., :6].copy()
        options["feature_group_count"] = 6

    def loss(x, w):
        return jnp.sum(jnp.sin(conv(x, w, dimension_numbers=numbers, **options)))

    check(jax.grad(loss, argnums=(0, 1)), x, w, scale=10)


def test_conv_transpose():
    """lax.conv_transpose (lhs dilation, kernel flipped or not), 1-D and 2-D."""
    x = operand(np.float32, (2, 7, 6, 4))
    w = operand(np.float32, (3, 3, 4, 5), seed=1)
    x1 = operand(np.float32, (3, 9, 4), seed=2)
    w1 = operand(np.float32, (4, 4, 2), seed=3)

    def f(x, w, x1, w1):
        return {"same": lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=NHWC),
                "flipped": lax.conv_transpose(x, w.swapaxes(2, 3), (2, 3), "VALID",
                                              dimension_numbers=NHWC, transpose_kernel=True),
                "dilated": lax.conv_transpose(x, w, (1, 2), ((1, 2), (2, 0)),
                                              rhs_dilation=(2, 1), dimension_numbers=NHWC),
                "1d": lax.conv_transpose(x1, w1, (3,), "SAME",
                                         dimension_numbers=("NWC", "WIO", "NWC"))}

    check(f, x, w, x1, w1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.int32],
                         ids=dtype_id)
def test_convolve(dtype):
    """jnp.convolve and jnp.correlate in every mode (1-D, kernel flipped; complex
    correlation conjugates), long enough for the BLAS path and short."""
    a = operand(dtype, (300,))
    v = operand(dtype, (31,), seed=1)
    short = operand(dtype, (5,), seed=2)

    def f(a, v, short):
        out = {mode: jnp.convolve(a, v, mode=mode) for mode in ("full", "same", "valid")}
        out["short"] = jnp.convolve(short, v, mode="full")
        out["correlate"] = jnp.correlate(a, v, mode="same")
        return out

    check(f, a, v, short)


# --------------------------------------------------------------------- element types


@pytest.mark.parametrize("dtype", [np.float64, np.complex64, np.complex128, np.float16,
                                   ml_dtypes.bfloat16, np.int32, np.int8, np.uint8, np.int64,
                                   np.bool_], ids=dtype_id)
def test_dtypes(dtype):
    """Every element type on layers with strides, padding, dilation and groups (floats:
    GEMMs and the loop nest): complex products do not conjugate, integers wrap, f16/bf16
    sum in f32 and round once, booleans are an OR of ANDs."""
    x = operand(dtype, (2, 9, 8, 4))
    w = operand(dtype, (3, 2, 4, 6), seed=1)

    def f(x, w):
        return {"layer": conv(x, w, (2, 1), "SAME", rhs_dilation=(1, 2)),
                "transposed": conv(x, w, (1, 1), ((1, 2), (0, 1)), lhs_dilation=(2, 1)),
                "grouped": conv(x, w[:, :, :2], (1, 1), "SAME", feature_group_count=2)}

    check(f, x, w)


@pytest.mark.parametrize("case", ["int8_int32", "int8_float32", "bf16_float32", "f16_float32",
                                  "f32_float64", "int16_int64"])
def test_preferred_element_type(case):
    """A result type wider than the operands: the operands are upcast first, as XLA does
    (int8 x int8 sums in int32, without wrapping at 8 bits)."""
    source, result = {"int8_int32": (np.int8, np.int32), "int8_float32": (np.int8, np.float32),
                      "bf16_float32": (ml_dtypes.bfloat16, np.float32),
                      "f16_float32": (np.float16, np.float32),
                      "f32_float64": (np.float32, np.float64),
                      "int16_int64": (np.int16, np.int64)}[case]
    x = operand(source, (2, 10, 9, 8))
    w = operand(source, (3, 3, 8, 16), seed=1)

    def f(x, w):
        return conv(x, w, (1, 2), "SAME", preferred_element_type=result)

    check(f, x, w)


def test_integer_overflow_wraps():
    """Integer sums wrap in the result type, whatever the order of summation."""
    x = np.full((1, 6, 6, 4), 127, np.int8)
    w = np.full((3, 3, 4, 2), -128, np.int8)
    big = np.full((1, 6, 6, 4), np.iinfo(np.int32).max, np.int32)
    check(lambda x, w, big: (conv(x, w, padding="SAME"), conv(big, w.astype(np.int32))),
          x, w, big)


# ------------------------------------------------------------------- special values


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=dtype_id)
def test_special_values(dtype):
    """NaN, infinities, -0.0, denormals and large values in the input propagate as XLA
    propagates them; an infinite kernel over padding gives NaN (0 * inf), as in the spec
    and XLA's f32 convolutions without lhs dilation."""
    values = special_values(dtype)
    # no finite extremes: whether their sums overflow depends on the order of summation
    values = values[~np.isfinite(values) | (np.abs(values) < 1e30)]
    x = np.resize(values, (2, 9, 9, 3)).astype(dtype)
    w = operand(dtype, (3, 3, 3, 4), seed=1)
    scale = 1e200 if dtype == np.float64 else 1e20

    def f(x, w):
        return {"nan_input": conv(x, w, (1, 1), "SAME"),
                "nan_input_dilated": conv(x, w, (2, 1), ((1, 1), (2, 1)), lhs_dilation=(1, 2)),
                "large": conv(x * scale, w)}

    check(f, x, w, signed_zeros=False)
    if dtype == np.float32:  # where XLA follows the spec (Eigen's zero padding)
        w_inf = w.copy()
        w_inf[0, 0, 0, 0] = np.inf
        ones = np.ones((1, 8, 8, 3), dtype)
        check(lambda ones, w_inf: conv(ones, w_inf, (1, 1), "SAME"), ones, w_inf)


@pytest.mark.parametrize("dtype", [np.float32, np.int32], ids=dtype_id)
def test_empty(dtype):
    """Empty batches, features and windows: nothing to compute, or sums of nothing (0)."""
    x = operand(dtype, (0, 5, 5, 3))
    w = operand(dtype, (2, 2, 3, 4), seed=1)
    no_features = operand(dtype, (2, 5, 5, 0))
    w_no_features = operand(dtype, (2, 2, 0, 4))
    no_outputs = operand(dtype, (2, 2, 3, 0))
    x_full = operand(dtype, (2, 5, 5, 3))
    w_big = operand(dtype, (6, 2, 3, 4), seed=2)
    no_rows = operand(dtype, (2, 0, 5, 3))

    def f(x, w, no_features, w_no_features, no_outputs, x_full, w_big, no_rows):
        return {"batch": conv(x, w), "features": conv(no_features, w_no_features),
                "outputs": conv(x_full, no_outputs), "window_too_big": conv(x_full, w_big),
                "only_padding": conv(no_rows, w, (1, 1), ((1, 2), (0, 0)))}

    check(f, x, w, no_features, w_no_features, no_outputs, x_full, w_big, no_rows)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=dtype_id)
def test_complex_module(dtype):
    """Complex convolutions (JAX splits its own into real ones; other producers need not):
    zgemm/cgemm products that do not conjugate, against XLA's real decomposition."""
    element = "complex<f32>" if dtype == np.complex64 else "complex<f64>"
    module = f"""
func.func @main(%x: tensor<2x3x9x8x{element}>, %w: tensor<6x3x3x2x{element}>)
    -> tensor<2x6x9x4x{element}> {{
  %0 = stablehlo.convolution(%x, %w)
      dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1],
      window = {{stride = [1, 2], pad = [[1, 1], [0, 1]]}}
      {{batch_group_count = 1 : i64, feature_group_count = 1 : i64}}
      : (tensor<2x3x9x8x{element}>, tensor<6x3x3x2x{element}>) -> tensor<2x6x9x4x{element}>
  return %0 : tensor<2x6x9x4x{element}>
}}
"""
    x = operand(dtype, (2, 3, 9, 8))
    w = operand(dtype, (6, 3, 3, 2), seed=1)
    expected = jax.jit(lambda x, w: conv(x, w, (1, 2), ((1, 1), (0, 1)), NCHW))(x, w)
    lowered = hlo2dace.lower_text(module)
    code = "\n".join(t.code.as_string for t, _ in lowered.as_sdfg().all_nodes_recursive()
                     if isinstance(t, nodes.Tasklet))
    assert f"cblas_{'c' if dtype == np.complex64 else 'z'}gemm" in code
    rtol = RTOL[np.dtype(dtype)]
    assert_arrays_match(expected, lowered.compile()(x, w), rtol=rtol, atol=rtol)


DYNAMIC_CONV = """
func.func @main(%x: tensor<2x9x8x4xf32>, %w: tensor<3x2x4x6xf32>{argument})
    -> tensor<2x5x9x6xf32> {{
  {padding}
  %0 = "stablehlo.dynamic_conv"(%x, %w, %pad) {{
    window_strides = array<i64: 2, 1>, lhs_dilation = array<i64: 1, 1>,
    rhs_dilation = array<i64: 1, 1>, window_reversal = array<i1: false, false>,
    dimension_numbers = #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>,
    batch_group_count = 1 : i64, feature_group_count = 1 : i64
  }} : (tensor<2x9x8x4xf32>, tensor<3x2x4x6xf32>, tensor<2x2xi64>) -> tensor<2x5x9x6xf32>
  return %0 : tensor<2x5x9x6xf32>
}}
"""


def test_dynamic_conv():
    """dynamic_conv (the padding an operand) with constant padding is a convolution; with
    padding computed at run time it is unsupported, and the error says so."""
    x = operand(np.float32, (2, 9, 8, 4))
    w = operand(np.float32, (3, 2, 4, 6), seed=1)
    constant = "%pad = stablehlo.constant dense<[[1, 1], [2, 0]]> : tensor<2x2xi64>"
    module = DYNAMIC_CONV.format(argument="", padding=constant)
    expected = jax.jit(lambda x, w: conv(x, w, (2, 1), ((1, 1), (2, 0))))(x, w)
    assert_arrays_match(expected, hlo2dace.compile_text(module)(x, w), rtol=2e-5, atol=2e-5)
    module = DYNAMIC_CONV.format(argument=", %pad: tensor<2x2xi64>", padding="")
    with pytest.raises(UnsupportedError, match=r"`stablehlo.dynamic_conv`.*padding computed"):
        hlo2dace.compile_text(module)


# --------------------------------------------------------------------------- paths


@pytest.mark.pipeline
def test_paths():
    """Which path a convolution takes: GEMMs for f32/f64 (and bf16, converted) layers, the
    loop nest for integers, for layers too small for a BLAS call and for depthwise ones."""
    x = operand(np.float32, (2, 16, 16, 8))
    w = operand(np.float32, (3, 3, 8, 8), seed=1)
    assert "cblas_sgemm" in _code(conv, x, w)
    assert "cblas_dgemm" in _code(conv, x.astype(np.float64), w.astype(np.float64))
    assert "cblas_sgemm" in _code(conv, x.astype(ml_dtypes.bfloat16),
                                  w.astype(ml_dtypes.bfloat16))
    assert "cblas_" not in _code(conv, x.astype(np.int32), w.astype(np.int32))
    assert "cblas_" not in _code(conv, x[:1, :3, :3, :2], w[:2, :2, :2, :2])
    assert _labels(lambda x, w: conv(x, w[:, :, :1], feature_group_count=8), x, w) == [
        "convolution"]


@pytest.mark.parametrize("out", ["NHWC", "NCHW", "NHCW", "HWCN"])
def test_chunks(out, monkeypatch, tmp_path):
    """Small patch chunks and kernel slabs: many GEMMs per layer, run by several threads,
    chunks cut at the ends of the result's single-strided blocks, slabs summed, and each
    way the result is written (rows x features in place, features x rows in place, a
    scratch block scattered); a fresh disk cache, which is keyed by the sources and not by
    these constants."""
    monkeypatch.setattr(convolution, "MIN_ROWS", 7)
    monkeypatch.setattr(convolution, "MAX_DEPTH", 40)
    monkeypatch.setenv("HLO2DACE_CACHE_DIR", str(tmp_path))
    # patch matrices of 1,000 elements (an L2 of 8,000 bytes), three threads
    small = dataclasses.replace(current_machine(), l2_bytes=8000, threads=3)
    numbers = ("NHWC", "HWIO", out)
    x = operand(np.float32, (3, 11, 10, 6))
    w = operand(np.float32, (3, 3, 6, 8), seed=1)
    x1 = operand(np.float32, (3, 40, 6), seed=2)
    w1 = operand(np.float32, (5, 6, 8), seed=3)

    def f(x, w, x1, w1):
        return {"plain": conv(x, w, (1, 1), "SAME", numbers),
                "grouped": conv(x, w[:, :, :3], (2, 1), "SAME", numbers, feature_group_count=2),
                "batch_groups": conv(x, w[..., :6], (1, 1), "SAME", numbers,
                                     batch_group_count=3),
                "1d": conv(x1, w1, (2,), ((3, 1),), ("NWC", "WIO", out.replace("H", ""))),
                "1d_dilated": conv(x1, w1, (1,), ((3, 1),), ("NWC", "WIO", "NWC"),
                                   rhs_dilation=(2,))}

    with assumed(small):
        code = _code(f, x, w, x1, w1)
        assert "#pragma omp parallel" in code and "__s ? 1 : 0" in code
        check(f, x, w, x1, w1)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=dtype_id)
def test_without_openblas(dtype):
    """Without OpenBLAS every convolution is the loop nest."""
    x = operand(dtype, (2, 12, 10, 6))
    w = operand(dtype, (3, 3, 3, 8), seed=1)

    def f(x, w):
        return conv(x, w, (2, 1), ((1, 1), (2, 1)), feature_group_count=2, lhs_dilation=(1, 2))

    with assumed(dataclasses.replace(current_machine(), blas="none")):
        assert "cblas_" not in _code(f, x, w)
        check(f, x, w)


# --------------------------------------------------------------------------- errors


def test_unsupported_narrow_result_of_float_convolution():
    """A float convolution converted to a 4-bit integer has no translation (JAX never
    writes one); the error names the op and the reason."""
    module = """
func.func @main(%x: tensor<1x4x2xf32>, %w: tensor<2x2x3xf32>) -> tensor<1x3x3xi4> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f],
      window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64}
      : (tensor<1x4x2xf32>, tensor<2x2x3xf32>) -> tensor<1x3x3xi4>
  return %0 : tensor<1x3x3xi4>
}
"""
    with pytest.raises(UnsupportedError, match=r"`stablehlo.convolution`.*f32 convolution "
                                               r"converted to i4"):
        hlo2dace.compile_text(module)
