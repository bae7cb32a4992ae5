"""Ops as DaCe library nodes, where DaCe has a node whose semantics are the op's: the
products BLAS computes as ``dace.libraries.blas`` Gemm, Gemv and Dot nodes, so that
DaCe's transformations, its viewer and its other targets see a product, not C++.

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
"""

from __future__ import annotations

from typing import Sequence

import dace
from dace.libraries import blas
from dace.properties import CodeBlock

from .bindings import Array
from .dtypes import ElementType
from .emitter import Emitter, origin

#: per target, the implementation that expands each kind of library node
IMPLEMENTATIONS = {"cpu": {blas.Gemm: "OpenBLAS", blas.Gemv: "OpenBLAS", blas.Dot: "OpenBLAS",
                           blas.BatchedMatMul: "OpenBLAS"},
                   "cuda": {blas.Gemm: "cuBLAS", blas.Gemv: "cuBLAS", blas.Dot: "cuBLAS",
                            blas.BatchedMatMul: "cuBLAS"}}

#: the op each kind of node computes (``expand``)
OPS = {kind: "stablehlo.dot_general" for kind in IMPLEMENTATIONS["cpu"]}

#: the element types DaCe's BLAS nodes compute as hlo2dace's products do
_BLAS_ELEMENTS = ("f32", "f64")


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
    _emit(emit, target_name, node, inputs, output, target)
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
          {"_a": a.array, "_b": x.array}, "_c", target)
    return True


def _emit(emit: Emitter, target_name: str, node: dace.nodes.LibraryNode,
          inputs: dict[str, Array], output: str, target: Array) -> None:
    """``node`` in the current state, implemented as the target says, reading and writing
    whole arrays."""
    node.implementation = IMPLEMENTATIONS[target_name][type(node)]
    def whole(array: Array) -> dace.Memlet:
        return dace.Memlet.from_array(array.name, emit.sdfg.arrays[array.name])

    emit.library_node(node, {conn: whole(array) for conn, array in inputs.items()},
                        {output: whole(target)})


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
