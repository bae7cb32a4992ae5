"""The plan's decisions about memory: which values are computed straight into the entry
function's result arrays (``result_destinations``), which updates may write their
operand's own array (``update_in_place``), which loops may run in their initial values'
arrays (``loop_buffers``), whose bodies write their carries in place
(``carries_in_place``) and which alternate between two buffers (``swap_loop_buffers``),
and what a scatter's copy of its operand may skip
(``skip_replaced_windows``)."""

from __future__ import annotations

import dataclasses

from .. import ir
from ..translate.bindings import at_most
from ..translate.known import counted_loop, known_value
from ..translate.registry import record
from ..translate.scopes import is_last_reader, replacements, updates_in_place
from ..translate.windows import box, replaces, scatter_numbers, strided_window, windows
from .analysis import BlockUses
from .annotations import (
    CarriesInPlace,
    Destinations,
    Fusion,
    InPlace,
    ReplacedLater,
    ScatterPerWindow,
    SwappedCarries,
    annotated,
    annotation,
)
from .passes import PassContext, rewrite_blocks

#: the most later updates whose boxes a scatter's copy of its operand leaves out
LATER_UPDATES = 64


def skip_replaced_windows(block: ir.Block, uses: BlockUses, context: PassContext
                          ) -> list[ir.Op]:
    """A scatter whose result only ``.set``s of known boxes read, one after the other
    (``x.at[1:-1, 0].set(u)`` then ``.at[0].set(v)``), copies its operand into its result
    without those boxes, which the later ``.set``s write before anything reads them
    (``ReplacedLater``)."""
    ops = []
    for op in block.ops:
        if op.name == "stablehlo.scatter" and len(op.operands) == 3:
            boxes = _replaced_later(uses, op.results[0])
            if boxes:
                op = annotated(op, ReplacedLater(tuple(tuple(b) for b in boxes)))
        ops.append(op)
    return ops


def scatter_per_window(block: ir.Block, uses: BlockUses, context: PassContext
                       ) -> list[ir.Op]:
    """A select_and_scatter whose windows share no element (every stride at least its
    window: max pooling's gradient) selects once per window and writes that window's
    choice (``ScatterPerWindow``), as XLA's loop over the source does: gathered per
    element, a 2x2 window's selection was computed four times, in scalar loops (a small
    CNN's gradient spent 58% of its time there, at 1.3x XLA's time)."""
    ops = []
    for op in block.ops:
        if op.name == "stablehlo.select_and_scatter" and op.operands[0].type.is_static:
            rank = op.operands[0].type.rank
            window = [int(v) for v in op.attr("window_dimensions")]
            strides = [int(v) for v in op.attr("window_strides", (1,) * rank)]
            if all(s >= w for s, w in zip(strides, window)):
                op = annotated(op, ScatterPerWindow())
        ops.append(op)
    return ops


def _replaced_later(uses: BlockUses, value: ir.Value) -> list[list[tuple[int, int]]]:
    """Boxes of ``value`` that later ops replace before anything reads them: its one
    reader is a ``.set`` of a known box into it, whose result is followed the same way
    (a function result is read by the return)."""
    boxes = []
    while len(boxes) < LATER_UPDATES:
        readers = uses.readers(value)
        if len(readers) != 1 or readers[0].name != "stablehlo.scatter":
            break
        (user,) = readers
        numbers = scatter_numbers(user)
        if (numbers is None or len(user.operands) != 3 or user.operands[0] != value
                or value in user.operands[1:] or not replaces(user.regions[0], 1)):
            break
        shape, update_shape = value.type.shape, user.operands[2].type.shape
        strided = strided_window(user, numbers, *windows(numbers, shape, update_shape),
                                 lambda v: known_value(uses.producers, v))
        found = box(strided, update_shape) if strided is not None else None
        if found is None:
            break
        boxes.append(found)
        value = user.results[0]
    return boxes


def result_destinations(module: ir.Module, context: PassContext) -> ir.Module:
    """The values the entry function returns are computed straight into its result arrays
    (``Destinations``), and so is a result made by a chain of updates
    (``zeros.at[a].set(u).at[b].set(v)``) or of loops, each step in the array of the last
    (each the last reader of its operand: earlier readers read it there), and a product
    whose result only a reshape or a ``.set`` of every element brings to a result
    (``same_memory``), which writes the array in its own shape (``whole_result``)."""
    try:
        entry = module.functions[context.entry] if context.entry else module.main
    except LookupError:
        return module  # the builder says what is missing
    block = entry.body.entry
    produced = {r.name for op in block.ops for r in op.results}
    destinations: dict[str, int] = {}
    for k, (value, t) in enumerate(zip(block.terminator.operands, entry.result_types)):
        if isinstance(t, ir.TensorType) and value.name in produced \
                and value.name not in destinations:
            destinations[value.name] = k
    _chains(block, destinations)
    ops = []
    for op in block.ops:
        found = tuple(destinations.get(r.name, -1) for r in op.results)
        ops.append(annotated(op, Destinations(found)) if any(k >= 0 for k in found) else op)
    body = ir.Region((ir.Block(block.arguments, tuple(ops)), *entry.body.blocks[1:]))
    functions = dict(module.functions)
    functions[entry.name] = dataclasses.replace(entry, body=body)
    return dataclasses.replace(module, functions=ir.freeze(functions))


def _chains(block: ir.Block, destinations: dict[str, int]) -> None:
    """Add to ``destinations`` (value name -> function result) the operands of updates,
    loops and same-memory ops on the way to a result (``result_destinations``)."""
    producers = {r.name: op for op in block.ops for r in op.results}
    uses = ir.collect_uses(block.ops)

    def written_whole(value: ir.Value) -> bool:
        producer = producers.get(value.name)
        if producer is None:
            return False
        k = _same_memory(producer)
        return record(producer.name).whole_result or (
            k is not None and written_whole(producer.operands[k]))

    for op in reversed(block.ops):
        for k, j in replacements(op).items():
            operand, target = op.operands[k], destinations.get(op.results[j].name)
            if (target is not None and operand.name in producers
                    and operand.name not in destinations and is_last_reader(block, operand, op)):
                destinations[operand.name] = target
        k = _same_memory(op)
        if k is not None and op.results[0].name in destinations:
            operand = op.operands[k]
            if (operand.name not in destinations and written_whole(operand)
                    and [id(user) for user in uses[operand.name]] == [id(op)]
                    and op.operands.count(operand) == 1):
                destinations[operand.name] = destinations[op.results[0].name]


def _same_memory(op: ir.Op) -> int | None:
    """The operand whose elements ``op``'s result is in row-major order (its record's
    ``same_memory``), or None."""
    rule = record(op.name).same_memory
    return rule(op) if rule is not None else None


def update_in_place(block: ir.Block, uses: BlockUses, context: PassContext) -> list[ir.Op]:
    """An update of a window (``dynamic_update_slice``, a scatter) that is the last reader
    of an operand computed in its block writes its result into that operand's array, as
    XLA reuses a dead operand's buffer (``InPlace``; the lowering does where nothing
    still to be read shares the array)."""
    ops = []
    for op in block.ops:
        rule = record(op.name).updates
        if rule is not None:
            op = _in_place(op, uses, list(rule(op)))
        ops.append(op)
    return ops


def loop_buffers(block: ir.Block, uses: BlockUses, context: PassContext) -> list[ir.Op]:
    """A loop that is the last reader of a carried value's initial value, computed in its
    block, runs in that value's array for the whole loop, with no copy (``InPlace``):
    NPBench's vadv chains five loops over the same columns, which each copied them
    whole."""
    ops = []
    for op in block.ops:
        if record(op.name).carries:
            op = _in_place(op, uses, list(range(len(op.operands))))
        ops.append(op)
    return ops


def carries_in_place(block: ir.Block, uses: BlockUses, context: PassContext) -> list[ir.Op]:
    """A loop body that computes a carried value in its elementwise map of one shape, which
    alone reads the carry, writes it into the carry's array (``CarriesInPlace``): the map
    reads each element before it writes it, where a copy back would cost a pass over the
    array per iteration (15% of a Collatz ``while_loop`` over 100,000 integers)."""
    return [_with_carries_in_place(op) if record(op.name).carries else op for op in block.ops]


def _with_carries_in_place(op: ir.Op) -> ir.Op:
    body = op.regions[1].entry
    producers = {r.name: o for o in body.ops for r in o.results}
    in_place = []
    for k, (carry, value) in enumerate(zip(body.arguments, body.terminator.operands)):
        producer = producers.get(value.name)
        fusion = producer and annotation(producer, Fusion)
        if fusion is None:
            continue
        group = [o for o in body.ops if annotation(o, Fusion) == fusion]
        members = {id(o) for o in group}
        values = {r.name for o in group for r in o.results}
        outside = [o for o in body.ops[:-1] if id(o) not in members]
        # every reader of the carry is in the map, and the map is one: nothing outside it
        # reads its values (which would close it early) but the terminator
        if (not any(carry == v for o in outside + [body.terminator] for inner in o.walk()
                    for v in inner.operands)
                and not any(v.name in values for o in outside for inner in o.walk()
                            for v in inner.operands)):
            in_place.append(k)
    return annotated(op, CarriesInPlace(tuple(in_place))) if in_place else op


def swap_loop_buffers(module: ir.Module, context: PassContext) -> ir.Module:
    """A counted loop's carried value that an op of its body computes and cannot update in
    place (a stencil reads its neighbours) alternates between two buffers, two iterations a
    trip, where it is large enough (``Machine.swap_elements``) for a copy per iteration to
    cost more than a second copy of the body's code (``SwappedCarries``)."""
    def rewrite(block: ir.Block, uses: BlockUses, context: PassContext) -> list[ir.Op]:
        return [_swapped(module, op, context.machine.swap_elements)
                if op.name == "stablehlo.while" else op for op in block.ops]

    return rewrite_blocks(module, context, rewrite)


def _swapped(module: ir.Module, op: ir.Op, smallest: int) -> ir.Op:
    counted = counted_loop(op)
    if counted is None:
        return op
    body = op.regions[1].entry
    produced = {r.name for inner in body.ops for r in inner.results}
    in_place = annotation(op, CarriesInPlace)
    swapped, seen = [], set()
    for k, value in enumerate(body.terminator.operands):
        if (k != counted[0] and value.name not in seen and value.name in produced
                and not at_most(value.type.size, smallest - 1)
                and not (in_place and k in in_place.operands)
                and not updates_in_place(module, body, body.arguments[k], value)):
            swapped.append(k)
            seen.add(value.name)
    return annotated(op, SwappedCarries(tuple(swapped))) if swapped else op


def _in_place(op: ir.Op, uses: BlockUses, candidates: list[int]) -> ir.Op:
    """``op`` annotated with the ``candidates`` operands computed in its block (not an
    argument, whose array is the caller's) of which it is the last reader, reading them
    once and not in its regions."""
    def last(value: ir.Value) -> bool:
        return (uses.last_reader(value) is op and op.operands.count(value) == 1
                and not any(value == v for inner in list(op.walk())[1:]
                            for v in inner.operands))

    operands = tuple(k for k in candidates if uses.producer(op.operands[k]) is not None
                     and last(op.operands[k]))
    return annotated(op, InPlace(operands)) if operands else op
