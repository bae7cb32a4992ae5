"""The threading model: a program with parallel regions (maps, or tasklets that open
their own) runs each call on one thread or on all, whichever its own calls measure faster
(``runtime.ThreadTuner``); the choice follows the load; a program without any is not timed
at all; and results are the same bits on any number of threads."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlo2dace
from hlo2dace import runtime


def _feed(tuner: runtime.ThreadTuner, seconds: dict[int, float], calls: int) -> list[int]:
    """Run ``calls`` calls, each taking ``seconds[threads]``; the thread counts used."""
    used = []
    for _ in range(calls):
        threads = tuner.next()
        tuner.record(threads, seconds[threads])
        used.append(threads)
    return used


def test_tuner_learns_then_keeps_the_faster_setting():
    tuner = runtime.ThreadTuner(4)
    used = _feed(tuner, {1: 1e-3, 4: 3e-3}, 6)
    assert sorted(used) == [1, 1, 1, 4, 4, 4]  # learning: both, in turns
    used = _feed(tuner, {1: 1e-3, 4: 3e-3}, 64)
    assert used.count(1) == 62 and used.count(4) == 2  # a probe every 32 calls


def test_tuner_follows_a_change_of_load():
    tuner = runtime.ThreadTuner(2)
    _feed(tuner, {1: 2e-3, 2: 1e-3}, 40)  # an idle machine: two threads win
    assert tuner.next() == 2
    # other processes take the cores: a wake-up of the worker now costs more than the work
    used = _feed(tuner, {1: 2e-3, 2: 9e-3}, 32 * 4)
    assert used[-32:].count(1) == 31  # one probe of two threads in 32 calls


def test_tuner_only_where_threads_can_help():
    small = hlo2dace.jit(lambda x: x + 1.0).lower(np.ones(4)).compile().program
    assert small.threads is None  # no parallel map: no timing, no thread setting
    large = hlo2dace.jit(lambda x: jnp.sin(x) * 2.0).lower(np.ones((512, 512))).compile()
    if runtime.thread_tuner(True) is None:
        pytest.skip("one thread only, or no libgomp")
    assert large.program.threads is not None
    assert large.program.threads.settings == runtime.thread_tuner(True).settings


def test_results_do_not_depend_on_the_thread_count():
    """Chunked sums, row reductions and elementwise maps partition their work when they
    are compiled, never by the number of threads: the same bits from every call, whichever
    setting the tuner tried."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((700, 900)) * 1e3

    def f(x):
        return x.sum(), jnp.tanh(x).sum(axis=0), jnp.exp(x * 1e-3) * x

    compiled = hlo2dace.jit(f).lower(x).compile()
    results = [compiled(x) for _ in range(8)]
    if compiled.program.threads is not None:
        assert {n for n, times in compiled.program.threads.times.items() if times} == \
            set(compiled.program.threads.settings)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert np.array_equal(a, b)


@pytest.mark.pipeline
@pytest.mark.parametrize("shape", [(1, 300, 400), (3, 1, 40, 500), (2, 20000, 3)], ids=str)
def test_short_leading_dimensions_are_shared_out(shape):
    """A parallel map whose first dimensions are short (one element: OpenMP would give the
    whole map to one thread) collapses its outer loops, never its innermost one, into one
    of at least ``machine.parallel_iterations``; one whose innermost dimension is short runs as one
    loop, which OpenMP shares out and GCC vectorises. XLA's results on every thread
    setting."""
    import dace

    from hlo2dace.machine import current_machine

    machine = current_machine()
    x = np.random.default_rng(1).standard_normal(shape)

    def f(x):
        return x * 3.0 - x * x

    compiled = hlo2dace.jit(f).lower(x).compile()
    expected = np.asarray(jax.jit(f)(x))
    for _ in range(8):  # the tuner tries one thread and all
        np.testing.assert_array_equal(np.asarray(compiled(x)), expected)
    (the_map,) = [n.map for n, _ in hlo2dace.jit(f).lower(x).as_sdfg().all_nodes_recursive()
                  if isinstance(n, dace.nodes.MapEntry)]
    # the map's own loops: a short innermost one runs with those around it as one loop
    # (the collapse_short_rows pass), here all of them
    sizes = [int(n) for n in the_map.range.size()]
    assert sizes == ([int(np.prod(shape))] if shape[-1] < machine.short_row else list(shape))
    collapsed = int(np.prod(sizes[:the_map.collapse]))
    assert the_map.collapse < len(sizes) or len(sizes) == 1
    wanted = machine.parallel_iterations
    assert collapsed >= wanted or the_map.collapse >= len(sizes) - 1
    assert the_map.collapse == 1 or np.prod(sizes[:the_map.collapse - 1]) < wanted
