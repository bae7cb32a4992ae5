"""The choose_product_kernels pass: the kernel of every product, from the machine model."""

import dataclasses

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
