"""The cuda target on a machine with an NVIDIA GPU: the compile check's programs run with
``hlo2dace.jit(f, target="cuda")`` and compared with ``jax.jit`` on the GPU (results and
the median time of a call), written to ``docs/gpu-results.md``.

Prepared without a GPU (docs/gpu.md) and not yet run. On a bare machine with the driver
only (CUDA 13 needs the 580 series or newer), it installs what it needs from the package
registry first: ``pip install -e '.[cuda,test]'`` and ``jax-cuda13-plugin``, XLA's GPU
reference at the pinned JAX version. Run from the project's root:

    python bench/gpu_check.py [--out docs/gpu-results.md] [--no-install]

It stops after ``--budget`` seconds (default 420: 7 of the 8 minutes a GPU check may take),
writing what it measured so far.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JAX_PLUGIN = "jax-cuda13-plugin[with-cuda]==0.10.2"


def install() -> None:
    """The cuda extra and XLA's GPU plugin, from the package registry."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", ".[cuda,test]",
                    JAX_PLUGIN], cwd=ROOT, check=True)


def gpu_name() -> str:
    """The GPU and its driver, as nvidia-smi names them; exits where there is none."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True)
    except FileNotFoundError:
        done = None
    if done is None or done.returncode != 0:
        sys.exit("no NVIDIA GPU (nvidia-smi failed or is missing): without one, the check "
                 "of the cuda target is tests/test_cuda_compile.py")
    return done.stdout.strip()


def median_seconds(call, repeats: int = 20) -> float:
    import numpy as np

    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "gpu-results.md"))
    parser.add_argument("--no-install", action="store_true")
    parser.add_argument("--budget", type=float, default=420.0)
    args = parser.parse_args()
    started = time.perf_counter()
    device = gpu_name()
    if not args.no_install:
        install()
    sys.path.insert(0, str(ROOT / "tests"))
    import jax
    import numpy as np
    from test_cuda_compile import PROGRAMS

    import hlo2dace
    from hlo2dace import cuda_toolchain

    # the GPU's architecture for the builds (cuda_toolchain.build_environment keeps it)
    cuda_toolchain.configure_dace("sm_" + jax.devices("gpu")[0].compute_capability.replace(
        ".", ""))
    rows = []
    for name, (fn, arguments, *options) in PROGRAMS.items():
        if time.perf_counter() - started > args.budget:
            rows.append((name, "not run (time budget)", "", "", ""))
            continue
        gpu_args = [jax.device_put(a, jax.devices("gpu")[0]) for a in arguments]
        try:
            ours = hlo2dace.jit(fn, target="cuda", **(options[0] if options else {}))
            build = time.perf_counter()
            got = jax.tree.leaves(ours(*arguments))
            build = time.perf_counter() - build
            xla = jax.jit(fn)
            expected = jax.tree.leaves(xla(*gpu_args))
            for g, e in zip(got, expected):
                e = np.asarray(e)
                tolerance = 1e-5 if e.dtype in (np.float32, np.float16) else 1e-12
                np.testing.assert_allclose(np.asarray(g, dtype=e.dtype), e, rtol=tolerance,
                                           atol=tolerance)
            t_ours = median_seconds(lambda f=ours, a=arguments: jax.block_until_ready(f(*a)))
            t_xla = median_seconds(lambda f=xla, a=gpu_args: jax.block_until_ready(f(*a)))
            rows.append((name, "same results", f"{build:.1f}", f"{t_ours * 1e6:.0f}",
                         f"{t_xla * 1e6:.0f}"))
        except Exception as exc:  # each program's failure is a row of the report
            rows.append((name, f"failed: {type(exc).__name__}: {str(exc)[:200]}", "", "", ""))
        print(*rows[-1], sep=" | ", flush=True)
    lines = [f"# The cuda target on {device}", "",
             "Written by `bench/gpu_check.py`: each program of `tests/test_cuda_compile.py` "
             "run by hlo2dace's cuda target (arguments in host memory, copied each call) "
             "and by `jax.jit` on the GPU (arguments on the device).", "",
             "| program | result | first call (s) | hlo2dace (us) | XLA (us) |",
             "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
