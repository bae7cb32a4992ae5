"""hlo2dace: JAX programs through StableHLO and DaCe.

``hlo2dace.jit`` is a drop-in for ``jax.jit`` whose machine code DaCe generates;
``compile_text`` compiles a StableHLO module from any source JAX produces; ``compare``
runs XLA and DaCe side by side; ``profile`` shows where a compiled program's time goes.
"""

from .api import Compiled, JitFunction, Lowered, compile_text, jit, lower_text
from .compare import CompareReport, compare
from .errors import ArgumentError, CompilationError, Hlo2DaceError, ParseError, UnsupportedError
from .folders import CacheWarning
from .profile import Profile, profile

# hlo2dace.jit functions under JAX's transformations (registers itself with api)
from . import interop  # noqa: E402,F401  isort: skip

__all__ = [
    "ArgumentError", "CacheWarning", "Compiled", "CompareReport", "CompilationError",
    "Hlo2DaceError", "JitFunction", "Lowered", "ParseError", "Profile", "UnsupportedError",
    "compare", "compile_text", "jit", "lower_text", "profile",
]
__version__ = "0.1.0"
