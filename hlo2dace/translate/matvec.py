"""``h2d.paired_matvecs``: two matrix-vector products of one large matrix, which the
``pair_matvecs`` pass puts together (its region holds the two ``dot_general`` ops, the
second's vector a value known before the first or the first's result)."""

from __future__ import annotations

from .. import ir
from . import dtypes
from .bindings import Binding
from .blas import RowBlocks, blocked_matvecs, operand_in_place, vector_operand
from .builder import Builder
from .emitter import Whole
from .products import Matvec
from .registry import register


@register("h2d.paired_matvecs", code_regions=True)
def paired_matvecs(b: Builder, op: ir.Op) -> list[Binding]:
    """Both products in one pass over the matrix, block of rows by block of rows, each
    block read by both gemv calls in turn while it is in L2, where two products read the
    matrix from memory twice (XLA's way): NPBench's mvt (``A @ y1`` and ``y2 @ A``), bicg,
    atax's ``(A @ x) @ A``, whose second vector is the first product (each row's weight is
    then ready when the row is read). A matrix that is not row-major in memory (a
    transposed view) gets the two products one after the other."""
    block = op.regions[0].entry
    outer = {arg.name: value for arg, value in zip(block.arguments, op.operands)}
    outer.update({inner.name: value for inner, value in
                  zip(block.terminator.operands, op.results)})
    first, second = (Matvec.of(inner) for inner in block.ops[:-1])
    matrix_value = outer[first.matrix.name]
    m, n = matrix_value.type.shape
    element = dtypes.of(op.results[0].type)
    matrix = operand_in_place(b, matrix_value)
    if matrix is None or matrix.strides != (n, 1) or matrix.element.element != element.element:
        scope = b.nested_scope(block, {arg.name: b.binding(value) for arg, value in
                                       zip(block.arguments, op.operands)})
        return b.translate_block(block, scope)
    products = (first, second)
    targets = [b.allocate_result(result, whole=True) for result in op.results]
    inputs, outputs = {"__a": Whole(matrix.array)}, {}
    vectors = []  # per product: (pointer to its vector's first element, increment)
    for k, product in enumerate(products):
        outputs[f"__y{k}"] = Whole(targets[k])
        if product.vector.name == first.op.result.name:  # the first product's result
            vectors.append(("__y0", 1))
            continue
        vector, increment = vector_operand(b, outer[product.vector.name], element)
        inputs[f"__v{k}"] = Whole(vector.array)
        vectors.append((f"__v{k} + {vector.offset}LL", increment))
    rows = [f"const {element.storage} * __block = __a + {matrix.offset}LL + __r * {n}LL;"]
    blocked_matvecs(b, products, vectors, RowBlocks.of(m, n, element, b.machine), rows,
                    inputs, outputs, second.op)
    return targets
