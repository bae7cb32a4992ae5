"""What DaCe sees of each program's SDFG: its library nodes by kind, and the tasklets whose
C++ DaCe cannot look into (a BLAS or LAPACK call, a loop written in the code), per
program, without compiling anything.

    python bench/library_nodes.py OUT.json [--npbench PATH] [--pyhpc PATH] [--optimize LEVEL]
    python bench/library_nodes.py --table BEFORE.json AFTER.json

The programs are ``code_digest.py``'s (``bench/run.py``'s quick cases, NPBench's JAX
ports at preset S, pyhpc at 65,536 points). The counting reads only DaCe's node classes
and tasklet code, so the first form runs on any version of hlo2dace (PYTHONPATH pointing
at another checkout counts that one's SDFGs); the second prints the two side by side.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: C++ in a tasklet that DaCe cannot schedule: calls of the libraries, loops
_OPAQUE = {"blas": re.compile(r"\bcblas_\w+\("),
           "lapack": re.compile(r"\bLAPACKE?_\w+\(|h2d::lapack"),
           "fft": re.compile(r"h2d::fft"), "loop": re.compile(r"\bfor \(")}


def census(sdfg) -> dict:
    """Library nodes by kind, and tasklets whose code holds each kind of opaque C++."""
    import dace

    nodes, opaque = Counter(), Counter()
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, dace.nodes.LibraryNode):
            nodes[type(node).__name__] += 1
        elif isinstance(node, dace.nodes.Tasklet):
            code = node.code.as_string
            for kind, pattern in _OPAQUE.items():
                if pattern.search(code):
                    opaque[kind] += 1
    return {"library_nodes": dict(nodes), "opaque_tasklets": dict(opaque)}


def record(out: Path, npbench: Path | None, pyhpc: Path | None, optimize: str) -> None:
    import jax

    import hlo2dace

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, str(HERE))
    import code_digest

    rows = {}
    for name, function, args, argnums, argnames in code_digest.programs(npbench, pyhpc):
        if name.endswith(" 1048576"):
            continue  # the same SDFG as at 65,536 points
        try:
            jitted = hlo2dace.jit(function, static_argnums=argnums, static_argnames=argnames,
                                  optimize=optimize)
            rows[name] = census(jitted.lower(*args).as_sdfg())
        except Exception as exc:  # counted, not dropped
            rows[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        print(name, rows[name], flush=True)
    out.write_text(json.dumps(rows, indent=1))


def _total(rows: dict, key: str) -> Counter:
    total = Counter()
    for row in rows.values():
        total.update(row.get(key, {}))
    return total


def table(before: Path, after: Path) -> str:
    """Markdown: totals over the programs, then each program whose counts changed."""
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    lines = [f"{len(new)} programs ({sum('error' in r for r in new.values())} failed to "
             f"lower after, {sum('error' in r for r in old.values())} before)", "",
             "| | before | after |", "|---|---|---|"]
    for key, what in (("library_nodes", "library nodes"), ("opaque_tasklets", "tasklets with")):
        totals = _total(old, key), _total(new, key)
        for kind in sorted(set(totals[0]) | set(totals[1])):
            lines.append(f"| {what} {kind} | {totals[0][kind]} | {totals[1][kind]} |")
    lines += ["", "| program | library nodes before | after | opaque tasklets before | after |",
              "|---|---|---|---|---|"]

    def show(counts: dict) -> str:
        return ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items())) or "-"

    for name in new:
        a, b = old.get(name, {}), new[name]
        if a != b:
            lines.append(f"| {name} | {show(a.get('library_nodes', {}))} | "
                         f"{show(b.get('library_nodes', {}))} | "
                         f"{show(a.get('opaque_tasklets', {}))} | "
                         f"{show(b.get('opaque_tasklets', {}))} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--npbench", type=Path)
    parser.add_argument("--pyhpc", type=Path)
    parser.add_argument("--optimize", default="default")
    parser.add_argument("--table", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.table:
        print(table(*args.table))
    elif args.out:
        record(args.out, args.npbench, args.pyhpc, args.optimize)
    else:
        parser.error("give OUT.json or --table BEFORE AFTER")


if __name__ == "__main__":
    main()
