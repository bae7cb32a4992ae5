"""The partial_sorts pass: a sort keeps only what its readers slice."""

import jax
import jax.numpy as jnp

from pass_util import check_pass, operands, planned


def test_prefixes_read():
    text = planned("""
        func.func @main(%x: tensor<4x100xf32>, %i: tensor<4x100xi32>)
            -> (tensor<4x5xf32>, tensor<4x100xi32>) {
          %0:2 = "stablehlo.sort"(%x, %i) ({
            ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i32>, %d: tensor<i32>):
              %c0 = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
              stablehlo.return %c0 : tensor<i1>
          }) {dimension = 1 : i64, is_stable = true}
            : (tensor<4x100xf32>, tensor<4x100xi32>) -> (tensor<4x100xf32>, tensor<4x100xi32>)
          %1 = stablehlo.slice %0#0 [0:4, 0:5] : (tensor<4x100xf32>) -> tensor<4x5xf32>
          return %1, %0#1 : tensor<4x5xf32>, tensor<4x100xi32>
        }""", "partial_sorts")
    assert "#h2d.read_prefix<lengths = array<i64: 5, 100>>" in text.splitlines()[0]


def test_top_k_and_argsort():
    x, = operands((64, 400))
    check_pass("partial_sorts", lambda x: (jax.lax.top_k(x, 4), jnp.argsort(x, axis=1)), x)
