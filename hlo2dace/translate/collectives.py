"""Sharding annotations and collectives of a program that runs as one process.

A JAX program lowered for one device still carries Shardy annotations (typed PRNG keys and
``with_sharding_constraint`` add ``sdy.sharding_constraint``) and, once ``shard_map`` over a
one-device mesh is inlined, collectives whose every group holds a single process. On one
process these are data movements with nothing to move, so each result is its operand (the
spec's semantics for groups of one). Groups of several processes need the multi-process
(MPI) target, which does not exist yet: they are refused with the group size, never run
as if alone."""

from __future__ import annotations

import numpy as np

from .. import ir
from . import dtypes
from .bindings import Binding, Literal
from .builder import Builder
from .custom_call import CustomCall, register_target
from .registry import register

#: collectives whose result, for a group of one process, is the operand itself
_OPERAND_IS_RESULT = ("stablehlo.all_reduce", "stablehlo.all_gather",
                      "stablehlo.reduce_scatter", "stablehlo.all_to_all",
                      "stablehlo.collective_broadcast")


@register("sdy.sharding_constraint", "sdy.reshard", "sdy.propagation_barrier")
def sharding_annotation(b: Builder, op: ir.Op) -> list[Binding]:
    return [b.binding(op.operands[0])]


@register_target("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape")
def sharding_custom_call(b: Builder, call: CustomCall) -> list[Binding]:
    """GSPMD's annotations (what JAX emits when Shardy is switched off)."""
    op = call.op
    if op.operands[0].type != op.result.type:
        raise b.unsupported(f"{call.target} from {op.operands[0].type} to {op.result.type} "
                            "(only a one-device mesh is supported)")
    return [b.binding(op.operands[0])]


def _check_one_process(b: Builder, op: ir.Op) -> None:
    """Refuse ``replica_groups`` with a group of several processes (-1 pads groups)."""
    groups = op.attr("replica_groups")
    if groups is None:
        return
    largest = max((int((group >= 0).sum()) for group in np.atleast_2d(groups.array)),
                  default=0)
    if largest > 1:
        raise b.unsupported(f"a collective over groups of {largest} processes: hlo2dace runs "
                            "a program as one process (a multi-process target is planned)")


@register(*_OPERAND_IS_RESULT)
def single_process_collective(b: Builder, op: ir.Op) -> list[Binding]:
    _check_one_process(b, op)
    for operand, result in zip(op.operands, op.results):
        if operand.type != result.type:
            raise b.unsupported(f"{operand.type} -> {result.type} on one process")
    return [b.binding(operand) for operand in op.operands]


@register("stablehlo.collective_permute")
def collective_permute(b: Builder, op: ir.Op) -> list[Binding]:
    """A process that receives nothing gets zeros; on one process it receives its own
    operand only if the pair (0, 0) is listed."""
    pairs = op.attr("source_target_pairs").array.reshape(-1, 2)
    if any(int(p) != 0 for p in pairs.reshape(-1)):
        raise b.unsupported(f"source_target_pairs {pairs.tolist()}: only process 0 exists "
                            "(a multi-process target is planned)")
    return [b.binding(op.operands[0]) if len(pairs) else _zeros(op)]


@register("stablehlo.replica_id", "stablehlo.partition_id")
def process_id(b: Builder, op: ir.Op) -> list[Binding]:
    return [_zeros(op)]


def _zeros(op: ir.Op) -> Literal:
    element = dtypes.of(op.result.type, op.name, op.location)
    return Literal(element.numpy.type(0), op.result.type)
