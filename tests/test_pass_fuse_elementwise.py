"""The fuse_elementwise pass: elementwise ops of one shape in one map."""

import jax.numpy as jnp

from pass_util import check_pass, expect, operands, planned


def test_ops_of_one_shape_share_a_map_and_the_level_sets_the_budget():
    text = planned("""
        func.func @main(%x: tensor<4x3xf32>, %v: tensor<3xf32>) -> tensor<4x3xf32> {
          %0 = stablehlo.exponential %x : tensor<4x3xf32>
          %1 = stablehlo.negate %v : tensor<3xf32>
          %2 = stablehlo.broadcast_in_dim %1, dims = [1] : (tensor<3xf32>) -> tensor<4x3xf32>
          %3 = stablehlo.add %0, %2 : tensor<4x3xf32>
          return %3 : tensor<4x3xf32>
        }""", "fuse_elementwise")
    assert text == expect("""
        %0 = stablehlo.exponential(%arg0) {h2d.fusion = #h2d.fusion<group = 0>}
        %1 = stablehlo.negate(%arg1) {h2d.fusion = #h2d.fusion<group = 1>}
        %2 = stablehlo.broadcast_in_dim(%1)
        %3 = stablehlo.add(%0, %2) {h2d.fusion = #h2d.fusion<group = 0>}
        func.return(%3)
        """)


def test_reducer_bodies_are_not_maps():
    text = planned("""
        func.func @main(%x: tensor<4x3xf32>) -> tensor<4xf32> {
          %0 = stablehlo.constant dense<0.0> : tensor<f32>
          %1 = stablehlo.reduce(%x init: %0) applies stablehlo.add across dimensions = [1]
            : (tensor<4x3xf32>, tensor<f32>) -> tensor<4xf32>
          return %1 : tensor<4xf32>
        }""", "fuse_elementwise")
    assert "fusion" not in text


def test_without_it_each_op_is_a_map_of_its_own():
    x, v = operands((300, 200), (200,))
    # unfused, x * 2 + v is not one multiply-add as XLA computes it: a rounding apart
    check_pass("fuse_elementwise", lambda x, v: jnp.tanh(x * 2.0 + v) - x, x, v,
               ulp=1, atol=1e-6)
