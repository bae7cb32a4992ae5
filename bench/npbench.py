"""NPBench (github: spcl/npbench) through NumPy, ``jax.jit``, ``hlo2dace.jit`` and DaCe's own
Python frontend, on one thread and on all threads. Writes docs/npbench.md and
docs/npbench.png.

    python bench/npbench.py --npbench PATH/TO/npbench [--presets S M] [--kernels gemm ...]
    python bench/npbench.py --npbench PATH --profile --kernels deriche [--html FOLDER]

NPBench's code is imported from the user's checkout, never copied: its ``bench_info/*.json``
name each kernel's arguments, presets and initialisation; ``*_jax.py`` is what XLA and
hlo2dace run (hlo2dace through ``hlo2dace.jit`` of the same function, with the same static
arguments), ``*_numpy.py`` what NumPy runs, and ``*_dace.py`` what DaCe's Python frontend
compiles (``auto_optimize`` for the CPU, as NPBench's "DaCe CPU"), where it runs with this
DaCe. A kernel that its JAX port does not ``jax.jit`` (adi) is jitted with its integer
parameters static, as eager JAX would see them.

Each (thread setting, kernel) runs in a child process with a time limit, so a kernel that
crashes or hangs a framework costs only its own row; every setting has an empty hlo2dace
cache, so the first call is timed cold (translation and C++ build). Every hlo2dace output is
compared with XLA's (``hlo2dace.compare.compare_arrays``: the dtype's tolerance, exact for
integers). Times are medians, the frameworks taking turns in rounds with the best round kept
(``harness.interleaved``); arguments a kernel overwrites (NumPy, DaCe) are copied outside
the timed call. ``--rows FILE`` keeps the measurements as JSON and ``--from-rows FILE``
rewrites the documents from them. ``--profile`` shows where hlo2dace's time goes in the
given kernels instead (``hlo2dace.profile``).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import (
    blas_kernels,
    check,
    geomean,
    interleaved,
    machine,
    thread_environment,
    where_measured,
)

DOCS = Path(__file__).resolve().parents[1] / "docs"
FRAMEWORKS = ("numpy", "xla", "hlo2dace", "dace")
#: what follows this line in docs/npbench.md is written by hand and kept when it is rewritten
NOTES = "<!-- written by hand below: kept when this document is generated again -->"


def kernels(checkout: Path) -> dict[str, dict]:
    """NPBench's kernels that have a JAX port: name -> its bench_info record."""
    found = {}
    for path in sorted((checkout / "bench_info").glob("*.json")):
        info = json.loads(path.read_text())["benchmark"]
        folder = checkout / "npbench" / "benchmarks" / info["relative_path"]
        if (folder / f"{info['module_name']}_jax.py").is_file():
            found[path.stem] = info
    return found


def _module(info: dict, suffix: str):
    path = "npbench.benchmarks." + info["relative_path"].replace("/", ".") + "." + \
        info["module_name"] + suffix
    return importlib.import_module(path)


def _inputs(info: dict, preset: str) -> dict:
    """The preset's parameters and the arrays NPBench's ``initialize`` makes from them."""
    data = dict(info["parameters"][preset])
    init = info.get("init")
    if init:
        function = getattr(_module(info, ""), init["func_name"])
        made = function(*[data[a] for a in init["input_args"]])
        if len(init["output_args"]) == 1:
            made = (made,)
        data.update(zip(init["output_args"], made))
    return data


def _leaves(result) -> list:
    import jax
    import numpy as np

    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(result)]


def _jax_kernel(info: dict):
    """The JAX port's function, its static argument positions and names (as its own
    ``jax.jit`` declares them; integer parameters where it is not jitted)."""
    function = getattr(_module(info, "_jax"), info["func_name"])
    jit_info = getattr(function, "_jit_info", None)  # jax.jit's record of its options
    if jit_info is not None:
        return function, tuple(jit_info.static_argnums), tuple(jit_info.static_argnames)
    static = tuple(i for i, a in enumerate(info["input_args"])
                   if a not in info["array_args"] and isinstance(info["parameters"]["S"]
                                                                 .get(a), int))
    return function, static, ()


def _difference(info: dict, reference, other, copies) -> float:
    """The largest normwise difference between two kernels' outputs (what they return,
    then the arguments they overwrite), as NPBench validates its frameworks."""
    import numpy as np

    outputs = []
    for kernel in (reference, other):
        fresh = copies()
        returned = kernel(fresh)
        outputs.append([np.asarray(a) for a in _leaves(returned)]
                       + [fresh[name] for name in info["output_args"]])
    worst = 0.0
    for a, b in zip(*outputs):
        scale = float(np.max(np.abs(a))) if a.size else 0.0
        difference = float(np.max(np.abs(a - b))) if a.size else 0.0
        worst = max(worst, difference / scale if scale else difference)
    return worst


def _npbench_check(checkout: Path):
    """NPBench's own validation (``npbench/infrastructure/utilities.py``'s ``validate``:
    NumPy's ``allclose`` at the kernel's rtol and atol, else a normwise error below its
    ``norm_error``; 1e-5, 1e-8 and 1e-5 unless its bench_info says otherwise), loaded
    alone: the package's ``__init__`` imports every framework NPBench knows."""
    import contextlib
    import importlib.util
    import io

    spec = importlib.util.spec_from_file_location(
        "npbench_utilities", checkout / "npbench" / "infrastructure" / "utilities.py")
    utilities = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utilities)

    def valid(info: dict, expected: list, actual: list) -> bool | None:
        """None where NPBench's check cannot compare them (shapes that do not broadcast)."""
        with contextlib.redirect_stdout(io.StringIO()):  # it prints; stdout is our rows
            try:
                return len(expected) == len(actual) and bool(utilities.validate(
                    expected, actual, rtol=info.get("rtol", 1e-5),
                    atol=info.get("atol", 1e-8), norm_error=info.get("norm_error", 1e-5)))
            except (ValueError, TypeError):
                return None
    return valid


def _dace_program(info: dict, preset: str, data: dict):
    """NPBench's DaCe version compiled as its "DaCe CPU" (``auto_optimize``), and the
    keyword arguments it is called with (the arrays and the symbols' values)."""
    import dace
    from dace.transformation.auto import auto_optimize as auto

    program = getattr(_module(info, "_dace"), info["func_name"])
    sdfg = program.to_sdfg(simplify=True)
    sdfg.name = f"npb_{info['module_name']}_{preset}"
    symbols = {k: v for k, v in info["parameters"][preset].items()
               if k not in info["input_args"]}
    auto.auto_optimize(sdfg, dace.DeviceType.CPU, symbols=symbols)
    compiled = sdfg.compile()
    names = set(compiled.sdfg.arglist()) | set(compiled.sdfg.free_symbols)
    scalars = {k: v for k, v in {**symbols, **data}.items()
               if k in names and k not in info["array_args"]}
    return compiled, scalars


def measure(checkout: Path, name: str, info: dict, presets, budget: float,
            frameworks) -> None:
    """One kernel at every preset, in this process's thread setting: one JSON row per
    preset on stdout, as soon as it is measured."""
    import jax

    import hlo2dace
    from hlo2dace.compare import keep_freed_memory

    jax.config.update("jax_enable_x64", True)
    keep_freed_memory()
    sys.path.insert(0, str(checkout))
    function, static_argnums, static_argnames = _jax_kernel(info)
    xla = function if hasattr(function, "_jit_info") else \
        jax.jit(function, static_argnums=static_argnums)
    ours = hlo2dace.jit(inspect.unwrap(function), static_argnums=static_argnums,
                        static_argnames=static_argnames)
    npbench_valid = _npbench_check(checkout)
    for preset in presets:
        row: dict = {"kernel": name, "preset": preset}
        try:
            _measure_preset(row, info, preset, xla, ours, budget, frameworks, npbench_valid)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        print(json.dumps(row), flush=True)


def _measure_preset(row: dict, info: dict, preset: str, xla, ours, budget: float,
                    frameworks, npbench_valid) -> None:
    """Fill ``row`` with one preset's first call, check and times."""
    import jax
    import numpy as np

    data = _inputs(info, preset)
    arrays = info["array_args"]
    args = [data[a] for a in info["input_args"]]
    jax_args = [jax.device_put(a) if n in arrays else a for n, a in zip(info["input_args"], args)]
    start = time.perf_counter()
    result = ours(*jax_args)
    row["first_call_s"] = time.perf_counter() - start
    expected, actual = _leaves(xla(*jax_args)), _leaves(result)
    row.update(check(expected, actual))
    row["npbench_valid"] = npbench_valid(info, expected, actual)

    def copies():  # NumPy and DaCe overwrite their array arguments
        return {n: np.copy(data[n]) for n in arrays}

    numpy_kernel = getattr(_module(info, "_numpy"), info["func_name"])
    calls = {
        "numpy": (lambda fresh: numpy_kernel(*[fresh.get(n, data.get(n))
                                               for n in info["input_args"]]), copies),
        "xla": (lambda: jax.block_until_ready(xla(*jax_args)), None),
        "hlo2dace": (lambda: jax.block_until_ready(ours(*jax_args)), None),
    }
    if "dace" in frameworks:
        try:
            start = time.perf_counter()
            compiled, scalars = _dace_program(info, preset, data)
            row["dace_build_s"] = time.perf_counter() - start
            calls["dace"] = (lambda fresh: compiled(**fresh, **scalars), copies)
            row["dace_error_vs_numpy"] = _difference(info, calls["numpy"][0],
                                                     calls["dace"][0], copies)
        except Exception as exc:  # not every *_dace.py runs with this DaCe
            row["dace_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    calls = {k: v for k, v in calls.items() if k in frameworks}
    row.update({f"{k}_s": v for k, v in interleaved(calls, budget).items()})


def profile(checkout: Path, name: str, info: dict, presets, html: Path | None) -> None:
    """``hlo2dace.profile`` of one kernel at every preset, in this process: the table on
    stdout, and the HTML report with the SDFG in ``html`` if given."""
    import inspect

    import jax

    import hlo2dace

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, str(checkout))
    function, static_argnums, static_argnames = _jax_kernel(info)
    for preset in presets:
        data = _inputs(info, preset)
        args = [jax.device_put(data[a]) if a in info["array_args"] else data[a]
                for a in info["input_args"]]
        report = hlo2dace.profile(inspect.unwrap(function), *args,
                                  static_argnums=static_argnums, static_argnames=static_argnames)
        report.name = f"{name} (preset {preset})"
        print(report.table(top=12), "\n", flush=True)
        if html is not None:
            html.mkdir(parents=True, exist_ok=True)
            print("wrote", report.write_html(html / f"{name}-{preset}.html"), flush=True)


def run_setting(checkout: Path, names, presets, budget: float, threads: int | None,
                frameworks, timeout: float) -> list[dict]:
    """Every kernel in a child process with ``threads`` threads (None: all), in one empty
    hlo2dace cache and DaCe build folder for the setting."""
    rows = []
    label = "1" if threads == 1 else str(os.cpu_count())
    with tempfile.TemporaryDirectory() as scratch:
        env = thread_environment(threads)
        env["HLO2DACE_CACHE_DIR"] = str(Path(scratch) / "hlo2dace")
        env["DACE_default_build_folder"] = str(Path(scratch) / "dace")
        for name in names:
            command = [sys.executable, __file__, "--npbench", str(checkout), "--child", name,
                       "--budget", str(budget), "--presets", *presets,
                       "--frameworks", *frameworks]
            try:
                done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True,
                                      timeout=timeout, cwd=scratch)
                output, failure = done.stdout, (f"exit status {done.returncode}"
                                                if done.returncode else None)
            except subprocess.TimeoutExpired as exc:
                output = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout
                failure = f"timeout after {timeout:.0f} s"
            measured = [json.loads(line) for line in (output or "").splitlines()
                        if line.startswith("{")]
            for preset in presets:
                if not any(r["preset"] == preset for r in measured):
                    measured.append({"kernel": name, "preset": preset,
                                     "error": failure or "no result (the child said nothing)",
                                     "timed_out": failure is not None
                                     and failure.startswith("timeout")})
            for row in measured:
                row.update(threads=label, machine=machine(),
                           load_average=round(os.getloadavg()[0], 2))
                print(json.dumps(row), file=sys.stderr, flush=True)
            rows += measured
    return rows


def _ratio(row: dict, framework: str) -> float | None:
    if row.get(f"{framework}_s") and row.get("xla_s"):
        return row[f"{framework}_s"] / row["xla_s"]
    return None


def _ms(row: dict, key: str) -> str:
    return f"{row[key] * 1e3:.3f}" if row.get(key) else ""


def correct(row: dict) -> bool:
    """hlo2dace's outputs pass a check: within the dtype's tolerance of XLA's, or NPBench's
    own validation against them."""
    return row.get("verdict") == "OK" or row.get("npbench_valid") is True


SUMMARY_HEADER = [
    "| preset | threads | kernels | ran | correct at the dtype's tolerance | correct by "
    "NPBench's check | failed | timed out | geomean hlo2dace/XLA (over the correct) | above "
    "1.5x | at or below 1x | geomean DaCe/XLA (over those it runs correctly) | geomean "
    "NumPy/XLA |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]


def summary_line(preset: str, threads: str, mine: list[dict]) -> str:
    """One setting's counts and geomeans: every kernel counted (run, correct by each check,
    failed, timed out), and each geomean saying the kernels it is over: hlo2dace's over
    those whose outputs pass a check (a wrong answer's speed means nothing, and a failed or
    timed-out kernel has none), DaCe's over those it runs with outputs NPBench accepts."""
    ran = [r for r in mine if not r.get("error")]
    timed_out = sum(bool(r.get("timed_out")) for r in mine)
    good = [r for r in ran if correct(r) and _ratio(r, "hlo2dace")]
    ours = [_ratio(r, "hlo2dace") for r in good]
    dace_ratios = [_ratio(r, "dace") for r in mine if _ratio(r, "dace")
                   and r.get("dace_error_vs_numpy", 0) <= 1e-5]
    numpy_ratios = [_ratio(r, "numpy") for r in mine if _ratio(r, "numpy")]

    def mean(ratios) -> str:
        return f"{geomean(ratios):.2f} ({len(ratios)} of {len(mine)})" if ratios else "none"

    return (f"| {preset} | {threads} | {len(mine)} | {len(ran)} | "
            f"{sum(r.get('verdict') == 'OK' for r in ran)} | "
            f"{sum(r.get('npbench_valid') is True for r in ran)} | "
            f"{len(mine) - len(ran) - timed_out} | {timed_out} | {mean(ours)} | "
            f"{sum(q > 1.5 for q in ours)} | {sum(q <= 1 for q in ours)} | "
            f"{mean(dace_ratios) if dace_ratios else 'not run'} | "
            f"{mean(numpy_ratios) if numpy_ratios else 'not run'} |")


def settings_of(rows: list[dict]) -> list[tuple[str, str]]:
    """The (preset, threads) settings of ``rows``, smaller presets and fewer threads first."""
    return sorted({(r["preset"], r["threads"]) for r in rows},
                  key=lambda s: ("SML".find(s[0]), int(s[1])))


def summary(rows: list[dict]) -> list[str]:
    """The summary table: one line per (preset, threads) setting."""
    return [*SUMMARY_HEADER, *(summary_line(preset, threads, [
        r for r in rows if (r["preset"], r["threads"]) == (preset, threads)])
        for preset, threads in settings_of(rows))]


def write(rows: list[dict], command: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = settings_of(rows)
    machines, loads = where_measured(rows, "kernel")
    lines = [
        "# NPBench",
        "",
        f"Generated by `{command}` from a checkout of spcl/npbench; do not edit. The JAX ports",
        "of NPBench's kernels through `jax.jit` (XLA) and `hlo2dace.jit`, NPBench's NumPy",
        "versions, and its DaCe versions through DaCe's own Python frontend (`auto_optimize`,",
        "NPBench's \"DaCe CPU\"), which shares hlo2dace's code generator. Median call times in",
        "ms, measured in the same process, the frameworks taking turns; ratio = time / XLA's",
        "(below 1: faster than XLA). `first call`: hlo2dace's first call with an empty cache",
        "(JAX lowering, translation, C++ build). `check`: every hlo2dace output against XLA's",
        "at the dtype's tolerance, with the largest normwise error, and whether it passes",
        "NPBench's own validation against XLA's (its rtol, atol and normwise bound for the",
        "kernel: 1e-5, 1e-8, 1e-5 unless its bench_info widens them). The summary counts",
        "every kernel: those that ran, those correct by each check, those that failed",
        "(an exception or a crash) and those that timed out; hlo2dace's geomean is over the",
        "kernels correct by either check, and says how many. DaCe's outputs are checked",
        "against NumPy's (\"wrong\": a normwise difference above 1e-5, NPBench's bound, and",
        "left out of the DaCe geomean). x64 on.",
        f"Machine: {machines}; {loads}; {blas_kernels()}. hlo2dace's optimisation level: "
        f"`{os.environ.get('HLO2DACE_OPTIMIZE') or 'default'}`.",
        "",
        "## Summary",
        "",
        *summary(rows),
    ]
    for preset, threads in settings:
        mine = sorted((r for r in rows if (r["preset"], r["threads"]) == (preset, threads)),
                      key=lambda r: -(_ratio(r, "hlo2dace") or math.inf))
        lines += ["", f"## Preset {preset}, {threads} thread{'s' if threads != '1' else ''}",
                  "", "| kernel | NumPy | XLA | hlo2dace | DaCe | hlo2dace/XLA | DaCe/XLA | "
                  "first call s | check |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in mine:
            ratio, dace_ratio = _ratio(r, "hlo2dace"), _ratio(r, "dace")
            first = r.get("first_call_s")
            check = r.get("verdict") or ""
            if r.get("verdict") and r.get("normwise_error"):
                check += f" ({r['normwise_error']:.1e})"
            if "npbench_valid" in r:
                check += {True: ", passes NPBench's validation",
                          False: ", fails NPBench's validation",
                          None: ", NPBench's validation cannot compare them"}[
                              r["npbench_valid"]]
            if r.get("error"):
                check = f"{check}; " * bool(check) + \
                    f"{'timed out' if r.get('timed_out') else 'failed'}: {r['error']}"
            dace_note = _ms(r, "dace_s") or ("fails" if r.get("dace_error") else "")
            if r.get("dace_error_vs_numpy", 0) > 1e-5:
                dace_note += " (wrong)"
            lines.append(
                f"| {r['kernel']} | {_ms(r, 'numpy_s')} | {_ms(r, 'xla_s')} | "
                f"{_ms(r, 'hlo2dace_s')} | "
                f"{dace_note} | {f'{ratio:.2f}' if ratio else ''} | "
                f"{f'{dace_ratio:.2f}' if dace_ratio else ''} | "
                f"{f'{first:.1f}' if first else ''} | "
                f"{check} |")
    failures = sorted({(r["kernel"], r["dace_error"]) for r in rows if r.get("dace_error")})
    if failures:
        lines += ["", "## DaCe versions that do not run with this DaCe", ""]
        lines += [f"- {kernel}: `{error}`" for kernel, error in failures]
    lines += ["", "![NPBench](npbench.png)", "", NOTES]
    document = DOCS / "npbench.md"
    kept = document.read_text().partition(NOTES)[2] if document.is_file() else ""
    document.write_text("\n".join(lines) + (kept or "\n"))

    figure, axes = plt.subplots(len(settings), 1, squeeze=False,
                                figsize=(14, 3.6 * len(settings)))
    for ax, (preset, threads) in zip(axes[:, 0], settings):
        mine = sorted((r for r in rows if (r["preset"], r["threads"]) == (preset, threads)),
                      key=lambda r: r["kernel"])
        names = [r["kernel"] for r in mine]
        for offset, framework, marker in ((-0.2, "hlo2dace", "o"), (0.0, "dace", "s"),
                                          (0.2, "numpy", "^")):
            points = [(k + offset, _ratio(r, framework)) for k, r in enumerate(mine)
                      if _ratio(r, framework)]
            if points:
                ax.scatter(*zip(*points), marker=marker, s=18, label=framework)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
        ax.set_ylabel("time / XLA's")
        ax.set_title(f"preset {preset}, {threads} thread{'s' if threads != '1' else ''}: "
                     f"below 1 is faster than XLA")
        ax.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(DOCS / "npbench.png", dpi=80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--npbench", type=Path, help="an spcl/npbench checkout")
    parser.add_argument("--presets", nargs="+", default=["S", "M"], choices=["S", "M", "L"])
    parser.add_argument("--kernels", nargs="+", help="these kernels only (default: all)")
    parser.add_argument("--threads", nargs="+", default=["1", "all"], choices=["1", "all"])
    parser.add_argument("--frameworks", nargs="+", default=list(FRAMEWORKS),
                        choices=FRAMEWORKS, help="xla and hlo2dace are always measured")
    parser.add_argument("--budget", type=float, default=0.6,
                        help="seconds of timing per framework and preset")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds per kernel (all its presets) before it is given up")
    parser.add_argument("--rows", type=Path, help="also write the measurements here (JSON)")
    parser.add_argument("--from-rows", type=Path, help="rewrite the documents from these")
    parser.add_argument("--profile", action="store_true",
                        help="profile the --kernels with hlo2dace.profile instead (this "
                        "process's threads)")
    parser.add_argument("--html", type=Path, help="with --profile: write HTML reports here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    frameworks = sorted(set(args.frameworks) | {"xla", "hlo2dace"}, key=FRAMEWORKS.index)
    command = "python bench/npbench.py --npbench PATH" + (
        f" --presets {' '.join(args.presets)}" if args.presets != ["S", "M"] else "") + (
        f" --frameworks {' '.join(frameworks)}" if len(frameworks) < len(FRAMEWORKS) else "")
    if args.from_rows:
        write(json.loads(args.from_rows.read_text()), command)
        return
    if args.npbench is None:
        parser.error("--npbench PATH is required")
    checkout = args.npbench.resolve()
    found = kernels(checkout)
    if args.child:
        measure(checkout, args.child, found[args.child], args.presets, args.budget,
                frameworks)
        return
    unknown = set(args.kernels or ()) - set(found)
    if unknown:
        parser.error(f"no JAX port of {', '.join(sorted(unknown))} in {checkout}")
    if args.profile:
        for name in args.kernels or found:
            profile(checkout, name, found[name], args.presets, args.html)
        return
    names = args.kernels or list(found)
    rows = []
    for threads in args.threads:
        rows += run_setting(checkout, names, args.presets, args.budget,
                            1 if threads == "1" else None, frameworks, args.timeout)
        if args.rows:
            args.rows.write_text(json.dumps(rows, indent=0))
    if not args.kernels:
        write(rows, command)
        print((DOCS / "npbench.md").read_text())
    else:  # a subset: its summary, and no document
        print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
