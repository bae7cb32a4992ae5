"""Differential tests of translate/control.py against jax.jit: inlined calls (nested
jax.jit functions with several results, calls inside calls, callee results returned by main
or fused into the caller's elementwise ops), while loops (counted and data-dependent,
scans, nesting, carried values swapped or passed through), case/if, and the SDFG structure
the loops get (DaCe loop regions, in-place updates of carried arrays)."""

from __future__ import annotations

import dace
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import hlo2dace

from util import assert_arrays_match, assert_matches_jax, special_values


def sample(dtype, shape, seed: int = 0) -> np.ndarray:
    """Random values (integers: with the extremes; floats: finite, as XLA contracts
    multiply-adds into FMAs whose overflow differs)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        values = special_values(dtype, rng, random=max(8, int(np.prod(shape))))
        return np.resize(rng.permutation(values), shape).astype(dtype)
    return (rng.standard_normal(shape) * 10).astype(dtype)


@jax.jit
def pair(a, b):
    return a - b, jnp.maximum(a, b)


@jax.jit
def scale(a, s):
    return a * s


@jax.jit
def nested(a, b):
    p, q = pair(a, b)
    return scale(p, 2.0) + pair(q, p)[1]


@jax.jit
def deep(a):
    return nested(a, a[::-1]) * nested(a[::-1], a)


@jax.jit
def passthrough(a, b):
    return a, b.T, b  # an argument, a view of one, the other unchanged


@jax.jit
def constant_result(a):
    return jnp.full(a.shape, 3.0, a.dtype), jnp.asarray(np.arange(4.0, dtype=np.float64))


@jax.jit
def product(a, b):
    return a @ b


@jax.jit
def slices(a, i):
    zero = jnp.zeros((), i.dtype)
    return lax.dynamic_slice(a, (i, zero), (2, a.shape[1])), jnp.concatenate([a, a[::-1]], 0)


def test_calls():
    x = sample(np.float64, (3, 4))
    y = sample(np.float64, (3, 4), seed=1)
    s = np.float64(-1.5)

    def f(x, y, s):
        p1, q1 = pair(x, y)
        p2, q2 = pair(y, x)  # the same callee, other arguments
        a, b, c = passthrough(x, y)
        k1, k2 = constant_result(x)
        return {
            "p1": p1, "q1": q1, "p2": p2, "q2": q2,  # callee results returned by main
            "fused": p1 * q2 + scale(x, s),  # callee results read by the caller's map
            "nested": nested(x, y),  # calls inside calls
            "deep": deep(x[0]),
            "same_callee_twice": scale(x, s) - scale(y, 2 * s),
            "passthrough": (a, b, c),
            "passthrough_then_op": b * 2,
            "constants": (k1, k2, k2[::-1] + 1),
            "views_into_call": pair(x.T, y[::-1].T),
            "literal_into_call": pair(jnp.full((3, 4), 2.0), x),
            "scalar_call": scale(s, s),
            "product_call": product(x, y.T) + product(x.T, y)[:3, :3],
            "empty_call": pair(x[:0], y[:0]),
        }

    # XLA contracts products feeding sums (p1 * q2 + x * s) into fused multiply-adds;
    # hlo2dace rounds each op as StableHLO specifies, so such results may differ by 1 ULP
    # (a few in the matrix products, whose dot products XLA also computes with FMAs)
    assert_matches_jax(f, x, y, s, ulp=1, tolerances={"['product_call']": 8})


def test_main_returns_arguments():
    """Main returning an argument unchanged, twice, as views, and a result twice."""
    x = sample(np.int32, (2, 3))
    s = sample(np.float32, ())
    e = np.zeros((0, 5), np.complex64)

    def f(x, s, e):
        y = x + 1
        return x, x, s, e, y, y, x.T, x[::-1, 1:], s.reshape(1, 1), pair(y, y)[0], y

    assert_matches_jax(f, x, s, e)


@pytest.mark.parametrize("index_dtype", [np.int32, np.uint32])
def test_calls_with_dynamic_indices(index_dtype):
    x = sample(np.float32, (5, 3))

    def f(x, i):
        a, b = slices(x, i)
        c, d = slices(b, i + 3)
        return a, b, c, d, slices(x.T.T, i)[0] * 2

    compiled = hlo2dace.jit(f)
    for i in (0, 2, 4, 7, np.iinfo(index_dtype).max):
        expected, actual = jax.jit(f)(x, index_dtype(i)), compiled(x, index_dtype(i))
        for k, (e, a) in enumerate(zip(expected, actual)):
            assert_arrays_match(e, a, where=f"result {k} at i={i}")


CALL_MODULE = """
func.func @main(%x: tensor<3xf32>, %y: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>,
                                                          tensor<3xf32>, tensor<3xf32>) {
  %0:2 = func.call @twice(%x, %y) : (tensor<3xf32>, tensor<3xf32>)
      -> (tensor<3xf32>, tensor<3xf32>)
  %1:2 = func.call @twice(%0#1, %0#0) : (tensor<3xf32>, tensor<3xf32>)
      -> (tensor<3xf32>, tensor<3xf32>)
  %2 = func.call @id(%1#0) : (tensor<3xf32>) -> tensor<3xf32>
  return %2, %1#1, %0#0, %2 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}
func.func private @twice(%a: tensor<3xf32>, %b: tensor<3xf32>)
    -> (tensor<3xf32>, tensor<3xf32>) {
  %0 = stablehlo.add %a, %a : tensor<3xf32>
  return %0, %b : tensor<3xf32>, tensor<3xf32>
}
func.func private @id(%a: tensor<3xf32>) -> tensor<3xf32> {
  return %a : tensor<3xf32>
}
"""


def test_call_text():
    """Calls written by hand: callees that return an argument, a result returned twice."""
    x = np.array([1.0, -2.0, 0.5], np.float32)
    y = np.array([3.0, 4.0, -5.0], np.float32)
    results = hlo2dace.compile_text(CALL_MODULE)(x, y)
    expected = [2 * y, 2 * x, 2 * x, 2 * y]
    for k, (e, a) in enumerate(zip(expected, results)):
        assert_arrays_match(e, a, where=f"result {k}")


def test_unknown_callee():
    module = """
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = func.call @missing(%x) : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
"""
    from hlo2dace.errors import Hlo2DaceError

    with pytest.raises(Hlo2DaceError, match="missing"):
        hlo2dace.compile_text(module)


def test_composite_runs_its_decomposition():
    """`lax.composite` emits stablehlo.composite; the frontend legalises it into a call of
    its decomposition (StableHLO's own pass), which is then inlined."""
    tangent = lax.composite(lambda x: jnp.sin(x) / jnp.cos(x), name="my.tangent")
    x = np.linspace(-1.0, 1.0, 9)
    lowered = hlo2dace.jit(lambda x: tangent(x) * 2.0, optimize="default").lower(x)
    assert "stablehlo.composite" not in lowered.as_text()
    # sin and cos: libmvec's SIMD versions, up to 3 ULP each (docs/vector-math.md)
    assert_matches_jax(lambda x: tangent(x) * 2.0, x, ulp=8)


# ------------------------------------------------------------------------ loops


def body_rnn(params, h, x):
    w, u = params
    return jnp.tanh(w @ h + u @ x)


@pytest.mark.parametrize("lower,upper", [(0, 10), (3, 3), (5, 2), (-4, 3)])
def test_fori_loop_static_bounds(lower, upper):
    x = sample(np.float64, (5,))
    assert_matches_jax(lambda x: lax.fori_loop(lower, upper, lambda i, c: c * 0.5 + i, x), x,
                       ulp=16)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_fori_loop_traced_bounds(index_dtype):
    x = sample(np.float32, (4, 3))

    def f(x, lower, upper):
        return lax.fori_loop(lower, upper, lambda i, c: c * 0.5 + i.astype(c.dtype), x)

    compiled, reference = hlo2dace.jit(f), jax.jit(f)
    for lower, upper in [(0, 7), (2, 9), (5, 5), (6, 1), (-3, 2)]:
        args = (x, index_dtype(lower), index_dtype(upper))
        assert_arrays_match(reference(*args), compiled(*args), where=f"{lower}..{upper}")


def test_while_loop_data_dependent_exit():
    """Newton's method for square roots until the residual is below a tolerance, and the
    iteration count it took."""
    a = np.abs(sample(np.float64, (6,))) + 1.0

    def newton(a):
        def step(state):
            x, n = state
            return (x + a / x) / 2, n + 1

        return lax.while_loop(lambda s: jnp.max(jnp.abs(s[0] * s[0] - a)) > 1e-9 * jnp.max(a),
                              step, (a, 0))

    assert_matches_jax(newton, a)


def test_while_loop_that_never_runs_and_constant_conditions():
    x = sample(np.int32, (3,))
    assert_matches_jax(lambda x: lax.while_loop(lambda c: c[0] > 10 ** 9, lambda c: c + 1, x), x)
    assert_matches_jax(lambda x: lax.while_loop(lambda c: False, lambda c: c + 1, x), x)


def test_scan_carries_a_pytree_and_stacks_outputs():
    xs = sample(np.float32, (7, 3))

    def f(xs):
        def step(carry, x):
            total, count = carry
            return (total + x, count + 1), {"running": total * x, "count": count}

        return lax.scan(step, (jnp.zeros(3, xs.dtype), jnp.int32(0)), xs)

    assert_matches_jax(f, xs)


@pytest.mark.parametrize("reverse,unroll", [(False, 1), (True, 1), (False, 3), (True, 2)])
def test_scan_reverse_and_unrolled(reverse, unroll):
    xs = sample(np.float64, (10, 2))
    # c * 0.9 + x is one FMA in XLA's code, two roundings here: errors compound over steps
    assert_matches_jax(lambda xs: lax.scan(lambda c, x: (c * 0.9 + x, c - x), xs[0], xs,
                                           reverse=reverse, unroll=unroll), xs, ulp=16)


def test_nested_scans_and_loops_with_reductions_and_matmuls():
    xs = sample(np.float64, (4, 5, 3))
    w = sample(np.float64, (3, 3), seed=2) / 30

    def f(xs, w):
        def outer(c, row):
            inner = lax.scan(lambda h, x: (jnp.tanh(h @ w + x), jnp.sum(h * x)), c, row)
            return inner[0], inner[1].max()

        final, peaks = lax.scan(outer, jnp.zeros(3, xs.dtype), xs)
        counted = lax.fori_loop(0, 3, lambda i, m: m @ w + jnp.sum(m, axis=0), w)
        return final, peaks, counted

    assert_matches_jax(f, xs, w, ulp=4)


def test_carried_values_swapped_and_passed_through():
    x = sample(np.int64, (4,))

    def f(x):
        def step(i, c):
            a, b, k = c
            return b, a + i, k  # swap, update, pass through

        return lax.fori_loop(0, 5, step, (x, x[::-1], x * 2))

    assert_matches_jax(f, x)


def test_loop_in_branch_and_branch_in_loop():
    x = sample(np.float32, (6,))

    def f(x, p):
        looped = lax.cond(p > 0, lambda x: lax.fori_loop(0, 4, lambda i, c: c * 2 - 1, x),
                          lambda x: -x, x)
        branched = lax.fori_loop(0, 6, lambda i, c: lax.cond(i % 2 == 0, lambda c: c + 1.0,
                                                             lambda c: c * 0.5, c), x)
        return looped, branched

    assert_matches_jax(f, x, np.int32(1))
    assert_matches_jax(f, x, np.int32(-1))


def test_lax_map():
    x = sample(np.float64, (5, 4))
    assert_matches_jax(lambda x: lax.map(lambda r: r.sum() * r, x), x)


def test_grad_of_scan_rnn():
    rng = np.random.default_rng(3)
    w, u = rng.standard_normal((4, 4)) / 4, rng.standard_normal((4, 2)) / 2
    xs = rng.standard_normal((6, 2))

    def loss(params, xs):
        final, hs = lax.scan(lambda h, x: (body_rnn(params, h, x),) * 2, jnp.zeros(4), xs)
        return jnp.sum(hs ** 2) + jnp.sum(final)

    # backpropagation through tanh and matrix products: XLA's FMAs and summation order
    assert_matches_jax(jax.grad(loss), (w, u), xs, rtol=1e-12, atol=1e-15)


def test_checkpointed_loop_body():
    x = sample(np.float64, (8,))

    def f(x):
        step = jax.checkpoint(lambda c, _: (jnp.sin(c) * c, c.sum()))
        return lax.scan(step, x, None, length=4)

    assert_matches_jax(jax.grad(lambda x: f(x)[0].sum()), x, ulp=4)


# ---------------------------------------------------------------------- branches


@pytest.mark.parametrize("predicate", [True, False])
def test_cond_with_outputs_of_several_dtypes(predicate):
    x = sample(np.float32, (3, 2))

    def f(x, p):
        return lax.cond(p, lambda x: (x * 2, jnp.int8(3), x.sum() > 0, x.astype(jnp.complex64)),
                        lambda x: (x.T.T - 1, jnp.int8(-4), x.max() < 0, x * 1j), x)

    assert_matches_jax(f, x, np.bool_(predicate))


@pytest.mark.parametrize("index", [-3, 0, 1, 2, 99])
def test_switch_clamps_its_index(index):
    x = sample(np.float64, (4,))
    branches = [lambda x: x, lambda x: x * 2, lambda x: jnp.cumsum(x)]
    assert_matches_jax(lambda i, x: lax.switch(i, branches, x), np.int32(index), x)


CASE_MODULE = """
func.func @main(%i: tensor<i32>, %x: tensor<2xf32>) -> (tensor<2xf32>, tensor<i32>) {
  %r:2 = "stablehlo.case"(%i) ({
    %c = stablehlo.constant dense<10> : tensor<i32>
    stablehlo.return %x, %c : tensor<2xf32>, tensor<i32>
  }, {
    %y = stablehlo.add %x, %x : tensor<2xf32>
    %c = stablehlo.constant dense<11> : tensor<i32>
    stablehlo.return %y, %c : tensor<2xf32>, tensor<i32>
  }) : (tensor<i32>) -> (tensor<2xf32>, tensor<i32>)
  return %r#0, %r#1 : tensor<2xf32>, tensor<i32>
}
"""


@pytest.mark.parametrize("index,branch", [(0, 0), (1, 1), (-1, 1), (2, 1), (2 ** 31 - 1, 1)])
def test_case_out_of_range_takes_the_last_branch(index, branch):
    x = np.array([1.5, -2.0], np.float32)
    y, which = hlo2dace.compile_text(CASE_MODULE)(np.int32(index), x)
    assert_arrays_match(x * (branch + 1), y)
    assert int(which) == 10 + branch


# ------------------------------------------------------------------- SDFG structure


def test_counted_loops_become_dace_for_loops_updating_in_place():
    """A scan is a LoopRegion over a symbol, its stacked output is written one row per
    iteration (a map over the row, not over the whole array), and the scanned input,
    which the body only reads, is not copied: the loop reads the argument itself and no
    array of its size exists beside the argument and the result."""
    from dace.sdfg.state import LoopRegion

    xs = sample(np.float64, (50, 3))

    def f(xs):
        return lax.scan(lambda c, x: (c + x, c * x), xs[0], xs)

    assert_matches_jax(f, xs)
    sdfg = hlo2dace.jit(f, optimize="default").lower(xs).as_sdfg()
    loops = [n for n in sdfg.all_control_flow_regions() if isinstance(n, LoopRegion)]
    assert len(loops) == 1 and loops[0].loop_variable
    (argument,) = [name for name, a in sdfg.arrays.items()
                   if not a.transient and not name.startswith("__return")]
    (stacked,) = [name for name, a in sdfg.arrays.items()
                  if name.startswith("__return") and tuple(a.shape) == (50, 3)]
    assert [name for name, a in sdfg.arrays.items()
            if a.transient and int(a.total_size) >= xs.size] == []
    states = [s for s in loops[0].all_control_flow_blocks() if isinstance(s, dace.SDFGState)]
    assert any(isinstance(n, dace.nodes.AccessNode) and n.data == argument
               and state.out_degree(n) for state in states for n in state.nodes())
    maps = _loop_maps(sdfg)
    row_writes = [n for state in states for n in state.nodes()
                  if isinstance(n, dace.nodes.MapExit)
                  and any(e.data.data == stacked for e in state.out_edges(n))]
    assert maps and row_writes, maps
    assert all(int(n.map.range.num_elements()) < xs.size for n in maps), maps
    assert all(int(n.map.range.num_elements()) == 3 for n in row_writes)


def test_scatter_into_a_carried_array_updates_it_in_place():
    """``x.at[idx[i]].add(u[i])`` in a fori_loop: the loop body scatters into the carried
    array itself, which is the result's: no other array of its size exists, the loop
    writes no other, and no map in the loop spans it."""
    x = sample(np.float64, (400,))
    idx = np.random.default_rng(2).integers(0, 400, 30).astype(np.int32)
    u = sample(np.float64, (30,), seed=3)

    def f(x, idx, u):
        return lax.fori_loop(0, 30, lambda i, x: x.at[idx[i]].add(u[i]), x)

    assert_matches_jax(f, x, idx, u)
    sdfg = hlo2dace.jit(f, optimize="default").lower(x, idx, u).as_sdfg()
    assert [name for name, a in sdfg.arrays.items()
            if a.transient and int(a.total_size) >= x.size] == []
    written = {n.data for state, n in _loop_accesses(sdfg) if state.in_degree(n)
               and int(sdfg.arrays[n.data].total_size) == x.size}
    assert written == {"__return0"}
    assert all(int(n.map.range.num_elements()) < 400 for n in _loop_maps(sdfg))


def test_scan_over_a_view_reads_it_in_place():
    """``lax.scan`` over ``xs[::-1]`` and over a transpose (pyhpc's tridiagonal solver):
    each iteration's ``dynamic_slice`` reads its row through the view. Before, the whole
    view was copied on every iteration (two thirds of the back-substitution's time)."""
    xs = sample(np.float64, (40, 3, 5))

    def f(xs):
        def body(c, x):
            return c * 0.5 + x, c - x

        carry, ys = lax.scan(body, jnp.zeros((3, 5)), xs[::-1])
        return carry, ys, lax.scan(body, jnp.zeros((40, 3)), xs.transpose(2, 0, 1))[1]

    assert_matches_jax(f, xs)
    maps = _loop_maps(hlo2dace.jit(f, optimize="default").lower(xs).as_sdfg())
    assert maps and all(int(n.map.range.num_elements()) < xs.size for n in maps), maps


@pytest.mark.parametrize("steps", [0, 1, 4])
def test_chained_loops_run_in_one_array(steps):
    """NPBench's vadv: loops one after another carry the same columns, the last into a
    result. Each loop runs in the array the one before left its value in, and the first
    in the result's own array: nothing copies a carried array between them. A loop whose
    initial value is read afterwards (``x`` below) or is an argument still copies it."""
    x = sample(np.float64, (6, 50))

    def f(x):
        def body(k, c):
            return c.at[k % 6].set(c[(k + 1) % 6] * 0.5 + 1.0)
        a = lax.fori_loop(0, steps, body, x * 2.0)
        b = lax.fori_loop(0, steps + 1, body, a)
        c = lax.fori_loop(0, 3, body, b)
        return c, lax.fori_loop(0, 2, body, x)

    sdfg = hlo2dace.jit(f, optimize="default").lower(x).as_sdfg()
    copies = [n.label for n, _ in sdfg.all_nodes_recursive()
              if isinstance(n, dace.nodes.MapEntry) and n.label.startswith("copy")]
    assert len(copies) == 1, copies  # the argument x into the last loop's carry
    assert_matches_jax(f, x)


def test_a_loop_over_an_updated_carried_array_runs_in_it():
    """NPBench's seidel_2d: each step of a loop updates a row of the carried array, then
    an inner loop updates the row's elements one by one. The row update and the inner
    loop run in the outer loop's array: only the argument is copied into it, where each
    step copied the array twice (5.2 to 0.9 ms at preset M, one thread; XLA 2.6)."""
    a = sample(np.float64, (12, 10))

    def f(a):
        def row(i, a):
            a = a.at[i, 1:-1].set(a[i, 1:-1] + a[i - 1, :-2] + a[i + 1, 2:])
            return lax.fori_loop(1, 9, lambda j, a: a.at[i, j].set((a[i, j] + a[i, j - 1]) / 9),
                                 a)
        return lax.fori_loop(1, 11, row, a)

    sdfg = hlo2dace.jit(f, optimize="default").lower(a).as_sdfg()
    copies = [n.label for n, _ in sdfg.all_nodes_recursive()
              if isinstance(n, dace.nodes.MapEntry) and n.label.startswith("copy")
              and int(n.map.range.num_elements()) == a.size]
    assert len(copies) == 1, copies  # the argument into the loop's array
    assert_matches_jax(f, a)


@pytest.mark.parametrize("steps", [0, 1, 2, 5])
def test_stencil_alternates_two_buffers(steps):
    """A large carried array updated from its neighbours cannot be updated in place: the
    loop alternates between two buffers (the body emitted twice), for even and odd
    iteration counts and traced bounds, carrying a small value beside it."""
    from dace.sdfg.state import LoopRegion

    u = sample(np.float64, (128, 130)) / 10

    def f(u, n):
        def step(i, state):
            u, total = state
            laplacian = (jnp.roll(u, 1, 0) + jnp.roll(u, -1, 0) + jnp.roll(u, 1, 1)
                         + jnp.roll(u, -1, 1) - 4 * u)
            return u + 0.1 * laplacian, total + u[3, 4] * i

        return lax.fori_loop(0, n, step, (u, 0.0))

    assert_matches_jax(f, u, np.int32(steps), rtol=1e-14, atol=1e-14)
    sdfg = hlo2dace.jit(f, optimize="default").lower(u, np.int32(steps)).as_sdfg()
    (loop,) = [n for n in sdfg.all_control_flow_regions() if isinstance(n, LoopRegion)]
    assert "2" in loop.update_statement.as_string  # two iterations per trip


def _loop_states(sdfg):
    """The states inside the SDFG's loop regions."""
    from dace.sdfg.state import LoopRegion

    loops = [n for n in sdfg.all_control_flow_regions() if isinstance(n, LoopRegion)]
    return [state for loop in loops for state in loop.all_control_flow_blocks()
            if isinstance(state, dace.SDFGState)]


def _loop_maps(sdfg):
    """The maps inside the SDFG's loop regions."""
    return [n for state in _loop_states(sdfg) for n in state.nodes()
            if isinstance(n, dace.nodes.MapEntry)]


def _loop_accesses(sdfg):
    """(state, access node) of every array access inside the SDFG's loop regions."""
    return [(state, n) for state in _loop_states(sdfg) for n in state.nodes()
            if isinstance(n, dace.nodes.AccessNode)]


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_stencils_update_carried_arrays_in_place(steps):
    """NPBench's jacobi_2d and fdtd_2d: each array is read by the stencils, then its
    interior (or a chain of windows) is updated. Every update is computed straight into
    the carried array: no map of the loop spans a whole array (no copy per iteration, no
    second buffer), and the loop is not unrolled into two buffers."""
    a = sample(np.float64, (24, 26), seed=1)
    b = sample(np.float64, (24, 26), seed=2)
    c = sample(np.float64, (24, 26), seed=3)
    fict = sample(np.float64, (8,), seed=4)

    def f(a, b, c, fict):
        def step(t, arrays):
            a, b, c = arrays
            b = b.at[1:-1, 1:-1].set(0.2 * (a[1:-1, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:]
                                             + a[2:, 1:-1] + a[:-2, 1:-1]))
            a = a.at[1:-1, 1:-1].set(0.2 * (b[1:-1, 1:-1] + b[1:-1, :-2] + b[1:-1, 2:]
                                            + b[2:, 1:-1] + b[:-2, 1:-1]))
            c = c.at[0, :].set(fict[t])
            c = c.at[1:, :].set(c[1:, :] - 0.5 * (a[1:, :] - a[:-1, :]))
            return a, b, c

        return lax.fori_loop(0, steps, step, (a, b, c))

    assert_matches_jax(f, a, b, c, fict)
    sdfg = hlo2dace.jit(f, optimize="default").lower(a, b, c, fict).as_sdfg()
    maps = _loop_maps(sdfg)
    assert bool(maps) == (steps > 0)  # no loop at all for no steps
    assert all(int(n.map.range.num_elements()) < 24 * 26 for n in maps), maps


@jax.jit
def _update_head(a, v):
    return a.at[0:2].set(v)


#: loop bodies whose update in place would lose a value still to be read, or read an
#: element it already wrote: each must give XLA's result
HAZARDS = {
    # a view of the array read after the update, and an update that reads its own
    # window at other positions
    "view read later": lambda a: (lambda old: a.at[1:4].set(a[0:3] * 2).at[5:8].set(
        old + 1))(a[2:5]),
    # a pending value of the array recomputed after the update
    "pending read later": lambda a: (lambda t: a.at[0].set(5.0).at[1:3].set(t[4:6]))(a * 3),
    # Gauss-Seidel by accident: the update reads neighbours of what it writes
    "neighbours": lambda a: a.at[1:-1].set(a[:-2] + a[2:]),
    # the same window read reversed, and through a view of a pending value
    "reversed window": lambda a: a.at[0:4].set(a[3::-1] + 1),
    "view of pending": lambda a: a.at[1:5].set((a * 2)[1:5][::-1]),
    # the whole array (an index vector of no components) read reversed and in place
    "whole array": lambda a: a.at[:].set(jnp.minimum(a, a[::-1] + a[2])),
    # the same positions: safe, computed in place
    "same positions": lambda a: a.at[1:].set(a[1:] * 2 - a[:-1]),
    # an update in a called function while the caller reads the array afterwards
    "through a call": lambda a: (lambda head: _update_head(a, head[::-1] + 1).at[3:5].set(
        head))(a[0:2]),
    # the array also returned unchanged beside its update
    "returned twice": None,
    # a loop that carries the update: it runs in the array (safe), also with a window of
    # the update carried beside it, or read after the loop
    "loop over the update": lambda a: lax.fori_loop(
        1, 9, lambda j, a: a.at[j].set((a[j] + a[j - 1]) / 9.0), a.at[1:9].set(a[1:9] + a[:8])),
    "window carried beside": lambda a: (lambda b: lax.fori_loop(
        1, 8, lambda j, c: (c[0].at[j].set(c[0][j] + c[1][j - 1]), c[1]), (b, b[2:]))[0])(
        a.at[1:].set(a[1:] * 2)),
    "window read after the loop": lambda a: (lambda b: lax.fori_loop(
        1, 9, lambda j, b: b.at[j].set(b[j] + 1), b) + b[3])(a.at[2:].set(a[2:] * 2)),
}


@pytest.mark.parametrize("case", sorted(HAZARDS))
def test_in_place_updates_keep_what_is_still_read(case):
    a = sample(np.float64, (10,), seed=5) / 10
    if HAZARDS[case] is None:
        def f(a):
            return lax.fori_loop(0, 3, lambda i, s: (s[0].at[2:4].set(s[1][5:7]) + 1,
                                                     s[0] * 2), (a, a[::-1]))
    else:
        def f(a):
            return lax.fori_loop(0, 3, lambda i, a: HAZARDS[case](a), a)
    assert_matches_jax(f, a)


def test_update_in_place_outside_loops_after_other_reads():
    """Outside loops too, an update may take a dead array after other reads of it, but
    not one whose view is read later."""
    x = sample(np.float64, (12,), seed=6)

    def f(x):
        t = jnp.sin(x)  # written to an array of its own (expensive), then updated
        total = jnp.sum(t)
        u = t.at[0:3].set(total)
        later = t[5:8]
        v = jnp.cos(x).at[1].set(2.0)
        return u.at[4:7].set(later * 2), v, total

    assert_matches_jax(f, x, ulp=4)  # sin/cos: libmvec against XLA's, a few units apart


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=str)
def test_a_loop_that_selects_by_a_carried_mask(dtype):
    """Mandelbrot's iteration: complex values, counts and a mask carried, each updated by a
    select. Its fused loop reads and writes seven arrays, which in an OpenMP region needs
    more run-time overlap checks than GCC makes by default to vectorise, and the mask is
    read as bytes (``cpp_split._local``)."""
    rng = np.random.default_rng(0)
    c = (rng.uniform(-2, 0.5, 4096) + 1j * rng.uniform(-1.25, 1.25, 4096)).astype(dtype)

    def mandelbrot(c):
        def body(i, state):
            z, count, last, inside = state
            z = z * z + c
            escaped = (jnp.abs(z) > 2) & inside
            count = jnp.where(escaped, i + 1, count)
            last = jnp.where(escaped, z, last)
            inside = inside & ~escaped
            return jnp.where(inside, z, 0), count, last, inside

        start = (jnp.zeros_like(c), jnp.zeros(c.shape, jnp.int32), jnp.zeros_like(c),
                 jnp.ones(c.shape, bool))
        return lax.fori_loop(0, 30, body, start)

    assert_matches_jax(mandelbrot, c)
