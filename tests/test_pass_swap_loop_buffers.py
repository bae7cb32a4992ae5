"""The swap_loop_buffers pass: a counted loop's large carried values that its body
cannot update in place alternate between two buffers instead of being copied back."""

import jax
import jax.numpy as jnp

from hlo2dace.machine import current_machine

from pass_util import check_pass, operands, planned

#: the size from which carried values are swapped on this machine
LARGE = current_machine().swap_elements


def _loop(n: int, body: str, bound: str = "%c = stablehlo.constant dense<10> : tensor<i32>"):
    return f"""
        func.func @main(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{
          %0 = stablehlo.constant dense<0> : tensor<i32>
          %1:2 = stablehlo.while(%i = %0, %v = %x) : tensor<i32>, tensor<{n}xf32>
            cond {{
              {bound}
              %l = stablehlo.compare LT, %i, %c : (tensor<i32>, tensor<i32>) -> tensor<i1>
              stablehlo.return %l : tensor<i1>
            }} do {{
              %one = stablehlo.constant dense<1> : tensor<i32>
              %n = stablehlo.add %i, %one : tensor<i32>
              {body}
              stablehlo.return %n, %w : tensor<i32>, tensor<{n}xf32>
            }}
          return %1#1 : tensor<{n}xf32>
        }}"""


def _stencil(n: int) -> str:
    """``w[j] = v[j + 1]`` then ``v[n - 1]``: each element reads a neighbour."""
    return (f"%s = stablehlo.slice %v [1:{n}] : (tensor<{n}xf32>) -> tensor<{n - 1}xf32>\n"
            f"              %e = stablehlo.slice %v [{n - 1}:{n}] : (tensor<{n}xf32>) -> "
            f"tensor<1xf32>\n"
            f"              %w = stablehlo.concatenate %s, %e, dim = 0 : "
            f"(tensor<{n - 1}xf32>, tensor<1xf32>) -> tensor<{n}xf32>")


def test_a_large_stencil_carry_is_swapped():
    text = planned(_loop(LARGE, _stencil(LARGE)), "swap_loop_buffers")
    assert "h2d.swapped_carries = #h2d.swapped_carries<operands = array<i64: 1>>" in text


def test_what_is_not_swapped():
    # small: a copy per iteration is cheaper than a second copy of the body
    assert "swapped_carries" not in planned(_loop(LARGE - 1, _stencil(LARGE - 1)),
                                            "swap_loop_buffers")
    # elementwise: the body updates the carried value in place
    assert "swapped_carries" not in planned(
        _loop(LARGE, f"%w = stablehlo.sine %v : tensor<{LARGE}xf32>"), "swap_loop_buffers")
    # not a counted loop (the bound is no constant and no passed-through carry)
    uncounted = _loop(LARGE, _stencil(LARGE), bound=(
        f"%s0 = stablehlo.slice %v [0:1] : (tensor<{LARGE}xf32>) -> tensor<1xf32>\n"
        "              %r = stablehlo.reshape %s0 : (tensor<1xf32>) -> tensor<f32>\n"
        "              %c = stablehlo.convert %r : (tensor<f32>) -> tensor<i32>"))
    assert "swapped_carries" not in planned(uncounted, "swap_loop_buffers")


def test_a_diffusion_loop():
    x, = operands((LARGE // 256 + 8, 256))

    def diffusion(x):
        def sweep(i, a):  # each element reads its neighbours: no update in place
            return 0.5 * a + 0.25 * (jnp.roll(a, 1, axis=0) + jnp.roll(a, -1, axis=0))
        return jnp.sum(jax.lax.fori_loop(0, 5, sweep, x * 2.0), axis=0)

    check_pass("swap_loop_buffers", diffusion, x, rtol=1e-5, atol=1e-4)
