"""Reductions. ``stablehlo.reduce`` and ``stablehlo.reduce_window`` with any reducer body
made of elementwise ops (add, max, the compare-and-select pairs of argmax, ...) and any
number of operands: one map over the result, each element a loop nest (over the reduced
dimensions, or over the window) that applies the body in the order the elements are
laid out."""

from __future__ import annotations

from collections.abc import Sequence

from .. import ir
from . import dtypes
from .builder import Builder, flat_index, map_params
from .fusion import scalar_region
from .registry import register


def _emit(b: Builder, op: ir.Op, loops: Sequence[str], guard: str,
          indices: Sequence[str]) -> None:
    """The shared part: accumulators from the init values, the ``loops`` (C++ ``for``
    headers), per iteration the elements at ``indices`` (skipped where ``guard`` is
    false) fed with the accumulators through the body, and the results stored."""
    n = len(op.operands) // 2
    inputs, inits = op.operands[:n], op.operands[n:]
    elements = [dtypes.of(v.type, op.name, op.location) for v in inputs]
    results = [dtypes.of(v.type, op.name, op.location) for v in op.results]
    lines, scalars = [], {}
    for k, (init, element) in enumerate(zip(inits, results)):
        scalars[f"__init{k}"] = b.scalar_operand(init)
        lines.append(f"{element.compute} __acc{k} = {element.load(f'__init{k}')};")
    arrays = {f"__in{k}": b.array(v) for k, v in enumerate(inputs) if v.type.size}

    saved = b.current_op
    body, returned = scalar_region(
        b, op.regions[0].entry,
        [f"__acc{k}" for k in range(n)] + [f"__x{k}" for k in range(n)], "__v")
    b.current_op = saved

    flat = flat_index(inputs[0].type.shape, indices)
    inner = ["h2d::scalar_loop();"] + ([f"if (!({guard})) continue;"] if guard else [])
    inner += [f"const {e.compute} __x{k} = {e.load(f'__in{k}[{flat}]')};"
              for k, e in enumerate(elements)]
    inner += body + [f"__acc{k} = {expression};" for k, expression in enumerate(returned)]
    if arrays:
        lines.append(" ".join(loops) + " {\n    " + "\n    ".join(inner) + "\n}")
    lines += [f"__out{k} = {element.store(f'__acc{k}')};" for k, element in enumerate(results)]

    targets = [b.result_array(v) for v in op.results]
    b.indexed_map(op.name.rsplit(".", 1)[-1], targets, arrays, scalars, "\n".join(lines))
    for value, target in zip(op.results, targets):
        b.bind(value, target)


@register("stablehlo.reduce")
def reduce(b: Builder, op: ir.Op) -> None:
    dimensions = tuple(int(d) for d in op.attr("dimensions"))
    shape = op.operands[0].type.shape
    kept = iter(map_params(len(shape) - len(dimensions)))
    indices = [f"__r{dimensions.index(d)}" if d in dimensions else next(kept)
               for d in range(len(shape))]
    loops = [f"for (int64_t __r{j} = 0; __r{j} < {shape[d]}; ++__r{j})"
             for j, d in enumerate(dimensions)]
    _emit(b, op, loops, "", indices)


@register("stablehlo.reduce_window")
def reduce_window(b: Builder, op: ir.Op) -> None:
    """The window at output position ``o`` covers positions ``o * stride + w * window
    dilation`` of the input padded by ``padding`` and dilated by ``base_dilations``; as
    XLA does, padding and dilation holes contribute nothing (the init value stays)."""
    shape = op.operands[0].type.shape
    rank = len(shape)

    def attribute(name, default):
        value = op.attr(name)
        return tuple(int(v) for v in value) if value is not None else (default,) * rank

    window = attribute("window_dimensions", 1)
    strides, base = attribute("window_strides", 1), attribute("base_dilations", 1)
    dilations = attribute("window_dilations", 1)
    padding = op.attr("padding")
    low = tuple(int(p) for p in padding.array[:, 0]) if padding is not None else (0,) * rank
    loops, guards, indices = [], [], []
    for d in range(rank):
        loops.append(f"for (int64_t __w{d} = 0; __w{d} < {window[d]}; ++__w{d})")
        position = f"((int64_t)__i{d} * {strides[d]} + __w{d} * {dilations[d]} - {low[d]})"
        guards.append(f"{position} >= 0 && {position} % {base[d]} == 0 && "
                      f"{position} / {base[d]} < {shape[d]}")
        indices.append(f"{position} / {base[d]}")
    _emit(b, op, loops, " && ".join(f"({g})" for g in guards), indices)


@register("stablehlo.select_and_scatter")
def select_and_scatter(b: Builder, op: ir.Op) -> None:
    """The gradient of max pooling. Each window of the padded operand selects one element
    (the first that ``select`` keeps against every later one, in row-major order; padding
    is never selected) and the source value of that window is combined into the result
    there with ``scatter``. Written as a gather: every result element loops over the
    windows that can contain it, recomputes their selection, and accumulates in window
    order, so no two map iterations write the same element."""
    operand, source, init = op.operands
    shape, windows = operand.type.shape, source.type.shape
    rank = len(shape)
    window = tuple(int(v) for v in op.attr("window_dimensions"))
    strides = tuple(int(v) for v in op.attr("window_strides", (1,) * rank))
    padding = op.attr("padding")
    low = tuple(int(p) for p in padding.array[:, 0]) if padding is not None else (0,) * rank
    element = dtypes.of(operand.type, op.name, op.location)
    result = dtypes.of(op.result.type, op.name, op.location)

    saved = b.current_op
    select_lines, (keep,) = scalar_region(b, op.regions[0].entry, ["__best", "__x"], "__sel")
    scatter_lines, (combined,) = scalar_region(b, op.regions[1].entry, ["__acc", "__y"],
                                               "__sc")
    b.current_op = saved

    scalars = {"__init": b.scalar_operand(init)}
    arrays = {"__op": b.array(operand), "__src": b.array(source)}
    here = flat_index(shape, map_params(rank))
    position = [f"__wi{d} * {strides[d]} - {low[d]} + __w{d}" for d in range(rank)]
    lines = [f"{result.compute} __acc = {result.load('__init')};"]
    # windows that can contain this element, in row-major window order
    lines += [f"for (int64_t __k{d} = {window[d] - 1}; __k{d} >= 0; --__k{d}) {{\n"
              f"const int64_t __t{d} = (int64_t)__i{d} + {low[d]} - __k{d};\n"
              f"if (__t{d} < 0 || __t{d} % {strides[d]} != 0 || "
              f"__t{d} / {strides[d]} >= {windows[d]}) continue;\n"
              f"const int64_t __wi{d} = __t{d} / {strides[d]};" for d in range(rank)]
    lines.append(f"int64_t __chosen = -1; {element.compute} __best{{}};")
    lines += [f"for (int64_t __w{d} = 0; __w{d} < {window[d]}; ++__w{d}) {{\n"
              "h2d::scalar_loop();\n"
              f"const int64_t __p{d} = {position[d]};\n"
              f"if (__p{d} < 0 || __p{d} >= {shape[d]}) continue;" for d in range(rank)]
    candidate = flat_index(shape, [f"__p{d}" for d in range(rank)])
    lines += [f"const {element.compute} __x = {element.load(f'__op[{candidate}]')};",
              f"if (__chosen < 0) {{ __chosen = {candidate}; __best = __x; continue; }}",
              *select_lines,
              f"if (!({keep})) {{ __chosen = {candidate}; __best = __x; }}"]
    lines.append("}" * rank)
    window_index = flat_index(windows, [f"__wi{d}" for d in range(rank)])
    lines += [f"if (__chosen == {here}) {{",
              f"const {result.compute} __y = {result.load(f'__src[{window_index}]')};",
              *scatter_lines, f"__acc = {combined};", "}"]
    lines.append("}" * rank)
    lines.append(f"__out0 = {result.store('__acc')};")
    target = b.result_array(op.result)
    b.indexed_map("select_and_scatter", [target], arrays, scalars, "\n".join(lines))
    b.bind(op.result, target)
