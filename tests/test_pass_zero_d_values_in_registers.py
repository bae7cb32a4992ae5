"""The zero_d_values_in_registers pass: 0-d values that one state computes and reads are
DaCe scalars (registers), not arrays of the state struct."""

import re

import dace
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import hlo2dace

from pass_util import built_code, check_pass, operands

PASS = "zero_d_values_in_registers"


def _zero_d(fun, *args, disable=()) -> dict[str, str]:
    """The program's transient 0-d values, each as the kind of data that holds it."""
    sdfg = hlo2dace.jit(fun, disable_passes=disable).lower(*args).as_sdfg()
    return {name: type(data).__name__ for graph in sdfg.all_sdfgs_recursive()
            for name, data in graph.arrays.items()
            if data.transient and tuple(data.shape) == (1,)}


def _gradient_descent(x, y):
    # the mean's gradient scale -1/n is a 0-d value of the loop's body, read by the map
    # over the points (GCC left that map scalar while the scale lived in memory)
    def loss(w):
        p = jax.nn.sigmoid(x @ w)
        return -jnp.mean(y * jnp.log(p + 1e-7) + (1 - y) * jnp.log(1 - p + 1e-7))

    return lax.fori_loop(0, 5, lambda _, w: w - 0.1 * jax.grad(loss)(w), jnp.zeros(x.shape[1]))


def _conjugate_gradient(b):
    # alpha and beta: 0-d values computed from reductions in each step, read by maps
    def step(_, state):
        x, r, p, rr = state
        ap = 4 * p - jnp.roll(p, 1, 0) - jnp.roll(p, -1, 0)
        alpha = rr / jnp.vdot(p, ap)
        x, r = x + alpha * p, r - alpha * ap
        rr_new = jnp.vdot(r, r)
        return x, r, r + rr_new / rr * p, rr_new

    return lax.fori_loop(0, 5, step, (jnp.zeros_like(b), b, b, jnp.vdot(b, b)))[0]


def test_a_gradient_steps_scale_is_a_register():
    x, = operands((256, 8))
    y = (x[:, 0] > 0).astype(np.float32)
    with_pass, without = _zero_d(_gradient_descent, x, y), \
        _zero_d(_gradient_descent, x, y, disable=(PASS,))
    assert "Scalar" in with_pass.values() and "Scalar" not in without.values()
    check_pass(PASS, _gradient_descent, x, y, rtol=2e-6, atol=1e-7)


def test_the_register_is_a_local_of_the_states_block():
    x, = operands((256, 8))
    y = (x[:, 0] > 0).astype(np.float32)

    def locals_(code: str) -> list[str]:
        # (the tasklets' connectors are locals too: named __*)
        return re.findall(r"^ +(?:float|double) ([A-Za-z]\w*);$", code, re.MULTILINE)

    assert locals_(built_code(_gradient_descent, x, y))
    assert not locals_(built_code(_gradient_descent, x, y, disable=(PASS,)))


def test_conjugate_gradient_steps():
    b, = operands((128, 16), dtype=np.float64)
    assert list(_zero_d(_conjugate_gradient, b).values()).count("Scalar") >= 2
    check_pass(PASS, _conjugate_gradient, b, rtol=1e-12, atol=1e-12)


def test_a_loop_carry_stays_in_memory():
    """A value read in the next run of the loop's body lives between the runs: it is read
    before the body writes it."""
    x, = operands((64, 8))
    values = _zero_d(lambda x: lax.fori_loop(0, 5, lambda i, s: s * 1.5 + x[i, 0], x[0, 0]), x)
    carried = {name: kind for name, kind in values.items() if name.startswith("carry")}
    assert carried and "Scalar" not in carried.values()


def test_a_value_that_a_loops_condition_reads_stays_in_memory():
    x, = operands((64, 8))

    def doubling(x):
        return lax.while_loop(lambda c: c[1] < 10.0,
                              lambda c: (c[0] * 2, jnp.abs(c[0]).max() + c[1]),
                              (x, jnp.float32(0)))

    sdfg = hlo2dace.jit(doubling).lower(x).as_sdfg()
    # the loop's exit: a conditional break on the condition's value
    conditions = [code for region in sdfg.all_control_flow_regions()
                  if isinstance(region, dace.sdfg.state.ConditionalBlock)
                  for code in region.get_meta_codeblocks()]
    read = {name for code in conditions for name in code.get_free_symbols()} & set(sdfg.arrays)
    assert read and all(type(sdfg.arrays[name]) is dace.data.Array for name in read)
    result, expected = hlo2dace.jit(doubling)(x), jax.jit(doubling)(x)
    for a, e in zip(result, expected):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45])
def test_special_scales(special):
    """NaN, infinities, signed zeros and a subnormal through a scale held in a register
    (the program flushes subnormals, as XLA's code does)."""
    def scaled(x, s):
        return lax.fori_loop(0, 3, lambda _, v: v * (s * 2 - x[0]), x)

    x, = operands((64,))
    s = np.float32(special)
    assert "Scalar" in _zero_d(scaled, x, s).values()
    np.testing.assert_array_equal(np.asarray(hlo2dace.jit(scaled)(x, s)),
                                  np.asarray(jax.jit(scaled)(x, s)))


def _loop_of_one_state(read_first: bool, pointer: bool = False) -> dace.SDFG:
    """A loop whose body is one state that updates a 0-d transient ``acc`` (reading it
    before it writes it, ``read_first``) and copies it to the result."""
    sdfg = dace.SDFG("one_state_loop")
    sdfg.add_array("acc", (1,), dace.float64, transient=True,
                   lifetime=dace.AllocationLifetime.Persistent)
    sdfg.add_array("out", (1,), dace.float64)
    loop = dace.sdfg.state.LoopRegion("loop", "i < 4", "i", "i = 0", "i = i + 1")
    sdfg.add_node(loop, is_start_block=True)
    state = loop.add_state("body", is_start_block=True)
    update = state.add_tasklet("update", {"a"} if read_first else set(), {"b"},
                               "b = a + 1" if read_first else "b = 1")
    if read_first:
        state.add_edge(state.add_read("acc"), None, update, "a", dace.Memlet("acc[0]"))
    written = state.add_access("acc")
    state.add_edge(update, "b", written, None, dace.Memlet("acc[0]"))
    copy = state.add_tasklet("copy", {"a": dace.pointer(dace.float64) if pointer else None},
                             {"b"}, "b = a[0]" if pointer else "b = a")
    state.add_edge(written, None, copy, "a", dace.Memlet("acc[0]"))
    state.add_edge(copy, "b", state.add_write("out"), None, dace.Memlet("out[0]"))
    return sdfg


def test_the_rule_on_one_states_loop():
    """A value that the state reads before it writes it comes from the state's previous
    run: it stays in memory; one written first, read by value, is a register; one that a
    tasklet reads through a pointer stays in memory."""
    from hlo2dace.sdfg_passes.registers import in_registers

    assert in_registers(_loop_of_one_state(read_first=True)) == []
    assert in_registers(_loop_of_one_state(read_first=False)) == ["acc"]
    assert in_registers(_loop_of_one_state(read_first=False, pointer=True)) == []
