"""Shape and data-movement ops. Whatever is an affine re-indexing (broadcast_in_dim,
transpose, slice, reverse, unit-dimension reshapes) becomes a ``View`` that consumers read
through memlets; the rest writes arrays with one map each."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import sympy

from .. import ir, symbolic
from ..plan.annotations import ComputedByReaders, annotation
from . import dtypes
from .bindings import (
    Array,
    Axis,
    Binding,
    Gathered,
    Literal,
    Pending,
    PendingView,
    Pieces,
    Reshaped,
    RowReduction,
    Tuple,
    View,
    at_most,
    clamp_index,
    compose_axes,
    cpp_size,
    flat_index,
    map_params,
    unmaterialised_rows,
    unravel,
    view_of,
)
from .builder import Builder, Reader, binding_reader
from .cpp import on_grid
from .emitter import Element, Value, Whole
from .known import result_dtype
from .registry import define, register, register_elementwise


def _view(b: Builder, operand: ir.Value, result: ir.Value, axes: list[Axis]) -> list[Binding]:
    """``operand`` re-indexed by ``axes`` (one per operand dimension), composed with a view
    the operand already is. A pending elementwise value stays pending (``PendingView``)
    unless it is to be written into an array anyway."""
    t = result.type
    pending = b.binding(operand)
    if isinstance(pending, (Gathered, RowReduction, Reshaped)):  # stays lazy, read in place
        return [pending.viewed(axes, t)]
    source = pending.source if isinstance(pending, PendingView) else pending
    # a broadcast of a pending value is written at its own (smaller) size once and read
    # through a View, rather than recomputed for every element it is broadcast to (unless
    # the level says otherwise, or it is computed from row reductions: then once per row,
    # by the map that computes them)
    recompute = b.fusion.broadcasts or at_most(t.size, source.type.size) or bool(
        unmaterialised_rows(pending, b.fusion.recompute))
    if isinstance(pending, PendingView) and recompute:
        return [PendingView(pending.source, compose_axes(pending.axes, axes), t)]
    if (b.fusion.recompute and isinstance(pending, Pending) and pending.unresolved
            and not pending.cluster.closed and recompute and not pending.destined):
        return [PendingView(pending, tuple(axes) if operand.type.rank else (), t)]
    source = b.readable(operand)
    if source.is_literal:
        return [Literal(source.value, t)]
    if isinstance(source, View):
        return [View(source.source, compose_axes(source.axes, axes), t)]
    if source.type.rank == 0:  # a 0-d array broadcast or reshaped: always element 0
        axes = [Axis(None, 0, 0)]
    return [View(source, tuple(axes), t)]


def _known_constant(op, operand):
    return np.broadcast_to(op.attr("value").array, op.result.type.shape)


def _constant_values(op, knowns, shapes):
    t = op.results[0].type
    if (ir.is_integer(t.element) or ir.is_bool(t.element)) and symbolic.is_static(t) \
            and t.size <= 64:
        return [sympy.sympify(bool(v) if ir.is_bool(t.element) else int(v))
                for v in np.asarray(op.attr("value").array).reshape(-1)]
    return None


@register("stablehlo.constant", known=_known_constant, shape_rule=symbolic.declared,
          value_rule=_constant_values)
def constant(b: Builder, op: ir.Op) -> list[Binding]:
    dense = op.attr("value")
    t = op.result.type
    if not isinstance(dense, ir.DenseElements):
        raise b.unsupported(f"constant value {dense!r}")
    dtypes.of(t, op.name, op.location)
    if t.size == 0:
        return [b.allocate_result(op.result)]
    if dense.is_splat:
        return [Literal(dense.array.reshape(-1)[0], t)]
    return [b.emit.add_constant(dense.array, t)]


def _iota(op, args, ins, out, point):
    return f"h2d::convert<{out.compute}>((int64_t)({point[int(op.attr('iota_dimension'))]}))"


def _known_iota(op, operand):
    t, dim = op.result.type, int(op.attr("iota_dimension"))
    shape = [1] * t.rank
    shape[dim] = t.shape[dim]
    return np.broadcast_to(np.arange(t.shape[dim]).reshape(shape), t.shape).astype(
        result_dtype(op))


register_elementwise("stablehlo.iota", _iota, family="shape", indexed=True, known=_known_iota,
                     shape_rule=symbolic.declared)


def _dynamic_iota_shape(inference, op, operands, shapes, knowns, env):
    """Sized by its shape operand: becomes ``iota`` of that (symbolic) type."""
    result = tuple(symbolic.known_dims(op, knowns, len(operands) - 1))
    return symbolic.Refined([result], op.regions, _kept(op, "iota_dimension"),
                            static_form=("stablehlo.iota", 0))


def _kept(op: ir.Op, *names: str):
    """``op``'s attributes ``names``, as its static form keeps them."""
    return ir.freeze({k: v for k, v in op.attributes.items() if k in names})


define("stablehlo.dynamic_iota", shape_rule=_dynamic_iota_shape)


def _known_broadcast(op, operand):
    source, t = operand(0), op.result.type
    shape = [1] * t.rank
    for k, d in enumerate(op.attr("broadcast_dimensions")):
        shape[int(d)] = source.shape[k]
    return np.broadcast_to(source.reshape(shape), t.shape)


def _broadcast_shape(inference, op, operands, shapes, knowns, env):
    result = [None] * op.results[0].type.rank
    for j, d in enumerate(op.attr("broadcast_dimensions")):
        if shapes[0][j] != 1:
            result[d] = shapes[0][j]
    return [tuple(result)]


def _broadcast_values(op, knowns, shapes):
    known, t = knowns[0], op.results[0].type
    if known is None or not symbolic.is_static(t) or known.size != 1:
        return None
    return [known.flat[0]] * t.size


def _dynamic_broadcast_shape(inference, op, operands, shapes, knowns, env):
    """Sized by its shape operand: becomes ``broadcast_in_dim`` of that (symbolic) type."""
    result = symbolic.known_dims(op, knowns, 1)
    for j, d in enumerate(op.attr("broadcast_dimensions")):
        if shapes[0][j] != 1:
            inference.unify(shapes[0][j], result[d], op)
    return symbolic.Refined([tuple(result)], op.regions, _kept(op, "broadcast_dimensions"),
                            static_form=("stablehlo.broadcast_in_dim", 1))


define("stablehlo.dynamic_broadcast_in_dim", shape_rule=_dynamic_broadcast_shape)


@register("stablehlo.broadcast_in_dim", known=_known_broadcast, shape_rule=_broadcast_shape,
          value_rule=_broadcast_values, scalar_alias=True, view=True)
@register("stablehlo.broadcast")
def broadcast_in_dim(b: Builder, op: ir.Op) -> list[Binding]:
    """``broadcast`` (the older form) prepends the ``broadcast_sizes`` dimensions."""
    (operand,) = op.operands
    t = op.result.type
    dims = op.attr("broadcast_dimensions")
    if op.name == "stablehlo.broadcast":
        dims = range(t.rank - operand.type.rank, t.rank)
    axes = []
    for d, r in enumerate(dims):
        if operand.type.shape[d] == 1 and t.shape[r] != 1:
            axes.append(Axis(None, 0, 0))
        else:
            axes.append(Axis(r))
    return _view(b, operand, op.result, axes)


def _transpose_shape(inference, op, operands, shapes, knowns, env):
    return [tuple(shapes[0][p] for p in op.attr("permutation"))]


@register("stablehlo.transpose", known=lambda op, operand: operand(0).transpose(
    [int(d) for d in op.attr("permutation")]), shape_rule=_transpose_shape, view=True)
def transpose(b: Builder, op: ir.Op) -> list[Binding]:
    permutation = op.attr("permutation")
    axes = [Axis(permutation.index(d)) for d in range(len(permutation))]
    return _view(b, op.operands[0], op.result, axes)


def _known_slice(op, operand):
    starts, limits, strides = (op.attr(name) for name in
                               ("start_indices", "limit_indices", "strides"))
    return operand(0)[tuple(slice(int(s), int(e), int(k))
                            for s, e, k in zip(starts, limits, strides))]


def _slice_values(op, knowns, shapes):
    if knowns[0] is None or knowns[0].ndim != 1:
        return None
    (start,), (limit,), (stride,) = (op.attr(k) for k in ("start_indices", "limit_indices",
                                                          "strides"))
    return list(knowns[0][start:limit:stride])


@register("stablehlo.slice", known=_known_slice, value_rule=_slice_values, view=True)
def slice_(b: Builder, op: ir.Op) -> list[Binding]:
    starts, strides = op.attr("start_indices"), op.attr("strides")
    axes = [Axis(d, stride, start) for d, (start, stride) in enumerate(zip(starts, strides))]
    return _view(b, op.operands[0], op.result, axes)


@register("stablehlo.reverse", known=lambda op, operand: np.flip(
    operand(0), [int(d) for d in op.attr("dimensions")]), shape_rule=symbolic.same_shapes,
          view=True)
def reverse(b: Builder, op: ir.Op) -> list[Binding]:
    shape = op.result.type.shape
    reversed_dims = set(op.attr("dimensions"))
    axes = [Axis(d, -1, shape[d] - 1) if d in reversed_dims else Axis(d)
            for d in range(len(shape))]
    return _view(b, op.operands[0], op.result, axes)


def _reshape_shape(inference, op, operands, shapes, knowns, env):
    result = op.results[0].type.shape
    inference.unify(symbolic.as_dim(sympy.Mul(*shapes[0])), symbolic.as_dim(sympy.Mul(*result)),
                    op)
    return [result]


def _dynamic_reshape_shape(inference, op, operands, shapes, knowns, env):
    """Sized by its shape operand: becomes ``reshape`` to that (symbolic) type."""
    result = tuple(symbolic.known_dims(op, knowns, len(operands) - 1))
    inference.unify(symbolic.as_dim(sympy.Mul(*shapes[0])), symbolic.as_dim(sympy.Mul(*result)),
                    op)
    return symbolic.Refined([result], op.regions, _kept(op),
                            static_form=("stablehlo.reshape", 1))


define("stablehlo.dynamic_reshape", shape_rule=_dynamic_reshape_shape)


def same_values(op, knowns, shapes):
    """The value rule of ops whose result holds the operand's elements in order."""
    return None if knowns[0] is None else list(knowns[0].flat)


@register("stablehlo.reshape",
          known=lambda op, operand: operand(0).astype(result_dtype(op)),
          shape_rule=_reshape_shape, value_rule=same_values, scalar_alias=True, view=True,
          same_memory=lambda op: 0)
def reshape(b: Builder, op: ir.Op) -> list[Binding]:
    """A view where only unit dimensions come or go. Otherwise, where only elementwise ops
    read the result (through views), or only products read a reshape of a whole array,
    bound lazily (``Reshaped``): their maps read each element where it lies, the products
    the array's memory; else one map that reads each element where it lies (through a
    view's source too), so no copy precedes it. A product that wrote its result into
    this one's destination (``same_memory``) wrote it in row-major order: nothing to do."""
    (operand,) = op.operands
    if b.binding(operand).is_array(b.destination(op.result)):
        return [b.allocate_result(op.result)]
    source_shape = [n for n in operand.type.shape]
    result_shape = list(op.result.type.shape)
    if [n for n in source_shape if n != 1] == [n for n in result_shape if n != 1]:
        # only unit dimensions come or go: a view that pairs the non-unit dimensions
        result_dims = iter(r for r, n in enumerate(result_shape) if n != 1)
        axes = [Axis(None, 0, 0) if n == 1 else Axis(next(result_dims)) for n in source_shape]
        return _view(b, operand, op.result, axes)
    readers = annotation(op, ComputedByReaders)
    lazy = readers is not None and readers.readers == "elementwise" \
        and not b.destination(op.result)
    bound = b.binding(operand)
    if lazy and isinstance(bound, Reshaped) and bound.axes is None and not bound.materialised:
        # a reshape of a reshape: the same row-major order
        return [Reshaped(bound.source, tuple(result_shape), None, op.result.type)]
    source = b.readable(operand)
    if source.is_literal:
        return [Literal(source.value, op.result.type)]
    if lazy or (isinstance(source, Array) and readers is not None
                and readers.readers == "products" and not b.destination(op.result)):
        return [Reshaped(source, tuple(result_shape), None, op.result.type)]
    target = b.allocate_result(op.result)
    flat = flat_index(result_shape, map_params(len(result_shape)))
    lines = [f"const int64_t __flat = {flat};"]
    arrays: dict[str, Array] = {}
    read = b.reader(operand, "__src", arrays)
    if isinstance(source, View):
        # read the view's source in place, at the operand's index of the row-major position
        lines.append(f"__out = {read(unravel('__flat', source_shape))};")
    else:
        lines.append("__out = __src[__flat];")
    b.emit.map("reshape", target.type.shape, "\n".join(lines),
               {conn: Whole(array) for conn, array in arrays.items()}, {"__out": Element(target)})
    return [target]


def _concatenate_shape(inference, op, operands, shapes, knowns, env):
    axis = op.attr("dimension")
    shape = list(shapes[0])
    for other in shapes[1:]:
        for k in range(len(shape)):
            shape[k] = symbolic.as_dim(shape[k] + other[k]) if k == axis else \
                inference.unify(shape[k], other[k], op)
    return [tuple(shape)]


def _concatenate_values(op, knowns, shapes):
    if any(k is None or k.ndim != 1 for k in knowns):
        return None
    return [v for k in knowns for v in k.flat]


@register("stablehlo.concatenate", known=lambda op, operand: np.concatenate(
    [operand(k) for k in range(len(op.operands))], axis=int(op.attr("dimension"))),
    shape_rule=_concatenate_shape, value_rule=_concatenate_values)
def concatenate(b: Builder, op: ir.Op) -> list[Binding]:
    """Bound lazily where the plan says so (``ComputedByReaders``: ``Pieces``): an
    elementwise consumer reads each element from the operand it falls in, so ``jnp.roll``
    and friends cost no copy; anything else gets it written once; a function result is
    written at once."""
    dimension = int(op.attr("dimension"))
    parts = tuple(b.readable(v) for v in op.operands if v.type.size)
    pieces = Pieces(parts, dimension, op.result.type)
    if (b.destination(op.result) or op.result.type.size == 0
            or annotation(op, ComputedByReaders) is None):
        target = b.allocate_result(op.result)
        b.write_pieces(pieces, target)
        return [target]
    return [pieces]


@register("stablehlo.pad")
def pad(b: Builder, op: ir.Op) -> list[Binding]:
    operand, padding_value = op.operands
    low, interior = op.attr("edge_padding_low"), op.attr("interior_padding")
    target = b.allocate_result(op.result)
    arrays: dict[str, Array] = {}
    read = b.reader(operand, "__src", arrays) if operand.type.size else None
    conditions, indices = [], []
    for d, (lo, gap, n) in enumerate(zip(low, interior, operand.type.shape)):
        shifted = f"((int64_t)__i{d} - {lo})"
        conditions.append(on_grid(shifted, n, gap + 1))
        indices.append(shifted if gap == 0 else f"{shifted} / {gap + 1}")
    inputs = {"__pad": Value(b.value(padding_value))}
    if read is None:
        code = "__out = __pad;"
    else:
        inside = " && ".join(f"({c})" for c in conditions) or "true"
        code = f"__out = ({inside}) ? {read(indices)} : __pad;"
        inputs.update((conn, Whole(array)) for conn, array in arrays.items())
    b.emit.map("pad", target.type.shape, code, inputs, {"__out": Element(target)})
    return [target]


def clamped_starts(values: list[ir.Value], starts: list[str], sizes, shape) -> list[str]:
    """C++ for the start indices clamped into ``[0, n - k]`` (``clamp_index``)."""
    return [clamp_index(s, ir.is_unsigned(value.type.element), n - k)
            for value, s, k, n in zip(values, starts, sizes, shape)]


def _window_shape(inference, op, operands, shapes, knowns, env):
    """A window of static sizes in a dimension that may be a symbol: the dimension must
    hold it (its start is clamped into ``[0, n - k]``)."""
    slicing = op.attr("slice_sizes") is not None
    sizes = op.attr("slice_sizes") if slicing else shapes[1]
    for n, k in zip(shapes[0], sizes):
        if not (isinstance(n, int) and isinstance(k, int)):
            inference.require(sympy.Ge(n, k), op, "needs dimension {0} to hold a window of "
                              "{1}", n, k)
    return [None] if slicing else [shapes[0]]


@register("stablehlo.dynamic_slice", shape_rule=_window_shape)
def dynamic_slice(b: Builder, op: ir.Op) -> list[Binding]:
    """A window at run-time starts. One that takes a single element of the innermost axis
    (a strided read: a loop's ``u[:, :, k]``), read only by elementwise ops, of an array
    that no result of this scope is written into, is bound lazily (``Gathered``): its
    readers' maps read its elements in place instead of a copy that costs as much as
    they do. Else one map copies it: a contiguous window at memory speed, and its
    readers' loops stay vector (reading a rolled vector in place kept NPBench's durbin
    scalar, 1.8x slower); a window of a concatenation not written yet, along its
    dimension, straight from the parts (``_copy_from_pieces``)."""
    operand, *start_values = op.operands
    sizes = op.attr("slice_sizes")
    t = op.result.type
    source = b.binding(operand)
    if not (isinstance(source, Pieces) and not source.materialised and t.size and all(
            k == n for d, (k, n) in enumerate(zip(sizes, operand.type.shape))
            if d != source.dimension)):
        source = b.readable(operand)
    if (annotation(op, ComputedByReaders) is not None and isinstance(source, (Array, View))
            and not b.written_by_results(source.data) and not b.destination(op.result)):
        starts = tuple(view_of(b.readable(v), (), ir.TensorType(t.shape, v.type.element))
                       for v in start_values)
        return [Gathered(source, starts, tuple(n - k for n, k in zip(operand.type.shape, sizes)),
                         tuple((d, Axis(d)) for d in range(t.rank)), b.emit.origin(), t)]
    target = b.allocate_result(op.result)
    inputs = {f"__s{d}": Value(b.value(v)) for d, v in enumerate(start_values)}
    starts = clamped_starts(start_values, list(inputs), sizes, operand.type.shape)
    lines = [f"const int64_t __start{d} = {s};" for d, s in enumerate(starts)]
    if isinstance(source, Pieces):
        _copy_from_pieces(b, source, target, lines, inputs)
        return [target]
    arrays: dict[str, Array] = {}
    read = b.reader(operand, "__src", arrays)
    lines.append(f"__out = {read([f'__start{d} + __i{d}' for d in range(len(sizes))])};")
    inputs.update((conn, Whole(array)) for conn, array in arrays.items())
    b.emit.map("dynamic_slice", target.type.shape, "\n".join(lines), inputs,
               {"__out": Element(target)})
    return [target]


def _copy_from_pieces(b: Builder, pieces: Pieces, target: Array, lines: list[str],
                      inputs: dict) -> None:
    """A window of a concatenation along its own dimension (``jnp.roll`` by a traced
    shift: a window of ``x`` laid twice end to end) copied from the parts it overlaps,
    one loop nest per part whose bounds are computed at run time: each loop copies a run
    of contiguous elements, which vectorises, where materialising the concatenation first
    copied everything three times (NPBench's durbin)."""
    d, shape = pieces.dimension, target.type.shape
    indices = [f"__i{k}" for k in range(len(shape))]
    position = [*indices[:d], f"(__i{d} - __start{d})", *indices[d + 1:]]
    arrays: dict[str, Array] = {}
    for k, (part, (first, end)) in enumerate(zip(pieces.parts, pieces.extents())):
        if not part.type.size:
            continue
        read = binding_reader(part, f"__part{k}", arrays)
        loops = [f"for (int64_t __i{e} = 0; __i{e} < {cpp_size(n)}; ++__i{e})" if e != d else
                 f"for (int64_t __i{d} = std::max<int64_t>(__start{d}, {cpp_size(first)}); "
                 f"__i{d} < std::min<int64_t>(__start{d} + {cpp_size(n)}, {cpp_size(end)}); "
                 f"++__i{d})"
                 for e, n in enumerate(shape)]
        within = [*indices[:d], f"__i{d} - {cpp_size(first)}", *indices[d + 1:]]
        lines += [*loops, f"    __out[{flat_index(shape, position)}] = {read(within)};"]
    inputs.update((conn, Whole(array)) for conn, array in arrays.items())
    b.emit.map("dynamic_slice", (), "\n".join(lines), inputs, {"__out": Whole(target)})


@register("stablehlo.real_dynamic_slice")
def real_dynamic_slice(b: Builder, op: ir.Op) -> list[Binding]:
    """A strided slice whose start, limit and strides are run-time tensors, of a static
    result type (``chlo.scan``'s legalisation slices this way). Positions outside the
    operand, which the spec leaves undefined, are clamped into it."""
    operand, starts, _, strides = op.operands
    shape = operand.type.shape
    if not op.result.type.is_static:
        raise b.unsupported("a result of dynamic shape")
    target = b.allocate_result(op.result)
    indices = [f"std::min<int64_t>(std::max<int64_t>((int64_t)__start[{d}] + "
               f"(int64_t)__stride[{d}] * (int64_t)__i{d}, 0), {n - 1})"
               for d, n in enumerate(shape)]
    code = f"__out = __src[{flat_index(shape, indices)}];"
    b.emit.map("real_dynamic_slice", target.type.shape, code,
               {"__src": Whole(b.array(operand)), "__start": Whole(b.array(starts)),
                "__stride": Whole(b.array(strides))}, {"__out": Element(target)})
    return [target]


@register("stablehlo.dynamic_update_slice", updates=lambda op: {0: 0},
          shape_rule=_window_shape)
def dynamic_update_slice(b: Builder, op: ir.Op) -> list[Binding]:
    operand, update, *start_values = op.operands
    shape, sizes = operand.type.shape, update.type.shape
    source = b.array(operand)
    target = b.claim_in_place(operand, op, op.result) or b.allocate_result(op.result)
    inputs = {f"__s{d}": Value(b.value(v)) for d, v in enumerate(start_values)}
    starts = clamped_starts(start_values, list(inputs), sizes, shape)
    lines = [f"const int64_t __start{d} = {s};" for d, s in enumerate(starts)]
    inside = " && ".join(f"(int64_t)__i{d} >= __start{d} && (int64_t)__i{d} < __start{d} + {k}"
                         for d, k in enumerate(sizes)) or "true"
    outer = flat_index(shape, map_params(len(shape)))
    arrays: dict[str, Array] = {}
    read = b.reader(update, "__upd", arrays)
    inputs.update((conn, Whole(array)) for conn, array in arrays.items())
    if source.name == target.name and not at_most(target.type.size, 1):
        # a loop-carried array updated in place (see control.py): write the window only
        if update.type.size:
            _update_window(b, target, read, sizes, inputs, lines)
        return [target]
    inputs["__src"] = Whole(source)
    if update.type.size:
        inner = read([f"(int64_t)__i{d} - __start{d}" for d in range(len(sizes))])
        lines.append(f"__out = ({inside}) ? {inner} : __src[{outer}];")
    else:
        lines.append(f"__out = __src[{outer}];")
    b.emit.map("dynamic_update_slice", target.type.shape, "\n".join(lines), inputs,
               {"__out": Element(target)})
    return [target]


def _update_window(b: Builder, target: Array, read: Reader, sizes: Sequence[int],
                   inputs: dict, starts: list[str]) -> None:
    """``target[start + i] = update[i]`` for every position ``i`` of the update (of
    ``sizes``, read by ``read``): one map over the update whose tasklet writes through a
    pointer to all of ``target``."""
    position = flat_index(target.type.shape,
                          [f"__start{d} + (int64_t)__i{d}" for d in range(len(sizes))])
    code = "\n".join([*starts, f"__dst[{position}] = {read(map_params(len(sizes)))};"])
    b.emit.map("dynamic_update_slice", tuple(sizes), code, inputs, {"__dst": Whole(target)})


@register("stablehlo.bitcast_convert")
def bitcast_convert(b: Builder, op: ir.Op) -> list[Binding]:
    """Between element widths (same widths are elementwise): the narrow elements of each
    wide element lie along a new last dimension, in memory (little-endian) order; an i1
    element is one bit, least significant first."""
    (operand,) = op.operands
    source_type, result_type = operand.type, op.result.type
    for t in (source_type, result_type):
        if dtypes.of(t, op.name, op.location).narrow_bits:
            raise b.unsupported(f"bitcast of {t.element} to another width")
    source, target = b.array(operand), b.allocate_result(op.result)
    if result_type.rank > source_type.rank:  # wide -> narrow: [...] -> [..., k]
        wide = f"&__src[{flat_index(source_type.shape, map_params(source_type.rank))}]"
        part = f"__i{result_type.rank - 1}"
        if result_type.element == "i1":
            code = (f"uint64_t __bits = 0;\nstd::memcpy(&__bits, {wide}, sizeof(*{wide}));\n"
                    f"__out = (__bits >> {part}) & 1;")
        else:
            code = (f"std::memcpy(&__out, reinterpret_cast<const char*>({wide}) + "
                    f"{part} * sizeof(__out), sizeof(__out));")
    else:  # narrow -> wide: [..., k] -> [...]
        first = flat_index(source_type.shape, map_params(result_type.rank) + ["0"])
        if source_type.element == "i1":
            k = source_type.shape[-1]
            code = (f"uint64_t __bits = 0;\nfor (int __k = 0; __k < {k}; ++__k) {{ "
                    f"h2d::scalar_loop(); __bits |= (uint64_t)__src[{first} + __k] << __k; }}\n"
                    "std::memcpy(&__out, &__bits, sizeof(__out));")
        else:
            code = f"std::memcpy(&__out, &__src[{first}], sizeof(__out));"
    b.emit.map("bitcast", target.type.shape, code, {"__src": Whole(source)},
               {"__out": Element(target)})
    return [target]


@register("stablehlo.optimization_barrier", shape_rule=symbolic.same_shapes,
          value_rule=same_values, scalar_alias=True)
def optimization_barrier(b: Builder, op: ir.Op) -> list[Binding]:
    return [b.binding(operand) for operand in op.operands]


@register("stablehlo.tuple")
def tuple_(b: Builder, op: ir.Op) -> list[Binding]:
    return [Tuple(tuple(b.binding(v) for v in op.operands), op.result.type)]


@register("stablehlo.get_tuple_element")
def get_tuple_element(b: Builder, op: ir.Op) -> list[Binding]:
    return [b.binding(op.operands[0]).elements[int(op.attr("index"))]]



def _dimension_size_values(op, knowns, shapes):
    return [sympy.sympify(shapes[0][op.attr("dimension")])]


@register("stablehlo.get_dimension_size", shape_rule=symbolic.declared,
          value_rule=_dimension_size_values)
def get_dimension_size(b: Builder, op: ir.Op) -> list[Binding]:
    """A static dimension's size is a constant (``chlo.scan`` asks for it); a symbolic one
    is written at run time from the program's symbols."""
    (operand,) = op.operands
    size = operand.type.shape[int(op.attr("dimension"))]
    if size is None:
        raise b.unsupported("the size of a dynamic dimension")
    element = dtypes.of(op.result.type, op.name, op.location)
    if isinstance(size, int):
        return [Literal(element.numpy.type(size), op.result.type)]
    target = b.allocate_result(op.result)
    value = element.store(f"({element.compute})({cpp_size(size)})")
    b.emit.map("dimension_size", (), f"__out = {value};", outputs={"__out": Element(target)})
    return [target]
