"""The one module that reads DaCe's ``CompiledSDFG`` internals: a loaded program's C
signature, entry point and state handle, which the runtime calls directly instead of
through ``CompiledSDFG.__call__`` (39 us of marshalling per call, against 2 us).

DaCe 2.0.0b1 keeps them in private attributes (``_sig``, ``_typedict``, ``_cfunc``,
``_libhandle``). Should a DaCe upgrade rename them, ``entry_point`` raises a
``CompilationError`` saying so, rather than the runtime falling back or failing later."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .blas_core import match_kernels
from .errors import CompilationError

#: the DaCe version whose internals this module reads
KNOWN_DACE = "2.0.0b1"


def load(build_folder: Path, sdfg: Any = None) -> Any:
    """The ``CompiledSDFG`` of a build folder (``sdfg``, if the caller has it, spares
    reading ``program.sdfgz``)."""
    from dace.codegen.compiler import load_precompiled_sdfg

    match_kernels()  # before the program loads OpenBLAS
    return load_precompiled_sdfg(build_folder, sdfg=sdfg)


@dataclass(frozen=True)
class EntryPoint:
    """How to call an initialised program's C entry point directly."""

    #: the entry point, taking the state handle and then one value per ``arguments``
    function: Any
    #: the program's state, the entry point's first argument
    handle: ctypes.c_void_p
    #: per C argument after the state: its data name, and whether it is an array (a
    #: pointer) rather than a scalar
    arguments: tuple[tuple[str, bool], ...]

    @property
    def addresses(self) -> tuple[int, int]:
        """The entry point's and the state's addresses (for callers outside Python)."""
        return ctypes.cast(self.function, ctypes.c_void_p).value, self.handle.value


def entry_point(compiled: Any, arguments: dict[str, Any]) -> EntryPoint:
    """Initialise ``compiled`` (DaCe allocates its persistent arrays, given every argument
    by name) and return its entry point."""
    import dace

    compiled.initialize(**arguments)
    try:
        names, types = compiled._sig, compiled._typedict
        function, handle = compiled._cfunc, compiled._libhandle
    except AttributeError as exc:
        raise CompilationError(
            f"DaCe {dace.__version__}'s CompiledSDFG has no {exc.name}: hlo2dace reads "
            f"the C signature of DaCe {KNOWN_DACE}'s (hlo2dace/compiled_sdfg.py)") from None
    if not handle.value:  # DaCe's initialisation returned no state, and printed why
        compiled._initialized = False  # else DaCe's finalize exits a null state (a crash)
        raise CompilationError(
            "the program's initialisation failed (its message is above: a cuda program on "
            "a machine without a usable NVIDIA GPU and driver fails here, docs/gpu.md)")
    return EntryPoint(function, handle, tuple((name, isinstance(types[name], dace.data.Array))
                                              for name in names))
