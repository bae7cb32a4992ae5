"""hlo2dace: JAX programs through StableHLO and DaCe.

``hlo2dace.jit`` is a drop-in for ``jax.jit`` whose machine code DaCe generates;
``compile_text`` compiles a StableHLO module from any source JAX produces; ``compare``
runs XLA and DaCe side by side; ``profile`` shows where a compiled program's time goes.
"""

from .sharded import configure_devices

configure_devices()  # in an MPI job: one JAX device per rank, before JAX's backend starts

from .api import (  # noqa: E402
    Compiled,
    JitFunction,
    JitLowered,
    Lowered,
    Traced,
    compile_text,
    jit,
    lower_text,
)
from .compare import CompareReport, compare  # noqa: E402
from .errors import (  # noqa: E402
    ArgumentError,
    CompilationError,
    Hlo2DaceError,
    JobSizeError,
    ParseError,
    UnsupportedError,
)
from .folders import CacheWarning  # noqa: E402
from .profile import Profile, profile  # noqa: E402
from .sharded import ProcessLocalArray, gather, make_array_from_process_local_data  # noqa: E402

# hlo2dace.jit functions under JAX's transformations (registers itself with api)
from . import interop  # noqa: E402,F401  isort: skip

__all__ = [
    "ArgumentError", "CacheWarning", "Compiled", "CompareReport", "CompilationError",
    "Hlo2DaceError", "JitFunction", "JitLowered", "JobSizeError", "Lowered", "ParseError",
    "Profile", "ProcessLocalArray", "Traced", "UnsupportedError", "compare", "compile_text",
    "gather", "jit", "lower_text", "make_array_from_process_local_data", "profile",
]
__version__ = "0.1.0"
