"""The C++ that hlo2dace generates for a broad set of programs, without compiling it: for
checking that a change to the compiler leaves the generated code of programs it should not
touch as it was (a refactoring, a pass switched on or off).

    python bench/code_digest.py OUT.json [--npbench PATH] [--pyhpc PATH] [--optimize LEVEL]
    python bench/code_digest.py --diff BEFORE.json AFTER.json [--show NAME]

The programs: every case of ``bench/run.py``'s sections (quick sizes), NPBench's JAX ports at
preset S (with ``--npbench``, a checkout of spcl/npbench) and pyhpc's three benchmarks at
65,536 and 1,048,576 points (with ``--pyhpc``). For each, the files DaCe would compile
(every ``.cpp`` and ``.h`` of the build folder, after hlo2dace's SDFG and C++ passes) are
recorded with a digest; DaCe's compiler is never called. The names of build folders and
the like, which hold a hash of the program, are kept out of the digest.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import importlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


class _Generated(Exception):
    """Raised in place of DaCe's compiler call: the code is in ``files``."""

    def __init__(self, files: dict[str, str]):
        super().__init__("generated")
        self.files = files


def _intercept_compiler() -> None:
    from dace.codegen import compiler

    def configure_and_compile(folder, name=None, *args, **kwargs):
        root = Path(folder)
        files = {str(p.relative_to(root)): p.read_text()
                 for p in sorted(root.rglob("*")) if p.suffix in (".cpp", ".h", ".cu")
                 and "include/hash.h" not in str(p)}
        raise _Generated(files)

    compiler.configure_and_compile = configure_and_compile
    # the runtime imports the function by module: patch the name it calls too
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("hlo2dace") and \
                getattr(module, "configure_and_compile", None) is not None:
            module.configure_and_compile = configure_and_compile


def _normalised(text: str) -> str:
    """Without what names the build (hash-like folder names, absolute paths)."""
    text = re.sub(r"(?<![0-9a-f])[0-9a-f]{16,64}(?![0-9a-f])", "<hash>", text)
    text = re.sub(r"(// op [\w.]+) @ [^\n]*", r"\1", text)  # source locations
    # the helpers, pasted into the code before they were headers (h2d/ops.h, included)
    text = re.sub(r"// StableHLO elementwise semantics.*?\n}  // namespace h2d\n?", "", text,
                  flags=re.S)
    text = re.sub(r'#include "(h2d_prelude\.h|h2d/ops\.h)"\n', "", text)
    return re.sub(r"/[\w./-]*/(\.dacecache|hlo2dace)/[\w./-]*", "<path>", text)


def generated_code(function, args, static_argnums=(), static_argnames=(),
                   optimize=None) -> dict[str, str]:
    """The files DaCe would compile for ``function(*args)``."""
    import hlo2dace

    jitted = hlo2dace.jit(function, static_argnums=static_argnums,
                          static_argnames=static_argnames, optimize=optimize)
    try:
        jitted(*args)
    except Exception as exc:  # the runtime wraps it in a CompilationError
        todo, seen, cause = [exc], set(), None
        while todo and cause is None:
            item = todo.pop()
            if item is None or id(item) in seen:
                continue
            seen.add(id(item))
            cause = item if isinstance(item, _Generated) else None
            todo += [item.__cause__, item.__context__]
        if cause is None:
            raise
        return {_normalised(name): _normalised(code) for name, code in cause.files.items()}
    raise RuntimeError("the program was not built (a cached binary?)")


def _load(name: str, path: Path):
    """The module in ``path`` under ``name`` (bench/npbench.py is not NPBench's package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def programs(npbench: Path | None, pyhpc: Path | None):
    """(name, function, args, static_argnums, static_argnames) of every program."""
    sys.path.insert(0, str(HERE))
    import run  # bench/run.py

    for section, cases in run.SECTIONS.items():
        for name, function, inputs, _ in cases(True):
            yield f"{section}: {name}", function, inputs, (), ()
    if npbench is not None:
        npb = _load("bench_npbench", HERE / "npbench.py")  # not the checkout's package
        sys.path.insert(0, str(npbench))
        for name, info in npb.kernels(npbench).items():
            function, static_argnums, static_argnames = npb._jax_kernel(info)
            data = npb._inputs(info, "S")
            args = [data[a] for a in info["input_args"]]
            yield f"npbench: {name}", getattr(function, "__wrapped__", function), args, \
                static_argnums, static_argnames
    if pyhpc is not None:
        sys.path.insert(0, str(pyhpc))
        bench_pyhpc = _load("bench_pyhpc", HERE / "pyhpc.py")

        for name, (prefix, entry) in bench_pyhpc.BENCHMARKS.items():
            package = importlib.import_module(f"benchmarks.{name}")
            module = importlib.import_module(f"benchmarks.{name}.{prefix}_jax")
            function = getattr(module, entry)
            for size in (65536, 1048576):
                yield f"pyhpc: {name} {size}", getattr(function, "__wrapped__", function), \
                    package.generate_inputs(size), (), ()


def record(out: Path, npbench: Path | None, pyhpc: Path | None, optimize: str | None) -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    os.environ["HLO2DACE_CACHE_DIR"] = tempfile.mkdtemp(prefix="h2d-digest-")
    import hlo2dace  # noqa: F401  (imported before the patch, so that its modules exist)

    _intercept_compiler()
    found = {}
    for name, function, args, static_argnums, static_argnames in programs(npbench, pyhpc):
        try:
            files = generated_code(function, args, static_argnums, static_argnames, optimize)
            text = "\n".join(f"// ==== {k}\n{v}" for k, v in sorted(files.items()))
            found[name] = {"digest": hashlib.sha256(text.encode()).hexdigest(), "code": text}
        except Exception as exc:  # recorded: a program that fails is a finding too
            found[name] = {"digest": None, "error": f"{type(exc).__name__}: {exc}"[:500]}
        print(f"{found[name]['digest'] or 'ERROR'}  {name}", flush=True)
    out.write_text(json.dumps(found, indent=1))


def _renormalised(found: dict) -> dict:
    """Recorded programs normalised again, with their digests (a record written before a
    normalisation was added compares with one written after)."""
    for record in found.values():
        if record.get("code") is not None:
            record["code"] = _normalised(record["code"])
            record["digest"] = hashlib.sha256(record["code"].encode()).hexdigest()
    return found


def diff(before: Path, after: Path, show: str | None) -> int:
    old, new = (_renormalised(json.loads(path.read_text())) for path in (before, after))
    same = changed = 0
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name, {}), new.get(name, {})
        if a.get("digest") is not None and a.get("digest") == b.get("digest"):
            same += 1
            continue
        changed += 1
        print(f"differs: {name}" + (f" ({a.get('error') or b.get('error')})"
                                   if a.get("error") or b.get("error") else ""))
        if show and show in name and a.get("code") and b.get("code"):
            sys.stdout.writelines(difflib.unified_diff(
                a["code"].splitlines(True), b["code"].splitlines(True), "before", "after"))
    print(f"{same} programs generate the same code, {changed} differ")
    return 1 if changed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--npbench", type=Path)
    parser.add_argument("--pyhpc", type=Path)
    parser.add_argument("--optimize", choices=["none", "default", "aggressive"])
    parser.add_argument("--diff", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--show", help="with --diff: print the diff of programs whose name "
                        "contains this")
    args = parser.parse_args()
    if args.diff:
        sys.exit(diff(*args.diff, args.show))
    if args.out is None:
        parser.error("give OUT.json, or --diff BEFORE AFTER")
    record(args.out, args.npbench, args.pyhpc, args.optimize)


if __name__ == "__main__":
    main()
