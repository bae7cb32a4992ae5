"""The fold_scale_into_products pass: a scalar factor of a BLAS product is BLAS's alpha."""

import jax.numpy as jnp
import numpy as np

from pass_util import check_pass, expect, operands, planned

MODULE = """
    func.func @main(%s: tensor<f32>, %a: tensor<64x64xf32>, %b: tensor<64x64xf32>)
        -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) {
      %0 = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<64x64xf32>
      %1 = stablehlo.multiply %0, %a : tensor<64x64xf32>
      %2 = stablehlo.dot_general %1, %b, contracting_dims = [1] x [0]
        : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
      %3 = stablehlo.constant dense<0.0> : tensor<64x64xf32>
      %4 = stablehlo.multiply %b, %3 : tensor<64x64xf32>
      %5 = stablehlo.dot_general %a, %4, contracting_dims = [1] x [0]
        : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
      %6 = stablehlo.multiply %a, %0 : tensor<64x64xf32>
      %7 = stablehlo.dot_general %6, %b, contracting_dims = [1] x [0]
        : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
      return %2, %5, %7, %6 : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>,
        tensor<64x64xf32>
    }"""


def test_a_broadcast_scalar_becomes_alpha():
    """``(s * a) @ b``: alpha; ``a @ (b * 0)``: not (0 is no alpha: OpenBLAS skips the
    product, and 0 * inf must be NaN); ``(a * s) @ b`` when ``a * s`` is returned too: it
    is written anyway, so BLAS reads it."""
    text = planned(MODULE, "choose_product_kernels", "fold_scale_into_products")
    lines = text.splitlines()
    assert lines[1].startswith("%2 = h2d.scaled_dot(%arg1, %arg2, %arg0) {")
    assert "h2d.scaled_operand = 0" in lines[1]
    assert lines[4].startswith("%5 = stablehlo.dot_general(%arg1, %4)")
    assert lines[6].startswith("%7 = stablehlo.dot_general(%6, %arg2)")


def test_only_blas_products():
    text = planned("""
        func.func @main(%s: tensor<f32>, %a: tensor<4x4xf32>, %b: tensor<4x4xf32>)
            -> tensor<4x4xf32> {
          %0 = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<4x4xf32>
          %1 = stablehlo.multiply %0, %a : tensor<4x4xf32>
          %2 = stablehlo.dot_general %1, %b, contracting_dims = [1] x [0]
            : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
          return %2 : tensor<4x4xf32>
        }""", "choose_product_kernels", "fold_scale_into_products")
    assert text == expect("""
        %0 = stablehlo.broadcast_in_dim(%arg0)
        %1 = stablehlo.multiply(%0, %arg1)
        %2 = stablehlo.dot_general(%1, %arg2) {h2d.kernel = #h2d.kernel<kernel = "loops", parts = 1>}
        func.return(%2)
        """)  # noqa: E501 (the planned text as it prints)


def test_alpha_of_every_value():
    """Alpha of 0, an infinity or NaN computed at run time: the scaled copy instead, as
    ``(s * a) @ b`` computes it."""
    a, b = operands((80, 90), (90, 70))
    for s in (np.float32(2.5), np.float32(0.0), np.float32(np.inf), np.float32(np.nan)):
        check_pass("fold_scale_into_products", lambda s, a, b: (s * a) @ b, s, a, b,
                   rtol=2e-6, atol=1e-4)
    assert np.isfinite(a).all() and jnp.isfinite(b).all()
