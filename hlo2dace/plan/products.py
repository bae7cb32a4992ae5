"""The plan's decisions about products: which kernel computes each (``choose_product_
kernels``), a scalar factor passed to BLAS as alpha (``fold_scale_into_products``), an
outer product as a multiply that its readers compute (``outer_products_as_multiplies``)."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import numpy as np

from .. import ir, symbolic
from ..translate import products
from ..translate.products import Matvec, Product, precision_key
from ..translate.registry import elementwise_rule
from .analysis import BlockUses
from .annotations import FusedOperands, ProductKernel, annotated, annotation
from .passes import PassContext

#: the ops that hold products the kernel passes decide for
CONTRACTIONS = ("stablehlo.dot_general",)
#: the convolutions, whose kernel (im2col and GEMMs, or the loop nest) is decided too
CONVOLUTIONS = ("stablehlo.convolution", "stablehlo.dynamic_conv")


def choose_product_kernels(block: ir.Block, uses: BlockUses, context: PassContext
                           ) -> list[ir.Op]:
    """Every contraction and convolution gets the kernel that computes it fastest on the
    machine (``ProductKernel``): loops for tiny products and depthwise convolutions,
    gemms over blocks of a skinny product's long side, and for a matrix-vector product
    whose large matrix an elementwise expression computes for it alone, that expression a
    block of rows at a time into gemv (``blocked_gemv``: the matrix is never written)."""
    ops = []
    for op in block.ops:
        if op.name in CONVOLUTIONS:
            op = annotated(op, products.convolution_kernel(op, context.machine, tuned=True))
        elif op.name in CONTRACTIONS:
            chosen = products.kernel(op, context.machine, tuned=True)
            if chosen is not None:
                side = _computed_matrix(op, uses, context)
                if side is not None:
                    op = annotated(op, ProductKernel("blocked_gemv"), FusedOperands((side,)))
                else:
                    op = annotated(op, chosen)
        ops.append(op)
    return ops


def _computed_matrix(op: ir.Op, uses: BlockUses, context: PassContext) -> int | None:
    """The operand of a matrix-vector product ``op`` that is a large matrix computed by an
    elementwise op for ``op`` alone, unless it is a scalar times a matrix that is written
    anyway (computed elsewhere, or read by others): BLAS's alpha reads that one where it
    lies (``fold_scale_into_products``)."""
    product = Matvec.of(op)
    if product is None or not product.passes_over_matrix(context.machine):
        return None
    producer = uses.producer(product.matrix)
    if producer is None or not _elementwise(producer) \
            or not uses.only_reader(product.matrix, op):
        return None
    if producer.name == "stablehlo.multiply":
        for factor, other in (producer.operands, producer.operands[::-1]):
            computed = uses.producer(other)
            written = computed is None or not _elementwise(computed) \
                or not uses.only_reader(other, producer)
            if _scalar(factor, uses) is not None and written:
                return None
    return op.operands.index(product.matrix)


def _elementwise(op: ir.Op) -> bool:
    return elementwise_rule(op) is not None


def fold_scale_into_products(block: ir.Block, uses: BlockUses, context: PassContext
                             ) -> list[ir.Op]:
    """A BLAS or few-rows product whose operand is a scalar times a matrix that it alone
    reads (``alpha * A @ B``) becomes ``h2d.scaled_dot`` of the matrix, with the scalar as
    BLAS's alpha: the scaled matrix is never written (XLA writes it)."""
    ops = []
    for op in block.ops:
        folded = _scaled(op, uses)
        ops.append(op if folded is None else folded)
    return ops


def _scaled(op: ir.Op, uses: BlockUses) -> ir.Op | None:
    kernel = annotation(op, ProductKernel)
    if op.name not in CONTRACTIONS or kernel is None or kernel.kernel not in (
            "blas", "skinny_gemm", "few_rows"):
        return None
    lhs, rhs, result, compute = products.types(op)
    accumulate = products.accumulated(compute)
    if precision_key(accumulate) != precision_key(result) or accumulate.is_complex:
        return None
    for side, value in enumerate(op.operands):
        producer = uses.producer(value)
        if (producer is None or producer.name != "stablehlo.multiply"
                or producer.result.type.element != op.result.type.element
                or not uses.only_reader(value, op)):
            continue
        for k, factor in enumerate(producer.operands):
            scalar = _scalar(factor, uses)
            if scalar is not None:
                operands = list(op.operands)
                operands[side] = producer.operands[1 - k]
                attributes = {**op.attributes, "h2d.scaled_operand": side}
                return dataclasses.replace(op, name="h2d.scaled_dot",
                                           operands=(*operands, scalar),
                                           attributes=MappingProxyType(attributes))
    return None


def _scalar(value: ir.Value, uses: BlockUses) -> ir.Value | None:
    """The 0-d value that ``value`` broadcasts, or ``value`` itself if it is a splat
    constant that BLAS's alpha may stand for (finite, not 0: ``blas._scale_by`` checks a
    computed scalar at run time); None otherwise."""
    producer = uses.producer(value)
    if producer is None:
        return None
    if producer.name == "stablehlo.broadcast_in_dim" and producer.operands[0].type.rank == 0:
        scalar = producer.operands[0]
        constant = uses.producer(scalar)
        if constant is None or constant.name != "stablehlo.constant":
            return scalar
        dense = constant.attr("value")
    elif producer.name == "stablehlo.constant":
        scalar, dense = value, producer.attr("value")
    else:
        return None
    if not isinstance(dense, ir.DenseElements) or not dense.is_splat:
        return None
    number = dense.array.reshape(-1)[0]
    return scalar if np.isfinite(number) and number != 0 else None


def outer_products_as_multiplies(block: ir.Block, uses: BlockUses, context: PassContext
                                 ) -> list[ir.Op]:
    """A product that contracts nothing (or dimensions of size 1), of one element type,
    becomes the multiply of its operands broadcast to the result (``h2d.outer_product``),
    as XLA's simplifier makes it: its readers compute it where they read it, so a
    transpose of it, or an add of a bias, writes the result's array in the order it is
    read, with no array between."""
    ops = []
    for op in block.ops:
        ops.extend(_as_multiply(op) if _is_outer(op) else [op])
    return ops


def _is_outer(op: ir.Op) -> bool:
    if op.name not in CONTRACTIONS or Product.of(op).k != 1 or not op.result.type.size:
        return False
    if any(symbolic.is_symbolic(v.type) for v in (*op.operands, op.result)):
        return False
    lhs, rhs, result, compute = products.types(op)
    return (len({lhs.element, rhs.element, result.element}) == 1
            and precision_key(compute) == precision_key(result))


def _as_multiply(op: ir.Op) -> list[ir.Op]:
    product = Product.of(op)
    t = op.result.type
    made, operands = [], []
    for side, value in enumerate(op.operands):
        dims = product.result_dims(side)
        kept = [d for d, j in enumerate(dims) if j is not None]
        if len(kept) < value.type.rank:  # contracting dimensions of size 1: dropped
            unit = ir.Value(f"{op.result.name}_units{side}", ir.TensorType(
                tuple(value.type.shape[d] for d in kept), value.type.element))
            made.append(ir.Op("stablehlo.reshape", (value,), (unit,), location=op.location))
            value = unit
        broadcast = ir.Value(f"{op.result.name}_operand{side}",
                             ir.TensorType(t.shape, value.type.element))
        made.append(ir.Op("stablehlo.broadcast_in_dim", (value,), (broadcast,),
                          ir.freeze({"broadcast_dimensions": tuple(dims[d] for d in kept)}),
                          location=op.location))
        operands.append(broadcast)
    made.append(ir.Op("h2d.outer_product", tuple(operands), op.results, location=op.location))
    return made

