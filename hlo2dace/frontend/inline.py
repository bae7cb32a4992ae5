"""Calls inlined, as XLA's CallInliner does before anything else.

JAX emits a ``func.call`` for every jitted helper it uses (``jnp.where`` is ``@_where``,
``clip``, ``remainder``, ``logsumexp``...). Inlined, a helper's ops join the caller's
block, so every question about a value asked later (who reads it, whether a reduction or
a fused loop may compute it itself, whether XLA would contract a product or rewrite a
division) sees all its readers in one place, as XLA's passes see them after inlining.
MLIR's own inliner cannot do it: the StableHLO dialect declares no inliner interface.

A callee whose signature has a dynamic shape is left as a call: the translator infers its
shapes per call site."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator

from .. import ir
from ..errors import UnsupportedError

#: the ops that call a function of the module by its ``callee`` symbol
CALLS = ("func.call", "stablehlo.call")


def inline_calls(module: ir.Module) -> ir.Module:
    inliner = _Inliner(module)
    functions = {name: dataclasses.replace(f, body=inliner.region(f.body, {}))
                 for name, f in module.functions.items()}
    return dataclasses.replace(module, functions=ir.freeze(functions))


class _Inliner:
    def __init__(self, module: ir.Module):
        self.module = module
        self.sites = itertools.count()
        #: the callees being inlined, innermost last (a recursion would never end)
        self.active: list[str] = []

    def region(self, region: ir.Region, names: dict[str, ir.Value],
               site_location: ir.Location | None = None) -> ir.Region:
        return ir.Region(tuple(self.block(block, names, site_location)
                               for block in region.blocks))

    def block(self, block: ir.Block, names: dict[str, ir.Value],
              site_location: ir.Location | None = None) -> ir.Block:
        """``block`` with its calls replaced by the callees' ops. ``names``: the values
        that replace the ones named (a callee's arguments and definitions, the results of
        calls inlined so far, to which each call adds its own)."""
        return ir.Block(tuple(names.get(a.name, a) for a in block.arguments),
                        tuple(self.ops(block.ops, names, site_location)))

    def ops(self, ops: tuple[ir.Op, ...], names: dict[str, ir.Value],
            site_location: ir.Location | None = None) -> Iterator[ir.Op]:
        """``ops`` with their calls inlined; ``site_location``: the location of the call
        that inlines them, if any (``_located``)."""
        for op in ops:
            operands = tuple(names.get(v.name, v) for v in op.operands)
            function = self.callee(op)
            if function is None:
                yield dataclasses.replace(
                    op, operands=operands,
                    results=tuple(names.get(r.name, r) for r in op.results),
                    regions=tuple(self.region(r, names, site_location) for r in op.regions),
                    location=_located(op.location, site_location))
                continue
            site = next(self.sites)
            inner = dict(zip((a.name for a in function.arguments), operands))
            for value in _definitions(function.body):
                if value.name not in inner:
                    inner[value.name] = ir.Value(f"%c{site}_{value.name[1:]}", value.type)
            self.active.append(function.name)
            *body, terminator = function.ops
            yield from self.ops(tuple(body), inner, _located(op.location, site_location))
            self.active.pop()
            for result, returned in zip(op.results, terminator.operands):
                names[result.name] = inner.get(returned.name, returned)

    def callee(self, op: ir.Op) -> ir.Function | None:
        """The function ``op`` calls, if it is one to inline: a call of a function with a
        body, whose argument and result shapes are static."""
        if op.name not in CALLS:
            return None
        target = op.attr("callee")
        function = self.module.functions.get(
            target.name if isinstance(target, ir.SymbolRef) else target)
        if function is None or not function.body.blocks:
            return None
        types = (*(a.type for a in function.arguments), *function.result_types)
        if not all(isinstance(t, ir.TensorType) and t.is_static for t in types):
            return None
        if function.name in self.active:
            raise UnsupportedError(op.name, f"a recursive call of @{function.name}",
                                   op.location, ["calls of functions that do not call "
                                                 "themselves"])
        return function


def _located(own: ir.Location | None, site: ir.Location | None) -> ir.Location | None:
    """An inlined op's location: its own if it names a source file, else its call's (a
    helper's ops often carry only a name, and errors and profiles point at user code)."""
    return own if site is None or own is not None and own.file else site


def _definitions(region: ir.Region) -> Iterator[ir.Value]:
    """Every value ``region`` defines: block arguments and op results, nested ones too."""
    for block in region.blocks:
        yield from block.arguments
        for op in block.ops:
            yield from op.results
            for nested in op.regions:
                yield from _definitions(nested)
