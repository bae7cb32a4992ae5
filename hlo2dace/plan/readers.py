"""Decisions from what an op's readers read of its results."""

from __future__ import annotations

from .. import ir
from .analysis import BlockUses
from .annotations import ReadPrefix, annotated
from .passes import PassContext


def partial_sorts(block: ir.Block, uses: BlockUses, context: PassContext) -> list[ir.Op]:
    """A sort whose readers only slice the first elements of each row (``lax.top_k``)
    keeps only those (``ReadPrefix``: a stable sort keeps them in a heap), and a result
    nothing reads (argsort's sorted keys) is never written."""
    ops = []
    for op in block.ops:
        if op.name == "stablehlo.sort" and op.operands and op.operands[0].type.rank:
            rank = op.operands[0].type.rank
            dimension = int(op.attr("dimension", -1))
            dimension += rank if dimension < 0 else 0
            n = op.operands[0].type.shape[dimension]
            lengths = tuple(_prefix(uses, result, dimension, n) for result in op.results)
            op = annotated(op, ReadPrefix(lengths))
        ops.append(op)
    return ops


def _prefix(uses: BlockUses, value: ir.Value, dimension: int, n: int) -> int:
    """How many leading elements of every row of ``value`` its readers read: ``n``
    unless all of them are slices, -1 where nothing reads it."""
    readers = uses.readers(value)
    if not readers:
        return -1
    longest = 0
    for user in readers:
        if user.name != "stablehlo.slice":
            return n
        count = user.result.type.shape[dimension]
        if count:
            start, stride = user.attr("start_indices")[dimension], user.attr("strides")[dimension]
            longest = max(longest, start + stride * (count - 1) + 1)
    return longest
