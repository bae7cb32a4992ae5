"""Reductions. ``stablehlo.reduce`` with any reducer body made of elementwise ops (add,
max, the compare-and-select pairs of argmax, ...), any number of operands and reduced
dimensions: one map over the result, each element a loop nest over the reduced
dimensions that applies the body, in the order the operands are laid out."""

from __future__ import annotations

from .. import ir
from . import dtypes
from .builder import Builder, Literal, flat_index, map_params
from .fusion import scalar_region
from .registry import register


@register("stablehlo.reduce")
def reduce(b: Builder, op: ir.Op) -> None:
    n = len(op.operands) // 2
    inputs, inits = op.operands[:n], op.operands[n:]
    dimensions = tuple(int(d) for d in op.attr("dimensions"))
    shape = inputs[0].type.shape
    kept = [d for d in range(len(shape)) if d not in dimensions]
    elements = [dtypes.of(v.type, op.name, op.location) for v in inputs]
    results = [dtypes.of(v.type, op.name, op.location) for v in op.results]

    lines = []
    scalars = {}
    for k, (init, element) in enumerate(zip(inits, results)):
        binding = b.operand(init)
        scalars[f"__init{k}"] = binding if isinstance(binding, Literal) else b.array(init)
        lines.append(f"{element.compute} __acc{k} = {element.load(f'__init{k}')};")
    arrays = {f"__in{k}": b.array(v) for k, v in enumerate(inputs) if v.type.size}

    saved = b.current_op
    body_lines, returned = scalar_region(
        b, op.regions[0].entry,
        [f"__acc{k}" for k in range(n)] + [f"__x{k}" for k in range(n)], "__v")
    b.current_op = saved

    indices, d_params = [], iter(map_params(len(kept)))
    for d in range(len(shape)):
        indices.append(f"__r{dimensions.index(d)}" if d in dimensions else next(d_params))
    flat = flat_index(shape, indices)
    loop = [f"for (int64_t __r{j} = 0; __r{j} < {shape[d]}; ++__r{j})"
            for j, d in enumerate(dimensions)]
    inner = [f"const {e.compute} __x{k} = {e.load(f'__in{k}[{flat}]')};"
             for k, e in enumerate(elements)]
    inner += body_lines
    inner += [f"__acc{k} = {expression};" for k, expression in enumerate(returned)]
    if arrays:
        lines.append(" ".join(loop) + " {\n    " + "\n    ".join(inner) + "\n}")
    lines += [f"__out{k} = {element.store(f'__acc{k}')};" for k, element in enumerate(results)]

    targets = [b.result_array(v) for v in op.results]
    b.indexed_map("reduce", targets, arrays, scalars, "\n".join(lines))
    for value, target in zip(op.results, targets):
        b.bind(value, target)
