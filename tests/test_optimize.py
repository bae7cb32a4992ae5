"""Optimisation levels and what the default level fuses: recomputed views of pending
values (a stencil's fluxes never reach memory), and the cases where recomputing would read
an element already overwritten, which must fall back to arrays. Checked on the SDFG and
against jax.jit (no timing in unit tests)."""

import dace
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import hlo2dace
from hlo2dace.optimize import LEVELS

from util import assert_arrays_match


def _maps(sdfg):
    return [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.MapEntry)]


def _transient_shapes(sdfg):
    return sorted(tuple(d.shape) for _, _, d in sdfg.arrays_recursive()
                  if d.transient and isinstance(d, dace.data.Array))


def stencil(u):
    """Fluxes as slices of differences, their divergence, written into the interior."""
    flux_x = u[1:, 1:-1] - u[:-1, 1:-1]
    flux_y = u[1:-1, 1:] - u[1:-1, :-1]
    divergence = (flux_x[1:] - flux_x[:-1]) + (flux_y[:, 1:] - flux_y[:, :-1])
    return u.at[1:-1, 1:-1].set(u[1:-1, 1:-1] + 0.1 * divergence)


def chain(x, y):
    a = jnp.sin(x) * y + 1.0
    b = jnp.exp(-jnp.abs(a)) - x[::-1]
    return jnp.tanh(b) * a, (a[1:] - a[:-1]).sum()


def _check(fun, *args, optimize):
    """XLA contracts products into fused multiply-adds and sums in its own order, so the
    differences cancelling in these stencils give absolute, not relative, errors."""
    expected = jax.jit(fun)(*args)
    actual = hlo2dace.jit(fun, optimize=optimize)(*args)
    for e, a in zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(actual)):
        atol = 1e-5 if np.asarray(e).dtype == np.float32 else 1e-12
        assert_arrays_match(e, a, ulp=4, atol=atol * max(1.0, float(np.nanmax(
            np.abs(np.where(np.isfinite(e), e, 0))))))


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_level_matches_xla(level, dtype):
    rng = np.random.default_rng(0)
    u = rng.standard_normal((17, 23)).astype(dtype)
    _check(stencil, u, optimize=level)
    x, y = rng.standard_normal(40).astype(dtype), rng.standard_normal(40).astype(dtype)
    x[:3] = [np.nan, np.inf, -0.0]
    _check(chain, x, y, optimize=level)


def test_levels_emit_what_they_say():
    u = np.ones((17, 23))
    maps = {level: len(_maps(hlo2dace.jit(stencil, optimize=level).lower(u).as_sdfg()))
            for level in LEVELS}
    assert maps["none"] > maps["default"] == maps["aggressive"]
    x = np.ones(40)
    lowered = {level: hlo2dace.jit(chain, optimize=level).lower(x, x) for level in LEVELS}
    assert len({low.key for low in lowered.values()}) == 3
    assert all("-ffast-math" not in low.level.cpu_flags for low in lowered.values())
    # a broadcast of a pending profile: written once by default, recomputed when aggressive
    t, p = np.ones((4, 6)), np.ones(6)
    profile = {level: _transient_shapes(hlo2dace.jit(
        lambda t, p: t * jnp.exp(-p * 1e-4)[None, :], optimize=level).lower(t, p).as_sdfg())
        for level in ("default", "aggressive")}
    assert profile == {"default": [(6,)], "aggressive": []}, profile


def test_fluxes_are_recomputed_not_stored():
    sdfg = hlo2dace.jit(stencil, optimize="default").lower(np.ones((17, 23))).as_sdfg()
    # the fluxes (16x21, 15x22), the divergence and the new interior are never written:
    # the update computes them; u is copied into the result first
    assert _transient_shapes(sdfg) == [], _transient_shapes(sdfg)
    assert len(_maps(sdfg)) == 2


def test_unknown_level_is_refused():
    with pytest.raises(hlo2dace.ArgumentError, match="aggressive"):
        hlo2dace.jit(stencil, optimize="fast")


def test_view_of_a_value_its_own_map_writes():
    """A reversed and a shifted read of a returned value, in the same map that writes it."""
    def f(x):
        y = x * 2.0 + 1.0
        return y, y[::-1] + y, jnp.roll(y, 3) * y

    def g(x):  # y only through views: recomputed at the other index, never stored
        y = x * 2.0 + 1.0
        return y[::-1] * y

    def h(x):  # y also in an array (the sum reads it), written by the same map
        y = x * 2.0 + 1.0
        return y[::-1] * y, jnp.sum(y)

    _check(f, np.arange(33.0), optimize="default")
    _check(g, np.arange(33.0), optimize="default")
    _check(h, np.arange(33.0), optimize="default")
    sdfg = hlo2dace.jit(g, optimize="default").lower(np.arange(33.0)).as_sdfg()
    assert _transient_shapes(sdfg) == [] and len(_maps(sdfg)) == 1


def test_view_of_a_pending_value_in_a_loop_updated_in_place():
    """The carried array is written in place by the body; a slice of the new value read
    in the same body must not see elements already overwritten."""
    def f(x):
        def body(_, x):
            y = x * 0.5 + 1.0
            return y.at[1:].add(y[:-1])
        return lax.fori_loop(0, 4, body, x)

    def g(x):
        def body(_, x):
            y = jnp.sin(x)
            return y + jnp.concatenate([y[1:], y[:1]])
        return lax.fori_loop(0, 3, body, x)

    def h(x, r):  # x's array is updated in place by y's map, where q[::-1] reads it
        def body(_, carry):
            x, r = carry
            y = x * 0.5 + 1.0
            q = y * 3.0
            return y, q[::-1] + r
        return lax.fori_loop(0, 3, body, (x, r))

    _check(f, np.arange(20.0), optimize="default")
    _check(g, np.linspace(0, 3, 20), optimize="default")
    _check(h, np.arange(20.0), np.ones(20), optimize="default")


def test_view_read_by_other_ops_and_through_calls():
    @jax.jit
    def inner(a, b):
        return a * b - 1.0

    def f(x, w):
        h = jnp.cos(x) + 2.0
        top, bottom = h[:4], h[4:]
        return top @ w, inner(bottom, h[:-4]).sum(axis=0), jnp.maximum(top.T, 0.0)

    rng = np.random.default_rng(1)
    _check(f, rng.standard_normal((8, 4)), rng.standard_normal((4, 3)), optimize="default")


def test_update_in_place_reading_its_operand_through_a_view():
    def f(x):
        x = x * 3.0
        y = x.at[1:-1].set(x[2:] - x[:-2])
        return y.at[0].set(y[-1])

    _check(f, np.arange(12.0) ** 2, optimize="default")
