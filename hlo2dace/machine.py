"""The machine model: what the generated code's speed depends on, read from the machine
once, and every tuning threshold derived from it with the reason beside it.

A threshold that decides how fast code runs (which product kernel, how large a block,
when a loop is parallel) comes from here, never from a constant in a translator or a pass:
a machine with other caches, another vector width or more cores gets other decisions.
The model is part of a binary's cache key, and ``hlo2dace.jit(f, machine=...)`` builds for
a model other than this machine's (for a cluster's nodes, or to see what moves).

What is read (``Machine.of_this_machine``):

* ``threads``: the threads compiled code shares its work among where it fixes the
  partition when it is built (``OMP_NUM_THREADS``, else the CPUs this process may use);
* the caches of one core (L1 data, L2) and the last level, and the cache line, from
  Linux's sysfs (``/sys/devices/system/cpu/cpu0/cache``), else typical sizes;
* ``vector_bytes``: the widest vector of the ``-march`` target the code is built for
  (``optimize.target_isa``), as GCC reports it for that target;
* ``blas``: whether OpenBLAS (with ``cblas.h``) is there to call.

Thresholds that are measured costs rather than sizes (an OpenMP region's cost, BLAS's
per-call cost) are constants of the model, each with where it was measured; thresholds
that decide the order of a sum (reduction lanes and blocks) are not here: they are
semantics, the same on every machine, so that results never depend on the machine beyond
the stated ULP bounds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .optimize import shared_threads, target_isa

#: what the model assumes where sysfs does not say (a recent x86-64 server core)
TYPICAL_CACHES = {"l1_bytes": 32 << 10, "l2_bytes": 1 << 20, "l3_bytes": 32 << 20,
                  "line_bytes": 64, "l1_ways": 8}

#: an OpenMP parallel region costs about as much as this many simple element operations
#: (a wake-up of every worker; measured on a 2-core Zen 4 VM, idle): maps doing less work
#: run on one thread
PARALLEL_REGION_OPS = 1 << 15
#: a parallel map's first loop gets at least this many iterations per thread (OpenMP's
#: static schedule shares out only that loop); no more are collapsed into it, since a
#: collapsed loop recomputes its indices (NPBench's heat_3d, 9% slower collapsed to 529)
ITERATIONS_PER_THREAD = 8
#: multiply-adds per batch element up to which the loop kernel beats a BLAS call (BLAS's
#: per-call packing and dispatch; measured on a 2-core Zen 4 VM, OpenBLAS 0.3.21, one
#: thread: f32 8x8x8 0.12 against 0.16 us, 16x16x16 0.39 against 0.37, a 32x32
#: matrix-vector product 0.26 against 0.19)
SMALL_PRODUCT = 512
#: the same for a convolution's loop nest against im2col and BLAS
SMALL_CONVOLUTION = 4096
#: convolution groups with fewer input times output features than this (depthwise
#: convolutions) run as the loop nest: GEMMs with so few columns and so short rows run far
#: below peak
NARROW_GROUPS = 16
#: multiply-adds below which a product's loop kernel runs on one thread
PARALLEL_PRODUCT_WORK = 1 << 22
#: a product with a side at most this short and ``PARALLEL_PRODUCT_WORK`` multiply-adds is
#: shared out among the threads in blocks of the long side (OpenBLAS does not share such a
#: product out: NPBench's mlp at M took as long on two cores as on one); each block at least
#: SKINNY_PART long, its edges on multiples of SKINNY_BLOCK
SKINNY_SIDE = 32
SKINNY_PART = 512
SKINNY_BLOCK = 64
#: a product of at most this many rows (and with a vector unit of 64 bytes: AVX-512) is
#: computed in registers from B's rows where they lie (``few_rows``), not by OpenBLAS, which
#: packs B on every call (f32 on a Zen 4 core: 8x1024x1024 0.17 ms against 0.50, 32x320x1024
#: 0.19 against 0.30, 64x256x256 0.074 against 0.087; at 128 rows they were even). With AVX2
#: (measured as x86-64-v3 on the same core) it lost at 8 rows and more: not chosen.
FEW_ROWS = 64
#: multiply-adds up to which a complex product runs in XLA's (Eigen's) order, above which
#: OpenBLAS's speed wins
EIGEN_ORDER_WORK = 1 << 22
#: a map computes at least this many ops per element for each operand it would gather once
#: its short rows run as one loop: below, the gathers cost more than the rows' scalar
#: remainders (a broadcast add 1.5x slower; pyhpc's equation of state 19% faster)
GATHER_OPS = 16
#: reductions with fewer outputs than this split their reduced elements into chunks (one
#: loop each, shared out among the threads), and are not reduced row by row by their readers
FEW_OUTPUTS = 64
#: innermost loops of at most this many iterations (a 256-bit vector of doubles) are run
#: outside the loop around them where that one is long (pyhpc's isoneutral at 4,096 points,
#: rows of 3: 0.70 -> 0.54 ms; rows of 7 and 10: no change)
TINY_ROW = 4


@dataclass(frozen=True)
class Machine:
    """What generated code's speed depends on (see the module's docstring)."""

    threads: int
    l1_bytes: int
    l2_bytes: int
    l3_bytes: int
    line_bytes: int
    vector_bytes: int
    blas: str  #: "OpenBLAS", or "none"
    l1_ways: int = TYPICAL_CACHES["l1_ways"]  #: the L1 data cache's associativity

    @classmethod
    def of_this_machine(cls) -> Machine:
        """This machine, building for ``optimize.target_isa()`` with the threads this
        process may use (read once per process and setting)."""
        return _read(shared_threads(), target_isa())

    def key(self) -> str:
        """The model as part of a cache key."""
        return repr(dataclasses.astuple(self))

    def describe(self) -> str:
        return (f"{self.threads} thread{'s' * (self.threads != 1)}, L1d "
                f"{self.l1_bytes >> 10} KiB, L2 {self.l2_bytes >> 10} KiB, L3 "
                f"{self.l3_bytes >> 20} MiB, {self.line_bytes}-byte lines, "
                f"{self.l1_ways}-way L1d, "
                f"{self.vector_bytes * 8}-bit vectors, BLAS: {self.blas}")

    # ------------------------------------------------------------------ threads
    @property
    def parallel_iterations(self) -> int:
        """The iterations a parallel map's first loop needs (``ITERATIONS_PER_THREAD``
        per thread)."""
        return ITERATIONS_PER_THREAD * self.threads

    # ------------------------------------------------------------------ products
    @property
    def register_block_bytes(self) -> int:
        """Bytes of a result row the loop kernel keeps in registers: four vectors."""
        return 4 * self.vector_bytes

    @property
    def matvec_pass_bytes(self) -> int:
        """A matrix this large (twice a core's L2) does not stay in cache between two
        matrix-vector products that read it: they read it in one pass, and a computed one
        is never written whole (``plan/matvec.py``)."""
        return 2 * self.l2_bytes

    @property
    def matvec_block_bytes(self) -> int:
        """The rows of such a pass that both products read in turn, or that a computed
        matrix's buffer holds: half a core's L2, the rest left to the vectors."""
        return self.l2_bytes // 2

    def few_rows_bytes(self) -> int:
        """A few-rows product reads B once per strip of columns: B at most half the
        last-level cache, or it comes from memory with a stride of a row (8x4096x4096 in
        f32, 64 MB: 16.5 ms against OpenBLAS's 10.5)."""
        return self.l3_bytes // 2

    def eigen_depth(self, element: str) -> int:
        """Eigen's depth block (its ``kc``) for a complex product of ``element``, as
        Eigen computes it from this machine's L1 data cache (``(L1 - 256) / (96 or 128)``
        rounded down to a multiple of 8): XLA's CPU products sum a longer contraction in
        blocks of it, so the order, and so the bits, of XLA's results follow the L1."""
        per_depth = {"complex<f32>": 96, "complex<f64>": 128}[element]
        return (self.l1_bytes - 256) // per_depth // 8 * 8

    # ------------------------------------------------------------------ loops
    @property
    def transpose_bytes(self) -> int:
        """A map that moves along an array this large (a quarter of L2) by another
        dimension than its innermost one runs in tiles: the lines it crosses no longer
        stay in cache until it comes back to them."""
        return self.l2_bytes // 4

    @property
    def transpose_tile(self) -> int:
        """The edge of a transposing map's tiles, in elements: the L1's ways, so that the
        lines a tile reads across (one per element of its edge) fit in one set of the L1
        even when the array's rows are a multiple of the set's span apart (a row of 1,024
        floats, 4 KiB, on an 8-way 32 KiB L1) and all fall in that set. Measured on this
        Zen 4 (8 ways), ``x.T * 2`` for float32/float64 at 512, 960, 1,024 and 2,048 rows:
        8 against 16 (two lines of doubles, the edge before) took 0.23 to 0.88 of the time,
        but 1.17 for float64 at 2,048; jnp.linalg.solve's transposing copies of 1,024 x 1,024
        floats, 3.6 -> 0.8 ms each."""
        return self.l1_ways

    @property
    def short_row(self) -> int:
        """An innermost loop shorter than eight vectors of doubles runs merged with the
        loop around it: GCC leaves the remainder of a vector loop scalar, which in short
        rows is a large part of them (pyhpc's rows of 26: 2 of 26 elements took as long as
        the 24 others)."""
        return self.vector_bytes

    @property
    def tiny_row(self) -> int:
        """An innermost loop of at most this many iterations (``TINY_ROW``) runs outside
        the loop around it where that one is ``long_row`` or longer."""
        return TINY_ROW

    @property
    def long_row(self) -> int:
        """Two vectors of doubles: a loop this long vectorises with strided accesses."""
        return 2 * self.vector_bytes // 8

    @property
    def gather_ops(self) -> int:
        return GATHER_OPS

    @property
    def split_copy_bytes(self) -> int:
        """A copy smaller than two L1 caches is one map at cache speed, not pieces."""
        return 2 * self.l1_bytes

    @property
    def row_buffer_bytes(self) -> int:
        """A row buffer of a fused row reduction (on an OpenMP thread's stack) holds at
        most one L1 cache."""
        return self.l1_bytes

    @property
    def max_fused_row(self) -> int:
        """Rows longer than this many elements (an eighth of L2 in doubles) are not
        reduced in the map that reads them: its loops over one row read the row again,
        from cache only while it fits."""
        return self.l2_bytes // 64

    @property
    def atomic_min_bytes(self) -> int:
        """Order-free scatter updates run in parallel with atomics only into results
        larger than a core's L2, where they rarely meet; one thread updates a cached
        result faster."""
        return self.l2_bytes

    @property
    def patch_elements(self) -> int:
        """Elements of the patch matrix one convolution GEMM multiplies: a core's L2 of
        doubles, large enough for BLAS's full speed, small enough to stay in cache."""
        return self.l2_bytes // 8

    @property
    def swap_elements(self) -> int:
        """Carried values of at least this many elements (an eighth of L2 in doubles)
        alternate between two buffers in counted loops instead of being copied back: below,
        a copy per iteration costs less than a second copy of the body's code."""
        return self.l2_bytes // 64


@functools.cache
def _read(threads: int, isa: str) -> Machine:
    caches = {**TYPICAL_CACHES, **_sysfs_caches()}
    return Machine(threads, caches["l1_bytes"], caches["l2_bytes"], caches["l3_bytes"],
                   caches["line_bytes"], _vector_bytes(isa), _blas(), caches["l1_ways"])


def _sysfs_caches() -> dict[str, int]:
    """The caches of CPU 0 as Linux's sysfs lists them (only those it lists)."""
    found = {}
    for folder in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            level = int(Path(folder, "level").read_text())
            kind = Path(folder, "type").read_text().strip()
            size = _bytes(Path(folder, "size").read_text().strip())
            line = int(Path(folder, "coherency_line_size").read_text())
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or size is None:
            continue
        found["line_bytes"] = line
        if level == 1:  # 0 where the VM does not say
            with contextlib.suppress(OSError, ValueError):
                found["l1_ways"] = int(Path(folder, "ways_of_associativity").read_text()) \
                    or TYPICAL_CACHES["l1_ways"]
        key = {1: "l1_bytes", 2: "l2_bytes"}.get(level, "l3_bytes")
        found[key] = max(found.get(key, 0), size) if key == "l3_bytes" else size
    return found


def _bytes(text: str) -> int | None:
    match = re.fullmatch(r"(\d+)([KMG]?)", text)
    if match is None:
        return None
    return int(match.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[match.group(2)]


def _vector_bytes(isa: str) -> int:
    """The widest vector registers GCC uses for ``-march=isa`` (AVX-512: 64 bytes)."""
    try:
        macros = subprocess.run(["gcc", f"-march={isa}", "-dM", "-E", "-x", "c", "-"],
                                input="", capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        macros = ""
    if "__AVX512F__" in macros:
        return 64
    if "__AVX__" in macros:
        return 32
    return 16


def _blas() -> str:
    """``OpenBLAS`` when its library and ``cblas.h`` are installed (as DaCe's OpenBLAS
    environment finds them), else ``none``."""
    from dace.libraries.blas.environments.openblas import OpenBLAS

    headers = glob.glob("/usr/include/cblas.h") + glob.glob("/usr/include/*/cblas.h")
    return "OpenBLAS" if OpenBLAS.is_installed() and headers else "none"


#: the model that ``current_machine`` gives instead of this machine's (``assumed``)
_assumed: list[Machine] = []


def current_machine() -> Machine:
    """The model programs are tuned for unless they name one: this machine's
    (``Machine.of_this_machine``), or the one ``assumed`` gives."""
    return _assumed[-1] if _assumed else Machine.of_this_machine()


@contextlib.contextmanager
def assumed(model: Machine) -> Iterator[Machine]:
    """Within the ``with`` block, programs that name no machine are tuned for ``model``
    (to see which decisions move with the machine, or to build for other nodes)."""
    _assumed.append(model)
    try:
        yield model
    finally:
        _assumed.pop()

