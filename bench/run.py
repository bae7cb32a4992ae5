"""Benchmarks: hlo2dace against XLA (jax.jit) in the same run; writes docs/benchmarks.md
and docs/benchmarks.png. Sections: end-to-end examples (this file), contractions,
reductions, loops, kernels and everyday programs (their modules' ``cases``). Run with
`make bench` (or `python bench/run.py --quick`, or `--only loops` for one section)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import contractions
import everyday
import jax
import jax.numpy as jnp
import kernels
import loops
import numpy as np
import reductions
from harness import check, machine, pyplot

import hlo2dace
from hlo2dace.compare import keep_freed_memory, median_seconds
from hlo2dace.demo import load_in_new_process
from hlo2dace.demo import seed_example as seed

DOCS = Path(__file__).resolve().parents[1] / "docs"



def chain(t, s, p):
    """An equation-of-state-like elementwise chain: 30-odd ops, constants, a broadcast."""
    z = p[None, :] * 1e-4
    a = 999.843 + t * (6.79e-2 + t * (-9.09e-3 + t * (1.0e-4 - t * 1.12e-6)))
    b = s * (0.824 - 4.1e-3 * t + 7.6e-5 * t * t) + jnp.sqrt(jnp.abs(s)) * (-5.7e-3 + 1e-4 * t)
    c = jnp.exp(-z) * (1.0 + 0.1 * jnp.log1p(jnp.abs(t))) + 4.8e-4 * s * s
    return a + b * c


def tiny(x):
    return x + 1.0


def cases(quick: bool):
    """(name, function, inputs, flops) of the end-to-end cases."""
    rng = np.random.default_rng(0)
    sizes = (500, 1000) if quick else (500, 1000, 2000)
    for n in sizes:
        x = rng.standard_normal((n, n), dtype=np.float32)
        w = rng.standard_normal((n, n), dtype=np.float32) / np.float32(np.sqrt(n))
        b = rng.standard_normal(n, dtype=np.float32)
        yield f"seed tanh(x@w+b) {n}x{n} f32", seed, (x, w, b), 2 * n ** 3
    points = 10 ** 5 if quick else 10 ** 6
    cols = 1000
    t = rng.uniform(0, 30, (points // cols, cols))
    s = rng.uniform(30, 40, (points // cols, cols))
    p = rng.uniform(0, 5000, cols)
    yield f"elementwise chain {points:.0e} points f64", chain, (t, s, p), None
    yield "tiny x+1 (4 elements): call overhead", tiny, (np.ones(4, np.float32),), None


SECTIONS = {
    "End to end": cases,
    "Contractions": contractions.cases,
    "Reductions": reductions.cases,
    "Loops": loops.cases,
    "Kernels": kernels.cases,
    "Everyday programs": everyday.cases,
}


def measure(name, fun, inputs, flops, budget, rounds: int = 3) -> dict:
    """Median seconds per call of XLA, of ``hlo2dace.jit`` and of the ``Compiled`` module's
    program (called with NumPy arrays directly, ``call_flat``), measured in alternating rounds
    with the best round of each kept, so that a burst of load from other processes does not
    decide the ratio; the first call's time (lowering, translation, build); and the results of
    both hlo2dace calls checked against XLA's (``harness.check``: the worse verdict and error).
    A case that raises is recorded with its error."""
    try:
        return {"case": name, **_measure(fun, inputs, flops, budget, rounds)}
    except Exception as exc:
        return {"case": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def _measure(fun, inputs, flops, budget, rounds: int) -> dict:
    xla = jax.jit(fun)
    ours = hlo2dace.jit(fun)
    start = time.perf_counter()
    result = ours(*inputs)
    first = time.perf_counter() - start
    compiled = ours.lower(*inputs).compile()
    leaves = jax.tree.leaves(inputs)  # the program takes the pytrees' arrays
    expected = xla(*inputs)
    checks = [check(expected, result), check(expected, compiled.call_flat(leaves))]
    checked = {"verdict": "OK" if all(c["verdict"] == "OK" for c in checks) else "DIFFERS",
               "normwise_error": max(c["normwise_error"] for c in checks)}
    calls = {"xla": lambda: jax.block_until_ready(xla(*inputs)), "jit": lambda: ours(*inputs),
             "compiled": lambda: compiled.call_flat(leaves)}
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for key, call in calls.items():
            best[key] = min(best[key], median_seconds(call, budget / rounds))
    return {"xla_ms": best["xla"] * 1e3, "dace_ms": best["jit"] * 1e3,
            "compiled_ms": best["compiled"] * 1e3, "speedup": best["xla"] / best["jit"],
            "first_call_s": first, **checked,
            "xla_gflops": flops / best["xla"] / 1e9 if flops else None,
            "dace_gflops": flops / best["compiled"] / 1e9 if flops else None}


def summary(results: dict) -> str:
    """How every case's results compared with XLA's: the counts, and the cases that
    differ or failed by name."""
    rows = [r for section_rows in results.values() for r in section_rows]
    failed = [r["case"] for r in rows if r.get("error")]
    differ = [r["case"] for r in rows if r.get("verdict") == "DIFFERS"]
    return (f"Checked against XLA at the dtype's tolerance: {len(rows)} cases, "
            f"{len(rows) - len(failed) - len(differ)} OK, {len(differ)} DIFFERS"
            + (f" ({', '.join(differ)})" if differ else "") + f", {len(failed)} failed"
            + (f" ({', '.join(failed)})" if failed else "") + ".")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per measurement")
    parser.add_argument("--only", choices=[s.split()[0].lower() for s in SECTIONS],
                        help="run one section (prints it; docs/ are not rewritten)")
    args = parser.parse_args()
    keep_freed_memory()
    jax.config.update("jax_enable_x64", True)  # the f64 cases; the others pass f32 arrays
    results = {}
    with tempfile.TemporaryDirectory() as cache:  # first calls build: an empty cache
        os.environ["HLO2DACE_CACHE_DIR"] = cache
        for section, section_cases in SECTIONS.items():
            if args.only and section.split()[0].lower() != args.only:
                continue
            results[section] = []
            for name, fun, inputs, flops in section_cases(args.quick):
                results[section].append(measure(name, fun, inputs, flops, args.budget))
                print(json.dumps(results[section][-1]), flush=True)
    print(summary(results))
    if args.only:
        return
    with tempfile.TemporaryDirectory() as cache:
        build_s = load_in_new_process(500, cache)["seconds"]
        load_s = load_in_new_process(500, cache)["seconds"]
    write_report(results, build_s, load_s, args)


#: what each section's numbers mean (written from the measurements, kept beside them)
NOTES = {
    "End to end": (
        "Matrix products run in OpenBLAS. Elementwise work is one fused map whose "
        "transcendental functions vectorise: f64 exp, log and tanh inline as XLA computes "
        "them, the others with glibc's libmvec (docs/vector-math.md). Per-call overhead "
        "(last row): the `Compiled` call goes through a C extension that reads the arrays' "
        "buffers; `hlo2dace.jit` stays above `jax.jit`, mostly for making the `jax.Array` "
        "results (jaxlib's `batched_device_put`)."),
    "Contractions": (
        "f32/f64 products call OpenBLAS's `cblas_?gemm` with transposes absorbed as its flags "
        "and leading dimensions, one call per batch element; XLA calls Eigen. At 64x64 the "
        "per-call overhead dominates."),
    "Reductions": (
        "A reduction over any axis but the last folds the rows after it a block of 1024 "
        "outputs at a time: the reduced axes are outer loops and the row a contiguous inner "
        "loop, the blocks split among threads. Over the last axis, sums fold each block of "
        "256 elements into 16 vector lanes (max and min too: they are selects, with the "
        "spec's NaN and signed-zero rules); a reduction to few outputs cuts its longest "
        "reduced dimension into chunks reduced in parallel. An elementwise operand only the "
        "reduction reads (logsumexp's exp) is computed inside its loop, never stored; "
        "argmax folds in order and reads its operand through a call, so an expression there "
        "is written first."),
    "Loops": (
        "A counted loop is a C++ for-loop over a DaCe symbol and a data-dependent loop a "
        "`while (true)` with a break, both with no per-iteration cost beyond their bodies' "
        "code, where XLA's while loop runs its condition and body as separate kernels. The "
        "stencil's `jnp.roll`s are concatenations that hlo2dace materialises as arrays every "
        "step, where XLA fuses them into the update."),
    "Kernels": (
        "Stencils written as pyhpc writes them: slices of values not written yet are "
        "recomputed by the maps that read them, so the fluxes never reach memory; the `.at[]` "
        "update of a static interior window computes its update in its own strided map, in "
        "place where the operand is dead, and a chain of updates that ends in a result is "
        "built in the result's array. Chains of products are one `cblas_sgemm` each."),
    "Everyday programs": (
        "Programs written as a JAX user writes them, not tuned for (bench/everyday.py): "
        "prefix operations (scans in XLA's order of blocks of 16, 32 rows side by side), "
        "histograms (scatters whose indices collide), an optimiser step and per-example "
        "gradients over a parameter pytree, and loops over small data (a stencil whose "
        "arrays are updated in place, k-means, an integer while loop). A suite of 39 such "
        "programs at two sizes, on one thread and on all, with peak memory: "
        "[everyday.md](everyday.md) (bench/everyday_suite.py)."),
}


def write_report(results, build_s, load_s, args) -> None:
    lines = [
        "# Benchmarks",
        "",
        "Generated by `bench/run.py` (`make bench`); XLA (`jax.jit`) and hlo2dace measured in",
        "the same run, median wall time per call (best of three alternating rounds).",
        "`hlo2dace.jit` includes the signature check and conversion of results to",
        "`jax.Array`; `Compiled` is the compiled module's program called with NumPy arrays",
        "directly.",
        "Speed-up: XLA's time over `hlo2dace.jit`'s (above 1: hlo2dace is faster).",
        "`check`: the results of both hlo2dace calls against XLA's at the dtype's tolerance",
        "(`hlo2dace compare`'s verdict), with the largest normwise error.",
        "",
        summary(results),
        "",
        f"Machine: {platform.machine()}, {machine()}, Python {platform.python_version()}, "
        f"jax {jax.__version__}, {time.strftime('%Y-%m-%d')}, load average "
        f"{os.getloadavg()[0]:.1f} at the end (above 0 means other processes shared the "
        "cores: times are noisy)" + (", --quick sizes" if args.quick else ""),
        "",
        "![speed-up](benchmarks.png)",
    ]
    for section, rows in results.items():
        lines += ["", f"## {section}", "", NOTES[section], "",
                  "| case | XLA ms | hlo2dace.jit ms | Compiled ms | speed-up | first call s "
                  "| GFLOP/s XLA | GFLOP/s DaCe | check |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in rows:
            if r.get("error"):
                lines.append(f"| {r['case']} | | | | | | | | failed: {r['error']} |")
                continue
            gx = f"{r['xla_gflops']:.1f}" if r["xla_gflops"] else "-"
            gd = f"{r['dace_gflops']:.1f}" if r["dace_gflops"] else "-"
            error = f" ({r['normwise_error']:.1e})" if r["normwise_error"] else ""
            lines.append(f"| {r['case']} | {r['xla_ms']:.3f} | {r['dace_ms']:.3f} | "
                         f"{r['compiled_ms']:.3f} | {r['speedup']:.2f} | "
                         f"{r['first_call_s']:.2f} | {gx} | {gd} | {r['verdict']}{error} |")
    lines += ["", f"Seed example (500x500) in a new process: {build_s:.2f} s to lower, "
              f"translate and build; {load_s:.3f} s to get the binary from the disk cache (JAX "
              "lowering, normalising, importing DaCe and loading the library).", ""]
    (DOCS / "benchmarks.md").write_text("\n".join(lines) + _kept_sections())
    plot(results)


def _kept_sections() -> str:
    """The sections of docs/benchmarks.md that other scripts' runs fill in (the compile
    time, bench/compile_time.py's; the per-call cost, from bench/call_cost.py's tables),
    kept when this script rewrites the file."""
    import call_cost
    import compile_time

    path = DOCS / "benchmarks.md"
    text = path.read_text() if path.exists() else ""
    kept = ""
    for first, last in ((compile_time.SECTION_BEGIN, compile_time.SECTION_END),
                        (call_cost.SECTION_BEGIN, call_cost.SECTION_END)):
        begin, end = text.find(first), text.find(last)
        if 0 <= begin < end:
            kept += "\n" + text[begin:end + len(last)] + "\n"
    return kept


def plot(results) -> None:
    plt = pyplot()
    if plt is None:
        return
    rows = [(section, r) for section, section_rows in results.items() for r in section_rows
            if not r.get("error")]
    colours = {section: f"C{k}" for k, section in enumerate(results)}
    fig, ax = plt.subplots(figsize=(9, 0.6 + 0.32 * len(rows)))
    ax.barh([r["case"] + (" (DIFFERS)" if r["verdict"] != "OK" else "") for _, r in rows],
            [r["speedup"] for _, r in rows],
            color=[colours[section] for section, _ in rows])
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xlabel("speed-up of hlo2dace.jit over jax.jit (log scale, higher is better)")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c, label=s) for s, c in colours.items()],
              loc="lower right")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(DOCS / "benchmarks.png", dpi=110)


if __name__ == "__main__":
    main()
