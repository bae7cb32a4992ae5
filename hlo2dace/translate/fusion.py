"""Emits an elementwise cluster as one map: one tasklet per op, register scalars between
tasklets, operands read through (broadcasting) memlets, splat constants as literals, and
arrays written only for the values used outside the cluster. A ``PendingView`` operand
(a slice, transpose or reverse of a pending value) is recomputed in the reading tasklet at the index
it reads, so the value it views need not be written at all."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dace

from .. import ir
from . import dtypes, registry
from .builder import (
    Array,
    Literal,
    Pending,
    PendingView,
    Pieces,
    View,
    axes_point,
    flat_index,
    index_expressions,
    map_params,
    schedule_for,
    unresolved,
)
from .literals import literal

if TYPE_CHECKING:
    from .builder import Builder, ElementwiseCluster


def emit_cluster(b: Builder, cluster: ElementwiseCluster) -> None:
    members = {(id(scope), id(op)) for op, scope in cluster.members}
    saved_op = b.current_op

    def needs_array(scope, value: ir.Value) -> bool:
        """Used outside the cluster other than through views its readers recompute."""
        key = (id(scope), value.name)
        for user in scope.uses.get(value.name, ()):
            if (id(scope), id(user)) in members:
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
                b.current_op = op
                outputs[(id(scope), value.name)] = b.result_array(
                    value, value.name.lstrip("%"), scope)
    cluster.resolved.update(outputs)
    if 0 not in cluster.shape and outputs:
        _emit_map(b, cluster, outputs)
    # bound only now: inside the map, members read each other's registers, not the arrays
    for op, scope in cluster.members:
        for value in op.results:
            if (id(scope), value.name) in outputs:
                scope.env[value.name] = outputs[(id(scope), value.name)]
    b.current_op = saved_op


def _emit_map(b: Builder, cluster: ElementwiseCluster, outputs: dict) -> None:
    shape = cluster.shape
    rank = len(shape)
    state = b.state

    if rank:
        entry, exit_ = state.add_map(b.fresh("fused"), {p: f"0:{n}" for p, n in
                                                        zip(map_params(rank), shape)},
                                     schedule=schedule_for(shape, len(cluster.members)))
    else:
        entry = exit_ = None
    # the members an output needs (others are read only through recomputed views), and
    # their values read by members, also under another name (a func.call's result)
    live, read_inside = set(outputs), set()
    for op, scope in reversed(cluster.members):
        if (id(scope), op.results[0].name) in live:
            for v in op.operands:
                binding = scope.env.get(v.name)
                if isinstance(binding, Pending) and binding.cluster is cluster:
                    live.add(binding.key)
                    read_inside.add(binding.key)
    scalars: dict[tuple[int, str], dace.nodes.AccessNode] = {}
    for op, scope in cluster.members:
        if (id(scope), op.results[0].name) not in live:
            continue
        b.current_op = op
        rule = registry.elementwise_rule(op)
        (result,) = op.results
        out_type = dtypes.of(result.type, op.name, op.location)
        in_types = [dtypes.of(v.type, op.name, op.location) for v in op.operands]
        args, in_conns, in_edges, lines = [], {}, [], []
        for k, (operand, element) in enumerate(zip(op.operands, in_types)):
            conn = f"__in{k}"
            binding = scope.env[operand.name]
            if isinstance(binding, Pending) and binding.cluster is cluster:
                node = scalars[binding.key]
                in_conns[conn] = element.compute_dace
                in_edges.append((node, conn, dace.Memlet(data=node.data, subset="0"), False))
                args.append(conn)
                continue
            if isinstance(binding, Pieces) and not binding.materialised:
                args.append(_read_pieces(b, binding, conn, element, rank, in_conns, in_edges))
                continue
            if isinstance(binding, PendingView):
                recompute = Recompute(b, cluster, f"{conn}_", in_conns, in_edges)
                args.append(recompute.value(binding, map_params(rank)))
                lines.extend(recompute.lines)
                continue
            binding = b.resolve(binding)
            if isinstance(binding, Literal):
                args.append(f"({literal(binding.value, element)})")
                continue
            assert isinstance(binding, (Array, View))
            data = binding.source.name if isinstance(binding, View) else binding.name
            subset = ", ".join(index_expressions(binding, rank))
            in_conns[conn] = element.storage
            in_edges.append((b.read(data), conn, dace.Memlet(f"{data}[{subset}]"), True))
            args.append(element.load(conn))
        expression = out_type.fit(rule.at(op, args, in_types, out_type, map_params(rank)))

        key = (id(scope), result.name)
        internal = key in read_inside
        out_conns, out_edges = {}, []
        if internal and key in outputs:
            lines.append(f"auto __v = {expression};")
            expression = "__v"
        if internal:
            scalar = b.scalar(f"s_{result.name.lstrip('%')}", out_type.compute_dace)
            node = state.add_access(scalar)
            scalars[key] = node
            out_conns["__s"] = out_type.compute_dace
            lines.append(f"__s = {expression};")
            out_edges.append(("__s", node, dace.Memlet(data=scalar, subset="0"), False))
        if key in outputs:
            array = outputs[key]
            out_conns["__o"] = out_type.storage
            lines.append(f"__o = {out_type.store(expression)};")
            subset = ", ".join(map_params(rank)) if rank else "0"
            out_edges.append(("__o", b.write(array.name),
                              dace.Memlet(f"{array.name}[{subset}]"), True))
        if not out_conns:
            continue
        tasklet = state.add_tasklet(b.fresh(op.name.rsplit(".", 1)[-1]), in_conns, out_conns,
                                    "\n".join(lines), language=dace.Language.CPP,
                                    debuginfo=b.debuginfo())
        if entry is not None and not any(external for *_, external in in_edges):
            state.add_nedge(entry, tasklet, dace.Memlet())  # keep it inside the map scope
        for source, conn, memlet, external in in_edges:
            if external and entry is not None:
                state.add_memlet_path(source, entry, tasklet, dst_conn=conn, memlet=memlet,
                                      propagate=False)
            else:
                state.add_edge(source, None, tasklet, conn, memlet)
        for conn, target, memlet, external in out_edges:
            if external and exit_ is not None:
                state.add_memlet_path(tasklet, exit_, target, src_conn=conn, memlet=memlet,
                                      propagate=False)
            else:
                state.add_edge(tasklet, conn, target, None, memlet)
    if entry is not None:
        b.propagate_map(entry, exit_)


class Recompute:
    """C++ statements that compute a pending value at a given index inside one tasklet, op
    by op, reading what the ops read through memlets (connectors ``prefix0, prefix1...``).
    Values of the cluster being emitted are always recomputed: its map may not have
    written the element yet. With ``pointers``, every array is read whole through a
    pointer (the connector to array map it fills), so the index may be a loop variable of
    the tasklet's own code (a reduction's loop over its reduced elements)."""

    def __init__(self, b: Builder, cluster, prefix: str, in_conns: dict, in_edges: list,
                 pointers: dict[str, Array] | None = None):
        self.b, self.cluster, self.prefix = b, cluster, prefix
        self.in_conns, self.in_edges, self.pointers = in_conns, in_edges, pointers
        self.lines: list[str] = []
        self.done: dict[tuple, str] = {}

    def value(self, binding, point: list[str]) -> str:
        """The C++ expression (compute type) of ``binding`` at ``point``."""
        if isinstance(binding, PendingView):
            return self.value(binding.source, axes_point(binding.axes, point))
        if isinstance(binding, Pending) and (unresolved(binding)
                                             or binding.cluster is self.cluster):
            return self._compute(binding, point)
        if isinstance(binding, Pending):
            binding = binding.cluster.resolved[binding.key]
        element = dtypes.of(binding.type)
        binding = self.b.resolve(binding)  # a concatenation: written already
        if isinstance(binding, Literal):
            return f"({literal(binding.value, element)})"
        subscripts = index_expressions(binding, len(point), point)
        if self.pointers is not None:
            source = binding.source if isinstance(binding, View) else binding
            conn = next((c for c, a in self.pointers.items() if a.name == source.name),
                        f"{self.prefix}{len(self.pointers)}")
            self.pointers[conn] = source
            return element.load(f"{conn}[{flat_index(source.type.shape, subscripts)}]")
        conn = f"{self.prefix}{len(self.in_conns)}"
        data = binding.source.name if isinstance(binding, View) else binding.name
        subset = ", ".join(subscripts)
        self.in_conns[conn] = element.storage
        self.in_edges.append((self.b.read(data), conn, dace.Memlet(f"{data}[{subset}]"), True))
        return element.load(conn)

    def _compute(self, binding: Pending, point: list[str]) -> str:
        point = point if binding.type.rank else []
        key = (binding.key, tuple(point))
        if key not in self.done:
            op = binding.scope.producers[binding.value.name]
            out_type = dtypes.of(binding.type, op.name, op.location)
            in_types = [dtypes.of(v.type, op.name, op.location) for v in op.operands]
            args = [self.value(binding.scope.env[v.name], point) for v in op.operands]
            expression = registry.elementwise_rule(op).at(op, args, in_types, out_type, point)
            name = f"{self.prefix}v{len(self.done)}"
            self.lines.append(f"const {out_type.compute} {name} = {out_type.fit(expression)};")
            self.done[key] = name
        return self.done[key]


def emit_recomputed(b: Builder, binding, target: Array) -> Array:
    """Write ``binding`` (a pending value or a view of one that no cluster wrote) into
    ``target`` with one map over its shape."""
    t = binding.type
    if t.size:
        in_conns, in_edges = {}, []
        recompute = Recompute(b, None, "__in", in_conns, in_edges)
        expression = recompute.value(binding, map_params(t.rank))
        element = dtypes.of(t)
        code = "\n".join([*recompute.lines, f"__out = {element.store(expression)};"])
        inputs = {conn: memlet for _, conn, memlet, _ in in_edges}
        subset = ", ".join(map_params(t.rank)) if t.rank else "0"
        b.mapped_tasklet("recompute", t, inputs, code,
                         {"__out": dace.Memlet(f"{target.name}[{subset}]")},
                         work_per_element=len(recompute.lines) + 1)
    return target


def _read_pieces(b: Builder, pieces: Pieces, conn: str, element, rank: int, in_conns: dict,
                 in_edges: list) -> str:
    """A concatenation read element by element: every part through a memlet at the
    position clamped into it (always in bounds), the part the element falls in chosen."""
    dimension = pieces.dimension
    here = f"__i{dimension}"
    choices = []
    for j, (part, (start, end)) in enumerate(zip(pieces.parts, pieces.extents())):
        if isinstance(part, Literal):
            choices.append(f"({literal(part.value, element)})")
            continue
        position = f"max({here} - {start}, 0)" if start else here
        if end < pieces.type.shape[dimension]:
            position = f"min({position}, {end - start - 1})"
        point = map_params(rank)
        point[dimension] = position
        data = part.source.name if isinstance(part, View) else part.name
        subset = ", ".join(index_expressions(part, rank, point))
        in_conns[f"{conn}_{j}"] = element.storage
        in_edges.append((b.read(data), f"{conn}_{j}", dace.Memlet(f"{data}[{subset}]"), True))
        choices.append(element.load(f"{conn}_{j}"))
    expression = choices[-1]
    for (_, end), choice in reversed(list(zip(pieces.extents(), choices))[:-1]):
        expression = f"({here} < {end} ? {choice} : {expression})"
    return expression


def scalar_region(b: Builder, block: ir.Block, arguments: list[str], prefix: str
                  ) -> tuple[list[str], list[str]]:
    """C++ for a region of elementwise ops on 0-d values (reducer bodies, comparators):
    ``arguments`` are the C++ expressions of the block's arguments (in compute types);
    returns the statements and the expressions of the values the terminator returns.
    Constants become literals and calls are inlined (JAX writes some reducer bodies as a
    call of a private function); anything but elementwise ops is unsupported."""
    names = {value.name: expression for value, expression in zip(block.arguments, arguments)}
    lines = []
    for k, op in enumerate(block.ops[:-1]):
        b.current_op = op
        if op.name in ("func.call", "stablehlo.call"):
            body, returned = scalar_region(b, b.callee(op).body.entry,
                                           [names[v.name] for v in op.operands],
                                           f"{prefix}{k}_")
            lines.extend(body)
            names.update((r.name, expression) for r, expression in zip(op.results, returned))
            continue
        if op.name == "stablehlo.constant" and op.result.type.size == 1:
            element = dtypes.of(op.result.type, op.name, op.location)
            names[op.result.name] = f"({literal(op.attr('value').array.reshape(-1)[0], element)})"
            continue
        if op.name in ("stablehlo.broadcast_in_dim", "stablehlo.reshape",
                       "stablehlo.optimization_barrier") and op.result.type.size == 1:
            names[op.result.name] = names[op.operands[0].name]
            continue
        rule = registry.elementwise_rule(op)
        if rule is None or len(op.results) != 1:
            raise b.unsupported("only elementwise ops and constants are supported in this "
                                "region")
        out_type = dtypes.of(op.result.type, op.name, op.location)
        in_types = [dtypes.of(v.type, op.name, op.location) for v in op.operands]
        expression = rule.at(op, [names[v.name] for v in op.operands], in_types, out_type,
                             ["0"] * op.result.type.rank)
        variable = f"{prefix}{k}"
        lines.append(f"const {out_type.compute} {variable} = {out_type.fit(expression)};")
        names[op.result.name] = variable
    return lines, [names[v.name] for v in block.terminator.operands]
