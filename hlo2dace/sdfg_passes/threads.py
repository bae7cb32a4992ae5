"""Parallel maps whose first loops are short: enough of them shared out."""

from __future__ import annotations

import dace

from ..plan.passes import PassContext
from .analysis import integer, top_level_maps


def share_leading_loops(sdfg: dace.SDFG, context: PassContext) -> None:
    """A parallel top-level map whose first loop is shorter than eight iterations per
    thread has its loops before the innermost collapsed into it until they are that long
    (``share_leading``)."""
    for _, entry in list(top_level_maps(sdfg)):
        share_leading(entry.map, context.machine)


def share_leading(the_map: dace.nodes.Map, machine) -> None:
    """OpenMP shares out a parallel map's first loop only: where that loop is shorter
    than ``machine.parallel_iterations`` (a leading dimension of one: the map ran on one thread),
    the loops before the innermost one are collapsed into it until they are as long."""
    if the_map.schedule not in (dace.ScheduleType.Default, dace.ScheduleType.CPU_Multicore):
        return
    sizes = [integer(n) for n in the_map.range.size()]
    if None in sizes:
        return
    count, iterations = 1, sizes[0] if sizes else 0
    wanted = machine.parallel_iterations
    while iterations < wanted and count < len(sizes) - 1:
        iterations, count = iterations * sizes[count], count + 1
    if count > 1:
        the_map.collapse = count
