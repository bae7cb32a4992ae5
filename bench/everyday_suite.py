"""Everyday ML and scientific programs, written as a JAX user writes them and not tuned for
hlo2dace (issue 47), through ``jax.jit`` (XLA) and ``hlo2dace.jit`` in the same process, on
one pinned thread and on all threads. Writes docs/everyday.md and docs/everyday.png.

    python bench/everyday_suite.py [--quick] [--only NAME ...] [--threads 1 all]
                                   [--no-memory] [--rows FILE.json] [--from-rows FILE.json]

Each program runs at two sizes (small: its data fits in cache; medium), from deterministic
random inputs, in JAX's default precision (x64 off, as most users run it). Each thread
setting runs every program in a child process of its own (XLA fixes its thread pool when
it starts, and a crash or a hang is one program's row, never the run's), in one empty
hlo2dace cache for the setting: the first call of each backend is timed there, then the
two take turns (``harness.interleaved``). Every hlo2dace output is checked against XLA's at
the dtype's tolerance (``harness.check``). Peak memory, as bench/memory.py measures it:
each backend in a fresh process, its program compiled (hlo2dace's from the setting's warm
cache), the growth of the peak resident set over the resident set before the first call.
A program that fails or times out is a row saying so, counted in the summary."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from harness import (
    blas_kernels,
    check,
    geomean,
    interleaved,
    machine,
    peak_growth_mb,
    pyplot,
    thread_environment,
    where_measured,
)
from jax import lax

DOCS = Path(__file__).resolve().parents[1] / "docs"
SIZES = ("small", "medium")
BACKENDS = ("xla", "hlo2dace")

#: name -> builder(size) returning (function, arguments)
PROGRAMS: dict = {}


def program(builder):
    """Register ``builder`` under its name: it takes "small" or "medium" and returns the
    program (as a user writes it) and its arguments."""
    PROGRAMS[builder.__name__] = builder
    return builder


def _rng(name: str, size: str) -> np.random.Generator:
    """The same inputs in every process: seeded by the program and size."""
    return np.random.default_rng(zlib.crc32(f"{name}/{size}".encode()))


def _normal(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _pick(size: str, small, medium):
    return small if size == "small" else medium


# --- ML building blocks, as a user writes them -------------------------------------------

def attention(q, k, v, causal=False):
    """softmax(Q K^T / sqrt(d)) V over (batch, heads, sequence, head size)."""
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
    if causal:
        mask = jnp.tril(jnp.ones((q.shape[2], k.shape[2]), dtype=bool))
        scores = jnp.where(mask, scores, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


def layer_norm(x, gain, bias, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * gain + bias


def transformer_block(params, x, heads=4):
    """A pre-norm decoder block: causal multi-head attention and a gelu MLP."""
    batch, length, width = x.shape

    def split(t):
        return t.reshape(batch, length, heads, width // heads).transpose(0, 2, 1, 3)

    h = layer_norm(x, params["ln1_g"], params["ln1_b"])
    q, k, v = jnp.split(h @ params["w_qkv"], 3, axis=-1)
    a = attention(split(q), split(k), split(v), causal=True)
    x = x + a.transpose(0, 2, 1, 3).reshape(batch, length, width) @ params["w_out"]
    h = layer_norm(x, params["ln2_g"], params["ln2_b"])
    return x + jax.nn.gelu(h @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def transformer_params(rng, width, dtype):
    def w(m, n):
        return (rng.standard_normal((m, n)) / np.sqrt(m)).astype(dtype)

    return {"ln1_g": np.ones(width, dtype), "ln1_b": np.zeros(width, dtype),
            "w_qkv": w(width, 3 * width), "w_out": w(width, width),
            "ln2_g": np.ones(width, dtype), "ln2_b": np.zeros(width, dtype),
            "w1": w(width, 4 * width), "b1": np.zeros(4 * width, dtype),
            "w2": w(4 * width, width), "b2": np.zeros(width, dtype)}


def mlp_params(rng, sizes):
    return [{"w": (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32),
             "b": np.zeros(n, np.float32)} for m, n in zip(sizes, sizes[1:])]


def mlp(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def cross_entropy(logits, labels):
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], axis=1))


def mlp_loss(params, x, labels):
    return cross_entropy(mlp(params, x), labels)


def _mlp_inputs(rng, size):
    batch, width = _pick(size, (64, 256), (256, 1024))
    params = mlp_params(rng, [784, width, width, 10])
    return params, _normal(rng, batch, 784), rng.integers(0, 10, batch).astype(np.int32)


def cnn(params, images):
    """Two 3x3 convolutions with relu and 2x2 max pooling, global average, a dense layer."""
    x = images
    for kernel in (params["conv1"], params["conv2"]):
        x = lax.conv_general_dilated(x, kernel, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        x = jax.nn.relu(x)
        x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return x.mean(axis=(1, 2)) @ params["dense"]


def _cnn_inputs(rng, size):
    batch, side = _pick(size, (8, 28), (32, 64))
    params = {"conv1": _normal(rng, 3, 3, 3, 16) / 5, "conv2": _normal(rng, 3, 3, 16, 32) / 12,
              "dense": _normal(rng, 32, 10) / 6}
    return params, _normal(rng, batch, side, side, 3), rng.integers(0, 10, batch).astype(np.int32)


# --- the programs ------------------------------------------------------------------------

@program
def self_attention(size):
    rng = _rng("self_attention", size)
    b, h, s, d = _pick(size, (2, 4, 64, 32), (4, 8, 256, 64))
    return attention, tuple(_normal(rng, b, h, s, d) for _ in range(3))


@program
def causal_attention(size):
    rng = _rng("causal_attention", size)
    b, h, s, d = _pick(size, (2, 4, 64, 32), (4, 8, 256, 64))
    return (lambda q, k, v: attention(q, k, v, causal=True)), tuple(
        _normal(rng, b, h, s, d) for _ in range(3))


@program
def transformer_block_f32(size):
    rng = _rng("transformer_block_f32", size)
    b, s, w = _pick(size, (2, 64, 128), (4, 256, 256))
    return transformer_block, (transformer_params(rng, w, np.float32), _normal(rng, b, s, w))


@program
def transformer_block_bf16(size):
    rng = _rng("transformer_block_bf16", size)
    b, s, w = _pick(size, (2, 64, 128), (4, 256, 256))
    return transformer_block, (transformer_params(rng, w, jnp.bfloat16),
                               _normal(rng, b, s, w, dtype=jnp.bfloat16))


@program
def layer_norm_residual(size):
    rng = _rng("layer_norm_residual", size)
    rows, width = _pick(size, (256, 256), (4096, 1024))
    return (lambda x, r, g, b: layer_norm(x + r, g, b)), (
        _normal(rng, rows, width), _normal(rng, rows, width), _normal(rng, width),
        _normal(rng, width))


@program
def mlp_forward(size):
    params, x, _ = _mlp_inputs(_rng("mlp_forward", size), size)
    return mlp, (params, x)


@program
def mlp_loss_accuracy(size):
    def evaluate(params, x, labels):
        logits = mlp(params, x)
        return cross_entropy(logits, labels), jnp.mean(jnp.argmax(logits, -1) == labels)

    return evaluate, _mlp_inputs(_rng("mlp_loss_accuracy", size), size)


@program
def mlp_train_step(size):
    def step(params, x, labels):
        loss, grads = jax.value_and_grad(mlp_loss)(params, x, labels)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss

    return step, _mlp_inputs(_rng("mlp_train_step", size), size)


@program
def per_example_gradients(size):
    params, x, labels = _mlp_inputs(_rng("per_example_gradients", size), size)
    n = _pick(size, 8, 32)

    def grads(params, x, labels):
        return jax.vmap(jax.grad(mlp_loss), in_axes=(None, 0, 0))(
            params, x[:, None], labels[:, None])

    return grads, (params, x[:n], labels[:n])


@program
def adam_update(size):
    rng = _rng("adam_update", size)
    params = mlp_params(rng, _pick(size, [784, 256, 256, 10], [784, 1024, 1024, 10]))
    grads = jax.tree.map(lambda p: rng.standard_normal(p.shape).astype(np.float32), params)
    zeros = jax.tree.map(np.zeros_like, params)

    def update(params, grads, m, v, step):
        m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, grads)
        v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, grads)
        m_hat = jax.tree.map(lambda m: m / (1 - 0.9 ** step), m)
        v_hat = jax.tree.map(lambda v: v / (1 - 0.999 ** step), v)
        params = jax.tree.map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8),
                              params, m_hat, v_hat)
        return params, m, v

    return update, (params, grads, zeros, zeros, np.float32(1))


@program
def cnn_forward(size):
    params, images, _ = _cnn_inputs(_rng("cnn_forward", size), size)
    return cnn, (params, images)


@program
def cnn_gradient(size):
    def loss(params, images, labels):
        return cross_entropy(cnn(params, images), labels)

    return jax.grad(loss), _cnn_inputs(_rng("cnn_gradient", size), size)


@program
def gru_scan(size):
    rng = _rng("gru_scan", size)
    steps, batch, features, hidden = _pick(size, (32, 8, 32, 64), (128, 32, 64, 256))
    params = {k: _normal(rng, features + hidden, hidden) / np.sqrt(features + hidden)
              for k in ("wz", "wr", "wh")}

    def run(params, xs, h0):
        def cell(h, x):
            xh = jnp.concatenate([x, h], axis=-1)
            z = jax.nn.sigmoid(xh @ params["wz"])
            r = jax.nn.sigmoid(xh @ params["wr"])
            candidate = jnp.tanh(jnp.concatenate([x, r * h], axis=-1) @ params["wh"])
            h = (1 - z) * h + z * candidate
            return h, h

        return lax.scan(cell, h0, xs)

    return run, (params, _normal(rng, steps, batch, features), np.zeros((batch, hidden),
                                                                          np.float32))


@program
def lstm_scan(size):
    rng = _rng("lstm_scan", size)
    steps, batch, features, hidden = _pick(size, (32, 8, 32, 64), (128, 32, 64, 256))
    w = _normal(rng, features + hidden, 4 * hidden) / np.sqrt(features + hidden)
    bias = np.zeros(4 * hidden, np.float32)

    def run(w, bias, xs):
        def cell(carry, x):
            h, c = carry
            i, f, g, o = jnp.split(jnp.concatenate([x, h], -1) @ w + bias, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        zeros = jnp.zeros((xs.shape[1], hidden))
        return lax.scan(cell, (zeros, zeros), xs)[1][-1]

    return run, (w, bias, _normal(rng, steps, batch, features))


@program
def softmax_cross_entropy(size):
    rng = _rng("softmax_cross_entropy", size)
    batch, classes = _pick(size, (128, 100), (2048, 1000))

    def losses(logits, labels):
        lse = jax.scipy.special.logsumexp(logits, axis=-1)
        return cross_entropy(logits, labels), lse

    return losses, (_normal(rng, batch, classes) * 3,
                    rng.integers(0, classes, batch).astype(np.int32))


@program
def embedding_bag(size):
    rng = _rng("embedding_bag", size)
    vocab, width, batch, length = _pick(size, (1000, 64, 32, 16), (50000, 128, 256, 64))
    return (lambda table, ids: table[ids].sum(axis=1)), (
        _normal(rng, vocab, width), rng.integers(0, vocab, (batch, length)).astype(np.int32))


@program
def small_batch_matmul_chain(size):
    rng = _rng("small_batch_matmul_chain", size)
    batch, width = _pick(size, (4, 256), (8, 1024))
    ws = [_normal(rng, width, width) / np.sqrt(width) for _ in range(4)]
    return (lambda x, ws: x @ ws[0] @ ws[1] @ ws[2] @ ws[3]), (_normal(rng, batch, width), ws)


@program
def batched_matmul_einsum(size):
    rng = _rng("batched_matmul_einsum", size)
    b, n = _pick(size, (16, 64), (64, 256))
    return (lambda x, y: jnp.einsum("bij,bjk->bik", x, y)), (
        _normal(rng, b, n, n), _normal(rng, b, n, n))


@program
def top_k(size):
    rng = _rng("top_k", size)
    rows, n = _pick(size, (64, 1000), (512, 10000))
    return (lambda x: lax.top_k(x, 10)), (_normal(rng, rows, n),)


@program
def sort_argsort(size):
    rng = _rng("sort_argsort", size)
    rows, n = _pick(size, (32, 1024), (256, 8192))
    return (lambda x: (jnp.sort(x, axis=-1), jnp.argsort(x[:, 0]))), (_normal(rng, rows, n),)


@program
def prefix_ops(size):
    rng = _rng("prefix_ops", size)
    rows, n = _pick(size, (64, 512), (512, 4096))
    return (lambda x: (jnp.cumsum(x, axis=1), jnp.cumprod(1 + 0.01 * x, axis=0),
                       lax.cummax(x, axis=1))), (_normal(rng, rows, n),)


@program
def scatter_add_collisions(size):
    rng = _rng("scatter_add_collisions", size)
    n, bins = _pick(size, (10000, 100), (1000000, 1000))
    return (lambda v, i: jnp.zeros(bins).at[i].add(v)), (
        _normal(rng, n), rng.integers(0, bins, n).astype(np.int32))


@program
def segment_sum(size):
    rng = _rng("segment_sum", size)
    n, features, segments = _pick(size, (4096, 8, 64), (262144, 16, 1024))
    return (lambda data, ids: jax.ops.segment_sum(data, ids, num_segments=segments)), (
        _normal(rng, n, features), rng.integers(0, segments, n).astype(np.int32))


@program
def histogram(size):
    rng = _rng("histogram", size)
    n = _pick(size, 10000, 1000000)
    return (lambda x: jnp.histogram(x, bins=64, range=(-4.0, 4.0))), (_normal(rng, n),)


@program
def kmeans(size):
    rng = _rng("kmeans", size)
    n, dims, k = _pick(size, (1000, 2, 8), (20000, 8, 32))

    def run(points, centres):
        def step(_, centres):
            distances = jnp.sum((points[:, None, :] - centres[None]) ** 2, -1)
            nearest = jnp.argmin(distances, 1)
            sums = jax.ops.segment_sum(points, nearest, num_segments=k)
            counts = jnp.bincount(nearest, length=k)
            return sums / jnp.maximum(counts, 1)[:, None]

        return lax.fori_loop(0, 10, step, centres)

    points = _normal(rng, n, dims)
    return run, (points, points[:k].copy())


@program
def logistic_regression_gd(size):
    rng = _rng("logistic_regression_gd", size)
    n, features = _pick(size, (512, 16), (16384, 128))

    def fit(x, y):
        def loss(w):
            p = jax.nn.sigmoid(x @ w)
            return -jnp.mean(y * jnp.log(p + 1e-7) + (1 - y) * jnp.log(1 - p + 1e-7))

        return lax.fori_loop(0, 50, lambda _, w: w - 0.1 * jax.grad(loss)(w),
                             jnp.zeros(x.shape[1]))

    x = _normal(rng, n, features)
    return fit, (x, (x @ _normal(rng, features) > 0).astype(np.float32))


@program
def gaussian_process(size):
    rng = _rng("gaussian_process", size)
    n, m = _pick(size, (128, 64), (1024, 512))

    def predict(x, y, x_new):
        def rbf(a, b):
            return jnp.exp(-0.5 * jnp.sum((a[:, None] - b[None]) ** 2, -1) / 0.3 ** 2)

        alpha = jnp.linalg.solve(rbf(x, x) + 0.1 * jnp.eye(x.shape[0]), y)
        return rbf(x_new, x) @ alpha

    x = rng.uniform(-3, 3, (n, 1)).astype(np.float32)
    return predict, (x, np.sin(x[:, 0]), rng.uniform(-3, 3, (m, 1)).astype(np.float32))


@program
def solve_and_det(size):
    rng = _rng("solve_and_det", size)
    n = _pick(size, 64, 512)
    a = _normal(rng, n, n) / np.sqrt(n) + np.eye(n, dtype=np.float32)
    return (lambda a, b: (jnp.linalg.solve(a, b), jnp.linalg.det(a))), (a, _normal(rng, n, 4))


@program
def cholesky_solve(size):
    rng = _rng("cholesky_solve", size)
    n = _pick(size, 64, 512)
    m = _normal(rng, n, n) / np.sqrt(n)

    def solve(a, b):
        factor = jnp.linalg.cholesky(a)
        return jax.scipy.linalg.cho_solve((factor, True), b)

    return solve, (m @ m.T + np.eye(n, dtype=np.float32), _normal(rng, n, 4))


@program
def conjugate_gradient_poisson(size):
    rng = _rng("conjugate_gradient_poisson", size)
    n = _pick(size, 64, 256)

    def laplacian(u):
        p = jnp.pad(u, 1)
        return 4 * u - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:]

    def cg(b):
        def step(_, state):
            x, r, p, rr = state
            ap = laplacian(p)
            alpha = rr / jnp.vdot(p, ap)
            x, r = x + alpha * p, r - alpha * ap
            rr_new = jnp.vdot(r, r)
            return x, r, r + rr_new / rr * p, rr_new

        return lax.fori_loop(0, 50, step, (jnp.zeros_like(b), b, b, jnp.vdot(b, b)))[0]

    return cg, (_normal(rng, n, n),)


@program
def fft_poisson(size):
    rng = _rng("fft_poisson", size)
    n = _pick(size, 64, 512)

    def solve(f):
        k = 2 * jnp.pi * jnp.fft.fftfreq(f.shape[0])
        kr = 2 * jnp.pi * jnp.fft.rfftfreq(f.shape[1])
        k2 = k[:, None] ** 2 + kr[None, :] ** 2
        u_hat = jnp.fft.rfft2(f) / jnp.where(k2 == 0, 1.0, -k2)
        return jnp.fft.irfft2(u_hat.at[0, 0].set(0), s=f.shape)

    return solve, (_normal(rng, n, n),)


@program
def heat_stencil(size):
    rng = _rng("heat_stencil", size)
    n = _pick(size, 64, 512)

    def run(u):
        def step(_, u):
            lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]
            return u.at[1:-1, 1:-1].add(0.2 * lap)

        return lax.fori_loop(0, 100, step, u)

    return run, (_normal(rng, n, n),)


@program
def rk4_lorenz96(size):
    rng = _rng("rk4_lorenz96", size)
    n, steps = _pick(size, (40, 200), (1000, 1000))

    def f(x):
        return (jnp.roll(x, -1) - jnp.roll(x, 2)) * jnp.roll(x, 1) - x + 8.0

    def integrate(x0):
        def step(x, _):
            dt = 0.01
            k1 = f(x)
            k2 = f(x + dt / 2 * k1)
            k3 = f(x + dt / 2 * k2)
            k4 = f(x + dt * k3)
            x = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            return x, x.mean()

        return lax.scan(step, x0, None, length=steps)

    return integrate, (8 + 0.01 * _normal(rng, n),)


@program
def lennard_jones_md(size):
    rng = _rng("lennard_jones_md", size)
    side = _pick(size, 4, 7)
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)
    positions = (grid * 1.2 + 0.01 * rng.standard_normal(grid.shape)).astype(np.float32)

    def forces(x):
        d = x[:, None, :] - x[None, :, :]
        r2 = jnp.sum(d ** 2, -1) + jnp.eye(x.shape[0])
        inv6 = 1 / r2 ** 3
        magnitude = jnp.where(jnp.eye(x.shape[0], dtype=bool), 0.0,
                              24 * (2 * inv6 ** 2 - inv6) / r2)
        return jnp.sum(magnitude[:, :, None] * d, axis=1)

    def simulate(x, v):
        def step(_, state):
            x, v, f = state
            v = v + 0.5 * 1e-3 * f
            x = x + 1e-3 * v
            f = forces(x)
            return x, v + 0.5 * 1e-3 * f, f

        return lax.fori_loop(0, 20, step, (x, v, forces(x)))[:2]

    return simulate, (positions, np.zeros_like(positions))


@program
def mandelbrot(size):
    n = _pick(size, 64, 400)

    def escape_time(c):
        def step(_, state):
            z, count = state
            z = jnp.where(jnp.abs(z) <= 2, z * z + c, z)
            return z, count + (jnp.abs(z) <= 2)

        return lax.fori_loop(0, 50, step, (jnp.zeros_like(c), jnp.zeros(c.shape, jnp.int32)))[1]

    x, y = np.meshgrid(np.linspace(-2, 0.6, n), np.linspace(-1.3, 1.3, n))
    return escape_time, ((x + 1j * y).astype(np.complex64),)


@program
def collatz_while(size):
    n = _pick(size, 1000, 100000)

    def steps(start):
        def body(state):
            x, count = state
            x = jnp.where(x == 1, 1, jnp.where(x % 2 == 0, x // 2, 3 * x + 1))
            return x, count + (x != 1)

        return lax.while_loop(lambda s: jnp.any(s[0] != 1), body,
                              (start, (start != 1).astype(jnp.int32)))[1]

    # below 100,000 every sequence stays under 2**31 (1,570,824,736 at most)
    return steps, (np.arange(1, n + 1, dtype=np.int32),)


@program
def elementwise_chain(size):
    rng = _rng("elementwise_chain", size)
    n = _pick(size, 4096, 1 << 20)

    def chain(x, y):
        a = jnp.sin(x) * jnp.cos(y) + 0.5
        b = jnp.exp(-a * a) / (1 + jnp.abs(x))
        c = jnp.sqrt(b + 1) - jnp.log1p(jnp.abs(y))
        d = jnp.tanh(c * x) + jnp.maximum(a, b) * jnp.minimum(c, 0.3)
        return jnp.where(d > 0, d * y, d / (1 + y * y)) + 0.1 * jnp.arctan(x - y)

    return chain, (_normal(rng, n), _normal(rng, n))


@program
def f16_elementwise(size):
    rng = _rng("f16_elementwise", size)
    n = _pick(size, 4096, 1 << 20)

    def arithmetic(x, y):
        return (x * y + 0.5 * x - y) / (1 + x * x) + jnp.maximum(x, y) * 0.25

    return arithmetic, (_normal(rng, n, dtype=np.float16), _normal(rng, n, dtype=np.float16))


@program
def monte_carlo_option(size):
    n = _pick(size, 10000, 1000000)

    def price(key, spot, strike):
        z = jax.random.normal(key, (n,))
        final = spot * jnp.exp((0.05 - 0.5 * 0.2 ** 2) + 0.2 * z)
        return jnp.exp(-0.05) * jnp.mean(jnp.maximum(final - strike, 0.0))

    return price, (np.asarray(jax.random.key_data(jax.random.PRNGKey(0))), np.float32(100),
                   np.float32(105))


# --- measuring ---------------------------------------------------------------------------

def _timed(call):
    start = time.perf_counter()
    result = jax.block_until_ready(call())
    return result, time.perf_counter() - start


def measure(name: str, sizes, budget: float) -> None:
    """One program at every size, in this process's thread setting: one JSON row per size
    on stdout as soon as it is measured."""
    import hlo2dace
    from hlo2dace.compare import keep_freed_memory

    keep_freed_memory()
    for size in sizes:
        row: dict = {"program": name, "size": size}
        try:
            row.update(_measure_size(hlo2dace.jit, *PROGRAMS[name](size), budget))
        except Exception as exc:  # its row says so; the other sizes go on
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        print(json.dumps(row), flush=True)


def _measure_size(ours_jit, function, args, budget: float) -> dict:
    """Both backends' first calls, hlo2dace's check against XLA, their interleaved times."""
    args = jax.device_put(args)
    xla, ours = jax.jit(function), ours_jit(function)
    expected, xla_first = _timed(lambda: xla(*args))
    result, first = _timed(lambda: ours(*args))
    times = interleaved({"xla": (lambda: jax.block_until_ready(xla(*args)), None),
                         "hlo2dace": (lambda: jax.block_until_ready(ours(*args)), None)},
                        budget)
    return {"xla_first_call_s": xla_first, "first_call_s": first, **check(expected, result),
            **{f"{k}_s": v for k, v in times.items()}}


def peak_growth(name: str, size: str, backend: str) -> dict:
    """In this (fresh) process: the first call's peak resident-set growth in MB, the
    program compiled first (as bench/memory.py measures it)."""
    import hlo2dace

    function, args = PROGRAMS[name](size)
    args = jax.device_put(args)
    jitted = jax.jit(function) if backend == "xla" else hlo2dace.jit(function)
    compiled = jitted.lower(*args).compile()
    return {"peak_growth_mb": peak_growth_mb(lambda: jax.block_until_ready(compiled(*args)))}


def _run_child(arguments: list[str], env: dict, timeout: float, cwd: str):
    """A child's JSON lines and its failure (None, an exit status or a timeout)."""
    try:
        done = subprocess.run([sys.executable, __file__, *arguments], env=env, cwd=cwd,
                              stdout=subprocess.PIPE, text=True, timeout=timeout)
        output, failure = done.stdout, (f"exit status {done.returncode}"
                                        if done.returncode else None)
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout
        failure = f"timeout after {timeout:.0f} s"
    return [json.loads(line) for line in (output or "").splitlines()
            if line.startswith("{")], failure


def run_setting(names, sizes, budget: float, threads: int | None, timeout: float,
                memory: bool) -> list[dict]:
    """Every program in a child process with ``threads`` threads (None: all), in one empty
    hlo2dace cache for the setting; then, if ``memory``, each backend's peak memory in
    fresh processes on that (warm) cache."""
    rows = []
    label = "1" if threads == 1 else str(os.cpu_count())
    with tempfile.TemporaryDirectory() as scratch:
        env = thread_environment(threads)
        env["HLO2DACE_CACHE_DIR"] = str(Path(scratch) / "hlo2dace")
        env["DACE_default_build_folder"] = str(Path(scratch) / "dace")
        for name in names:
            measured, failure = _run_child(["--child", name, "--budget", str(budget),
                                            "--sizes", *sizes], env, timeout, scratch)
            for size in sizes:
                if not any(r["size"] == size for r in measured):
                    measured.append({"program": name, "size": size,
                                     "error": failure or "no result (the child said nothing)",
                                     "timed_out": bool(failure) and failure.startswith("timeout")})
            for row in measured:
                if memory and not row.get("error"):
                    for backend in BACKENDS:
                        grown, failure = _run_child(
                            ["--memory-child", name, row["size"], backend], env, timeout,
                            scratch)
                        row[f"{backend}_peak_mb"] = grown[0]["peak_growth_mb"] if grown else None
                        if not grown:
                            row[f"{backend}_peak_error"] = failure or "no result"
                row.update(threads=label, machine=machine(),
                           load_average=round(os.getloadavg()[0], 2))
                print(json.dumps(row), file=sys.stderr, flush=True)
            rows += measured
    return rows


# --- the document ------------------------------------------------------------------------

#: peak memory growths below this, for both backends, are a few pages each: their ratio
#: is noise (0.01 MB against 0.26 at the quick run's small sizes)
MEMORY_FLOOR_MB = 1.0


def ratio(row: dict, key: str = "s") -> float | None:
    """hlo2dace's time (``s``) or peak memory (``peak_mb``, where either backend's growth
    reaches ``MEMORY_FLOOR_MB``) over XLA's."""
    ours, theirs = row.get(f"hlo2dace_{key}"), row.get(f"xla_{key}")
    if key == "peak_mb" and max(ours or 0, theirs or 0) < MEMORY_FLOOR_MB:
        return None
    return ours / theirs if ours and theirs else None


def settings_of(rows: list[dict]) -> list[tuple[str, str]]:
    """The (size, threads) settings of ``rows``, smaller sizes and fewer threads first."""
    return sorted({(r["size"], r["threads"]) for r in rows},
                  key=lambda s: (SIZES.index(s[0]), int(s[1])))


SUMMARY_HEADER = [
    "| size | threads | programs | ran | correct | differs | failed | timed out | geomean "
    "hlo2dace/XLA time (over the correct) | above 1.5x | at or below 1x | geomean "
    f"hlo2dace/XLA peak memory (where one grows by {MEMORY_FLOOR_MB:g} MB or more) |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]


def summary_line(size: str, threads: str, mine: list[dict]) -> str:
    """One setting's counts: every program counted (ran, correct, differing, failed, timed
    out), the time geomean over those correct (a wrong answer's speed means nothing)."""
    ran = [r for r in mine if not r.get("error")]
    timed_out = sum(bool(r.get("timed_out")) for r in mine)
    correct = [r for r in ran if r.get("verdict") == "OK"]
    times = [ratio(r) for r in correct if ratio(r)]
    memory = [ratio(r, "peak_mb") for r in ran if ratio(r, "peak_mb")]

    def mean(ratios) -> str:
        return f"{geomean(ratios):.2f} ({len(ratios)} of {len(mine)})" if ratios else "none"

    return (f"| {size} | {threads} | {len(mine)} | {len(ran)} | {len(correct)} | "
            f"{len(ran) - len(correct)} | {len(mine) - len(ran) - timed_out} | {timed_out} | "
            f"{mean(times)} | {sum(q > 1.5 for q in times)} | {sum(q <= 1 for q in times)} | "
            f"{mean(memory) if memory else 'not measured'} |")


def summary(rows: list[dict]) -> list[str]:
    return [*SUMMARY_HEADER, *(summary_line(size, threads, [
        r for r in rows if (r["size"], r["threads"]) == (size, threads)])
        for size, threads in settings_of(rows))]


def _cell(value, scale: float = 1.0, digits: int = 3) -> str:
    return f"{value * scale:.{digits}f}" if value is not None else ""


def write(rows: list[dict], command: str) -> None:
    settings = settings_of(rows)
    machines, loads = where_measured(rows, "program")
    lines = [
        "# Everyday programs",
        "",
        f"Generated by `{command}`"
        + (" (a quick run: small sizes only, 0.1 s of timing per backend; a smoke test of "
           "every program, to be replaced by a full run's)" * ("--quick" in command))
        + f"; do not edit. {len(PROGRAMS)} ML and scientific programs",
        "written as a JAX user writes them, not tuned for hlo2dace (bench/everyday_suite.py),",
        "through `jax.jit` (XLA) and `hlo2dace.jit`, each at two sizes (small: its data fits",
        "in cache; medium) in JAX's default precision (x64 off). Median call times in ms,",
        "measured in the same process, the two taking turns; ratio = hlo2dace / XLA (below 1:",
        "hlo2dace is faster). `first call`: each backend's first call, hlo2dace's with an",
        "empty cache (JAX lowering, translation, C++ build). `peak MB`: the growth of the",
        "process's peak resident set over its resident set before the first call of the",
        "compiled program, each backend in a fresh process (the memory geomean is over the",
        f"programs where either grows by {MEMORY_FLOOR_MB:g} MB or more: below, a few pages'",
        "difference decides the ratio). `check`: every hlo2dace output against XLA's at the",
        "dtype's tolerance, with the largest normwise error. The summary",
        "counts every program: those that ran, those correct, those whose outputs differ,",
        "those that failed (an exception or a crash) and those that timed out; the time",
        "geomean is over the correct ones, and says how many.",
        f"Machine: {machines}; {loads}; {blas_kernels()}. hlo2dace's optimisation level: "
        f"`{os.environ.get('HLO2DACE_OPTIMIZE') or 'default'}`.",
        "",
        "## Summary",
        "",
        *summary(rows),
    ]
    for size, threads in settings:
        mine = sorted((r for r in rows if (r["size"], r["threads"]) == (size, threads)),
                      key=lambda r: -(ratio(r) or math.inf))
        lines += ["", f"## {size.capitalize()} size, {threads} thread"
                  f"{'s' if threads != '1' else ''}", "",
                  "| program | XLA ms | hlo2dace ms | ratio | XLA peak MB | hlo2dace peak MB "
                  "| XLA first call s | hlo2dace first call s | check |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in mine:
            verdict = r.get("verdict") or ""
            if verdict and r.get("normwise_error"):
                verdict += f" ({r['normwise_error']:.1e})"
            if r.get("error"):
                verdict = (f"{'timed out' if r.get('timed_out') else 'failed'}: "
                           f"{r['error'].replace('|', '/').splitlines()[0][:200]}")
            q = ratio(r)
            lines.append(
                f"| {r['program']} | {_cell(r.get('xla_s'), 1e3)} | "
                f"{_cell(r.get('hlo2dace_s'), 1e3)} | {_cell(q, digits=2)} | "
                f"{_cell(r.get('xla_peak_mb'), digits=1)} | "
                f"{_cell(r.get('hlo2dace_peak_mb'), digits=1)} | "
                f"{_cell(r.get('xla_first_call_s'), digits=2)} | "
                f"{_cell(r.get('first_call_s'), digits=2)} | {verdict} |")
    lines += ["", "![Everyday programs](everyday.png)", ""]
    (DOCS / "everyday.md").write_text("\n".join(lines))
    plot(rows)


def plot(rows: list[dict]) -> None:
    """everyday.png: each program's time and memory ratio, one panel per size and threads."""
    plt = pyplot()
    if plt is None:
        return
    settings = settings_of(rows)
    figure, axes = plt.subplots(len(settings), 1, squeeze=False,
                                figsize=(14, 3.8 * len(settings)))
    for ax, (size, threads) in zip(axes[:, 0], settings):
        mine = sorted((r for r in rows if (r["size"], r["threads"]) == (size, threads)),
                      key=lambda r: r["program"])
        for offset, key, label, marker in ((-0.15, "s", "time", "o"),
                                           (0.15, "peak_mb", "peak memory", "s")):
            points = [(k + offset, ratio(r, key)) for k, r in enumerate(mine)
                      if ratio(r, key) and (key != "s" or r.get("verdict") == "OK")]
            if points:
                ax.scatter(*zip(*points), marker=marker, s=18, label=f"hlo2dace/XLA {label}")
        failed = [k for k, r in enumerate(mine) if r.get("error")
                  or r.get("verdict") not in (None, "OK")]
        if failed:
            ax.scatter(failed, [1.0] * len(failed), marker="x", color="red", s=30,
                       label="failed, timed out or differs")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(mine)), [r["program"] for r in mine], rotation=90, fontsize=7)
        ax.set_ylabel("hlo2dace / XLA")
        ax.set_title(f"{size} size, {threads} thread{'s' if threads != '1' else ''}: "
                     "below 1 is faster (or smaller) than XLA")
        ax.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(DOCS / "everyday.png", dpi=80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small sizes only, a short budget: a smoke run")
    parser.add_argument("--only", nargs="+", help="these programs only (default: all)")
    parser.add_argument("--sizes", nargs="+", choices=SIZES, help=argparse.SUPPRESS)
    parser.add_argument("--threads", nargs="+", default=["1", "all"], choices=["1", "all"])
    parser.add_argument("--budget", type=float, help="seconds of timing per backend and size "
                        "(default 1, 0.1 with --quick)")
    parser.add_argument("--timeout", type=float, help="seconds per program (all its sizes) "
                        "before it is given up (default 900, 300 with --quick)")
    parser.add_argument("--no-memory", action="store_true",
                        help="skip peak memory (two fresh processes per program and size)")
    parser.add_argument("--rows", type=Path, help="also write the measurements here (JSON)")
    parser.add_argument("--from-rows", type=Path, help="write the document from these rows")
    parser.add_argument("--command", help=argparse.SUPPRESS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = args.sizes or (["small"] if args.quick else list(SIZES))
    budget = args.budget if args.budget is not None else (0.1 if args.quick else 1.0)
    timeout = args.timeout or (300 if args.quick else 900)
    if args.child:
        measure(args.child, sizes, budget)
        return
    if args.memory_child:
        print(json.dumps(peak_growth(*args.memory_child)))
        return
    command = args.command or "python bench/everyday_suite.py" + " --quick" * args.quick
    if args.from_rows:
        write(json.loads(args.from_rows.read_text()), command)
        return
    unknown = set(args.only or ()) - set(PROGRAMS)
    if unknown:
        parser.error(f"no program {', '.join(sorted(unknown))}; there are {', '.join(PROGRAMS)}")
    names = args.only or list(PROGRAMS)
    rows = []
    for threads in args.threads:
        rows += run_setting(names, sizes, budget, 1 if threads == "1" else None, timeout,
                            not args.no_memory)
        if args.rows:
            args.rows.write_text(json.dumps(rows, indent=0))
    if not args.only:
        write(rows, command)
        print((DOCS / "everyday.md").read_text())
    else:  # a subset: its summary, and no document
        print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
