"""Indexing ops: ``stablehlo.gather`` and ``stablehlo.scatter`` with every dimension
number of the spec (batching dimensions included), start indices of any integer type and
variadic scatters with any update body made of elementwise ops.

A gather is one map over its result: each element reads its start index vector, clamps
it as the spec says and reads the operand (in place, also through a view). A scatter
copies its operands into its results, then applies the updates in a map or a loop that
keeps XLA's order wherever the order can change a result: updates whose window leaves the
operand anywhere are dropped whole, and updates that meet at one element are combined one
after another, in the row-major order of the update's scatter index. Only where that order
cannot matter do updates run in parallel (see ``_plan``)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Sequence

import dace
import numpy as np

from .. import ir
from ..plan.annotations import ComputedByReaders, ReplacedLater, annotation
from . import dtypes, registry
from .bindings import (
    Array,
    Axis,
    Binding,
    Gathered,
    Literal,
    Pending,
    PendingView,
    View,
    flat_index,
    map_params,
    view_of,
)
from .builder import Builder, Reader
from .cpp import Loop, Writer
from .emitter import Element, Whole, pieces_to_copy, schedule_for
from .registry import register
from .shape import clamped_starts
from .windows import box, replaces, strided_window, windows

#: the fewest window elements of a scatter that one map iteration updates (see ``_plan``)
CHUNK = 64


def _start_index(read_index: Reader, batch: Sequence[str], index_vector_dim: int, k: int,
                 rank: int) -> str:
    """C++ for component ``k`` of the start index vector of the batch position ``batch``
    (``index_vector_dim == rank``: each index is a vector of one component)."""
    position = list(batch)
    if index_vector_dim < rank:
        position.insert(index_vector_dim, str(k))
    return f"(int64_t)({read_index(position)})"


def _sum(terms: Sequence[str]) -> str:
    return " + ".join(f"(int64_t)({t})" for t in terms) or "0"


def _numbers(b: Builder, op: ir.Op, name: str) -> dict:
    numbers = op.attr(name)
    if not isinstance(numbers, ir.StructAttr):
        raise b.unsupported(f"{name} {numbers!r}")
    return {key: tuple(int(v) for v in value) if isinstance(value, tuple) else int(value)
            for key, value in numbers.fields.items()}


# -------------------------------------------------------------------------- gather


@dataclass(frozen=True)
class _GatherDimensions:
    """A gather's dimension numbers."""

    offset_dims: tuple[int, ...]
    collapsed: tuple[int, ...]
    operand_batching: tuple[int, ...]
    indices_batching: tuple[int, ...]
    start_index_map: tuple[int, ...]
    index_vector_dim: int

    @staticmethod
    def of(numbers: dict) -> _GatherDimensions:
        return _GatherDimensions(
            numbers.get("offset_dims", ()), numbers.get("collapsed_slice_dims", ()),
            numbers.get("operand_batching_dims", ()),
            numbers.get("start_indices_batching_dims", ()),
            numbers.get("start_index_map", ()), numbers.get("index_vector_dim", 0))


@register("stablehlo.gather")
def gather(b: Builder, op: ir.Op) -> list[Binding]:
    """One map over the result: each element reads its start index vector, clamps it
    as the spec says, and reads the operand in place (through a view's source too), so a
    gather writes nothing but its result."""
    operand, indices = op.operands
    dims = _GatherDimensions.of(_numbers(b, op, "dimension_numbers"))
    offset_dims, collapsed = dims.offset_dims, dims.collapsed
    operand_batching, indices_batching = dims.operand_batching, dims.indices_batching
    start_index_map, index_vector_dim = dims.start_index_map, dims.index_vector_dim
    sizes = tuple(int(s) for s in op.attr("slice_sizes"))
    t = op.result.type
    dtypes.of(t, op.name, op.location)
    shape = operand.type.shape

    lazy = annotation(op, ComputedByReaders) is not None and not b.destination(op.result)
    if lazy:  # an operand the plan fused into the gather is computed where gathered
        b.absorb(op.operands[:1], op, ())
    source = b.binding(operand) if lazy and b.absorbed(b.binding(operand)) \
        else b.readable(operand)
    if source.is_literal:
        return [Literal(source.value, t)]
    if lazy:
        return [_lazy_gather(b, op, source, dims, sizes)]
    target = b.allocate_result(op.result)
    if t.size == 0:
        return [target]
    arrays: dict[str, Array] = {}
    read_operand = b.reader(operand, "__src", arrays)
    read_index = b.reader(indices, "__idx", arrays)
    batch = [f"__i{d}" for d in range(t.rank) if d not in offset_dims]
    starts = [_start_index(read_index, batch, index_vector_dim, k, indices.type.rank)
              for k in range(len(start_index_map))]
    clamped = clamped_starts([indices] * len(starts), starts,
                              [sizes[d] for d in start_index_map],
                              [shape[d] for d in start_index_map])
    lines = [f"const int64_t __start{k} = {c};" for k, c in enumerate(clamped)]
    offsets = iter(f"__i{d}" for d in offset_dims)
    window = {d: next(offsets) for d in range(operand.type.rank)
              if d not in collapsed and d not in operand_batching}
    position = _operand_position(operand.type.rank, start_index_map, operand_batching,
                                 indices_batching, batch, index_vector_dim, window)
    lines.append(f"__out = {read_operand(position)};")
    b.emit.map("gather", t.shape, "\n".join(lines),
               {conn: Whole(array) for conn, array in arrays.items()},
               {"__out": Element(target)})
    return [target]


def _lazy_gather(b: Builder, op: ir.Op, source: Array | View | Pending,
                 dims: _GatherDimensions, sizes: Sequence[int]) -> Gathered:
    """A gather bound lazily (``Gathered``): the elementwise maps that read it gather each
    element themselves. Start ``k`` is component ``k`` of the index vector at the result's
    batch position, as a view of the indices; the window's offsets are the result's
    offset dimensions."""
    operand, indices = op.operands
    t = op.result.type
    start_index_map, index_vector_dim = dims.start_index_map, dims.index_vector_dim
    batch = [d for d in range(t.rank) if d not in dims.offset_dims]
    index = b.binding(indices)
    if not isinstance(index, (Pending, PendingView, Gathered)):
        index = b.readable(indices)
    starts = []
    for k in range(len(start_index_map)):
        positions = iter(batch)
        axes = [Axis(None, 0, k) if e == index_vector_dim else Axis(next(positions))
                for e in range(indices.type.rank)]
        starts.append(view_of(index, axes, ir.TensorType(t.shape, indices.type.element)))
    offsets = iter(dims.offset_dims)
    position = []
    for d in range(operand.type.rank):
        start = list(start_index_map).index(d) if d in start_index_map else None
        if d in dims.operand_batching:
            d_start = dims.indices_batching[list(dims.operand_batching).index(d)]
            position.append((start, Axis(batch[d_start - (d_start > index_vector_dim)])))
        elif d in dims.collapsed:
            position.append((start, Axis(None, 0, 0)))
        else:  # the offset in the window
            position.append((start, Axis(next(offsets))))
    return Gathered(source, tuple(starts),
                    tuple(operand.type.shape[d] - sizes[d] for d in start_index_map),
                    tuple(position), b.emit.origin(), t)


def _operand_position(rank: int, start_dims: Sequence[int], operand_batching: Sequence[int],
                      indices_batching: Sequence[int], batch: Sequence[str],
                      index_vector_dim: int, window: dict[int, str]) -> list[str]:
    """The operand element that gather reads or scatter writes, as one C++ sum per
    dimension: the start index (``__start<k>``) along ``start_dims``, the batch position
    along the operand's batching dimensions, and the offset in the window (``window``)."""
    position = []
    for d in range(rank):
        terms = []
        if d in start_dims:
            terms.append(f"__start{list(start_dims).index(d)}")
        if d in operand_batching:
            d_start = indices_batching[list(operand_batching).index(d)]
            terms.append(batch[d_start - (d_start > index_vector_dim)])
        if d in window:
            terms.append(window[d])
        position.append(_sum(terms))
    return position


# ------------------------------------------------------------------------- scatter




def _update_strided(b: Builder, op: ir.Op, targets: Sequence[Array],
                    boxes: Sequence[tuple[int, int, int | None]]) -> None:
    """The scatter as one map over the updates that applies the body to the elements of
    the strided box ``boxes`` (see ``windows.strided_window``): no index arithmetic at run time."""
    n = len(targets)
    updates, region = op.operands[n + 1:], op.regions[0].entry
    rank = updates[0].type.rank
    params = map_params(rank)
    position = ", ".join(str(offset) if dim is None else
                         f"{offset} + {stride} * {params[dim]}" if stride != 1 or offset else
                         params[dim] for offset, stride, dim in boxes) or "0"
    computed: list[str] = []
    inputs, names = b.element_reads(updates, rank, "__x", computed)
    current = []
    for k, target in enumerate(targets):
        # read even where the body ignores it: orders the map after the operand's copy
        inputs[f"__c{k}"] = dace.Memlet(f"{target.name}[{position}]")
        current.append(dtypes.of(target.type).load(f"__c{k}"))
    body, returned = b.scalar_region(region, current + names, "__v")
    elements = [dtypes.of(target.type) for target in targets]
    code = computed + body + [f"__r{k} = {e.store(r)};"
                              for k, (e, r) in enumerate(zip(elements, returned))]
    b.emit.map("scatter", updates[0].type.shape, "\n".join(code), inputs,
               {f"__r{k}": dace.Memlet(f"{target.name}[{position}]")
                for k, target in enumerate(targets)}, max(1, len(computed)))


#: the most bytes of an operand's last dimensions that a ``.set`` of one element of them
#: writes whole (``_block``)
BLOCK_BYTES = 64


def _block(box: Sequence[tuple[int, int]], shape: Sequence[int], item: int) -> int | None:
    """The first of the last dimensions of ``shape`` that hold at most ``BLOCK_BYTES``
    together and in which a ``.set``'s ``box`` is one element (``tke.at[2:-2, 2:-2, :,
    1].set``: the last dimension), if the box is partial there: copying the operand
    around such a box touches every cache line the box touches, so the ``.set`` writes
    these dimensions whole instead (``_update_blocks``). None where there are none."""
    first = len(shape)
    while (first and box[first - 1][1] - box[first - 1][0] == 1
           and int(np.prod(shape[first - 1:], dtype=np.int64)) * item <= BLOCK_BYTES):
        first -= 1
    return first if int(np.prod(shape[first:], dtype=np.int64)) > 1 else None


def _update_blocks(b: Builder, op: ir.Op, target: Array, operand: ir.Value, first: int,
                   boxes: Sequence[tuple[int, int, int | None]]) -> None:
    """A ``.set`` of a strided box (``windows.strided_window``) as one map over the updates in
    which each update writes the dimensions of the operand from ``first`` on whole
    (``_block``): its element, and the operand's elements beside it, so that each cache
    line there is read and written once (a copy, then the update, write it twice)."""
    updates = op.operands[2:]
    shape, rank = target.type.shape, updates[0].type.rank
    params = map_params(rank)
    computed: list[str] = []
    inputs, names = b.element_reads(updates, rank, "__x", computed)
    arrays: dict[str, Array] = {}
    read = b.reader(operand, "__src", arrays)
    outer = [str(offset) if dim is None else f"{offset} + {stride} * (int64_t){params[dim]}"
             for offset, stride, dim in boxes[:first]]
    own = tuple(offset for offset, _, _ in boxes[first:])
    element = dtypes.of(target.type)
    code = [*computed, f"const auto __u = {element.store(names[0])};"]
    for inner in np.ndindex(*shape[first:]):
        at = flat_index(shape, [*outer, *map(str, inner)])
        code.append(f"__dst[{at}] = " + ("__u" if inner == own else
                                         read([*outer, *map(str, inner)])) + ";")
    inputs.update((conn, Whole(array)) for conn, array in arrays.items())
    inputs["__prev"] = Whole(target)  # after the copy of the rest of the operand
    b.emit.map("scatter", updates[0].type.shape, "\n".join(code), inputs,
               {"__dst": Whole(target)}, max(1, len(computed)))




def _order_free(region: ir.Region, element: dtypes.ElementType) -> bool:
    """Whether the body is one associative, commutative op of its two arguments (one with
    an identity: its record says) whose result is exact in ``element`` (an integer or a
    boolean: wrapping arithmetic is exact), so concurrent updates may apply in any
    order."""
    block = region.entry
    if len(block.ops) != 2 or not (element.is_integer or element.is_bool):
        return False
    body, terminator = block.ops
    return (registry.record(body.name).identity is not None and len(body.operands) == 2
            and {v.name for v in body.operands} == {v.name for v in block.arguments}
            and terminator.operands[0].name == body.result.name)


def _plan(op: ir.Op, numbers: dict, window_of: dict[int, int],
          atomic: bool) -> tuple[tuple[int, ...], int]:
    """How the updates are spread over a map: the update dimensions it runs over, and the
    length of the chunks of the (flattened) remaining window it also runs over (0: none).
    Every dimension with atomic updates or unique indices. Otherwise the batching
    dimensions, whose updates never meet; and chunks of the window if every window
    dimension that an index moves spans its whole operand dimension, so that in-bounds
    windows start at 0 there and different window positions never meet (contiguous
    chunks of ``CHUNK`` elements or more: threads that share cache lines are slow). The
    rest is looped over in order in each iteration: updates that meet combine in order."""
    updates = op.operands[len(op.operands) // 2 + 1]
    rank = updates.type.rank
    if atomic or op.attr("unique_indices", False):
        return tuple(range(rank)), 0
    window_dims = numbers.get("update_window_dims", ())
    scatter_dims = [d for d in range(rank) if d not in window_dims]
    ivd = numbers.get("index_vector_dim", 0)
    batching = tuple(sorted(scatter_dims[d - (d > ivd)]
                            for d in numbers.get("scatter_indices_batching_dims", ())))
    window = int(np.prod([updates.type.shape[d] for d in window_dims], dtype=np.int64))
    shape = op.operands[0].type.shape
    if window < 2 * CHUNK or any(d in window_of and updates.type.shape[window_of[d]] != shape[d]
                                 for d in numbers.get("scatter_dims_to_operand_dims", ())):
        return batching, 0
    return batching, -(-window // (window // CHUNK))


def _sets_every_element(op: ir.Op) -> int | None:
    """The updates operand of ``x.at[:].set(y)`` with ``y`` of ``x``'s shape (no index
    components, every dimension a window dimension in order): the result is ``y``."""
    numbers = op.attr("scatter_dimension_numbers")
    if len(op.operands) != 3 or not isinstance(numbers, ir.StructAttr):
        return None
    fields = {key: tuple(value) if isinstance(value, tuple) else value
              for key, value in numbers.fields.items()}
    rank = op.operands[0].type.rank
    every = (not fields.get("scatter_dims_to_operand_dims")
             and not fields.get("inserted_window_dims")
             and not fields.get("input_batching_dims")
             and tuple(map(int, fields.get("update_window_dims", ()))) == tuple(range(rank))
             and op.operands[2].type.shape == op.operands[0].type.shape)
    return 2 if every and replaces(op.regions[0], 1) else None










@register("stablehlo.scatter", updates=lambda op: {k: k for k in range(len(op.results))},
          same_memory=_sets_every_element)
def scatter(b: Builder, op: ir.Op) -> list[Binding]:
    """The operands copied into the results (or the results are the operands' own
    arrays, updated in place), then the updates applied by one map whose iterations split
    the updates as ``_plan`` allows, each looping over the rest in order. A box of
    updates known at translation time (``windows.strided_window``) is one map over the updates
    with no index arithmetic; order-free updates into large integer results run in
    parallel with a compare-and-swap per element. A ``.set`` of every element at its
    own position is its updates, unless its results have arrays to go into."""
    n = (len(op.operands) - 1) // 2
    inputs, indices, updates = op.operands[:n], op.operands[n], op.operands[n + 1:]
    numbers = _numbers(b, op, "scatter_dimension_numbers")
    window_dims = numbers.get("update_window_dims", ())
    input_batching = numbers.get("input_batching_dims", ())
    indices_batching = numbers.get("scatter_indices_batching_dims", ())
    to_operand = numbers.get("scatter_dims_to_operand_dims", ())
    index_vector_dim = numbers.get("index_vector_dim", 0)
    shape, update_shape = inputs[0].type.shape, updates[0].type.shape
    elements = [dtypes.of(v.type, op.name, op.location) for v in op.results]
    update_elements = [dtypes.of(v.type, op.name, op.location) for v in updates]

    window_of, window_sizes = windows(numbers, shape, update_shape)
    strided = strided_window(op, numbers, window_of, window_sizes, b.known)
    # a ``.set`` of every element (``x.at[:].set(y)``): the operands are not copied first
    replaced = strided is not None and replaces(op.regions[0], n) and all(
        offset == 0 and (size == 1 if dim is None else update_shape[dim] == size
                         and (stride == 1 or size == 1))
        for (offset, stride, dim), size in zip(strided, shape))
    if replaced and update_shape == shape and (
            not any(b.destination(r) for r in op.results)
            or b.binding(updates[0]).is_array(b.destination(op.results[0]))):
        # each element set to the update at its own position (window dimensions keep
        # their order): the results are the updates, as XLA's simplifier makes them
        # (a product may have written them into the result's array: ``same_memory``)
        for result in op.results:
            b.claim(result)
        return [b.binding(v) for v in updates]
    if strided is not None:
        b.absorb(updates, op, inputs,
                 [Axis(dim, stride, offset) for offset, stride, dim in strided])

    targets, blocked = [], None
    for value, result in zip(inputs, op.results):
        source = b.readable(value)
        target = b.claim_in_place(value, op, result) or b.allocate_result(result)
        if not source.is_array(target.name) and not replaced:  # else in place
            # not the elements that this op and the next ones replace before any read
            own = box(strided, update_shape) if strided is not None and replaces(
                op.regions[0], n) else None
            later = annotation(op, ReplacedLater)
            skipped = [*filter(None, [own]), *(later.boxes if later is not None else ())]
            whole = own is not None and n == 1 \
                and pieces_to_copy(value.type, skipped, b.machine) is None
            first = _block(own, shape, elements[0].storage_numpy.itemsize) if whole else None
            around = [[*own[:first], *((0, k) for k in shape[first:])], *skipped[1:]] \
                if first is not None else None
            if around and pieces_to_copy(value.type, around, b.machine) is not None:
                blocked = (value, first)  # the op writes its blocks whole, the copy the rest
                skipped = around
            b.emit.copy(source, target, skipped=skipped)
        targets.append(target)
    if targets[0].type.size == 0 or updates[0].type.size == 0:
        return targets
    if blocked is not None:
        _update_blocks(b, op, targets[0], *blocked, strided)
        return targets
    if strided is not None:
        _update_strided(b, op, targets, strided)
        return targets
    result_bytes = targets[0].type.size * elements[0].storage_numpy.itemsize
    worth_threads = schedule_for(update_shape) != dace.ScheduleType.Sequential
    atomic = (worth_threads and n == 1 and _order_free(op.regions[0], elements[0])
              and result_bytes >= b.machine.atomic_min_bytes)
    parallel, chunk = _plan(op, numbers, window_of, atomic)
    if not worth_threads:  # one thread: the plain loop nest
        parallel, chunk = (), 0

    arrays: dict[str, Array] = {}
    read_index = b.reader(indices, "__idx", arrays)
    read_updates = [b.reader(v, f"__upd{k}", arrays) for k, v in enumerate(updates)]
    params = map_params(len(parallel) + bool(chunk))
    update_index = [params[parallel.index(d)] if d in parallel else f"__u{d}"
                    for d in range(len(update_shape))]
    scatter_dims = [d for d in range(len(update_shape)) if d not in window_dims]
    scatter_index = [update_index[d] for d in scatter_dims]
    map_shape = [update_shape[d] for d in parallel]
    body, returned = b.scalar_region(op.regions[0].entry,
                                     [f"__c{k}" for k in range(n)] +
                                     [f"__x{k}" for k in range(n)], "__v")

    code = Writer()
    looped_window = [d for d in window_dims if d not in parallel]
    with contextlib.ExitStack() as nest:
        looped_scatter = [d for d in scatter_dims if d not in parallel]
        nest.enter_context(code.loops(*(Loop(f"__u{d}", "0", str(update_shape[d]))
                                        for d in looped_scatter), scalar=True))
        if looped_window and not chunk and not looped_scatter:
            # the window's innermost loop vectorises (its elements are distinct); the map's
            # loop around the guarded nest must not (h2d::scalar_loop)
            code.line("h2d::scalar_loop();")
        inside = []
        for k in range(len(to_operand)):
            start = _start_index(read_index, scatter_index, index_vector_dim, k,
                                 indices.type.rank)
            code.line(f"const int64_t __start{k} = {start};")
            bound = shape[to_operand[k]] - window_sizes[to_operand[k]]
            inside.append(f"(uint64_t)__start{k} <= {bound}ull")
        nest.enter_context(code.block(f"if ({' && '.join(inside) or 'true'})"))
        if chunk:  # one flat loop over this iteration's chunk of the window
            window = int(np.prod([update_shape[d] for d in looped_window], dtype=np.int64))
            first = f"{params[-1]} * {chunk}LL"
            nest.enter_context(code.loops(
                Loop("__w", first, f"std::min<int64_t>({window}LL, {first} + {chunk}LL)"),
                scalar=True))
            stride = window
            for d in looped_window:
                stride //= update_shape[d]
                update_index[d] = f"(__w / {stride}LL) % {update_shape[d]}LL"
            map_shape.append(-(-window // chunk))
        else:
            for d in looped_window:
                innermost = d == looped_window[-1]
                if innermost and b.target == registry.DEFAULT_TARGET and \
                        update_shape[d] * elements[0].storage_numpy.itemsize \
                        >= b.machine.vector_bytes:
                    # GCC unrolls a short loop completely and then leaves the rows scalar
                    # (a segment sum's rows of 16 floats), instead of vectorising the loop;
                    # nvcc knows no GCC pragma (a warning in a kernel)
                    code.line("#pragma GCC unroll 1")
                nest.enter_context(code.loops(Loop(f"__u{d}", "0", str(update_shape[d])),
                                              scalar=not innermost))
        position = _operand_position(
            len(shape), to_operand, input_batching, indices_batching, scatter_index,
            index_vector_dim, {d: update_index[w] for d, w in window_of.items()})
        code.line(f"const int64_t __at = {flat_index(shape, position)};")
        code.lines(f"const {e.compute} __x{k} = {e.load(read(update_index))};"
                   for k, (e, read) in enumerate(zip(update_elements, read_updates)))
        if atomic:  # a compare-and-swap loop: the body applied to what the element holds
            (e,) = elements
            storage = e.storage.ctype
            code.line(f"{storage}* __p = &__res0[__at];",
                      f"{storage} __old = __atomic_load_n(__p, __ATOMIC_RELAXED), __new;",
                      "do {", f"const {e.compute} __c0 = {e.load('__old')};", *body,
                      f"__new = {e.store(returned[0])};",
                      "} while (!__atomic_compare_exchange_n(__p, &__old, __new, true, "
                      "__ATOMIC_RELAXED, __ATOMIC_RELAXED));")
        else:
            code.lines(f"const {e.compute} __c{k} = {e.read(f'__res{k}', '__at')};"
                       for k, e in enumerate(elements))
            code.lines(body)
            code.lines(f"__res{k}[__at] = {e.store(r)};"
                       for k, (e, r) in enumerate(zip(elements, returned)))

    # the results as inputs too: the updates come after the copies of the operands
    reads = {**{conn: Whole(array) for conn, array in arrays.items()},
             **{f"__prev{k}": Whole(target) for k, target in enumerate(targets)}}
    work = updates[0].type.size // max(1, int(np.prod(map_shape, dtype=np.int64)))
    b.emit.map("scatter", map_shape, code.text(), reads,
               {f"__res{k}": Whole(target) for k, target in enumerate(targets)}, work)
    return targets
