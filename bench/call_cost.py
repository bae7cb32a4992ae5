"""Per-call cost of ``hlo2dace.jit`` beside ``jax.jit`` (issue 47): programs whose work is
tiny, so that a call's time is its overhead (flattening the pytree, the signature check,
the call, the results made ``jax.Array``s). Each function is called 10,000 times in a row
after 1,000 warm-up calls, five times over; the median of the five gives microseconds per
call, both frameworks in this one process. A third column calls the ``hlo2dace.jit``
function inside ``jax.jit``: the same compiled program, run by XLA's FFI call on XLA's
buffers (``interop.py``), behind jax.jit's C++ dispatch. docs/benchmarks.md ("Per-call
cost") has the numbers; run it with ``PYTHONPATH`` at another checkout to measure that
one."""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import hlo2dace

#: the markers of its section in docs/benchmarks.md (bench/run.py keeps it), whose
#: before/after columns come from runs of this script at two checkouts
SECTION_BEGIN = "<!-- per-call cost: bench/call_cost.py -->"
SECTION_END = "<!-- end of per-call cost -->"


def add_one(x):
    return x + 1


def ten_leaves(d):
    return {k: v * 2 for k, v in d.items()}


def mlp_step(params, x, y):
    """One gradient step of a two-layer MLP (16 -> 32 -> 4) on 8 examples."""
    def loss(p):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)

    grads = jax.grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)


def cases() -> dict[str, tuple]:
    rng = np.random.default_rng(0)

    def normal(*shape):
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    return {
        "x + 1, 4 f32": (add_one, (jnp.arange(4, dtype=jnp.float32),)),
        "10-leaf dict in, 10 arrays out": (
            ten_leaves, ({f"k{i}": jnp.full((3,), i, jnp.float32) for i in range(10)},)),
        "MLP step, 4 parameters, 8x16 batch": (
            mlp_step, ({"w1": normal(16, 32), "b1": jnp.zeros(32, jnp.float32),
                        "w2": normal(32, 4), "b2": jnp.zeros(4, jnp.float32)},
                       normal(8, 16), normal(8, 4))),
    }


def microseconds(fun, args, calls: int, repeats: int) -> float:
    """The median over ``repeats`` runs of ``calls`` calls, per call."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fun(*args)
        times.append((time.perf_counter_ns() - start) / calls / 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("| program | jax.jit us | hlo2dace.jit us | ratio | jax.jit(hlo2dace.jit) us |")
    print("|---|---:|---:|---:|---:|")
    for name, (fun, arguments) in cases().items():
        dace = hlo2dace.jit(fun)
        xla, inside = jax.jit(fun), jax.jit(lambda *a, f=dace: f(*a))
        expected = jax.tree_util.tree_leaves(xla(*arguments))
        for call in (dace, inside):
            for a, b in zip(expected, jax.tree_util.tree_leaves(call(*arguments))):
                np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)
        for _ in range(1000):
            xla(*arguments), dace(*arguments), inside(*arguments)
        x, d, i = (microseconds(call, arguments, args.calls, args.repeats)
                   for call in (xla, dace, inside))
        print(f"| {name} | {x:.1f} | {d:.1f} | {d / x:.2f} | {i:.1f} |", flush=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
