"""Maps that transpose a large array: run in tiles that stay in L1."""

from __future__ import annotations

import dace

from ..plan.passes import PassContext
from .analysis import integer, memlet_steps


def tile_transposing(sdfg: dace.SDFG, context: PassContext) -> None:
    """Run the maps of ``sdfg`` that access a large array along another dimension than
    their innermost one (a transposition: the array's lines are read one element at a
    time, each line again for each of its elements once the array outgrows the caches) in
    ``machine.transpose_tile`` squares of those dimensions, as DaCe's ``MapTiling`` cuts them: an
    outer map over the tiles and the other dimensions (scheduled as the map was), an inner
    sequential one within a tile. Only maps of tasklets that write each element once (no
    conflict resolution, no pointers, no side effects) are tiled: the order of their
    points changes no result."""
    from dace.sdfg.propagation import propagate_memlets_scope
    from dace.transformation.dataflow import MapTiling

    for state, _ in sdfg.all_nodes_recursive():
        if not isinstance(state, dace.SDFGState):
            continue
        for entry in [n for n in state.nodes() if isinstance(n, dace.nodes.MapEntry)
                      and state.entry_node(n) is None]:
            tiled = _transposing_params(state, entry, context.machine)
            if not tiled:
                continue
            the_map, schedule = entry.map, entry.map.schedule
            params, size = list(the_map.params), dict(zip(the_map.params,
                                                          map(int, the_map.range.size())))
            tile = context.machine.transpose_tile
            MapTiling.apply_to(state.sdfg, map_entry=entry, options={
                "tile_sizes": [tile if p in tiled else 1 for p in params],
                "divides_evenly": all(size[p] % tile == 0 for p in tiled)})
            outer_entry = state.entry_node(entry)
            outer = outer_entry.map
            # OpenMP shares out the outer map's first loop: the dimensions that are not
            # tiled (of more than one element) come first, in their order, then the tiles
            ranges = dict(zip(outer.params, outer.range)) | dict(zip(the_map.params,
                                                                     the_map.range))
            order = [p for p in params if p not in tiled and size[p] > 1] + \
                [f"tile_{p}" for p in params if p in tiled]
            rest = [p for p in params if p not in tiled and size[p] == 1] + \
                [p for p in params if p in tiled]
            outer.params, outer.range = order, dace.subsets.Range([ranges[p] for p in order])
            the_map.params = rest
            the_map.range = dace.subsets.Range([ranges[p] for p in rest])
            outer.schedule, the_map.schedule = schedule, dace.ScheduleType.Sequential
            propagate_memlets_scope(state.sdfg, state, state.scope_tree()[outer_entry])



def _transposing_params(state: dace.SDFGState, entry: dace.nodes.MapEntry, machine) -> set[str]:
    """The parameters to tile ``entry``'s map over: its innermost one and each other that
    moves along an array of ``machine.transpose_bytes`` or more that the map reads or writes by
    one element, where the innermost one moves by more (a transposition); empty where
    tiling does not pay or would not be safe."""
    the_map, sdfg = entry.map, state.sdfg
    params = list(the_map.params)
    sizes = [integer(n) for n in the_map.range.size()]
    if len(params) < 2 or None in sizes:
        return set()
    size = dict(zip(params, sizes))
    exit_ = state.exit_node(entry)
    inside = state.scope_subgraph(entry, include_entry=False, include_exit=False)
    if any(not isinstance(n, (dace.nodes.Tasklet, dace.nodes.AccessNode))
           or isinstance(n, dace.nodes.Tasklet) and n.side_effects for n in inside.nodes()):
        return set()
    found = set()
    for edge in [*state.out_edges(entry), *state.in_edges(exit_)]:
        memlet = edge.data
        if memlet.is_empty():
            continue
        if memlet.wcr is not None or (edge.dst is exit_ and memlet.dynamic):
            return set()
        array = sdfg.arrays[memlet.data]
        total = integer(array.total_size)
        if total is None or total * array.dtype.bytes < machine.transpose_bytes:
            continue
        steps = memlet_steps(memlet, array, size.keys())
        if steps is None or steps.get(params[-1], 0) <= 1:
            continue  # along the innermost dimension, or not moved by it (reused)
        found |= {p for p, step in steps.items() if step == 1}
    if not found or any(size[p] <= machine.transpose_tile for p in (*found, params[-1])):
        return set()
    return found | {params[-1]}
