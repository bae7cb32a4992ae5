"""Shape and data-movement ops. Whatever is an affine re-indexing (broadcast_in_dim,
transpose, slice, reverse, unit-dimension reshapes) becomes a ``View`` that consumers read
through memlets; the rest writes arrays with one map each."""

from __future__ import annotations

import dace

from .. import ir
from . import dtypes
from .builder import (
    Array,
    Axis,
    Builder,
    Literal,
    Pending,
    PendingView,
    Pieces,
    View,
    at_most,
    compose_axes,
    cpp_size,
    flat_index,
    map_params,
    unresolved,
)
from .registry import register, register_elementwise


def _view(b: Builder, operand: ir.Value, result: ir.Value, axes: list[Axis]) -> None:
    """Bind ``result`` to ``operand`` re-indexed by ``axes`` (one per operand dimension),
    composing with a view the operand already is. A pending elementwise value stays
    pending (``PendingView``) unless it is to be written into an array anyway."""
    t = result.type
    pending = b.binding(operand)
    source = pending.source if isinstance(pending, PendingView) else pending
    # a broadcast of a pending value is written at its own (smaller) size once and read
    # through a View, rather than recomputed for every element it is broadcast to (unless
    # the level says otherwise)
    recompute = b.recompute_broadcasts or at_most(t.size, source.type.size)
    if isinstance(pending, PendingView) and recompute:
        b.bind(result, PendingView(pending.source, compose_axes(pending.axes, axes), t))
        return
    if (b.recomputed_ops and isinstance(pending, Pending) and unresolved(pending)
            and not pending.cluster.closed and recompute
            and pending.value.name not in pending.scope.destinations):
        b.bind(result, PendingView(pending, tuple(axes) if operand.type.rank else (), t))
        return
    source = b.operand(operand)
    if isinstance(source, Literal):
        b.bind(result, Literal(source.value, t))
        return
    if isinstance(source, View):
        b.bind(result, View(source.source, compose_axes(source.axes, axes), t))
        return
    if source.type.rank == 0:  # a 0-d array broadcast or reshaped: always element 0
        axes = [Axis(None, 0, 0)]
    b.bind(result, View(source, tuple(axes), t))


@register("stablehlo.constant")
def constant(b: Builder, op: ir.Op) -> None:
    dense = op.attr("value")
    t = op.result.type
    if not isinstance(dense, ir.DenseElements):
        raise b.unsupported(f"constant value {dense!r}")
    dtypes.of(t, op.name, op.location)
    if t.size == 0:
        b.bind(op.result, b.result_array(op.result))
    elif dense.is_splat:
        b.bind(op.result, Literal(dense.array.reshape(-1)[0], t))
    else:
        b.bind(op.result, b.add_constant_array(dense.array, t))


def _iota(op, args, ins, out, point):
    return f"h2d::convert<{out.compute}>((int64_t)({point[int(op.attr('iota_dimension'))]}))"


register_elementwise("stablehlo.iota", _iota, family="shape", indexed=True)


@register("stablehlo.broadcast_in_dim", "stablehlo.broadcast")
def broadcast_in_dim(b: Builder, op: ir.Op) -> None:
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
    _view(b, operand, op.result, axes)


@register("stablehlo.transpose")
def transpose(b: Builder, op: ir.Op) -> None:
    permutation = op.attr("permutation")
    axes = [Axis(permutation.index(d)) for d in range(len(permutation))]
    _view(b, op.operands[0], op.result, axes)


@register("stablehlo.slice")
def slice_(b: Builder, op: ir.Op) -> None:
    starts, strides = op.attr("start_indices"), op.attr("strides")
    axes = [Axis(d, stride, start) for d, (start, stride) in enumerate(zip(starts, strides))]
    _view(b, op.operands[0], op.result, axes)


@register("stablehlo.reverse")
def reverse(b: Builder, op: ir.Op) -> None:
    shape = op.result.type.shape
    reversed_dims = set(op.attr("dimensions"))
    axes = [Axis(d, -1, shape[d] - 1) if d in reversed_dims else Axis(d)
            for d in range(len(shape))]
    _view(b, op.operands[0], op.result, axes)


@register("stablehlo.reshape")
def reshape(b: Builder, op: ir.Op) -> None:
    (operand,) = op.operands
    source_shape = [n for n in operand.type.shape]
    result_shape = list(op.result.type.shape)
    if [n for n in source_shape if n != 1] == [n for n in result_shape if n != 1]:
        # only unit dimensions come or go: a view that pairs the non-unit dimensions
        result_dims = iter(r for r, n in enumerate(result_shape) if n != 1)
        axes = [Axis(None, 0, 0) if n == 1 else Axis(next(result_dims)) for n in source_shape]
        _view(b, operand, op.result, axes)
        return
    source = b.operand(operand)
    if isinstance(source, Literal):
        b.bind(op.result, Literal(source.value, op.result.type))
        return
    target = b.result_array(op.result)
    flat = flat_index(result_shape, map_params(len(result_shape)))
    lines = [f"const int64_t __flat = {flat};"]
    if isinstance(source, View):
        # read the view's source in place: the operand's index from the row-major
        # position, then the source's index from the view's axes
        stride = 1
        for d in reversed(range(len(source_shape))):
            lines.append(f"const int64_t __o{d} = (__flat / {cpp_size(stride)}) % "
                         f"{cpp_size(source_shape[d])};")
            stride *= source_shape[d]
        indices = [str(axis.offset) if axis.dim is None else
                   f"{axis.offset} + {axis.stride} * __o{axis.dim}" for axis in source.axes]
        lines.append(f"__out = __src[{flat_index(source.source.type.shape, indices)}];")
        source = source.source
    else:
        lines.append("__out = __src[__flat];")
    b.indexed_map("reshape", target, {"__src": source}, {}, "\n".join(lines))
    b.bind(op.result, target)


@register("stablehlo.concatenate")
def concatenate(b: Builder, op: ir.Op) -> None:
    """Bound lazily (``Pieces``): an elementwise consumer reads each element from the
    operand it falls in, so ``jnp.roll`` and friends cost no copy; a function result is
    written at once."""
    dimension = int(op.attr("dimension"))
    parts = tuple(b.operand(v) for v in op.operands if v.type.size)
    pieces = Pieces(parts, dimension, op.result.type)
    if op.result.name in b.scope.destinations or op.result.type.size == 0:
        target = b.result_array(op.result)
        b.write_pieces(pieces, target)
        b.bind(op.result, target)
        return
    b.bind(op.result, pieces)


@register("stablehlo.pad")
def pad(b: Builder, op: ir.Op) -> None:
    operand, padding_value = op.operands
    low, interior = op.attr("edge_padding_low"), op.attr("interior_padding")
    target = b.result_array(op.result)
    source = b.array(operand) if operand.type.size else None
    conditions, indices = [], []
    for d, (lo, gap, n) in enumerate(zip(low, interior, operand.type.shape)):
        shifted = f"((int64_t)__i{d} - {lo})"
        conditions.append(f"{shifted} >= 0 && {shifted} % {gap + 1} == 0 "
                          f"&& {shifted} / {gap + 1} < {n}")
        indices.append(f"{shifted} / {gap + 1}")
    if source is None:
        code = "__out = __pad;"
        arrays = {}
    else:
        inside = " && ".join(f"({c})" for c in conditions) or "true"
        flat = flat_index(operand.type.shape, indices)
        code = f"__out = ({inside}) ? __src[{flat}] : __pad;"
        arrays = {"__src": source}
    b.indexed_map("pad", target, arrays, {"__pad": b.scalar_operand(padding_value)}, code)
    b.bind(op.result, target)


def clamped_starts(values: list[ir.Value], starts: list[str], sizes, shape) -> list[str]:
    """C++ for the start indices clamped into ``[0, n - k]`` as the spec says (unsigned
    indices compared as unsigned: a ui64 index above INT64_MAX is too large, not negative)."""
    out = []
    for value, s, k, n in zip(values, starts, sizes, shape):
        if ir.is_unsigned(value.type.element):
            out.append(f"(int64_t)std::min<uint64_t>((uint64_t){s}, "
                       f"(uint64_t){cpp_size(n - k)})")
        else:
            out.append(f"std::min<int64_t>(std::max<int64_t>((int64_t){s}, 0), "
                       f"{cpp_size(n - k)})")
    return out


@register("stablehlo.dynamic_slice")
def dynamic_slice(b: Builder, op: ir.Op) -> None:
    operand, *start_values = op.operands
    sizes = op.attr("slice_sizes")
    target = b.result_array(op.result)
    scalars = {f"__s{d}": b.scalar_operand(v) for d, v in enumerate(start_values)}
    starts = clamped_starts(start_values, list(scalars), sizes, operand.type.shape)
    lines = [f"const int64_t __start{d} = {s};" for d, s in enumerate(starts)]
    indices = [f"__start{d} + __i{d}" for d in range(len(sizes))]
    lines.append(f"__out = __src[{flat_index(operand.type.shape, indices)}];")
    b.indexed_map("dynamic_slice", target, {"__src": b.array(operand)}, scalars,
                  "\n".join(lines))
    b.bind(op.result, target)


@register("stablehlo.real_dynamic_slice")
def real_dynamic_slice(b: Builder, op: ir.Op) -> None:
    """A strided slice whose start, limit and strides are run-time tensors, of a static
    result type (``chlo.scan``'s legalisation slices this way). Positions outside the
    operand, which the spec leaves undefined, are clamped into it."""
    operand, starts, _, strides = op.operands
    shape = operand.type.shape
    if not op.result.type.is_static:
        raise b.unsupported("a result of dynamic shape")
    target = b.result_array(op.result)
    indices = [f"std::min<int64_t>(std::max<int64_t>((int64_t)__start[{d}] + "
               f"(int64_t)__stride[{d}] * (int64_t)__i{d}, 0), {n - 1})"
               for d, n in enumerate(shape)]
    code = f"__out = __src[{flat_index(shape, indices)}];"
    b.indexed_map("real_dynamic_slice", target, {"__src": b.array(operand),
                  "__start": b.array(starts), "__stride": b.array(strides)}, {}, code)
    b.bind(op.result, target)


@register("stablehlo.dynamic_update_slice")
def dynamic_update_slice(b: Builder, op: ir.Op) -> None:
    operand, update, *start_values = op.operands
    shape, sizes = operand.type.shape, update.type.shape
    source = b.array(operand)
    target = b.reusable_array(operand, op, op.result) or b.result_array(op.result)
    scalars = {f"__s{d}": b.scalar_operand(v) for d, v in enumerate(start_values)}
    starts = clamped_starts(start_values, list(scalars), sizes, shape)
    lines = [f"const int64_t __start{d} = {s};" for d, s in enumerate(starts)]
    inside = " && ".join(f"(int64_t)__i{d} >= __start{d} && (int64_t)__i{d} < __start{d} + {k}"
                         for d, k in enumerate(sizes)) or "true"
    inner = flat_index(sizes, [f"(int64_t)__i{d} - __start{d}" for d in range(len(sizes))])
    outer = flat_index(shape, map_params(len(shape)))
    if source.name == target.name and not at_most(target.type.size, 1):
        # a loop-carried array updated in place (see control.py): write the window only
        if update.type.size:
            _update_window(b, target, b.array(update), scalars, lines)
        b.bind(op.result, target)
        return
    arrays = {"__src": source}
    if update.type.size:
        arrays["__upd"] = b.array(update)
        lines.append(f"__out = ({inside}) ? __upd[{inner}] : __src[{outer}];")
    else:
        lines.append(f"__out = __src[{outer}];")
    b.indexed_map("dynamic_update_slice", target, arrays, scalars, "\n".join(lines))
    b.bind(op.result, target)


def _update_window(b: Builder, target: Array, update: Array, scalars: dict,
                   starts: list[str]) -> None:
    """``target[start + i] = update[i]`` for every position ``i`` of ``update``: one map
    over the update whose tasklet writes through a pointer to all of ``target``."""
    shape, sizes = target.type.shape, update.type.shape
    position = flat_index(shape, [f"__start{d} + (int64_t)__i{d}" for d in range(len(sizes))])
    element = flat_index(sizes, map_params(len(sizes)))
    code = "\n".join([*starts, f"__dst[{position}] = __upd[{element}];"])
    b.indexed_map_into("dynamic_update_slice", update.type, target,
                       {"__upd": update}, scalars, code)


@register("stablehlo.bitcast_convert")
def bitcast_convert(b: Builder, op: ir.Op) -> None:
    """Between element widths (same widths are elementwise): the narrow elements of each
    wide element lie along a new last dimension, in memory (little-endian) order; an i1
    element is one bit, least significant first."""
    (operand,) = op.operands
    source_type, result_type = operand.type, op.result.type
    for t in (source_type, result_type):
        if dtypes.of(t, op.name, op.location).narrow_bits:
            raise b.unsupported(f"bitcast of {t.element} to another width")
    source, target = b.array(operand), b.result_array(op.result)
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
    b.indexed_map("bitcast", target, {"__src": source}, {}, code)
    b.bind(op.result, target)


@register("stablehlo.optimization_barrier")
def optimization_barrier(b: Builder, op: ir.Op) -> None:
    for operand, result in zip(op.operands, op.results):
        b.bind(result, b.binding(operand))


@register("stablehlo.tuple")
def tuple_(b: Builder, op: ir.Op) -> None:
    b.bind(op.result, tuple(b.binding(v) for v in op.operands))


@register("stablehlo.get_tuple_element")
def get_tuple_element(b: Builder, op: ir.Op) -> None:
    b.bind(op.result, b.binding(op.operands[0])[int(op.attr("index"))])



@register("stablehlo.get_dimension_size")
def get_dimension_size(b: Builder, op: ir.Op) -> None:
    """A static dimension's size is a constant (``chlo.scan`` asks for it); a symbolic one
    is written at run time from the program's symbols."""
    (operand,) = op.operands
    size = operand.type.shape[int(op.attr("dimension"))]
    if size is None:
        raise b.unsupported("the size of a dynamic dimension")
    element = dtypes.of(op.result.type, op.name, op.location)
    if isinstance(size, int):
        b.bind(op.result, Literal(element.numpy.type(size), op.result.type))
        return
    target = b.result_array(op.result)
    b.mapped_tasklet("dimension_size", op.result.type, {},
                     f"__out = {element.store(f'({element.compute})({cpp_size(size)})')};",
                     {"__out": dace.Memlet(f"{target.name}[0]")})
    b.bind(op.result, target)
