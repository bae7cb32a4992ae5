"""What the cheap call path of ``hlo2dace.jit`` must keep (issue 47): after a signature's
first call, jax.Array arguments skip the per-argument tests, and once the calls have cost
what taking it does, they go through ``jax.jit`` of the function (its C++ dispatch, the
program as XLA's FFI call); yet every call returns jax.Arrays as ``jax.jit``'s (dtype,
shape, sharding, commitment, weak type, pytree), never memory a later call writes, and
anything else still goes the checked way."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlo2dace
from hlo2dace import api, interop, runtime
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


@pytest.mark.parametrize("routed_calls", [0, 1, 3])
def test_a_deleted_argument_is_an_argument_error_on_the_checked_path(monkeypatch,
                                                                      routed_calls):
    """Before the route is taken, at its first call (which traces) and after it."""
    monkeypatch.setattr(api, "xla_call_after_s", 0.0 if routed_calls else 3600.0)
    fun = hlo2dace.jit(lambda x: x + 1.0)
    x = jnp.arange(4.0, dtype=jnp.float32)
    fun(x)
    for _ in range(routed_calls - 1):
        fun(x)
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


@pytest.fixture
def through_xla(monkeypatch):
    """A signature's calls with jax.Arrays run through XLA from its second on."""
    monkeypatch.setattr(api, "xla_call_after_s", 0.0)


def test_calls_go_through_xla_once_making_results_cost_what_compiling_does(monkeypatch):
    """Direct calls until making their results has cost ``xla_call_after_s`` (what
    taking the route through XLA costs), XLA's from the next call on."""
    fun = hlo2dace.jit(lambda x: (x + 1.0, x * 2.0))
    x = jnp.arange(3.0)
    monkeypatch.setattr(api, "xla_call_after_s", 3600.0)
    before = interop.calls()
    for _ in range(20):
        fun(x)
    assert interop.calls() == before
    monkeypatch.setattr(api, "xla_call_after_s", 0.0)
    fun(x)  # direct, then the route is taken
    assert interop.calls() == before
    fun(x), fun(x)
    assert interop.calls() == before + 2
    assert 0.0 < api.xla_call_after_s < 60.0  # what taking the route took


def _mixed(offset: int):
    """Twelve leaves of ten dtypes (16-bit floats are converted: a program takes them as
    bits, so their arguments are never passed as they are)."""
    dtypes = [jnp.float32, jnp.float64, jnp.int32, jnp.int8, jnp.uint16, jnp.bool_,
              jnp.float32, jnp.int16, jnp.complex64, jnp.int64, jnp.uint8, jnp.complex128]
    return {f"k{i:02d}": jnp.full((2, i + 1), offset + i, dtype)
            for i, dtype in enumerate(dtypes)}


def _mixed_step(d):
    """Doubled leaves, 16-bit floats, a 0-d sum and weakly typed constants as results."""
    return {k: v + v if v.dtype != jnp.bool_ else ~v for k, v in d.items()}, \
        [jnp.sum(d["k00"]), 1.0, 2, d["k02"] * 2, d["k06"].astype(jnp.float16),
         d["k06"].astype(jnp.bfloat16)]


def test_repeated_calls_with_jax_arrays_run_through_xla_as_jax_jit_returns(through_xla):
    """From a function's third call with jax.Arrays (the second takes the route) the
    program runs as XLA's FFI call, whose results XLA makes: still jax.jit's dtypes,
    shapes, weak types and pytree, for a dozen leaves of as many dtypes."""
    fun = hlo2dace.jit(_mixed_step)
    expected_fun = jax.jit(_mixed_step)
    fun(_mixed(0)), fun(_mixed(0))
    before = interop.calls()
    for offset in range(1, 4):
        tree = _mixed(offset)
        _assert_like_jax_jit(fun(tree), expected_fun(tree))
    assert interop.calls() - before == 3  # each run by XLA's FFI call


def test_results_through_xla_are_fresh_and_chained_calls_wait_for_their_arguments(through_xla):
    """A result XLA makes is the caller's: a later call neither writes it nor hands out its
    buffer again, also when the later call takes it as its argument (made by XLA, read
    by the program inside XLA) or returns an argument unchanged."""
    fun = hlo2dace.jit(lambda x, y: (x * 2.0, y, x + y))
    x, y = jnp.arange(5.0), jnp.ones(5)
    kept = [fun(x, y) for _ in range(3)]
    values = [[np.array(a) for a in results] for results in kept]
    chained = kept[-1]
    for _ in range(5):
        chained = fun(chained[0], chained[2])
    np.testing.assert_array_equal(np.asarray(chained[0]), np.arange(5.0) * 64.0)
    pointers = {a.unsafe_buffer_pointer() for results in kept for a in results}
    assert len(pointers) == 9 and y.unsafe_buffer_pointer() not in pointers
    for results, copies in zip(kept, values):
        for a, copy in zip(results, copies):
            np.testing.assert_array_equal(np.asarray(a), copy)


def test_committed_arguments_give_what_the_first_call_gave_on_every_call(through_xla):
    """Results are committed to the device where an argument is, as jax.jit's, on XLA's
    way as on the direct one (the first call's), and uncommitted where none is."""
    fun = hlo2dace.jit(lambda x, y: (x - 1.0, x * y))
    expected_fun = jax.jit(lambda x, y: (x - 1.0, x * y))
    x = jax.device_put(jnp.arange(3.0), jax.devices("cpu")[0])
    y = jnp.ones(3)
    for args in ((x, y), (y, x), (y, y)):
        first = fun(*args)
        _assert_like_jax_jit(first, expected_fun(*args))
        for _ in range(3):
            _assert_like_jax_jit(fun(*args), first)
    assert first[0].sharding == x.sharding and not first[0].committed


def test_a_call_with_concrete_arrays_under_a_trace_stays_concrete(through_xla):
    """Inside a function JAX traces, a call on arrays it closes over runs there and then, as
    before the call went through XLA: the trace sees a constant, not an FFI call."""
    fun = hlo2dace.jit(lambda x: (x * 3.0, x))
    x = jnp.arange(4.0)
    fun(x), fun(x)
    seen = []

    def traced(y):
        result, _ = fun(x)
        seen.append(isinstance(result, jax.core.Tracer))
        return result + y

    np.testing.assert_array_equal(np.asarray(jax.jit(traced)(1.0)), np.arange(4.0) * 3.0 + 1.0)
    assert seen == [False]


def test_threads_calling_through_xla_and_directly_share_the_program_one_at_a_time(
        through_xla, monkeypatch):
    """Calls under ``jax.disable_jit`` run the program directly, the others through XLA:
    both hold the lock of the program's state, so calls from many threads never overlap
    in it (the sort's and the scan's buffers, allocated once per program: without the
    handler's lock on the direct calls this fails about every other run). The thread
    count is fixed, as on one core: a program whose count is tuned per call is only
    ever called directly."""
    monkeypatch.setattr(runtime.program, "thread_tuner", lambda parallel: None)
    fun = hlo2dace.jit(lambda x: (jnp.cumsum(jnp.sort(x)[::-1]) * 2.0, jnp.sum(x * x)))
    rng = np.random.default_rng(0)
    data = [rng.permutation(np.arange(k, k + (1 << 17), dtype=np.float64)) for k in range(8)]
    expected = [(np.cumsum(np.sort(d)[::-1]) * 2.0, np.sum(d * d)) for d in data]
    fun(jnp.asarray(data[0])), fun(jnp.asarray(data[0]))
    assert fun._route
    before = interop.calls()
    errors = []

    def work(k: int) -> None:
        for n in range(30):
            arg = data[(k + n) % 8]
            if (k + n) % 2:
                got = fun(jnp.asarray(arg))
            else:
                with jax.disable_jit():
                    got = fun(arg)
            want = expected[(k + n) % 8]
            if not (np.array_equal(np.asarray(got[0]), want[0])
                    and np.isclose(float(got[1]), want[1], rtol=1e-12)):
                errors.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and interop.calls() - before == 90


def test_the_route_runs_the_program_compiled_for_the_direct_calls(through_xla, monkeypatch):
    """Taking the route compiles nothing again: its trace adopts the direct calls' program;
    a new shape compiles one program, as a direct call would."""
    fun = hlo2dace.jit(lambda x: jnp.tanh(x) * 2.0)
    x = jnp.linspace(-2.0, 2.0, 7)
    fun(x), fun(x)
    compiles = []
    compile_ = api.Lowered.compile
    monkeypatch.setattr(api.Lowered, "compile",
                        lambda self, *a, **k: compiles.append(1) or compile_(self, *a, **k))
    before = interop.calls()
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(fun(x)), np.tanh(np.asarray(x)) * 2.0,
                                   rtol=1e-6)
    assert interop.calls() - before == 3 and compiles == []
    longer = jnp.linspace(-1.0, 1.0, 9)
    np.testing.assert_allclose(np.asarray(fun(longer)), np.tanh(np.asarray(longer)) * 2.0,
                               rtol=1e-6)
    assert len(compiles) == 1


def test_the_route_keeps_static_keyword_and_donated_arguments_as_jax_jit(through_xla):
    def step(params, grads, *, rate, scale):
        return {k: (v - rate * grads[k]) * scale for k, v in params.items()}

    fun = hlo2dace.jit(step, static_argnames="rate", donate_argnums=0)
    reference = jax.jit(step, static_argnames="rate", donate_argnums=0)
    grads = {"w": jnp.ones((3, 2)), "b": jnp.full(2, 2.0)}

    def params():
        return {"w": jnp.zeros((3, 2)), "b": jnp.ones(2)}

    for rate in (0.5, 0.5, 0.5, 0.25, 0.25, 0.25):
        given = params()
        _assert_like_jax_jit(fun(given, grads, rate=rate, scale=jnp.float32(3.0)),
                             reference(params(), grads, rate=rate, scale=jnp.float32(3.0)))
    assert fun._route
    with pytest.raises(RuntimeError, match="deleted"):
        np.asarray(given["w"])  # donated, as jax.jit donates


def test_transformations_and_traces_of_a_routed_function_as_before(through_xla):
    """Once calls go through XLA, grad, vmap and jax.jit of the function still trace it as
    one primitive each, and a call under ``jax.disable_jit`` runs it directly."""
    fun = hlo2dace.jit(lambda x: jnp.sin(x) * x)
    x = jnp.linspace(0.0, 1.0, 6)
    fun(x), fun(x), fun(x)
    assert fun._route
    expected = np.sin(np.asarray(x)) + np.asarray(x) * np.cos(np.asarray(x))
    np.testing.assert_allclose(np.asarray(jax.grad(lambda x: fun(x).sum())(x)), expected,
                               rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.vmap(fun)(jnp.stack([x, x]))),
                               np.stack([np.sin(x) * x] * 2), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda x: fun(x) + 1.0)(x)),
                               np.sin(x) * x + 1.0, rtol=1e-6)
    before = interop.calls()
    with jax.disable_jit():
        np.testing.assert_allclose(np.asarray(fun(x)), np.sin(x) * x, rtol=1e-6)
    assert interop.calls() == before
