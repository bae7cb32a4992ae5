"""Calls inlined, as XLA's CallInliner does before anything else.

JAX emits a ``func.call`` for every jitted helper it uses (``jnp.where`` is ``@_where``,
``clip``, ``remainder``, ``logsumexp``...). Inlined, a helper's ops join the caller's
block, so every question about a value asked later (who reads it, whether a reduction or
a fused loop may compute it itself, whether XLA would contract a product or rewrite a
division) sees all its readers in one place, as XLA's passes see them after inlining.
MLIR's own inliner cannot do it: the StableHLO dialect declares no inliner interface.

A call of a function without effects whose operands an earlier call of it in the same
block had (``jnp.histogram(r, n)`` and ``jnp.histogram(r, n, weights=w)`` both search
``r`` among the same edges, in a jitted ``searchsorted``) takes that call's results
instead of computing them again, and so does an op without regions that an earlier op
computed from the same operands (what the two calls' results feed), as XLA's CSE merges
them after inlining: MLIR's CSE, run before, leaves calls alone.

A callee whose signature has a dynamic shape is left as a call: the translator infers its
shapes per call site."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .. import ir
from ..errors import UnsupportedError

#: the ops that call a function of the module by its ``callee`` symbol
CALLS = ("func.call", "stablehlo.call")
#: ops with effects beyond their results (or that XLA never merges): a function holding one
#: is called again rather than reusing an earlier call's results. A custom call is one of
#: them only where it says it has a side effect (``has_side_effect``): XLA's CSE merges
#: the others (``jnp.linalg.solve(a, b)`` and ``det(a)`` factorise ``a`` once).
EFFECTS = frozenset(f"stablehlo.{name}" for name in (
    "infeed", "outfeed", "send", "recv", "rng", "after_all",
    "optimization_barrier", "all_reduce", "all_gather", "all_to_all", "reduce_scatter",
    "collective_permute", "collective_broadcast"))


def has_effects(op: ir.Op) -> bool:
    """Whether ``op`` does more than compute its results (``EFFECTS``)."""
    if op.name == "stablehlo.custom_call":
        return bool(op.attr("has_side_effect"))
    return op.name in EFFECTS


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
        #: function name -> whether it has no effects (``EFFECTS``), its callees neither
        self.pure: dict[str, bool] = {}

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
                        tuple(self.ops(block.ops, names, site_location, {})))

    def ops(self, ops: tuple[ir.Op, ...], names: dict[str, ir.Value],
            site_location: ir.Location | None, calls: dict[tuple, tuple[ir.Value, ...]]
            ) -> Iterator[ir.Op]:
        """``ops`` with their calls inlined; ``site_location``: the location of the call
        that inlines them, if any (``_located``); ``calls``: the results of the ops and
        calls without effects put into the block so far, by what they compute from
        (``_key``; a call: its callee and operands)."""
        for op in ops:
            operands = tuple(names.get(v.name, v) for v in op.operands)
            function = self.callee(op)
            key = _key(op, operands, names) if function is None else (
                (function.name, tuple(v.name for v in operands))
                if self.effect_free(function) else None)
            if key in calls:
                for result, earlier in zip(op.results, calls[key]):
                    names[result.name] = earlier
                continue
            if function is None:
                inlined = dataclasses.replace(
                    op, operands=operands,
                    results=tuple(names.get(r.name, r) for r in op.results),
                    regions=tuple(self.region(r, names, site_location) for r in op.regions),
                    location=_located(op.location, site_location))
                if key is not None:
                    calls[key] = inlined.results
                yield inlined
                continue
            site = next(self.sites)
            inner = dict(zip((a.name for a in function.arguments), operands))
            for value in _definitions(function.body):
                if value.name not in inner:
                    inner[value.name] = ir.Value(f"%c{site}_{value.name[1:]}", value.type)
            self.active.append(function.name)
            *body, terminator = function.ops
            yield from self.ops(tuple(body), inner, _located(op.location, site_location),
                                calls)
            self.active.pop()
            for result, returned in zip(op.results, terminator.operands):
                names[result.name] = inner.get(returned.name, returned)
            if key is not None:
                calls[key] = tuple(names[result.name] for result in op.results)

    def effect_free(self, function: ir.Function) -> bool:
        """Whether ``function`` and every function it calls hold no op with effects
        (``has_effects``; a declaration without a body may have any)."""
        if function.name not in self.pure:
            self.pure[function.name] = False  # while it is looked at: a recursion is not
            self.pure[function.name] = bool(function.body.blocks) and all(
                not has_effects(inner) and (
                    inner.name not in CALLS or (callee := self.target(inner)) is not None
                    and self.effect_free(callee))
                for op in function.ops for inner in op.walk())
        return self.pure[function.name]

    def target(self, op: ir.Op) -> ir.Function | None:
        """The function of the module that the call ``op`` names, if any."""
        target = op.attr("callee")
        return self.module.functions.get(
            target.name if isinstance(target, ir.SymbolRef) else target)

    def callee(self, op: ir.Op) -> ir.Function | None:
        """The function ``op`` calls, if it is one to inline: a call of a function with a
        body, whose argument and result shapes are static."""
        if op.name not in CALLS:
            return None
        function = self.target(op)
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


def _key(op: ir.Op, operands: tuple[ir.Value, ...], names: Mapping[str, ir.Value]
         ) -> tuple | None:
    """What an op without effects computes from: two such ops with one key have the same
    results. None for other ops, and where an attribute is no key (an array). An op's
    regions are part of its key by their structure (``_region_key``; ``names``: the
    values that replace the ones named, as ``_Inliner.block`` has them): a helper's
    ``logsumexp`` and the caller's ``log_softmax`` take one row maximum, as XLA's CSE
    merges reductions of equal computations."""
    if not op.results or has_effects(op) or op.name in CALLS or any(
            inner.name in CALLS or has_effects(inner) for inner in op.walk()):
        return None
    key = (op.name, tuple(v.name for v in operands), _hashable(op.attributes),
           tuple(r.type for r in op.results),
           tuple(_region_key(region, {}, names) for region in op.regions))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _region_key(region: ir.Region, local: dict[str, int], names: Mapping[str, ir.Value]
                ) -> tuple:
    """``region``'s ops by name, attributes and types, each operand by the position at
    which the region defines it (``local``: the values the regions around define), or by
    its name if it comes from outside."""
    blocks = []
    for block in region.blocks:
        for argument in block.arguments:
            local[argument.name] = len(local)
        ops = []
        for op in block.ops:
            ops.append((op.name, tuple(local.get(v.name, names.get(v.name, v).name)
                                       for v in op.operands),
                        _hashable(op.attributes), tuple(r.type for r in op.results),
                        tuple(_region_key(inner, local, names) for inner in op.regions)))
            for result in op.results:
                local[result.name] = len(local)
        blocks.append((tuple(a.type for a in block.arguments), tuple(ops)))
    return tuple(blocks)


def _hashable(value: Any) -> Any:
    """An attribute's value as a key: dictionaries (a custom call's ``backend_config``),
    lists, the IR's attribute records and arrays by their contents."""
    if isinstance(value, Mapping):
        return ("{}", tuple(sorted((k, _hashable(v)) for k, v in value.items())))
    if isinstance(value, (tuple, list)):
        return tuple(_hashable(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, *(_hashable(getattr(value, f.name))
                                        for f in dataclasses.fields(value)))
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    return value


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
