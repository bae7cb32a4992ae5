"""Loop cases for bench/run.py: the per-iteration cost of an empty counted loop and of a
data-dependent while loop (10^6 iterations each), a scan over 10^4 steps carrying a vector
and stacking outputs, and a time-stepping stencil written with fori_loop."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

ITERATIONS = 10 ** 6


def counted_loop(x):
    return lax.fori_loop(0, ITERATIONS, lambda i, c: c + 1.0, x)


def while_loop(x):
    return lax.while_loop(lambda c: c < ITERATIONS, lambda c: c + 1.0, x)


def scan(h, xs):
    return lax.scan(lambda c, x: (jnp.tanh(0.9 * c + x), c.sum()), h, xs)


def stencil(u):
    """100 explicit steps of the 2-D heat equation on a periodic grid."""

    def step(_, u):
        laplacian = (jnp.roll(u, 1, 0) + jnp.roll(u, -1, 0) + jnp.roll(u, 1, 1)
                     + jnp.roll(u, -1, 1) - 4 * u)
        return u + 0.1 * laplacian

    return lax.fori_loop(0, 100, step, u)


def cases(quick: bool):
    """(name, function, inputs, flops) of each case."""
    rng = np.random.default_rng(2)
    yield "fori_loop 1e6 iterations, scalar body", counted_loop, (np.float64(0.0),), None
    yield "while_loop 1e6 iterations, data-dependent exit", while_loop, (np.float64(0.0),), None
    steps = 10 ** 3 if quick else 10 ** 4
    yield (f"scan {steps:.0e} steps, 16-vector carry", scan,
           (np.zeros(16), rng.standard_normal((steps, 16))), None)
    n = 256 if quick else 512
    yield (f"stencil fori_loop 100 steps {n}x{n} f64", stencil, (rng.standard_normal((n, n)),),
           100 * 7 * n * n)
