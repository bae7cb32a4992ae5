"""Optimisation levels: what ``hlo2dace.jit(f, optimize=...)`` changes in the generated code.

A level picks the passes of the pipeline (``pipeline.py``) and their options, plus the C++
flags. Every level keeps StableHLO's semantics (NaN, infinities, signed zeros, integer
wrap-around); the whole test suite passes at each (``HLO2DACE_OPTIMIZE=none make test``).

* ``none``: no pass runs: one map per elementwise op, every intermediate value in an array,
  each op lowered by its translator alone. The plain lowering: a baseline for debugging and
  measuring, and where a user's own transformations start. Its one difference in results:
  where XLA contracts ``a * b + c`` into a fused multiply-add, the product is rounded first
  (within half an ULP of the product and one of the result).
* ``default``: elementwise ops of one shape fuse into one map, each value a C++ local;
  slices, broadcasts and transposes of values not yet written are recomputed by their
  elementwise readers (up to 24 ops per read), as XLA fuses cheap producers into their
  consumers, so a stencil's fluxes never reach memory.
* ``aggressive``: also recomputes broadcasts of pending values in their readers (fewer
  maps and arrays, more arithmetic per element) and producers of up to 96 ops.

Contracting ``a * b + c`` into fused multiply-adds (``-ffp-contract=fast``) is in no
level: XLA contracts too, but not the same products, and the last-bit differences broke
the tests that hold complex functions and products to XLA's exact bits.

The level comes from the ``optimize`` argument, else ``$HLO2DACE_OPTIMIZE``, else
``default``; it is part of the cache key.

Every level compiles for the CPU it runs on (``-march=native``): vector width decides the
speed of elementwise loops, and the cache key holds the CPU, so a binary is never loaded on
another one. ``$HLO2DACE_MARCH`` names another ``-march`` target (``x86-64-v3``: AVX2
only), to reproduce on one machine what another instruction set computes. Results differ
between targets only within the ULP bounds of the vector math functions (libmvec's variants
per instruction set, ``tests/test_vector_isa.py``); special values never.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

#: DaCe's default CPU flags minus the ones that change IEEE results (-fno-signed-zeros,
#: -freciprocal-math); without -fno-trapping-math, which let GCC 12 if-convert the guarded
#: loads of window loops into wrong vector code (see h2d::scalar_loop and
#: tests/test_reduction.py::test_guarded_window_loops_...). In the functions OpenMP outlines
#: GCC knows nothing of the arrays' ``__restrict__``, and a loop over more than four arrays
#: needs more than its default of 10 run-time overlap checks to vectorise: it stayed scalar
#: (mandelbrot's fused iteration over seven carried arrays); with 64, it vectorises behind
#: the checks.
BASE_FLAGS = ("-Wall -Wextra -fno-math-errno -Wno-unused-parameter "
              "-Wno-unused-label -Wno-unused-variable -Wno-unused-but-set-variable "
              "-ffp-contract=off --param vect-max-version-for-alias-checks=64")


def target_isa() -> str:
    """The ``-march`` target: ``$HLO2DACE_MARCH``, else the building machine's CPU."""
    name = os.environ.get("HLO2DACE_MARCH") or "native"
    if not re.fullmatch(r"[\w.+-]+", name):
        raise ValueError(f"HLO2DACE_MARCH={name!r} is not a -march target name "
                         f"(native, x86-64-v2, x86-64-v3, x86-64-v4, znver4, ...)")
    return name


def shared_threads() -> int:
    """The threads that compiled code shares work out among where it fixes the partition
    itself (``linalg._skinny_gemm``): ``OMP_NUM_THREADS``, else the CPUs this process may
    use. Part of a binary's cache key."""
    value = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


@dataclass(frozen=True)
class Level:
    name: str
    #: fuse elementwise ops into clusters (else one map per op)
    fuse: bool
    #: the most ops an elementwise reader recomputes for one read of a pending view
    recomputed_ops: int
    #: whether broadcasts of pending values are recomputed too (else written once)
    recompute_broadcasts: bool

    @property
    def cpu_flags(self) -> str:
        """The C++ flags: the same at every level (``BASE_FLAGS``), for ``target_isa()``."""
        return f"{BASE_FLAGS} -march={target_isa()}"


LEVELS = {
    "none": Level("none", False, 0, False),
    "default": Level("default", True, 24, False),
    "aggressive": Level("aggressive", True, 96, True),
}


def level(name: str | None = None) -> Level:
    """The level called ``name`` (None: ``$HLO2DACE_OPTIMIZE``, else ``default``)."""
    name = name or os.environ.get("HLO2DACE_OPTIMIZE") or "default"
    try:
        return LEVELS[name]
    except KeyError:
        raise ValueError(f"unknown optimisation level {name!r}; the levels are "
                         f"{', '.join(LEVELS)}") from None
