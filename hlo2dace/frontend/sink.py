"""Scalar constants sunk into the regions that read them.

MLIR's canonicaliser hoists constants out of regions into the enclosing function (JAX's
shape refinement runs it), so a sort comparator or a reducer body may read a constant
defined outside it. Translators emit such regions as self-contained scalar code; a copy
of each constant inside the region that reads it keeps them so."""

from __future__ import annotations

import dataclasses

from .. import ir


def sink_constants(module: ir.Module) -> ir.Module:
    functions = {name: dataclasses.replace(f, body=_region(f.body, {}))
                 for name, f in module.functions.items()}
    return dataclasses.replace(module, functions=ir.freeze(functions))


def _region(region: ir.Region, outer: dict[str, ir.Op]) -> ir.Region:
    return ir.Region(tuple(_block(block, outer) for block in region.blocks))


def _block(block: ir.Block, outer: dict[str, ir.Op]) -> ir.Block:
    """``block`` with copies of the outer constants it reads (directly or in nested
    regions) at its start; ``outer``: the constants visible from outside, by value name."""
    defined = {v.name for v in block.arguments} | {r.name for op in block.ops
                                                  for r in op.results}
    visible = dict(outer)
    visible.update({op.result.name: op for op in block.ops
                    if op.name == "stablehlo.constant" and len(op.results) == 1
                    and isinstance(op.result.type, ir.TensorType)
                    and op.result.type.size <= 1})
    ops = [dataclasses.replace(op, regions=tuple(_region(r, visible) for r in op.regions))
           if op.regions else op for op in block.ops]
    captured = []
    for name in sorted(_reads(ops) - defined):
        if name in outer:
            captured.append(outer[name])
    return ir.Block(block.arguments, tuple(captured) + tuple(ops)) if captured else \
        ir.Block(block.arguments, tuple(ops))


def _reads(ops) -> set[str]:
    """The names the ops (and their nested regions) read."""
    names = set()
    for op in ops:
        for inner in op.walk():
            names.update(v.name for v in inner.operands)
    return names
