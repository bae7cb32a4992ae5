"""Contraction cases for bench/run.py: square f32/f64 matrix products from 64 to 2048 and
batched products (``@`` on 3-D arrays and an attention-score einsum)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

SIZES = (64, 128, 256, 512, 1024, 2048)


def matmul(x, w):
    return x @ w


def attention_scores(q, k):
    return jnp.einsum("bqd,bkd->bqk", q, k)


def cases(quick: bool):
    """(name, function, inputs, flops) of each case."""
    sizes = SIZES[:-2] if quick else SIZES
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        for n in sizes:
            x = rng.standard_normal((n, n)).astype(dtype)
            w = rng.standard_normal((n, n)).astype(dtype)
            yield f"matmul {n}x{n} {np.dtype(dtype).name}", matmul, (x, w), 2 * n ** 3
    if not quick:
        b, n = 64, 256
        for dtype in (np.float32, np.float64):
            x = rng.standard_normal((b, n, n)).astype(dtype)
            w = rng.standard_normal((b, n, n)).astype(dtype)
            name = np.dtype(dtype).name
            yield f"batched matmul {b}x{n}x{n} {name}", matmul, (x, w), 2 * b * n ** 3
            yield (f"batched bqd,bkd->bqk {b}x{n}x{n} {name}", attention_scores, (x, w),
                   2 * b * n ** 3)
