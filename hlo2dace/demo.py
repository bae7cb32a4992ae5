"""`make demo`: the seed example, jnp.tanh(jnp.dot(x, w) + b) with x of shape 2000x2000,
through hlo2dace.compare; prints the report and where the SDFG was written."""

from __future__ import annotations

import time

import numpy as np


def seed_example(x, w, b):
    import jax.numpy as jnp

    return jnp.tanh(jnp.dot(x, w) + b)


def main(n: int = 2000) -> None:
    import hlo2dace

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n), dtype=np.float32)
    w = rng.standard_normal((n, n), dtype=np.float32) / np.float32(np.sqrt(n))
    b = rng.standard_normal((n,), dtype=np.float32)
    print(f"hlo2dace demo: jnp.tanh(jnp.dot(x, w) + b), x: {n}x{n} float32")
    report = hlo2dace.compare(seed_example, x, w, b)
    print(report)
    lowered = hlo2dace.jit(seed_example).lower(x, w, b)
    start = time.perf_counter()
    compiled = lowered.compile()
    print(f"compiled binary loaded from the cache in {time.perf_counter() - start:.3f} s")
    print(f"SDFG and binary: {compiled.folder}/build (program.sdfgz)")
    if not report.ok(rtol=1e-4, atol=1e-5):
        raise SystemExit("hlo2dace and XLA disagree beyond tolerance")


if __name__ == "__main__":
    main()
