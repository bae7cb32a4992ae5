"""The choose_product_kernels pass: the kernel of every product, from the machine model."""

import dataclasses

import jax
import numpy as np

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
    assert '#h2d.kernel<kernel = "blas", parts = 1>' in kernel(64, 64, 64)
    two = dataclasses.replace(current_machine(), threads=2)
    four = dataclasses.replace(current_machine(), threads=4)
    # a skinny product shared out in blocks of its long side, one per thread
    assert '#h2d.kernel<kernel = "skinny_gemm", parts = 2>' in kernel(8, 600, 1100,
                                                                        machine=two)
    assert '#h2d.kernel<kernel = "skinny_gemm", parts = 4>' in kernel(8, 600, 4400,
                                                                        machine=four)
    one = dataclasses.replace(current_machine(), threads=1)
    assert '"blas"' in kernel(8, 600, 1100, machine=one)
    without = dataclasses.replace(current_machine(), blas="none")
    assert '"loops"' in kernel(64, 64, 64, machine=without)
    assert '"loops"' in planned(_module(64, 64, 64, "i32"), "choose_product_kernels")
    assert '"xla_order"' in planned(_module(16, 16, 16, "complex<f32>"),
                                    "choose_product_kernels")


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
