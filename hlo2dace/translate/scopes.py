"""Scopes of the IR walk and what the walk needs to know about them: the live ops of a
block, who uses each value, which function results go into which array, and which updates
may happen in an operand's own array. Nothing here emits code."""

from __future__ import annotations

from collections import ChainMap, defaultdict
from dataclasses import dataclass, field
from typing import Sequence

from .. import ir
from . import registry


@dataclass(eq=False)
class Scope:
    """The bindings of one function body (or nested region) being translated."""

    env: ChainMap
    ops: Sequence[ir.Op]  #: the live ops of the block, terminator last
    uses: dict[str, list[ir.Op]]
    #: values that must end in a specific array (function results); ``claim`` takes one
    destinations: dict[str, str] = field(default_factory=dict)
    #: value name -> the op of the block that computes it
    producers: dict[str, ir.Op] = field(default_factory=dict)
    #: value name -> the position in ``ops`` of its last user
    last_use: dict[str, int] = field(default_factory=dict)
    #: the position in ``ops`` of the op being translated (``Builder.translate_block``)
    now: int = 0

    @classmethod
    def of(cls, env: ChainMap, block: ir.Block, destinations=None,
           returned: Sequence[int] | None = None) -> Scope:
        ops = live_ops(block, returned)
        producers = {result.name: op for op in ops for result in op.results}
        destinations = dict(destinations or {})
        uses = collect_uses(ops)
        position = {id(op): k for k, op in enumerate(ops)}
        last_use = {name: max(position[id(user)] for user in users)
                    for name, users in uses.items()}
        return cls(env, ops, uses, destinations, producers, last_use)

    def claim(self, value: ir.Value) -> str | None:
        """The array ``value`` must be written into, if any; the claim is removed, so that
        one op writes it."""
        return self.destinations.pop(value.name, None)

    def only_user(self, value: ir.Value, op: ir.Op) -> bool:
        """Whether ``op`` is the one op of this scope that uses ``value``."""
        return [id(user) for user in self.uses.get(value.name, ())] == [id(op)]

    def used_later(self, name: str) -> bool:
        """Whether an op after the one being translated uses the value ``name``."""
        return self.last_use.get(name, -1) > self.now


def live_ops(block: ir.Block, returned: Sequence[int] | None = None) -> list[ir.Op]:
    """The ops of ``block`` whose results are needed (or that have no results, i.e. are
    kept for their effects), in order; the terminator is always live. ``returned``: the
    positions of the terminator's operands that are needed (default: all)."""
    terminator = block.terminator
    wanted = terminator.operands if returned is None else [terminator.operands[k]
                                                           for k in returned]
    needed: set[str] = {v.name for v in wanted}
    live = [terminator]
    for op in reversed(block.ops[:-1]):
        if not op.results or any(r.name in needed for r in op.results):
            live.append(op)
            needed.update(v.name for inner in op.walk() for v in inner.operands)
    return live[::-1]


def collect_uses(ops: Sequence[ir.Op]) -> dict[str, list[ir.Op]]:
    """Value name -> the ops among ``ops`` that use it, ops nested in regions counted as
    uses by the top-level op that holds them."""
    uses: dict[str, list[ir.Op]] = defaultdict(list)
    for op in ops:
        seen = set()
        for inner in op.walk():
            for operand in inner.operands:
                if operand.name not in seen:
                    seen.add(operand.name)
                    uses[operand.name].append(op)
    return uses


def window_updates(op: ir.Op) -> dict[int, int]:
    """{operand: result} for an op whose result is that operand with some elements
    replaced (``dynamic_update_slice``, ``scatter``: its record's ``updates``)."""
    updates = registry.record(op.name).updates
    return updates(op) if updates is not None else {}


def callee(module: ir.Module, op: ir.Op) -> ir.Function | None:
    """The function ``op`` calls, if it is a call (an op with a ``callee``)."""
    target = op.attr("callee")
    if target is None:
        return None
    return module.functions.get(target.name if isinstance(target, ir.SymbolRef)
                                else str(target))


def updates_in_results(block: ir.Block, destinations: dict[str, str]) -> None:
    """A function result made by a chain of updates (``zeros.at[a].set(u).at[b].set(v)``)
    is built in its own array: the operand of an update whose result goes into an array
    goes there too, if the update is its only user, so each update is in place
    (``Builder.claim_in_place``) and nothing is copied. Only for the entry function, whose
    result arrays nothing reads."""
    uses = collect_uses(block.ops)
    produced = {r.name for op in block.ops for r in op.results}
    for op in reversed(block.ops):
        for k, j in window_updates(op).items():
            operand, target = op.operands[k], destinations.get(op.results[j].name)
            if (target is not None and operand.name in produced
                    and operand.name not in destinations
                    and [id(user) for user in uses.get(operand.name, ())] == [id(op)]
                    and sum(v.name == operand.name for v in op.operands) == 1):
                destinations[operand.name] = target


def updates_in_place(module: ir.Module, block: ir.Block, argument: ir.Value,
                     returned: ir.Value) -> bool:
    """Whether ``returned`` may be written into the array that holds ``argument`` while
    ``block`` runs: the op producing ``returned`` reads ``argument`` at the position it
    writes (an elementwise op, the argument's only use), or replaces a window of it
    (``window_updates``), also through calls, every other use of ``argument`` coming
    before it (a stencil reads the array, then updates its interior). What those earlier
    uses leave to be read later (a view, a pending value) is checked when the update is
    translated (``Builder.claim_in_place``), which then writes a new array instead."""
    return _in_place_kind(module, block, argument, returned) is not None


def _in_place_kind(module: ir.Module, block: ir.Block, argument: ir.Value,
                   returned: ir.Value) -> str | None:
    """``"window"`` or ``"elementwise"`` for the update of ``updates_in_place``, else None.
    Only a window update, which checks what is left to read when it is translated, may
    follow other uses of the array; an elementwise one (written by its cluster's map
    whenever that is emitted) must be the only use, at every call level."""
    users = [o for o in block.ops if any(argument == v for inner in o.walk()
                                         for v in inner.operands)]
    user = next((o for o in block.ops if returned in o.results), None)
    if user is None or not users or users[-1] is not user:
        return None
    if registry.elementwise_rule(user) is not None:
        return "elementwise" if len(users) == 1 else None
    if user.operands.count(argument) != 1 or any(
            argument == v for inner in list(user.walk())[1:] for v in inner.operands):
        return None  # not an operand, read twice, or read inside a region of the op
    k, j = user.operands.index(argument), user.results.index(returned)
    if window_updates(user).get(k) == j:
        return "window"
    function = callee(module, user)
    if function is None:
        return None
    kind = _in_place_kind(module, function.body.entry, function.arguments[k],
                          function.body.entry.terminator.operands[j])
    return kind if kind == "window" or len(users) == 1 else None
