"""What a pass is: a named step of the pipeline (``pipeline.py``), with the context it
decides in. Three stages run passes: ``plan`` (IR to IR, before translation), ``sdfg``
(the built SDFG, before code generation) and ``code`` (DaCe's generated C++)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from .. import ir
from ..machine import Machine
from ..optimize import Level
from .analysis import BlockUses

#: the stages that run passes, in the order they run
STAGES = ("plan", "sdfg", "code")


@dataclass(frozen=True)
class PassContext:
    """What a pass decides from besides its input: the machine the code is for, the
    target, the optimisation level (its options) and the entry function (None: ``main``,
    or the only public one)."""

    machine: Machine
    target: str
    level: Level
    entry: str | None = None


@dataclass(frozen=True)
class Pass:
    """A named step: ``run(input, context)`` returns the plan stage's new module, and
    changes an SDFG at the sdfg stage; the code stage's passes run inside the build
    (``sdfg_build.CODE_PASSES``). ``summary``: what it does, in a line."""

    name: str
    stage: str
    run: Callable[[Any, PassContext], Any]
    summary: str


#: rewrites one block: ``rewrite(block, uses, context)`` -> the block's new ops
BlockRewrite = Callable[[ir.Block, BlockUses, PassContext], list[ir.Op]]


def rewrite_blocks(module: ir.Module, context: PassContext, rewrite: BlockRewrite
                   ) -> ir.Module:
    """``module`` with ``rewrite`` applied to every block, the blocks nested in an op's
    regions before the block that holds the op (``BlockUses.owner``: that op)."""
    def block(b: ir.Block, owner: ir.Op | None) -> ir.Block:
        ops = tuple(dataclasses.replace(op, regions=tuple(region(r, op) for r in op.regions))
                    if op.regions else op for op in b.ops)
        inner = ir.Block(b.arguments, ops)
        return ir.Block(b.arguments, tuple(rewrite(inner, BlockUses.of(inner, owner),
                                                   context)))

    def region(r: ir.Region, owner: ir.Op | None) -> ir.Region:
        return ir.Region(tuple(block(b, owner) for b in r.blocks))

    functions = {name: dataclasses.replace(f, body=region(f.body, None))
                 for name, f in module.functions.items()}
    return dataclasses.replace(module, functions=ir.freeze(functions))


def remove_dead_ops(block: ir.Block, uses: BlockUses, context: PassContext) -> list[ir.Op]:
    """The ops of ``block`` whose results nothing reads (and that have no effects) are
    dropped: what other passes left behind (a multiply folded into a product)."""
    return list(uses.ops)


def block_pass(rewrite: BlockRewrite) -> Callable[[ir.Module, PassContext], ir.Module]:
    """A plan pass that applies ``rewrite`` to every block (``rewrite_blocks``), with
    ``rewrite``'s docstring as its own."""
    def run(module: ir.Module, context: PassContext) -> ir.Module:
        return rewrite_blocks(module, context, rewrite)

    run.__doc__ = rewrite.__doc__
    run.__name__ = rewrite.__name__
    return run
