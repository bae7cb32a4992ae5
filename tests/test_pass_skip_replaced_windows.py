"""The skip_replaced_windows pass: a scatter's copy skips what later .sets replace."""

import jax.numpy as jnp

from pass_util import check_pass, operands, planned


def test_boxes_of_later_sets():
    x, = operands((600, 500))

    def f(x):  # summed: a returned chain of .sets is built in the result's array anyway
        return x.at[0, :].set(1.0).at[1:400, :].set(2.0).at[:, 0].set(3.0).sum(0)

    check_pass("skip_replaced_windows", f, x, rtol=1e-5, atol=1e-4)
    module = """
        func.func @main(%x: tensor<6x5xf32>, %u: tensor<1x5xf32>) -> tensor<6x5xf32> {
          %i = stablehlo.constant dense<[[0]]> : tensor<1x1xi32>
          %j = stablehlo.constant dense<[[5]]> : tensor<1x1xi32>
          %0 = "stablehlo.scatter"(%x, %i, %u) ({
            ^bb0(%a: tensor<f32>, %b: tensor<f32>):
              stablehlo.return %b : tensor<f32>
          }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1],
              inserted_window_dims = [0], scatter_dims_to_operand_dims = [0],
              index_vector_dim = 1>}
            : (tensor<6x5xf32>, tensor<1x1xi32>, tensor<1x5xf32>) -> tensor<6x5xf32>
          %1 = "stablehlo.scatter"(%0, %j, %u) ({
            ^bb0(%a: tensor<f32>, %b: tensor<f32>):
              stablehlo.return %b : tensor<f32>
          }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1],
              inserted_window_dims = [0], scatter_dims_to_operand_dims = [0],
              index_vector_dim = 1>}
            : (tensor<6x5xf32>, tensor<1x1xi32>, tensor<1x5xf32>) -> tensor<6x5xf32>
          return %1 : tensor<6x5xf32>
        }"""
    first = planned(module, "skip_replaced_windows").splitlines()[2]
    assert "#h2d.replaced_later<boxes = [[array<i64: 5, 6>, array<i64: 0, 5>]]>" in first
    assert jnp.isfinite(x).all()
