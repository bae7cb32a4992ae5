"""Builds SDFGs into shared libraries, caches them on disk, and calls them.

The runtime knows nothing about StableHLO: it receives an SDFG, the specs of its argument
and result arrays, and the hidden constant arrays. Its parts: the disk cache
(``cache.py``), the build (``build.py``: DaCe's settings and toolchain, an SDFG compiled
into a library), the compiled program and its calling convention (``program.py``), and
the threads each call runs with (``tuner.py``)."""

from ..folders import CacheWarning
from .build import build_uncached, toolchain
from .cache import build, cache_dir, cache_key, lookup
from .program import Program, SymbolicProgram, Symbols, TensorSpec, exported_array_types
from .settings import configure_dace
from .tuner import ThreadTuner, thread_tuner

__all__ = ["CacheWarning", "Program", "Symbols", "SymbolicProgram", "TensorSpec",
           "ThreadTuner", "build", "build_uncached", "cache_dir", "cache_key",
           "configure_dace", "exported_array_types", "lookup", "thread_tuner", "toolchain"]
