"""The reuse_transients pass: transients never live at once share one array."""

import dace
import jax
import jax.numpy as jnp

import hlo2dace

from pass_util import check_pass, operands


def _transients(fun, *args, disable=()):
    sdfg = hlo2dace.jit(fun, disable_passes=disable).lower(*args).as_sdfg()
    return sorted(name for name, d in sdfg.arrays.items() if d.transient)


def _chain(x):
    # each product reads the one before through a pointer: a product never writes the
    # array it reads (DaCe's TransientReuse would share them), the third takes the first's
    a = x @ x
    b = jnp.sin(a @ x)
    c = b @ x
    return jnp.cos(c @ x)


def test_a_chain_of_products():
    x, = operands((64, 64), dtype="float64")
    with_pass, without = _transients(_chain, x), _transients(_chain, x,
                                                              disable=("reuse_transients",))
    assert len(with_pass) < len(without)
    assert set(with_pass) <= set(without)
    check_pass("reuse_transients", _chain, x, rtol=1e-12, atol=1e-12)


def _loop(x):
    # what the loop's body writes lives for the whole loop: the arrays before and after
    # it share with each other only
    x = x / 16
    y = jnp.tanh(x @ x)
    z = jax.lax.fori_loop(0, 3, lambda i, c: jnp.sin(c @ x) @ y, y)
    w = jnp.tanh(z @ x)
    return jnp.cos(w @ x)


def test_a_loop_between():
    x, = operands((32, 32), dtype="float64")
    check_pass("reuse_transients", _loop, x, rtol=1e-10, atol=1e-10)


def test_daces_simplify_keeps_the_shared_arrays_meaning():
    """A user's transformation of an SDFG whose arrays are shared stays right (the
    shared arrays are plain arrays, renamed, not references into one buffer)."""
    x, = operands((64, 64), dtype="float64")
    sdfg = hlo2dace.jit(_chain).lower(x).as_sdfg()
    assert not [d for d in sdfg.arrays.values() if isinstance(d, dace.data.Reference)]
    def simplify(sdfg):
        sdfg.simplify()

    simplified = hlo2dace.jit(_chain, transform=simplify)
    assert jnp.allclose(simplified(x), jax.jit(_chain)(x), rtol=1e-12, atol=1e-12)
