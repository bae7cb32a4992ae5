"""Emits an elementwise cluster as one map of one tasklet: each op a C++ local of that
tasklet, operands read through (broadcasting) memlets, splat constants as literals, and
arrays written only for the values used outside the cluster. A ``PendingView`` operand
(a slice, transpose or reverse of a pending value) is recomputed in the reading tasklet at the index
it reads, so the value it views need not be written at all; a ``Gathered`` operand (a gather
not emitted) is gathered there, reading its start indices the same way."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import dace
import numpy as np

from .. import ir
from ..plan.annotations import Contraction, annotation
from . import dtypes, registry
from .bindings import (
    Array,
    Binding,
    ElementwiseCluster,
    Gathered,
    Pending,
    PendingView,
    Pieces,
    Reshaped,
    RowReduction,
    View,
    axes_point,
    clamp_index,
    flat_index,
    map_params,
    unmaterialised_rows,
)
from .cpp import Loop, Writer
from .emitter import Emitter, Whole, schedule_for
from .literals import literal
from .scopes import callee

#: ``resolve(binding)``: the builder's way to turn a pending value or a concatenation into
#: something memlets read (``Builder.resolve``), emitting its cluster if need be
Resolve = Callable[[Binding], Binding]


def emit_cluster(emit: Emitter, cluster: ElementwiseCluster, resolve: Resolve) -> None:
    """Write the values of ``cluster`` that anything outside it needs (function results
    into their arrays) with one map, and bind them to those arrays."""
    members = {(id(scope), id(op)) for op, scope in cluster.members}

    def needs_array(scope, value: ir.Value) -> bool:
        """Used outside the cluster other than through views its readers recompute."""
        key = (id(scope), value.name)
        for user in scope.uses.get(value.name, ()):
            if (id(scope), id(user)) in members or _reduced_in_rows(scope, user):
                continue
            view = scope.env.get(user.results[0].name) if len(user.results) == 1 else None
            if not (isinstance(view, PendingView) and view.source.key == key
                    or key in cluster.absorbed):
                return True
        return key in cluster.required

    # Values used outside the cluster get arrays; everything else stays in registers.
    outputs: dict[tuple[int, str], Array] = {}
    for op, scope in cluster.members:
        for value in op.results:
            if needs_array(scope, value):
                with emit.at(op):
                    destination = scope.claim(value)
                    outputs[(id(scope), value.name)] = Array(destination, value.type) \
                        if destination is not None else \
                        emit.add_array(value.name.lstrip("%"), value.type)
    cluster.resolved.update(outputs)
    if 0 not in cluster.shape and outputs:
        outer = _row_rank(cluster)
        if outer is None:
            _emit_map(emit, cluster, outputs, resolve)
        else:
            _emit_row_map(emit, cluster, outputs, resolve, outer)
    # bound only now: inside the map, members read each other's registers, not the arrays
    for op, scope in cluster.members:
        for value in op.results:
            if (id(scope), value.name) in outputs:
                scope.env[value.name] = outputs[(id(scope), value.name)]


def _reduced_in_rows(scope, user: ir.Op) -> bool:
    """Whether ``user`` is a reduction bound to a ``RowReduction`` not written yet: the
    map that reads it computes it, and what it reduces, row by row."""
    if not user.results:
        return False
    binding = scope.env.get(user.results[0].name)
    return isinstance(binding, RowReduction) and not binding.materialised


def _row_rank(cluster: ElementwiseCluster) -> int | None:
    """The rank of the rows that ``cluster``'s map iterates over, if it reads row
    reductions not written yet (through views and recomputed values): the leading
    dimensions of its shape, the shape of those reductions' results, which all agree."""
    found = set()
    for op, scope in cluster.members:
        for v in op.operands:
            binding = scope.env.get(v.name)
            if binding is None or (isinstance(binding, Pending) and binding.cluster is cluster):
                continue
            for row in unmaterialised_rows(binding, 1 << 8):
                found.add(tuple(row.op.results[row.index].type.shape))
    if len(found) != 1 or any(not isinstance(n, (int, np.integer)) for n in cluster.shape):
        return None
    (outer,) = found
    return len(outer) if tuple(cluster.shape[:len(outer)]) == outer else None


class RowContext:
    """The row reductions one map iteration computes, at the point ``point`` of its row
    (``RowReduction``): each once, before the loop over the row that reads it, a
    reduction that another one reads first (a softmax's maximum before its sum). An
    expensive value with other readers that a reduction's loop computes along the row
    (a softmax's exponential) is kept in a row buffer on the stack, which later loops
    read instead of computing it again, where the row is short enough. A value that is
    the same along the row (a softmax's ``maximum(-inf, max)``, broadcast) is computed
    once per row before the loops that read it (``invariant``): computed in the loop, its
    selects kept GCC from vectorising the loop, exponential included (8x slower)."""

    def __init__(self, emit: Emitter, resolve: Resolve, cluster: ElementwiseCluster,
                 point: list[str], pointers: dict[str, Array]):
        self.emit, self.resolve, self.cluster = emit, resolve, cluster
        self.point, self.pointers = point, pointers
        self.code = Writer()
        #: computes the values that ``invariant`` hoists, into ``code``
        self.hoisted = Recompute(emit, resolve, cluster, "__rh", {}, [], pointers, self)
        self.names: dict[int, list[str]] = {}
        #: value key -> (buffer, the row's shape), once the loop that fills it is written
        self.buffers: dict[tuple, tuple[str, tuple]] = {}
        self.filling: dict[tuple, tuple[str, tuple]] = {}
        self.count = 0

    def value(self, row: RowReduction, point: list[str]) -> str | None:
        """The local that holds ``row`` at ``point``, computed here if need be; None where
        ``point`` is not this map's row (then the reduction is written and read)."""
        if list(point) != self.point:
            return None
        key = id(row.op)
        if key not in self.names:
            prefix = f"__row{self.count}_"
            self.count += 1

            def read(values: list[ir.Value], at: list[str]) -> tuple[list[str], list[str]]:
                # the cluster's values are recomputed: its loop has not written them yet
                recompute = Recompute(self.emit, self.resolve, self.cluster, prefix, {}, [],
                                      self.pointers, self, at[len(self.point):])
                expressions = [recompute.value(row.scope.env[v.name], at) for v in values]
                return recompute.lines, expressions

            lines, names = row.fold(self.point, read, prefix)
            with self.emit.at(row.op):
                self.code.line(self.emit.origin())
            self.code.lines(lines)
            self.names[key] = names
            self.buffers.update(self.filling)
            self.filling.clear()
        return self.names[key][row.index]

    def invariant(self, binding: Pending, point: list[str]) -> str | None:
        """The local that holds ``binding`` at ``point``, computed before the row's loops,
        if ``point`` names no variable but the row's (it is the same all along the row)."""
        names = {name for at in point for name in _IDENTIFIER.findall(at)}
        if not names <= set(self.point):
            return None
        name = self.hoisted.value(binding, point)
        self.code.lines(self.hoisted.lines)  # lines computed before, in their order
        self.hoisted.lines.clear()
        return name

    def buffered(self, binding: Pending, point: list[str]) -> str | None:
        """``binding`` at ``point`` read from its row buffer, if a loop before filled one."""
        found = self.buffers.get(binding.key)
        if found is None or list(point[:len(self.point)]) != self.point:
            return None
        name, shape = found
        return f"{name}[{flat_index(shape, point[len(self.point):])}]"

    def buffer(self, binding: Pending, op: ir.Op, point: list[str], loop: list[str] | None,
               name: str, element) -> list[str]:
        """The statement that keeps ``name`` (``binding`` at ``point``, computed in the
        loop over the row with variables ``loop``) in a row buffer, if it is worth one."""
        shape = tuple(binding.type.shape[len(self.point):])
        if (not loop or list(point) != [*self.point, *loop]
                or not registry.record(op.name).expensive
                or len(binding.scope.uses.get(binding.value.name, ())) < 2
                or int(np.prod(shape, dtype=np.int64)) * 8 > self.emit.machine.row_buffer_bytes):
            return []
        buffer = f"__rowbuf{len(self.buffers) + len(self.filling)}"
        self.filling[binding.key] = (buffer, shape)
        self.code.line(f"{element.compute} {buffer}[{int(np.prod(shape, dtype=np.int64))}];")
        return [f"{buffer}[{flat_index(shape, loop)}] = {name};"]


def _emit_row_map(emit: Emitter, cluster: ElementwiseCluster, outputs: dict,
                  resolve: Resolve, outer: int) -> None:
    """The cluster's map over its rows (its leading ``outer`` dimensions): per row, the
    row reductions it reads (``RowContext``), then a loop over the row that computes its
    outputs (``Recompute``), everything read through pointers."""
    shape = cluster.shape
    params = map_params(outer)
    loops = [Loop(f"__j{d}", "0", str(n)) for d, n in enumerate(shape[outer:])]
    point = [*params, *(loop.variable for loop in loops)]
    pointers: dict[str, Array] = {}
    row = RowContext(emit, resolve, cluster, params, pointers)
    written_values = [(op, scope, value, outputs[(id(scope), value.name)])
                      for op, scope in cluster.members for value in op.results
                      if (id(scope), value.name) in outputs]
    # once to write the reductions' loops (in the order the outputs need them, each before
    # the one that reads it), then for the loop over the row, which reads their buffers
    dry_run = Recompute(emit, resolve, cluster, "__m", {}, [], pointers, row)
    for op, scope, value, _ in written_values:
        dry_run.value(Pending(cluster, value, scope, op), point)
    main = Recompute(emit, resolve, cluster, "__m", {}, [], pointers, row)
    stores, written = [], {}
    for op, scope, value, array in written_values:
        with emit.at(op):
            element = dtypes.of(value.type, op.name, op.location)
        expression = main.value(Pending(cluster, value, scope, op), point)
        conn = f"__o{len(written)}"
        written[conn] = Whole(array)
        stores.append(f"{conn}[{flat_index(shape, point)}] = {element.store(expression)};")
    code = row.code
    with code.loops(*loops):
        code.lines(main.lines)
        code.lines(stores)
    row_length = int(np.prod(shape[outer:], dtype=np.int64))
    emit.map("row_fused", shape[:outer], code.text(),
             {conn: Whole(array) for conn, array in pointers.items()}, written,
             row_length * (len(main.lines) + 4 * len(row.names) + 1))


def emit_row_reductions(emit: Emitter, resolve: Resolve, rows: list[RowReduction],
                        targets: list[Array]) -> None:
    """Write the results ``rows`` of one reduction over trailing dimensions into
    ``targets`` with one map over its rows that computes, per row, the row reductions its
    operand reads (``RowContext``) and then it: ``exp(x - max(x)).sum(-1)`` reads each row
    from memory once, as XLA's fusion does, not once per reduction."""
    shape = targets[0].type.shape
    params = map_params(len(shape))
    pointers: dict[str, Array] = {}
    row = RowContext(emit, resolve, None, params, pointers)
    written = {}
    for k, (reduction, target) in enumerate(zip(rows, targets)):
        local = row.value(reduction, params)
        written[f"__o{k}"] = Whole(target)
        row.code.line(f"__o{k}[{flat_index(shape, params)}] = "
                      f"{dtypes.of(target.type).store(local)};")
    row_length = int(np.prod(rows[0].op.operands[0].type.shape[len(shape):], dtype=np.int64))
    emit.map("row_reduced", shape, row.code.text(),
             {conn: Whole(array) for conn, array in pointers.items()}, written,
             row_length * 4 * (len(row.names) + 1))


#: a C++ identifier in an index expression (a cast's type counts: such a point is not hoisted)
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")



@dataclass(frozen=True)
class Contracted:
    """An add or subtract computed as ``h2d::mul_add(±x, y, ±z)``: its ``operand`` at this
    position is the product ``product`` (negated where ``negated``), the other is z."""

    operand: int
    product: ir.Op
    negated: bool
    subtract: bool


#: ``sharing(value, user)``: whether an op other than ``user`` reads ``value`` in the code
#: being emitted
Sharing = Callable[[ir.Value, ir.Op], bool]


def contraction(op: ir.Op, env, computed: Callable[[Binding], bool],
                sharing: Sharing) -> Contracted | None:
    """How ``op`` is contracted with a product, where the plan says it may be
    (``Contraction``): the first candidate whose product (and negation) is ``computed`` by
    the code being emitted and written to no array, as a contracted product must be (XLA
    copies a product into the fusions of its readers only where every reader can fuse it,
    so a product that is also a result, or that a loop or a library call reads, is read
    from memory by all), and, where it has other readers, none of them reads it in the
    same code (then XLA computes it once for both and does not contract it). ``env``:
    the bindings of ``op``'s scope."""
    found = annotation(op, Contraction)
    for k, negated, shared in found.candidates if found is not None else ():
        value = op.operands[k]
        binding = env.get(value.name)
        if not computed(binding):
            continue
        reads = [(value, op)]
        product = binding.op
        if negated:
            negation = product
            binding = env.get(negation.operands[0].name)
            if not computed(binding):
                continue
            reads.append((negation.operands[0], negation))
            product = binding.op
        if shared and any(sharing(v, user) for v, user in reads):
            continue
        return Contracted(k, product, negated, found.subtract)
    return None


def _unwritten(binding) -> bool:
    return isinstance(binding, Pending) and binding.unresolved


def _fused_roots(cluster: ElementwiseCluster, outputs: dict, in_cluster
                 ) -> tuple[dict[int, frozenset], dict[tuple[int, str], list[ir.Op]]]:
    """For each member (by ``id``), the outputs of the cluster computed from its value
    through members that read it directly: the values XLA would make the roots of the
    fusions that contain the member's code; and for each member's value, the members that
    read it."""
    readers: dict[tuple[int, str], list[ir.Op]] = {}
    for op, scope in cluster.members:
        for v in op.operands:
            binding = scope.env.get(v.name)
            if in_cluster(binding):
                readers.setdefault(binding.key, []).append(op)
    roots: dict[int, frozenset] = {}
    for op, scope in reversed(cluster.members):
        key = (id(scope), op.results[0].name)
        mine = {key} if key in outputs else set()
        for reader in readers.get(key, ()):
            mine |= roots.get(id(reader), frozenset())
        roots[id(op)] = frozenset(mine)
    return roots, readers


def contracted_expression(op: ir.Op, found: Contracted, factors: list[str],
                          other: str) -> str:
    """The C++ of ``op`` contracted as ``found`` says, from the product's factors and the
    other operand's expression."""
    x, y = factors
    if found.negated or (found.subtract and found.operand == 1):
        x = f"(-{x})"  # z - x*y and -(x*y) + z: fma(-x, y, z)
    elif found.subtract:
        other = f"(-{other})"  # x*y - z: fma(x, y, -z)
    function = "mul_add_f16" if op.result.type.element == "f16" else "mul_add"
    return f"h2d::{function}({x}, {y}, {other})"


@dataclass
class _Code:
    """The one tasklet of a cluster's map, as it is written: its connectors, the edges
    that feed them, its lines, and the C++ names of the values it has computed."""

    in_conns: dict = field(default_factory=dict)
    in_edges: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    names: dict = field(default_factory=dict)
    #: the connector of each element read through a memlet, read once for all its readers
    reads: dict = field(default_factory=dict)
    #: the range of the innermost index the map covers (None: all of it)
    within: tuple[int, int] | None = None


def _emit_map(emit: Emitter, cluster: ElementwiseCluster, outputs: dict,
              resolve: Resolve) -> None:
    """The cluster's map: ONE tasklet that computes the members an output needs, each
    into a C++ local (its op's comment above it, for the profiler), reading operands
    through memlets (or as literals, or recomputing the pending values that views of them
    read), and writing ``outputs`` through the map's exit. One tasklet, not one per op:
    DaCe's translation and code generation cost grows with the nodes of a state, and the
    compiler sees the same expressions either way."""
    # the members an output needs (others are read only through recomputed views), and
    # their values read by members, also under another name (a func.call's result)
    def in_cluster(binding) -> bool:
        return isinstance(binding, Pending) and binding.cluster is cluster

    def in_registers(binding) -> bool:
        return in_cluster(binding) and binding.key not in outputs

    roots, readers = _fused_roots(cluster, outputs, in_cluster)
    live, contractions = set(outputs), {}
    for op, scope in reversed(cluster.members):
        if (id(scope), op.results[0].name) in live:
            def sharing(value: ir.Value, user: ir.Op, op=op, scope=scope) -> bool:
                key = scope.env[value.name].key
                return any(other is not user and roots.get(id(other), frozenset())
                           & roots[id(op)] for other in readers.get(key, ()))

            found = contraction(op, scope.env, in_registers, sharing)
            operands = list(op.operands)
            if found is not None:
                contractions[id(op)] = found
                operands[found.operand:found.operand + 1] = found.product.operands
            for v in operands:
                binding = scope.env.get(v.name)
                if in_cluster(binding):
                    live.add(binding.key)
    for within in _innermost_intervals(cluster):
        _emit_interval(emit, cluster, outputs, resolve, live, contractions, within)


def _innermost_intervals(cluster: ElementwiseCluster) -> list[tuple[int, int] | None]:
    """The ranges of the innermost index over which the cluster's map is split: one per
    run of elements that every concatenation along that dimension the cluster reads
    takes from the same part (``jnp.roll``, ``jnp.concatenate(..., axis=-1)``). Within
    one, each element is read from its part at an affine index, without the select and
    the clamped index of ``_read_pieces``, which kept GCC from vectorising the loop (a
    periodic 512x512 stencil: 3.3 ns an element). ``[None]``: not split."""
    rank = len(cluster.shape)
    if not rank or not isinstance(cluster.shape[-1], (int, np.integer)):
        return [None]
    cuts = {0, int(cluster.shape[-1])}
    for op, scope in cluster.members:
        for v in op.operands:
            binding = scope.env.get(v.name)
            if isinstance(binding, Pieces) and not binding.materialised \
                    and binding.dimension == rank - 1:
                ends = [end for _, end in binding.extents()]
                if not all(isinstance(end, (int, np.integer)) for end in ends):
                    return [None]
                cuts.update(int(end) for end in ends)
    if len(cuts) == 2 or len(cuts) > MOST_INTERVALS + 1:
        return [None]
    cuts = sorted(cuts)
    return list(zip(cuts, cuts[1:]))


#: the most maps a cluster's map is split into along its innermost dimension
MOST_INTERVALS = 8


def _emit_interval(emit: Emitter, cluster: ElementwiseCluster, outputs: dict,
                   resolve: Resolve, live: set, contractions: dict,
                   within: tuple[int, int] | None) -> None:
    """The map of ``_emit_map`` over the elements whose innermost index lies in
    ``within`` (None: all)."""
    shape = cluster.shape
    rank = len(shape)
    state = emit.state
    if rank:
        ranges = [f"0:{n}" for n in shape]
        extent = list(shape)
        if within is not None:
            ranges[-1] = f"{within[0]}:{within[1]}"
            extent[-1] = within[1] - within[0]
        entry, exit_ = state.add_map(emit.fresh("fused"), dict(zip(map_params(rank), ranges)),
                                     schedule=schedule_for(extent, len(cluster.members)))
    else:
        entry = exit_ = None
    code, out_conns, out_edges, debuginfo = _Code(within=within), {}, [], None
    for index, (op, scope) in enumerate(cluster.members):
        key = (id(scope), op.results[0].name)
        if key not in live:
            continue
        with emit.at(op):
            debuginfo = debuginfo or emit.debuginfo()
            out_type = dtypes.of(op.result.type, op.name, op.location)
            found = contractions.get(id(op))
            wanted = list(enumerate(op.operands))  # (connector number, operand)
            if found is not None:
                other = 1 - found.operand
                wanted = [(f"{found.operand}_{j}", v)
                          for j, v in enumerate(found.product.operands)]
                wanted.append((other, op.operands[other]))
            code.lines.append(emit.origin())
            args = [_member_operand(emit, cluster, scope.env[v.name], f"__m{index}_{k}",
                                    dtypes.of(v.type, op.name, op.location), code, resolve)
                    for k, v in wanted]
            if found is not None:
                expression = contracted_expression(op, found, args[:2], args[2])
            else:
                in_types = [dtypes.of(v.type, op.name, op.location) for v in op.operands]
                expression = registry.elementwise_rule(op).at(op, args, in_types, out_type,
                                                              map_params(rank))
            name = code.names[key] = f"__v{index}"
            fitted = out_type.fit(expression, registry.record(op.name).exact)
            code.lines.append(f"const {out_type.compute} {name} = {fitted};")
            if key in outputs:
                array, conn = outputs[key], f"__o{index}"
                out_conns[conn] = out_type.storage
                code.lines.append(f"{conn} = {out_type.store(name)};")
                subset = ", ".join(map_params(rank)) if rank else "0"
                out_edges.append((conn, emit.write(array.name),
                                  dace.Memlet(f"{array.name}[{subset}]")))
    tasklet = state.add_tasklet(emit.fresh("fused"), code.in_conns, out_conns,
                                "\n".join(code.lines), language=dace.Language.CPP,
                                debuginfo=debuginfo)
    if entry is not None and not code.in_edges:
        state.add_nedge(entry, tasklet, dace.Memlet())  # keep it inside the map scope
    for source, conn, memlet in code.in_edges:
        if entry is not None:
            state.add_memlet_path(source, entry, tasklet, dst_conn=conn, memlet=memlet,
                                  propagate=False)
        else:
            state.add_edge(source, None, tasklet, conn, memlet)
    for conn, target, memlet in out_edges:
        if exit_ is not None:
            state.add_memlet_path(tasklet, exit_, target, src_conn=conn, memlet=memlet,
                                  propagate=False)
        else:
            state.add_edge(tasklet, conn, target, None, memlet)
    if entry is not None:
        emit.propagate_map(entry, exit_)


def _member_operand(emit: Emitter, cluster: ElementwiseCluster, binding: Binding, conn: str,
                    element, code: _Code, resolve: Resolve) -> str:
    """The C++ expression (compute type) of a member's operand bound to ``binding``: a
    value of the cluster computed before it, a concatenation or a view of a pending value
    recomputed in place, a gathered element, a literal, or an element read through a
    memlet (connector ``conn``, or the one that reads the same element already)."""
    if isinstance(binding, Pending) and binding.cluster is cluster:
        return code.names[binding.key]
    rank = len(cluster.shape)
    if isinstance(binding, Pieces) and not binding.materialised:
        return _read_pieces(emit, binding, conn, element, rank, code.in_conns, code.in_edges,
                            code.within if binding.dimension == rank - 1 else None)
    if isinstance(binding, (PendingView, Gathered, Reshaped)):
        recompute = Recompute(emit, resolve, cluster, f"{conn}_", code.in_conns,
                              code.in_edges)
        expression = recompute.value(binding, map_params(rank))
        code.lines.extend(recompute.lines)
        return expression
    binding = resolve(binding)
    if binding.is_literal:
        return f"({literal(binding.value, element)})"
    memlet = f"{binding.data}[{', '.join(binding.subscripts(rank))}]"
    if memlet not in code.reads:
        code.reads[memlet] = conn
        code.in_conns[conn] = element.storage
        code.in_edges.append((emit.read(binding.data), conn, dace.Memlet(memlet)))
    return element.load(code.reads[memlet])


class Recompute:
    """C++ statements that compute a pending value at a given index inside one tasklet, op
    by op, reading what the ops read through memlets (connectors ``prefix0, prefix1...``).
    Values of the cluster being emitted are always recomputed: its map may not have
    written the element yet. With ``pointers``, every array is read whole through a
    pointer (the connector to array map it fills), so the index may be a loop variable of
    the tasklet's own code (a reduction's loop over its reduced elements)."""

    def __init__(self, emit: Emitter, resolve: Resolve, cluster, prefix: str, in_conns: dict,
                 in_edges: list, pointers: dict[str, Array] | None = None,
                 row: RowContext | None = None, loop: list[str] | None = None):
        self.emit, self.resolve, self.cluster, self.prefix = emit, resolve, cluster, prefix
        self.in_conns, self.in_edges, self.pointers = in_conns, in_edges, pointers
        self.row, self.loop = row, loop
        self.lines: list[str] = []
        self.done: dict[tuple, str] = {}
        #: whether the point is data-dependent (a gathered element's): arrays are read
        #: through pointers then, as a memlet's subset is no such index
        self.indirect = False

    def value(self, binding, point: list[str]) -> str:
        """The C++ expression (compute type) of ``binding`` at ``point``."""
        if isinstance(binding, PendingView):
            return self.value(binding.source, axes_point(binding.axes, point))
        if isinstance(binding, Gathered) and not binding.materialised:
            return self._gather(binding, point)
        if isinstance(binding, Gathered):
            binding = binding.materialised[0]
        if isinstance(binding, Reshaped) and not binding.materialised:
            source = binding.source
            array = source.source if isinstance(source, View) else source
            at = flat_index(array.type.shape, binding.source_point(point))
            return dtypes.of(binding.type).read(self._pointer(array), at)
        if isinstance(binding, Reshaped):
            binding = binding.materialised[0]
        if isinstance(binding, RowReduction) and not binding.materialised \
                and self.row is not None:
            local = self.row.value(binding, point if binding.axes is None
                                   else axes_point(binding.axes, point))
            if local is not None:
                return local
        if self._recomputed(binding):
            return self._compute(binding, point)
        if isinstance(binding, Pending):
            binding = binding.cluster.resolved[binding.key]
        element = dtypes.of(binding.type)
        binding = self.resolve(binding)  # a concatenation: written already
        if binding.is_literal:
            return f"({literal(binding.value, element)})"
        subscripts = binding.subscripts(len(point), point)
        if self.pointers is not None or self.indirect:
            source = binding.source if isinstance(binding, View) else binding
            return element.read(self._pointer(source),
                                flat_index(source.type.shape, subscripts))
        conn = f"{self.prefix}{len(self.in_conns)}"
        self.in_conns[conn] = element.storage
        self.in_edges.append((self.emit.read(binding.data), conn,
                              dace.Memlet(f"{binding.data}[{', '.join(subscripts)}]")))
        return element.load(conn)

    def _pointer(self, array: Array) -> str:
        """The connector through which this tasklet reads all of ``array``."""
        if self.pointers is not None:
            conn = next((c for c, a in self.pointers.items() if a.name == array.name),
                        f"{self.prefix}{len(self.pointers)}")
            self.pointers[conn] = array
            return conn
        conn = f"{self.prefix}{len(self.in_conns)}"
        self.in_conns[conn] = dace.pointer(dtypes.of(array.type).storage)
        full = ", ".join(f"0:{n}" for n in array.type.shape) or "0"
        self.in_edges.append((self.emit.read(array.name), conn,
                              dace.Memlet(f"{array.name}[{full}]")))
        return conn

    def _gather(self, gathered: Gathered, point: list[str]) -> str:
        """The gathered element at ``point``: its start indices (computed or read here),
        clamped, and the operand element they select, read through a pointer."""
        key = (id(gathered), tuple(point))
        if key not in self.done:
            starts = [clamp_index(self.value(start, point), ir.is_unsigned(start.type.element),
                                  largest) for start, largest in zip(gathered.starts,
                                                                      gathered.limits)]
            position = []
            for start, axis in gathered.position:
                offset = axes_point((axis,), point)[0]
                position.append(offset if start is None else starts[start] if offset == "0"
                                else f"{starts[start]} + ({offset})")
            source = gathered.operand
            element = dtypes.of(gathered.type)
            if isinstance(source, Pending):  # computed here, at the gathered element
                indirect, self.indirect = self.indirect, True
                read = self.value(source, position)
                self.indirect = indirect
            else:
                array = source.source if isinstance(source, View) else source
                if isinstance(source, View):
                    position = axes_point(source.axes, position)
                read = element.read(self._pointer(array),
                                    flat_index(array.type.shape, position))
            name = f"{self.prefix}v{len(self.done)}"
            self.lines.append(f"const {element.compute} {name} = {read};  {gathered.origin}")
            self.done[key] = name
        return self.done[key]

    def _recomputed(self, binding) -> bool:
        """Whether ``binding`` is computed in this tasklet rather than read from an array."""
        return isinstance(binding, Pending) and (binding.unresolved
                                                 or binding.cluster is self.cluster)

    def _compute(self, binding: Pending, point: list[str]) -> str:
        point = point if binding.type.rank else []
        key = (binding.key, tuple(point))
        if self.row is not None:
            stored = self.row.buffered(binding, point) if self is self.row.hoisted \
                else self.row.invariant(binding, point) or self.row.buffered(binding, point)
            if stored is not None:
                return stored
        if key not in self.done:
            op = binding.op
            out_type = dtypes.of(binding.type, op.name, op.location)
            env = binding.scope.env
            found = contraction(op, env, _unwritten, lambda value, user: True)
            if found is not None:
                factors = [self.value(env[v.name], point) for v in found.product.operands]
                expression = contracted_expression(
                    op, found, factors, self.value(env[op.operands[1 - found.operand].name],
                                                   point))
            else:
                in_types = [dtypes.of(v.type, op.name, op.location) for v in op.operands]
                args = [self.value(env[v.name], point) for v in op.operands]
                expression = registry.elementwise_rule(op).at(op, args, in_types, out_type,
                                                              point)
            name = f"{self.prefix}v{len(self.done)}"
            with self.emit.at(op):
                origin = self.emit.origin()
            fitted = out_type.fit(expression, registry.record(op.name).exact)
            self.lines.append(f"const {out_type.compute} {name} = {fitted};  {origin}")
            self.done[key] = name
            if self.row is not None:
                self.lines.extend(self.row.buffer(binding, op, point, self.loop, name,
                                                  out_type))
        return self.done[key]


def emit_recomputed(emit: Emitter, binding, target: Array, resolve: Resolve) -> Array:
    """Write ``binding`` (a pending value or a view of one that no cluster wrote) into
    ``target`` with one map over its shape."""
    t = binding.type
    if t.size:
        in_conns, in_edges = {}, []
        recompute = Recompute(emit, resolve, None, "__in", in_conns, in_edges)
        expression = recompute.value(binding, map_params(t.rank))
        element = dtypes.of(t)
        code = "\n".join([*recompute.lines, f"__out = {element.store(expression)};"])
        subset = ", ".join(map_params(t.rank)) if t.rank else "0"
        tasklet = emit.map("recompute", t.shape, code,
                           {conn: memlet for _, conn, memlet in in_edges},
                           {"__out": dace.Memlet(f"{target.name}[{subset}]")},
                           work_per_element=len(recompute.lines) + 1)
        for conn, kind in in_conns.items():
            if isinstance(kind, dace.pointer):  # a gathered operand, read whole
                tasklet.in_connectors[conn] = kind
    return target


def _read_pieces(emit: Emitter, pieces: Pieces, conn: str, element, rank: int,
                 in_conns: dict, in_edges: list, within: tuple[int, int] | None = None) -> str:
    """A concatenation read element by element: every part through a memlet at the
    position clamped into it (always in bounds), the part the element falls in chosen;
    where the index along its dimension lies ``within`` one part, only that part."""
    dimension = pieces.dimension
    here = f"__i{dimension}"
    choices = []
    for j, (part, (start, end)) in enumerate(zip(pieces.parts, pieces.extents())):
        inside = within is not None and start <= within[0] and within[1] <= end
        if within is not None and not inside:
            continue
        if part.is_literal:
            choices.append(f"({literal(part.value, element)})")
            continue
        position = f"{here} - {start}" if start else here
        if not inside:
            position = f"max({position}, 0)" if start else position
            if end < pieces.type.shape[dimension]:
                position = f"min({position}, {end - start - 1})"
        point = map_params(rank)
        point[dimension] = position
        subset = ", ".join(part.subscripts(rank, point))
        in_conns[f"{conn}_{j}"] = element.storage
        in_edges.append((emit.read(part.data), f"{conn}_{j}",
                         dace.Memlet(f"{part.data}[{subset}]")))
        choices.append(element.load(f"{conn}_{j}"))
    expression = choices[-1]
    for (_, end), choice in reversed(list(zip(pieces.extents(), choices))[:-1]):
        expression = f"({here} < {end} ? {choice} : {expression})"
    return expression


def _no_operand(k: int):
    raise LookupError(k)


def scalar_region(emit: Emitter, module: ir.Module, block: ir.Block, arguments: list[str],
                  prefix: str) -> tuple[list[str], list[str]]:
    """C++ for a region of elementwise ops on 0-d values (reducer bodies, comparators):
    ``arguments`` are the C++ expressions of the block's arguments (in compute types);
    returns the statements and the expressions of the values the terminator returns.
    Constants (ops without operands whose value is known) become literals, calls are
    inlined (JAX writes some reducer bodies as a call of a private function), and ops
    whose record says so pass one element through; anything else is unsupported."""
    names = {value.name: expression for value, expression in zip(block.arguments, arguments)}
    lines = []
    for k, op in enumerate(block.ops[:-1]):
        with emit.at(op):
            function = callee(module, op)
            if function is not None:
                body, returned = scalar_region(emit, module, function.body.entry,
                                               [names[v.name] for v in op.operands],
                                               f"{prefix}{k}_")
                lines.extend(body)
                names.update((r.name, e) for r, e in zip(op.results, returned))
                continue
            record = registry.record(op.name)
            single = len(op.results) == 1 and op.results[0].type.size == 1
            if single and not op.operands and record.known is not None:
                element = dtypes.of(op.result.type, op.name, op.location)
                value = record.known(op, _no_operand)
                names[op.result.name] = f"({literal(value.reshape(-1)[0], element)})"
                continue
            if single and record.scalar_alias:
                names[op.result.name] = names[op.operands[0].name]
                continue
            rule = registry.elementwise_rule(op)
            if rule is None or len(op.results) != 1:
                raise emit.unsupported("only elementwise ops and constants are supported in "
                                       "this region")
            out_type = dtypes.of(op.result.type, op.name, op.location)
            in_types = [dtypes.of(v.type, op.name, op.location) for v in op.operands]
            expression = rule.at(op, [names[v.name] for v in op.operands], in_types,
                                 out_type, ["0"] * op.result.type.rank)
            variable = f"{prefix}{k}"
            fitted = out_type.fit(expression, registry.record(op.name).exact)
            lines.append(f"const {out_type.compute} {variable} = {fitted};")
            names[op.result.name] = variable
    return lines, [names[v.name] for v in block.terminator.operands]
