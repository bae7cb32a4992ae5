"""The update_in_place pass: an update writes its dead operand's array."""

from pass_util import check_pass, operands, planned


def test_the_last_reader_of_a_computed_operand():
    text = planned("""
        func.func @main(%x: tensor<8xf32>, %u: tensor<2xf32>) -> (tensor<8xf32>,
            tensor<8xf32>) {
          %0 = stablehlo.exponential %x : tensor<8xf32>
          %1 = stablehlo.constant dense<1> : tensor<i32>
          %2 = stablehlo.dynamic_update_slice %0, %u, %1 : (tensor<8xf32>, tensor<2xf32>,
            tensor<i32>) -> tensor<8xf32>
          %3 = stablehlo.dynamic_update_slice %x, %u, %1 : (tensor<8xf32>, tensor<2xf32>,
            tensor<i32>) -> tensor<8xf32>
          %4 = stablehlo.add %2, %3 : tensor<8xf32>
          return %4, %0 : tensor<8xf32>, tensor<8xf32>
        }""", "update_in_place")
    # %0 is returned too, and %x is the caller's argument: neither is overwritten
    assert "in_place" not in text, text
    text = planned("""
        func.func @main(%x: tensor<8xf32>, %u: tensor<2xf32>) -> tensor<8xf32> {
          %0 = stablehlo.exponential %x : tensor<8xf32>
          %1 = stablehlo.constant dense<1> : tensor<i32>
          %2 = stablehlo.dynamic_update_slice %0, %u, %1 : (tensor<8xf32>, tensor<2xf32>,
            tensor<i32>) -> tensor<8xf32>
          %3 = stablehlo.negate %2 : tensor<8xf32>
          return %3 : tensor<8xf32>
        }""", "update_in_place")
    lines = text.splitlines()
    assert "#h2d.in_place<operands = array<i64: 0>>" in lines[2]


def test_a_row_update_of_a_computed_matrix():
    x, u = operands((600, 500), (500,))
    check_pass("update_in_place", lambda x, u: (x * 2.0).at[5].set(u).sum(0), x, u,
               rtol=1e-5, atol=1e-4)
