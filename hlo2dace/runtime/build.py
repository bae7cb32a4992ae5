"""DaCe's settings for a build, what besides the module decides a binary (``toolchain``:
DaCe, the compiler, the CPU), and an SDFG compiled into a library (``compile_sdfg``)."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import compiled_sdfg, folders, prelude, sdfg_build
from ..errors import CompilationError
from ..optimize import shared_threads
from .program import Program, TensorSpec
from .settings import configure_dace


@functools.lru_cache(maxsize=1)
def toolchain() -> tuple[str, ...]:
    """What besides the module and the flags decides the binary: DaCe's version, the CPU
    (model and instruction-set flags, as DaCe keys its own build caches), the C++ compiler
    (path and version), DaCe's compiler and linker settings, and the threads that code
    whose partition is fixed when it is built shares its work among."""
    import dace
    from dace.codegen import compiler, compiler_family

    configure_dace()  # first: the configuration names the compiler run below
    executable = compiler_family.host_compiler()
    try:
        version = subprocess.run([executable, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout.partition("\n")[0]
    except (OSError, subprocess.SubprocessError):
        version = "unknown"
    settings = [dace.Config.get(*path) for path in (
        ("compiler", "cpu", "executable"), ("compiler", "cpu", "libs"),
        ("compiler", "cpu", "openmp_sections"), ("compiler", "linker", "executable"),
        ("compiler", "linker", "args"))]
    return (dace.__version__, compiler.host_isa_id(), shutil.which(executable) or executable,
            version, json.dumps(settings), f"threads={shared_threads()}")


def compile_sdfg(sdfg: Any, build_folder: Path, cpu_flags: str,
             code_passes: frozenset[str] | None = None) -> Any:
    """DaCe's code generation and C++ build of ``sdfg`` in ``build_folder``
    (``sdfg_build.build``), the helpers' prelude precompiled (``prelude.py``: it holds
    DaCe's runtime header too, so DaCe's own precompiled one is not used where it is);
    returns the SDFG that loads the library (its signature)."""
    import dace

    configure_dace()
    try:
        with folders.dace_build_environment():
            flags, first = prelude.compile_flags(cpu_flags)
            dace.Config.set("compiler", "cpu", "args", value=flags)
            dace.Config.set("compiler", "precompiled_header", value=not first)
            return sdfg_build.build(sdfg, build_folder, passes=code_passes, first_line=first)
    except Exception as exc:
        raise CompilationError(f"DaCe could not compile the translated program: "
                               f"{type(exc).__name__}: {exc}") from exc


def build_uncached(sdfg: Any, folder: Path, arguments: Sequence[TensorSpec],
                   results: Sequence[TensorSpec], constants: dict[str, np.ndarray],
                   cpu_flags: str, code_passes: frozenset[str] | None = None) -> Program:
    """Compile ``sdfg`` (sizes known) into ``folder``, a private folder of the caller's,
    outside the cache, and load it: for programs that write files beside their binary,
    such as the profiler's instrumented builds (DaCe writes their reports into
    ``<folder>/build/perf``, a path it compiles into the code)."""
    parallel = has_parallel_regions(sdfg)  # before the build, which changes the SDFG
    signature = compile_sdfg(sdfg, folder / "build", cpu_flags, code_passes)
    return Program(compiled_sdfg.load(folder / "build", sdfg=signature), arguments, results,
                   constants, folder, built=True, parallel=parallel)


def has_parallel_regions(sdfg: Any) -> bool:
    """Whether any map of ``sdfg`` may run on more than one thread, or any tasklet opens
    a parallel region of its own (a product shared out among the threads)."""
    import dace

    return any(isinstance(node, dace.nodes.MapEntry)
               and node.map.schedule != dace.ScheduleType.Sequential
               or isinstance(node, dace.nodes.Tasklet)
               and "#pragma omp parallel" in node.code.as_string
               for node, _ in sdfg.all_nodes_recursive())
