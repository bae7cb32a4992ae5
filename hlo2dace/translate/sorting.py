"""Sorting: ``stablehlo.sort`` with any number of operands, along any dimension, with any
comparator region made of elementwise ops (JAX's TOTALORDER comparisons, lexicographic
keys, complex numbers by real then imaginary part). ``lax.top_k`` comes as a sort and
slices (chlo.top_k is legalised so by the frontend).

Each row along the sorted dimension is sorted on its own, in parallel over the rows: the
row's elements of all operands are gathered into one buffer of tuples, sorted with the
compiled comparator, and scattered into the results. This is what XLA's CPU runtime does
(it sorts the operands in place through a zipped iterator), with the same algorithms:
``std::stable_sort`` when ``is_stable``, else ``std::sort``, whose order of equal keys is
not the input order but is deterministic. Sorting the same values with a comparator that
gives the same answers by the same algorithm reproduces XLA's result exactly, even for
comparators that are no strict weak order (``LT`` on NaN).

Two shortcuts keep those answers: what the comparator computes from one side alone (JAX
maps -0.0 to 0.0 and every NaN to one NaN before comparing) is computed once per element
and kept in the tuple; and a stable sort whose results are read only through leading
slices (top_k) selects those elements with a heap."""

from __future__ import annotations

import math
from typing import Sequence

from .. import ir
from ..plan.annotations import ReadPrefix, annotation
from . import dtypes
from .bindings import Binding, Unused, flat_index, map_params
from .builder import Builder
from .cpp import Loop, Writer
from .emitter import Whole
from .literals import literal
from .registry import register

#: a stable sort whose users read at most 1/PARTIAL of each row selects those elements with
#: a heap instead of sorting the whole row
PARTIAL = 16


def _region(b: Builder, block: ir.Block, arguments: Sequence[str], prefix: str
            ) -> tuple[list[str], list[str]]:
    """``scalar_region`` for a comparator. XLA compiles a comparator as a function of its
    own, where a bf16 compared with a constant zero is compared as a float (a denormal
    equals zero under DAZ), not by its bits as in fused loops (``elementwise._compare``):
    so bf16 constants become variables here."""
    constants = [op for op in block.ops if op.name == "stablehlo.constant"
                 and op.result.type.element == "bf16" and op.result.type.size == 1]
    element = dtypes.element_type("bf16")
    names = [f"{prefix}z{k}" for k in range(len(constants))]
    declarations = [f"const float {name} = "
                    f"{literal(op.attr('value').array.reshape(-1)[0], element)};"
                    for name, op in zip(names, constants)]
    folded = {id(op) for op in constants}
    block = ir.Block(block.arguments + tuple(op.result for op in constants),
                     tuple(op for op in block.ops if id(op) not in folded))
    lines, returned = b.scalar_region(block, list(arguments) + names, prefix)
    return declarations + lines, returned


def _split(block: ir.Block) -> tuple[list[tuple[ir.Value, int]], ir.Block, list[ir.Op]]:
    """The comparator split at the values computed from one side alone (lhs or rhs of the
    operands) that ops of both sides, or the terminator, read: those values with their side
    (0: lhs, 1: rhs), the comparator as a block of them, and the ops of one side or none."""
    side: dict[str, frozenset] = {}
    for j, argument in enumerate(block.arguments):
        side[argument.name] = frozenset({j % 2})
    for op in block.ops[:-1]:
        sides = frozenset().union(*(side[v.name] for v in op.operands))
        side.update((result.name, sides) for result in op.results)
    boundary: list[tuple[ir.Value, int]] = []
    kept, one_sided = [], []
    for op in block.ops:
        if op is not block.terminator and len(side[op.results[0].name]) <= 1:
            one_sided.append(op)
            if side[op.results[0].name]:
                continue  # computed per element
        kept.append(op)
        boundary += [(v, min(side[v.name])) for v in op.operands
                     if len(side[v.name]) == 1 and (v, min(side[v.name])) not in boundary]
    comparator = ir.Block(tuple(v for v, _ in boundary), tuple(kept))
    return boundary, ir.Block(comparator.arguments, tuple(ir.live_ops(comparator))), one_sided


def _signature(block: ir.Block) -> dict[str, object]:
    """Value name -> what it computes from which operand, the same for both sides."""
    signature: dict[str, object] = {a.name: ("operand", j // 2)
                                    for j, a in enumerate(block.arguments)}
    for op in block.ops[:-1]:
        if op.name == "stablehlo.constant":
            what = (op.name, op.attr("value").array.tobytes())
        else:
            what = (op.name, tuple(sorted((k, repr(v)) for k, v in op.attributes.items())),
                    tuple(signature[v.name] for v in op.operands))
        for k, result in enumerate(op.results):
            signature[result.name] = (what, str(result.type), k)
    return signature


def _tuples(b: Builder, region: ir.Block, elements: Sequence[dtypes.ElementType],
            reads: Sequence[str], positions: bool) -> tuple[list[str], str, list[str]]:
    """C++ for the tuples sorted: their fields' types (the operands, then one key per
    distinct value the comparator computes from one side, then with ``positions`` the
    element's position), the statements declaring the tuple ``__x`` of the element ``__k``
    (the operands' elements ``reads``, in compute types), and the lambda ``__less``
    comparing two tuples."""
    boundary, comparator, one_sided = _split(region)
    signature = _signature(region)
    keys = {}  # signature -> (tuple field, value)
    for value, _ in boundary:
        if value not in region.arguments and signature[value.name] not in keys:
            keys[signature[value.name]] = (len(elements) + len(keys), value)
    computed = ir.Block(region.arguments, tuple(one_sided) + (ir.Op(
        "stablehlo.return", tuple(v for _, v in keys.values()), ()),))
    key_lines, key_expressions = _region(
        b, ir.Block(region.arguments, tuple(ir.live_ops(computed))),
        [reads[j // 2] for j in range(2 * len(elements))], "__key")
    fields = ([e.store(x) for e, x in zip(elements, reads)] + key_expressions
              + (["__k"] if positions else []))
    types = ([e.storage.ctype for e in elements]
             + [dtypes.of(v.type).compute for _, v in keys.values()]
             + (["int64_t"] if positions else []))
    row = f"std::tuple<{', '.join(types)}>"

    def read(value: ir.Value, side: int) -> str:
        """C++ for a value the comparator reads from the tuple of ``side``."""
        name = ("__l", "__r")[side]
        if value in region.arguments:
            k = region.arguments.index(value) // 2
            return elements[k].load(f"std::get<{k}>({name})")
        return f"std::get<{keys[signature[value.name]][0]}>({name})"

    lines, (less,) = _region(b, comparator, [read(v, side) for v, side in boundary], "__c")
    return (types, "\n".join([*key_lines, f"const {row} __x({', '.join(fields)});"]),
            [f"auto __less = [](const {row}& __l, const {row}& __r) -> bool {{",
             *(f"    {line}" for line in lines), f"    return {less};", "};"])


@register("stablehlo.sort")
def sort(b: Builder, op: ir.Op) -> list[Binding]:
    """Each row along ``dimension`` read into a vector of tuples (the operands, the keys
    the comparator computes from one side, with a heap selection the position) and sorted
    with ``__less``, the comparator compiled; a stable sort read only in its first
    1/PARTIAL (top_k) keeps those elements in a heap instead."""
    shape = op.operands[0].type.shape
    rank = len(shape)
    dimension = int(op.attr("dimension", -1))
    dimension += rank if dimension < 0 else 0
    n = shape[dimension]
    if n <= 1 or op.operands[0].type.size == 0:  # nothing to reorder
        return [b.readable(value) for value in op.operands]
    stable = bool(op.attr("is_stable"))
    read = annotation(op, ReadPrefix)
    prefixes = list(read.lengths) if read is not None else [n] * len(op.results)
    first = max(0, *prefixes)
    select = stable and 0 < first and first * PARTIAL <= n

    elements = [dtypes.of(v.type, op.name, op.location) for v in op.operands]
    rows = map_params(rank - 1)
    indices = rows[:dimension] + ["0"] + rows[dimension:]
    at = f"__base + __k * {math.prod(shape[dimension + 1:])}LL"
    # an operand the plan fuses (the positions of argsort and top_k) is computed per element
    inputs, computed, reads = b.pointer_reads(
        op.operands, rows[:dimension] + ["__k"] + rows[dimension:], op)
    types, element, less = _tuples(b, op.regions[0].entry, elements, reads, select)
    row = f"std::tuple<{', '.join(types)}>"
    code = Writer()
    code.line(f"const int64_t __base = {flat_index(shape, indices)};", *less)
    if select:  # the first elements of the stable order: ties broken by position
        position = len(types) - 1
        code.line(f"auto __before = [&](const {row}& __l, const {row}& __r) -> bool {{",
                  "    if (__less(__l, __r)) return true;",
                  "    if (__less(__r, __l)) return false;",
                  f"    return std::get<{position}>(__l) < std::get<{position}>(__r);",
                  "};")
    code.line(f"std::vector<{row}> __row;", f"__row.reserve({first if select else n});")
    with code.loops(Loop("__k", "0", str(n)), scalar=True):
        code.line(*computed, element)
        if select:  # a heap of the first elements so far takes every element in turn
            with code.block(f"if (__k < {first})"):
                code.line("__row.push_back(__x);",
                          "std::push_heap(__row.begin(), __row.end(), __before);")
            with code.block("else if (__less(__x, __row.front()))"):  # a later tie: after
                code.line("std::pop_heap(__row.begin(), __row.end(), __before);",
                          "__row.back() = __x;",
                          "std::push_heap(__row.begin(), __row.end(), __before);")
        else:
            code.line("__row.push_back(__x);")
    if select:
        code.line("std::sort_heap(__row.begin(), __row.end(), __before);")
    else:
        code.line(f"std::{'stable_sort' if stable else 'sort'}(__row.begin(), __row.end(), "
                  "__less);")
    results: list[Binding] = []
    outputs = {}
    for k, (result, prefix) in enumerate(zip(op.results, prefixes)):
        if prefix < 0:
            results.append(Unused(result.type))  # argsort's sorted keys
            continue
        target = b.allocate_result(result)
        results.append(target)
        if not prefix:
            continue
        outputs[f"__out{k}"] = Whole(target)
        with code.loops(Loop("__k", "0", str(prefix)), scalar=True):
            code.line(f"__out{k}[{at}] = std::get<{k}>(__row[__k]);")
    if outputs:  # else only empty slices of the results are read
        work = n * max(1, math.ceil(math.log2(first if select else n)))
        b.emit.map("sort", shape[:dimension] + shape[dimension + 1:], code.text(), inputs,
                   outputs, work)
    return results
