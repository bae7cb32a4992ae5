"""The C++ every generated program includes first: DaCe's runtime header and hlo2dace's
helpers (``include/h2d/ops.h`` and the topic headers it includes), precompiled once per
compiler and flag set.

A program's code is split into parts that the compiler builds in parallel (``cpp_split``),
and each part parsed the helpers again (about 1,700 lines of templates), before any of its
own code. A precompiled header of both, made the first time a flag set builds and kept in
hlo2dace's private folder (``folders.native_dir``), is loaded instead: it replaces DaCe's
own one of its runtime header alone. Where it cannot be made (another compiler, a full
disk), programs include the headers as text: the same code, compiled more slowly.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import subprocess
from pathlib import Path

import dace
import dace.library

from . import folders
from .progress import stage

#: the folder whose ``h2d/`` headers the generated code includes (installed with the package)
INCLUDE_DIR = Path(__file__).resolve().parent / "include"
#: what the precompiled header holds: DaCe's runtime and the helpers
PRELUDE = "#include <dace/dace.h>\n#include \"h2d/ops.h\"\n"
#: the header's name, force-included into every source of a program
NAME = "h2d_prelude.h"


def include(header: str) -> str:
    """The line of generated code that includes the helper header ``h2d/<header>``."""
    return f'#include "h2d/{header}"\n'


@dace.library.environment
class Helpers:
    """The DaCe environment of every program (on its first tasklet): its code includes
    ``h2d/ops.h`` from ``include_dir()``, so that an SDFG of hlo2dace's also compiles as
    DaCe compiles any SDFG (``sdfg.compile()``)."""

    cmake_minimum_version = None
    cmake_packages = []
    cmake_variables = {}
    cmake_compile_flags = []
    cmake_link_flags = []
    cmake_files = []
    cmake_libraries = []
    headers = ["h2d/ops.h"]
    state_fields = []
    init_code = ""
    finalize_code = ""
    dependencies = []

    @staticmethod
    def cmake_includes():
        return [str(include_dir())]


def headers_digest() -> str:
    """A digest of the helpers' text: a changed header makes a new precompiled one."""
    digest = hashlib.sha256()
    for path in sorted((INCLUDE_DIR / "h2d").glob("*.h")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@functools.cache
def include_dir() -> Path:
    """The folder the compiler reads the helpers from: the package's own, or, where
    another user could change that (``folders.problem``), a private copy of it."""
    if folders.problem(INCLUDE_DIR) is None and folders.problem(INCLUDE_DIR / "h2d") is None:
        return INCLUDE_DIR
    copy = folders.private_folder(folders.native_dir() / "include", "the helpers' headers")
    folder = copy / headers_digest()[:24]
    if not (folder / "h2d" / "ops.h").is_file():
        folders.make_private(folder / "h2d")
        for path in (INCLUDE_DIR / "h2d").glob("*.h"):
            (folder / "h2d" / path.name).write_bytes(path.read_bytes())
    return folder


def compile_flags(cpu_flags: str) -> tuple[str, str]:
    """``cpu_flags`` with the folder of the prelude precompiled for them, and the line
    each of a program's C++ files begins with to use it (GCC uses a precompiled header
    only for the first include of a file); an empty line where none could be made."""
    folder = precompiled(cpu_flags)
    if folder is None:
        return cpu_flags, ""
    return f"{cpu_flags} -I{include_dir()} -I{folder}", f'#include "{NAME}"\n'



@functools.cache
def precompiled(cpu_flags: str) -> Path | None:
    """The folder of the prelude precompiled for ``cpu_flags`` (made now if need be, once
    per flag set, compiler and version of the headers), or None where it cannot be made.
    The flags are those DaCe compiles a program's sources with (its ``-std``, ``-fPIC``,
    ``-fopenmp``, build type): a precompiled header made with others is silently not
    used by the compiler."""
    from dace import Config
    from dace.codegen import compiler, compiler_family

    runtime = Path(compiler.__file__).resolve().parents[1] / "runtime" / "include"
    cxx = compiler_family.host_compiler()
    flags = [f"-std=c++{Config.get('compiler', 'cpp_standard')}", "-fPIC", "-fopenmp",
             *shlex.split(cpu_flags), *compiler.build_type_flags()]
    key = hashlib.sha256("\0".join([cxx, _version(cxx), str(runtime), *flags,
                                    headers_digest()]).encode()).hexdigest()[:24]
    folder = folders.private_folder(folders.native_dir() / "pch", "precompiled headers") / key
    folders.make_private(folder)
    header = folder / NAME
    if (folder / f"{NAME}.gch").is_file():
        return folder
    header.write_text(PRELUDE)
    staging = folder / f"{NAME}.gch.{os.getpid()}"
    with stage("native setup") as setup:
        setup.note = "once per machine and compiler flags: the precompiled prelude"
        try:
            subprocess.run([cxx, *flags, f"-I{runtime}", f"-I{include_dir()}", "-x",
                            "c++-header", str(header), "-o", str(staging)], check=True,
                           capture_output=True, timeout=600)
            os.replace(staging, folder / f"{NAME}.gch")
        except (OSError, subprocess.SubprocessError):
            staging.unlink(missing_ok=True)
            setup.note = "the prelude could not be precompiled: included as text"
            return None
    return folder


def _version(cxx: str) -> str:
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True,
                              timeout=60).stdout.partition("\n")[0]
    except (OSError, subprocess.SubprocessError):
        return "unknown"
