"""Use-def facts of a block that the plan passes decide from: which ops are live, which
op produces each value, which ops read it and where they stand. Nothing here decides."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import ir, symbolic
from ..machine import FEW_OUTPUTS, Machine


@dataclass(frozen=True)
class BlockUses:
    """The live ops of one block, who produces each value and who reads it, and the op
    whose region holds the block (None for a function's body)."""

    ops: tuple[ir.Op, ...]
    producers: dict[str, ir.Op]
    users: dict[str, list[ir.Op]]
    position: dict[int, int]  #: ``id(op)`` -> its index in ``ops``
    owner: ir.Op | None = None

    @classmethod
    def of(cls, block: ir.Block, owner: ir.Op | None = None) -> BlockUses:
        ops = tuple(ir.live_ops(block))
        return cls(ops, {r.name: op for op in ops for r in op.results}, ir.collect_uses(ops),
                   {id(op): k for k, op in enumerate(ops)}, owner)

    def producer(self, value: ir.Value) -> ir.Op | None:
        return self.producers.get(value.name)

    def readers(self, value: ir.Value) -> list[ir.Op]:
        return self.users.get(value.name, [])

    def only_reader(self, value: ir.Value, op: ir.Op) -> bool:
        """Whether ``op`` is the one op that reads ``value``, and reads it once."""
        return [id(user) for user in self.readers(value)] == [id(op)] and \
            sum(v.name == value.name for v in op.operands) == 1

    def last_reader(self, value: ir.Value) -> ir.Op | None:
        readers = self.readers(value)
        return max(readers, key=lambda op: self.position[id(op)]) if readers else None

    def defined_before(self, value: ir.Value, op: ir.Op) -> bool:
        """Whether ``value`` exists when ``op`` runs: produced by an earlier op of the
        block, or not produced in it (an argument, a value of an enclosing block)."""
        producer = self.producer(value)
        return producer is None or self.position[id(producer)] < self.position[id(op)]


def over_rows(op: ir.Op, machine: Machine) -> bool:
    """Whether the reduction ``op`` reduces its operands' trailing dimensions (a row per
    result element) that a map may reduce a row at a time: not rows too long to stay in
    cache between the loops over them, nor so few rows (``FEW_OUTPUTS``) that their map
    would run on one thread."""
    operand = op.operands[0]
    shape = operand.type.shape
    rank, dimensions = len(shape), sorted(int(d) for d in op.attr("dimensions"))
    if (symbolic.is_symbolic(operand.type) or not dimensions
            or dimensions != list(range(rank - len(dimensions), rank))
            or len(dimensions) == rank):
        return False
    row = math.prod(shape[rank - len(dimensions):])
    return op.results[0].type.size >= FEW_OUTPUTS and 0 < row <= machine.max_fused_row
