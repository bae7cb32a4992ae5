"""Integer values known while translating: what the ops of a block compute from constants
alone, evaluated with NumPy by each op's record (``OpRecord.known``). JAX computes static
indices (``x.at[2:5]``, ``x[::2]``) with iota, broadcasts, arithmetic and concatenations
rather than as one constant, and jaxlib's MLIR ships no StableHLO folder; knowing such
indices lets a translator emit plain strided copies instead of index arithmetic at run
time.

Only integer and boolean values of at most ``LIMIT`` elements are evaluated, by ops whose
records say how (in NumPy, whose integers wrap as StableHLO's do)."""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

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
