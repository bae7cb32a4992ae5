"""Loops the plan replaces by their trips (``unroll_short_loops``).

A counted loop of a few trips whose body is elementwise work on arrays (JAX's threefry
random bits: five trips of four rounds over every generated word) runs one map per trip,
each reading and writing the carried arrays whole. Unrolled, the trips' ops are one chain
of elementwise ops that ``fuse_elementwise`` makes one map, which the ops before and after
the loop join (the uniform floats made from the bits, a reduction of them): the arrays
are never written between trips. XLA keeps such loops (its CPU pipeline has no unroller:
``known_trip_count`` 5 in its optimised HLO of ``jax.random.normal``).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from .. import ir
from ..translate.known import counted_loop
from ..translate.registry import elementwise_rule
from .analysis import BlockUses
from .passes import PassContext

#: the most trips a loop is unrolled to, and the most ops its trips copy together
MAX_TRIPS = 8
MAX_UNROLLED_OPS = 512
#: ops of a body that may be unrolled besides elementwise ones: shapes and constants
SHAPE_OPS = frozenset(("stablehlo.constant", "stablehlo.broadcast_in_dim", "stablehlo.reshape",
                       "stablehlo.iota"))
#: ops that may move elements to other positions: unrolled only on small values
NEIGHBOUR_OPS = frozenset(("stablehlo.slice", "stablehlo.concatenate"))
#: the most elements of a value computed from constants that is folded into one
MAX_FOLDED = 64
#: integer arithmetic folded as NumPy computes it in the operands' type (wrapping)
FOLDED_ARITHMETIC = {"stablehlo.add": np.add, "stablehlo.subtract": np.subtract,
                     "stablehlo.multiply": np.multiply}

def unroll_short_loops(block: ir.Block, uses: BlockUses, context: PassContext) -> list[ir.Op]:
    """The block with each counted loop of at most ``MAX_TRIPS`` trips whose body is
    elementwise work (``_unrollable``) replaced by copies of its body, one per trip; the
    loop's results are the last trip's values."""
    ops: list[ir.Op] = []
    renamed: dict[str, ir.Value] = {}
    constants = {name: value for name, producer in uses.producers.items()
                 if (value := ir.constant_value(producer)) is not None}
    for op in block.ops:
        op = _substituted(op, renamed) if renamed else op
        trips = _trips(op, uses) if op.name == "stablehlo.while" else None
        if trips is None:
            ops.append(op)
            continue
        carried = list(op.operands)
        body = op.regions[1].entry
        site = re.sub(r"\W", "_", op.results[0].name[1:]) if op.results else "loop"
        for trip in range(trips):
            names = {a.name: v for a, v in zip(body.arguments, carried)}
            for inner in body.ops[:-1]:
                results = tuple(ir.Value(f"%{site}_trip{trip}_{r.name[1:]}", r.type)
                                for r in inner.results)
                names.update((r.name, new) for r, new in zip(inner.results, results))
                copy = dataclasses.replace(
                    inner, operands=tuple(names.get(v.name, v) for v in inner.operands),
                    results=results)
                value = _folded(copy, constants)
                if value is not None:
                    constants[copy.result.name] = value
                    copy = ir.constant_op(copy.result.name, copy.result.type, value,
                                          copy.location)
                ops.append(copy)
            carried = [names.get(v.name, v) for v in body.terminator.operands]
        renamed.update((r.name, v) for r, v in zip(op.results, carried))
    return ops


def _trips(op: ir.Op, uses: BlockUses) -> int | None:
    """The number of trips of the loop ``op`` where it is to be unrolled, else None."""
    counted = counted_loop(op)
    if counted is None:
        return None
    counter, bound_slot, bound, step = counted
    start = uses.producer(op.operands[counter])
    if bound_slot is not None or start is None or start.name != "stablehlo.constant":
        return None
    trips = trip_count(int(np.asarray(start.attributes["value"].array)), bound, step,
                       op.operands[counter].type.element)
    body = op.regions[1].entry
    if trips is None or trips > MAX_TRIPS or trips * len(body.ops) > MAX_UNROLLED_OPS:
        return None
    if not all(_unrollable(inner) for inner in (*op.regions[0].entry.ops[:-1],
                                               *body.ops[:-1])):
        return None
    return trips


def trip_count(start: int, bound: int, step: int, element: str) -> int | None:
    """How often ``for (i = start; i < bound; i += step)`` runs on the signed integers
    ``element``; None where the counter would pass the type's largest value (it wraps and
    the loop goes on)."""
    trips = max(0, -(-(bound - start) // step))
    largest = (1 << (ir.integer_width(element) - 1)) - 1
    return trips if start + trips * step <= largest else None


def _folded(op: ir.Op, constants: dict[str, np.ndarray]) -> np.ndarray | None:
    """The value of ``op`` where it moves, joins or does integer arithmetic on ``constants`` alone
    and is small (``MAX_FOLDED`` elements), else None."""
    if len(op.results) != 1 or not all(v.name in constants for v in op.operands):
        return None
    t = op.result.type
    if not isinstance(t, ir.TensorType) or not all(isinstance(d, int) for d in t.shape) \
            or int(np.prod(t.shape)) > MAX_FOLDED:
        return None
    values = [constants[v.name] for v in op.operands]
    if op.name == "stablehlo.constant":
        return ir.constant_value(op)
    if op.name == "stablehlo.reshape":
        return values[0].reshape(t.shape)
    if op.name == "stablehlo.concatenate":
        return np.concatenate(values, axis=int(op.attr("dimension")))
    if op.name == "stablehlo.slice":
        return values[0][tuple(slice(int(a), int(b), int(c)) for a, b, c in zip(
            op.attr("start_indices"), op.attr("limit_indices"), op.attr("strides")))]
    if op.name in FOLDED_ARITHMETIC and ir.is_integer(t.element) and not ir.is_bool(t.element):
        return FOLDED_ARITHMETIC[op.name](*values, dtype=values[0].dtype)
    return None


def _unrollable(op: ir.Op) -> bool:
    """Whether ``op`` may be copied per trip: elementwise or a shape op, with no region
    (a nested loop is unrolled first, or the loop around it stays). Slices and
    concatenations only of small values: of large ones they are a stencil's neighbours,
    which unrolled trips would recompute from each other's."""
    if op.regions:
        return False
    if op.name in NEIGHBOUR_OPS:
        t = op.results[0].type
        return isinstance(t, ir.TensorType) and all(isinstance(d, int) for d in t.shape) \
            and int(np.prod(t.shape)) <= MAX_FOLDED
    return op.name in SHAPE_OPS or elementwise_rule(op) is not None


def _substituted(op: ir.Op, renamed: dict[str, ir.Value]) -> ir.Op:
    """``op`` reading ``renamed``'s values for the names it maps, in its regions too."""
    def block(b: ir.Block) -> ir.Block:
        return ir.Block(b.arguments, tuple(_substituted(o, renamed) for o in b.ops))

    return dataclasses.replace(
        op, operands=tuple(renamed.get(v.name, v) for v in op.operands),
        regions=tuple(ir.Region(tuple(block(b) for b in r.blocks)) for r in op.regions))
