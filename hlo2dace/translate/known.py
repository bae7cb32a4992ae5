"""Integer values known while translating: what the ops of a block compute from constants
alone, evaluated with NumPy by each op's record (``OpRecord.known``). JAX computes static
indices (``x.at[2:5]``, ``x[::2]``) with iota, broadcasts, arithmetic and concatenations
rather than as one constant, and jaxlib's MLIR ships no StableHLO folder; knowing such
indices lets a translator emit plain strided copies instead of index arithmetic at run
time.

Only integer and boolean values of at most ``LIMIT`` elements are evaluated, by ops whose
records say how (in NumPy, whose integers wrap as StableHLO's do). A while loop's counter,
bound and step are known the same way, as expressions of its carried values
(``counted_loop``)."""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import sympy

from .. import ir
from . import registry

#: the most elements of a value that is evaluated
LIMIT = 1 << 16


def known_value(producers: Mapping[str, ir.Op], value: ir.Value,
                bound: Callable[[ir.Value], np.ndarray | None] = lambda value: None
                ) -> np.ndarray | None:
    """``value``'s elements if the ops of its block (``producers``: value name -> op)
    compute them from constants alone; ``bound(value)``: the elements a value is known
    to hold already (a translator's literal or hidden constant), or None."""
    t = value.type
    if not (isinstance(t, ir.TensorType) and t.is_static and t.size <= LIMIT
            and (ir.is_bool(t.element) or ir.is_integer(t.element)
                 and ir.integer_width(t.element) in (8, 16, 32, 64))):
        return None
    known = bound(value)
    if known is not None:
        return np.asarray(known).reshape(t.shape)
    op = producers.get(value.name)
    evaluate = registry.record(op.name).known if op is not None else None
    if evaluate is None or len(op.results) != 1:
        return None

    def operand(k: int) -> np.ndarray:
        known = known_value(producers, op.operands[k], bound)
        if known is None:
            raise _Unknown
        return known

    try:
        with np.errstate(over="ignore"):
            result = evaluate(op, operand)
    except _Unknown:
        return None
    return None if result is None else np.asarray(result).reshape(t.shape)


class _Unknown(Exception):
    """An operand is not known."""


def result_dtype(op: ir.Op) -> np.dtype:
    """The NumPy dtype of ``op``'s (integer or boolean) result, for the evaluators."""
    t = op.results[0].type
    if ir.is_bool(t.element):
        return np.dtype(np.bool_)
    kind = "u" if ir.is_unsigned(t.element) else "i"
    return np.dtype(f"{kind}{ir.integer_width(t.element) // 8}")


def _symbolic_value(block: ir.Block, value: ir.Value, arguments: dict[str, sympy.Expr]):
    """What ``block`` computes for the 0-d ``value`` from its ``arguments`` (symbols), by
    the ops' value rules (``symbolic.py``): a sympy expression, or None."""
    if value.name in arguments:
        return arguments[value.name]
    op = next((o for o in block.ops if value in o.results), None)
    rule = registry.record(op.name).value_rule if op is not None else None
    if rule is None or len(op.results) != 1 or op.result.type.rank:
        return None
    knowns = []
    for operand in op.operands:
        value = _symbolic_value(block, operand, arguments)
        knowns.append(None if value is None else np.empty(operand.type.shape, dtype=object))
        if value is not None:
            knowns[-1].fill(value)
    try:
        found = rule(op, knowns, [v.type.shape for v in op.operands])
    except (TypeError, ValueError, AttributeError):
        return None
    return None if not found else sympy.sympify(found[0])


def counted_loop(op: ir.Op) -> tuple[int, int | None, int, int] | None:
    """``(counter, bound slot or None, bound constant, step)`` if ``op`` is a counted loop:
    its condition is ``counter < bound`` on a signed integer, the bound a constant or a
    carried value the body passes through, and the body adds a positive constant to the
    counter. Found by computing the condition and the counter's next value as expressions
    of symbols standing for the carried values."""
    cond, body = op.regions[0].entry, op.regions[1].entry
    carried = [sympy.Symbol(f"c{k}", integer=True) for k in range(len(cond.arguments))]
    condition = _symbolic_value(cond, cond.terminator.operands[0],
                       {a.name: c for a, c in zip(cond.arguments, carried)})
    if not isinstance(condition, sympy.StrictLessThan) or condition.lhs not in carried:
        return None
    counter = carried.index(condition.lhs)
    if (cond.arguments[counter].type.element not in ("i32", "i64")
            or cond.arguments[counter].type.rank):
        return None
    bound_slot, bound = None, 0
    if condition.rhs in carried:
        bound_slot = carried.index(condition.rhs)
        if body.terminator.operands[bound_slot] != body.arguments[bound_slot]:
            return None
    elif condition.rhs.is_Integer:
        bound = int(condition.rhs)
    else:
        return None
    step = _symbolic_value(body, body.terminator.operands[counter],
                  {body.arguments[counter].name: carried[counter]})
    step = None if step is None else sympy.expand(step - carried[counter])
    if step is None or not step.is_Integer or int(step) <= 0:
        return None
    return counter, bound_slot, bound, int(step)
