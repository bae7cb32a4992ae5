"""OpenMP wait policies and thread counts measured on programs with small maps in loops and
with large maps, as the machine is and with every core kept busy by other processes.

    python bench/threading_policy.py [--budget 1.0] [--busy-only | --as-is-only]

Each setting (thread count, ``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT``) runs in a process of
its own, since libgomp reads them when it starts; every process times hlo2dace and XLA
on the same cases, taking turns. "busy" starts one spinning process per core for the
duration of the measurement, as a laptop or a shared node with other work has. Prints a
Markdown table of times and of ratios to XLA's."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys

from harness import interleaved, thread_environment

#: name -> environment changes (None: removed) on top of the default threads
SETTINGS = {
    "1 thread": {"OMP_NUM_THREADS": "1"},
    "passive": {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": None},
    "spin 10k": {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": "10000"},
    "spin 100k": {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": "100000"},
    "spin 1M": {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": "1000000"},
    "active": {"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": None},
}


def cases():
    """(name, function, arguments): small maps in a loop, and large maps."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    def stencil(u, v):
        """Two 5-point updates of a 150 x 150 grid per step, 50 steps."""
        def step(_, uv):
            u, v = uv
            v = v.at[1:-1, 1:-1].set(0.2 * (u[1:-1, 1:-1] + u[:-2, 1:-1] + u[2:, 1:-1]
                                            + u[1:-1, :-2] + u[1:-1, 2:]))
            u = u.at[1:-1, 1:-1].set(0.2 * (v[1:-1, 1:-1] + v[:-2, 1:-1] + v[2:, 1:-1]
                                            + v[1:-1, :-2] + v[1:-1, 2:]))
            return u, v
        return jax.lax.fori_loop(0, 50, step, (u, v))

    def chain(t, s):
        """An equation-of-state-like elementwise chain."""
        a = 999.8 + t * (6.8e-2 + t * (-9.1e-3 + t * 1.0e-4))
        return a + s * jnp.sqrt(jnp.abs(s)) * jnp.exp(-t * 1e-2) + jnp.log1p(jnp.abs(s))

    def rows(x):
        return jnp.tanh(x).sum(axis=1)

    rng = np.random.default_rng(0)
    yield "stencil 150x150, 50 steps", stencil, (rng.random((150, 150)), rng.random((150, 150)))
    yield "elementwise chain 64x64", chain, (rng.random((64, 64)), rng.random((64, 64)))
    yield "elementwise chain 1000x1000", chain, (rng.random((1000, 1000)),
                                                 rng.random((1000, 1000)))
    yield "tanh row sums 2000x500", rows, (rng.standard_normal((2000, 500)),)


def measure(budget: float) -> list[dict]:
    import jax

    import hlo2dace
    from hlo2dace.compare import keep_freed_memory

    jax.config.update("jax_enable_x64", True)
    keep_freed_memory()
    def calls(fun, args):
        xla, ours = jax.jit(fun), hlo2dace.jit(fun)
        return {"xla": (lambda: jax.block_until_ready(xla(*args)), None),
                "hlo2dace": (lambda: jax.block_until_ready(ours(*args)), None)}

    return [{"case": name, **interleaved(calls(fun, args), budget)}
            for name, fun, args in cases()]


def _spin() -> None:
    while True:
        pass


def run(setting: str, busy: bool, budget: float) -> list[dict]:
    env = thread_environment(None)
    for key, value in SETTINGS[setting].items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    spinners = [multiprocessing.Process(target=_spin, daemon=True)
                for _ in range(os.cpu_count() if busy else 0)]
    for spinner in spinners:
        spinner.start()
    try:
        output = subprocess.run([sys.executable, __file__, "--child", "--budget", str(budget)],
                                env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    finally:
        for spinner in spinners:
            spinner.terminate()
    return json.loads(output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per timing")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--conditions", nargs="+", default=["as is", "busy"],
                        choices=["as is", "busy"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.budget)))
        return
    results = {}
    for condition in args.conditions:
        for setting in args.settings:
            load = os.getloadavg()[0]
            rows = run(setting, condition == "busy", args.budget)
            results[(condition, setting)] = rows
            print(json.dumps({"condition": condition, "setting": setting, "load": load,
                              "rows": rows}), file=sys.stderr, flush=True)
    names = [r["case"] for r in next(iter(results.values()))]
    print(f"{os.cpu_count()} cores; hlo2dace ms (ratio to XLA in the same process)\n")
    print("| condition | setting | " + " | ".join(names) + " |")
    print("|---|---|" + "---:|" * len(names))
    for (condition, setting), rows in results.items():
        cells = [f"{r['hlo2dace'] * 1e3:.3f} ({r['hlo2dace'] / r['xla']:.2f})" for r in rows]
        print(f"| {condition} | {setting} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
