"""Peak memory of a call beside its time (issue 47): pyhpc-benchmarks' equation_of_state,
isoneutral_mixing and turbulent_kinetic_energy through ``jax.jit``, ``hlo2dace.jit``, and
``hlo2dace.jit`` without the ``transient_arena`` pass and without it and
``reuse_transients``, on one thread.

    python bench/memory.py --pyhpc PATH/TO/pyhpc-benchmarks [--size 1048576]

Memory: each backend in a fresh process, its program compiled (hlo2dace's from a warm
cache) and loaded with the inputs in place; the growth of the process's peak resident set
(``VmHWM``, reset through ``/proc/self/clear_refs`` before the call) over its resident set
before the call, in the first call: what the call touches, its arrays allocated once per
program included (their pages are touched in the call). Time: the three backends
interleaved in one process (``harness.interleaved``), after ``keep_freed_memory``."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import interleaved, peak_growth_mb, thread_environment

BENCHMARKS = {  # name -> (module prefix, JAX entry point)
    "equation_of_state": ("eos", "gsw_dHdT"),
    "isoneutral_mixing": ("isoneutral", "isoneutral_diffusion_pre"),
    "turbulent_kinetic_energy": ("tke", "integrate_tke"),
}
#: backend -> the passes switched off (None: XLA)
BACKENDS = {"xla": None, "hlo2dace": (), "hlo2dace, no transient_arena": ("transient_arena",),
            "hlo2dace, no sharing": ("reuse_transients", "transient_arena")}


def _program(checkout: Path, name: str, size: int):
    import jax

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, str(checkout))
    prefix, entry = BENCHMARKS[name]
    package = importlib.import_module(f"benchmarks.{name}")
    xla = getattr(importlib.import_module(f"benchmarks.{name}.{prefix}_jax"), entry)
    inputs = [jax.device_put(a) for a in package.generate_inputs(size)]
    return getattr(xla, "__wrapped__", xla), inputs


def _compiled(fun, inputs, backend: str):
    import jax

    import hlo2dace

    disabled = BACKENDS[backend]
    jitted = jax.jit(fun) if disabled is None else hlo2dace.jit(fun, disable_passes=disabled)
    compiled = jitted.lower(*inputs).compile()
    return lambda: jax.block_until_ready(compiled(*inputs))


def peak_growth(checkout: Path, name: str, size: int, backend: str) -> dict:
    """In this (fresh) process: the first call's peak resident-set growth, in MB."""
    fun, inputs = _program(checkout, name, size)
    return {"peak_growth_mb": peak_growth_mb(_compiled(fun, inputs, backend))}


def times(checkout: Path, name: str, size: int, budget: float) -> dict:
    """Seconds per call of every backend, interleaved in this process."""
    from hlo2dace.compare import keep_freed_memory

    keep_freed_memory()
    fun, inputs = _program(checkout, name, size)
    return interleaved({b: (_compiled(fun, inputs, b), None) for b in BACKENDS}, budget)


def _child(args: list[str], env: dict) -> dict:
    output = subprocess.run([sys.executable, __file__, *args], env=env, check=True,
                            stdout=subprocess.PIPE, text=True).stdout
    return json.loads(output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pyhpc", type=Path, required=True)
    parser.add_argument("--size", type=int, default=1048576)
    parser.add_argument("--budget", type=float, default=6.0)
    parser.add_argument("--only", nargs="*", default=list(BENCHMARKS))
    parser.add_argument("--child", nargs=2, metavar=("BENCHMARK", "BACKEND|times"))
    args = parser.parse_args()
    if args.child:
        name, what = args.child
        row = times(args.pyhpc, name, args.size, args.budget) if what == "times" \
            else peak_growth(args.pyhpc, name, args.size, what)
        print(json.dumps(row))
        return
    env = thread_environment(1)
    common = ["--pyhpc", str(args.pyhpc), "--size", str(args.size), "--budget",
              str(args.budget)]
    print("| benchmark | backend | peak growth MB | ms per call |")
    print("|---|---|---:|---:|")
    with tempfile.TemporaryDirectory() as cache:
        env["HLO2DACE_CACHE_DIR"] = cache
        for name in args.only:
            seconds = _child([*common, "--child", name, "times"], env)  # fills the cache
            for backend in BACKENDS:
                grown = _child([*common, "--child", name, backend], env)["peak_growth_mb"]
                print(f"| {name} | {backend} | {grown} | {seconds[backend] * 1e3:.1f} |",
                      flush=True)


if __name__ == "__main__":
    main()
