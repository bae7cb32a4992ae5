"""Kernel cases for bench/run.py, as the performance issue lists them: stencils written as
pyhpc writes them (many slices, and `.at[]` updates of static interior windows) in 2-D and
3-D, and chains of matrix products."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def stencil_2d(u, mask):
    """20 Jacobi-like steps: a 5-point Laplacian from slices, written into the interior."""

    def step(_, u):
        interior = (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
                    - 4.0 * u[1:-1, 1:-1])
        return u.at[1:-1, 1:-1].add(0.1 * interior * mask[1:-1, 1:-1])

    return lax.fori_loop(0, 20, step, u)


def stencil_3d(u):
    """One step of a 7-point 3-D Laplacian with fluxes per axis, as pyhpc's kernels do."""
    flux_x = u[1:, 1:-1, 1:-1] - u[:-1, 1:-1, 1:-1]
    flux_y = u[1:-1, 1:, 1:-1] - u[1:-1, :-1, 1:-1]
    flux_z = u[1:-1, 1:-1, 1:] - u[1:-1, 1:-1, :-1]
    divergence = ((flux_x[1:] - flux_x[:-1]) + (flux_y[:, 1:] - flux_y[:, :-1])
                  + (flux_z[:, :, 1:] - flux_z[:, :, :-1]))
    out = jnp.zeros_like(u)
    out = out.at[1:-1, 1:-1, 1:-1].set(u[1:-1, 1:-1, 1:-1] + 0.1 * divergence)
    return out.at[0].set(u[0]).at[-1].set(u[-1])


def matmul_chain(a, b, c, d):
    return ((a @ b) @ c) @ d


def mlp_chain(x, w1, w2, w3):
    h = jax.nn.relu(x @ w1)
    h = jax.nn.relu(h @ w2)
    return h @ w3


def cases(quick: bool):
    """(name, function, inputs, flops) of each case."""
    rng = np.random.default_rng(3)
    n = 256 if quick else 1024
    u, mask = rng.standard_normal((n, n)), (rng.random((n, n)) < 0.9).astype(np.float64)
    yield f"2-D stencil, 20 steps {n}x{n} f64", stencil_2d, (u, mask), None
    m = 64 if quick else 128
    yield f"3-D stencil {m}^3 f64", stencil_3d, (rng.standard_normal((m, m, m)),), None
    k = 256 if quick else 512
    mats = tuple(rng.standard_normal((k, k), dtype=np.float32) / np.float32(np.sqrt(k))
                 for _ in range(4))
    yield f"matmul chain 4x {k}x{k} f32", matmul_chain, mats, 3 * 2 * k ** 3
    x = rng.standard_normal((k, k), dtype=np.float32)
    yield (f"MLP chain relu(x@w) x3 {k}x{k} f32", mlp_chain, (x,) + mats[:3], 3 * 2 * k ** 3)
