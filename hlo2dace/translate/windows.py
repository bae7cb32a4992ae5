"""Where a scatter's updates land, worked out from the IR alone: its windows along the
operand's dimensions, and, for indices known while compiling, the strided box of distinct
elements it updates (``x.at[2:5]``, ``x.at[::2]``, ``x.at[:, 1]``). The scatter's
translator (``indexing.py``) and the plan (``plan/updates.py``) both read them."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .. import ir

#: a value's elements where they are known while compiling, else None
Known = Callable[[ir.Value], "np.ndarray | None"]


def scatter_numbers(op: ir.Op) -> dict | None:
    """A scatter's dimension numbers as a dict of ints and tuples of ints (None: malformed)."""
    numbers = op.attr("scatter_dimension_numbers")
    if not isinstance(numbers, ir.StructAttr):
        return None
    return {key: tuple(int(v) for v in value) if isinstance(value, tuple) else int(value)
            for key, value in numbers.fields.items()}


def windows(numbers: dict, shape: Sequence[int], update_shape: Sequence[int]
             ) -> tuple[dict[int, int], list[int]]:
    """Operand dimension -> the update dimension its window runs along (none for inserted
    and batching dimensions: a window of one element), and the size of the window along
    each operand dimension."""
    window_of: dict[int, int] = {}
    free = iter(numbers.get("update_window_dims", ()))
    for d in range(len(shape)):
        if d not in numbers.get("inserted_window_dims", ()) and d not in numbers.get(
                "input_batching_dims", ()):
            window_of[d] = next(free)
    return window_of, [update_shape[window_of[d]] if d in window_of else 1
                       for d in range(len(shape))]


def strided_window(op: ir.Op, numbers: dict, window_of: dict[int, int],
                   window_sizes: Sequence[int], known: Known
                   ) -> list[tuple[int, int, int | None]] | None:
    """For indices known at translation time that place every update element at
    ``offset + stride * u[dim]`` along each operand dimension (one update dimension per
    operand dimension, each at most once, all windows in bounds): those ``(offset,
    stride, dim)`` (``dim`` None: a constant position). Such a scatter updates a strided
    box of distinct elements, as ``x.at[2:5]``, ``x.at[::2]`` or ``x.at[:, 1]`` do.
    ``known(value)``: a value's elements where they are known while compiling."""
    n = (len(op.operands) - 1) // 2
    indices, updates = op.operands[n], op.operands[n + 1]
    to_operand = numbers.get("scatter_dims_to_operand_dims", ())
    # index vectors of no components (``x.at[:].set``) place every window at 0
    starts = known(indices) if to_operand else np.zeros(
        indices.type.shape, np.int64)
    shape, update_shape = op.operands[0].type.shape, updates.type.shape
    if starts is None or 0 in update_shape:
        return None  # no updates to place: the general path does nothing, as it should
    window_dims = numbers.get("update_window_dims", ())
    scatter_dims = [d for d in range(len(update_shape)) if d not in window_dims]
    ivd = numbers.get("index_vector_dim", 0)
    batch = np.indices([update_shape[d] for d in scatter_dims], dtype=np.int64)
    # the start of each update's window along each operand dimension, over the scatter dims
    start = [np.zeros(batch.shape[1:], np.int64) for _ in shape]
    for k, d in enumerate(to_operand):
        position = list(batch)
        if ivd < indices.type.rank:
            position.insert(ivd, np.full(batch.shape[1:], k))
        start[d] = np.asarray(starts[tuple(position)], np.int64)
        if not ((start[d] >= 0) & (start[d] <= shape[d] - window_sizes[d])).all():
            return None  # a dropped window: the general path drops it
    input_batching = numbers.get("input_batching_dims", ())
    for d, d_start in zip(input_batching, numbers.get("scatter_indices_batching_dims", ())):
        start[d] = start[d] + batch[d_start - (d_start > ivd)]
    boxes, used = [], set()
    for d, values in enumerate(start):
        offset = int(values.reshape(-1)[0]) if values.size else 0
        steps = {}
        for axis, u in enumerate(scatter_dims):
            if update_shape[u] > 1:
                step = int(np.take(values, 1, axis=axis).reshape(-1)[0]
                           - np.take(values, 0, axis=axis).reshape(-1)[0])
                if step:
                    steps[u] = step
        if d in window_of and update_shape[window_of[d]] > 1:
            steps[window_of[d]] = steps.get(window_of[d], 0) + 1
        affine = offset + sum(step * batch[scatter_dims.index(u)] for u, step in steps.items()
                              if u in scatter_dims)
        if len(steps) > 1 or used & set(steps) or not (values == affine).all():
            return None
        used |= set(steps)
        ((dim, stride),) = steps.items() if steps else ((None, 0),)
        boxes.append((offset, stride, dim))
    if any(n > 1 and u not in used for u, n in enumerate(update_shape)):
        return None  # updates that meet: the general path combines them in order
    return boxes


def box(strided: Sequence[tuple[int, int, int | None]], update_shape: Sequence[int]
         ) -> list[tuple[int, int]] | None:
    """The positions of a strided box (``strided_window``) as (start, stop) per
    dimension, if it has no gaps (steps of 1, or one position)."""
    box = []
    for offset, stride, dim in strided:
        extent = 1 if dim is None else update_shape[dim]
        if extent > 1 and stride != 1:
            return None
        box.append((offset, offset + extent))
    return box


def replaces(region: ir.Region, n: int) -> bool:
    """Whether the body returns its update arguments as they are (``.set``)."""
    block = region.entry
    return len(block.ops) == 1 and [v.name for v in block.terminator.operands] == [
        a.name for a in block.arguments[n:]]
