"""Maps with short rows: run as longer loops, so that GCC vectorises them."""

from __future__ import annotations

import re

import dace
import numpy as np

from ..cpp_split import INDEPENDENT_ITERATIONS
from ..plan.passes import PassContext
from .analysis import integer, memlet_steps, top_level_maps


def collapse_short_rows(sdfg: dace.SDFG, context: PassContext) -> None:
    """Top-level maps whose innermost loop is shorter than eight vectors of doubles run it
    and the loop around it as one loop (``collapse_rows``)."""
    for state, entry in list(top_level_maps(sdfg)):
        collapse_rows(state, entry, context.machine)


def interchange_tiny_rows(sdfg: dace.SDFG, context: PassContext) -> None:
    """Top-level maps whose innermost loop has at most four iterations and is not contiguous
    with the loop around it run that loop innermost (``interchange_rows``)."""
    for state, entry in list(top_level_maps(sdfg)):
        interchange_rows(state, entry, context.machine)


def collapse_rows(state: dace.SDFGState, entry: dace.nodes.MapEntry, machine) -> None:
    """Run the innermost loops of ``entry``'s map as one where the innermost is shorter
    than ``machine.short_row`` (pyhpc's columns of 26). GCC vectorises an innermost loop in whole
    vectors and leaves the rest scalar, libm calls included: 2 of every 26 elements (8%)
    took as long as the 24 others. The innermost loop and the one around it become one,
    and the loops outside them too where a parallel map would keep fewer than
    ``machine.parallel_iterations`` of them to share out. Their point becomes one parameter t, the
    index of each merged loop (t / p) % n for the points p of the loops inside it, which
    leaves t alone in the index of every array they move along contiguously. An array
    read any other way along them (a broadcast, a shifted row) is gathered, which GCC
    vectorises only when told that the iterations never overlap (it cannot check gathers
    at run time): so only where the map computes ``machine.gather_ops`` ops per element for each
    gathered array, writes contiguously and reads none of the arrays it writes, and then
    its tasklet says so (``INDEPENDENT_ITERATIONS``, made a pragma by ``cpp_split``).
    Only maps of tasklets that do not name the merged parameters, write each element once
    and have no side effects are collapsed: the order of their points changes no result.
    The map's outer memlets stay as they are: it moves the same elements (propagating the
    new subsets again took half of NPBench resnet's translation, in sympy)."""
    the_map = entry.map
    sizes = [integer(n) for n in the_map.range.size()]
    if len(sizes) < 2 or None in sizes or sizes[-1] >= machine.short_row or any(
            (begin, step) != (0, 1) for begin, _, step in the_map.range):
        return
    merged = 2
    parallel = the_map.schedule in (dace.ScheduleType.Default, dace.ScheduleType.CPU_Multicore)
    wanted = machine.parallel_iterations
    while merged < len(sizes) and parallel and np.prod(sizes[:-merged]) < wanted:
        merged += 1
    params, merged_sizes = the_map.params[-merged:], sizes[-merged:]
    inner = {p: int(np.prod(merged_sizes[k + 1:])) for k, p in enumerate(params)}
    exit_ = state.exit_node(entry)
    inside = state.scope_subgraph(entry, include_entry=False, include_exit=False)
    named = re.compile(r"\b(" + "|".join(map(re.escape, params)) + r")\b")
    if any(not isinstance(node, (dace.nodes.Tasklet, dace.nodes.AccessNode))
           or isinstance(node, dace.nodes.Tasklet) and (
               node.side_effects or named.search(node.code.as_string))
           for node in inside.nodes()):
        return
    edges = [*state.out_edges(entry), *inside.edges(), *state.in_edges(exit_)]
    written = {e.data.data for e in state.in_edges(exit_) if not e.data.is_empty()}
    moved, gathered = [], 0
    for edge in edges:
        memlet = edge.data
        if memlet.is_empty() or not set(params) & set(map(str, memlet.subset.free_symbols)):
            continue
        steps = memlet_steps(memlet, state.sdfg.arrays[memlet.data], params, signed=True)
        if steps is None or memlet.wcr is not None or edge.dst is exit_ and memlet.dynamic:
            return
        if any(steps.get(p, 0) != inner[p] * steps.get(params[-1], 0) for p in params):
            if edge.dst is exit_ or memlet.data in written:
                return
            gathered += 1
        moved.append(memlet)
    if gathered:
        tasklets = [n for n in inside.nodes() if isinstance(n, dace.nodes.Tasklet)]
        if sum(t.code.as_string.count("// op ") for t in tasklets) < machine.gather_ops * gathered:
            return
        # GCC vectorises the gathers only where told that the iterations never overlap
        tasklets[0].code = dace.properties.CodeBlock(
            f"{tasklets[0].code.as_string}\n{INDEPENDENT_ITERATIONS}", dace.Language.CPP)
    t = dace.symbolic.pystr_to_symbolic(params[-1])

    def rows(points: int):
        return t if points == 1 else dace.symbolic.int_floor(t, points)

    indices = {dace.symbolic.pystr_to_symbolic(p): rows(inner[p]) - (
        0 if k == 0 else n * rows(inner[p] * n))
        for k, (p, n) in enumerate(zip(params, merged_sizes))}
    for memlet in moved:
        memlet.subset = dace.subsets.Range([
            (begin.xreplace(indices), end.xreplace(indices),
             step) for begin, end, step in memlet.subset.ranges])
    kept = len(sizes) - merged
    the_map.params = [*the_map.params[:kept], params[-1]]
    the_map.range = dace.subsets.Range([*the_map.range[:kept],
                                        (0, int(np.prod(merged_sizes)) - 1, 1)])



def interchange_rows(state: dace.SDFGState, entry: dace.nodes.MapEntry, machine) -> None:
    """Run the loop around ``entry``'s innermost one inside it where the innermost has at
    most ``machine.tiny_row`` iterations and that one ``machine.long_row`` or more: GCC
    then vectorises the long loop, reading and writing with strides (gathers), instead of
    leaving rows of 3 scalar (pyhpc's isoneutral at 4,096 points, 32 x 32 x 4, whose maps
    slice the columns to 3 and write into a 5-d array: one of them 24 -> 12 us). Only maps whose
    order of points changes no result: tasklets without side effects, no write-conflict
    resolution, each written element written once (every parameter moves a write by more than
    the parameters with smaller strides span) and read, if at all, only by the point that writes
    it; the tasklet then says that the iterations are independent (``INDEPENDENT_ITERATIONS``),
    without which GCC does not gather."""
    the_map = entry.map
    sizes = [integer(n) for n in the_map.range.size()]
    if len(sizes) < 2 or None in sizes or sizes[-1] > machine.tiny_row \
            or sizes[-2] < machine.long_row or any(step != 1 for _, _, step in the_map.range):
        return
    inside = state.scope_subgraph(entry, include_entry=False, include_exit=False)
    if any(not isinstance(node, (dace.nodes.Tasklet, dace.nodes.AccessNode))
           or isinstance(node, dace.nodes.Tasklet) and node.side_effects
           for node in inside.nodes()):
        return
    exit_ = state.exit_node(entry)
    edges = [*state.out_edges(entry), *inside.edges(), *state.in_edges(exit_)]
    if any(e.data.wcr is not None for e in edges):
        return
    writes = [e.data for e in state.in_edges(exit_) if not e.data.is_empty()]
    written = {(m.data, str(m.subset)) for m in writes}
    if any(e.data.data in {name for name, _ in written}
           and (e.data.data, str(e.data.subset)) not in written
           for e in state.out_edges(entry)):
        return  # a written array read elsewhere than at the element a point writes
    params = list(map(str, the_map.params))
    for memlet in writes:
        steps = memlet_steps(memlet, state.sdfg.arrays[memlet.data], params)
        if steps is None or len(steps) < len(params):
            return
        span = 0
        for step, size in sorted((steps[p], n) for p, n in zip(params, sizes)):
            if step <= span:
                return  # two points could write one element
            span += step * (size - 1)
    the_map.params = [*the_map.params[:-2], the_map.params[-1], the_map.params[-2]]
    ranges = the_map.range.ranges
    the_map.range = dace.subsets.Range([*ranges[:-2], ranges[-1], ranges[-2]])
    tasklet = next(n for n in inside.nodes() if isinstance(n, dace.nodes.Tasklet))
    if INDEPENDENT_ITERATIONS not in tasklet.code.as_string:
        tasklet.code = dace.properties.CodeBlock(
            f"{tasklet.code.as_string}\n{INDEPENDENT_ITERATIONS}", dace.Language.CPP)
