"""How the builder emits code: fused elementwise maps, literals, broadcasting memlets,
persistent transients, shared map parameters. These properties decide speed, so they are
checked on the SDFG itself (no timing in unit tests)."""

import dace
import jax.numpy as jnp
import numpy as np
import pytest

import hlo2dace

from util import assert_matches_jax


def _maps(sdfg):
    return [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.MapEntry)]


def _arrays(sdfg, transient):
    return {name: desc for name, desc in sdfg.arrays.items()
            if desc.transient == transient and isinstance(desc, dace.data.Array)}


def equation_like(t, s, p):
    """A pyhpc-style chain: polynomial terms, scalar constants, a broadcast profile."""
    z = p[None, :] * 1e-4
    a = 999.843 + t * (6.79e-2 + t * (-9.09e-3 + t * 1.0e-4)) + s * (0.824 - 4.1e-3 * t)
    b = jnp.sqrt(jnp.abs(s)) * (-5.7e-3 + 1.0e-4 * t) + 4.8e-4 * s
    rho = a + b * jnp.exp(-z) - jnp.log1p(jnp.abs(t))
    return rho, jnp.tanh(rho) * 2.0


def test_elementwise_chain_is_one_map_with_literals_and_broadcast_memlets():
    t = np.linspace(0, 30, 24).reshape(4, 6)
    s = np.linspace(30, 40, 24).reshape(4, 6)
    p = np.linspace(0, 5000, 6)
    sdfg = hlo2dace.jit(equation_like, optimize="default").lower(t, s, p).as_sdfg()
    maps = _maps(sdfg)
    # the profile is scaled once over its own 1x6 shape, then read through a broadcast by
    # a map whose rows of 6 run as one loop (the collapse_short_rows pass: enough work per
    # gathered element)
    assert sorted(str(m.map.range) for m in maps) == ["0, 0:6", "0:24"], maps
    assert sorted(list(m.map.params) for m in maps) == [["__i0", "__i1"], ["__i1"]]
    transients = _arrays(sdfg, transient=True)
    assert [tuple(d.shape) for d in transients.values()] == [(1, 6)], "no full-size temporaries"
    assert not [n for n in sdfg.arrays if n.startswith("__const")], "constants are literals"
    # one tasklet per map, its code naming every op it computes (for the profiler)
    tasklets = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.Tasklet)
                and n.label != "fp_mode"]
    assert len(tasklets) == len(maps)
    assert sum(t.code.as_string.count("// op stablehlo.") for t in tasklets) > 15
    assert_matches_jax(equation_like, t, s, p, ulp=4)


def test_values_used_outside_a_cluster_become_persistent_arrays():
    def f(x, w):
        h = jnp.sin(x) * 2.0 + 1.0
        return jnp.tanh(h @ w)

    x, w = np.ones((8, 8), np.float32), np.eye(8, dtype=np.float32)
    sdfg = hlo2dace.jit(f, optimize="default").lower(x, w).as_sdfg()
    transients = _arrays(sdfg, transient=True)
    assert len(transients) == 2, transients  # h (the product reads it) and the product
    assert all(t.lifetime == dace.AllocationLifetime.Persistent for t in transients.values())
    assert len(_maps(sdfg)) == 2  # before and after the product
    assert_matches_jax(f, x, w, ulp=4)


def test_integer_ops_of_literals_are_literals():
    """JAX divides by a Python int through a call that converts it (``@floor_divide``,
    ``@remainder``, with ``sign`` of the divisor): computed while translating, the divisor
    is a C++ literal, so the compiler divides by a constant without a branch for zero,
    and no 0-d array holds it. XLA's results for negative, zero and extreme operands."""
    def f(x):
        return x // 7, x % -5, x // 0, x % 0, x // -1

    for dtype in (np.int32, np.int8, np.uint32):
        info = np.iinfo(dtype)
        x = np.array([info.min, info.min + 1, -9, -7, -1, 0, 1, 6, 7, 13, info.max],
                     dtype=np.int64).clip(info.min, info.max).astype(dtype)
        sdfg = hlo2dace.jit(f, optimize="default").lower(x).as_sdfg()
        held = [n for n, d in _arrays(sdfg, transient=True).items() if d.total_size == 1]
        assert not held, f"{dtype.__name__}: literals held in arrays {held}"
        assert_matches_jax(f, x)


def test_dead_ops_are_not_emitted():
    def f(x):
        unused = jnp.exp(x) * 3.0  # noqa: F841
        return x + 1.0

    sdfg = hlo2dace.jit(f, optimize="default").lower(np.ones(4)).as_sdfg()
    code = [n.code.as_string for n, _ in sdfg.all_nodes_recursive()
            if isinstance(n, dace.nodes.Tasklet)]
    assert not any("exp" in c for c in code)


def test_views_compose_without_copies():
    def f(x):
        y = jnp.transpose(x[::-1, 1:5], (1, 0))
        return y * 2.0 + jnp.broadcast_to(x[0, :4][:, None], (4, 6))

    x = np.arange(36.0).reshape(6, 6)
    sdfg = hlo2dace.jit(f, optimize="default").lower(x).as_sdfg()
    assert len(_maps(sdfg)) == 1 and _arrays(sdfg, transient=True) == {}
    assert_matches_jax(f, x)


@pytest.mark.pipeline
def test_a_value_read_twice_at_one_point_counts_once_toward_recomputing():
    """NPBench's hdiff: a limited flux ``where(r * d > 0, 0, r)`` reads ``r`` (itself built
    from a Laplacian at two offsets) twice at one point, and the result reads each flux at
    two offsets. Counted as the tasklet computes it (``r`` once per offset), each flux fits
    the default level's budget: one map, no flux written."""

    def hdiff_like(u, coeff):
        lap = 4.0 * u[1:-1, 1:-1] - (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
        r = lap[1:, 1:-1] - lap[:-1, 1:-1]
        flx = jnp.where(r * (u[2:-1, 2:-2] - u[1:-2, 2:-2]) > 0, 0, r)
        r = lap[1:-1, 1:] - lap[1:-1, :-1]
        fly = jnp.where(r * (u[2:-2, 2:-1] - u[2:-2, 1:-2]) > 0, 0, r)
        return u[2:-2, 2:-2] - coeff * (flx[1:] - flx[:-1] + fly[:, 1:] - fly[:, :-1])

    rng = np.random.default_rng(0)
    u, coeff = rng.standard_normal((12, 11)), rng.standard_normal((8, 7))
    sdfg = hlo2dace.jit(hdiff_like, optimize="default").lower(u, coeff).as_sdfg()
    assert len(_maps(sdfg)) == 1
    assert not [name for name, d in _arrays(sdfg, transient=True).items() if d.total_size > 1]
    assert_matches_jax(hdiff_like, u, coeff)


def test_results_are_written_in_place():
    sdfg = hlo2dace.jit(lambda x: jnp.cos(x) + 1.0, optimize="default").lower(np.ones(5)).as_sdfg()
    assert _arrays(sdfg, transient=True) == {}
    assert len(_maps(sdfg)) == 1


def test_concatenations_read_by_elementwise_ops_are_not_written():
    """``jnp.roll`` is slices and a concatenate: an elementwise consumer reads each element
    from the piece it falls in, so a periodic stencil needs no array for the rolls; a
    concatenation also needed whole (a reduction) is written once. The map is split where
    the part read along the innermost dimension changes, so that each map reads each part
    at an affine index (no select, no clamped index: loops GCC vectorises)."""

    def stencil(u):
        return (jnp.roll(u, 1, 0) + jnp.roll(u, -1, 1) - 2 * u) * 0.5

    def mixed(u, v):
        c = jnp.concatenate([u[:, :2] * 2, jnp.ones((5, 1)), v.T, u[:, ::-1]], axis=1)
        return jnp.sin(c), c.sum(0)

    u = np.arange(30.0).reshape(5, 6)
    sdfg = hlo2dace.jit(stencil, optimize="default").lower(u).as_sdfg()
    maps = _maps(sdfg)
    assert sorted(tuple(map(int, m.map.range[1])) for m in maps) == [(0, 4, 1), (5, 5, 1)]
    tasklets = [n for n, _ in sdfg.all_nodes_recursive()
                if isinstance(n, dace.nodes.Tasklet) and n.label.startswith("fused")]
    assert len(tasklets) == 2
    for tasklet in tasklets:  # selects for the roll along the columns only
        assert tasklet.code.as_string.count("?") == 1, tasklet.code.as_string
    assert not _arrays(sdfg, transient=True)
    assert_matches_jax(stencil, u)
    # sin within libmvec's few ULP where its map vectorises (docs/vector-math.md)
    assert_matches_jax(mixed, u, np.linspace(-1, 1, 15).reshape(3, 5), ulp=4)


def stencil_and_reductions(u, w):
    """Slices, a transpose, broadcasts, a product and reductions: maps whose memlets read
    at the map's point, at offsets, mirrored, strided, or whole arrays."""
    flux = u[1:, :] - u[:-1, :]
    v = (flux[1:] - flux[:-1]) * 0.5 + u[1:-1].T[:, ::-1].T
    return (v @ w, jnp.sum(v, axis=0), jnp.max(v * v[:, :1], axis=1), jnp.cumsum(u, axis=1),
            jnp.exp(u[::2, ::3]))


def test_outer_memlets_are_those_of_dace_s_propagation():
    """The builder propagates memlets at the map's point or an offset from it itself
    (``emitter.point_subset``), strided ones through DaCe: the outer memlets of every map
    are what DaCe's propagation finds."""
    from dace.sdfg.propagation import propagate_subset

    from hlo2dace.translate.emitter import point_subset

    rng = np.random.default_rng(0)
    sdfg = hlo2dace.jit(stencil_and_reductions).lower(
        rng.standard_normal((12, 10)), rng.standard_normal((10, 4))).as_sdfg()
    compared, at_point = 0, 0
    for entry, state in [(n, s) for n, s in sdfg.all_nodes_recursive()
                         if isinstance(n, dace.nodes.MapEntry)]:
        exit_ = state.exit_node(entry)
        paths = ([(e, state.out_edges_by_connector(entry, "OUT_" + e.dst_conn[3:]), False)
                  for e in state.in_edges(entry) if e.dst_conn] +
                 [(e, state.in_edges_by_connector(exit_, "IN_" + e.src_conn[4:]), True)
                  for e in state.out_edges(exit_) if e.src_conn])
        for outer, inner, use_dst in paths:
            memlets = [e.data for e in inner]
            expected = propagate_subset(memlets, sdfg.arrays[outer.data.data], entry.map.params,
                                        entry.map.range, use_dst=use_dst)
            found = outer.data
            assert (str(found.subset), str(found.volume), found.dynamic) == \
                (str(expected.subset), str(expected.volume), expected.dynamic), outer
            compared += 1
            at_point += point_subset(memlets, entry.map, use_dst) is not None
    assert 0 < at_point < compared  # both ways of propagating were compared


def test_values_passed_to_jax_helpers_are_computed_where_they_are_read():
    """``jnp.where`` calls a jitted helper. Inlined, the mask read by it and by two
    reductions is computed in each reduction's loop, as XLA fuses it, and nothing of the
    input's size is written (NPBench's azimint_naive: four passes became two)."""
    def f(data, radius, lo, hi):
        mask = jnp.logical_and(lo <= radius, radius < hi)
        return jnp.where(mask, data, 0).mean(where=mask)

    rng = np.random.default_rng(0)
    data, radius = rng.random(5000), rng.random(5000)
    lo, hi = np.float64(0.25), np.float64(0.5)
    sdfg = hlo2dace.jit(f, optimize="default").lower(data, radius, lo, hi).as_sdfg()
    assert not [name for name, d in _arrays(sdfg, transient=True).items()
                if d.total_size == data.size], "the mask and the selection stay in registers"
    assert_matches_jax(f, data, radius, lo, hi, rtol=1e-13)  # sums in another order
