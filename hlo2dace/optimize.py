"""Optimisation levels: what ``hlo2dace.jit(f, optimize=...)`` changes in the generated code.

Most of the speed comes from how the builder emits code, so the levels choose between ways
of emitting, plus the C++ flags. Every level keeps StableHLO's semantics (NaN, infinities,
signed zeros, integer wrap-around); the whole test suite passes at each
(``HLO2DACE_OPTIMIZE=none make test``).

* ``none``: one map per elementwise op, every intermediate value in an array. The
  translation as plainly as it can be written: a baseline for debugging and measuring.
* ``default``: elementwise ops of one shape fuse into one map with values in registers;
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
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: DaCe's default CPU flags minus the ones that change IEEE results (-fno-signed-zeros,
#: -freciprocal-math); without -fno-trapping-math, which let GCC 12 if-convert the guarded
#: loads of window loops into wrong vector code (see h2d::scalar_loop and
#: tests/test_reduction.py::test_guarded_window_loops_...)
BASE_FLAGS = ("-Wall -Wextra -march=native -fno-math-errno -Wno-unused-parameter "
              "-Wno-unused-label -Wno-unused-variable -Wno-unused-but-set-variable")


@dataclass(frozen=True)
class Level:
    name: str
    #: fuse elementwise ops into clusters (else one map per op)
    fuse: bool
    #: the most ops an elementwise reader recomputes for one read of a pending view
    recomputed_ops: int
    #: whether broadcasts of pending values are recomputed too (else written once)
    recompute_broadcasts: bool
    cpu_flags: str = BASE_FLAGS + " -ffp-contract=off"


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
