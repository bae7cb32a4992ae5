"""The fuse_into_readers pass: producers that their readers compute where they read them."""

import jax.numpy as jnp
import numpy as np

from pass_util import check_pass, operands, planned


def test_reshape_gather_concatenate_and_row_reduction():
    text = planned("""
        func.func @main(%x: tensor<4x6xf32>, %i: tensor<5x1xi32>) -> (tensor<3x8xf32>,
            tensor<5x6xf32>, tensor<4x12xf32>, tensor<4x6xf32>) {
          %0 = stablehlo.transpose %x, dims = [1, 0] : (tensor<4x6xf32>) -> tensor<6x4xf32>
          %1 = stablehlo.reshape %0 : (tensor<6x4xf32>) -> tensor<3x8xf32>
          %2 = stablehlo.exponential %1 : tensor<3x8xf32>
          %3 = "stablehlo.gather"(%x, %i) {dimension_numbers = #stablehlo.gather<
              offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0],
              index_vector_dim = 1>, slice_sizes = array<i64: 1, 6>}
              : (tensor<4x6xf32>, tensor<5x1xi32>) -> tensor<5x6xf32>
          %4 = stablehlo.negate %3 : tensor<5x6xf32>
          %5 = stablehlo.concatenate %x, %x, dim = 1 : (tensor<4x6xf32>, tensor<4x6xf32>)
              -> tensor<4x12xf32>
          %6 = stablehlo.sine %5 : tensor<4x12xf32>
          %7 = stablehlo.constant dense<0.0> : tensor<f32>
          %8 = stablehlo.reduce(%x init: %7) applies stablehlo.add across dimensions = [1]
            : (tensor<4x6xf32>, tensor<f32>) -> tensor<4xf32>
          %9 = stablehlo.broadcast_in_dim %8, dims = [0] : (tensor<4xf32>) -> tensor<4x6xf32>
          %10 = stablehlo.divide %x, %9 : tensor<4x6xf32>
          return %2, %4, %6, %10 : tensor<3x8xf32>, tensor<5x6xf32>, tensor<4x12xf32>,
            tensor<4x6xf32>
        }""", "fuse_into_readers")
    ops = {line.split(" = ", 1)[1].split("(")[0]: line for line in text.splitlines()
           if " = " in line}
    elementwise = "#h2d.computed_by_readers<readers = \"elementwise\">"
    assert elementwise in ops["stablehlo.reshape"]
    assert elementwise in ops["stablehlo.gather"]
    assert "#h2d.computed_by_readers<readers = \"any\">" in ops["stablehlo.concatenate"]
    # 4 rows: too few to share out a map over them (machine.FEW_OUTPUTS)
    assert "computed_by_readers" not in ops["stablehlo.reduce"]


def test_a_reshape_that_a_product_reads_and_one_that_is_returned():
    text = planned("""
        func.func @main(%x: tensor<2x3x4xf32>, %w: tensor<4x5xf32>) -> (tensor<6x5xf32>,
            tensor<6x4xf32>) {
          %0 = stablehlo.reshape %x : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
          %1 = stablehlo.dot_general %0, %w, contracting_dims = [1] x [0]
            : (tensor<6x4xf32>, tensor<4x5xf32>) -> tensor<6x5xf32>
          %2 = stablehlo.transpose %x, dims = [1, 0, 2] : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
          %3 = stablehlo.reshape %2 : (tensor<3x2x4xf32>) -> tensor<6x4xf32>
          return %1, %3 : tensor<6x5xf32>, tensor<6x4xf32>
        }""", "fuse_into_readers")
    first, _, _, returned, _ = text.splitlines()
    assert "#h2d.computed_by_readers<readers = \"products\">" in first
    assert "computed_by_readers" not in returned


def test_a_softmax_without_its_rows_written():
    x, = operands((256, 300))
    check_pass("fuse_into_readers", lambda x: jnp.exp(x - x.max(-1, keepdims=True))
               / jnp.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True), x,
               rtol=2e-6)


def test_a_roll_read_in_place():
    x, = operands((64, 500))
    check_pass("fuse_into_readers", lambda x: jnp.roll(x, 3, axis=1) * 2.0 + x, x)
    assert np.isfinite(x).all()
