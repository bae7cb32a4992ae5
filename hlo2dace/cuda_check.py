"""The cuda target checked without a GPU: a program's CUDA code generated and compiled by
``nvcc`` for some architectures (``sm_90`` and ``sm_80`` by default), without linking
against a driver.

``check(sdfgs)`` takes SDFGs of the cuda target (``hlo2dace.jit(f, target="cuda")
.lower(...).as_sdfg()``), generates each one's code as DaCe's build would, and compiles
the ``.cu`` files (kernels and their host launchers, for each architecture in one nvcc
call) and the C++ files (the host's frames, with the CUDA headers) with ``-c``, all
programs' files of a kind as one (``unity_source``). What DaCe
would link, CMake and the CUDA driver are not involved, so it runs on any machine with the
``cuda`` extra. A warning whose location is hlo2dace's code (the generated files, the
helpers of ``include/h2d``) counts as a failure; warnings of DaCe's own runtime headers
are reported but do not fail.
"""

from __future__ import annotations

import bisect
import copy
import os
import re
import shlex
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Container, Iterable, Sequence

from . import cuda_toolchain, prelude

#: a diagnostic of nvcc's front end or of GCC: file(line): warning ... / file:line:col: warning:
_DIAGNOSTIC = re.compile(r"^(?P<file>[^\s(:]+)(?:\((?P<line>\d+)\)|:(?P<gline>\d+):\d+:)"
                         r":? (?P<kind>warning|error)", re.MULTILINE)


#: nvcc's warnings that do not matter: a variable declared or set but never read (the
#: translators declare some for every element, e.g. a scatter's previous value)
IGNORED = ("177", "550")


@dataclass
class CheckResult:
    """One program's check: its files, the compiler's output, and what failed."""

    name: str
    files: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: warnings located in hlo2dace's code (generated files, the helpers)
    warnings: list[str] = field(default_factory=list)
    output: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors and not self.warnings


def _include_dirs(code_objects) -> list[str]:
    """DaCe's runtime, the helpers, the CUDA root's headers and every environment's (the
    cuBLAS header ``dace_cublas.h`` among them)."""
    import dace
    import dace.library
    from dace.codegen import compiler

    runtime = Path(dace.__file__).resolve().parent / "runtime" / "include"
    names = set().union(*(o.environments for o in code_objects))
    environments = dace.library.get_environments_and_dependencies(names)
    flags, _ = compiler.get_environment_flags(environments)
    found: list[str] = []
    for flag in flags:
        if flag.startswith("-DDACE_ENV_INCLUDES="):
            found = flag.split("=", 1)[1].strip('"').split()
    return [str(runtime), str(prelude.include_dir()), *found,
            *(str(d) for d in cuda_toolchain.include_dirs())]


def generate(sdfg, folder: Path) -> tuple[list[Path], list[str]]:
    """Write a copy of ``sdfg``'s generated code into ``folder`` as DaCe lays out a
    program's folder (``src/cpu``, ``src/cuda``, ``include/hash.h``): its source files and
    the include folders they need. DaCe's generation changes the SDFG (library nodes
    expanded), hence the copy."""
    from dace.codegen import compiler

    sdfg = copy.deepcopy(sdfg)
    objects = sdfg.generate_code()
    folder.mkdir(parents=True, exist_ok=True)
    compiler.generate_program_folder(sdfg, objects, str(folder))
    files = [folder / "src" / o.target.target_name / (
        f"{o.name}.{o.language}" if not o.target_type else
        f"{o.target_type}/{o.name}.{o.language}") for o in objects if o.linkable]
    return [f for f in files if f.is_file()], _include_dirs(objects)


def _ours(path: str, folder: Path) -> bool:
    resolved = Path(path).resolve()
    return resolved.is_relative_to(folder.resolve()) or \
        resolved.is_relative_to(prelude.include_dir().resolve())


def _diagnostics(output: str, folder: Path) -> tuple[list[str], list[str]]:
    """nvcc's and GCC's errors, and their warnings in hlo2dace's code that matter."""
    errors, warnings = [], []
    for match in _DIAGNOSTIC.finditer(output):
        end = output.find("\n", match.start())
        line = output[match.start():end if end >= 0 else len(output)]
        if match["kind"] == "error":
            errors.append(line)
        elif _ours(match["file"], folder) and not any(f"#{n}-D" in line for n in IGNORED):
            warnings.append(line)
    return errors, warnings


def _command(path: Path, includes: Sequence[str], archs: Sequence[str]) -> list[str]:
    """The command that compiles ``path`` into an object beside it: a ``.cu`` file by nvcc
    for every arch, a C++ file by the host compiler under the CUDA headers."""
    import dace

    standard = f"-std=c++{dace.Config.get('compiler', 'cpp_standard')}"
    include_flags = [f"-I{d}" for d in includes]
    if path.suffix == ".cu":
        gencode = [f"-gencode=arch=compute_{a.removeprefix('sm_')},code={a}" for a in archs]
        return [str(cuda_toolchain.nvcc()), standard, *cuda_toolchain.NVCC_FLAGS,
                "-DWITH_CUDA", "-Xcompiler=-fPIC", *gencode, *include_flags, "-c", str(path),
                "-o", str(path.with_suffix(".o"))]
    return ["g++", standard, "-fPIC", "-fopenmp", "-DWITH_CUDA", "-Wall",
            "-Wno-unused-variable", "-Wno-unused-but-set-variable", "-Wno-unused-function",
            "-Wno-unknown-pragmas", "-include", "h2d/ops.h", *include_flags, "-c", str(path),
            "-o", str(path.with_suffix(".cpp.o"))]


def _run(command: list[str]) -> tuple[str, int]:
    done = subprocess.run(command, capture_output=True, text=True)
    return f"$ {shlex.join(command)}\n{done.stdout}{done.stderr}", done.returncode


def _absolute_includes(code: str, source: Path) -> str:
    """``code`` with its includes of relative paths that exist from ``source``'s folder
    (DaCe's ``../../include/hash.h``) made absolute, so that it compiles from elsewhere."""
    def absolute(match: re.Match) -> str:
        path = (source.parent / match[1]).resolve()
        return f'#include "{path}"' if path.is_file() else match[0]

    return re.sub(r'^#include "(\.\.?/[^"]+)"', absolute, code, flags=re.MULTILINE)


def unity_source(sources: Sequence[tuple[str, str]]) -> str:
    """One file of several programs' (name, code): their includes first, then each
    program's code in a namespace of its name, with DaCe's exported (``extern "C"``)
    functions made plain functions of that namespace, so that the names programs share
    (``__dace_init_cuda``, kernels) do not collide. The compiler parses DaCe's runtime and
    the helpers once for them all."""
    includes: dict[str, None] = {}
    bodies = []
    for name, code in sources:
        lines = code.splitlines()
        includes.update((line, None) for line in lines if line.startswith("#include"))
        body = "\n".join(line for line in lines if not line.startswith("#include"))
        bodies.append(f"namespace h2d_check_{name} {{\n{body}\n}}  // {name}\n")
    return "\n".join([*includes, "#undef DACE_EXPORTED", "#define DACE_EXPORTED", *bodies])


def _compile_together(units: list[tuple[CheckResult, Path, list[str]]], unity: Path,
                      folder: Path, archs: Sequence[str]) -> None:
    """Compile the files ``units`` (result, path, include folders) as one, ``unity``
    (``unity_source``). Where that fails, each diagnostic in a program's lines of the
    unity file is that program's; if one lies elsewhere (a helper's header), each half of
    the units again, down to a file on its own, to tell whose code failed."""
    start = time.perf_counter()
    source = unity_source([(r.name, _absolute_includes(f.read_text(), f)) for r, f, _ in units])
    unity.write_text(source)
    includes = list(dict.fromkeys(d for _, _, i in units for d in i))
    output, status = _run(_command(unity, includes, archs))
    errors, warnings = _diagnostics(output, folder)
    share = (time.perf_counter() - start) / len(units)
    for result, _, _ in units:
        result.output += output
        result.seconds += share
    if status == 0 and not errors and not warnings:
        return
    blamed = _blame(errors + warnings, unity, source, [r for r, _, _ in units]) \
        if errors or status == 0 else None
    if blamed is not None:
        for result, path, _ in units:
            result.errors += [f"{path.name}: {e}" for e in errors if blamed[e] is result]
            result.warnings += [f"{path.name}: {w}" for w in warnings if blamed[w] is result]
        return
    if len(units) == 1:
        result, path, own = units[0]
        start = time.perf_counter()
        _compiled(result, path, _run(_command(path, own, archs)), folder)
        result.seconds += time.perf_counter() - start
        return
    half = len(units) // 2
    _compile_together(units[:half], unity.with_stem(f"{unity.stem}a"), folder, archs)
    _compile_together(units[half:], unity.with_stem(f"{unity.stem}b"), folder, archs)


def _blame(diagnostics: list[str], unity: Path, source: str,
           results: list[CheckResult]) -> dict[str, CheckResult] | None:
    """Each diagnostic's program, by the lines of the unity file ``source`` its namespace
    spans; None if a diagnostic lies elsewhere (another file, the includes)."""
    starts = {line: k for k, line in enumerate(source.splitlines(), 1)}
    firsts = [starts[f"namespace h2d_check_{r.name} {{"] for r in results]
    blamed = {}
    for diagnostic in diagnostics:
        match = _DIAGNOSTIC.match(diagnostic)
        if Path(match["file"]) != unity:
            return None
        line = int(match["line"] or match["gline"])
        if line < firsts[0]:
            return None
        blamed[diagnostic] = results[bisect.bisect_right(firsts, line) - 1]
    return blamed


def _split(units: list, parts: int) -> list[list]:
    """``units`` in up to ``parts`` lists of about the same size of code, a program's
    files in one list (its namespace once in a unity file)."""
    programs: dict[str, list] = {}
    for unit in units:
        programs.setdefault(unit[0].name, []).append(unit)
    lists: list[list] = [[] for _ in range(min(parts, len(programs)))]
    sizes = [0] * len(lists)
    for files in sorted(programs.values(), key=lambda f: -sum(u[1].stat().st_size for u in f)):
        smallest = sizes.index(min(sizes))
        lists[smallest] += files
        sizes[smallest] += sum(u[1].stat().st_size for u in files)
    return lists


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, which ``taskset`` narrows)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check(sdfgs: Iterable, archs: Sequence[str] = cuda_toolchain.DEFAULT_ARCHS,
          folder: Path | None = None, every_arch: Container[str] | None = None,
          jobs: int | None = None) -> list[CheckResult]:
    """Generate and compile each of ``sdfgs`` (cuda-target SDFGs, of distinct names) for
    ``archs``; one result per SDFG, in order. ``every_arch``: the names of the SDFGs whose
    CUDA files are compiled for every arch, the others' for ``archs[0]`` only (default:
    all for every arch): each arch runs nvcc's back end again, and an older one's errors
    are rare. The files of a kind are compiled as up to ``jobs`` unity files (default: the
    usable CPUs), by as many compilers at once (``_compile_together``). ``folder``: where
    the files go (default: a temporary one, removed after)."""
    cuda_toolchain.require("the CUDA compile check")
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="h2d_cuda_check_") as temporary:
            return check(sdfgs, archs, Path(temporary), every_arch, jobs)
    jobs = jobs or usable_cpus()
    results, units = [], []
    for sdfg in sdfgs:
        start = time.perf_counter()
        result = CheckResult(sdfg.name)
        results.append(result)
        try:
            files, includes = generate(sdfg, folder / sdfg.name)
        except Exception as exc:  # DaCe's code generation: reported as the program's failure
            result.errors.append(f"code generation: {type(exc).__name__}: {exc}")
            continue
        result.files = [str(f) for f in files]
        units += [(result, f, includes) for f in files]
        result.seconds = time.perf_counter() - start
    def everywhere(unit) -> bool:
        return every_arch is None or unit[0].name in every_arch

    kernels = [u for u in units if u[1].suffix == ".cu"]
    batches = [(group, archs) for group in
               _split([u for u in units if u[1].suffix == ".cpp"], jobs)]
    batches += [(group, archs[:1]) for group in
                _split([u for u in kernels if not everywhere(u)], jobs)]
    batches += [(group, archs) for group in _split([u for u in kernels if everywhere(u)], jobs)]
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda args: _compile_together(*args), [
            (group, folder / f"unity{k}{group[0][1].suffix}", folder, group_archs)
            for k, (group, group_archs) in enumerate(batches)]))
    return results


def _compiled(result: CheckResult, path: Path, run: tuple[str, int], folder: Path) -> None:
    output, status = run
    errors, warnings = _diagnostics(output, folder)
    result.output += output
    result.errors += errors or ([f"{path.name}: the compiler exited with status {status}"]
                                if status else [])
    result.warnings += warnings
