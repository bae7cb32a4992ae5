"""Ops as DaCe library nodes, where DaCe has a node whose semantics are the op's: the
products BLAS computes as ``dace.libraries.blas`` Gemm, Gemv and Dot nodes, and reductions
by one associative op as ``dace.libraries.standard`` Reduce nodes, and complex Fourier
transforms over a whole array as ``dace.libraries.fft`` FFT and IFFT nodes, and
unbatched real Cholesky factorisations as ``dace.libraries.lapack`` Potrf nodes, so that DaCe's
transformations, its viewer and its other targets see the op, not C++.

Which implementation expands a node is the target's rule (``IMPLEMENTATIONS``), set on
each node as it is made: on the CPU, DaCe's OpenBLAS expansions, the same ``cblas_*``
call hlo2dace's own tasklet makes, so results and speed are those of ``blas.py``. A user
may pick another (``node.implementation = "pure"``: maps and tasklets that DaCe's
transformations can tile, fuse and move) in a transformation of the SDFG
(``hlo2dace.jit(f, transform=...)``).

A node is made only where it is the whole op: a real f32 or f64 product without batch,
computed and stored in its own type, of operands whose arrays are the matrices or vectors
BLAS reads (one unit stride, from their first element). Other products stay hlo2dace's
C++ (``blas.py``, ``linalg.py``): mixed and 16-bit types converted on the way, complex
products summed in XLA's order, skinny and blocked products that share the threads, and
integer products, which no DaCe node computes.

A Reduce node's CPU implementation is hlo2dace's own (``translate/expansions.py``): the
code ``reduction.py`` writes for the op, which sums in XLA's order, where DaCe's ``pure``
and ``OpenMP`` expansions sum in another (other roundings) and take ``max`` without
propagating NaN. So is an FFT node's: FFTW's plans, where DaCe's ``pure`` expansion is a
one-dimensional O(n^2) DFT (cuFFT on a GPU), and a Potrf node's: jaxlib's kernel
(``lapack.py``), whose ``info`` flags a NaN pivot as jaxlib's does, where DaCe's LAPACKE
expansion runs LAPACK's code for the other triangle. A reduction is a node where it reads one
array and is the whole op: not one whose operand the plan computes in its loop
(``fuse_into_consumers``) or that its readers compute a row at a time
(``fuse_into_readers``).
"""

from __future__ import annotations

import math
from typing import Sequence

import dace
import numpy as np
from dace.frontend.operations import detect_reduction_type
from dace.libraries import blas
from dace.libraries.fft import FFT, IFFT
from dace.libraries.lapack import Potrf
from dace.libraries.standard import Reduce
from dace.properties import CodeBlock

from .. import ir
from .bindings import Array
from .dtypes import ElementType
from .emitter import Emitter, origin

#: the name of hlo2dace's own implementations of DaCe's nodes (``translate/expansions.py``)
OWN = "hlo2dace"

#: per target, the implementation that expands each kind of library node
IMPLEMENTATIONS = {"cpu": {blas.Gemm: "OpenBLAS", blas.Gemv: "OpenBLAS", blas.Dot: "OpenBLAS",
                           blas.BatchedMatMul: "OpenBLAS", Reduce: OWN, FFT: OWN, IFFT: OWN,
                           Potrf: OWN},
                   "cuda": {blas.Gemm: "cuBLAS", blas.Gemv: "cuBLAS", blas.Dot: "cuBLAS",
                            blas.BatchedMatMul: "cuBLAS"}}

#: the op each kind of node computes (``expand``)
OPS = {**{kind: "stablehlo.dot_general" for kind in (blas.Gemm, blas.Gemv, blas.Dot,
                                                     blas.BatchedMatMul)},
       Reduce: "stablehlo.reduce", FFT: "stablehlo.fft", IFFT: "stablehlo.fft",
       Potrf: "stablehlo.custom_call"}

#: a reducer body's one op -> the Reduce node's ``wcr`` (on integers, then on booleans,
#: where they differ: DaCe reads ``and`` as logical, ``&`` as bitwise)
REDUCERS = {"stablehlo.add": ("lambda a, b: a + b",),
            "stablehlo.multiply": ("lambda a, b: a * b",),
            "stablehlo.maximum": ("lambda a, b: max(a, b)",),
            "stablehlo.minimum": ("lambda a, b: min(a, b)",),
            "stablehlo.and": ("lambda a, b: a & b", "lambda a, b: a and b"),
            "stablehlo.or": ("lambda a, b: a | b", "lambda a, b: a or b"),
            "stablehlo.xor": ("lambda a, b: a ^ b", "lambda a, b: a != b")}
_REDUCTION_TYPES = {dace.ReductionType.Sum: "stablehlo.add",
                    dace.ReductionType.Product: "stablehlo.multiply",
                    dace.ReductionType.Max: "stablehlo.maximum",
                    dace.ReductionType.Min: "stablehlo.minimum",
                    dace.ReductionType.Bitwise_And: "stablehlo.and",
                    dace.ReductionType.Logical_And: "stablehlo.and",
                    dace.ReductionType.Bitwise_Or: "stablehlo.or",
                    dace.ReductionType.Logical_Or: "stablehlo.or",
                    dace.ReductionType.Bitwise_Xor: "stablehlo.xor",
                    dace.ReductionType.Logical_Xor: "stablehlo.xor"}

#: the element types a Reduce node takes: those whose storage is DaCe's own type of them
#: (16-bit floats are stored as integers, complex sums keep XLA's pairing)
REDUCE_ELEMENTS = ("f32", "f64", "i1", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32",
                   "ui64")

#: the element types DaCe's BLAS nodes compute as hlo2dace's products do
_BLAS_ELEMENTS = ("f32", "f64")


def _concrete(t: ir.TensorType) -> bool:
    """Whether ``t``'s sizes are numbers: an expansion is built from its arrays' sizes,
    which a module's size symbols leave open."""
    return all(isinstance(n, (int, np.integer)) for n in t.shape)


def _dims(emit: Emitter, array: Array) -> list[tuple[int, int]] | None:
    """The (size, stride) of each dimension of ``array``'s descriptor longer than one,
    None where a size is symbolic."""
    desc = emit.sdfg.arrays[array.name]
    try:
        pairs = [(int(size), int(stride)) for size, stride in zip(desc.shape, desc.strides)]
    except TypeError:
        return None
    return [pair for pair in pairs if pair[0] != 1]


def _transposed(dims: Sequence[tuple[int, int]] | None, rows: tuple[int, int],
                cols: tuple[int, int]) -> bool | None:
    """Whether an array whose long dimensions are ``dims`` holds the matrix of ``rows``
    and ``cols`` (size, stride) transposed; None if it does not hold it, or BLAS cannot
    read it (no unit stride)."""
    if dims is None or 1 not in (rows[1], cols[1]):
        return None
    if list(dims) == [rows, cols]:
        return False
    if list(dims) == [cols, rows]:
        return True
    return None


def _vector(dims: Sequence[tuple[int, int]] | None, size: int) -> bool:
    return dims is not None and len(dims) == 1 and dims[0][0] == size and dims[0][1] > 0


def blas_node(emit: Emitter, target_name: str, shape: tuple[int, int, int], strides: tuple,
              operands: tuple, target: Array, element: ElementType,
              batch: tuple[int, int, int] | None = None) -> bool:
    """Emit ``target = A B`` as one DaCe BLAS node if one computes it (see the module's
    docstring); whether it did. ``shape``: (M, N, K); ``strides``: A's free and
    contracted strides, then B's free and contracted ones (``products.Product.groups``);
    ``operands``: A's and B's ``blas.Operand``; ``batch``: the size of a batch dimension
    and A's and B's strides along it (the result's leads)."""
    m, n, k = shape
    a_free, a_k, x_free, x_k = strides
    a, x = operands
    if not emit.library_nodes:
        return False
    if batch is not None:
        return _batched_node(emit, target_name, shape, strides, operands, target, element,
                             batch)
    if element.element not in _BLAS_ELEMENTS or a.offset or x.offset or k < 2:
        return False
    if any(o.element.element != element.element for o in operands) \
            or emit.sdfg.arrays[target.name].dtype != element.storage:
        return False
    a_dims, x_dims, c_dims = _dims(emit, a.array), _dims(emit, x.array), _dims(emit, target)
    if c_dims is None:
        return False
    inputs = {}
    if m > 1 and n > 1:
        trans_a = _transposed(a_dims, (m, a_free), (k, a_k))
        trans_b = _transposed(x_dims, (k, x_k), (n, x_free))
        if trans_a is None or trans_b is None or c_dims != [(m, n), (n, 1)]:
            return False
        node = blas.Gemm("gemm", transA=trans_a, transB=trans_b, alpha=1, beta=0)
        inputs, output = {"_a": a.array, "_b": x.array}, "_c"
    elif m > 1 or n > 1:  # y = A x, or y = B^T x
        matrix, vector, rows, cols = ((a, x, (m, a_free), (k, a_k)) if n == 1
                                      else (x, a, (n, x_free), (k, x_k)))
        transposed = _transposed(_dims(emit, matrix.array), rows, cols)
        if transposed is None or not _vector(_dims(emit, vector.array), k) \
                or c_dims != [(rows[0], 1)]:
            return False
        node = blas.Gemv("gemv", transA=transposed, alpha=1, beta=0)
        inputs, output = {"_A": matrix.array, "_x": vector.array}, "_y"
    else:
        if not (_vector(a_dims, k) and _vector(x_dims, k)) or c_dims:
            return False
        node = blas.Dot("dot")
        inputs, output = {"_x": a.array, "_y": x.array}, "_result"
    _emit(emit, target_name, node, inputs, {output: target})
    return True


def _batched_node(emit: Emitter, target_name: str, shape: tuple[int, int, int],
                  strides: tuple, operands: tuple, target: Array, element: ElementType,
                  batch: tuple[int, int, int]) -> bool:
    """A batch of gemms as DaCe's BatchedMatMul, where each operand's array is its batch
    of matrices in order (DaCe's node does not transpose a batch)."""
    (m, n, k), (a_free, a_k, x_free, x_k), (a, x) = shape, strides, operands
    size, a_batch, x_batch = batch
    if element.element not in _BLAS_ELEMENTS or a.offset or x.offset or min(m, n, k) < 2 \
            or any(o.element.element != element.element for o in operands) \
            or 1 not in (a_free, a_k) or 1 not in (x_free, x_k):
        return False
    if _dims(emit, a.array) != [(size, a_batch), (m, a_free), (k, a_k)] \
            or _dims(emit, x.array) != [(size, x_batch), (k, x_k), (n, x_free)] \
            or _dims(emit, target) != [(size, m * n), (m, n), (n, 1)]:
        return False
    _emit(emit, target_name, blas.BatchedMatMul("batched_gemm"),
          {"_a": a.array, "_b": x.array}, {"_c": target})
    return True


def reduces(emit: Emitter, target_name: str, operand: ir.TensorType, reducer: str,
            result: ir.TensorType) -> bool:
    """Whether a reduction of an ``operand`` by the one op ``reducer`` is a Reduce node
    on the target (see the module's docstring)."""
    return (emit.library_nodes and Reduce in IMPLEMENTATIONS[target_name]
            and reducer in REDUCERS and operand.element in REDUCE_ELEMENTS
            and result.element == operand.element and _concrete(operand)
            and bool(operand.size) and bool(result.size))


def reduce_node(emit: Emitter, target_name: str, operand: Array, target: Array,
                dimensions: Sequence[int], reducer: str, init: object) -> None:
    """Emit ``target = reduce(operand)`` over ``dimensions`` by the one op ``reducer``
    from the literal ``init`` as a DaCe Reduce node (where ``reduces``)."""
    element = operand.type.element
    wcrs = REDUCERS[reducer]
    # a Python number: DaCe's own expansions write it into their code as it prints
    identity = float(init) if element.startswith("f") else int(init)
    node = Reduce("reduce", wcr=wcrs[-1] if element == "i1" else wcrs[0],
                  axes=sorted(int(d) for d in dimensions), identity=identity)
    _emit(emit, target_name, node, {"_in": operand}, {"_out": target})


def fft_node(emit: Emitter, target_name: str, kind: str, lengths: Sequence[int],
             operand: Array, target: Array) -> bool:
    """Emit a complex FFT or IFFT over all of ``operand``'s dimensions (no batch) as
    DaCe's FFT or IFFT node, if the target implements it; whether it did. DaCe's IFFT
    is unnormalised, times its ``factor``: 1/n is StableHLO's."""
    kinds = {"FFT": FFT, "IFFT": IFFT}
    if not emit.library_nodes or kinds.get(kind) not in IMPLEMENTATIONS[target_name] \
            or len(lengths) != operand.type.rank or not _concrete(operand.type) \
            or operand.type.element not in ("complex<f32>", "complex<f64>"):
        return False
    node = kinds[kind](kind.lower())
    if kind == "IFFT":  # a float: DaCe's DFT writes a rational 1/n as C++'s integer 1/n
        node.factor = 1.0 / math.prod(lengths)
    _emit(emit, target_name, node, {"_inp": operand}, {"_out": target})
    return True


def factorises(emit: Emitter, target_name: str, matrix: ir.TensorType) -> bool:
    """Whether a Cholesky factorisation of ``matrix`` is a Potrf node on the target: one
    real f32 or f64 matrix (DaCe's node has no batch), at least 2x2 (DaCe's node
    squeezes a 1x1 matrix's dimensions away and fails its validation)."""
    return (emit.library_nodes and Potrf in IMPLEMENTATIONS[target_name]
            and matrix.element in _BLAS_ELEMENTS and matrix.rank == 2 and _concrete(matrix)
            and matrix.shape[0] >= 2)


def potrf_node(emit: Emitter, target_name: str, factor: Array, info: Array,
               lower: bool) -> None:
    """Emit the Cholesky factorisation of the row-major matrix ``factor`` in place (its
    ``lower`` or upper triangle; the other is left as it was), LAPACK's ``info`` into
    ``info``, as DaCe's Potrf node (where ``factorises``). DaCe's node factorises its
    ``_xin`` array in place, so it reads and writes ``factor``: the caller has copied the
    matrix there."""
    _emit(emit, target_name, Potrf("potrf", lower=lower), {"_xin": factor},
          {"_xout": factor, "_res": info})


def reducer_of(node: Reduce) -> str:
    """The op of a reducer body that a Reduce node's ``wcr`` is (``REDUCERS``);
    ValueError for another."""
    for name, wcrs in REDUCERS.items():
        if node.wcr in wcrs:
            return name
    found = _REDUCTION_TYPES.get(detect_reduction_type(node.wcr))
    if found is None:
        raise ValueError(f"a Reduce node's wcr {node.wcr!r} is none of "
                         f"{', '.join(name.split('.')[1] for name in REDUCERS)}")
    return found


def _emit(emit: Emitter, target_name: str, node: dace.nodes.LibraryNode,
          inputs: dict[str, Array], outputs: dict[str, Array]) -> None:
    """``node`` in the current state, implemented as the target says, reading and writing
    whole arrays."""
    node.implementation = IMPLEMENTATIONS[target_name][type(node)]
    def whole(array: Array) -> dace.Memlet:
        return dace.Memlet.from_array(array.name, emit.sdfg.arrays[array.name])

    emit.library_node(node, {conn: whole(array) for conn, array in inputs.items()},
                      {conn: whole(array) for conn, array in outputs.items()})


def library_nodes(sdfg: dace.SDFG) -> dict[str, int]:
    """How many library nodes of each kind ``sdfg`` holds, nested SDFGs included."""
    counts: dict[str, int] = {}
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, dace.nodes.LibraryNode):
            counts[type(node).__name__] = counts.get(type(node).__name__, 0) + 1
    return counts


def expand(sdfg: dace.SDFG) -> None:
    """Expand the library nodes hlo2dace made as their implementations say, each
    expansion's code named after the op it computes (``// op NAME @ file:line``, as
    hlo2dace's own tasklets are): for the profiler, which times the code that runs."""
    for node, state in list(sdfg.all_nodes_recursive()):
        if type(node) not in OPS:
            continue
        info = node.debuginfo
        comment = origin(OPS[type(node)], info.filename if info else None,
                         info.start_line if info else None)
        before = set(state.nodes())
        node.expand(state.sdfg, state)
        for made in set(state.nodes()) - before:
            if isinstance(made, dace.nodes.Tasklet):
                made.code = CodeBlock(f"{comment}\n{made.code.as_string}", made.language)
