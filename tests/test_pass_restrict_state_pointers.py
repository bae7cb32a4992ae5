"""The restrict_state_pointers pass (C++): the program's arrays read through
``__restrict__`` locals, so that GCC vectorises loops over several of them."""

import jax.numpy as jnp

from pass_util import built_code, operands


def test_transients_through_restricted_locals():
    x, = operands((300, 300))

    def f(x):  # the products' results are the program's arrays
        return jnp.tanh(x @ x) @ x

    assert "__restrict__ const __h2d_" in built_code(f, x)
    assert "__restrict__ const __h2d_" not in built_code(
        f, x, disable=["restrict_state_pointers"])
