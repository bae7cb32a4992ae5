"""The outline_repeated_maps pass (C++): map scopes that repeat are generated once."""

import jax.numpy as jnp

from pass_util import built_code, operands


def test_a_layer_repeated_is_one_function():
    x, w = operands((64, 64), (64, 64))

    def f(x, w):
        for _ in range(6):
            x = jnp.tanh(x @ w + 1.0) * 0.5 + x
        return x

    outlined = built_code(f, x, w)
    plain = built_code(f, x, w, disable=["outline_repeated_maps"])
    assert "__h2d_repeat" in outlined or len(outlined) < len(plain)
    assert "__h2d_repeat" not in plain
