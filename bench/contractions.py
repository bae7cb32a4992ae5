"""Contraction benchmark: hlo2dace.jit against jax.jit (XLA) in the same run, on square
f32/f64 matrix products and batched products. Prints a table and writes the rows as JSON
(default docs/contractions.json). Run: `.venv/bin/python bench/contractions.py [out.json]`."""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from run import _quiet_malloc

import hlo2dace
from hlo2dace.compare import median_seconds

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "contractions.json"
SIZES = (64, 128, 256, 512, 1024, 2048)


def matmul(x, w):
    return x @ w


def attention_scores(q, k):
    return jnp.einsum("bqd,bkd->bqk", q, k)


def cases(sizes, batched: bool):
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        for n in sizes:
            x = rng.standard_normal((n, n)).astype(dtype)
            w = rng.standard_normal((n, n)).astype(dtype)
            yield f"matmul {n}x{n} {np.dtype(dtype).name}", matmul, (x, w), 2 * n ** 3
    if batched:
        b, n = 64, 256
        for dtype in (np.float32, np.float64):
            x = rng.standard_normal((b, n, n)).astype(dtype)
            w = rng.standard_normal((b, n, n)).astype(dtype)
            name = np.dtype(dtype).name
            yield f"batched matmul {b}x{n}x{n} {name}", matmul, (x, w), 2 * b * n ** 3
            yield (f"batched bqd,bkd->bqk {b}x{n}x{n} {name}", attention_scores, (x, w),
                   2 * b * n ** 3)


def measure(name, fun, inputs, flops, budget, rounds: int = 3) -> dict:
    """Seconds per call of XLA and of the compiled hlo2dace module (called with NumPy arrays
    directly: the product, not the jit wrapper's per-call overhead): medians measured in
    alternating rounds, the best round of each kept, so that a burst of load from other
    processes does not decide the ratio."""
    xla = jax.jit(fun)
    compiled = hlo2dace.jit(fun).lower(*inputs).compile()
    xla_s = dace_s = float("inf")
    for _ in range(rounds):
        xla_s = min(xla_s, median_seconds(lambda: jax.block_until_ready(xla(*inputs)),
                                          budget / rounds))
        dace_s = min(dace_s, median_seconds(lambda: compiled(*inputs), budget / rounds))
    return {"case": name, "flops": flops, "xla_ms": xla_s * 1e3, "dace_ms": dace_s * 1e3,
            "xla_gflops": flops / xla_s / 1e9, "dace_gflops": flops / dace_s / 1e9,
            "ratio_to_xla": xla_s / dace_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT,
                        help="where to write the JSON results")
    parser.add_argument("--budget", type=float, default=3.0,
                        help="seconds per measurement of each side")
    parser.add_argument("--sizes", type=int, nargs="*", default=SIZES,
                        help="sizes of the square products")
    parser.add_argument("--no-batched", action="store_true", help="skip the batched cases")
    args = parser.parse_args()
    _quiet_malloc()
    jax.config.update("jax_enable_x64", True)  # the f64 cases; the others pass f32 arrays
    rows = []
    header = f"{'case':<36} {'XLA ms':>9} {'DaCe ms':>9} {'XLA GF/s':>9} {'DaCe GF/s':>9} " \
             f"{'ratio':>6}"
    print(header)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["HLO2DACE_CACHE_DIR"] = cache
        for name, fun, inputs, flops in cases(args.sizes, not args.no_batched):
            row = measure(name, fun, inputs, flops, args.budget)
            rows.append(row)
            print(f"{name:<36} {row['xla_ms']:>9.3f} {row['dace_ms']:>9.3f} "
                  f"{row['xla_gflops']:>9.1f} {row['dace_gflops']:>9.1f} "
                  f"{row['ratio_to_xla']:>6.2f}", flush=True)
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                         f"Python {platform.python_version()}, jax {jax.__version__}",
              "date": time.strftime("%Y-%m-%d"),
              "ratio": "XLA time / hlo2dace time (above 1: hlo2dace is faster)",
              "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
