"""hlo2dace: JAX programs through StableHLO and DaCe.

``hlo2dace.jit`` is a drop-in for ``jax.jit`` whose machine code DaCe generates;
``compile_text`` compiles a StableHLO module from any source JAX produces; ``compare``
runs XLA and DaCe side by side; ``profile`` shows where a compiled program's time goes.

The public names are imported on first use (PEP 562): importing the package itself costs
little, so ``hlo2dace --help`` answers at once instead of after JAX's and DaCe's imports
(2.5 s).
"""

import importlib
import importlib.util
import sys
import types

from .mpi import configure_devices

configure_devices()  # in an MPI job: one JAX device per rank, before JAX's backend starts

#: public name -> the module that defines it
_PUBLIC = {
    "Compiled": "api", "JitFunction": "api", "JitLowered": "api", "Lowered": "api",
    "Traced": "api", "compile_text": "api", "jit": "api", "load": "api", "lower_text": "api",
    "CompareReport": "compare", "compare": "compare",
    "ArgumentError": "errors", "CompilationError": "errors", "Hlo2DaceError": "errors",
    "JobSizeError": "errors", "ParseError": "errors", "TransformationError": "errors",
    "UnsupportedError": "errors",
    "CacheWarning": "folders",
    "Profile": "profile", "profile": "profile",
    "ProcessLocalArray": "sharded", "gather": "sharded",
    "make_array_from_process_local_data": "sharded",
}
__all__ = sorted(_PUBLIC)
__version__ = "0.1.0"


def __getattr__(name: str):
    """A public name on first use: the public names' modules are imported, and ``interop``
    (hlo2dace.jit under JAX's transformations registers itself with api). A submodule's
    name imports that submodule alone."""
    if name in _PUBLIC:
        importlib.import_module(f"{__name__}.interop")
        for public, module in _PUBLIC.items():
            globals()[public] = getattr(importlib.import_module(f"{__name__}.{module}"),
                                        public)
        return globals()[name]
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_PUBLIC})


class _Package(types.ModuleType):
    """``hlo2dace.compare`` and ``hlo2dace.profile`` are the functions, as the submodules of
    those names define them: importing a submodule does not put it in their place."""

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and _PUBLIC.get(name) == name:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
