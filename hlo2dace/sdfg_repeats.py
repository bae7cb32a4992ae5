"""Map scopes that repeat, on other arrays, one before them, generated once.

Python unrolls a model's layers, so the SDFG of a 12-layer transformer's training step
holds each of its distinct maps a dozen times: 638 of its 648 maps are of 45 kinds. DaCe's
code generation costs time per node, as does the C++ compiler per line it is given. So
before code generation each map scope that occurs more than once (the same map, tasklets,
memlets and registers, on arrays of the same types, shapes and strides) becomes one
tasklet per occurrence, which calls a function with the arrays' base pointers (and the
values of the scalars it reads); the function's code is DaCe's, generated once from the
first occurrence, moved into an SDFG of its own (``Outlined.library``) whose arguments
are the scope's arrays. ``cpp_split`` turns that SDFG's code into the functions.

Only plain scopes are outlined: a map that is not nested, holding tasklets and the
registers between them, reading and writing arrays (no views, no symbols, no offsets);
nothing is outlined in an instrumented SDFG, whose timers live in the program's state.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

#: the name of the function of repeated scope ``k`` of the program ``program``
FUNCTION = "__h2d_repeat{k}_{program}"
#: the library's argument ``j`` of repeated scope ``k``
ARGUMENT = "__h2d_r{k}_{j}"
#: a line comment of a tasklet's code
_COMMENT = re.compile(r"//[^\n]*")


@dataclass(frozen=True)
class Outlined:
    """The SDFG of the repeated scopes (one state each, in order, the arrays of scope
    ``k`` its arguments ``ARGUMENT``), and how to replace the occurrences once its code
    has become the functions (``replace``)."""

    library: Any
    groups: tuple[tuple[Any, ...], ...]

    def arguments(self) -> list[list[str]]:
        """The library's arguments that each scope's function takes, in order."""
        return [[ARGUMENT.format(k=k, j=j) for j in range(len(occurrences[0].outer))]
                for k, occurrences in enumerate(self.groups)]

    def replace(self, sdfg: Any, program: str) -> None:
        """Each occurrence in ``sdfg`` becomes a call of its scope's function."""
        for k, occurrences in enumerate(self.groups):
            for occurrence in occurrences:
                occurrence.replace(sdfg, FUNCTION.format(k=k, program=program))


def outline(sdfg: Any) -> Outlined | None:
    """The scopes of ``sdfg`` that repeat, grouped, with the library SDFG of their first
    occurrences; None where none repeats (or the SDFG is instrumented or symbolic)."""
    import dace

    if sdfg.symbols or _instrumented(sdfg):
        return None
    seen: dict[tuple, list[_Scope]] = {}
    for state in sdfg.states():
        children = state.scope_children()
        for entry in children[None]:
            if isinstance(entry, dace.nodes.MapEntry):
                scope = _Scope.read(sdfg, state, entry, children[entry])
                if scope is not None:
                    seen.setdefault(scope.key, []).append(scope)
    groups = tuple(tuple(g) for g in seen.values() if len(g) > 1)
    if not groups:
        return None
    library = dace.SDFG(f"{sdfg.name}_repeats")
    for k, occurrences in enumerate(groups):
        occurrences[0].copy_into(library, sdfg, k)
    return Outlined(library, groups)


def _instrumented(sdfg: Any) -> bool:
    """Whether any timer (or data instrumentation) is set in ``sdfg``."""

    def timed(item) -> bool:
        instrument = getattr(item, "instrument", None)
        return instrument is not None and instrument.name != "No_Instrumentation"

    return timed(sdfg) or any(
        timed(state) or any(timed(getattr(node, "map", node)) for node in state.nodes())
        for state in sdfg.states())


@dataclass
class _Scope:
    """One top-level map scope of a state: its nodes (entry first, exit last), the arrays
    it reaches outside (in the order of its key) and its key."""

    state: Any
    nodes: list
    outer: list[str]
    key: tuple

    @classmethod
    def read(cls, sdfg: Any, state: Any, entry: Any, children: list) -> _Scope | None:
        """The scope of ``entry`` (``children``: its nodes), or None where it cannot be
        outlined."""
        import dace

        exit_ = state.exit_node(entry)
        nodes = [entry, *(n for n in children if n is not exit_), exit_]
        index = {id(n): k for k, n in enumerate(nodes)}
        arrays = sdfg.arrays
        names: dict[str, str] = {}
        connectors: dict[tuple[int, str], str] = {}
        registers = {n.data for n in nodes if isinstance(n, dace.nodes.AccessNode)}
        the_map = entry.map
        key: list = [("map", tuple(the_map.params), _subset(the_map.range),
                      str(the_map.schedule),
                      the_map.unroll, the_map.collapse, the_map.omp_num_threads,
                      str(the_map.omp_schedule), the_map.omp_chunk_size)]
        for node in nodes[1:-1]:
            if isinstance(node, dace.nodes.Tasklet) and not (
                    node.code_global.as_string or node.code_init.as_string
                    or node.code_exit.as_string):  # code outside the function: not moved
                key.append(("tasklet", node.code.as_string, str(node.language),
                            tuple((c, str(t)) for c, t in node.in_connectors.items()),
                            tuple((c, str(t)) for c, t in node.out_connectors.items()),
                            tuple(sorted(node.environments)), node.side_effects))
            elif isinstance(node, dace.nodes.AccessNode) and not node.setzero:
                key.append(("register", names.setdefault(node.data, f"d{len(names)}")))
            else:
                return None

        def end(node, conn):
            at = index.get(id(node))
            if at is None:  # outside the scope
                if not isinstance(node, dace.nodes.AccessNode):
                    return None
                return ("outer", names.setdefault(node.data, f"d{len(names)}"))
            if at in (0, len(nodes) - 1) and conn is not None:
                conn = connectors.setdefault((at, conn), f"c{len(connectors)}")
            return (at, conn)

        edges = list(state.in_edges(entry))
        for node in nodes:
            edges += state.out_edges(node)
        for edge in edges:
            memlet = edge.data
            source, target = end(edge.src, edge.src_conn), end(edge.dst, edge.dst_conn)
            if source is None or target is None:
                return None
            if memlet.is_empty():  # a tasklet kept inside the map: no array of its own
                if source[0] == "outer" or target[0] == "outer":
                    return None
                key.append((source, target))
                continue
            key.append((source, target, names.setdefault(memlet.data, f"d{len(names)}"),
                        _subset(memlet.subset), _subset(memlet.other_subset), str(memlet.wcr),
                        memlet.dynamic, memlet.wcr_nonatomic, memlet.allow_oob,
                        memlet.volume))
        for name in names:
            described = _described(arrays[name], name in registers)
            if described is None:
                return None
            key.append(described)
        outer = [name for name in names if name not in registers]
        written = {e.data.data for e in state.out_edges(exit_)}
        if any(type(arrays[n]) is dace.data.Scalar and n in written for n in outer):
            return None  # a scalar read is passed by value: one written is not outlined
        return cls(state, nodes, outer, tuple(key))

    def copy_into(self, library: Any, sdfg: Any, k: int) -> None:
        """This scope, its arrays as the arguments of scope ``k``, as a state of
        ``library``."""
        import dace

        renamed = {name: ARGUMENT.format(k=k, j=j) for j, name in enumerate(self.outer)}
        for name in self.registers():
            library.add_datadesc(name, copy.deepcopy(sdfg.arrays[name]))
        for name, argument in renamed.items():
            descriptor = copy.deepcopy(sdfg.arrays[name])
            descriptor.transient = False
            descriptor.lifetime = dace.AllocationLifetime.Scope
            library.add_datadesc(argument, descriptor)
        state = library.add_state(f"r{k}", is_start_block=k == 0)
        state.set_default_lineinfo(dace.dtypes.DebugInfo(0))  # not the stack's (slow)
        if k:
            library.add_edge(library.nodes()[-2], state, dace.InterstateEdge())
        copies = dict(zip(map(id, self.nodes), copy.deepcopy(self.nodes)))
        outside: dict[tuple[str, bool], Any] = {}

        def node(original, reads: bool):
            if id(original) in copies:
                return copies[id(original)]
            argument = renamed[original.data]
            if (argument, reads) not in outside:
                outside[argument, reads] = (state.add_read if reads else state.add_write)(
                    argument)
            return outside[argument, reads]

        for edge in self.edges():
            memlet = copy.deepcopy(edge.data)
            memlet.data = renamed.get(memlet.data, memlet.data)
            state.add_edge(node(edge.src, True), edge.src_conn, node(edge.dst, False),
                           edge.dst_conn, memlet)

    def replace(self, sdfg: Any, function: str) -> None:
        """This scope in its state as one tasklet that calls ``function`` with the base
        pointers of its arrays."""
        import dace

        arrays = sdfg.arrays
        state, entry, exit_ = self.state, self.nodes[0], self.nodes[-1]
        sources, targets, orderings = {}, {}, []
        for edge in state.in_edges(entry):  # an array read through two nodes: one orders
            if sources.setdefault(edge.data.data, edge.src) is not edge.src:
                orderings.append((edge.src, None))
        for edge in state.out_edges(exit_):
            if targets.setdefault(edge.data.data, edge.dst) is not edge.dst:
                orderings.append((None, edge.dst))
        environments = set()
        for node in self.nodes:
            environments |= set(getattr(node, "environments", ()))
        inputs = {f"__r{j}": arrays[n].dtype if type(arrays[n]) is dace.data.Scalar
                  else dace.pointer(arrays[n].dtype)
                  for j, n in enumerate(self.outer) if n in sources}
        outputs = {f"__w{j}": dace.pointer(arrays[n].dtype)
                   for j, n in enumerate(self.outer) if n in targets}
        arguments = [f"__w{j}" if name in targets else f"__r{j}"
                     for j, name in enumerate(self.outer)]
        # the comments of the scope's code (the ops it computes: the profiler reads them)
        comments = [comment for n in self.nodes if isinstance(n, dace.nodes.Tasklet)
                    for comment in _COMMENT.findall(n.code.as_string)]
        call = state.add_tasklet(f"{entry.map.label}_call", inputs, outputs,
                                 "\n".join([*comments, f"{function}({', '.join(arguments)});"]),
                                 language=dace.Language.CPP,
                                 debuginfo=entry.map.debuginfo or dace.dtypes.DebugInfo(0))
        call.environments = environments
        reads = {e.data.data: e.data for e in state.in_edges(entry)}
        writes = {e.data.data: e.data for e in state.out_edges(exit_)}
        for j, name in enumerate(self.outer):
            if name in sources:
                state.add_edge(sources[name], None, call, f"__r{j}",
                               _whole(reads[name], arrays[name]))
            if name in targets:
                written = _whole(writes[name], arrays[name])
                written.dynamic = True
                state.add_edge(call, f"__w{j}", targets[name], None, written)
        for source, target in orderings:
            state.add_nedge(source or call, target or call, dace.Memlet())
        registers = self.registers()
        state.remove_nodes_from(self.nodes)
        for name in registers:
            if name in arrays:
                sdfg.remove_data(name, validate=False)

    def registers(self) -> list[str]:
        import dace

        return list(dict.fromkeys(n.data for n in self.nodes
                                  if isinstance(n, dace.nodes.AccessNode)))

    def edges(self) -> list:
        edges = list(self.state.in_edges(self.nodes[0]))
        for node in self.nodes:
            edges += self.state.out_edges(node)
        return edges


def _subset(subset: Any) -> Any:
    """A subset as a key: its ranges (sympy expressions compare and hash by value)."""
    return tuple(subset.ranges) if hasattr(subset, "ranges") else str(subset)


def _whole(memlet: Any, descriptor: Any) -> Any:
    """A memlet of the whole array that ``memlet`` (an outer memlet of a scope, which
    goes with the scope) reaches a part of: a call's connector is the array's base pointer.
    The memlet itself where its subset begins at the array's first element."""
    import dace

    ranges = getattr(memlet.subset, "ranges", None)
    if ranges is not None and all(begin == 0 for begin, _, _ in ranges):
        return memlet
    return dace.Memlet.from_array(memlet.data, descriptor)


def _described(descriptor: Any, register: bool) -> tuple | None:
    """What of an array's descriptor its code depends on; None for one a scope that is
    outlined may not reach (a view, a stream, a symbolic or offset array)."""
    import dace

    if type(descriptor) not in (dace.data.Scalar, dace.data.Array):
        return None
    sizes = (*descriptor.shape, *descriptor.strides, *descriptor.offset,
             descriptor.total_size, descriptor.start_offset)
    if any(not isinstance(s, int) and not getattr(s, "is_Integer", False) for s in sizes):
        return None
    if not register and (any(int(o) for o in descriptor.offset) or int(descriptor.start_offset)):
        return None
    return (type(descriptor).__name__, str(descriptor.dtype), tuple(int(s) for s in sizes),
            str(descriptor.storage), str(descriptor.lifetime) if register else "",
            descriptor.alignment, descriptor.may_alias)
