"""0-d values computed and read within one state kept in registers, not in memory.

DaCe keeps every transient of the program as an array of the state struct, a 0-d value
too: a tasklet stores it (``__state->x[0] = v``) and the maps after it load it in their
loops. In a loop's body GCC 12 does not hoist such a load out of the map's loop: its
partial redundancy elimination moves it into the loop's latch, and the vectoriser then
refuses the loop ("latch block not empty"). A logistic regression's gradient step over
512 points ran scalar and took 2.4 times XLA's time. As a DaCe ``Scalar``, the value is a
local variable of the state's block: GCC keeps it in a register and the map's loop
vectorises."""

from __future__ import annotations

from collections import defaultdict

import dace

from ..plan.passes import PassContext


def zero_d_values_in_registers(sdfg: dace.SDFG, context: PassContext) -> None:
    """Transient 0-d arrays that one state writes and reads, only through tasklets (inside
    maps or not) that move their value, become scalars of that state (``in_registers``)."""
    for graph in sdfg.all_sdfgs_recursive():
        for name in in_registers(graph):
            array = graph.arrays[name]
            graph.arrays[name] = dace.data.Scalar(array.dtype, transient=True,
                                                   storage=array.storage,
                                                   lifetime=dace.AllocationLifetime.Scope)


def in_registers(sdfg: dace.SDFG) -> list[str]:
    """The transient 0-d arrays of ``sdfg`` that can live in a register: all their access
    nodes in one state, written there before they are read, and every memlet from or to
    them ending at a tasklet connector of the element's value (not a pointer), without a
    write-conflict resolution."""
    states: dict[str, set] = defaultdict(set)
    refused: set[str] = set()
    for state in sdfg.states():
        for node in state.data_nodes():
            states[node.data].add(state)
            if not _moves_values(state, node):
                refused.add(node.data)
    refused.update(_read_by_control(sdfg))
    return [name for name, found in states.items()
            if len(found) == 1 and name not in refused and _zero_d_transient(sdfg, name)
            and _written_first(next(iter(found)), name)]


def _read_by_control(sdfg: dace.SDFG) -> set[str]:
    """The arrays that the program's control flow reads: interstate assignments and
    conditions, loop and branch conditions (code outside any state)."""
    names: set[str] = set()
    for edge in sdfg.all_interstate_edges():
        names |= edge.data.free_symbols
    for region in sdfg.all_control_flow_regions():
        if hasattr(region, "get_meta_codeblocks"):
            for code in region.get_meta_codeblocks():
                names |= code.get_free_symbols()
    return names & set(sdfg.arrays)


def _zero_d_transient(sdfg: dace.SDFG, name: str) -> bool:
    array = sdfg.arrays[name]
    return type(array) is dace.data.Array and array.transient and tuple(array.shape) == (1,) \
        and array.lifetime == dace.AllocationLifetime.Persistent


def _moves_values(state: dace.SDFGState, node: dace.nodes.AccessNode) -> bool:
    """Whether every memlet path through ``node`` ends at a tasklet's value connector."""
    for edge in state.all_edges(node):
        if edge.data.wcr is not None:
            return False
        for leaf in state.memlet_tree(edge).leaves():
            end, connector = (leaf.dst, leaf.dst_conn) if edge.src is node \
                else (leaf.src, leaf.src_conn)
            if not isinstance(end, dace.nodes.Tasklet) or leaf.data.wcr is not None:
                return False
            types = end.in_connectors if edge.src is node else end.out_connectors
            if isinstance(types.get(connector), dace.pointer):
                return False
    return True


def _written_first(state: dace.SDFGState, name: str) -> bool:
    """Whether the first access node of ``name`` in ``state``'s order is written (a node
    both written and read is read after it is written): a value read before the state
    writes it would come from an earlier run of the state."""
    for node in dace.sdfg.utils.dfs_topological_sort(state):
        if isinstance(node, dace.nodes.AccessNode) and node.data == name:
            return state.in_degree(node) > 0
    return False
