"""Reductions. ``stablehlo.reduce`` and ``stablehlo.reduce_window`` with any reducer body
made of elementwise ops (add, max, the compare-and-select pairs of argmax, ...) and any
number of operands: one map over the result, each element a loop nest (over the reduced
dimensions, or over the window) that applies the body in the order the elements are
laid out.

Where the result keeps dimensions after the last reduced one (rows, contiguous in operand
and result), reading one output's elements would stride across the operand; the rows are
folded a block at a time instead (``_reduce_by_rows``), in the same order per output.

An elementwise operand that only the reduction reads is computed in its loop, never
written to memory (``_operand_reads``), a block of the innermost loop at a time in a loop
that vectorises; a body that is one op with an exact identity (add, max...) folds long
innermost loops into lanes (``_accumulate``): the spec leaves a reduction's order to the
implementation.

A reduction to few elements would leave that map without parallelism. When its body is
one associative and commutative op (add, multiply, max, min, and, or, xor) of a single
operand, the largest reduced dimension is cut into chunks: a parallel map computes one
partial result per chunk, starting from the op's exact identity (-0.0 for float sums, so
signed zeros survive), and a second map folds the partials into the init value. Other
bodies (argmax, arbitrary regions) keep the sequential order, which is always correct."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Sequence

import numpy as np

from .. import ir, symbolic
from ..machine import FEW_OUTPUTS
from ..plan.analysis import over_rows
from ..plan.annotations import ComputedByReaders, FusedOperands, ScatterPerWindow, annotation
from . import dtypes, library, registry
from .bindings import (
    Array,
    Binding,
    Literal,
    RowReduction,
    cpp_size,
    flat_index,
    map_params,
    unmaterialised_rows,
)
from .builder import Builder
from .cpp import Loop, Writer, on_grid
from .emitter import PARALLEL_MAP_WORK, Element, Value, Whole
from .literals import literal
from .registry import register

#: XLA's ReduceWindowRewriter computes a scan longer than this (its CPU base length) in
#: blocks of this length (``_scan``)
SCAN_BLOCK = 16
#: rows scanned side by side by one map iteration (``_scan``): two AVX-512 vectors of f32
SCAN_LANES = 32
#: chunks never hold fewer elements than this (a chunk is one loop, run by one thread)
MIN_CHUNK = 4096
MAX_CHUNKS = 256
#: rows (kept elements after the last reduced dimension) at least this long are folded
#: a block at a time (``_reduce_by_rows``)
MIN_ROW = 8
#: the block of a row one map iteration folds, in accumulators on its stack
ROW_BLOCK = 1024
#: blocks shrink (to no fewer than MIN_ROW_BLOCK elements: smaller ones read half cache
#: lines, 1.7x slower for 2000x4096 here) until a row reduction's map has this many
#: iterations, so that one with no kept dimension before the reduced ones still spreads
#: over the threads
ROW_ITERATIONS = 64
MIN_ROW_BLOCK = 64


#: elements of a reduction's innermost loop read (or computed) at a time, before folding
BLOCK = 256
#: accumulators a reduction with an exact identity folds a block into (two AVX-512 vectors
#: of float, four of double; a divisor of BLOCK)
LANES = 16
#: windows of at most this many elements, with no position on padding or a hole, are
#: folded position by position, written out, and the map's loop vectorises around them
UNROLLED_WINDOW = 16
#: innermost loops shorter than this fold in order: XLA does too, which matters for sums
#: whose rounding depends on the order (cancelling huge values). The chunked path
#: reorders anyway, and always uses lanes.
MIN_LANES_LOOP = 64

#: what a tasklet's loops read: arrays by connector, statements computing elements at the
#: loops' indices, and each operand's element there (C++ in its compute type)
Reads = tuple[dict[str, Whole], list[str], list[str]]


def _array_reads(arrays: Sequence[Array], indices: Sequence[str],
                 shape: Sequence[int] | None = None) -> Reads:
    """``arrays`` read at ``indices`` of ``shape`` (their own unless given: one of the
    same size, such as their trailing dimensions taken as one); nothing for empty
    arrays."""
    if not arrays[0].type.size:
        return {}, [], []
    flat = flat_index(arrays[0].type.shape if shape is None else shape, indices)
    return ({f"__in{k}": Whole(a) for k, a in enumerate(arrays)}, [],
            [dtypes.of(a.type).read(f"__in{k}", flat) for k, a in enumerate(arrays)])


def _operand_reads(b: Builder, op: ir.Op, values: Sequence[ir.Value],
                   indices: Sequence[str]) -> Reads:
    """``op``'s operands ``values`` read at ``indices``: an elementwise expression that
    only ``op`` reads is computed in its loop rather than written to memory and read back
    (``Builder.pointer_reads``), as XLA fuses it."""
    if not values[0].type.size:
        return {}, [], []
    return b.pointer_reads(values, indices, op)


def _accumulate(b: Builder, op: ir.Op, label: str, reads: Reads, loops: Sequence[Loop],
                guard: str, starts: Sequence[Array | Literal], targets: Sequence[Array],
                work_per_element: int, lanes: bool = False,
                read_types: Sequence[ir.TensorType] | None = None, unroll: bool = False) -> None:
    """One map over the ``targets``' shape: per element, accumulators start from
    ``starts``, the ``loops`` visit the elements ``reads`` gives (skipped where ``guard``
    is false), the reducer body (``op``'s first region) folds each into the accumulators,
    and the results are stored. The body rounds every step to its element type, as XLA's
    does (a sum of bf16 rounds each partial sum to bf16). ``read_types``: the types of
    what ``reads`` reads, if not ``op``'s reduced operands (a fold of partial results).

    Without a guard, and with ``lanes`` for a body with an exact identity (``_identity``)
    or elements to compute (a fused elementwise expression), the innermost loop runs a
    block at a time: the block's elements are read or computed in a loop of their own,
    which vectorises, and then folded. With lanes, into ``LANES`` accumulators, element
    ``t`` of a block into lane ``t % LANES``, which vectorises too (the spec leaves the
    order of a reduction to the implementation, and XLA reorders sums as well); the lanes
    are folded into the init value at the end, in halves where the order changes no bits
    (``_order_free``). A maximum or minimum of floats folds order keys in its lanes instead
    (``_key_fold``), and NaN flags: a block with a NaN is searched for its first (lanes of
    the NaNs themselves, selected in turn, stayed in memory, and the row maximum of a
    softmax waited on a store each vector), booleans fold as bytes (``_byte_fold``).
    Other bodies (argmax) fold in order."""
    arrays, computed, expressions = reads
    elements, results, inputs, body = _fold(b, op, targets, starts, read_types)
    code = _fold_code(op, (computed, expressions), loops, guard,
                      [element.load(f"__init{k}") for k, element in enumerate(results)],
                      elements, results, body, lanes, unroll)
    code.lines(f"__out{k} = {element.store(f'__acc{k}')};" for k, element in enumerate(results))
    b.emit.map(label, targets[0].type.shape, code.text(), {**arrays, **inputs},
               {f"__out{k}": Element(t) for k, t in enumerate(targets)}, work_per_element)


def _fold_code(op: ir.Op, reads: tuple[list[str], list[str]], loops: Sequence[Loop],
               guard: str, starts: Sequence[str], elements: Sequence, results: Sequence,
               body: Sequence[str], lanes: bool, unroll: bool = False) -> Writer:
    """The C++ of ``_accumulate``'s fold, leaving the results in ``__acc0, ...``: the
    accumulators start from ``starts`` (C++ in compute types), ``reads`` are the
    statements and expressions of the elements at the ``loops``' indices, ``body`` folds
    ``__x0, ...`` into them (``_fold``). The loops call ``h2d::scalar_loop``, which
    keeps GCC from vectorising the map's loop across them; with ``unroll`` (constant
    loops of a small window) they are written out, position by position, and the map's
    loop vectorises (GCC 12 does not unroll such a nest itself before it vectorises)."""
    computed, expressions = reads
    code = Writer()
    code.lines(f"{element.compute} __acc{k} = {start};"
               for k, (element, start) in enumerate(zip(results, starts)))
    inner = ["h2d::scalar_loop();"] + ([f"if (!({guard})) continue;"] if guard else [])
    identity = _identity(op) if lanes and len(results) == 1 else None
    if expressions and loops and not guard and (computed or identity is not None):
        innermost = loops[-1]
        pick = _key_fold(op) if identity is not None else None
        byte = _byte_fold(op) if identity is not None else None
        code.lines(f"{'uint8_t' if byte else e.compute} __block{k}[{BLOCK}];"
                   for k, e in enumerate(elements))
        if pick is not None:
            (result,) = results
            integer = "int32_t" if result.compute == "float" else "int64_t"
            code.line(f"{integer} __keys[{LANES}];", f"{integer} __nans[{LANES}];",
                      f"{result.compute} __nan = 0;",
                      f"for (int __l = 0; __l < {LANES}; ++__l) {{ __keys[__l] = "
                      f"h2d::order_key({literal(identity, result)}); __nans[__l] = 0; }}")
        elif identity is not None:
            (result,) = results
            code.line(f"{'uint8_t' if byte else result.compute} __lanes[{LANES}];",
                      f"for (int __l = 0; __l < {LANES}; ++__l) __lanes[__l] = "
                      f"{literal(identity, result)};")
        blocks = Loop("__from", innermost.first, innermost.end, BLOCK)
        with code.loops(*loops[:-1], blocks):
            code.line(f"const int64_t __last = std::min<int64_t>(__from + {BLOCK}, "
                      f"{innermost.end});")
            _compute_block(code, innermost.variable, computed,
                           [f"__block{k}[{innermost.variable} - __from] = {x};"
                            for k, x in enumerate(expressions)])
            code.line("const int64_t __count = __last - __from;")
            if identity is None:
                with code.loops(Loop("__t", "0", "__count")):
                    code.lines(inner)
                    code.lines(f"const {e.compute} __x{k} = __block{k}[__t];"
                               for k, e in enumerate(elements))
                    code.lines(body)
            else:
                code.line("h2d::scalar_loop();", "int64_t __t = 0;")
                for header, at in ((f"for (; __t + {LANES} <= __count; __t += {LANES}) "
                                    f"for (int __l = 0; __l < {LANES}; ++__l)", "__t + __l"),
                                   ("for (int __l = 0; __t < __count; ++__t, ++__l)", "__t")):
                    with code.block(header):
                        if pick is not None:
                            code.line(f"const {result.compute} __x0 = __block0[{at}];",
                                      f"__keys[__l] = {pick}(__keys[__l], h2d::order_key(__x0));",
                                      "__nans[__l] |= __x0 != __x0;")
                            continue
                        if byte:
                            code.line(f"__lanes[__l] {byte}= __block0[{at}];")
                            continue
                        code.line(f"{result.compute} __acc0 = __lanes[__l];",
                                  f"const {elements[0].compute} __x0 = __block0[{at}];")
                        code.lines(body)
                        code.line("__lanes[__l] = __acc0;")
                if pick is not None:  # the row's first NaN, in the block that has one
                    code.line(f"{integer} __any = 0;",
                              f"for (int __l = 0; __l < {LANES}; ++__l) __any |= __nans[__l];",
                              "if (__any && __nan == __nan) for (int64_t __u = 0; __u < "
                              "__count; ++__u) if (__block0[__u] != __block0[__u]) "
                              "{ __nan = __block0[__u]; break; }")
        # lanes folded in halves, a vector operation each, not one after another (the max
        # of a row of 128 floats spent more time folding 16 lanes in turn than in its loop)
        halves = (f"for (int __w = {LANES // 2}; __w > 0; __w /= 2) "
                  "for (int __l = 0; __l < __w; ++__l)")
        if pick is not None:
            with code.block(halves):
                code.line(f"__keys[__l] = {pick}(__keys[__l], __keys[__l + __w]);")
            code.line(f"__acc0 = __acc0 != __acc0 ? __acc0 : __nan != __nan ? __nan"
                      f" : h2d::from_total_order_key<{results[0].compute}>("
                      f"{pick}(h2d::order_key(__acc0), __keys[0]));")
        elif byte:
            with code.block(halves):
                code.line(f"__lanes[__l] {byte}= __lanes[__l + __w];")
            code.line(f"__acc0 = (bool)(__acc0 {byte} __lanes[0]);")
        elif identity is not None and _order_free(op):
            with code.block(halves):
                code.line(f"{results[0].compute} __acc0 = __lanes[__l];",
                          f"const {results[0].compute} __x0 = __lanes[__l + __w];")
                code.lines(body)
                code.line("__lanes[__l] = __acc0;")
            code.line(f"const {results[0].compute} __x0 = __lanes[0];")
            code.lines(body)
        elif identity is not None:
            with code.block(f"for (int __l = 0; __l < {LANES}; ++__l)"):
                code.line(f"const {results[0].compute} __x0 = __lanes[__l];")
                code.lines(body)
    elif expressions:
        positions = itertools.product(*(range(int(loop.first), int(loop.end), loop.step)
                                        for loop in loops)) if unroll else [None]
        for position in positions:
            with contextlib.ExitStack() as nest:
                if position is None:
                    nest.enter_context(code.loops(*loops))
                    code.lines(inner)
                else:
                    nest.enter_context(code.block(""))
                    code.lines(f"const int64_t {loop.variable} = {at};"
                               for loop, at in zip(loops, position))
                code.lines(computed)
                code.lines(f"const {e.compute} __x{k} = {x};"
                           for k, (e, x) in enumerate(zip(elements, expressions)))
                code.lines(body)
    return code


def _compute_block(code: Writer, variable: str, computed: Sequence[str],
                   stores: Sequence[str]) -> None:
    """The loop that computes a block's elements ``[__from, __last)`` into ``__block``s:
    whole vectors of ``LANES``, then the last ``LANES`` elements of the block again, where
    it has that many, rather than a scalar remainder. The elements computed twice get the
    same values, and only the blocks are written. A row of 100 floats whose ``exp`` sum
    took its last 4 elements one at a time ran at 1.3x the time of a row of 96 (XLA's
    code: 1.0)."""
    code.line(f"const int64_t __whole = __from + ((__last - __from) & ~{LANES - 1}LL);")
    with code.loops(Loop(variable, "__from", "__whole")):
        code.lines(computed)
        code.lines(stores)
    with code.block("if (__whole < __last)"):
        code.line(f"const int64_t __tail = __last - __from >= {LANES} ? __last - {LANES} "
                  ": __whole;")
        with code.loops(Loop(variable, "__tail", "__last")):
            code.lines(computed)
            code.lines(stores)


def _fold(b: Builder, op: ir.Op, targets: Sequence[Array], starts: Sequence[Array | Literal],
          read_types: Sequence[ir.TensorType] | None = None
          ) -> tuple[list, list, dict, list[str]]:
    """The element types of what is folded (``op``'s reduced operands unless
    ``read_types``) and of ``targets``, the init values as inputs ``__init0, ...``, and
    the statements that fold the elements ``__x0, ...`` into the accumulators ``__acc0,
    ...`` with the reducer body."""
    elements = [dtypes.of(t, op.name, op.location) for t in
                read_types or [v.type for v in op.operands[:len(op.operands) // 2]]]
    results = [dtypes.of(t.type, op.name, op.location) for t in targets]
    inputs = {f"__init{k}": Value(start) for k, start in enumerate(starts)}
    n = len(targets)
    body, returned = b.scalar_region(
        op.regions[0].entry, [f"__acc{k}" for k in range(n)] + [f"__x{k}" for k in range(n)],
        "__v")
    body = body + [f"__acc{k} = {expression};" for k, expression in enumerate(returned)]
    return elements, results, inputs, body


def _emit(b: Builder, op: ir.Op, loops: Sequence[Loop], guard: str,
          indices: Sequence[str], work_per_element: int, fuse: bool = False,
          lanes: bool = False, unroll: bool = False) -> list[Binding]:
    """Accumulate straight into the results, from the init values; with ``fuse``, the
    operands' elementwise expressions are computed in the loops (``_operand_reads``);
    ``unroll``: as ``_fold_code``'s."""
    n = len(op.operands) // 2
    inputs, inits = op.operands[:n], op.operands[n:]
    if fuse:
        reads = _operand_reads(b, op, inputs, indices)
    else:
        reads = _array_reads([b.array(v) if v.type.size else Array("", v.type)
                              for v in inputs], indices)
    starts = [b.value(init) for init in inits]
    targets = [b.allocate_result(v) for v in op.results]
    _accumulate(b, op, op.name.rsplit(".", 1)[-1], reads, loops, guard, starts, targets,
                work_per_element, lanes, unroll=unroll)
    return targets


def _identity(op: ir.Op) -> object | None:
    """The identity of the reducer body if it is one associative, commutative op of its two
    arguments whose identity is exact (its record's ``identity``; None otherwise)."""
    reducer = ir.combiner(op)
    if reducer is None:
        return None
    identity = registry.record(reducer.name).identity
    return None if identity is None else identity(dtypes.of(op.results[0].type))


def _key_fold(op: ir.Op) -> str | None:
    """For a maximum or minimum of floats, the C++ that folds two order keys
    (``h2d::order_key``): in lanes, such a reduction folds keys, in a third of the time of
    folding values with ``h2d::max_`` (the row maximum of NPBench's softmax)."""
    reducer = ir.combiner(op)
    if reducer is None or dtypes.of(op.results[0].type).compute not in ("float", "double"):
        return None
    return {"stablehlo.maximum": "std::max", "stablehlo.minimum": "std::min"}.get(reducer.name)


#: bool reducers as C++ operators on bytes
_BYTE_OPERATORS = {"stablehlo.or": "|", "stablehlo.and": "&", "stablehlo.xor": "^",
                   "stablehlo.maximum": "|", "stablehlo.minimum": "&"}


def _byte_fold(op: ir.Op) -> str | None:
    """For an ``any``, ``all`` or parity of booleans, the C++ operator that folds them as
    bytes: GCC 12 vectorises lanes of ``uint8_t`` folded by ``|``, not lanes of ``bool``
    (a ``while_loop`` whose condition is an ``any`` stayed scalar there)."""
    reducer = ir.combiner(op)
    if reducer is None or dtypes.of(op.results[0].type).compute != "bool":
        return None
    return _BYTE_OPERATORS.get(reducer.name)


def _order_free(op: ir.Op) -> bool:
    """Whether ``op``'s partial results give the same bits folded in any order: a body of
    integers or booleans, or a maximum or minimum (float sums and products round
    differently, and keep the order they have always had)."""
    reducer = ir.combiner(op)
    element = dtypes.of(op.results[0].type)
    return reducer is not None and (
        reducer.name in ("stablehlo.maximum", "stablehlo.minimum")
        or not (element.is_float or element.is_complex))


def _reduce_shape(inference, op, operands, shapes, knowns, env):
    half = len(operands) // 2
    dims = set(op.attr("dimensions"))
    shape = shapes[0]
    for other in shapes[1:half]:
        shape = tuple(inference.unify(a, b, op) for a, b in zip(shape, other))
    symbolic.check_scalar_body(op)
    return [tuple(d for k, d in enumerate(shape) if k not in dims)] * half


@register("stablehlo.reduce", shape_rule=_reduce_shape)
def reduce(b: Builder, op: ir.Op) -> list[Binding]:
    return (_reduced_in_rows(b, op) or _reduced_after_rows(b, op) or _as_library_node(b, op)
            or _reduce(b, op))


def _as_library_node(b: Builder, op: ir.Op) -> list[Binding] | None:
    """A reduction of one array by one op from a literal init value, as DaCe's Reduce
    node where the target has one (``library.reduce_node``): not where the plan has it
    compute its operand in its loop (``FusedOperands``)."""
    reducer = ir.combiner(op)
    if len(op.operands) != 2 or reducer is None:
        return None
    operand, init = op.operands
    if annotation(op, FusedOperands) is not None and not isinstance(b.binding(operand), Array):
        return None
    start = b.readable(init)
    if not start.is_literal or not library.reduces(b.emit, b.target, operand.type,
                                                   reducer.name, op.result.type):
        return None
    source = b.array(operand)
    target = b.allocate_result(op.result)
    library.reduce_node(b.emit, b.target, source, target, op.attr("dimensions"),
                        reducer.name, start.value)
    return [target]


def _reduced_in_rows(b: Builder, op: ir.Op) -> list[RowReduction] | None:
    """A reduction over rows whose results only elementwise ops read (through views:
    ``ComputedByReaders``), bound lazily (``RowReduction``): a map that reads it computes
    it a row at a time (``_row_fold``), and the elementwise value it reduces with it, as
    XLA fuses a softmax or a layer norm into one loop per row."""
    if annotation(op, ComputedByReaders) is None or any(b.destination(r) for r in op.results):
        return None
    return _row_reductions(b, op)


def _reduced_after_rows(b: Builder, op: ir.Op) -> list[Binding] | None:
    """A reduction over rows of an expression of other row reductions over the same rows
    (``exp(x - max(x)).sum(-1)``, a sum of absolute deviations) that not only elementwise
    ops read (a function result): one map over the rows computes per row those reductions
    and then this one (``Builder.emit_row_reductions``), which reads each row from memory
    once. Written one after the other, each read the whole operand (4096 x 4096 f32, one
    thread: 15 ms where XLA took 9)."""
    n = len(op.operands) // 2
    shape = tuple(op.results[0].type.shape)
    if not b.fusion.recompute or not over_rows(op, b.machine) or not any(
            tuple(row.op.results[row.index].type.shape) == shape
            for v in op.operands[:n] for row in unmaterialised_rows(b.binding(v), 1 << 8)):
        return None
    b.absorb(op.operands[:n], op, ())
    targets = [b.allocate_result(v) for v in op.results]
    b.emit_row_reductions(_row_reductions(b, op), targets)
    return targets


def _row_reductions(b: Builder, op: ir.Op) -> list[RowReduction]:
    """``op``'s results bound lazily, to be computed a row at a time (``RowReduction``)."""
    scope = b.scope

    def fold(point: list[str], read, prefix: str) -> tuple[list[str], list[str]]:
        return _row_fold(b, op, point, read, prefix)

    def materialise() -> list[Binding]:
        with b.entered(scope), b.emit.at(op):
            return _reduce(b, op)

    materialised: list = []
    return [RowReduction(op, scope, k, None, result.type, fold, materialise, materialised)
            for k, result in enumerate(op.results)]


def _row_fold(b: Builder, op: ir.Op, point: list[str], read, prefix: str
              ) -> tuple[list[str], list[str]]:
    """The C++ that computes ``op``'s results at the row ``point`` into locals named
    ``prefix r0, ...`` (``RowReduction.fold``): ``_fold_code``'s loops over the row, the
    elements and init values read by ``read``."""
    n = len(op.operands) // 2
    shape = op.operands[0].type.shape
    loops = [Loop(f"{prefix}j{d}", "0", str(size))
             for d, size in enumerate(shape[len(point):])]
    computed, expressions = read(op.operands[:n], [*point, *(loop.variable for loop in loops)])
    start_lines, starts = read(op.operands[n:], [])
    elements, results, _, body = _fold(b, op, op.results, [])
    names = [f"{prefix}r{k}" for k in range(len(results))]
    code = Writer()
    code.lines(f"{e.compute} {name};" for e, name in zip(results, names))
    with code.block(""):
        code.lines(start_lines)
        code.line(_fold_code(op, (computed, expressions), loops, "", starts, elements, results,
                             body, shape[-1] >= MIN_LANES_LOOP).text())
        code.lines(f"{name} = __acc{k};" for k, name in enumerate(names))
    return [code.text()], names


def _reduce(b: Builder, op: ir.Op) -> list[Binding]:
    """The reduction written into arrays now."""
    dimensions = tuple(int(d) for d in op.attr("dimensions"))
    shape = op.operands[0].type.shape
    reduced = np.prod([shape[d] for d in dimensions], dtype=object)
    outputs = op.results[0].type.size
    identity = _identity(op) if len(op.operands) == 2 else None
    if (identity is not None and not symbolic.is_symbolic(op.operands[0].type)
            and outputs < FEW_OUTPUTS and reduced >= 2 * MIN_CHUNK
            and outputs * reduced >= PARALLEL_MAP_WORK):
        return _reduce_in_chunks(b, op, dimensions, identity)
    if (dimensions and not symbolic.is_symbolic(op.operands[0].type) and outputs
            and op.operands[0].type.size and _row(shape, dimensions) >= MIN_ROW):
        return _reduce_by_rows(b, op, dimensions)
    kept = iter(map_params(len(shape) - len(dimensions)))
    indices = [f"__r{dimensions.index(d)}" if d in dimensions else next(kept)
               for d in range(len(shape))]
    loops = [Loop(f"__r{j}", "0", cpp_size(shape[d])) for j, d in enumerate(dimensions)]
    innermost = shape[dimensions[-1]] if dimensions else 0
    return _emit(b, op, loops, "", indices, reduced, fuse=True,
                 lanes=isinstance(innermost, (int, np.integer))
                 and innermost >= MIN_LANES_LOOP)


def _row(shape: Sequence[int], dimensions: Sequence[int]) -> int:
    """The number of elements in the kept dimensions after the last reduced one."""
    return int(np.prod(shape[max(dimensions) + 1:], dtype=np.int64))


def _reduce_by_rows(b: Builder, op: ir.Op, dimensions: Sequence[int]) -> list[Binding]:
    """A reduction whose kept dimensions after the last reduced one (a row, contiguous in
    operand and result) are long enough, folded a block of the row at a time: one map
    iteration per block keeps its accumulators in a local array, the reduced dimensions
    are its outer loops and the block its inner loop, so reads are contiguous and
    vectorise where reading one output's elements would stride across the operand. Each
    output folds its elements in order (as ``_emit`` does for short loops), so results
    are those of the per-output loops. Where the row is one dimension, an elementwise
    operand only this reduction reads is computed in the inner loop
    (``_operand_reads``)."""
    n = len(op.operands) // 2
    inputs, inits = op.operands[:n], op.operands[n:]
    shape = inputs[0].type.shape
    last = max(dimensions)
    row = _row(shape, dimensions)
    outer = [shape[d] for d in range(last + 1) if d not in dimensions]
    block = min(row, ROW_BLOCK)
    while (block > MIN_ROW_BLOCK and int(np.prod(outer, dtype=np.int64)) * -(-row // block)
           < ROW_ITERATIONS):
        block = max(MIN_ROW_BLOCK, block // 2)
    space = (*outer, -(-row // block))
    params = map_params(len(space))
    kept = iter(params)
    indices = [f"__r{dimensions.index(d)}" if d in dimensions else next(kept)
               for d in range(last + 1)]
    if last == len(shape) - 2:
        arrays, computed, expressions = _operand_reads(b, op, inputs,
                                                       [*indices, "__first + __t"])
    else:  # the row's dimensions taken as one
        arrays, computed, expressions = _array_reads(
            [b.array(v) for v in inputs], [*indices, "__first + __t"],
            [*shape[:last + 1], row])
    targets = [b.allocate_result(v) for v in op.results]
    elements, results, scalars, body = _fold(
        b, op, targets, [b.value(init) for init in inits])
    code = Writer()
    code.line(f"const int64_t __first = (int64_t){params[-1]} * {block}, "
              f"__count = std::min<int64_t>({block}, {row} - __first);")
    for k, e in enumerate(results):
        code.line(f"{e.compute} __row{k}[{block}];",
                  f"for (int64_t __t = 0; __t < __count; ++__t) "
                  f"__row{k}[__t] = {e.load(f'__init{k}')};")
    with code.loops(*(Loop(f"__r{j}", "0", str(shape[d])) for j, d in enumerate(dimensions)),
                    scalar=True), code.loops(Loop("__t", "0", "__count")):
        code.lines(f"{e.compute} __acc{k} = __row{k}[__t];" for k, e in enumerate(results))
        code.lines(computed)
        code.lines(f"const {e.compute} __x{k} = {x};"
                   for k, (e, x) in enumerate(zip(elements, expressions)))
        code.lines(body)
        code.lines(f"__row{k}[__t] = __acc{k};" for k in range(n))
    out = f"({flat_index(outer, params[:-1])}) * {row} + __first"
    code.lines(f"for (int64_t __t = 0; __t < __count; ++__t) "
               f"__dst{k}[{out} + __t] = {e.store(f'__row{k}[__t]')};"
               for k, e in enumerate(results))
    reduced = int(np.prod([shape[d] for d in dimensions], dtype=np.int64))
    b.emit.map("reduce_rows", space, code.text(), {**arrays, **scalars},
               {f"__dst{k}": Whole(t) for k, t in enumerate(targets)}, reduced * block)
    return targets


def _reduce_in_chunks(b: Builder, op: ir.Op, dimensions: Sequence[int], identity
                      ) -> list[Binding]:
    """Partial results per chunk of the largest reduced dimension (a parallel map), then
    the init value folded with the partials in chunk order."""
    operand, init = op.operands
    shape = operand.type.shape
    split = max(dimensions, key=lambda d: shape[d])
    reduced = int(np.prod([shape[d] for d in dimensions], dtype=np.int64))
    chunks = int(min(MAX_CHUNKS, shape[split], reduced // MIN_CHUNK))
    out_type = op.result.type
    kept_rank = out_type.rank
    partial_type = ir.TensorType((*out_type.shape, chunks), out_type.element)
    partials = b.emit.add_array("partials", partial_type)
    kept = iter(map_params(kept_rank))
    chunk = f"__i{kept_rank}"
    indices, loops = [], []
    for d in range(len(shape)):
        if d not in dimensions:
            indices.append(next(kept))
            continue
        j = dimensions.index(d)
        indices.append(f"__r{j}")
        if d == split:
            loops.append(Loop(f"__r{j}", f"(int64_t){chunk} * {shape[d]} / {chunks}",
                              f"((int64_t){chunk} + 1) * {shape[d]} / {chunks}"))
        else:
            loops.append(Loop(f"__r{j}", "0", str(shape[d])))
    start = Literal(identity, ir.TensorType((), out_type.element))
    _accumulate(b, op, "reduce_chunks", _operand_reads(b, op, [operand], indices), loops,
                "", [start], [partials], reduced // chunks, lanes=True)
    target = b.allocate_result(op.result)
    parts = [*map_params(kept_rank), "__c"]
    _accumulate(b, op, "reduce_partials", _array_reads([partials], parts),
                [Loop("__c", "0", str(chunks))], "",
                [b.value(init)], [target], chunks, read_types=[partial_type])
    return [target]


@register("stablehlo.reduce_window")
def reduce_window(b: Builder, op: ir.Op) -> list[Binding]:
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
    high = tuple(int(p) for p in padding.array[:, 1]) if padding is not None else (0,) * rank
    trivial = [window[d] == strides[d] == base[d] == dilations[d] == 1 and low[d] == high[d] == 0
               for d in range(rank)]
    if (len(op.operands) == 2 and trivial.count(False) == 1
            and not symbolic.is_symbolic(op.operands[0].type)):
        d = trivial.index(False)
        n = shape[d]
        forward = low[d] in (n - 1, n) and high[d] == 0
        reverse = high[d] in (n - 1, n) and low[d] == 0
        if (n > SCAN_BLOCK and window[d] == n and strides[d] == base[d] == dilations[d] == 1
                and (forward or reverse)):
            return _scan(b, op, d, forward, exclusive=max(low[d], high[d]) == n)
    static = not (symbolic.is_symbolic(op.operands[0].type)
                  or symbolic.is_symbolic(op.result.type))
    loops, guards, indices = [], [], []
    for d in range(rank):
        loops.append(Loop(f"__w{d}", "0", str(window[d])))
        position = f"((int64_t)__i{d} * {strides[d]} + __w{d} * {dilations[d]} - {low[d]})"
        if not static or low[d] > 0 or base[d] > 1 or (op.result.type.shape[d] - 1) \
                * strides[d] + (window[d] - 1) * dilations[d] >= shape[d]:
            # a position may fall on padding or a hole
            guards.append(on_grid(position, shape[d], base[d]))
        indices.append(f"{position} / {base[d]}" if base[d] > 1 else position)
    size = int(np.prod(window, dtype=np.int64))
    return _emit(b, op, loops, " && ".join(f"({g})" for g in guards), indices, size,
                 unroll=not guards and size <= UNROLLED_WINDOW)


def _scan(b: Builder, op: ir.Op, dimension: int, forward: bool, exclusive: bool
          ) -> list[Binding]:
    """A scan longer than ``SCAN_BLOCK`` (cumsum, cumprod, cummax...) in XLA's order
    (``h2d::xla_scan``: blocks of 16, then their totals), O(n) per row with any body.
    The rows along ``dimension`` are scanned ``SCAN_LANES`` at a time, one map iteration
    each (in parallel): gathered side by side, so that every step of the scan is a loop
    over them that vectorises whatever the axis. An exclusive scan (padding of the whole
    length) has the init value first (last for a reverse scan)."""
    operand, init = op.operands
    element = dtypes.of(operand.type, op.name, op.location)
    shape, result_shape = operand.type.shape, op.result.type.shape
    n, m = shape[dimension], result_shape[dimension]
    outer = int(np.prod(shape[:dimension], dtype=np.int64))
    inner = int(np.prod(shape[dimension + 1:], dtype=np.int64))
    rows = outer * inner
    groups = -(-rows // SCAN_LANES)
    body, (returned,) = b.scalar_region(op.regions[0].entry, ["__a", "__x"], "__v")
    value = element.compute
    if exclusive:
        edge = "__k == 0" if forward else f"__k == {n}"
        take = f"({edge} ? __init : __out[(__k - {int(forward)}) * __lanes + __l])"
    else:
        take = "__out[__k * __lanes + __l]"
    code = Writer()
    code.line(f"const {value} __init = {element.load('__init0')};",
              f"const int64_t __first = (int64_t)__i0 * {SCAN_LANES}LL;",
              f"const int64_t __lanes = std::min<int64_t>({SCAN_LANES}LL, {rows}LL - __first);",
              f"std::vector<{value}> __rows({n} * __lanes), __out({n} * __lanes), "
              f"__scratch(h2d::xla_scan_scratch({n}) * __lanes);",
              f"int64_t __base[{SCAN_LANES}];")
    with code.loops(Loop("__l", "0", "__lanes")):
        code.line("const int64_t __row = __first + __l;",
                  f"__base[__l] = (__row / {inner}LL) * {n * inner}LL + __row % {inner}LL;")
    with code.loops(Loop("__k", "0", str(n)), Loop("__l", "0", "__lanes")):
        code.line(f"__rows[__k * __lanes + __l] = "
                  f"{element.read('__in0', f'__base[__l] + __k * {inner}LL')};")
    with code.block(f"auto __body = [&](const {value} __a, const {value} __x)", end="};"):
        code.lines(body)
        code.line(f"return {returned};")
    code.line(f"h2d::xla_scan(__rows.data(), {n}, __lanes, __init, __body, "
              f"{'true' if forward else 'false'}, __out.data(), __scratch.data());")
    with code.loops(Loop("__k", "0", str(m)), Loop("__l", "0", "__lanes")):
        code.line(f"const int64_t __at = (__base[__l] / {n * inner}LL) * {m * inner}LL + "
                  f"__base[__l] % {n * inner}LL + __k * {inner}LL;",
                  f"__dst[__at] = {element.store(take)};")
    target = b.allocate_result(op.result)
    b.emit.map("scan", [groups], code.text(),
               {"__in0": Whole(b.array(operand)), "__init0": Value(b.value(init))},
               {"__dst": Whole(target)}, 4 * n * SCAN_LANES)
    return [target]


@register("stablehlo.select_and_scatter")
def select_and_scatter(b: Builder, op: ir.Op) -> list[Binding]:
    """The gradient of max pooling. Each window of the padded operand selects one element
    (the first that ``select`` keeps against every later one, in row-major order; padding
    is never selected) and the source value of that window is combined into the result
    there with ``scatter``. Written as a gather: every result element loops over the
    windows that can contain it, recomputes their selection, and accumulates in window
    order, so no two map iterations write the same element. Where the plan says windows
    share no element (``ScatterPerWindow``), the result is the init value everywhere and
    then each window, one map iteration, writes its choice."""
    operand, source, init = op.operands
    shape, windows = operand.type.shape, source.type.shape
    rank = len(shape)
    window = tuple(int(v) for v in op.attr("window_dimensions"))
    strides = tuple(int(v) for v in op.attr("window_strides", (1,) * rank))
    padding = op.attr("padding")
    low = tuple(int(p) for p in padding.array[:, 0]) if padding is not None else (0,) * rank
    element = dtypes.of(operand.type, op.name, op.location)
    result = dtypes.of(op.result.type, op.name, op.location)
    select_lines, (keep,) = b.scalar_region(op.regions[0].entry, ["__best", "__x"], "__sel")
    scatter_lines, (combined,) = b.scalar_region(op.regions[1].entry, ["__acc", "__y"],
                                                 "__sc")

    window_index = flat_index(windows, [f"__wi{d}" for d in range(rank)])

    def select(code: Writer) -> None:
        """The element window ``__wi`` selects, into ``__chosen`` (-1: none)."""
        code.line(f"int64_t __chosen = -1; {element.compute} __best{{}};")
        candidate = flat_index(shape, [f"__p{d}" for d in range(rank)])
        with contextlib.ExitStack() as elements:
            for d in range(rank):
                elements.enter_context(code.loops(Loop(f"__w{d}", "0", str(window[d])),
                                                  scalar=True))
                code.line(f"const int64_t __p{d} = __wi{d} * {strides[d]} - {low[d]} + __w{d};",
                          f"if (__p{d} < 0 || __p{d} >= {shape[d]}) continue;")
            code.line(f"const {element.compute} __x = {element.read('__op', candidate)};",
                      f"if (__chosen < 0) {{ __chosen = {candidate}; __best = __x; continue; }}")
            code.lines(select_lines)
            code.line(f"if (!({keep})) {{ __chosen = {candidate}; __best = __x; }}")

    def combine(code: Writer) -> None:
        """The window's source value combined into ``__acc``."""
        code.line(f"const {result.compute} __y = {result.read('__src', window_index)};")
        code.lines(scatter_lines)
        code.line(f"__acc = {combined};")

    inputs = {"__op": Whole(b.array(operand)), "__src": Whole(b.array(source)),
              "__init": Value(b.value(init))}
    target = b.allocate_result(op.result)
    code = Writer()
    code.line(f"{result.compute} __acc = {result.load('__init')};")
    if annotation(op, ScatterPerWindow) is not None:
        # the init value everywhere, then one iteration per window: no two write one element
        code.line(f"__out0 = {result.store('__acc')};")
        b.emit.map("select_and_scatter_init", target.type.shape, code.text(),
                   {"__init": inputs["__init"]}, {"__out0": Element(target)})
        b.emit.new_state("select_and_scatter")
        code = Writer()
        code.lines(f"const int64_t __wi{d} = __i{d};" for d in range(rank))
        select(code)
        with code.block("if (__chosen >= 0)"):
            code.line(f"{result.compute} __acc = {result.load('__init')};")
            combine(code)
            code.line(f"__out[__chosen] = {result.store('__acc')};")
        b.emit.map("select_and_scatter", windows, code.text(), inputs,
                   {"__out": Whole(target)})
        return [target]
    with contextlib.ExitStack() as windows_around:
        # the windows that can contain this element, in row-major window order
        for d in range(rank):
            windows_around.enter_context(code.loops(Loop(f"__k{d}", str(window[d] - 1), "-1",
                                                         -1)))
            code.line(f"const int64_t __t{d} = (int64_t)__i{d} + {low[d]} - __k{d};",
                      f"if (__t{d} < 0 || __t{d} % {strides[d]} != 0 || "
                      f"__t{d} / {strides[d]} >= {windows[d]}) continue;",
                      f"const int64_t __wi{d} = __t{d} / {strides[d]};")
        select(code)
        with code.block(f"if (__chosen == {flat_index(shape, map_params(rank))})"):
            combine(code)
    code.line(f"__out0 = {result.store('__acc')};")
    b.emit.map("select_and_scatter", target.type.shape, code.text(), inputs,
               {"__out0": Element(target)})
    return [target]
