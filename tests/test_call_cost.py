"""What the cheap call path of ``hlo2dace.jit`` must keep (issue 47): after a signature's
first call, jax.Array arguments skip the per-argument tests and results are wrapped in one
loop, yet every call returns jax.Arrays as ``jax.jit``'s (dtype, shape, sharding, weak type,
pytree), never memory a later call writes, and anything else still goes the checked way."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlo2dace
from hlo2dace import runtime
from hlo2dace.errors import ArgumentError


def _ten_leaves(d):
    return {k: v * 2.0 + 1.0 for k, v in d.items()}


def _tree(offset: float):
    return {f"k{i}": jnp.full((3 + i,), offset + i, jnp.float32) for i in range(10)}


def _assert_like_jax_jit(actual, expected):
    assert jax.tree_util.tree_structure(actual) == jax.tree_util.tree_structure(expected)
    for a, e in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected)):
        assert isinstance(a, jax.Array)
        assert (a.dtype, a.shape, a.weak_type) == (e.dtype, e.shape, e.weak_type)
        assert a.sharding == e.sharding and a.committed == e.committed
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


@pytest.fixture
def checks(monkeypatch):
    """How many calls ran ``Program.check`` (the per-argument tests)."""
    seen = []
    check = runtime.Program.check
    monkeypatch.setattr(runtime.Program, "check",
                        lambda self, arrays: seen.append(1) or check(self, arrays))
    return seen


def test_a_pytree_of_jax_arrays_gives_jax_jits_results_on_every_call(checks):
    fun = hlo2dace.jit(_ten_leaves)
    for offset in range(4):
        tree = _tree(float(offset))
        _assert_like_jax_jit(fun(tree), jax.jit(_ten_leaves)(tree))
    # the first call checked its arguments; the later ones reused what it found
    assert len(checks) == 1


def test_jax_arrays_after_numpy_arrays_of_the_same_signature_skip_the_checks(checks):
    fun = hlo2dace.jit(lambda x: x * 3.0)
    x = np.arange(8.0).reshape(2, 4)
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(fun(x)), x * 3.0)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(fun(jnp.asarray(x))), x * 3.0)
    assert len(checks) == 3  # the NumPy calls and the first call with a jax.Array


def test_earlier_results_are_not_overwritten_by_later_calls():
    """Results are fresh buffers per call, small ones (copied by jaxlib) and large ones
    (wrapped without a copy) alike, so a kept result never changes."""
    fun = hlo2dace.jit(lambda x, y: (x + 1.0, y * 2.0))
    small, large = jnp.arange(4.0, dtype=jnp.float32), jnp.arange(1 << 16, dtype=jnp.float32)
    first = fun(small, large)
    kept = [np.array(a) for a in first]
    for k in range(1, 4):
        later = fun(small + k, large + k)
        np.testing.assert_array_equal(np.asarray(later[0]), np.asarray(small) + k + 1.0)
        for a, b in zip(first, later):
            assert a.unsafe_buffer_pointer() != b.unsafe_buffer_pointer()
    for a, k in zip(first, kept):
        np.testing.assert_array_equal(np.asarray(a), k)


def test_other_arguments_of_a_known_signature_are_still_checked(checks):
    """The key holds shapes and dtypes, not types: NumPy arrays (contiguous or not) and
    0-d arguments go through the checks, the results the same."""
    fun = hlo2dace.jit(lambda x, s: x * s)
    x = jnp.arange(6.0).reshape(2, 3)
    fun(x, jnp.float64(2.0))
    fun(x, jnp.float64(2.0))
    assert len(checks) == 2  # a 0-d argument is reshaped: never taken as it is
    g = hlo2dace.jit(lambda x: x.T + 1.0)
    g(x), g(x)
    before = len(checks)
    numpy_x = np.asarray(x)
    for arg in (numpy_x, np.asfortranarray(numpy_x), x):
        np.testing.assert_array_equal(np.asarray(g(arg)), numpy_x.T + 1.0)
    assert len(checks) == before + 2  # the two NumPy calls


def test_a_deleted_argument_is_an_argument_error_on_the_checked_path():
    fun = hlo2dace.jit(lambda x: x + 1.0)
    x = jnp.arange(4.0, dtype=jnp.float32)
    fun(x), fun(x)
    gone = jnp.arange(4.0, dtype=jnp.float32)
    gone.delete()
    with pytest.raises(ArgumentError, match="argument 0"):
        fun(gone)
    np.testing.assert_array_equal(np.asarray(fun(x)), np.arange(4.0) + 1.0)


def test_weak_types_scalars_and_x64_off_keep_jax_jits_conversions():
    fun = hlo2dace.jit(lambda x, s: (x * s, 3.0))
    x = jnp.arange(3, dtype=jnp.float32)
    for _ in range(3):
        _assert_like_jax_jit(fun(x, 2.0), jax.jit(lambda x, s: (x * s, 3.0))(x, 2.0))
    with jax.enable_x64(False):
        wide = np.arange(3.0)
        for _ in range(3):
            _assert_like_jax_jit(fun(wide, 2.0), jax.jit(lambda x, s: (x * s, 3.0))(wide, 2.0))


def test_a_traced_call_after_concrete_ones_of_the_same_shapes_is_a_traced_call():
    fun = hlo2dace.jit(lambda x: jnp.sin(x) * 2.0)
    x = jnp.arange(5.0)
    fun(x), fun(x)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda x: fun(x) + 1.0)(x)),
                               np.sin(np.arange(5.0)) * 2.0 + 1.0, rtol=1e-15)
    np.testing.assert_allclose(np.asarray(jax.grad(lambda x: fun(x).sum())(x)),
                               2.0 * np.cos(np.arange(5.0)), rtol=1e-15)


def test_donating_functions_keep_their_results_inside_and_outside_jax_jit():
    step = hlo2dace.jit(lambda p, g: jax.tree_util.tree_map(lambda a, b: a - 0.5 * b, p, g),
                        donate_argnums=0)
    grads = {"w": jnp.ones((4, 3)), "b": jnp.ones(3)}
    params = {"w": jnp.zeros((4, 3)), "b": jnp.zeros(3)}
    kept = params = step(params, grads)
    for k in range(2, 5):
        params = step(params, grads)
        np.testing.assert_array_equal(np.asarray(params["w"]), np.full((4, 3), -0.5 * k))
    np.testing.assert_array_equal(np.asarray(kept["b"]), np.full(3, -0.5))
    inside = jax.jit(step, donate_argnums=0)({"w": jnp.zeros((4, 3)), "b": jnp.zeros(3)}, grads)
    np.testing.assert_array_equal(np.asarray(inside["w"]), np.full((4, 3), -0.5))


def test_a_compiled_function_gives_jax_jits_results_on_every_call():
    """``lower(...).compile()`` keeps its argument tree and leaf infos made once."""
    compiled = hlo2dace.jit(_ten_leaves).lower(_tree(0.0)).compile()
    for offset in range(3):
        tree = _tree(float(offset))
        _assert_like_jax_jit(compiled(tree), jax.jit(_ten_leaves)(tree))
    with pytest.raises(ArgumentError, match="structured as"):
        compiled({"k0": jnp.zeros(3, jnp.float32)})
