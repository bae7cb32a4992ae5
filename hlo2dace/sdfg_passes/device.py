"""The cuda target's placement of an SDFG on the GPU: DaCe's own GPU transformation, after
a check that every tasklet's C++ can run on the device.

The translators' tasklets call the helpers of ``include/h2d`` (compiled for host and
device, ``H2D_FN``); a few call host libraries instead (a BLAS call where no cuBLAS node
computes the product, LAPACK, FFTW, MPI, the C++ library's sorts and heaps, OpenMP). Those
would be compiler errors inside a kernel: ``check_device_code`` turns them into an
``UnsupportedError`` that names the op (from the tasklet's ``// op`` comment) and what the
cuda target supports instead.
"""

from __future__ import annotations

import re

import dace

from ..errors import UnsupportedError
from ..plan.passes import PassContext
from ..translate.emitter import OP_COMMENT

#: C++ in a tasklet that only the host runs -> why, and what the cuda target supports
HOST_ONLY = (
    ("cblas_", "a product or convolution computed by BLAS calls in C++ (a batched, "
     "scaled, converted or strided product that no cuBLAS node takes; a floating-point "
     "convolution)",
     "f32/f64 products whose operands cuBLAS reads directly (a Gemm, Gemv or Dot node), "
     "products and convolutions of integer types (loops)"),
    ("LAPACKE_", "LAPACK runs on the host (cuSOLVER is not used yet)", None),
    ("h2d::lapack::", "LAPACK runs on the host (cuSOLVER is not used yet)", None),
    ("fftw", "FFTW runs on the host (cuFFT is not used yet)", None),
    ("h2d::fft::", "FFTW runs on the host (cuFFT is not used yet)", None),
    ("MPI_", "MPI collectives run on the host (NCCL is not used yet)", None),
    ("#pragma omp", "an OpenMP loop inside the op's code (the host's threads)", None),
    ("omp_get_", "an OpenMP loop inside the op's code (the host's threads)", None),
    ("std::sort", "the C++ library's sort runs on the host (CUB's is not used yet)", None),
    ("std::stable_sort", "the C++ library's sort runs on the host (CUB's is not used yet)",
     None),
    ("_heap(", "the C++ library's heaps run on the host (a sort's prefix)", None),
    ("std::vector", "a heap-allocated buffer inside the op's code", None),
    ("h2d::rng::next_stream", "stablehlo.rng's stream counter is the host's (a counter on "
     "the device is not written yet)", "jax.random's counter-based generators"),
)

#: what every op family that runs on the device needs: the answer of an error
DEVICE_SUPPORT = ("elementwise ops of real and integer types", "shapes", "reductions",
                  "gathers and scatters", "while/case/if", "f32/f64 products (cuBLAS)",
                  "products of other real types (loops)")

_OP = re.compile(re.escape(OP_COMMENT) + r"(\S+)(?: @ (\S+))?")


def loop_counters_as_symbols(sdfg: dace.SDFG) -> None:
    """Declare every loop's counter as a symbol of its SDFG (int64, which holds the i32
    counters too). DaCe finds the symbols a C++ tasklet reads among the declared ones
    only: on the CPU a counter is a variable of the function around the tasklet either
    way, but a GPU kernel is a function of its own and receives only the symbols its
    scope is found to read (a ``fori_loop`` body's tasklet that reads the counter)."""
    for region in sdfg.all_control_flow_regions(recursive=True):
        if isinstance(region, dace.sdfg.state.LoopRegion) and region.loop_variable \
                and region.loop_variable not in region.sdfg.symbols:
            region.sdfg.add_symbol(region.loop_variable, dace.int64)


def host_only_code(code: str) -> tuple[str, str, str | None] | None:
    """The first host-only construct in ``code``: (marker, why, what is supported)."""
    for marker, reason, supported in HOST_ONLY:
        if marker in code:
            return marker, reason, supported
    return None


#: complex numbers: the helpers compute them with ``std::complex``, host code to nvcc
COMPLEX = ("complex numbers (the helpers compute them with std::complex, which nvcc "
           "compiles for the host only)", None)


def _reads_complex(node: dace.nodes.Tasklet, state) -> bool:
    arrays = state.sdfg.arrays
    return any(e.data.data in arrays and arrays[e.data.data].dtype in
               (dace.complex64, dace.complex128)
               for e in (*state.in_edges(node), *state.out_edges(node)))


def check_device_code(sdfg: dace.SDFG) -> None:
    """Raise ``UnsupportedError`` for the first tasklet whose C++ runs on the host only,
    or that computes with complex numbers, naming its op and source line."""
    for node, state in sdfg.all_nodes_recursive():
        if not isinstance(node, dace.nodes.Tasklet):
            continue
        code = node.code.as_string if node.code is not None else ""
        found = host_only_code(code)
        if found is None and _reads_complex(node, state):
            found = ("", *COMPLEX)
        if found is None:
            continue
        _, reason, supported = found
        match = _OP.search(code)
        op = match.group(1) if match else node.label
        raise UnsupportedError(op, f"not supported on the cuda target: {reason}",
                               match.group(2) if match and match.group(2) else None,
                               [supported] if supported else list(DEVICE_SUPPORT))


def unaccessed_arrays_on_the_host(sdfg: dace.SDFG) -> None:
    """Give a persistent transient that no access node reads or writes (an empty index
    array of a scatter whose indices are all static) the host's heap as its storage: DaCe's
    code generation gives such an array of the default storage a register, which its
    validation refuses for a persistent one."""
    for nested in sdfg.all_sdfgs_recursive():
        accessed = {n.data for state in nested.states() for n in state.data_nodes()}
        for name, array in nested.arrays.items():
            if array.transient and name not in accessed \
                    and array.lifetime == dace.AllocationLifetime.Persistent \
                    and array.storage == dace.StorageType.Default:
                array.storage = dace.StorageType.CPU_Heap


def helpers_for_device(sdfg: dace.SDFG) -> None:
    """The CUDA file includes the helpers its kernels call, as the C++ files do (those
    through the precompiled prelude and the ``#include "h2d/..."`` lines of the frame's
    global code)."""
    lines = ['#include "h2d/ops.h"']
    frame = sdfg.global_code["frame"].as_string if "frame" in sdfg.global_code else ""
    lines += [line for line in frame.splitlines() if line.startswith('#include "h2d/')]
    present = sdfg.global_code["cuda"].as_string if "cuda" in sdfg.global_code else ""
    missing = [line for line in dict.fromkeys(lines) if line not in present]
    if missing:
        sdfg.append_global_code("\n".join(missing) + "\n", "cuda")


def to_device(sdfg: dace.SDFG, context: PassContext) -> None:
    """Check the tasklets (``check_device_code``), then DaCe's GPU transformation: the
    arrays in GPU memory, copies in and out, maps as ``GPU_Device`` kernels, the library
    nodes scheduled on the device (their cuBLAS implementations chosen when made,
    ``translate/library.py``)."""
    check_device_code(sdfg)
    helpers_for_device(sdfg)
    unaccessed_arrays_on_the_host(sdfg)
    loop_counters_as_symbols(sdfg)
    # without DaCe's simplify, which the CPU target does not run either (its dead
    # dataflow elimination fails on hlo2dace's tasklets without outputs)
    sdfg.apply_gpu_transformations(simplify=False)
