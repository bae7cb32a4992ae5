"""Scopes of the IR walk and what the walk needs to know about them: the live ops of a
block, who uses each value, which function results go into which array, and which updates
may happen in an operand's own array. Nothing here emits code."""

from __future__ import annotations

from collections import ChainMap
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
        ops = ir.live_ops(block, returned)
        producers = {result.name: op for op in ops for result in op.results}
        destinations = dict(destinations or {})
        uses = ir.collect_uses(ops)
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


def replacements(op: ir.Op) -> dict[int, int]:
    """{operand: result} for an op whose result may be made in its operand's array: one
    whose result is the operand with some elements replaced (``dynamic_update_slice``,
    ``scatter``: its record's ``updates``), or a loop's carried value (the loop runs in
    its initial value's array, ``control.py``)."""
    record = registry.record(op.name)
    if record.carries:
        return {k: k for k in range(len(op.results))}
    return record.updates(op) if record.updates is not None else {}


def callee(module: ir.Module, op: ir.Op) -> ir.Function | None:
    """The function ``op`` calls, if it is a call (an op with a ``callee``)."""
    target = op.attr("callee")
    if target is None:
        return None
    return module.functions.get(target.name if isinstance(target, ir.SymbolRef)
                                else str(target))


def updates_in_place(module: ir.Module, block: ir.Block, argument: ir.Value,
                     returned: ir.Value) -> list[ir.Value] | None:
    """The values of ``block`` that may be written into the array holding ``argument``
    while ``block`` runs, on the way to ``returned`` (last), or None: ``returned`` is
    made by an op that reads ``argument`` at the position it writes (an elementwise op,
    the argument's only use), or by a chain of ops that each replace a window of the
    previous value (``x.at[0].set(a).at[1:].set(b)``) or carry it through a loop (a row
    update, then a loop over its elements: ``replacements``), also
    through calls, each the last use of its operand (a stencil reads the array, then
    updates its interior). What the earlier uses leave to be read later (a view, a pending value) is
    checked when an update is translated (``Builder.claim_in_place``), which then writes
    a new array instead."""
    found = _in_place_chain(module, block, argument, returned)
    return None if found is None else found[1]


def _in_place_chain(module: ir.Module, block: ir.Block, argument: ir.Value,
                    returned: ir.Value) -> tuple[str, list[ir.Value]] | None:
    """``(kind, values)`` for ``updates_in_place``, ``kind`` saying how the first value is
    made: ``"window"`` or ``"elementwise"``. Only window updates, which check what is
    left to read when they are translated, may follow other uses of the array; an
    elementwise update (written whenever its cluster's map is emitted) must be the only
    use, at every call level."""
    user = next((o for o in block.ops if returned in o.results), None)
    if user is None:
        return None
    if registry.elementwise_rule(user) is not None:
        users = [o for o in block.ops if any(argument == v for inner in o.walk()
                                             for v in inner.operands)]
        return ("elementwise", [returned]) if users == [user] else None
    j = user.results.index(returned)
    k = next((k for k, m in replacements(user).items() if m == j), None)
    if k is not None:  # a window update of operand k, or a loop that carries it
        operand = user.operands[k]
        if not is_last_reader(block, operand, user):
            return None
        if operand == argument:
            return "window", [returned]
        earlier = _in_place_chain(module, block, argument, operand)
        if earlier is None or earlier[0] != "window":
            return None
        return "window", [*earlier[1], returned]
    function = callee(module, user)
    if function is None or not is_last_reader(block, argument, user):
        return None
    k = user.operands.index(argument)
    inner = _in_place_chain(module, function.body.entry, function.arguments[k],
                            function.body.entry.terminator.operands[j])
    if inner is None:
        return None
    sole = [o for o in block.ops if any(argument == v for v in o.operands)] == [user]
    return (inner[0], [returned]) if inner[0] == "window" or sole else None


def is_last_reader(block: ir.Block, value: ir.Value, user: ir.Op) -> bool:
    """Whether ``user`` is the last op of ``block`` to use ``value``, reads it as one
    operand, and not inside its regions."""
    users = [o for o in block.ops if any(value == v for inner in o.walk()
                                         for v in inner.operands)]
    return (bool(users) and users[-1] is user and user.operands.count(value) == 1
            and not any(value == v for inner in list(user.walk())[1:]
                        for v in inner.operands))
