"""Transients that are never live at once share one array, as XLA's buffer assignment
shares buffers by liveness over the program's order.

Not DaCe's ``TransientReuse``: it considers only transients used in one state (most of
ours are written in one state and read in later ones), and it shares an array read by a
node with the array that node writes, which is wrong for our tasklets that read and write
whole arrays through pointers (a product, a transpose, a scatter)."""

from __future__ import annotations

import dace

from ..plan.passes import PassContext
from .liveness import SHARED_LIFETIMES, dead_before, lifetimes, program_order


def reuse_transients(sdfg: dace.SDFG, context: PassContext) -> None:
    """Transients allocated once per program that are never live at once, of one shape,
    type and strides, share one array: the later takes the earlier's by renaming.

    Arrays of other shapes are not pointed into one buffer (DaCe references): DaCe's own
    transformations do not keep such references' meaning (``simplify`` and
    ``auto_optimize`` on pyhpc's isoneutral_mixing and turbulent_kinetic_energy gave
    wrong answers), and a user's transformation of the SDFG must stay right."""
    order = program_order(sdfg)
    if order is None:
        return
    buffers = sharing(sdfg, *order)
    rename(sdfg, {name: held[0] for held in buffers for name in held[1:]})


def rename(sdfg: dace.SDFG, renamed: dict[str, str]) -> None:
    """Every access to an array of ``renamed`` made to the array it names instead."""
    for state in sdfg.states():
        for node in state.data_nodes():
            node.data = renamed.get(node.data, node.data)
        for edge in state.edges():
            if edge.data.data in renamed:
                edge.data.data = renamed[edge.data.data]
    for name in renamed:
        sdfg.remove_data(name, validate=False)


def sharing(sdfg: dace.SDFG, states: list[dace.SDFGState],
            spans: dict[dace.SDFGState, tuple[int, int]]) -> list[list[str]]:
    """Which transients share one array (``same_kind``): greedily in the order they
    start, each joins the first group of its kind whose last member is dead before it
    starts."""
    live = lifetimes(sdfg, states, spans, SHARED_LIFETIMES)
    dataflow: dict = {}
    groups: list[list[str]] = []
    for name in sorted(live, key=lambda n: (live[n].start, live[n].end)):
        array = sdfg.arrays[name]
        for group in groups:
            if same_kind(array, sdfg.arrays[group[0]]) and dead_before(
                    live[group[-1]], group[-1], live[name], name, states, spans, dataflow):
                group.append(name)
                break
        else:
            groups.append([name])
    return groups


def same_kind(a: dace.data.Array, b: dace.data.Array) -> bool:
    """Whether one array can stand for the other: one shape, type, layout, storage and
    lifetime."""
    return (a.is_equivalent(b) and tuple(a.strides) == tuple(b.strides)
            and a.total_size == b.total_size and tuple(a.offset) == tuple(b.offset)
            and a.start_offset == b.start_offset and a.storage == b.storage
            and a.lifetime == b.lifetime and a.alignment == b.alignment)
