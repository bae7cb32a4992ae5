"""Emits an elementwise cluster as one map: one tasklet per op, register scalars between
tasklets, operands read through (broadcasting) memlets, splat constants as literals, and
arrays written only for the values used outside the cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dace

from .. import ir
from . import dtypes, registry
from .builder import (
    Array,
    Literal,
    Pending,
    Pieces,
    View,
    index_expressions,
    map_params,
    schedule_for,
)
from .literals import literal

if TYPE_CHECKING:
    from .builder import Builder, ElementwiseCluster


def emit_cluster(b: Builder, cluster: ElementwiseCluster) -> None:
    members = {(id(scope), id(op)) for op, scope in cluster.members}
    saved_op = b.current_op

    def users_inside(scope, value: ir.Value) -> list[bool]:
        return [(id(scope), id(user)) in members for user in scope.uses.get(value.name, ())]

    # Values used outside the cluster get arrays; everything else stays in registers.
    outputs: dict[tuple[int, str], Array] = {}
    for op, scope in cluster.members:
        for value in op.results:
            if not all(users_inside(scope, value)):
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
    # members' values read by members, also under another name (a func.call's result)
    read_inside = {binding.key for op, scope in cluster.members for v in op.operands
                   if isinstance(binding := scope.env.get(v.name), Pending)
                   and binding.cluster is cluster}
    scalars: dict[tuple[int, str], dace.nodes.AccessNode] = {}
    for op, scope in cluster.members:
        b.current_op = op
        rule = registry.elementwise_rule(op)
        (result,) = op.results
        out_type = dtypes.of(result.type, op.name, op.location)
        in_types = [dtypes.of(v.type, op.name, op.location) for v in op.operands]
        args, in_conns, in_edges = [], {}, []
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
        expression = out_type.fit(rule.expression(op, args, in_types, out_type))

        key = (id(scope), result.name)
        internal = key in read_inside
        out_conns, lines, out_edges = {}, [], []
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
    Constants become literals; anything but elementwise ops is unsupported."""
    names = {value.name: expression for value, expression in zip(block.arguments, arguments)}
    lines = []
    for k, op in enumerate(block.ops[:-1]):
        b.current_op = op
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
        expression = rule.expression(op, [names[v.name] for v in op.operands], in_types,
                                     out_type)
        variable = f"{prefix}{k}"
        lines.append(f"const {out_type.compute} {variable} = {out_type.fit(expression)};")
        names[op.result.name] = variable
    return lines, [names[v.name] for v in block.terminator.operands]
