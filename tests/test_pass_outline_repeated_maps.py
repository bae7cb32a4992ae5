"""The outline_repeated_maps pass (C++): map scopes that repeat are generated once."""

import re

import jax
import jax.numpy as jnp

import hlo2dace

from pass_util import built_code, operands
from util import assert_arrays_match


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


def test_a_repeated_map_that_reads_a_register_takes_its_value():
    """A 0-d value that the state computes is a register (``zero_d_values_in_registers``):
    the function of a repeated map that reads it takes it by value, each call its own."""
    x, w = operands((64, 64), (64, 64))

    def f(x, w):
        for _ in range(4):
            x = jnp.tanh(x @ w) * (1.0 / jnp.sum(x * x)) + x
        return x

    code = built_code(f, x, w)
    repeats = re.findall(r"noinline\)\) void __h2d_repeat\w+\(([^)]*)\)", code)
    assert any(re.search(r"(?:float|double) __h2d_r\d+_\d+(?:,|$)", p) for p in repeats), repeats
    assert_arrays_match(jax.jit(f)(x, w), hlo2dace.jit(f)(x, w), rtol=1e-5, atol=1e-6)
