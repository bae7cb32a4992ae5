"""Everyday programs for bench/run.py, written as a JAX user writes them and not tuned
for: prefix operations along either axis (cumsum, reverse cummin, cumlogsumexp),
histograms (bincount, segment_sum, jnp.histogram, an ``.at[].add`` with colliding
indices), an Adam step over an MLP's parameter pytree, per-example gradients with
``vmap(grad)``, and loops over small data (k-means iterations, a Jacobi stencil whose
arrays are updated in place, an integer ``while_loop``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def mlp_params(rng, sizes):
    return [{"w": rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m),
             "b": np.zeros(n, np.float32)} for m, n in zip(sizes, sizes[1:])]


def mlp(params, x):
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)


def adam_step(params, m, v, x, y):
    """One Adam update of every leaf of the parameter pytree."""
    grads = jax.grad(loss)(params, x, y)
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, grads)
    params = jax.tree.map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), params, m, v)
    return params, m, v


def per_example_gradients(params, x, y):
    return jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(params, x[:, None], y[:, None])


def kmeans(points, centres):
    """Ten Lloyd iterations: assign each point to its nearest centre, average."""

    def step(_, centres):
        distances = jnp.sum((points[:, None, :] - centres[None]) ** 2, -1)
        nearest = jnp.argmin(distances, 1)
        sums = jax.ops.segment_sum(points, nearest, num_segments=centres.shape[0])
        counts = jnp.bincount(nearest, length=centres.shape[0])
        return sums / jnp.maximum(counts, 1)[:, None]

    return lax.fori_loop(0, 10, step, centres)


def jacobi(a, b):
    """NPBench's jacobi_2d: each step updates the interior of both arrays."""

    def step(_, arrays):
        a, b = arrays
        b = b.at[1:-1, 1:-1].set(0.2 * (a[1:-1, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:]
                                        + a[2:, 1:-1] + a[:-2, 1:-1]))
        a = a.at[1:-1, 1:-1].set(0.2 * (b[1:-1, 1:-1] + b[1:-1, :-2] + b[1:-1, 2:]
                                        + b[2:, 1:-1] + b[:-2, 1:-1]))
        return a, b

    return lax.fori_loop(0, 50, step, (a, b))


def collatz_steps(n):
    """An integer while_loop: the steps of the Collatz sequence from n."""
    return lax.while_loop(lambda s: s[0] != 1,
                          lambda s: (jnp.where(s[0] % 2 == 0, s[0] // 2, 3 * s[0] + 1),
                                     s[1] + 1), (n, jnp.int32(0)))[1]


def cases(quick: bool):
    """(name, function, inputs, flops) of each case."""
    rng = np.random.default_rng(4)
    rows, length = (64, 2048) if quick else (256, 4096)
    x = rng.standard_normal((rows, length))
    yield f"cumsum axis 1 {rows}x{length} f64", lambda x: jnp.cumsum(x, axis=1), (x,), None
    yield f"cumsum axis 0 {rows}x{length} f64", lambda x: jnp.cumsum(x, axis=0), (x,), None
    yield "reverse cummin axis 0", lambda x: lax.cummin(x, axis=0, reverse=True), (x,), None
    yield "cumlogsumexp axis 1", lambda x: lax.cumlogsumexp(x, axis=1), (x,), None
    n = 10 ** 5 if quick else 10 ** 6
    ids = rng.integers(0, 1000, n)
    values = rng.standard_normal(n)
    yield f"bincount {n:.0e} into 1000", lambda i: jnp.bincount(i, length=1000), (ids,), None
    yield f"segment_sum {n:.0e} into 1000", (
        lambda v, i: jax.ops.segment_sum(v, i, num_segments=1000)), (values, ids), None
    yield f"histogram {n:.0e}, 100 bins", (
        lambda v: jnp.histogram(v, bins=100, range=(-4.0, 4.0))), (values,), None
    yield f".at[].add {n:.0e} into 1000", (
        lambda v, i: jnp.zeros(1000).at[i].add(v)), (values, ids), None
    params = mlp_params(rng, [64, 256, 256, 10])
    zeros = jax.tree.map(np.zeros_like, params)
    batch = rng.standard_normal((128, 64)).astype(np.float32)
    target = rng.standard_normal((128, 10)).astype(np.float32)
    yield "Adam step, MLP 64-256-256-10 pytree, batch 128 f32", adam_step, (
        params, zeros, zeros, batch, target), None
    yield "per-example gradients, vmap(grad), 32 examples", per_example_gradients, (
        params, batch[:32], target[:32]), None
    points = rng.standard_normal((2000, 2))
    yield "k-means fori_loop, 2000 points, 8 centres", kmeans, (points, points[:8]), None
    grid = np.fromfunction(lambda i, j: i * (j + 2) / 150, (150, 150))
    yield "Jacobi stencil fori_loop, 150x150, 50 steps", jacobi, (grid, grid.T.copy()), None
    # 77031: 350 steps, the largest value 21,933,016 fits in int32 (837799's sequence
    # passes 2**31 and wraps, and then never reaches 1, in XLA as in hlo2dace)
    yield "integer while_loop (Collatz steps)", collatz_steps, (np.int32(77031),), None
