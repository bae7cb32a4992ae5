"""The restrict_state_pointers pass (C++): the program's arrays read through
``__restrict__`` locals, so that GCC vectorises loops over several of them."""

import jax
import jax.numpy as jnp

import hlo2dace
from hlo2dace.cpp_split import restrict_state_pointers

from pass_util import built_code, operands
from util import assert_arrays_match


def test_transients_through_restricted_locals():
    x, = operands((300, 300))

    def f(x):  # the products' results are the program's arrays
        return jnp.tanh(x @ x) @ x

    assert "__restrict__ const __h2d_" in built_code(f, x)
    assert "__restrict__ const __h2d_" not in built_code(
        f, x, disable=["restrict_state_pointers"])


def test_bool_arguments_read_as_bytes():
    """A mask passed in, which the program only indexes, is read through a pointer to its
    bytes: GCC 12 vectorises no loop that loads a ``bool``. Results as jax.jit's, for a
    where by the mask and for the mask returned negated."""
    x, y = operands((1000,), (1000,))
    mask = x > y

    def f(m, x, y):
        return jnp.where(m, x * 2.0 + 1.0, y), ~m

    code = built_code(f, mask, x, y)
    assert "uint8_t * __restrict__ const arg0_bools = reinterpret_cast<uint8_t *>(arg0);" \
        in code
    assert "arg0_bools" not in built_code(f, mask, x, y, disable=["restrict_state_pointers"])
    for e, a in zip(jax.jit(f)(mask, x, y), hlo2dace.jit(f)(mask, x, y)):
        assert_arrays_match(e, a)
    # a parameter passed on whole (its address taken) keeps its type
    source = "void g(bool * __restrict__ m, int n) {\n    h(&m[0], n);\n}\n"
    assert restrict_state_pointers(source, ["g"]) == source
