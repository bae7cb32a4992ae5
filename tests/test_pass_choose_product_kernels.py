"""The choose_product_kernels pass: the kernel of every product, from the machine model."""

import dataclasses

import jax
import numpy as np

import hlo2dace
from hlo2dace.machine import current_machine

from pass_util import check_pass, operands, planned


def _module(m, k, n, element="f32"):
    return f"""
        func.func @main(%a: tensor<{m}x{k}x{element}>, %b: tensor<{k}x{n}x{element}>)
            -> tensor<{m}x{n}x{element}> {{
          %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]
            : (tensor<{m}x{k}x{element}>, tensor<{k}x{n}x{element}>) -> tensor<{m}x{n}x{element}>
          return %0 : tensor<{m}x{n}x{element}>
        }}"""


def test_kernels_by_size_and_type():
    def kernel(*shape, machine=None):
        return planned(_module(*shape), "choose_product_kernels", machine=machine)

    assert '#h2d.kernel<kernel = "loops", parts = 1>' in kernel(8, 8, 8)  # tiny
    assert '#h2d.kernel<kernel = "blas", parts = 1>' in kernel(128, 128, 128)
    two = dataclasses.replace(current_machine(), threads=2)
    four = dataclasses.replace(current_machine(), threads=4)
    # a skinny product shared out in blocks of its long side, one per thread
    assert '#h2d.kernel<kernel = "skinny_gemm", parts = 2>' in kernel(1100, 600, 8,
                                                                        machine=two)
    assert '#h2d.kernel<kernel = "skinny_gemm", parts = 4>' in kernel(4400, 600, 8,
                                                                        machine=four)
    one = dataclasses.replace(current_machine(), threads=1)
    assert '"blas"' in kernel(1100, 600, 8, machine=one)
    without = dataclasses.replace(current_machine(), blas="none")
    assert '"loops"' in kernel(64, 64, 64, machine=without)
    assert '"loops"' in planned(_module(64, 64, 64, "i32"), "choose_product_kernels")
    assert '"xla_order"' in planned(_module(16, 16, 16, "complex<f32>"),
                                    "choose_product_kernels")


def _with_vectors(vector_bytes, **changes):
    return dataclasses.replace(current_machine(), vector_bytes=vector_bytes, **changes)


def test_few_rows_against_a_cached_matrix_in_registers():
    """A product of at most FEW_ROWS rows by a matrix whose rows it reads in place, on a
    machine with 64-byte vectors, is the few_rows kernel (shared out where it is large);
    not with 32-byte vectors, nor by a transposed B, nor by a B larger than half the
    last-level cache, nor above FEW_ROWS rows."""
    def kernel(*shape, machine, element="f32"):
        return planned(_module(*shape, element=element), "choose_product_kernels",
                       machine=machine)

    wide = _with_vectors(64, threads=1)
    assert '"few_rows", parts = 1>' in kernel(8, 1024, 1024, machine=wide)
    assert '"few_rows", parts = 2>' in kernel(8, 1024, 1024, machine=_with_vectors(
        64, threads=2))
    assert '"few_rows", parts = 1>' in kernel(64, 256, 256, machine=wide, element="f64")
    assert '"few_rows"' not in kernel(65, 256, 256, machine=wide)
    assert '"few_rows"' not in kernel(8, 1024, 1024, machine=_with_vectors(32, threads=1))
    assert '"few_rows"' not in kernel(8, 1024, 1024, machine=_with_vectors(
        64, threads=1, l3_bytes=4 << 20))
    assert '"few_rows"' not in kernel(8, 1024, 16, machine=wide)  # no strip of columns
    transposed = planned("""
        func.func @main(%a: tensor<8x512xf32>, %b: tensor<1024x512xf32>) -> tensor<8x1024xf32> {
          %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [1]
            : (tensor<8x512xf32>, tensor<1024x512xf32>) -> tensor<8x1024xf32>
          return %0 : tensor<8x1024xf32>
        }""", "choose_product_kernels", machine=wide)
    assert '"few_rows"' not in transposed


def test_few_rows_results_at_every_edge():
    """Row blocks of 8, 4 and 1, strips of columns, one vector and the narrow rest; A
    transposed; a scale folded in as alpha; f32 and f64; NaN and infinities: against
    jax.jit, on any machine (the kernel's blocks follow the ISA it is compiled for)."""
    machine = _with_vectors(64, threads=2)
    rng = np.random.default_rng(1)
    for dtype, rtol in ((np.float32, 2e-5), (np.float64, 1e-12)):
        a = rng.standard_normal((13, 300)).astype(dtype)
        b = rng.standard_normal((300, 1021)).astype(dtype)
        a[3, 7], a[12, 0], b[5, 1020] = np.nan, np.inf, -np.inf
        functions = {"a @ b": lambda a, b: a @ b, "a.T.T @ b": lambda a, b: (a.T * 2).T @ b,
                     "scaled": lambda a, b: (-2.5 * a) @ b}
        for name, fun in functions.items():
            jitted = hlo2dace.jit(fun, machine=machine)
            assert "few_rows" in jitted.lower(a, b).as_planned_text(), name
            expected, actual = np.asarray(jax.jit(fun)(a, b)), np.asarray(jitted(a, b))
            assert np.array_equal(np.isnan(expected), np.isnan(actual)), name
            finite = np.isfinite(expected)
            assert np.array_equal(expected[~finite], actual[~finite], equal_nan=True), name
            np.testing.assert_allclose(actual[finite], expected[finite], rtol=rtol,
                                       atol=rtol * 30, err_msg=name)


def test_a_computed_matrix_in_blocks():
    text = planned("""
        func.func @main(%a: tensor<1000x1000xf32>, %b: tensor<1000x1000xf32>,
            %x: tensor<1000xf32>) -> tensor<1000xf32> {
          %0 = stablehlo.add %a, %b : tensor<1000x1000xf32>
          %1 = stablehlo.dot_general %0, %x, contracting_dims = [1] x [0]
            : (tensor<1000x1000xf32>, tensor<1000xf32>) -> tensor<1000xf32>
          return %1 : tensor<1000xf32>
        }""", "choose_product_kernels")
    assert ('h2d.kernel = #h2d.kernel<kernel = "blocked_gemv", parts = 1>, '
            'h2d.fused_operands = #h2d.fused_operands<operands = array<i64: 0>>') in text


def test_tiny_products_in_loops():
    a, b = operands((6, 7), (7, 5))
    check_pass("choose_product_kernels", lambda a, b: a @ b, a, b, rtol=1e-6)
    assert np.isfinite(a).all()


def _convolution(batch, features_in, features_out, groups=1, element="f32"):
    per_group = features_in // groups
    return f"""
        func.func @main(%x: tensor<{batch}x8x8x{features_in}x{element}>,
                        %w: tensor<3x3x{per_group}x{features_out}x{element}>)
            -> tensor<{batch}x6x6x{features_out}x{element}> {{
          %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f],
            window = {{}} {{batch_group_count = 1 : i64, feature_group_count = {groups} : i64}}
            : (tensor<{batch}x8x8x{features_in}x{element}>,
               tensor<3x3x{per_group}x{features_out}x{element}>)
            -> tensor<{batch}x6x6x{features_out}x{element}>
          return %0 : tensor<{batch}x6x6x{features_out}x{element}>
        }}"""


def test_convolution_kernels_by_size_groups_and_type():
    def kernel(*shape, element="f32", machine=None):
        text = planned(_convolution(*shape, element=element), "choose_product_kernels",
                       machine=machine)
        return text.split("h2d.kernel<kernel = ")[1].split(",")[0]

    assert kernel(4, 16, 32) == '"blas"'
    assert kernel(1, 1, 2) == '"loops"'  # too small for a BLAS call to pay off
    assert kernel(4, 32, 32, 32) == '"loops"'  # depthwise: one input feature per group
    assert kernel(4, 16, 32, element="i32") == '"loops"'
    assert kernel(4, 16, 32, element="bf16") == '"blas"'  # summed in f32
    without = dataclasses.replace(current_machine(), blas="none")
    assert kernel(4, 16, 32, machine=without) == '"loops"'


def test_depthwise_convolutions_in_loops():
    x, w = operands((2, 10, 10, 24), (3, 3, 1, 24))

    def depthwise(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=24,
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    check_pass("choose_product_kernels", depthwise, x, w, rtol=1e-5, atol=1e-5)
