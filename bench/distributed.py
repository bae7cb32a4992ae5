"""Sharded programs on 1, 2 and 4 MPI ranks: hlo2dace (one process per rank, DaCe code,
MPI through DaCe's communication library) against XLA's own multi-device CPU execution of
the same program (N simulated devices in one process), for a 1-D stencil with halo
exchange (ppermute in a fori_loop) and a data-parallel MLP training step (pmean of the
gradients), in strong scaling (a fixed global size) and weak scaling (a fixed size per
rank). The time spent communicating is measured by programs that do only the step's
communication (the halo exchanges, the gradient mean) on the same shapes.

    python bench/distributed.py          # writes docs/distributed-results.md and .png
    python bench/distributed.py --quick  # smaller sizes

Each configuration runs in its own job (``mpirun -n R --oversubscribe``) or process (XLA),
one after another; times are medians of repetitions, each ended by a barrier so that it
counts the slowest rank. The machine's load average is recorded beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RANKS = (1, 2, 4)


def workloads(quick: bool) -> dict:
    """name -> (global size at strong scaling, size per rank at weak scaling)."""
    if quick:
        return {"stencil": (1 << 16, 1 << 14), "training": (512, 128)}
    return {"stencil": (1 << 20, 1 << 18), "training": (4096, 1024)}


STEPS = 100  # stencil steps per call


def programs(name: str, size: int, ranks: int):
    """(the sharded function, its communication alone, the arguments, their shardings) on
    ``ranks`` devices: ``size`` is the global number of cells (stencil) or of samples
    (training). The communication program takes the first argument only."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((ranks,), ("x",), axis_types=(AxisType.Auto,))
    rng = np.random.default_rng(0)

    def shard_map(f, in_specs, out_specs):
        return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                     check_vma=False))

    if name == "stencil":
        def halo(u):
            right = jax.lax.ppermute(u[-1:], "x", [(i, i + 1) for i in range(ranks - 1)])
            left = jax.lax.ppermute(u[:1], "x", [(i + 1, i) for i in range(ranks - 1)])
            return right, left

        def run(u):
            def body(_, u):
                right, left = halo(u)
                padded = jnp.concatenate([right, u, left])
                return u + 0.25 * (padded[:-2] - 2 * u + padded[2:])
            return jax.lax.fori_loop(0, STEPS, body, u)

        def exchange(u):
            def body(_, edges):
                right, left = halo(edges)
                return edges + right + left
            return jax.lax.fori_loop(0, STEPS, body, u[:2])

        u = rng.standard_normal(size, np.float32)
        return (shard_map(run, P("x"), P("x")), shard_map(exchange, P("x"), P("x")), (u,),
                placed(mesh, (P("x"),)))

    features, hidden, outputs = 256, 512, 16

    def loss(params, x, y):
        w1, b1, w2 = params
        return jnp.mean((jnp.tanh(x @ w1 + b1) @ w2 - y) ** 2)

    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        grads = jax.lax.pmean(grads, "x")
        return tuple(p - 0.01 * g for p, g in zip(params, grads)), jax.lax.pmean(value, "x")

    def mean_only(params):
        return jax.lax.pmean(params, "x")

    params = (rng.standard_normal((features, hidden), np.float32) * 0.05,
              np.zeros(hidden, np.float32),
              rng.standard_normal((hidden, outputs), np.float32) * 0.05)
    x = rng.standard_normal((size, features), np.float32)
    y = rng.standard_normal((size, outputs), np.float32)
    replicated = (P(), P(), P())
    specs = (replicated, P("x"), P("x"))
    return (shard_map(step, specs, (replicated, P())),
            shard_map(mean_only, (replicated,), replicated), (params, x, y),
            placed(mesh, specs))


def placed(mesh, specs):
    """The ``NamedSharding`` of each argument, as a pytree like the arguments."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    return jax.tree_util.tree_map(lambda spec: NamedSharding(mesh, spec), specs,
                                  is_leaf=lambda spec: isinstance(spec, PartitionSpec))


def _median(function, arguments, repetitions: int, barrier=lambda: None,
            finish=lambda result: result) -> tuple[float, float]:
    """The seconds of the first call of ``finish(function(*arguments))`` (a compilation,
    or a load from the disk cache), and the median of the next ``repetitions``, each
    between two barriers (so that it lasts until the slowest rank is done)."""
    barrier()
    start = time.perf_counter()
    finish(function(*arguments))
    barrier()
    first = time.perf_counter() - start
    times = []
    for _ in range(repetitions):
        barrier()
        start = time.perf_counter()
        finish(function(*arguments))
        barrier()
        times.append(time.perf_counter() - start)
    return first, sorted(times)[len(times) // 2]


def local_shards(arguments, shardings, rank: int):
    """This rank's shard of each argument, as the process-local arrays that a job's ranks
    hold (so the calls neither cut global arrays nor gather the results: as XLA's
    arguments, placed on their devices beforehand, the data stays where it is)."""
    import jax

    import hlo2dace

    def shard(argument, sharding):
        index = sharding.devices_indices_map(argument.shape)[jax.devices()[rank]]
        return hlo2dace.make_array_from_process_local_data(sharding, argument[index],
                                                           argument.shape)

    return jax.tree_util.tree_map(shard, arguments, shardings)


def rank_main(args) -> None:
    """One rank of the hlo2dace job: every workload at this job's size; rank 0 prints one
    JSON row per measurement."""
    import hlo2dace  # before the meshes: one JAX device per rank
    from hlo2dace import mpi

    ranks = mpi.size()
    barrier = mpi.world().Barrier if mpi.world() is not None else (lambda: None)
    for name, (strong, weak) in workloads(args.quick).items():
        for scaling, size in (("strong", strong), ("weak", weak * ranks)):
            full, communication, arguments, shardings = programs(name, size, ranks)
            if ranks > 1:  # one rank: a program of one device, whole arrays
                arguments = local_shards(arguments, shardings, mpi.rank())
            ours, talk = hlo2dace.jit(full), hlo2dace.jit(communication)
            first, seconds = _median(ours, arguments, args.repetitions, barrier)
            comm = _median(talk, arguments[:1], args.repetitions, barrier)[1] \
                if ranks > 1 else 0.0
            if mpi.rank() == 0:
                print(json.dumps({"who": "hlo2dace", "workload": name, "scaling": scaling,
                                  "ranks": ranks, "size": size, "seconds": seconds,
                                  "communication": comm, "first": first}), flush=True)


def xla_main(args) -> None:
    """XLA's execution of the same programs on ``--xla R`` simulated devices."""
    import jax

    ranks = args.xla
    jax.config.update("jax_num_cpu_devices", ranks)
    for name, (strong, weak) in workloads(args.quick).items():
        for scaling, size in (("strong", strong), ("weak", weak * ranks)):
            full, communication, arguments, shardings = programs(name, size, ranks)
            arguments = jax.device_put(arguments, shardings)
            first, seconds = _median(full, arguments, args.repetitions,
                                     finish=jax.block_until_ready)
            comm = _median(communication, arguments[:1], args.repetitions,
                           finish=jax.block_until_ready)[1] if ranks > 1 else 0.0
            print(json.dumps({"who": "xla", "workload": name, "scaling": scaling,
                              "ranks": ranks, "size": size, "seconds": seconds,
                              "communication": comm, "first": first}), flush=True)


def _rows(command: list[str], env: dict | None = None) -> list[dict]:
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=3600,
                          env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def threads_per_rank(ranks: int) -> int:
    """OpenMP threads for each of ``ranks`` ranks on this machine: its cores shared out
    (``$OMP_NUM_THREADS`` when set), as a job on one node should be run."""
    given = os.environ.get("OMP_NUM_THREADS", "")
    return int(given) if given.isdigit() else max(1, (os.cpu_count() or 1) // ranks)


def launcher_main(args) -> None:
    me = [sys.executable, str(Path(__file__).resolve())]
    options = ["--repetitions", str(args.repetitions)] + (["--quick"] if args.quick else [])
    mpirun = [shutil.which("mpirun") or "mpirun", "--oversubscribe"]
    if os.geteuid() == 0:
        mpirun.append("--allow-run-as-root")
    rows, loads = [], []
    for ranks in RANKS:  # interleaved: hlo2dace, then XLA, at each rank count
        before = load()
        env = dict(os.environ, OMP_NUM_THREADS=str(threads_per_rank(ranks)))
        rows += _rows([*mpirun, "-n", str(ranks), *me, "--rank", *options], env)
        rows += _rows([*me, "--xla", str(ranks), *options])
        loads.append(f"{ranks} rank(s): {before} before, {load()} after")
        print(loads[-1], flush=True)
    write_report(rows, loads, args)


def write_report(rows: list[dict], loads: list[str], args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def find(who, workload, scaling, ranks):
        return next(r for r in rows if (r["who"], r["workload"], r["scaling"], r["ranks"])
                    == (who, workload, scaling, ranks))

    command = "python bench/distributed.py" + (" --quick" if args.quick else "") + \
        (f" --repetitions {args.repetitions}" if args.repetitions != 21 else "")
    lines = [
        "# Sharded programs on 1, 2 and 4 ranks: measurements", "",
        f"Generated by `{command}`; do not edit (`docs/distributed.md` discusses them).",
        f"Machine: {os.cpu_count()} cores ({platform.processor() or platform.machine()}), "
        "shared with other work: 2 and 4 ranks (XLA: devices) share its cores, so these "
        "figures show the cost of communication and oversubscription, not a speed-up. "
        "hlo2dace: one process per rank (`mpirun -n R --oversubscribe`), "
        "OpenMP threads per rank: the cores shared out "
        f"({', '.join(f'{r}: {threads_per_rank(r)}' for r in RANKS)}); XLA: one process "
        "of R CPU devices, arguments placed on their devices beforehand. Median of "
        f"{args.repetitions} calls, each ended by a barrier (the slowest rank). "
        "`communication`: a program doing only the step's communication on the same "
        "shapes (the stencil's halo exchanges, the training step's gradient mean). "
        "`first call`: compilation or load from the disk cache. "
        "ratio = hlo2dace / XLA (below 1: hlo2dace is faster).", "",
        "Load average (1, 5, 15 min) around each rank count: " + "; ".join(loads) + ".", "",
        "| workload | scaling | ranks | global size | hlo2dace ms | communication ms | "
        "XLA ms | XLA communication ms | ratio | first call s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for workload, axis in zip(("stencil", "training"), axes):
        for scaling, style in (("strong", "-"), ("weak", "--")):
            for who, colour in (("hlo2dace", "tab:blue"), ("xla", "tab:orange")):
                times = [find(who, workload, scaling, r)["seconds"] * 1e3 for r in RANKS]
                axis.plot(RANKS, times, style, color=colour, marker="o",
                          label=f"{who}, {scaling}")
            for ranks in RANKS:
                ours, xla = (find(w, workload, scaling, ranks) for w in ("hlo2dace", "xla"))
                lines.append(
                    f"| {workload} | {scaling} | {ranks} | {ours['size']:,} | "
                    f"{ours['seconds'] * 1e3:.2f} | {ours['communication'] * 1e3:.2f} | "
                    f"{xla['seconds'] * 1e3:.2f} | {xla['communication'] * 1e3:.2f} | "
                    f"{ours['seconds'] / xla['seconds']:.2f} | {ours['first']:.1f} |")
        axis.set_xticks(RANKS)
        axis.set_xlabel("ranks (devices for XLA)")
        axis.set_yscale("log")
        axis.set_ylabel("ms per call (log scale)")
        calls = f"{STEPS} steps per call" if workload == "stencil" else "one step per call"
        axis.set_title(f"{workload} ({calls})")
        axis.legend(fontsize=8)
    figure.suptitle(f"{os.cpu_count()}-core machine: 2 and 4 ranks share its cores "
                    "(docs/distributed.md)")
    figure.tight_layout()
    figure.savefig(DOCS / "distributed.png", dpi=110)
    text = "\n".join(lines) + "\n"
    print(text)
    (DOCS / "distributed-results.md").write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repetitions", type=int, default=21)
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--xla", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        rank_main(args)
    elif args.xla:
        xla_main(args)
    else:
        launcher_main(args)


if __name__ == "__main__":
    main()
