"""The result_destinations pass: values computed straight into the result arrays."""

import jax.numpy as jnp

from pass_util import check_pass, expect, operands, planned


def test_results_and_the_chain_of_updates_to_one():
    text = planned("""
        func.func @main(%x: tensor<8xf32>, %u: tensor<2xf32>) -> (tensor<8xf32>,
            tensor<8xf32>) {
          %0 = stablehlo.exponential %x : tensor<8xf32>
          %1 = stablehlo.constant dense<0.0> : tensor<8xf32>
          %2 = stablehlo.constant dense<1> : tensor<i32>
          %3 = stablehlo.dynamic_update_slice %1, %u, %2 : (tensor<8xf32>, tensor<2xf32>,
            tensor<i32>) -> tensor<8xf32>
          %4 = stablehlo.dynamic_update_slice %3, %u, %2 : (tensor<8xf32>, tensor<2xf32>,
            tensor<i32>) -> tensor<8xf32>
          return %0, %4 : tensor<8xf32>, tensor<8xf32>
        }""", "result_destinations")
    assert text == expect("""
        %0 = stablehlo.exponential(%arg0) {h2d.destinations = #h2d.destinations<results = array<i64: 0>>}
        %1 = stablehlo.constant() {h2d.destinations = #h2d.destinations<results = array<i64: 1>>}
        %2 = stablehlo.constant()
        %3 = stablehlo.dynamic_update_slice(%1, %arg1, %2) {h2d.destinations = #h2d.destinations<results = array<i64: 1>>}
        %4 = stablehlo.dynamic_update_slice(%3, %arg1, %2) {h2d.destinations = #h2d.destinations<results = array<i64: 1>>}
        func.return(%0, %4)
        """)  # noqa: E501 (the planned text as it prints)


def test_without_it_every_result_is_copied():
    x, = operands((500, 400))
    check_pass("result_destinations", lambda x: (jnp.abs(x), x.at[3:9].set(1.0)), x)
