"""The outer_products_as_multiplies pass: a product without a contraction is a multiply of
broadcasts, which its readers compute."""

import jax.numpy as jnp

from pass_util import check_pass, expect, operands, planned


def test_an_outer_product_and_a_unit_contraction():
    text = planned("""
        func.func @main(%u: tensor<3xf32>, %v: tensor<4xf32>, %a: tensor<3x1xf32>,
            %b: tensor<1x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>) {
          %0 = stablehlo.dot_general %u, %v, contracting_dims = [] x []
            : (tensor<3xf32>, tensor<4xf32>) -> tensor<3x4xf32>
          %1 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]
            : (tensor<3x1xf32>, tensor<1x4xf32>) -> tensor<3x4xf32>
          return %0, %1 : tensor<3x4xf32>, tensor<3x4xf32>
        }""", "outer_products_as_multiplies")
    assert text == expect("""
        %0_operand0 = stablehlo.broadcast_in_dim(%arg0)
        %0_operand1 = stablehlo.broadcast_in_dim(%arg1)
        %0 = h2d.outer_product(%0_operand0, %0_operand1)
        %1_units0 = stablehlo.reshape(%arg2)
        %1_operand0 = stablehlo.broadcast_in_dim(%1_units0)
        %1_units1 = stablehlo.reshape(%arg3)
        %1_operand1 = stablehlo.broadcast_in_dim(%1_units1)
        %1 = h2d.outer_product(%1_operand0, %1_operand1)
        func.return(%0, %1)
        """)


def test_mixed_types_stay_products():
    text = planned("""
        func.func @main(%u: tensor<3xf16>, %v: tensor<4xf16>) -> tensor<3x4xf32> {
          %0 = stablehlo.dot_general %u, %v, contracting_dims = [] x []
            : (tensor<3xf16>, tensor<4xf16>) -> tensor<3x4xf32>
          return %0 : tensor<3x4xf32>
        }""", "outer_products_as_multiplies")
    assert "outer_product" not in text


def test_an_outer_product_plus_a_bias_in_one_map():
    """One map, and one fused multiply-add as XLA computes it; without the pass, the
    product is written, then added: a rounding of the product apart."""
    u, v, b = operands((300,), (400,), (400,))
    check_pass("outer_products_as_multiplies",
               lambda u, v, b: jnp.einsum("i,j->ij", u, v) + b, u, v, b,
               without={"atol": 1e-6})
