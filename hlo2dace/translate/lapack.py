"""LAPACK: the custom calls JAX emits for ``jnp.linalg``, ``jax.scipy.linalg`` and
``lax.linalg`` on the CPU (``lapack_?xxxx_ffi``, for f32, f64, complex64 and complex128, with
leading batch dimensions), and the ``stablehlo.cholesky`` and ``stablehlo.triangular_solve``
ops.

Each target runs a port of jaxlib's kernel (h2d/lapack.h) in one tasklet: the same LAPACK
routine on the same column-major buffers with the same workspace sizes, so the results,
pivots, info values and the contents of unused triangles are XLA's (JAX's own code around
the call then replaces failed factorisations with NaNs, as under XLA). potrf is the
exception: its factor of the other triangle on the row-major buffers is the same matrix,
up to rounding, without transposing it twice; unbatched and real, it is DaCe's Potrf node
(``library.potrf_node``), expanded into that same call on the CPU. The program links
Debian's LAPACK and BLAS (OpenBLAS) through the ``Lapack`` environment below."""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Sequence

import dace
import dace.library
from dace.libraries.lapack import Potrf
from dace.transformation.transformation import ExpandTransformation

from .. import ir
from ..prelude import include
from . import dtypes, library
from .bindings import Array, Binding
from .builder import Builder
from .custom_call import (
    CustomCall,
    call_tasklet,
    installed,
    link_environment,
    physical_operands,
    physical_results,
    register_target,
)
from .emitter import Element
from .registry import register

HEADER = include("lapack.h")

#: LAPACK's type letters
ELEMENTS = {"s": "f32", "d": "f64", "c": "complex<f32>", "z": "complex<f64>"}
REAL = {"s": "f32", "d": "f64", "c": "f32", "z": "f64"}
COMPLEX = {"s": "complex<f32>", "d": "complex<f64>"}
I32 = "i32"


Lapack = link_environment(
    "Lapack", ["lapack", "blas"], __name__,
    "Links LAPACK and BLAS (Debian's OpenBLAS: liblapack and libblas) into a program whose "
    "tasklets call them; h2d/lapack.h includes the headers.")


@functools.cache
def lapack_installed() -> bool:
    """LAPACK, BLAS and their C headers (Debian's libopenblas-dev and liblapacke-dev)."""
    return installed([["/usr/include/cblas.h", "/usr/include/*/cblas.h"],
                      ["/usr/include/lapack.h", "/usr/include/*/lapack.h"]],
                     Lapack.cmake_libraries)


def _use_lapack(b: Builder) -> list[str]:
    """Make the program able to call LAPACK; returns the tasklet environments to set."""
    if not lapack_installed():
        raise b.unsupported("LAPACK is not installed: install Debian's libopenblas-dev and "
                            "liblapacke-dev (make does so when run as root)")
    b.emit.include_once(HEADER)
    return [Lapack.full_class_path()]


def _names(routine: str, complex_routine: str | None = None) -> list[str]:
    return [f"lapack_{p}{complex_routine if complex_routine and p in 'cz' else routine}_ffi"
            for p in ELEMENTS]


def _letter(call: CustomCall) -> str:
    return call.target[len("lapack_")]


def _check(b: Builder, what: str, values: Sequence[ir.Value], expected) -> None:
    """Each value's type must be ``expected`` (shape, element), or the call is unsupported."""
    if len(values) != len(expected):
        raise b.unsupported(f"{len(values)} {what}s ({len(expected)} expected)")
    for i, (value, (shape, element)) in enumerate(zip(values, expected)):
        want = ir.TensorType(tuple(shape), element)
        if value.type != want:
            raise b.unsupported(f"{what} {i} of type {value.type} ({want} expected)")


def _matrix(b: Builder, call: CustomCall, index: int = 0, rank: int = 2):
    """Operand ``index`` as (batch dimensions, its last ``rank`` dimensions)."""
    operands = call.op.operands
    t = operands[index].type if index < len(operands) else None
    if not isinstance(t, ir.TensorType) or t.rank < rank or not t.is_static:
        raise b.unsupported(f"{call.target}: operand {index} of type {t} (a static tensor of "
                            f"rank {rank} or more is needed)")
    return tuple(t.shape[:-rank]), tuple(t.shape[-rank:])


def _kernel(b: Builder, kernel: str, element: dtypes.ElementType, arguments: Sequence,
            inputs: Sequence[Array], outputs: Sequence[Array]) -> None:
    """One tasklet calling ``h2d::lapack::<kernel><T>`` with ``arguments`` (dimensions,
    attributes: ints, bools and characters), then the inputs' and outputs' buffers."""
    environments = _use_lapack(b)
    literals = [f"'{a}'" if isinstance(a, str) else str(a).lower() if isinstance(a, bool)
                else str(a) for a in arguments]
    pointers = ([f"{{in{i}}}" for i in range(len(inputs))]
                + [f"{{out{i}}}" for i in range(len(outputs))])
    code = f"h2d::lapack::{kernel}<{element.compute}>({', '.join(literals + pointers)});"
    call_tasklet(b, kernel, code, inputs, outputs, environments)


def _emit(b: Builder, call: CustomCall, kernel: str, arguments: Sequence) -> list[Binding]:
    """The custom call as ``kernel`` with ``arguments``, every operand's buffer and every
    result's buffer, in the call's layouts."""
    buffers, results = physical_results(b, call)
    _kernel(b, kernel, dtypes.of(call.op.operands[0].type), arguments,
            physical_operands(b, call), buffers)
    return results


# ------------------------------------------------------------------------ targets


@register_target(*_names("trsm"))
def trsm(b: Builder, call: CustomCall) -> list[Binding]:
    p = _letter(call)
    batch, (m, n) = _matrix(b, call, 1)
    side = call.char(b, "side", "LR")
    k = m if side == "L" else n
    _check(b, "operand", call.op.operands, [(batch + (k, k), ELEMENTS[p]),
                                            (batch + (m, n), ELEMENTS[p])])
    _check(b, "result", call.op.results, [(batch + (m, n), ELEMENTS[p])])
    return _emit(b, call, "trsm_ffi", [math.prod(batch), m, n, side, call.char(b, "uplo", "LU"),
                                call.char(b, "trans_x", "NTC"), call.char(b, "diag", "NU")])


@register_target(*_names("getrf"))
def getrf(b: Builder, call: CustomCall) -> list[Binding]:
    p = _letter(call)
    batch, (m, n) = _matrix(b, call)
    _check(b, "operand", call.op.operands, [(batch + (m, n), ELEMENTS[p])])
    _check(b, "result", call.op.results, [(batch + (m, n), ELEMENTS[p]),
                                          (batch + (min(m, n),), I32), (batch, I32)])
    return _emit(b, call, "getrf_ffi", [math.prod(batch), m, n])


@register_target(*_names("geqrf"))
def geqrf(b: Builder, call: CustomCall) -> list[Binding]:
    p = _letter(call)
    batch, (m, n) = _matrix(b, call)
    _check(b, "operand", call.op.operands, [(batch + (m, n), ELEMENTS[p])])
    _check(b, "result", call.op.results, [(batch + (m, n), ELEMENTS[p]),
                                          (batch + (min(m, n),), ELEMENTS[p])])
    return _emit(b, call, "geqrf_ffi", [math.prod(batch), m, n])


@register_target(*_names("geqp3"))
def geqp3(b: Builder, call: CustomCall) -> list[Binding]:
    p = _letter(call)
    batch, (m, n) = _matrix(b, call)
    _check(b, "operand", call.op.operands, [(batch + (m, n), ELEMENTS[p]),
                                            (batch + (n,), I32)])
    _check(b, "result", call.op.results, [(batch + (m, n), ELEMENTS[p]), (batch + (n,), I32),
                                          (batch + (min(m, n),), ELEMENTS[p])])
    return _emit(b, call, "geqp3_ffi", [math.prod(batch), m, n])


@register_target(*_names("orgqr", "ungqr"))
def orgqr(b: Builder, call: CustomCall) -> list[Binding]:
    p = _letter(call)
    batch, (m, n) = _matrix(b, call)
    _, (k,) = _matrix(b, call, 1, rank=1)
    _check(b, "operand", call.op.operands, [(batch + (m, n), ELEMENTS[p]),
                                            (batch + (k,), ELEMENTS[p])])
    _check(b, "result", call.op.results, [(batch + (m, n), ELEMENTS[p])])
    return _emit(b, call, "orgqr_ffi", [math.prod(batch), m, n, k])


@register_target(*_names("ormqr", "unmqr"))
def ormqr(b: Builder, call: CustomCall) -> list[Binding]:
    p = _letter(call)
    batch, (a_rows, a_cols) = _matrix(b, call)
    _, (k,) = _matrix(b, call, 1, rank=1)
    _, (m, n) = _matrix(b, call, 2)
    left = call.value(b, "left", bool)
    _check(b, "operand", call.op.operands, [(batch + (a_rows, a_cols), ELEMENTS[p]),
                                            (batch + (k,), ELEMENTS[p]),
                                            (batch + (m, n), ELEMENTS[p])])
    _check(b, "result", call.op.results, [(batch + (m, n), ELEMENTS[p])])
    if a_rows != (m if left else n) or k > min(a_rows, a_cols):
        raise b.unsupported(f"{call.target}: reflectors of shape {(a_rows, a_cols)} and {k} "
                            f"taus for a {m}x{n} matrix multiplied from the "
                            f"{'left' if left else 'right'}")
    return _emit(b, call, "ormqr_ffi", [math.prod(batch), a_rows, a_cols, m, n, k, left,
                                 call.value(b, "transpose", bool)])


@register_target(*_names("potrf"))
def potrf(b: Builder, call: CustomCall) -> list[Binding]:
    p = _letter(call)
    batch, (n, _) = _matrix(b, call)
    _check(b, "operand", call.op.operands, [(batch + (n, n), ELEMENTS[p])])
    _check(b, "result", call.op.results, [(batch + (n, n), ELEMENTS[p]), (batch, I32)])
    uplo = call.char(b, "uplo", "LU")
    if _transposed(call.operand_layouts[0]) and _transposed(call.result_layouts[0]):
        # A column-major buffer read row-major holds the transpose, and the factor of the
        # transposed triangle is the transpose of the other triangle's factor (the
        # conjugate's, for a Hermitian matrix, which the transpose also undoes). So LAPACK
        # factorises the row-major buffers with uplo swapped: the matrix is not copied into
        # column-major order, nor its factor read back transposed.
        row_major = tuple(range(len(batch) + 1, -1, -1))
        call = replace(call, operand_layouts=(row_major,),
                       result_layouts=(row_major, call.result_layouts[1]))
        uplo = "U" if uplo == "L" else "L"
        if not batch and library.factorises(b.emit, b.target, call.op.operands[0].type):
            # LAPACK's uplo triangle of the column-major view: the other one row-major
            return _as_potrf_node(b, call, lower=uplo == "U")
    return _emit(b, call, "potrf_ffi", [math.prod(batch), n, uplo])


def _as_potrf_node(b: Builder, call: CustomCall, lower: bool) -> list[Binding]:
    """An unbatched factorisation of row-major buffers as DaCe's Potrf node
    (``library.potrf_node``): the matrix copied into the factor's array, factorised there
    in the ``lower`` (or upper) triangle of the row-major matrix."""
    _use_lapack(b)  # the header its expansion calls
    (source,), (buffers, results) = physical_operands(b, call), physical_results(b, call)
    factor, info = buffers
    if not source.is_array(factor.name):
        b.emit.copy(source, factor)
    library.potrf_node(b.emit, b.target, factor, info, lower)
    return results


@dace.library.expansion
class ExpandPotrfAsJaxlib(ExpandTransformation):
    """A Potrf node as jaxlib's kernel (``h2d::lapack::potrf_ffi``) on its row-major
    array: LAPACK's routine for the other triangle of the column-major view, which is the
    node's triangle, and an ``info`` that flags a NaN pivot."""

    environments = [Lapack]

    @staticmethod
    def expansion(node: Potrf, parent_state: dace.SDFGState, parent_sdfg: dace.SDFG
                  ) -> dace.nodes.Tasklet:
        desc = parent_sdfg.arrays[parent_state.in_edges(node)[0].data.data]
        n, element = int(desc.shape[0]), desc.dtype.ctype
        code = (f"h2d::lapack::potrf_ffi<{element}>(1, {n}, '{'U' if node.lower else 'L'}', "
                "_xin, _xout, _res);")
        return dace.nodes.Tasklet(
            node.name, {"_xin": dace.pointer(desc.dtype)},
            {"_xout": dace.pointer(desc.dtype), "_res": dace.pointer(dace.int32)}, code,
            language=dace.Language.CPP)


Potrf.register_implementation(library.OWN, ExpandPotrfAsJaxlib)


def _transposed(layout: Sequence[int]) -> bool:
    """Whether a minor-to-major layout is row-major with the last two dimensions swapped:
    batches of column-major matrices, as JAX declares LAPACK's buffers."""
    rank = len(layout)
    return rank >= 2 and layout == (rank - 2, rank - 1, *range(rank - 3, -1, -1))


def _svd(b: Builder, call: CustomCall, kernel: str) -> list[Binding]:
    p = _letter(call)
    batch, (m, n) = _matrix(b, call)
    mode = call.char(b, "mode", "ASN")
    u_shape, vt_shape = call.op.results[2].type.shape[-2:], call.op.results[3].type.shape[-2:]
    if mode != "N":  # LAPACK writes U and Vt with leading dimensions m and Vt's rows
        k = m if mode == "A" else min(m, n)
        u_shape, vt_shape = (m, k), (n if mode == "A" else k, n)
    if len(u_shape) != 2 or len(vt_shape) != 2 or min(u_shape[0], vt_shape[0]) < 1:
        raise b.unsupported(f"{call.target}: U and Vt results of types "
                            f"{call.op.results[2].type} and {call.op.results[3].type}")
    _check(b, "operand", call.op.operands, [(batch + (m, n), ELEMENTS[p])])
    _check(b, "result", call.op.results, [(batch + (m, n), ELEMENTS[p]),
                                          (batch + (min(m, n),), REAL[p]),
                                          (batch + tuple(u_shape), ELEMENTS[p]),
                                          (batch + tuple(vt_shape), ELEMENTS[p]), (batch, I32)])
    return _emit(b, call, kernel, [math.prod(batch), m, n, *u_shape, *vt_shape, mode])


@register_target(*_names("gesdd"))
def gesdd(b: Builder, call: CustomCall) -> list[Binding]:
    return _svd(b, call, "gesdd_ffi")


@register_target(*_names("gesvd"))
def gesvd(b: Builder, call: CustomCall) -> list[Binding]:
    return _svd(b, call, "gesvd_ffi")


@register_target(*_names("syevd", "heevd"))
def syevd(b: Builder, call: CustomCall) -> list[Binding]:
    p = _letter(call)
    batch, (n, _) = _matrix(b, call)
    _check(b, "operand", call.op.operands, [(batch + (n, n), ELEMENTS[p])])
    _check(b, "result", call.op.results, [(batch + (n, n), ELEMENTS[p]),
                                          (batch + (n,), REAL[p]), (batch, I32)])
    return _emit(b, call, "syevd_ffi", [math.prod(batch), n, call.char(b, "mode", "NV"),
                                 call.char(b, "uplo", "LU")])


@register_target(*_names("geev"))
def geev(b: Builder, call: CustomCall) -> list[Binding]:
    p = _letter(call)
    batch, (n, _) = _matrix(b, call)
    _check(b, "operand", call.op.operands, [(batch + (n, n), ELEMENTS[p])])
    vectors = (batch + (n, n), COMPLEX.get(p, ELEMENTS[p]))
    values = [(batch + (n,), ELEMENTS[p])] * (2 if p in "sd" else 1)
    _check(b, "result", call.op.results, values + [vectors, vectors, (batch, I32)])
    return _emit(b, call, "geev_real_ffi" if p in "sd" else "geev_complex_ffi",
          [math.prod(batch), n, call.char(b, "compute_left", "NV"),
           call.char(b, "compute_right", "NV")])


@register_target(*_names("gees"))
def gees(b: Builder, call: CustomCall) -> list[Binding]:
    p = _letter(call)
    batch, (n, _) = _matrix(b, call)
    call.char(b, "sort", "N")  # jaxlib does not sort either (no select function)
    _check(b, "operand", call.op.operands, [(batch + (n, n), ELEMENTS[p])])
    values = [(batch + (n,), ELEMENTS[p])] * (2 if p in "sd" else 1)
    _check(b, "result", call.op.results, [(batch + (n, n), ELEMENTS[p])] * 2 + values
           + [(batch, I32), (batch, I32)])
    return _emit(b, call, "gees_real_ffi" if p in "sd" else "gees_complex_ffi",
          [math.prod(batch), n, call.char(b, "mode", "NV")])


def _square_matrix(b: Builder, call: CustomCall) -> tuple[tuple[int, ...], tuple[int, int]]:
    """``_matrix`` for the reductions that need a square, non-empty matrix."""
    batch, (m, n) = _matrix(b, call)
    if m != n or n < 1:
        raise b.unsupported(f"{call.target}: a {m}x{n} matrix (square, not empty, is needed)")
    return batch, (m, n)


@register_target(*_names("gehrd"))
def gehrd(b: Builder, call: CustomCall) -> list[Binding]:
    p = _letter(call)
    batch, (m, n) = _square_matrix(b, call)
    _check(b, "operand", call.op.operands, [(batch + (m, n), ELEMENTS[p])])
    _check(b, "result", call.op.results, [(batch + (m, n), ELEMENTS[p]),
                                          (batch + (n - 1,), ELEMENTS[p]), (batch, I32)])
    return _emit(b, call, "gehrd_ffi", [math.prod(batch), m, n, call.value(b, "low", int),
                                 call.value(b, "high", int)])


@register_target(*_names("sytrd", "hetrd"))
def sytrd(b: Builder, call: CustomCall) -> list[Binding]:
    p = _letter(call)
    batch, (m, n) = _square_matrix(b, call)
    _check(b, "operand", call.op.operands, [(batch + (m, n), ELEMENTS[p])])
    _check(b, "result", call.op.results, [(batch + (m, n), ELEMENTS[p]),
                                          (batch + (n,), REAL[p]), (batch + (n - 1,), REAL[p]),
                                          (batch + (n - 1,), ELEMENTS[p]), (batch, I32)])
    return _emit(b, call, "sytrd_ffi", [math.prod(batch), m, n, n - 1, call.char(b, "uplo", "LU")])


@register_target(*_names("gtsv"))
def gtsv(b: Builder, call: CustomCall) -> list[Binding]:
    p = _letter(call)
    batch, (m, nrhs) = _matrix(b, call, 3)
    diagonal = (batch + (m,), ELEMENTS[p])
    _check(b, "operand", call.op.operands, [diagonal] * 3 + [(batch + (m, nrhs), ELEMENTS[p])])
    _check(b, "result", call.op.results, [diagonal] * 3 + [(batch + (m, nrhs), ELEMENTS[p]),
                                                           (batch, I32)])
    return _emit(b, call, "gtsv_ffi", [math.prod(batch), m, nrhs])


# ------------------------------------------------------------------------ StableHLO ops


def _convert(b: Builder, source: Array, target: Array, convert) -> None:
    """``target`` = ``convert`` (C++ of the value read) of each element of ``source``."""
    b.emit.map("convert", source.type.shape, f"__out = {convert('__in')};",
               {"__in": Element(source)}, {"__out": Element(target)})


def _row_major_kernel(b: Builder, op: ir.Op, kernel: str, arguments: Sequence
                      ) -> list[Binding]:
    """Call ``h2d::lapack::<kernel>`` on the operands and result as they are (row-major);
    f16 and bf16 are computed in f32 and rounded once at the end."""
    t = op.result.type
    element = dtypes.of(t, op.name, op.location)
    if t.element not in (*ELEMENTS.values(), "f16", "bf16"):
        raise b.unsupported(f"element type {t.element}", [*ELEMENTS.values(), "f16", "bf16"])
    inputs = [b.array(v) for v in op.operands]
    target = output = b.allocate_result(op.result)
    if element.is_stored_as_bits:
        wide = []
        for array in inputs:
            wide.append(b.emit.add_array(f"{array.name}_f32",
                                         ir.TensorType(array.type.shape, "f32")))
            _convert(b, array, wide[-1], element.load)
        output = b.emit.add_array(f"{target.name}_f32", ir.TensorType(t.shape, "f32"))
        inputs = wide
    _kernel(b, kernel, dtypes.of(output.type), arguments, inputs, [output])
    if output is not target:
        _convert(b, output, target, element.store)
    return [target]


@register("stablehlo.cholesky")
def cholesky(b: Builder, op: ir.Op) -> list[Binding]:
    """XLA's CPU result: the factor in the requested triangle, zeros in the other, all NaN
    where the matrix is not positive definite."""
    t = op.result.type
    if t.rank < 2 or t.shape[-1] != t.shape[-2] or op.operands[0].type != t:
        raise b.unsupported(f"operand {op.operands[0].type} -> {t} (batches of square "
                            "matrices are needed)")
    return _row_major_kernel(b, op, "cholesky", [math.prod(t.shape[:-2]), t.shape[-1],
                                          bool(op.attr("lower", False))])


@register("stablehlo.triangular_solve")
def triangular_solve(b: Builder, op: ir.Op) -> list[Binding]:
    a, rhs = op.operands
    t = op.result.type
    left = bool(op.attr("left_side"))
    transpose = str(op.attr("transpose_a", "NO_TRANSPOSE"))
    modes = {"NO_TRANSPOSE": "N", "TRANSPOSE": "T", "ADJOINT": "C"}
    if transpose not in modes:
        raise b.unsupported(f"transpose_a = {transpose}", list(modes))
    m, k = t.shape[-2:] if t.rank >= 2 else (0, 0)
    n = m if left else k
    if t.rank < 2 or rhs.type != t or a.type != ir.TensorType(t.shape[:-2] + (n, n), t.element):
        raise b.unsupported(f"operands {a.type}, {rhs.type} -> {t} (a batch of square "
                            "matrices and a batch of right-hand sides of the result's type)")
    return _row_major_kernel(b, op, "triangular_solve",
                      [math.prod(t.shape[:-2]), m, k, left, bool(op.attr("lower")),
                       bool(op.attr("unit_diagonal")), modes[transpose]])
