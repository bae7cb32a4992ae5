"""The loop_buffers pass: a loop runs in its dead initial values' arrays."""

import jax

from pass_util import check_pass, operands, planned


def test_a_loop_over_a_computed_value():
    text = planned("""
        func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
          %0 = stablehlo.exponential %x : tensor<8xf32>
          %1 = stablehlo.constant dense<0> : tensor<i32>
          %2:2 = stablehlo.while(%i = %1, %v = %0) : tensor<i32>, tensor<8xf32>
            cond {
              %c = stablehlo.constant dense<10> : tensor<i32>
              %l = stablehlo.compare LT, %i, %c : (tensor<i32>, tensor<i32>) -> tensor<i1>
              stablehlo.return %l : tensor<i1>
            } do {
              %one = stablehlo.constant dense<1> : tensor<i32>
              %n = stablehlo.add %i, %one : tensor<i32>
              %w = stablehlo.sine %v : tensor<8xf32>
              stablehlo.return %n, %w : tensor<i32>, tensor<8xf32>
            }
          return %2#1 : tensor<8xf32>
        }""", "loop_buffers")
    assert "#h2d.in_place<operands = array<i64: 0, 1>>" in text


def test_a_loop_over_a_computed_matrix():
    """(Its result summed, not returned: a returned one is computed in the result's array
    anyway, ``result_destinations``.)"""
    x, = operands((300, 300))
    check_pass("loop_buffers", lambda x: jax.lax.fori_loop(
        0, 5, lambda i, v: v.at[i].set(v[i + 1] * 0.5), x * 2.0).sum(0), x,
        rtol=1e-5, atol=1e-5)
