"""Where a program's arrays are live, in the order its states run, and the arrays that
may therefore share memory: renamed to one array (``buffers.reuse_transients``, an SDFG
pass) or placed in one allocation (``arena_layout``, which the code stage applies to the
SDFG that is compiled, ``sdfg_build``)."""

from __future__ import annotations

from dataclasses import dataclass

import dace
import networkx as nx
from dace.sdfg.state import AbstractControlFlowRegion, ConditionalBlock, LoopRegion


@dataclass
class Live:
    """Where an array is live: the first and last states of its accesses in program order
    (a loop widens them to the whole loop: a later iteration may read what an earlier one
    wrote)."""

    start: int
    end: int


def program_order(sdfg: dace.SDFG
                  ) -> tuple[list[dace.SDFGState], dict[dace.SDFGState, tuple[int, int]]] | None:
    """The states of ``sdfg`` in the order they run (a conditional's branches one after
    the other), and of each state inside a loop the span of its outermost loop; None
    where a region's graph has a cycle (a loop not written as a ``LoopRegion``)."""
    states: list[dace.SDFGState] = []
    loops: list[tuple[list[dace.SDFGState], int]] = []

    def walk(region, outermost: bool) -> bool:
        graph = region.nx
        if not nx.is_directed_acyclic_graph(graph):
            return False
        for block in nx.topological_sort(graph):
            if isinstance(block, dace.SDFGState):
                states.append(block)
            elif isinstance(block, AbstractControlFlowRegion):  # not a break, a return
                first, loop = len(states), isinstance(block, LoopRegion)
                inner = block.sub_regions() if isinstance(block, ConditionalBlock) else [block]
                if not all(walk(r, outermost and not loop) for r in inner):
                    return False
                if outermost and loop:
                    loops.append((states[first:], first))
        return True

    if not walk(sdfg, True):
        return None
    spans = {state: (first, first + len(body) - 1) for body, first in loops for state in body}
    return states, spans


#: the lifetimes of the arrays allocated once per program or per call
SHARED_LIFETIMES = (dace.AllocationLifetime.Persistent, dace.AllocationLifetime.SDFG)


def lifetimes(sdfg: dace.SDFG, states: list[dace.SDFGState],
              spans: dict[dace.SDFGState, tuple[int, int]],
              allocated: tuple[dace.AllocationLifetime, ...]) -> dict[str, Live]:
    """Where each transient array of ``sdfg`` allocated with one of the lifetimes
    ``allocated`` is live, in ``states``' order (``program_order``). Not the arrays
    named by the control flow (a loop's condition, an interstate assignment), nor those
    of other lifetimes (one allocated in a map is private to a thread)."""
    named = set()
    for edge in sdfg.all_interstate_edges(recursive=False):
        named |= edge.data.read_symbols()
    for region in sdfg.all_control_flow_regions():
        for code in region.get_meta_codeblocks():
            named |= code.get_free_symbols()
    live: dict[str, Live] = {}
    for k, state in enumerate(states):
        first, last = spans.get(state, (k, k))
        for node in state.data_nodes():
            descriptor = sdfg.arrays[node.data]
            if (type(descriptor) is not dace.data.Array or not descriptor.transient
                    or descriptor.lifetime not in allocated or node.data in named):
                continue
            if node.data in live:
                live[node.data].end = max(live[node.data].end, last)
            else:
                live[node.data] = Live(first, last)
    return live


def dead_before(a: Live, a_name: str, b: Live, b_name: str,
                states: list[dace.SDFGState], spans: dict, dataflow: dict) -> bool:
    """Whether array ``a_name`` is dead when ``b_name`` is first written: ``a`` ends in an
    earlier state, or in ``b``'s first state (outside any loop) where every node that
    accesses ``a_name`` precedes, by dataflow, every node that accesses ``b_name`` (DaCe
    runs a state's nodes in an order of its dataflow). ``dataflow`` caches, per state,
    ``state_dataflow``."""
    if a.end < b.start:
        return True
    if a.end > b.start or states[b.start] in spans:
        return False
    state = states[b.start]
    if state not in dataflow:
        dataflow[state] = state_dataflow(state)
    top, after = dataflow[state]
    return all(users(state, top, b_name) <= after[u] for u in users(state, top, a_name))


def state_dataflow(state: dace.SDFGState) -> tuple[dict, dict]:
    """Of each node of ``state``, its top-level node (``top_level``); of each top-level
    node, the top-level nodes after it in the dataflow (computed when first asked for)."""
    top = top_level(state)
    graph = nx.DiGraph()
    graph.add_nodes_from(set(top.values()))
    graph.add_edges_from((top[e.src], top[e.dst]) for e in state.edges()
                         if top[e.src] is not top[e.dst])
    return top, _Descendants(graph)


class _Descendants(dict):
    """A graph's nodes' descendants, each found when first asked for."""

    def __init__(self, graph: nx.DiGraph):
        super().__init__()
        self.graph = graph

    def __missing__(self, node) -> set:
        self[node] = nx.descendants(self.graph, node)
        return self[node]


def top_level(state: dace.SDFGState) -> dict:
    """Of each node of ``state``, its top-level node: a map scope stands for its nodes, as
    its entry."""
    scopes = state.scope_dict()
    top = {}
    for node in state.nodes():
        outer = node
        while scopes[outer] is not None:
            outer = scopes[outer]
        top[node] = state.entry_node(outer) if isinstance(outer, dace.nodes.ExitNode) \
            else outer
    return top


def users(state: dace.SDFGState, top: dict, name: str) -> set:
    """The top-level nodes of ``state`` that read or write array ``name``."""
    found = set()
    for node in state.data_nodes():
        if node.data == name:
            found |= {top[e.src] for e in state.in_edges(node)}
            found |= {top[e.dst] for e in state.out_edges(node)}
            if top[node] is not node:
                found.add(top[node])
    return found


@dataclass
class Arena:
    """Transients placed in one allocation, as XLA's buffer assignment places buffers
    in one slab: ``offsets``, each array's byte offset; ``size``, the allocation's bytes;
    ``reuses``, of each array the arrays placed before whose bytes it overlaps (each dead
    before it starts); ``apart``, the bytes the arrays take each allocated on its own."""

    offsets: dict[str, int]
    size: int
    reuses: dict[str, set[str]]
    apart: int


#: the arena's alignment, and its members' (DaCe aligns each array it allocates to 64)
ARENA_ALIGNMENT = 64
#: arrays smaller than a page stay out of the arena: the process's resident memory is
#: counted in pages, and the allocator packs small arrays well already
ARENA_MIN_BYTES = 4096


def arena_layout(sdfg: dace.SDFG) -> Arena | None:
    """The byte offsets at which the top-level transients of ``sdfg`` allocated once per
    program share one allocation: greedily from the largest, each at the lowest offset
    where it overlaps no array live with it (``dead_before`` either way: by program
    order, or in the state where one ends and the other starts, by dataflow). Only CPU
    arrays of a constant size of at least ``ARENA_MIN_BYTES``; None where the program's
    order is unknown (``program_order``) or fewer than two arrays take part."""
    order = program_order(sdfg)
    if order is None:
        return None
    states, spans = order
    live = lifetimes(sdfg, states, spans, (dace.AllocationLifetime.Persistent,))
    sizes, apart = {}, 0
    for name in live:
        array = sdfg.arrays[name]
        total = array.total_size * array.dtype.bytes
        if (array.storage in (dace.StorageType.Default, dace.StorageType.CPU_Heap)
                and getattr(total, "is_Integer", True) and int(total) >= ARENA_MIN_BYTES):
            sizes[name] = -(-int(total) // ARENA_ALIGNMENT) * ARENA_ALIGNMENT
            apart += int(total)
    if len(sizes) < 2:
        return None
    dataflow: dict = {}

    def disjoint(a: str, b: str) -> bool:
        return (dead_before(live[a], a, live[b], b, states, spans, dataflow)
                or dead_before(live[b], b, live[a], a, states, spans, dataflow))

    offsets: dict[str, int] = {}
    for name in sorted(sizes, key=lambda n: (-sizes[n], live[n].start, n)):
        taken = sorted((offsets[other], offsets[other] + sizes[other])
                       for other in offsets if not disjoint(name, other))
        offset = 0
        for begin, end in taken:
            if offset + sizes[name] <= begin:
                break
            offset = max(offset, end)
        offsets[name] = offset
    reuses = {name: {other for other in offsets if other != name
                     and offsets[other] < offsets[name] + sizes[name]
                     and offsets[name] < offsets[other] + sizes[other]
                     and dead_before(live[other], other, live[name], name, states, spans,
                                     dataflow)}
              for name in offsets}
    return Arena(offsets, max(o + sizes[n] for n, o in offsets.items()), reuses, apart)


#: a compiler barrier: no access to memory moves across it
BARRIER = 'asm volatile("" ::: "memory");'


def order_reuses(sdfg: dace.SDFG, arena: Arena) -> None:
    """A compiler barrier before each array of ``arena`` that reuses the bytes of
    another: in the state where it becomes live, after the accesses there to the arrays
    it reuses and before its own. The arrays are ``__restrict__`` pointers in the
    generated code, which tells the C++ compiler they never alias; the barrier keeps
    the compiler from moving the first accesses to the new array before the last ones
    to the old."""
    states, spans = program_order(sdfg)
    live = lifetimes(sdfg, states, spans, (dace.AllocationLifetime.Persistent,))
    by_state: dict[dace.SDFGState, list[str]] = {}
    for name, reused in arena.reuses.items():
        if reused:
            by_state.setdefault(states[live[name].start], []).append(name)
    for state, names in by_state.items():
        top = top_level(state)
        edges = [(name, [state.exit_node(node) if isinstance(node, dace.nodes.EntryNode)
                         else node for other in arena.reuses[name]
                         for node in users(state, top, other)],
                  users(state, top, name)) for name in names]
        for name, sources, targets in edges:
            barrier = state.add_tasklet(f"h2d_reuse_{name}", set(), set(), BARRIER,
                                        language=dace.Language.CPP, side_effects=True)
            for source in sources:
                state.add_nedge(source, barrier, dace.Memlet())
            for target in targets:
                state.add_nedge(barrier, target, dace.Memlet())
        if not nx.is_directed_acyclic_graph(state.nx):  # DaCe would drop the cycle's code
            raise RuntimeError(f"hlo2dace's arena places {', '.join(names)} where arrays "
                               f"live with them are (state {state.label}): a bug, please "
                               f"report it")
