"""OpenBLAS's kernels matched to the CPU before the first program loads the library.

OpenBLAS (built with ``DYNAMIC_ARCH``, as Debian's is) picks its kernels by CPU model, and
a model newer than the library gets the generic SSE3 ones: Debian 12's OpenBLAS 0.3.21
runs "Prescott" kernels on an Emerald Rapids Xeon (family 6, model 207), where a
2000x2000 f32 product took 445 ms against 77 ms with its AVX-512 ("SkylakeX") kernels.
So before a program first loads the library, a child process asks it which kernels it
picks unaided; when they use a smaller vector instruction set than the CPU has (AVX-512,
AVX2, AVX, as ``/proc/cpuinfo`` lists them), this process loads the library once with
``OPENBLAS_CORETYPE`` naming the kernels of the CPU's set, then restores the environment;
every program loaded later shares that library. A user's own ``OPENBLAS_CORETYPE`` is
always kept, as is a library that this process has already loaded.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import subprocess
import sys
from pathlib import Path

#: the package's logger (``progress.LOGGER``, named, not imported: one floor)
LOGGER = logging.getLogger("hlo2dace")

#: the library's name as the programs link it (DaCe's OpenBLAS environment: -lopenblas)
LIBRARY = "libopenblas.so.0"

#: vector instruction sets, smallest first: per set, the flags /proc/cpuinfo must list,
#: the kernels OPENBLAS_CORETYPE names for it, and the kernels OpenBLAS reports that use
#: it (lower case: ``openblas_get_corename`` spells them differently across versions)
ISA_LEVELS = (
    ("SSE", set(), "Prescott",
     {"katmai", "coppermine", "northwood", "prescott", "banias", "atom", "core2", "penryn",
      "dunnington", "nehalem", "athlon", "opteron", "opteron_sse3", "barcelona", "nano",
      "bobcat"}),
    ("AVX", {"avx"}, "Sandybridge", {"sandybridge", "bulldozer", "piledriver", "steamroller"}),
    ("AVX2", {"avx2", "fma"}, "Haswell", {"haswell", "zen", "excavator"}),
    ("AVX-512", {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}, "SkylakeX",
     {"skylakex", "cooperlake", "sapphirerapids"}),
)

_PROBE = ("import ctypes, sys\n"
          "library = ctypes.CDLL(sys.argv[1])\n"
          "library.openblas_get_corename.restype = ctypes.c_char_p\n"
          "print(library.openblas_get_corename().decode())\n")


def cpu_level(flags: set[str]) -> int:
    """The index in ``ISA_LEVELS`` of the largest set a CPU with these /proc/cpuinfo
    flags has (every set below it too)."""
    level = 0
    for needed in (needed for _, needed, _, _ in ISA_LEVELS[1:]):
        if not needed <= flags:
            break
        level += 1
    return level


def kernel_level(core: str) -> int | None:
    """The index in ``ISA_LEVELS`` of the set OpenBLAS's kernels named ``core`` use, or
    None for a name this module does not know (a newer library's)."""
    return next((i for i, (_, _, _, cores) in enumerate(ISA_LEVELS) if core.lower() in cores),
                None)


def better_kernels(core: str, flags: set[str]) -> str | None:
    """The ``OPENBLAS_CORETYPE`` for a CPU with ``flags`` whose OpenBLAS picks ``core``
    unaided, or None when ``core`` already uses the CPU's largest set (or is unknown)."""
    level, used = cpu_level(flags), kernel_level(core)
    return ISA_LEVELS[level][2] if used is not None and used < level else None


def cpu_features() -> set[str]:
    """The CPU's feature flags (/proc/cpuinfo's `flags`: avx2, avx512f, f16c...)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def _already_loaded() -> bool:
    try:
        return "libopenblas" in Path("/proc/self/maps").read_text()
    except OSError:
        return True  # not Linux: leave the library alone


def _probe() -> str | None:
    """The kernels OpenBLAS picks unaided on this CPU, asked in a child process (a library
    chooses once, when it loads), or None where it does not load there."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    try:
        done = subprocess.run([sys.executable, "-S", "-I", "-c", _PROBE, LIBRARY], env=env,
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


@functools.lru_cache(maxsize=1)
def choice() -> tuple[str, str] | None:
    """The kernels OpenBLAS picks unaided on this CPU and the ones this module loads
    instead, or None where it leaves the choice to the library (or to the user's
    ``OPENBLAS_CORETYPE``). Loads nothing into this process."""
    flags = cpu_features()
    if "OPENBLAS_CORETYPE" in os.environ or not cpu_level(flags):
        return None
    unaided = _probe()
    core = unaided and better_kernels(unaided, flags)
    return (unaided, core) if core else None


#: the library loaded with the chosen kernels, kept so that it stays loaded
_library: ctypes.CDLL | None = None


@functools.lru_cache(maxsize=1)
def match_kernels() -> None:
    """Load OpenBLAS with the kernels ``choice`` names, unless this process has loaded
    the library already (see the module's docstring)."""
    global _library
    if _already_loaded() or (chosen := choice()) is None:
        return
    unaided, core = chosen
    os.environ["OPENBLAS_CORETYPE"] = core
    try:
        _library = ctypes.CDLL(LIBRARY, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return
    finally:
        del os.environ["OPENBLAS_CORETYPE"]
    LOGGER.debug("OpenBLAS picks its %s kernels on this CPU; loaded with its %s kernels "
                "(OPENBLAS_CORETYPE chooses others)", unaided, core)
