"""`make demo`: the seed example, jnp.tanh(jnp.dot(x, w) + b) with x of shape 2000x2000,
through hlo2dace.compare; prints the report, the time a new process takes to load the
cached binary, and where the SDFG was written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np


def seed_example(x, w, b):
    import jax.numpy as jnp

    return jnp.tanh(jnp.dot(x, w) + b)


_LOAD_IN_NEW_PROCESS = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    start = time.perf_counter()
    import hlo2dace
    from hlo2dace.demo import seed_example
    n = int(sys.argv[1])
    x, b = np.zeros((n, n), np.float32), np.zeros(n, np.float32)
    ready = time.perf_counter()
    compiled = hlo2dace.jit(seed_example).lower(x, x, b).compile()
    print(json.dumps({"seconds": time.perf_counter() - ready, "built": compiled.program.built,
                      "folder": str(compiled.folder)}))
""")


def load_in_new_process(n: int, cache_dir: str | None = None) -> dict:
    """Lower, normalise and load the seed example's binary in a fresh Python process:
    ``seconds`` (imports excluded), ``built`` (False when the disk cache served it)."""
    env = dict(os.environ)
    if cache_dir:
        env["HLO2DACE_CACHE_DIR"] = cache_dir
    out = subprocess.run([sys.executable, "-c", _LOAD_IN_NEW_PROCESS, str(n)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def main(n: int = 2000) -> None:
    import hlo2dace

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n), dtype=np.float32)
    w = rng.standard_normal((n, n), dtype=np.float32) / np.float32(np.sqrt(n))
    b = rng.standard_normal((n,), dtype=np.float32)
    print(f"hlo2dace demo: jnp.tanh(jnp.dot(x, w) + b), x: {n}x{n} float32\n")
    report = hlo2dace.compare(seed_example, x, w, b, timing_budget=2.0)
    print(report)
    loaded = load_in_new_process(n)
    print(f"a new process gets the cached binary in {loaded['seconds']:.3f} s (JAX lowering, "
          f"normalising, importing DaCe and loading; built again: {loaded['built']})")
    print(f"binary: {loaded['folder']}/build (the SDFG: hlo2dace convert, or "
          f"hlo2dace.jit(f).lower(x).as_sdfg())")
    if not report.ok:
        raise SystemExit("hlo2dace and XLA disagree beyond tolerance")


if __name__ == "__main__":
    main()
