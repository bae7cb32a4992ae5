"""First-call time of ``hlo2dace.jit``, split by stage, against XLA's compile time: a
transformer's training step at 1 to 32 layers, NPBench's kernels and pyhpc's benchmarks.
Writes the "Compile time" section of docs/benchmarks.md and docs/compile-time.png.

    python bench/compile_time.py [--layers 1 2 4 8 16 32] [--npbench PATH/TO/npbench]
                                 [--pyhpc PATH/TO/pyhpc-benchmarks] [--rows FILE]

The transformer is pre-norm (width 128, 4 heads, sequence 32, batch 4, GELU MLP); its
training step is ``jax.value_and_grad`` of a squared error plus an SGD update of the
parameters. NPBench and pyhpc are imported from the user's checkouts, never copied (NPBench
at its S preset, pyhpc at 4,096 points, float64).

Every case runs in a fresh process with an empty hlo2dace cache (``$HLO2DACE_CACHE_DIR``
in a new temporary folder); the machine-wide build caches DaCe keeps (the precompiled
DaCe header, CMake's configuration, recorded build commands) stay warm, as they are for a
user who compiled anything before. In that process XLA goes first (``jax.jit(f).lower``
and ``.compile()``, timed apart), then hlo2dace's first call, whose stages come from the
``hlo2dace`` logger; then, for the transformer, the step time of both, taking turns (the
median of each). A second fresh process then loads the program from that cache (the
``cache lookup`` stage: checksums, the signature, the library). CPU seconds (the process
and its compilers) are reported beside wall seconds: on a machine shared with other work
they say what the compile costs, wall seconds what it took.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import pyplot

DOCS = Path(__file__).resolve().parents[1] / "docs"
LAYERS = (1, 2, 4, 8, 16, 32)
#: the hlo2dace stages reported, in order (``hlo2dace/progress.py``)
STAGES = ("JAX lowering", "normalise", "parse", "translate", "code generation", "C++ compile")
PYHPC = {  # name -> (module prefix, JAX entry point), as bench/pyhpc.py names them
    "equation_of_state": ("eos", "gsw_dHdT"),
    "isoneutral_mixing": ("isoneutral", "isoneutral_diffusion_pre"),
    "turbulent_kinetic_energy": ("tke", "integrate_tke"),
}
WIDTH, HEADS, SEQUENCE, BATCH = 128, 4, 32, 4
#: the markers of this section in docs/benchmarks.md (bench/run.py keeps it)
SECTION_BEGIN = "<!-- compile time: bench/compile_time.py -->"
SECTION_END = "<!-- end of compile time -->"


# ------------------------------------------------------------------ the transformer
def transformer(layers: int):
    """The training step and its arguments (parameters, inputs, targets)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)

    def weight(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    params = [{"ln1": np.ones(WIDTH, np.float32), "ln2": np.ones(WIDTH, np.float32),
               "qkv": weight(WIDTH, 3 * WIDTH), "out": weight(WIDTH, WIDTH),
               "up": weight(WIDTH, 4 * WIDTH), "down": weight(4 * WIDTH, WIDTH)}
              for _ in range(layers)]
    x = rng.standard_normal((BATCH, SEQUENCE, WIDTH)).astype(np.float32)
    y = rng.standard_normal((BATCH, SEQUENCE, WIDTH)).astype(np.float32)

    def norm(x, gain):
        mean = x.mean(-1, keepdims=True)
        variance = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(variance + 1e-5) * gain

    def forward(params, x):
        b, s, d = x.shape
        for p in params:
            q, k, v = jnp.split(norm(x, p["ln1"]) @ p["qkv"], 3, axis=-1)
            q, k, v = (t.reshape(b, s, HEADS, d // HEADS).transpose(0, 2, 1, 3)
                       for t in (q, k, v))
            attention = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // HEADS))
            x = x + (attention @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ p["out"]
            x = x + jax.nn.gelu(norm(x, p["ln2"]) @ p["up"]) @ p["down"]
        return x

    def step(params, x, y):
        loss, grads = jax.value_and_grad(
            lambda params: jnp.mean((forward(params, x) - y) ** 2))(params)
        return loss, jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)

    return step, (params, x, y), {}


# ------------------------------------------------------------------ NPBench and pyhpc
def npbench_kernels(checkout: Path) -> list[str]:
    """NPBench's kernels that have a JAX port."""
    return [path.stem for path in sorted((checkout / "bench_info").glob("*.json"))
            if _npbench_port(checkout, path.stem).is_file()]


def _npbench_info(checkout: Path, name: str) -> dict:
    return json.loads((checkout / "bench_info" / f"{name}.json").read_text())["benchmark"]


def _npbench_folder(checkout: Path, info: dict) -> Path:
    return checkout / "npbench" / "benchmarks" / info["relative_path"]


def _npbench_port(checkout: Path, name: str) -> Path:
    info = _npbench_info(checkout, name)
    return _npbench_folder(checkout, info) / f"{info['module_name']}_jax.py"


def npbench(checkout: Path, name: str):
    """NPBench's JAX port of ``name`` at the S preset: the function, its arguments and
    its static arguments (as its own ``jax.jit`` declares them; integer parameters where
    it is not jitted)."""
    sys.path.insert(0, str(checkout))
    info = _npbench_info(checkout, name)
    prefix = "npbench.benchmarks." + info["relative_path"].replace("/", ".") + "." + \
        info["module_name"]
    data = dict(info["parameters"]["S"])
    init = info.get("init")
    if init:
        made = getattr(importlib.import_module(prefix), init["func_name"])(
            *[data[a] for a in init["input_args"]])
        data.update(zip(init["output_args"], made if len(init["output_args"]) > 1
                        else (made,)))
    function = getattr(importlib.import_module(prefix + "_jax"), info["func_name"])
    jit_info = getattr(function, "_jit_info", None)
    if jit_info is not None:
        static = tuple(jit_info.static_argnums)
        function = getattr(function, "__wrapped__", function)
    else:
        static = tuple(i for i, a in enumerate(info["input_args"])
                       if a not in info["array_args"] and isinstance(data.get(a), int))
    return function, tuple(data[a] for a in info["input_args"]), {"static_argnums": static}


def pyhpc(checkout: Path, name: str):
    """pyhpc's JAX benchmark ``name`` at 4,096 points."""
    import jax

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, str(checkout))
    prefix, entry = PYHPC[name]
    package = importlib.import_module(f"benchmarks.{name}")
    function = getattr(importlib.import_module(f"benchmarks.{name}.{prefix}_jax"), entry)
    return getattr(function, "__wrapped__", function), \
        tuple(jax.device_put(a) for a in package.generate_inputs(4096)), {}


# ------------------------------------------------------------------ one case, in a child
def _stage_times() -> tuple[dict[str, float], dict[str, float]]:
    """Where the ``hlo2dace`` logger's stage records go: stage -> wall seconds, and
    stage -> CPU seconds (the process and its compilers)."""
    import logging

    times: dict[str, float] = {}
    cpu: dict[str, float] = {}

    class Stages(logging.Handler):
        def emit(self, record):
            if getattr(record, "seconds", None) is not None:
                times[record.stage] = record.seconds
                cpu[record.stage] = getattr(record, "cpu_seconds", None)

    logger = logging.getLogger("hlo2dace")
    logger.addHandler(Stages())
    logger.setLevel(logging.INFO)
    return times, cpu


def _interleaved(calls: dict, rounds: int = 7, per_round: int = 5) -> dict[str, float]:
    """The median seconds of each call, the calls taking turns in rounds."""
    import statistics

    samples: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()
    for _ in range(rounds):
        for name, call in calls.items():
            for _ in range(per_round):
                start = time.perf_counter()
                call()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def child(kind: str, name: str, source: str | None, cached: bool) -> dict:
    """Measure one case in this (fresh) process; ``cached``: only load it from the cache."""
    import jax

    import hlo2dace
    from hlo2dace.compare import keep_freed_memory
    from hlo2dace.progress import cpu_seconds

    keep_freed_memory()
    if kind == "transformer":
        function, args, options = transformer(int(name))
    elif kind == "npbench":
        function, args, options = npbench(Path(source), name)
    else:
        function, args, options = pyhpc(Path(source), name)
    static = options.get("static_argnums", ())
    arrays = [a for i, a in enumerate(args) if i not in static]
    stages, stage_cpu = _stage_times()
    ours = hlo2dace.jit(function, static_argnums=static)
    row: dict = {"kind": kind, "case": name}
    if cached:
        start, cpu = time.perf_counter(), cpu_seconds()
        jax.block_until_ready(ours(*args))
        row.update(load_s=time.perf_counter() - start, load_cpu_s=cpu_seconds() - cpu,
                   stages=dict(stages), stage_cpu=dict(stage_cpu))
        return row
    xla = jax.jit(function, static_argnums=static)
    start = time.perf_counter()
    lowered = xla.lower(*args)
    middle, cpu = time.perf_counter(), cpu_seconds()
    executable = lowered.compile()
    row.update(xla_lower_s=middle - start, xla_compile_s=time.perf_counter() - middle,
               xla_compile_cpu_s=cpu_seconds() - cpu)
    stages.clear()
    stage_cpu.clear()
    start, cpu = time.perf_counter(), cpu_seconds()
    jax.block_until_ready(ours(*args))
    row.update(first_call_s=time.perf_counter() - start, first_call_cpu_s=cpu_seconds() - cpu,
               stages=dict(stages), stage_cpu=dict(stage_cpu))
    row["ops"] = ours.lower(*args).as_text().count('"stablehlo.')
    if kind == "transformer":
        steps = _interleaved({"xla": lambda: jax.block_until_ready(executable(*arrays)),
                              "hlo2dace": lambda: jax.block_until_ready(ours(*args))})
        row.update(step_xla_s=steps["xla"], step_hlo2dace_s=steps["hlo2dace"])
    row["load_average"] = os.getloadavg()[0]
    return row


def measure(kind: str, name: str, source: str | None, timeout: float) -> dict:
    """One case: its first call in a fresh process with an empty cache, then its load
    from that cache in another."""
    with tempfile.TemporaryDirectory(prefix="h2d-compile-time-") as cache:
        env = {**os.environ, "HLO2DACE_CACHE_DIR": cache}
        command = [sys.executable, __file__, "--child", kind, name, source or ""]
        rows = []
        for extra in ([], ["--cached"]):
            try:
                done = subprocess.run(command + extra, env=env, capture_output=True,
                                      text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                return {"kind": kind, "case": name, "error": f"over {timeout:.0f} s"}
            if done.returncode:
                tail = (done.stderr.strip().splitlines() or ["?"])[-1]
                return {"kind": kind, "case": name, "error": tail[:200]}
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        first, loaded = rows
        first["load_s"], first["load_cpu_s"] = loaded["load_s"], loaded["load_cpu_s"]
        first["load_lookup_s"] = loaded["stages"].get("cache lookup")
        first["load_lookup_cpu_s"] = loaded.get("stage_cpu", {}).get("cache lookup")
        print(json.dumps(first), flush=True)
        return first


# ------------------------------------------------------------------ the report
def _seconds(value, cpu=None) -> str:
    """Seconds, and in brackets the CPU seconds where they were measured."""
    if value is None:
        return "-"
    return f"{value:.2f}" if cpu is None else f"{value:.2f} ({cpu:.2f})"


def write(rows: list[dict], command: str) -> None:
    ok = [r for r in rows if "error" not in r]
    load = max((r["load_average"] for r in ok), default=0)
    lines = [
        SECTION_BEGIN, "## Compile time", "",
        f"Generated by `{command}`: every case in a fresh process with an empty hlo2dace "
        "cache (DaCe's machine-wide build caches warm), XLA's `jax.jit(f).lower` and "
        "`.compile()` first, then hlo2dace's first call, split by stage (the `hlo2dace` "
        "logger's records; the C++ build is DaCe's code generation, then the C++ compiler "
        "on the program's translation units in parallel); CPU s counts the process and its "
        "compilers. Load: the first call of a second fresh process on that cache (JAX's "
        "lowering included), then the cache lookup alone (which checks and reads the entry "
        "and loads the library). Step: the training step's median time, both taking turns. "
        "Where a cell has a number in brackets, it is the CPU seconds of that time.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, load average "
        f"{load:.1f} at most during the run" + (
            " (above the core count: other work shared the cores, wall times are inflated, "
            "CPU s less so)." if load > (os.cpu_count() or 1) else
            " (below the core count: nothing else competed for the cores)."), "",
        "![compile time against op count](compile-time.png)", "",
        "| case | ops | XLA lower s | XLA compile s | hlo2dace first call s | CPU s | "
        + " | ".join(f"{s} s" for s in STAGES)
        + " | load s / lookup s | load CPU s | step ms XLA / hlo2dace |",
        "|---|" + "---:|" * (8 + len(STAGES)),
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['kind']} {r['case']} | failed: {r['error']} |")
            continue
        label = f"transformer, {r['case']} layer{'s' if r['case'] != '1' else ''}" \
            if r["kind"] == "transformer" \
            else f"{r['kind']} {r['case']}"
        step = f"{1e3 * r['step_xla_s']:.1f} / {1e3 * r['step_hlo2dace_s']:.1f}" \
            if "step_xla_s" in r else "-"
        lines.append(
            f"| {label} | {r['ops']:,} | {_seconds(r['xla_lower_s'])} | "
            f"{_seconds(r['xla_compile_s'], r.get('xla_compile_cpu_s'))} | "
            f"{_seconds(r['first_call_s'])} | {_seconds(r['first_call_cpu_s'])} | "
            + " | ".join(_seconds(r["stages"].get(s), r.get("stage_cpu", {}).get(s))
                         for s in STAGES)
            + f" | {_seconds(r['load_s'])} / "
            f"{_seconds(r['load_lookup_s'], r.get('load_lookup_cpu_s'))} | "
            f"{_seconds(r['load_cpu_s'])} | {step} |")
    lines += ["", "Against the targets of issue 22:", ""] + [f"- {t}" for t in targets(ok)]
    lines.append(SECTION_END)
    path = DOCS / "benchmarks.md"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    begin, end = text.find(SECTION_BEGIN), text.find(SECTION_END)
    if begin >= 0 and end > begin:
        text = text[:begin] + "\n".join(lines) + text[end + len(SECTION_END):]
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    path.write_text(text)
    plot(ok)


def targets(rows: list[dict]) -> list[str]:
    """The measurements the issue's targets are about, each beside its target."""
    found = []
    layers = {int(r["case"]): r for r in rows if r["kind"] == "transformer"}
    if len(layers) >= 2:
        largest = max(layers)
        reference = 12 if 12 in layers and largest != 12 else sorted(layers)[-2]
        big, small = layers[largest], layers[reference]

        def ratio(key):
            return (big[key] / big["ops"]) / (small[key] / small["ops"])

        found.append(f"per op, the {largest}-layer step's first call costs "
                     f"{ratio('first_call_s'):.2f}x the {reference}-layer one's in wall time, "
                     f"{ratio('first_call_cpu_s'):.2f}x in CPU time (target: at most 2.5x)")
    steps = [r for r in layers.values() if "step_xla_s" in r]
    if steps:
        found.append("the training step, hlo2dace's time over XLA's: " + ", ".join(
            f"{r['step_hlo2dace_s'] / r['step_xla_s']:.2f} ({r['case']} "
            f"layer{'s' if r['case'] != '1' else ''})"
            for r in steps) + " (target: nothing slower to run than before)")
    if 12 in layers:
        found.append(f"the 12-layer step's first call: {layers[12]['first_call_s']:.1f} s "
                     f"({layers[12]['first_call_cpu_s']:.1f} CPU s; target: at most 10 s)")
    others = [r for r in rows if r["kind"] != "transformer"]
    if others:
        slow = [r for r in others if r["first_call_s"] > 3]
        costly = [r for r in others if r["first_call_cpu_s"] > 3]
        worst = max(others, key=lambda r: r["first_call_s"])
        found.append(f"NPBench and pyhpc: {len(slow)} of {len(others)} first calls over 3 s "
                     f"(the target), {len(costly)} over 3 CPU s; the longest "
                     f"{worst['kind']} {worst['case']} at "
                     f"{worst['first_call_s']:.1f} s ({worst['first_call_cpu_s']:.1f} CPU s)")
    if rows:
        worst = max(rows, key=lambda r: r["load_lookup_s"] or 0)
        found.append(f"a cached program's cache lookup in a new process: at most "
                     f"{worst['load_lookup_s']:.2f} s ({worst['kind']} {worst['case']}; "
                     "target: under 0.5 s); with JAX's lowering of the function, at most "
                     f"{max(r['load_s'] for r in rows):.2f} s")
    return found


def plot(rows: list[dict]) -> None:
    plt = pyplot()
    if plt is None:
        return
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for kind, marker in (("transformer", "o"), ("npbench", "s"), ("pyhpc", "^")):
        chosen = [r for r in rows if r["kind"] == kind]
        if not chosen:
            continue
        ops = [r["ops"] for r in chosen]
        points = axes.scatter(ops, [r["first_call_s"] for r in chosen], marker=marker,
                              label=f"hlo2dace first call, {kind}")
        axes.scatter(ops, [r["first_call_cpu_s"] for r in chosen], marker=marker,
                     facecolors="none", edgecolors=points.get_facecolor()[:1],
                     label=f"hlo2dace first call, CPU s, {kind}")
        axes.scatter(ops, [r["xla_lower_s"] + r["xla_compile_s"] for r in chosen],
                     marker=marker, facecolors="none", edgecolors="gray",
                     label=f"XLA lower + compile, {kind}")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("StableHLO ops")
    axes.set_ylabel("seconds")
    axes.legend(fontsize=7)
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(DOCS / "compile-time.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="*", default=list(LAYERS))
    parser.add_argument("--npbench", type=Path, help="a checkout of spcl/npbench")
    parser.add_argument("--pyhpc", type=Path, help="a checkout of pyhpc-benchmarks")
    parser.add_argument("--kernels", nargs="*", help="NPBench kernels (default: all)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    parser.add_argument("--rows", type=Path, help="also keep the measurements as JSON")
    parser.add_argument("--from-rows", type=Path, help="write the report from such a file")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "NAME", "SOURCE"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--cached", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, name, source = args.child
        print(json.dumps(child(kind, name, source or None, args.cached)))
        return
    command = "python bench/compile_time.py" + (
        f" --layers {' '.join(map(str, args.layers))}" if args.layers != list(LAYERS) else "") + (
        " --npbench PATH" if args.npbench else "") + (" --pyhpc PATH" if args.pyhpc else "")
    if args.from_rows:
        write(json.loads(args.from_rows.read_text()), command)
        return
    cases = [("transformer", str(n), None) for n in args.layers]
    if args.pyhpc:
        cases += [("pyhpc", name, str(args.pyhpc)) for name in PYHPC]
    if args.npbench:
        cases += [("npbench", name, str(args.npbench))
                  for name in (args.kernels or npbench_kernels(args.npbench))]
    rows = [measure(kind, name, source, args.timeout) for kind, name, source in cases]
    if args.rows:
        args.rows.write_text(json.dumps(rows, indent=1))
    write(rows, command)


if __name__ == "__main__":
    main()
