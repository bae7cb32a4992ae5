"""Reduction cases for bench/run.py: sums over each axis of a 4-D array (and over all of
it), max, argmax, logsumexp and softmax, as a model's layers reduce."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def _sum_over(axis):
    def fun(x):
        return jnp.sum(x, axis=axis)

    return fun


def logsumexp(x):
    return jax.nn.logsumexp(x, axis=-1)


def softmax(x):
    return jax.nn.softmax(x, axis=-1)


def argmax(x):
    return jnp.argmax(x, axis=1)


def maximum(x):
    return jnp.max(x, axis=(1, 2))


def cases(quick: bool):
    """(name, function, inputs, flops) of each case: one element read is one flop."""
    n = 32 if quick else 64
    x = np.random.default_rng(1).standard_normal((n, n, n, n)).astype(np.float32)
    shape = "x".join([str(n)] * 4)
    for axis in (0, 1, 2, 3, None):
        where = "all axes" if axis is None else f"axis {axis}"
        yield f"sum over {where} of {shape} f32", _sum_over(axis), (x,), x.size
    yield f"max over axes 1,2 of {shape} f32", maximum, (x,), x.size
    yield f"argmax over axis 1 of {shape} f32", argmax, (x,), x.size
    rows = x.reshape(-1, n * n)
    yield f"logsumexp of rows {rows.shape[0]}x{rows.shape[1]} f32", logsumexp, (rows,), None
    yield f"softmax of rows {rows.shape[0]}x{rows.shape[1]} f32", softmax, (rows,), None
