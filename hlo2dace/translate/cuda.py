"""The cuda target's translators: a rule per op family, as JAX registers lowerings per
platform.

The families whose translators emit maps, tasklets and library nodes that DaCe places on
the GPU (``sdfg_passes/device.py``) register their CPU translators for the cuda target as
they are; the families that call host libraries register a translator that raises an
``UnsupportedError`` saying why and what runs instead. Elementwise ops have one rule for
every target already (``registry.register_elementwise``).
"""

from __future__ import annotations

from typing import Callable

from . import registry

#: families whose CPU translators also lower for the device
DEVICE_FAMILIES = ("control", "convolution", "custom_call", "elementwise", "indexing",
                   "linalg", "reduction", "rng", "shape", "sorting")

#: families that run on the host only -> why, on the cuda target
HOST_FAMILIES = {
    "collectives": "collectives and sharded programs run as MPI jobs on the CPU target "
                   "(NCCL is not used yet)",
    "fft": "FFTs call FFTW on the host (cuFFT is not used yet)",
    "lapack": "LAPACK runs on the host (cuSOLVER is not used yet)",
    "matvec": "paired matrix-vector products are the CPU's kernel (pair_matvecs)",
}

TARGET = "cuda"


def _refusal(reason: str) -> Callable:
    def refuse(b, op):
        raise b.unsupported(f"not supported on the {TARGET} target: {reason}",
                            ["the cpu target (hlo2dace.jit(f, target='cpu'))",
                             "docs/gpu.md lists what runs on the GPU"])
    return refuse


def register_rules() -> None:
    """Register the cuda target's translator of every op a family registered for the
    CPU (run once, after every family is imported). A family with no rule here gets none:
    its ops are the registry's "no translator for this op on the cuda target" error, and
    ``tests/test_cuda_compile.py`` fails until the family is given a rule."""
    for name in registry.supported_ops("cpu"):
        found = registry.record(name)
        translate = found.translator("cpu")
        if translate is None or found.translator(TARGET) is not None:
            continue
        if found.family in HOST_FAMILIES:
            translate = _refusal(HOST_FAMILIES[found.family])
        elif found.family not in DEVICE_FAMILIES:
            continue
        registry.register(name, target=TARGET)(translate)
