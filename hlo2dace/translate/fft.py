"""Fourier transforms: ``stablehlo.fft`` (FFT, IFFT, RFFT, IRFFT over the trailing one to
three dimensions, any lengths, f32/f64 and their complex types, batched over the leading
dimensions), as ``jnp.fft`` emits them.

Each op is one tasklet that calls FFTW (Debian's libfftw3-dev) through h2d/fft.h, one
dimension at a time as XLA's CPU runtime (ducc0) does: the inverse transforms are scaled
by 1/n, and a multi-dimensional IRFFT is complex transforms over all but the last
dimension followed by complex-to-real ones along it, so an input that is not Hermitian
gives XLA's result. Results agree with XLA's to a few ULP of the largest magnitude times
log2(n) (different FFT algorithms round differently). A complex transform of a whole
array is DaCe's FFT or IFFT node (``library.fft_node``), expanded into this code on the
CPU; DaCe's own expansion is a naive O(n^2) DFT."""

from __future__ import annotations

import functools
import math

from .. import ir
from ..prelude import include
from . import library
from .bindings import Binding
from .builder import Builder
from .custom_call import call_tasklet, installed, link_environment
from .registry import register

HEADER = include("fft.h")


Fftw = link_environment("Fftw", ["fftw3f_omp", "fftw3_omp", "fftw3f", "fftw3"], __name__,
                        "Links FFTW, single and double precision, with its OpenMP threads.")


@functools.cache
def fftw_installed() -> bool:
    """FFTW's header and libraries (Debian's libfftw3-dev)."""
    return installed([["/usr/include/fftw3.h"]], Fftw.cmake_libraries)


@register("stablehlo.fft")
def fft(b: Builder, op: ir.Op) -> list[Binding]:
    """The verifier has checked the types and shapes; an empty operand has an empty result."""
    (operand,), result = op.operands, op.result
    kind = str(op.attr("fft_type"))
    lengths = [int(n) for n in op.attr("fft_length")]
    target = b.allocate_result(result)
    if result.type.size == 0:
        return [target]
    if not fftw_installed():
        raise b.unsupported("FFTW is not installed: install Debian's libfftw3-dev "
                            "(make does so when run as root)")
    if library.fft_node(b.emit, b.target, kind, lengths, b.array(operand), target):
        return [target]
    b.emit.include_once(HEADER)
    outputs = [target]
    scratch = "nullptr"
    if kind == "IRFFT":
        outputs.append(b.emit.add_array("irfft_scratch", operand.type))
        scratch = "{out1}"
    real_type = "float" if "f32" in operand.type.element else "double"
    batch = math.prod(operand.type.shape[:-len(lengths)])
    dims = "{{" + ", ".join(map(str, lengths)) + "}}"  # braces doubled for call_tasklet
    code = (f"h2d::fft::run<{real_type}>(h2d::fft::{kind}, {dims}, {batch}, {{in0}}, "
            f"{{out0}}, {scratch});")
    call_tasklet(b, "fft", code, [b.array(operand)], outputs, [Fftw.full_class_path()])
    return [target]
