"""DaCe's standard transformations on the SDFGs of a broad set of programs, each result run
as the JAX function (``hlo2dace.jit(f, transform=...)``) and checked against ``jax.jit``.
Writes docs/transformations.md: per transformation and program set, how often it applied
(and the result was right), did not match, refused (raised), failed to build, gave a wrong
answer, or crashed. A run of a subset (``--only``, ``--programs``, ``--sample``) prints its
report and leaves the document as it is: keep its ``--rows`` and merge them into the
document's with ``--from-rows``.

    python bench/transformations.py [--npbench PATH] [--pyhpc PATH]
        [--levels none default] [--only NAME ...] [--programs SUBSTRING ...] [--sample N]
        [--jobs N] [--rows OUT.json]
    python bench/transformations.py --from-rows ROWS.json [MORE.json ...]

The programs are ``bench/code_digest.py``'s: every case of ``bench/run.py`` (quick sizes),
NPBench's JAX ports at S (``--npbench``) and pyhpc at 65,536 and 1,048,576 points
(``--pyhpc``); and, with ``--interpret FOLDER``, the StableHLO interpreter's per-op tests
that the test suite runs (``tests/test_conformance.py``), each file's functions as one
program (``hlo2dace.checktests``) judged by its own check ops: a transformation is wrong
if a function that passed without it fails with it. Each program runs in a child process
of its own (a crash or a hang is counted, not fatal), with a cache folder of its own that
is removed after it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs"
#: applications of one transformation to one SDFG, at most: MapTiling and MapInterchange
#: match their own results again, without end
BOUND = 8
#: seconds a program's child process may take, all its transformations together
TIMEOUT = 900
OUTCOMES = ("applied", "no match", "refused", "build failed", "wrong", "crashed")


def _repeated(name: str, options: dict | None = None):
    """``name`` (a DaCe transformation) applied up to ``BOUND`` times, each time to its
    first match."""

    def run(sdfg) -> None:
        import dace.transformation.dataflow as dataflow
        import dace.transformation.interstate as interstate

        kind = getattr(dataflow, name, None) or getattr(interstate, name)
        for _ in range(BOUND):
            if not sdfg.apply_transformations(kind, options=options, validate=False):
                break

    return run


def _simplify(sdfg) -> None:
    sdfg.simplify()


def _auto_optimize(sdfg) -> None:
    import dace
    from dace.transformation.auto.auto_optimize import auto_optimize

    auto_optimize(sdfg, dace.DeviceType.CPU)


def _expand_library_nodes(sdfg) -> None:
    sdfg.expand_library_nodes()


#: transformation -> a function of an SDFG that applies it
TRANSFORMATIONS = {
    "simplify": _simplify,
    "MapTiling": _repeated("MapTiling", {"tile_sizes": (32,)}),
    "MapInterchange": _repeated("MapInterchange"),
    "MapCollapse": _repeated("MapCollapse"),
    "MapExpansion": _repeated("MapExpansion"),
    "MapFusion": _repeated("MapFusionVertical"),
    "Vectorization": _repeated("Vectorization"),
    "LoopToMap": _repeated("LoopToMap"),
    "StateFusion": _repeated("StateFusion"),
    "InlineSDFG": _repeated("InlineSDFG"),
    "auto_optimize (CPU)": _auto_optimize,
    "expand_library_nodes": _expand_library_nodes,
}


def _programs(npbench: Path | None, pyhpc: Path | None):
    sys.path.insert(0, str(HERE))
    import code_digest

    return code_digest.programs(npbench, pyhpc)


#: the name of a program made of an interpreter test file
_INTERPRET = "interpret: "


def _runnable_checks(path: Path) -> list:
    """The functions of an interpreter test file that the test suite runs (not those it
    skips: collectives across processes, files without checks)."""
    from hlo2dace import checktests

    return [f for f in checktests.load_file(path) if not f.skip_reason]


def _names(npbench: Path | None, pyhpc: Path | None, interpret: Path | None = None
           ) -> list[str]:
    files = sorted(interpret.glob("*.mlir")) if interpret else []
    return [program[0] for program in _programs(npbench, pyhpc)] + \
        [_INTERPRET + path.name for path in files if _runnable_checks(path)]


def left_out(name: str) -> str | None:
    """Why program ``name`` is not in the table, or None."""
    if name.endswith(" 1048576"):
        return ("pyhpc at 1,048,576 points: the same SDFGs as at 65,536 points with arrays "
                "16 times larger (at optimize=none, isoneutral_mixing's one array per op "
                "took 20 GB)")
    return None


def _set_of(name: str) -> str:
    if name.startswith(_INTERPRET):
        return "StableHLO per-op tests"
    return name.split(":")[0] if name.startswith(("npbench", "pyhpc")) else "bench/run.py"


def _first_error(text: str) -> str:
    """The compiler's first error line in ``text``, else its beginning."""
    for line in text.splitlines():
        if "error:" in line:
            return line.strip()[:300]
    return text[:300]


def _as_exact_as_xla(compiled, args, expected, actual) -> str | None:
    """"extended" if every output of ``actual`` is within tolerance of XLA's or at most as
    far from the module's answer in a wider type as XLA's (``compare(reference=
    "extended")``'s criterion: a formula that loses digits loses them on both sides);
    None where it is not, or where that answer cannot be evaluated."""
    import jax
    import numpy as np

    from hlo2dace import Hlo2DaceError
    from hlo2dace.arguments import as_array
    from hlo2dace.compare import compare_arrays
    from hlo2dace.extended import evaluate

    lowered = compiled.lowered
    leaves = jax.tree_util.tree_leaves([a for i, a in enumerate(args)
                                        if i not in lowered.static_argnums])
    try:
        exact = evaluate(lowered.as_text(), [as_array(leaf, spec) for leaf, spec in
                                             zip(leaves, compiled.program.arguments)])
    except Hlo2DaceError:
        return None
    outputs = [compare_arrays(i, np.asarray(e), np.asarray(a), exact=x) for i, (e, a, x) in
               enumerate(zip(jax.tree_util.tree_leaves(expected),
                             jax.tree_util.tree_leaves(actual), exact))]
    return "extended" if outputs and all(o.ok for o in outputs) else None


def _as_untransformed(function, args, statics, level, expected, actual) -> str | None:
    """"untransformed" if hlo2dace's own program already differs from XLA's beyond the
    tolerance and ``actual`` is within it of that program's answer."""
    from harness import check

    import hlo2dace

    own = hlo2dace.jit(function, optimize=level, **statics)(*args)
    if check(expected, own)["verdict"] != "OK" and check(own, actual)["verdict"] == "OK":
        return "untransformed"
    return None


def attempt(function, args, statics: dict, expected, level: str, transformation: str
            ) -> dict:
    """``transformation`` on the SDFG of ``function(*args)`` at ``level``, the result run
    and checked against ``expected`` (``jax.jit``'s); for a program that loses digits to
    cancellation, where results beyond the tolerance of XLA's are no error, against the
    answer in a wider type (``_as_exact_as_xla``) or hlo2dace's untransformed answer
    (``_as_untransformed``): a row with its outcome."""
    from harness import check

    import hlo2dace
    from hlo2dace import TransformationError
    from hlo2dace.user_sdfg import content_key

    apply, changed = TRANSFORMATIONS[transformation], []

    def transform(sdfg):
        before = content_key(sdfg)
        apply(sdfg)
        changed.append(content_key(sdfg) != before)

    row = dict(level=level, transformation=transformation)
    start = time.perf_counter()
    try:
        lowered = hlo2dace.jit(function, optimize=level, transform=transform,
                               **statics).lower(*args)
        lowered.as_sdfg()  # translated and transformed: was anything changed?
        if not any(changed):
            row["outcome"] = "no match"
        else:
            compiled = lowered.compile()
            actual = compiled(*args)
            verdict = check(expected, actual)
            row["outcome"] = "applied" if verdict["verdict"] == "OK" else "wrong"
            row["normwise_error"] = verdict["normwise_error"]
            if row["outcome"] == "wrong":
                reference = _as_exact_as_xla(compiled, args, expected, actual) or \
                    _as_untransformed(function, args, statics, level, expected, actual)
                if reference:
                    row.update(outcome="applied", reference=reference)
    except TransformationError as exc:
        row.update(outcome="refused", reason=str(exc)[:300])
    except Exception as exc:  # hlo2dace's CompilationError, or anything else: a finding
        row.update(outcome="build failed", reason=_first_error(f"{type(exc).__name__}: {exc}"))
    row["seconds"] = round(time.perf_counter() - start, 2)
    return row


def _check_outputs(functions, outputs) -> dict[str, str]:
    """Each check function's status ("pass", "fail", ...) from the combined program's
    ``outputs``."""
    from hlo2dace import checktests

    statuses, position = {}, 0
    for function in functions:
        count = len(function.result_types)
        result = checktests.judge("", function, outputs[position:position + count])
        statuses[function.id_name] = result.status
        position += count
    return statuses


def run_checks(path: Path, level: str, only: list[str]) -> None:
    """In the child process: every transformation on the interpreter test file ``path``
    at ``level`` (its runnable functions as one program), one JSON line per
    transformation; a function that passes untransformed must pass transformed."""
    from hlo2dace import Hlo2DaceError, checktests
    from hlo2dace.api import lower_text

    functions = _runnable_checks(path)
    try:  # as the test suite runs them: one program, else (shape refinement wants one
        # function per module) each function alone
        programs = [(lower_text(checktests.combined_module(functions), name="checks",
                                entry=checktests.ENTRY, optimize=level), functions)]
        programs[0][0].as_sdfg()
    except Hlo2DaceError:
        programs = [(lower_text(f.text, name="check", entry=f.name, optimize=level), [f])
                    for f in functions]
    passed = [{name for name, status in
               _check_outputs(group, lowered.compile().call_flat([])).items()
               if status == "pass"} for lowered, group in programs]
    for transformation in TRANSFORMATIONS:
        if not only or transformation in only:
            start = time.perf_counter()
            rows = [_attempt_checks(lowered, group, ok, transformation)
                    for (lowered, group), ok in zip(programs, passed)]
            row = max(rows, key=lambda r: _SEVERITY.index(r["outcome"]))
            print(json.dumps(dict(program=_INTERPRET + path.name, level=level,
                                  transformation=transformation, **row,
                                  seconds=round(time.perf_counter() - start, 2))), flush=True)


#: outcomes from the best to the worst: a file's functions run alone report the worst
_SEVERITY = ("no match", "applied", "refused", "wrong", "build failed")


def _attempt_checks(lowered, functions, passed: set[str], transformation: str) -> dict:
    """``transformation`` on the SDFG of ``lowered`` (check ``functions``), the result run
    and judged: a function in ``passed`` must still pass."""
    from hlo2dace import TransformationError
    from hlo2dace.user_sdfg import apply, content_key

    try:
        sdfg = lowered.as_sdfg()
        before = content_key(sdfg)
        sdfg = apply(TRANSFORMATIONS[transformation], sdfg, "checks")
        if content_key(sdfg) == before:
            return dict(outcome="no match")
        statuses = _check_outputs(functions, lowered.compile(sdfg=sdfg).call_flat([]))
        failing = sorted(name for name in passed if statuses[name] != "pass")
        if failing:
            return dict(outcome="wrong", reason=f"{len(failing)} of {len(passed)} checks "
                        "fail: " + ", ".join(failing[:5]))
        return dict(outcome="applied")
    except TransformationError as exc:
        return dict(outcome="refused", reason=str(exc)[:300])
    except Exception as exc:  # a finding, as in ``attempt``
        return dict(outcome="build failed",
                    reason=_first_error(f"{type(exc).__name__}: {exc}"))


def run_program(name: str, npbench: Path | None, pyhpc: Path | None, level: str,
                only: list[str], interpret: Path | None = None) -> None:
    """In the child process: every transformation on program ``name`` at ``level``, one
    JSON line per transformation."""
    import jax

    jax.config.update("jax_enable_x64", True)
    if name.startswith(_INTERPRET):
        run_checks(interpret / name[len(_INTERPRET):], level, only)
        return
    program = next(p for p in _programs(npbench, pyhpc) if p[0] == name)
    _, function, args, static_argnums, static_argnames = program
    statics = dict(static_argnums=static_argnums, static_argnames=static_argnames)
    expected = jax.jit(function, **statics)(*args)
    for transformation in TRANSFORMATIONS:
        if not only or transformation in only:
            row = attempt(function, args, statics, expected, level, transformation)
            print(json.dumps(dict(program=name, **row)), flush=True)


def _run_child(name: str, level: str, args) -> list[dict]:
    """Program ``name``'s rows at ``level``, from a child process of its own; the
    transformations it did not report are counted as crashed."""
    command = [sys.executable, __file__, "--worker", name, "--level", level,
               *(["--npbench", str(args.npbench)] if args.npbench else []),
               *(["--pyhpc", str(args.pyhpc)] if args.pyhpc else []),
               *(["--interpret", str(args.interpret)] if args.interpret else []),
               *(["--only", *args.only] if args.only else [])]
    expected = [t for t in TRANSFORMATIONS if not args.only or t in args.only]
    with tempfile.TemporaryDirectory(prefix="h2d-transformations-") as cache:
        env = dict(os.environ, HLO2DACE_CACHE_DIR=cache)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                                  env=env)
            output = done.stdout
            reason = f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
        except subprocess.TimeoutExpired as exc:
            output, reason = exc.stdout or "", f"timed out after {TIMEOUT} s"
            output = output.decode() if isinstance(output, bytes) else output
    found = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    seen = {row["transformation"] for row in found}
    found += [dict(program=name, level=level, transformation=t, outcome="crashed",
                   reason=reason[:300]) for t in expected if t not in seen]
    for row in found:
        print(f"{level:8} {row['outcome']:12} {row['transformation']:22} {name}", flush=True)
    return found


def run_all(args) -> list[dict]:
    names = [n for n in _names(args.npbench, args.pyhpc, args.interpret)
             if left_out(n) is None]
    if args.programs:
        names = [n for n in names if any(s in n for s in args.programs)]
    if args.sample:
        names = names[::max(1, len(names) // args.sample)][:args.sample]
    work = [(name, level) for level in args.levels for name in names]
    with ThreadPoolExecutor(args.jobs) as pool:
        done = pool.map(lambda item: _run_child(*item, args), work)
        return [row for rows in done for row in rows]


def write_report(rows: list[dict], args) -> str:
    from harness import machine

    lines = ["# DaCe's transformations on hlo2dace's SDFGs", "",
             "Each of DaCe's standard transformations applied to the SDFG of each program "
             f"(at most {BOUND} times, each time to its first match), the result built and "
             "run as the JAX function (`hlo2dace.jit(f, transform=...)`) and checked against "
             "`jax.jit` at the dtype's tolerance. *applied*: it changed the SDFG and the "
             "answer is right; *no match*: it changed nothing; *refused*: it raised (or left "
             "an SDFG that DaCe's `validate` rejects), a clean refusal; *build failed*: DaCe "
             "or the compiler could not build the result; *wrong*: a wrong answer; "
             "*crashed*: the process died or timed out. Written by `python "
             "bench/transformations.py`; sampled by `tests/test_user_sdfg.py`.", "",
             f"Machine: {machine()}. Levels: {', '.join(args.levels)}.", ""]
    if any(_set_of(r["program"]) == "StableHLO per-op tests" for r in rows):
        lines += ["The StableHLO per-op tests are the interpreter's test files that the test "
                  "suite runs (`tests/test_conformance.py`), a sample of them: each file's "
                  "functions one program (each alone where they do not combine), judged by "
                  "its own check ops; *wrong*: a check that passed without the "
                  "transformation fails with it.", ""]
    rows = [r for r in rows if left_out(r["program"]) is None]
    reasons = sorted({left_out(n) for n in _names(args.npbench, args.pyhpc)} - {None}) \
        if args.npbench or args.pyhpc else []
    lines += [f"Left out: {reason}." for reason in reasons] + ([""] if reasons else [])
    sets = sorted({_set_of(r["program"]) for r in rows})
    for level in args.levels:
        lines += [f"## optimize={level}", "",
                  "| transformation | programs | " + " | ".join(OUTCOMES) + " |",
                  "|---|---|" + "---|" * len(OUTCOMES)]
        for transformation in TRANSFORMATIONS:
            for program_set in sets:
                found = [r for r in rows if r["level"] == level and
                         r["transformation"] == transformation and
                         _set_of(r["program"]) == program_set]
                if not found:
                    continue
                counts = Counter(r["outcome"] for r in found)
                lines.append(f"| {transformation} | {program_set} ({len(found)}) | " +
                             " | ".join(str(counts[o]) for o in OUTCOMES) + " |")
        lines.append("")
    totals = Counter(r["outcome"] for r in rows)
    lines += ["Totals: " + ", ".join(f"{totals[o]} {o}" for o in OUTCOMES) + ".", ""]
    own = sorted({r["program"] for r in rows if r.get("reference") == "untransformed"})
    if own:
        lines += [f"{sum(r.get('reference') == 'untransformed' for r in rows)} of the applied "
                  "were checked against hlo2dace's untransformed answer, which differs from "
                  "XLA's beyond the tolerance already (digits lost to cancellation, the "
                  "same as in XLA against NumPy: docs/npbench.md): " + ", ".join(own) + ".",
                  ""]
    refused = [r for r in rows if r["outcome"] == "refused"]
    if refused:
        lines += ["## Why transformations were refused", "",
                  "| transformation | refusals | the first one's reason |", "|---|---|---|"]
        for transformation in TRANSFORMATIONS:
            found = [r for r in refused if r["transformation"] == transformation]
            if found:
                first = next((r for r in found if r.get("reason")), found[0])
                lines.append(f"| {transformation} | {len(found)} | {_why(first)} "
                             f"({first['program']}, optimize={first['level']}) |")
        lines.append("")
    problems = [r for r in rows if r["outcome"] in ("build failed", "wrong", "crashed")]
    if problems:
        lines += ["## Failures", "", "| level | transformation | program | outcome | why |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['level']} | {r['transformation']} | {r['program']} | "
                  f"{r['outcome']} | {_why(r)} |" for r in problems]
        lines.append("")
    return "\n".join(lines)


_NBODY = ("nbody loses digits to cancellation: its untransformed answer is already 3e-10 "
          "(normwise) from XLA's, this one 4e-10 to 9e-10; the wider-type reference does "
          "not evaluate its scatter, so which is nearer the exact answer is not known")
#: what was found out about a failure, by (transformation, program)
FINDINGS = {
    ("auto_optimize (CPU)", "npbench: floyd_warshall"):
        "bisected at optimize=none: every step of auto_optimize before its greedy subgraph "
        "fusion (`greedy_fuse`) leaves the answer right, that step makes 497 of 576 "
        "elements wrong",
    ("MapExpansion", "npbench: nbody"): _NBODY,
    ("auto_optimize (CPU)", "npbench: nbody"): _NBODY,
    ("LoopToMap", "npbench: vadv"):
        "the loop's counter tasklet names the loop variable in its C++ code, which LoopToMap "
        "renames in the SDFG only",
}


def _why(row: dict) -> str:
    """What was found out about ``row``'s failure and its error, on one line of a table."""
    found = FINDINGS.get((row["transformation"], row["program"]))
    reason = row.get("reason", "").split("\nInvalid SDFG saved")[0]
    reason = reason.replace("the transformation attempt.<locals>.transform ", "")
    text = "; ".join(part for part in (found, reason[:260] if reason else None) if part)
    text = re.sub(r"/tmp/[^ :]*/", "", text)  # the build folder's name
    return " ".join(text.split()).replace("|", "/")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--npbench", type=Path)
    parser.add_argument("--pyhpc", type=Path)
    parser.add_argument("--interpret", type=Path,
                        help="the StableHLO interpreter's per-op tests (a folder of .mlir)")
    parser.add_argument("--levels", nargs="+", default=["none", "default"],
                        choices=["none", "default", "aggressive"])
    parser.add_argument("--only", nargs="+", choices=list(TRANSFORMATIONS))
    parser.add_argument("--programs", nargs="+", help="only programs whose name holds one")
    parser.add_argument("--sample", type=int, help="every k-th program, N of them")
    parser.add_argument("--rows", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--jobs", type=int, default=1, help="programs run at once")
    parser.add_argument("--from-rows", nargs="+", type=Path, metavar="ROWS.json",
                        help="write the report from rows written before (--rows), a later "
                        "file's rows replacing an earlier one's of the same program")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--level", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_program(args.worker, args.npbench, args.pyhpc, args.level, args.only or [],
                    args.interpret)
        return
    if args.from_rows:
        merged = {(r["program"], r["level"], r["transformation"]): r
                  for path in args.from_rows for r in json.loads(path.read_text())}
        rows = list(merged.values())
        args.levels = [level for level in ("none", "default", "aggressive")
                       if any(r["level"] == level for r in rows)]
    else:
        rows = run_all(args)
    if args.rows:
        args.rows.write_text(json.dumps(rows, indent=1))
    report = write_report(rows, args)
    if args.from_rows or not (args.only or args.programs or args.sample):
        (DOCS / "transformations.md").write_text(report)
    # a subset's report is printed only: the document holds every program's rows
    print(report)


if __name__ == "__main__":
    main()
