"""The transient_arena pass (code): arrays of any shape that are never live at once share
the bytes of one allocation, with a compiler barrier before each reuse."""

import jax
import jax.numpy as jnp
import numpy as np

import hlo2dace
from hlo2dace import cpp_split
from hlo2dace.sdfg_passes import liveness

from pass_util import built_code, operands
from util import assert_arrays_match


def _narrowing(x, y, z, w):
    # each product's result has a shape of its own (reuse_transients shares none of
    # them) and is dead once the next product has read it
    a = jnp.sin(x @ x)
    b = jnp.cos(a @ y)
    c = jnp.tanh(b @ z)
    return jnp.sin(c @ w) @ w.T


def _narrowing_operands():
    return operands((256, 256), (256, 224), (224, 192), (192, 160), dtype="float64")


def _check(fun, *args, rtol=1e-9):
    expected = jax.tree_util.tree_leaves(jax.jit(fun)(*args))
    # without reuse_transients, more arrays take part, some becoming live in one state
    for disable in ((), ("transient_arena",), ("reuse_transients",)):
        actual = jax.tree_util.tree_leaves(hlo2dace.jit(fun, disable_passes=disable)(*args))
        for e, a in zip(expected, actual):
            assert_arrays_match(e, a, rtol=rtol, atol=rtol)


def _layout(fun, *args):
    sdfg = hlo2dace.jit(fun).lower(*args).as_sdfg()
    return sdfg, liveness.arena_layout(sdfg)


def test_arrays_of_other_shapes_share_bytes():
    args = _narrowing_operands()
    _check(_narrowing, *args)
    sdfg, arena = _layout(_narrowing, *args)
    assert arena is not None and arena.size < arena.apart
    assert any(arena.reuses.values())
    code = built_code(_narrowing, *args)
    assert cpp_split.ARENA_FIELD in code and liveness.BARRIER in code
    plain = built_code(_narrowing, *args, disable=["transient_arena"])
    assert cpp_split.ARENA_FIELD not in plain and liveness.BARRIER not in plain
    analysed = hlo2dace.jit(_narrowing).lower(*args).compile().memory_analysis()
    without = hlo2dace.jit(_narrowing, disable_passes=("transient_arena",)).lower(
        *args).compile().memory_analysis()
    assert analysed.temp_size_in_bytes < without.temp_size_in_bytes


def _all_live_at_the_end(x, y, z, w):
    # every product's result is read by the last op: they may not share bytes
    a = jnp.sin(x @ x)
    b = jnp.cos(a @ y)
    c = jnp.tanh(b @ z)
    d = c @ w
    return a.sum() + b.sum() + c.sum() + d.sum()


def test_arrays_live_at_once_never_overlap():
    args = _narrowing_operands()
    _check(_all_live_at_the_end, *args)
    _, arena = _layout(_all_live_at_the_end, *args)
    # a, b, c and d take 8 * 256 * (256 + 224 + 192 + 160) bytes at once
    assert arena.size >= 8 * 256 * (256 + 224 + 192 + 160)


def _loop(x, y):
    # what the loop reads lives for the whole loop; what comes before and after shares
    x, y = x / 16, y / 16
    a = jnp.tanh(x @ y)
    z = jax.lax.fori_loop(0, 3, lambda i, c: jnp.sin(c @ y.T) @ y, a)
    b = jnp.cos(z @ y.T)
    return jnp.tanh(b @ x)


def test_a_loop_between():
    x, y = operands((128, 128), (128, 96), dtype="float64")
    _check(_loop, x, y)
    sdfg, arena = _layout(_loop, x, y)
    states, spans = liveness.program_order(sdfg)
    live = liveness.lifetimes(sdfg, states, spans, (liveness.dace.AllocationLifetime.Persistent,))
    for name, reused in (arena.reuses if arena else {}).items():
        for other in reused:  # no two arrays of one loop share bytes
            assert not (live[name].start <= live[other].end
                        and live[other].start <= live[name].end
                        and states[live[name].start] in spans)


def test_the_allocation_comes_before_its_arrays():
    code = """struct p_state_t {
    double * __restrict__ __0_a;
    float * __restrict__ __0_b;
    int * __restrict__ __0_c;
};
p_state_t *__dace_init_p()
{
    __state->__0_b = dace::aligned_new_array<float>(100, 64);
    __state->__0_a = dace::aligned_new_array<double>(100, 64);
    __state->__0_c = dace::aligned_new_array<int>(N, 64);
}
int __dace_exit_p(p_state_t *__state)
{
    dace::aligned_delete_array(__state->__0_b, 64);
    dace::aligned_delete_array(__state->__0_a, 64);
    dace::aligned_delete_array(__state->__0_c, 64);
}
"""
    placed = cpp_split.place_in_arena(code, {"__0_a": 0, "__0_b": 832, "__0_c": 0}, 1280)
    lines = [line.strip() for line in placed.splitlines()]
    arena = lines.index("__state->h2d_arena = dace::aligned_new_array<char>(1280, 64);")
    assert lines[arena + 1] == \
        "__state->__0_b = reinterpret_cast<float *>(__state->h2d_arena + 832);"
    assert "__state->__0_a = reinterpret_cast<double *>(__state->h2d_arena + 0);" in lines
    # a size the pass does not know keeps its own array
    assert "__state->__0_c = dace::aligned_new_array<int>(N, 64);" in lines
    assert "dace::aligned_delete_array(__state->__0_c, 64);" in lines
    assert lines.count("dace::aligned_delete_array(__state->h2d_arena, 64);") == 1
    assert not any("delete_array(__state->__0_a" in line or "delete_array(__state->__0_b"
                   in line for line in lines)
    assert "char * h2d_arena;" in lines
    # fewer than two arrays: nothing changes
    assert cpp_split.place_in_arena(code, {"__0_a": 0}, 832) == code


def test_many_calls_and_inputs_reused():
    """The arena lives as long as the program: later calls see no earlier call's values."""
    args = _narrowing_operands()
    jitted = hlo2dace.jit(_narrowing)
    first = np.asarray(jitted(*args))
    other = [a[::-1].copy() for a in args]
    assert_arrays_match(jax.jit(_narrowing)(*other), jitted(*other), rtol=1e-9, atol=1e-9)
    assert_arrays_match(first, jitted(*args), rtol=0, atol=0)


def _carried(x):
    # the loop's carry becomes live in the state where the product before it dies: the
    # product comes first there, and the carry reuses its bytes (not the other way)
    x = x / 16
    y = jnp.tanh(x @ x)
    z = jax.lax.fori_loop(0, 3, lambda i, c: jnp.sin(c @ x) @ y, y)
    return jnp.cos(jnp.tanh(z @ x) @ x)


def test_arrays_that_become_live_in_one_state():
    x, = operands((32, 32))
    expected = jax.jit(_carried)(x)
    for _ in range(2):  # a wrong order reads what the call before left
        assert_arrays_match(expected, hlo2dace.jit(_carried, disable_passes=(
            "reuse_transients",))(x), ulp=4)
