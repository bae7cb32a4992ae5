"""The carries_in_place pass: a loop body's elementwise map, alone reading a carried
value, writes its new value into the carry's array instead of a copy back."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlo2dace

from pass_util import check_pass, operands, planned
from util import assert_arrays_match


def _loop(body: str, returned: str = "%w") -> str:
    return f"""
        func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {{
          %0 = stablehlo.exponential %x : tensor<64xf32>
          %1:2 = stablehlo.while(%v = %0, %u = %x) : tensor<64xf32>, tensor<64xf32>
            cond {{
              %z = stablehlo.constant dense<0.0> : tensor<f32>
              %s = stablehlo.slice %v [0:1] : (tensor<64xf32>) -> tensor<1xf32>
              %r = stablehlo.reshape %s : (tensor<1xf32>) -> tensor<f32>
              %l = stablehlo.compare GT, %r, %z : (tensor<f32>, tensor<f32>) -> tensor<i1>
              stablehlo.return %l : tensor<i1>
            }} do {{
              {body}
              stablehlo.return {returned}, %u : tensor<64xf32>, tensor<64xf32>
            }}
          return %1#0 : tensor<64xf32>
        }}"""


def _decided(body: str, returned: str = "%w") -> bool:
    text = planned(_loop(body, returned), "fuse_elementwise", "carries_in_place")
    return "#h2d.carries_in_place<operands = array<i64: 0>>" in text


def test_a_map_that_alone_reads_the_carry():
    assert _decided("""%a = stablehlo.sine %v : tensor<64xf32>
              %b = stablehlo.multiply %v, %a : tensor<64xf32>
              %c = stablehlo.add %b, %u : tensor<64xf32>
              %w = stablehlo.subtract %c, %v : tensor<64xf32>""")


def test_what_is_not_written_in_place():
    # the old value returned beside the new one
    assert not _decided("%w = stablehlo.sine %v : tensor<64xf32>", returned="%v")
    # a reader outside the map: a reversal reads the carry at other positions
    assert not _decided("""%r = stablehlo.reverse %v, dims = [0] : tensor<64xf32>
              %w = stablehlo.add %v, %r : tensor<64xf32>""")
    # a value of the map read outside it: a reduction would recompute it from the carry
    assert not _decided("""%a = stablehlo.sine %v : tensor<64xf32>
              %z = stablehlo.constant dense<0.0> : tensor<f32>
              %s = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [0]
                : (tensor<64xf32>, tensor<f32>) -> tensor<f32>
              %t = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<64xf32>
              %w = stablehlo.add %a, %t : tensor<64xf32>""")
    # no map: without fusion each op is its own loop, and a later one may read the carry
    text = planned(_loop("""%a = stablehlo.sine %v : tensor<64xf32>
              %w = stablehlo.add %a, %v : tensor<64xf32>"""), "carries_in_place")
    assert "carries_in_place" not in text


def test_a_collatz_while_loop():
    """jnp's floor ``%`` and ``//`` put the carry in a dozen ops of one map."""
    def steps(start):
        def body(state):
            x, count = state
            x = jnp.where(x == 1, 1, jnp.where(x % 2 == 0, x // 2, 3 * x + 1))
            return x, count + (x != 1)

        return jax.lax.while_loop(lambda s: jnp.any(s[0] != 1), body,
                                  (start, (start != 1).astype(jnp.int32)))

    check_pass("carries_in_place", steps, np.arange(1, 3001, dtype=np.int32))


@pytest.mark.parametrize("case", ["returns_old", "reversed", "summed", "interleaved"])
def test_loops_whose_carries_stay_copied(case):
    """Bodies the pass must leave alone give XLA's results."""
    x, m = operands(256, (256, 256))

    def body(i, state):
        v, w = state
        if case == "returns_old":
            return jnp.sin(v) + w, v
        if case == "reversed":
            return v * 0.5 + v[::-1] * 0.25, w
        if case == "summed":  # the reduction computes its operand from the carry
            return jnp.cos(v) * 0.5, w + jnp.sum(v * 2.0)
        # an unrelated product beside the map, reading the carry
        return jnp.tanh(v), m @ v * 1e-2 + w

    fun = jax.jit(lambda x: jax.lax.fori_loop(0, 7, body, (x * 2.0, x)))
    expected = fun(x)
    for disable in ((), ("carries_in_place",)):
        actual = hlo2dace.jit(fun, disable_passes=disable)(x)
        for e, a in zip(expected, actual):
            assert_arrays_match(e, a, rtol=2e-5, atol=2e-5)
