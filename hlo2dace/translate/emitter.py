"""The SDFG under construction and the one way to add code to it.

``Emitter`` owns the SDFG: fresh names, data containers (arrays, hidden constants), the
state being filled and the control-flow region around it, access
nodes, and ``map``: one tasklet, in a map over a shape or alone, whose connectors read and
write

* ``Element(binding)``: one element of an array or view at the map's point (a memlet);
* ``Whole(array)``: the whole array through a pointer, for code that indexes it itself
  (with ``flat_index``) or writes any element of it (scatters, library calls);
* ``Value(binding)``: a 0-d operand by value: a literal in the code, else its element;
* or a ``dace.Memlet`` given as it is.

It knows nothing of the IR walk, scopes or fusion (``builder.py``, ``fusion.py``).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import re
from dataclasses import dataclass
from typing import Iterator, Sequence, Union

import dace
import numpy as np

from .. import ir, symbolic
from ..errors import UnsupportedError
from ..machine import PARALLEL_REGION_OPS, Machine
from ..sdfg_passes.analysis import integer
from . import dtypes
from .bindings import Array, Literal, View, dace_shape, map_params
from .literals import literal

#: the default line info of every state: without one, DaCe inspects the Python stack at
#: every node it adds (most of the translation time)
NO_LINEINFO = dace.dtypes.DebugInfo(0)

#: maps doing less work than this (elements x work per element) run on one thread
#: (``machine.PARALLEL_REGION_OPS``: a loop body of small maps pays a region every iteration)
PARALLEL_MAP_WORK = PARALLEL_REGION_OPS

#: the builder begins a new state before an op once the current one holds this many nodes:
#: DaCe's analyses of a state (validation, code generation, serialisation) take time
#: quadratic in its nodes, and a state boundary costs nothing at run time (DaCe runs a
#: state's maps one after another anyway: no OpenMP sections)
STATE_NODES = 200

#: the first line of every tasklet's code names the op it computes, and each op that it
#: recomputes inline has one more such comment (``Emitter.origin``): the profiler
#: attributes a map's time to its tasklets' ops and their source lines through them
OP_COMMENT = "// op "


def origin(op_name: str, file: str | None, line: int | None) -> str:
    """The comment that names an op and its source line in a tasklet's code (read by the
    profiler)."""
    where = f" @ {file}:{line}" if file and line else ""
    return f"{OP_COMMENT}{op_name}{where}"


def schedule_for(shape: Sequence[int], work_per_element: int = 1) -> dace.ScheduleType:
    """The schedule of a map over ``shape``: parallel only when the work pays for it."""
    if any(not isinstance(n, (int, np.integer)) for n in (*shape, work_per_element)):
        return dace.ScheduleType.Default  # symbolic sizes: large enough, as a rule
    work = int(np.prod(shape, dtype=np.int64)) * max(1, work_per_element)
    return dace.ScheduleType.Default if work >= PARALLEL_MAP_WORK \
        else dace.ScheduleType.Sequential


def identifier(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", text)


@dataclass(frozen=True)
class Element:
    """One element of ``binding`` at the map's point, or at ``subscripts`` of it."""

    binding: Union[Array, View]
    subscripts: Sequence[str] | None = None


@dataclass(frozen=True)
class Whole:
    """All of ``array`` through a pointer connector."""

    array: Array


@dataclass(frozen=True)
class Value:
    """A 0-d ``binding`` by value."""

    binding: Union[Array, Literal]


Access = Union[Element, Whole, Value, dace.Memlet]
_PROCESS_VALUE_TYPE = ir.TensorType((), "i64")


class Emitter:
    """The SDFG of one module, filled state by state."""

    def __init__(self, name: str, machine: Machine, library_nodes: bool = True):
        self.sdfg = dace.SDFG(identifier(name))
        #: whether ops may become DaCe library nodes (``library.py``); not in the SDFG that
        #: expands one, which computes the op in code
        self.library_nodes = library_nodes
        #: the machine the code is tuned for (``machine.py``)
        self.machine = machine
        #: the control-flow region being filled (the SDFG, a loop body, a branch)
        self.cfg: dace.sdfg.state.ControlFlowRegion = self.sdfg
        self.state = self.sdfg.add_state("entry", is_start_block=True)
        self.state.set_default_lineinfo(NO_LINEINFO)
        self._nodes: dict[str, dace.nodes.AccessNode] = {}  # last access node per data
        self._counter = itertools.count()
        #: hidden constant arguments: data name -> array (in storage dtype)
        self.constants: dict[str, np.ndarray] = {}
        #: hidden arguments whose value each process supplies when it loads the program
        #: (its rank, its communicators): data name -> what the runtime binds
        #: (``runtime.ProcessValue``)
        self.process_values: dict[str, dict] = {}
        #: the op being emitted: named in errors, its location in the code's debug info
        self.op: ir.Op | None = None
        #: the locations of the calls being inlined, outermost first
        self._calls: list[ir.Location | None] = []

    # ------------------------------------------------------------------ where we are
    @contextlib.contextmanager
    def at(self, op: ir.Op) -> Iterator[None]:
        """Emit ``op`` within the ``with`` block (errors name it, code carries its line)."""
        saved, self.op = self.op, op
        try:
            yield
        finally:
            self.op = saved

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """Within the ``with`` block, the current op's (a call's) body is inlined: its
        location stands in for the ops of the callee that have none of their own."""
        self._calls.append(self.location)
        try:
            yield
        finally:
            self._calls.pop()

    @property
    def op_name(self) -> str:
        return self.op.name if self.op is not None else "module"

    @property
    def location(self) -> ir.Location | None:
        """The current op's location; for an op without a file (in a function JAX made,
        as for ``jnp.sort``), the user's line of the innermost call that has one."""
        location = self.op.location if self.op is not None else None
        if location is None or location.file is None:
            outer = next((loc for loc in reversed(self._calls)
                          if loc is not None and loc.file), None)
            if outer is not None:
                return ir.Location(outer.file, outer.line, outer.column,
                                   location.name if location else outer.name)
        return location

    # ------------------------------------------------------------------ names, data
    def fresh(self, hint: str) -> str:
        """A new SDFG-wide name; SSA names like ``%3`` become ``v3_12``."""
        hint = identifier(hint)
        if not hint[:1].isalpha():
            hint = f"v{hint}"
        return f"{hint}_{next(self._counter)}"

    def unsupported(self, reason: str, supported: Sequence[str] | None = None):
        return UnsupportedError(self.op_name, reason, self.location, supported)

    def add_array(self, hint: str, t: ir.TensorType, transient: bool = True) -> Array:
        """A new array of type ``t``: a transient lives as long as the program, except one
        sized by symbols, allocated at every call at that call's sizes."""
        element = dtypes.of(t, self.op_name, self.location)
        if not t.is_static:
            raise self.unsupported(f"dynamic shape {t}")
        name = self.fresh(hint) if transient else hint
        lifetime = dace.AllocationLifetime.Scope
        if transient:
            lifetime = dace.AllocationLifetime.SDFG if symbolic.is_symbolic(t) \
                else dace.AllocationLifetime.Persistent
        self.sdfg.add_array(name, dace_shape(t), element.storage, transient=transient,
                            lifetime=lifetime)
        return Array(name, t)

    def add_constant(self, value: np.ndarray, t: ir.TensorType) -> Array:
        """A non-splat constant: a hidden argument filled by the runtime at every call."""
        element = dtypes.of(t)
        name = f"__const{len(self.constants)}"
        self.sdfg.add_array(name, dace_shape(t), element.storage)
        self.constants[name] = np.ascontiguousarray(
            element.to_storage(np.asarray(value).reshape(dace_shape(t))))
        return Array(name, t)

    def add_process_value(self, hint: str, spec: dict) -> Array:
        """A 64-bit integer that the process running the program supplies when it loads
        it (``spec`` says which: ``runtime.ProcessValue``), made once per spec: one binary
        serves every rank of a job."""
        for name, known in self.process_values.items():
            if known == spec:
                return Array(name, _PROCESS_VALUE_TYPE)
        name = f"__process{len(self.process_values)}_{identifier(hint)}"
        self.sdfg.add_array(name, dace_shape(_PROCESS_VALUE_TYPE), dace.int64)
        self.process_values[name] = spec
        return Array(name, _PROCESS_VALUE_TYPE)

    def include_once(self, code: str) -> None:
        """Add C++ ``code`` to the program's global code unless it is there already: the
        helpers of op families that only some programs use (LAPACK, FFTW, random bits)."""
        if code not in self.sdfg.global_code["frame"].as_string:
            self.sdfg.append_global_code(code)

    # ------------------------------------------------------------------ states
    def read(self, name: str) -> dace.nodes.AccessNode:
        """The access node that reads ``name`` in the current state (its last write)."""
        node = self._nodes.get(name)
        if node is None:
            node = self.state.add_access(name)
            self._nodes[name] = node
        return node

    def write(self, name: str) -> dace.nodes.AccessNode:
        """A new access node writing ``name``; later reads in the state read it."""
        node = self.state.add_access(name)
        self._nodes[name] = node
        return node

    def new_state(self, label: str = "s") -> dace.SDFGState:
        """Continue in a fresh state after the current one (for code whose writes must be
        ordered after everything before)."""
        self.state = self.cfg.add_state_after(self.state, self.fresh(label))
        self.state.set_default_lineinfo(NO_LINEINFO)
        self._nodes = {}
        return self.state

    def bound_state(self) -> None:
        """Continue in a fresh state if the current one holds ``STATE_NODES`` nodes: called
        between ops, where nothing holds the state (an open cluster is emitted into
        whichever state is current when it closes)."""
        if self.state.number_of_nodes() >= STATE_NODES:
            self.new_state()

    def append_block(self, block: dace.sdfg.state.ControlFlowBlock,
                     assignments: dict[str, str] | None = None) -> None:
        """Add ``block`` (a loop, a conditional) after the current state, entered with the
        interstate ``assignments``, and continue in a fresh state after it."""
        self.cfg.add_node(block)
        self.cfg.add_edge(self.state, block, dace.InterstateEdge(assignments=assignments))
        after = self.cfg.add_state(self.fresh("s"))
        self.cfg.add_edge(block, after, dace.InterstateEdge())
        after.set_default_lineinfo(NO_LINEINFO)
        self.state, self._nodes = after, {}

    @contextlib.contextmanager
    def inside(self, region: dace.sdfg.state.ControlFlowRegion) -> Iterator[None]:
        """Emit into ``region`` (a loop body, a branch) within the ``with`` block."""
        saved = self.cfg, self.state, self._nodes
        self.cfg, self._nodes = region, {}
        self.state = region.add_state(self.fresh("s"), is_start_block=True)
        self.state.set_default_lineinfo(NO_LINEINFO)
        try:
            yield
        finally:
            self.cfg, self.state, self._nodes = saved

    def origin(self) -> str:
        """The comment that names the current op and its source line in a tasklet's code."""
        location = self.location
        return origin(self.op_name, location and location.file, location and location.line)

    def debuginfo(self) -> dace.dtypes.DebugInfo | None:
        location = self.location
        if location is None or location.line is None:
            return None
        return dace.dtypes.DebugInfo(location.line, location.column or 0,
                                     filename=location.file)

    # ------------------------------------------------------------------ code
    def map(self, label: str, shape: Sequence[int], code: str,
            inputs: dict[str, Access] | None = None, outputs: dict[str, Access] | None = None,
            work_per_element: int = 1, schedule: dace.ScheduleType | None = None,
            environments: Sequence[str] = ()) -> dace.nodes.Tasklet | None:
        """One C++ tasklet in a map over ``shape`` (alone for no dimensions; nothing for an
        empty shape), scheduled by ``schedule_for`` unless ``schedule`` says otherwise,
        linking the DaCe ``environments`` (native libraries). Returns the tasklet."""
        if any(isinstance(n, (int, np.integer)) and n == 0 for n in shape):
            return None
        rank = len(shape)
        prelude, in_memlets, out_memlets, pointers = [], {}, {}, {}
        for conn, access in (inputs or {}).items():
            if isinstance(access, Value) and access.binding.is_literal:
                element = dtypes.of(access.binding.type)
                prelude.append(f"const auto {conn} = "
                               f"{literal(access.binding.value, element, True)};")
                continue
            in_memlets[conn] = self._memlet(access, rank, pointers, conn)
        for conn, access in (outputs or {}).items():
            out_memlets[conn] = self._memlet(access, rank, pointers, conn, written=True)
        code = "\n".join([self.origin(), *prelude, code])
        schedule = schedule or schedule_for(shape, work_per_element)
        input_nodes = {m.data: self.read(m.data) for m in in_memlets.values()}
        output_nodes = {m.data: self.write(m.data) for m in out_memlets.values()}
        if not shape:
            tasklet = self.state.add_tasklet(self.fresh(label), dict.fromkeys(in_memlets),
                                             dict.fromkeys(out_memlets), code,
                                             language=dace.Language.CPP,
                                             debuginfo=self.debuginfo())
            for conn, memlet in in_memlets.items():
                self.state.add_edge(input_nodes[memlet.data], None, tasklet, conn, memlet)
            for conn, memlet in out_memlets.items():
                self.state.add_edge(tasklet, conn, output_nodes[memlet.data], None, memlet)
        else:
            ranges = {p: f"0:{n}" for p, n in zip(map_params(rank), shape)}
            tasklet, entry, exit_ = self.state.add_mapped_tasklet(
                self.fresh(label), ranges, in_memlets, code, out_memlets,
                language=dace.Language.CPP, external_edges=True, input_nodes=input_nodes,
                output_nodes=output_nodes, schedule=schedule, debuginfo=self.debuginfo(),
                propagate=False)
            self.propagate_map(entry, exit_)
        for conn, array in pointers.items():
            connectors = tasklet.out_connectors if conn in out_memlets else \
                tasklet.in_connectors
            connectors[conn] = dace.pointer(dtypes.of(array.type).storage)
        tasklet.environments = set(environments)
        return tasklet

    def library_node(self, node: dace.nodes.LibraryNode, inputs: dict[str, Access],
                     outputs: dict[str, Access]) -> dace.nodes.LibraryNode:
        """A DaCe library node (a communication node) in the current state, its connectors
        reading and writing ``Whole`` arrays or ``Value`` elements; optional connectors
        (a communicator's ``_comm``) are added."""
        self.state.add_node(node)
        node.debuginfo = self.debuginfo() or NO_LINEINFO
        for conn, access in inputs.items():
            if conn not in node.in_connectors:
                node.add_in_connector(conn)
            memlet = self._memlet(access, 0, {}, conn)
            self.state.add_edge(self.read(memlet.data), None, node, conn, memlet)
        for conn, access in outputs.items():
            if conn not in node.out_connectors:
                node.add_out_connector(conn)
            memlet = self._memlet(access, 0, {}, conn, written=True)
            self.state.add_edge(node, conn, self.write(memlet.data), None, memlet)
        return node

    def _memlet(self, access: Access, rank: int, pointers: dict, conn: str,
                written: bool = False) -> dace.Memlet:
        if isinstance(access, dace.Memlet):
            return access
        if isinstance(access, Whole):
            pointers[conn] = access.array
            # the array's own shape: a pointer sees any reshape of it (``whole_result``)
            name = access.array.name
            full = ", ".join(f"0:{n}" for n in self.sdfg.arrays[name].shape)
            return dace.Memlet(f"{name}[{full}]", dynamic=written)
        binding = access.binding
        if isinstance(access, Value):
            return dace.Memlet(f"{binding.name}[0]")
        return dace.Memlet(f"{binding.data}["
                           f"{', '.join(binding.subscripts(rank, access.subscripts))}]")

    def copy(self, source: Union[Array, Literal, View], target: Array,
             offsets: Sequence[int] | None = None,
             skipped: Sequence[Sequence[tuple[int, int]]] = ()) -> None:
        """Write ``source`` into ``target`` (at ``offsets``, else all of it) with one map
        over the source's shape; but for the ``skipped`` boxes of the source ((start, stop)
        per dimension: positions that later writes replace), one map per box of the rest
        (``uncovered``), their writes joined in one access node."""
        t = source.type
        if t.size == 0:
            return
        boxes = pieces_to_copy(t, skipped, self.machine) or [[(0, n) for n in t.shape]]
        offsets = offsets or [0] * t.rank
        written = []
        for box in boxes:
            params = map_params(t.rank)
            inputs = {}
            if source.is_literal:
                code = f"__out = {literal(source.value, dtypes.of(t), storage=True)};"
            else:
                inputs["__in"] = Element(source, _shifted(params, [s for s, _ in box]))
                code = "__out = __in;"
            at = _shifted(params, [o + s for o, (s, _) in zip(offsets, box)])
            self.map("copy", [stop - start for start, stop in box], code, inputs,
                     {"__out": Element(target, at)})
            written.append(self.read(target.name))
        self.join_writes(written)

    def join_writes(self, nodes: Sequence[dace.nodes.AccessNode]) -> None:
        """Access nodes of this state that maps wrote (parts of one array) as one, the
        last, so that readers of the array depend on every write."""
        for node in nodes[:-1]:
            if node is not nodes[-1]:
                for edge in self.state.in_edges(node):
                    self.state.add_edge(edge.src, edge.src_conn, nodes[-1], edge.dst_conn,
                                        edge.data)
                self.state.remove_node(node)

    def propagate_map(self, entry: dace.nodes.MapEntry, exit_: dace.nodes.MapExit) -> None:
        """The outer memlets of a new top-level map. DaCe's own propagation looks up the
        map's scope in the whole state, which made translation quadratic in the number of
        ops; a map made here is never nested, so only the SDFG's symbols are defined.
        Memlets that read or write at the map's point are propagated by ``point_subset``,
        the rest by DaCe's memlet patterns (sympy matching: 40% of the translation)."""
        from dace.sdfg.propagation import propagate_subset

        state, the_map = self.state, entry.map
        defined = [dace.symbolic.pystr_to_symbolic(name)
                   for name in (*self.sdfg.symbols, *self.sdfg.constants)]
        paths = ([(e, [i for i in state.out_edges(entry)
                       if i.src_conn == "OUT_" + e.dst_conn[3:]], False)
                  for e in state.in_edges(entry) if e.dst_conn] +
                 [(e, [i for i in state.in_edges(exit_)
                       if i.dst_conn == "IN_" + e.src_conn[4:]], True)
                  for e in state.out_edges(exit_) if e.src_conn])
        for outer, inner, use_dst in paths:
            if outer.data.is_empty():
                continue
            memlets = [e.data for e in inner]
            subset = point_subset(memlets, the_map, use_dst)
            if subset is None:
                outer.data = propagate_subset(memlets, self.sdfg.arrays[outer.data.data],
                                              the_map.params, the_map.range,
                                              defined_variables=defined, use_dst=use_dst)
                continue
            memlet = copy.copy(memlets[0])
            memlet.subset, memlet.other_subset = subset, None
            memlet.volume = sum(m.volume for m in memlets) * int(np.prod(the_map.range.size()))
            memlet.dynamic = any(m.dynamic for m in memlets)
            outer.data = memlet


def _shifted(params: Sequence[str], starts: Sequence[int]) -> list[str] | None:
    """Subscripts ``start + param`` of a map's point (None: the point itself)."""
    if not any(starts):
        return None
    return [f"{s} + {p}" if s else p for s, p in zip(starts, params)]


def pieces_to_copy(t: ir.TensorType, skipped: Sequence[Sequence[tuple[int, int]]],
                   machine: Machine) -> list[list[tuple[int, int]]] | None:
    """The boxes of ``t`` outside the ``skipped`` ones (``uncovered``), if copying them
    moves fewer cache lines than copying all of ``t``, else None (pieces that share most
    lines with what they leave out save no memory traffic; an array smaller than
    ``machine.split_copy_bytes`` is copied at cache speed by one map, where each piece
    would add a map to build)."""
    item = dtypes.of(t).storage_numpy.itemsize
    if not skipped or not t.is_static or t.size * item < machine.split_copy_bytes:
        return None
    boxes = uncovered(t.shape, skipped)
    if boxes is None or sum(_bytes_moved(t.shape, box, item, machine.line_bytes)
                            for box in boxes) > 0.9 * t.size * item:
        return None
    return boxes


def _bytes_moved(shape: Sequence[int], box: Sequence[tuple[int, int]], item: int,
                 line: int) -> int:
    """About how many bytes a copy of ``box`` of a row-major array of ``shape`` moves:
    whole cache lines of each contiguous run, but at most the distance to the next run
    (runs closer than a line share it)."""
    if not shape:
        return item
    j = len(shape) - 1
    while j > 0 and tuple(box[j]) == (0, shape[j]):
        j -= 1
    run = (box[j][1] - box[j][0]) * int(np.prod(shape[j + 1:], dtype=np.int64)) * item
    extents = [stop - start for start, stop in box[:j]]
    runs = int(np.prod(extents, dtype=np.int64))
    # the next run: one step along the innermost dimension before j that the box spans
    k = max((d for d, n in enumerate(extents) if n > 1), default=None)
    gap = int(np.prod(shape[k + 1:], dtype=np.int64)) * item if k is not None else run
    return runs * min(gap, -(-run // line) * line)


def uncovered(shape: Sequence[int], boxes: Sequence[Sequence[tuple[int, int]]],
              limit: int = 16) -> list[list[tuple[int, int]]] | None:
    """The positions of ``shape`` outside all ``boxes`` ((start, stop) per dimension) as
    at most ``limit`` disjoint boxes, or None (more pieces). Along each dimension in turn,
    each run of positions that the same boxes cover is one piece: a run no box covers is
    kept whole, one that a box covers in every later dimension dropped, the rest split
    along the next dimension."""
    pieces: list[list[tuple[int, int]]] = []

    def split(d: int, prefix: list[tuple[int, int]], covering: frozenset[int]) -> None:
        cuts = sorted({0, shape[d], *(x for k in covering for x in boxes[k][d]
                                      if 0 < x < shape[d])})
        runs: list[list] = []  # [start, stop, the boxes covering the run]
        for start, stop in zip(cuts, cuts[1:]):
            inside = frozenset(k for k in covering
                               if boxes[k][d][0] <= start and stop <= boxes[k][d][1])
            if runs and runs[-1][2] == inside:
                runs[-1][1] = stop
            else:
                runs.append([start, stop, inside])
        for start, stop, inside in runs:
            if len(pieces) > limit:
                return
            here = [*prefix, (start, stop)]
            if not inside:
                pieces.append([*here, *((0, n) for n in shape[d + 1:])])
            elif not any(all(boxes[k][e][0] <= 0 and boxes[k][e][1] >= shape[e]
                             for e in range(d + 1, len(shape))) for k in inside):
                split(d + 1, here, inside)

    split(0, [], frozenset(range(len(boxes))))
    return pieces if len(pieces) <= limit else None


def point_subset(memlets: Sequence[dace.Memlet], the_map: dace.nodes.Map, use_dst: bool
                 ) -> dace.subsets.Range | None:
    """What ``memlets`` (inside ``the_map``, all of one array) access over the whole map,
    as DaCe's propagation finds it, when each of their dimensions is free of the map's
    parameters (itself) or one parameter plus or minus an offset (the parameter's range
    moved, or mirrored), in a map of constant ranges; else None. Memlets at different
    offsets (a stencil's reads) give the bounding box of their subsets, as DaCe's union."""
    ranges = the_map.range.ranges
    if any(integer(v) is None for r in ranges for v in r):
        return None
    params = {name: k for k, name in enumerate(the_map.params)}
    found = None
    for memlet in memlets:
        if memlet.is_empty():
            return None
        subset = memlet.dst_subset if use_dst else memlet.src_subset
        if not isinstance(subset, dace.subsets.Range) or any(t != 1 for t in subset.tile_sizes):
            return None
        dims = []
        for begin, end, step in subset.ranges:
            symbols = dace.symbolic.symlist(begin) | dace.symbolic.symlist(end)
            used = [s for name, s in symbols.items() if name in params]
            if not used:
                dims.append((begin, end, step))
            elif len(used) == 1 and begin == end and (moved := _moved_range(
                    begin, used[0], ranges[params[str(used[0])]], params)) is not None:
                dims.append(moved)
            else:
                return None
        subset = dace.subsets.Range(dims)
        found = subset if found is None else dace.subsets.union(found, subset)
        if found is None:
            return None
    return found


def _moved_range(index, param, param_range, params) -> tuple | None:
    """The range ``index`` (``param + c`` or ``c - param``, ``c`` free of the map's
    parameters) takes over ``param_range``, as DaCe's affine memlet pattern writes it."""
    first, last, step = param_range
    if index == param:
        return param_range
    for sign in (1, -1):
        offset = index - sign * param
        if not {str(s) for s in offset.free_symbols} & params.keys():
            begin, end = offset + sign * first, offset + sign * last
            return (begin, end, step) if sign > 0 else (end, begin, 1)
    return None


