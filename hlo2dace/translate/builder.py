"""The builder: owns the SDFG under construction and walks the IR, dispatching each op
through the registry.

How the builder emits code decides speed more than any later pass, so it never
materialises what it can express otherwise. Every SSA value is bound to a ``Binding``:

* ``Array``: a data container of the SDFG (argument, result, hidden constant, transient);
* ``Literal``: a splat constant, written into tasklet code as a C++ literal;
* ``View``: an affine re-indexing of an array (broadcast_in_dim, transpose, slice, unit
  reshape), read through memlets by its consumers and copied only when an op needs an array;
* ``Pending``: the result of an elementwise op whose map has not been emitted yet;
* ``PendingView``: a ``View`` of a pending value that reads no element twice (a slice, not
  a broadcast). An elementwise consumer recomputes the value at the index it reads, as XLA
  fuses a cheap producer into each of its consumers, so that a stencil's slices of slices
  never reach memory.

Elementwise ops of one shape gather into an open ``ElementwiseCluster`` and are emitted
as ONE map with one tasklet per op and register scalars between them; only values used
outside the cluster are written to arrays. A cluster closes when anything else needs one
of its values as an array, so the dataflow stays acyclic. Every map over a shape uses the
parameters ``__i0, __i1, ...`` so DaCe's own passes can fuse what the builder leaves apart.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections import ChainMap, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence, Union

import dace
import numpy as np

from .. import ir, symbolic
from ..errors import UnsupportedError
from ..optimize import LEVELS, Level
from . import dtypes, registry
from .literals import literal

HELPERS_CPP = (Path(__file__).with_name("h2d_ops.h")).read_text()
#: the default line info of every state: without one, DaCe inspects the Python stack at
#: every node it adds (most of the translation time)
NO_LINEINFO = dace.dtypes.DebugInfo(0)

# ------------------------------------------------------------------------ bindings


@dataclass(frozen=True)
class Array:
    name: str
    type: ir.TensorType


@dataclass(frozen=True)
class Literal:
    value: object  # a NumPy scalar of the element type's NumPy dtype
    type: ir.TensorType


@dataclass(frozen=True)
class Axis:
    """How one dimension of a view's source is indexed: ``offset + stride * i_dim``
    (``dim`` None: the constant ``offset``)."""

    dim: int | None
    stride: int = 1
    offset: int = 0


@dataclass(frozen=True)
class View:
    source: Array
    axes: tuple[Axis, ...]  # one per source dimension
    type: ir.TensorType


@dataclass(frozen=True, eq=False)
class Pending:
    cluster: ElementwiseCluster
    value: ir.Value
    scope: Scope

    @property
    def key(self) -> tuple[int, str]:
        return (id(self.scope), self.value.name)

    @property
    def type(self) -> ir.TensorType:
        return self.value.type


@dataclass(frozen=True, eq=False)
class Pieces:
    """A concatenation not written yet: ``parts`` laid end to end along ``dimension``.
    Elementwise clusters read the piece each element falls in; anything else gets it
    materialised into an array (once, remembered in ``materialised``)."""

    parts: tuple[Union[Array, Literal, View], ...]
    dimension: int
    type: ir.TensorType
    materialised: list = field(default_factory=list)

    def extents(self) -> list[tuple[int, int]]:
        """Where each part starts and ends along ``dimension``."""
        out, start = [], 0
        for part in self.parts:
            out.append((start, start + part.type.shape[self.dimension]))
            start = out[-1][1]
        return out


@dataclass(frozen=True, eq=False)
class PendingView:
    """``source`` re-indexed by ``axes`` (as a ``View``'s; none for a 0-d source) before
    its cluster wrote it, if it ever does."""

    source: Pending
    axes: tuple[Axis, ...]
    type: ir.TensorType


@dataclass(frozen=True)
class Token:
    """A ``!stablehlo.token``: it orders side effects, and holds no data."""


TOKEN = Token()

Binding = Union[Array, Literal, View, Pending, PendingView, Pieces, Token]


#: maps doing less work than this (elements x work per element) run on one thread: an
#: OpenMP parallel region costs about as much as this many simple element operations
#: (a loop body of small maps pays it every iteration)
PARALLEL_WORK = 1 << 15


def schedule_for(shape: Sequence[int], work_per_element: int = 1) -> dace.ScheduleType:
    """The schedule of a map over ``shape``: parallel only when the work pays for it."""
    if any(not isinstance(n, (int, np.integer)) for n in (*shape, work_per_element)):
        return dace.ScheduleType.Default  # symbolic sizes: large enough, as a rule
    work = int(np.prod(shape, dtype=np.int64)) * max(1, work_per_element)
    return dace.ScheduleType.Default if work >= PARALLEL_WORK else dace.ScheduleType.Sequential


def map_params(rank: int) -> list[str]:
    return [f"__i{d}" for d in range(rank)]


def dace_shape(t: ir.TensorType) -> list[int]:
    """0-d tensors are stored as one-element arrays."""
    return list(t.shape) if t.rank else [1]


def at_most(a, b) -> bool:
    """``a <= b`` for sizes; with symbols, only when it holds for all their values."""
    if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)):
        return a <= b
    return bool((a - b).is_nonpositive)


def cpp_size(n) -> str:
    """C++ for a size: a literal, or an expression of the program's symbols."""
    if isinstance(n, (int, np.integer)):
        return f"{n}LL"
    return f"(int64_t)({dace.symbolic.symstr(n, cpp_mode=True)})"


def flat_index(shape: Sequence[int], indices: Sequence[str]) -> str:
    """C++ for the row-major offset of ``indices`` in an array of ``shape``."""
    terms, stride = [], 1
    for n, index in reversed(list(zip(shape, indices))):
        terms.append(f"(int64_t)({index})" if stride == 1
                     else f"(int64_t)({index}) * {cpp_size(stride)}")
        stride *= n
    return " + ".join(reversed(terms)) or "0"


def axes_point(axes: Sequence[Axis], point: Sequence[str]) -> list[str]:
    """The index into a view's source that the view's index ``point`` reads."""
    out = []
    for axis in axes:
        if axis.dim is None:
            out.append(str(axis.offset))
            continue
        index = point[axis.dim]
        term = index if axis.stride == 1 else f"{axis.stride} * ({index})"
        out.append(term if axis.offset == 0 else f"{axis.offset} + {term}")
    return out


def compose_axes(inner: Sequence[Axis], outer: Sequence[Axis]) -> tuple[Axis, ...]:
    """The axes of a view (``outer``) of a view (``inner``), on the inner one's source."""
    composed = []
    for axis in inner:
        if axis.dim is None:
            composed.append(axis)
            continue
        applied = outer[axis.dim]
        offset = axis.offset + axis.stride * applied.offset
        composed.append(Axis(None, 0, offset) if applied.dim is None else
                        Axis(applied.dim, axis.stride * applied.stride, offset))
    return tuple(composed)


def index_expressions(binding: Union[Array, View], rank: int,
                      point: Sequence[str] | None = None) -> list[str]:
    """Subscripts that read ``binding`` at the iteration ``point`` (default: ``__i0..``)
    of a map over a shape of ``rank`` dimensions (a 0-d operand of a shaped op is
    broadcast)."""
    point = list(point) if point is not None else map_params(rank)
    if isinstance(binding, View):
        return axes_point(binding.axes, point) or ["0"]
    if binding.type.rank == 0:
        return ["0"]
    assert binding.type.rank == rank
    return point


# ------------------------------------------------------------------ elementwise


@dataclass(eq=False)
class ElementwiseCluster:
    """Elementwise ops over one iteration space, emitted together as one map. Each member
    keeps the scope it was bound in (inlined calls add members from their own scope);
    ``resolved`` holds, once emitted, the arrays of the values used outside."""

    shape: tuple[int, ...]
    members: list[tuple[ir.Op, Scope]] = field(default_factory=list)
    closed: bool = False
    resolved: dict[tuple[int, str], Array] = field(default_factory=dict)
    #: values that must be written whatever their users (something needs their array)
    required: set[tuple[int, str]] = field(default_factory=set)
    #: values whose one reader computes them itself (``Builder.absorb``)
    absorbed: set[tuple[int, str]] = field(default_factory=set)


# ------------------------------------------------------------------------- scopes


@dataclass(eq=False)
class Scope:
    """The bindings of one function body (or nested region) being translated."""

    env: ChainMap
    ops: Sequence[ir.Op]  #: the live ops of the block, terminator last
    uses: dict[str, list[ir.Op]]
    #: values that must end in a specific array (function results)
    destinations: dict[str, str] = field(default_factory=dict)
    #: value name -> the op of the block that computes it
    producers: dict[str, ir.Op] = field(default_factory=dict)
    #: the arrays of ``destinations``: in a loop body, maps may write these where they read
    targets: frozenset[str] = frozenset()

    @classmethod
    def of(cls, env: ChainMap, block: ir.Block, destinations=None,
           returned: Sequence[int] | None = None) -> Scope:
        ops = live_ops(block, returned)
        producers = {result.name: op for op in ops for result in op.results}
        destinations = dict(destinations or {})
        return cls(env, ops, collect_uses(ops), destinations, producers,
                   frozenset(destinations.values()))


def live_ops(block: ir.Block, returned: Sequence[int] | None = None) -> list[ir.Op]:
    """The ops of ``block`` whose results are needed (or that have no results, i.e. are
    kept for their effects), in order; the terminator is always live. ``returned``: the
    positions of the terminator's operands that are needed (default: all)."""
    terminator = block.terminator
    wanted = terminator.operands if returned is None else [terminator.operands[k]
                                                           for k in returned]
    needed: set[str] = {v.name for v in wanted}
    live = [terminator]
    for op in reversed(block.ops[:-1]):
        if not op.results or any(r.name in needed for r in op.results):
            live.append(op)
            needed.update(v.name for inner in op.walk() for v in inner.operands)
    return live[::-1]


def collect_uses(ops: Sequence[ir.Op]) -> dict[str, list[ir.Op]]:
    """Value name -> the ops among ``ops`` that use it, ops nested in regions counted as
    uses by the top-level op that holds them."""
    uses: dict[str, list[ir.Op]] = defaultdict(list)
    for op in ops:
        seen = set()
        for inner in op.walk():
            for operand in inner.operands:
                if operand.name not in seen:
                    seen.add(operand.name)
                    uses[operand.name].append(op)
    return uses


def updates_in_results(block: ir.Block, destinations: dict[str, str]) -> None:
    """A function result made by a chain of updates (``zeros.at[a].set(u).at[b].set(v)``)
    is built in its own array: the operand of an update whose result goes into an array
    goes there too, if the update is its only user, so each update is in place
    (``Builder.reusable_array``) and nothing is copied. Only for the entry function, whose
    result arrays nothing reads."""
    uses = collect_uses(block.ops)
    produced = {r.name for op in block.ops for r in op.results}
    for op in reversed(block.ops):
        if op.name not in ("stablehlo.scatter", "stablehlo.dynamic_update_slice") \
                or len(op.results) != 1:
            continue
        operand, target = op.operands[0], destinations.get(op.results[0].name)
        if (target is not None and operand.name in produced
                and operand.name not in destinations
                and [id(user) for user in uses.get(operand.name, ())] == [id(op)]
                and sum(v.name == operand.name for v in op.operands) == 1):
            destinations[operand.name] = target


def unresolved(binding: Pending) -> bool:
    """Whether ``binding``'s value is in no array (its cluster is open, or did not write it)."""
    return binding.key not in binding.cluster.resolved


#: ops that cost tens of simple ops: a pending value computed by one that has other users
#: is written once rather than recomputed by each reader (as XLA will not duplicate them)
EXPENSIVE_OPS = frozenset(f"stablehlo.{name}" for name in (
    "tanh", "exponential", "exponential_minus_one", "log", "log_plus_one", "logistic",
    "sine", "cosine", "tan", "power", "atan2", "cbrt"))


def recomputed_reads(binding: Union[Pending, PendingView], budget: int,
                     shared_expensive: bool = True) -> list[Binding] | None:
    """What recomputing ``binding`` element by element reads (arrays, views, literals,
    concatenations, values in arrays, and with ``shared_expensive`` pending values of
    ``EXPENSIVE_OPS`` with other users, to be written first), or None if it takes more
    than ``budget`` ops."""
    reads, stack, ops = [], [binding], 0
    while stack:
        item = stack.pop()
        if isinstance(item, PendingView):
            item = item.source
        if not (isinstance(item, Pending) and unresolved(item)):
            reads.append(item)
            continue
        op = item.scope.producers[item.value.name]
        if (shared_expensive and item is not binding and op.name in EXPENSIVE_OPS
                and len(item.scope.uses.get(item.value.name, ())) > 1):
            reads.append(item)
            continue
        ops += 1
        if ops > budget:
            return None
        stack.extend(item.scope.env[v.name] for v in op.operands)
    return reads


def _holds(binding: object, array: str) -> bool:
    """Whether ``binding`` reads (part of) the array named ``array``."""
    if isinstance(binding, (Pending, PendingView)):
        source = binding.source if isinstance(binding, PendingView) else binding
        if not unresolved(source):
            return _holds(source.cluster.resolved[source.key], array)
        if (isinstance(binding, Pending) and not source.cluster.closed
                and source.key not in source.cluster.absorbed):
            return False  # its cluster is emitted before any update in place
        reads = recomputed_reads(binding, 1 << 30, shared_expensive=False)
        return any(_holds(read, array) for read in reads)
    if isinstance(binding, Array):
        return binding.name == array
    if isinstance(binding, View):
        return binding.source.name == array
    if isinstance(binding, Pieces):
        return any(_holds(part, array) for part in (*binding.parts, *binding.materialised))
    if isinstance(binding, tuple):
        return any(_holds(part, array) for part in binding)
    return False


def _identifier(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", text)


class Builder:
    """Translates one IR module into one SDFG."""

    def __init__(self, module: ir.Module, name: str, entry: str | None = None,
                 target: str = "cpu", optimize: Level = LEVELS["default"],
                 signature: symbolic.Signature | None = None):
        self.module = module
        #: how the symbols in the module's types are read from the arguments, and the
        #: checks the runtime makes on them (``symbolic.refine``); None: static shapes
        self.signature = signature
        #: fuse elementwise clusters; recompute views of pending values (``optimize.py``)
        self.fuse = optimize.fuse
        self.recomputed_ops = optimize.recomputed_ops
        self.recompute_broadcasts = optimize.recompute_broadcasts
        try:
            self.entry = module.functions[entry] if entry else module.main
        except LookupError:
            raise UnsupportedError("builtin.module", f"no entry function {entry or 'main'}",
                                   supported=sorted(module.functions)) from None
        self.target = target
        self.sdfg = dace.SDFG(_identifier(name))
        self.sdfg.append_global_code(HELPERS_CPP)
        self.sdfg.append_init_code("h2d::init_program();")
        prologue = self.sdfg.add_state("prologue", is_start_block=True)
        self._fp_mode_tasklet(prologue, "h2d::enter_fp_mode();")
        #: the control-flow region being filled (the SDFG, a loop body, a branch)
        self.cfg: dace.sdfg.state.ControlFlowRegion = self.sdfg
        self.state = self.sdfg.add_state_after(prologue, "entry")
        self.state.set_default_lineinfo(NO_LINEINFO)
        self._nodes: dict[str, dace.nodes.AccessNode] = {}  # last access node per data
        self._counter = itertools.count()
        self.scope: Scope | None = None
        self.open_clusters: dict[tuple[int, ...], ElementwiseCluster] = {}
        #: the arrays that ops write while a block runs (``Scope.targets``)
        self.written_in_place: set[str] = set()
        #: hidden constant arguments: data name -> array (in storage dtype)
        self.constants: dict[str, np.ndarray] = {}
        self.argument_names: list[str] = []
        self.result_names: list[str] = []
        self.current_op: ir.Op | None = None
        #: the locations of the calls being inlined, outermost first
        self.call_locations: list[ir.Location | None] = []

    def include_once(self, code: str) -> None:
        """Add C++ ``code`` to the program's global code unless it is there already: the
        helpers of op families that only some programs use (LAPACK, FFTW, random bits)."""
        if code not in self.sdfg.global_code["frame"].as_string:
            self.sdfg.append_global_code(code)

    @staticmethod
    def _fp_mode_tasklet(state: dace.SDFGState, code: str) -> None:
        """Switch the caller's floating-point mode, as XLA does around its CPU code."""
        state.add_tasklet("fp_mode", {}, {}, code, language=dace.Language.CPP,
                          side_effects=True)

    # ---------------------------------------------------------------- naming / data
    def fresh(self, hint: str) -> str:
        """A new SDFG-wide name; SSA names like ``%3`` become ``v3_12``."""
        hint = _identifier(hint)
        if not hint[:1].isalpha():
            hint = f"v{hint}"
        return f"{hint}_{next(self._counter)}"

    def add_array(self, hint: str, t: ir.TensorType, transient: bool = True) -> Array:
        element = dtypes.of(t, self._op_name(), self._location())
        if not t.is_static:
            raise UnsupportedError(self._op_name(), f"dynamic shape {t}", self._location())
        name = self.fresh(hint) if transient else hint
        # transients live as long as the program, except those sized by symbols: they are
        # allocated at every call, at that call's sizes
        lifetime = dace.AllocationLifetime.Scope
        if transient:
            lifetime = dace.AllocationLifetime.SDFG if symbolic.is_symbolic(t) \
                else dace.AllocationLifetime.Persistent
        self.sdfg.add_array(name, dace_shape(t), element.storage, transient=transient,
                            lifetime=lifetime)
        return Array(name, t)

    def add_constant_array(self, value: np.ndarray, t: ir.TensorType) -> Array:
        """A non-splat constant: a hidden argument filled by the runtime at every call."""
        element = dtypes.of(t)
        name = f"__const{len(self.constants)}"
        self.sdfg.add_array(name, dace_shape(t), element.storage)
        self.constants[name] = np.ascontiguousarray(
            element.to_storage(np.asarray(value).reshape(dace_shape(t))))
        return Array(name, t)

    def result_array(self, value: ir.Value, hint: str = "", scope: Scope | None = None
                     ) -> Array:
        """The array an op writes ``value`` into: its function result if it is one."""
        assert isinstance(value.type, ir.TensorType)
        scope = scope or self.scope
        destination = scope.destinations.pop(value.name, None) if scope else None
        if destination is not None:
            return Array(destination, value.type)
        return self.add_array(hint or value.name.lstrip("%"), value.type)

    def scalar(self, hint: str, ctype: dace.typeclass) -> str:
        name = self.fresh(hint)
        self.sdfg.add_scalar(name, ctype, transient=True, storage=dace.StorageType.Register)
        return name

    # ---------------------------------------------------------------- access nodes
    def read(self, name: str) -> dace.nodes.AccessNode:
        node = self._nodes.get(name)
        if node is None:
            node = self.state.add_access(name)
            self._nodes[name] = node
        return node

    def write(self, name: str) -> dace.nodes.AccessNode:
        node = self.state.add_access(name)
        self._nodes[name] = node
        return node

    def new_state(self, label: str = "s") -> dace.SDFGState:
        """Continue in a fresh state after the current one (for ops whose writes must be
        ordered after everything before)."""
        self.close_all_clusters()
        self.state = self.cfg.add_state_after(self.state, self.fresh(label))
        self.state.set_default_lineinfo(NO_LINEINFO)
        self._nodes = {}
        return self.state

    def append_block(self, block: dace.sdfg.state.ControlFlowBlock,
                     assignments: dict[str, str] | None = None) -> None:
        """Add ``block`` (a loop, a conditional) after the current state, entered with the
        interstate ``assignments``, and continue in a fresh state after it."""
        self.close_all_clusters()
        self.cfg.add_node(block)
        self.cfg.add_edge(self.state, block, dace.InterstateEdge(assignments=assignments))
        after = self.cfg.add_state(self.fresh("s"))
        self.cfg.add_edge(block, after, dace.InterstateEdge())
        after.set_default_lineinfo(NO_LINEINFO)
        self.state, self._nodes = after, {}

    @contextlib.contextmanager
    def inside(self, region: dace.sdfg.state.ControlFlowRegion):
        """Emit into ``region`` (a loop body, a branch) within the ``with`` block; every
        elementwise cluster opened there is emitted there."""
        self.close_all_clusters()
        saved = self.cfg, self.state, self._nodes
        self.cfg, self._nodes = region, {}
        self.state = region.add_state(self.fresh("s"), is_start_block=True)
        self.state.set_default_lineinfo(NO_LINEINFO)
        yield
        self.close_all_clusters()
        self.cfg, self.state, self._nodes = saved

    def debuginfo(self) -> dace.dtypes.DebugInfo | None:
        loc = self._location()
        if loc is None or loc.line is None:
            return None
        return dace.dtypes.DebugInfo(loc.line, loc.column or 0, filename=loc.file)

    def _op_name(self) -> str:
        return self.current_op.name if self.current_op is not None else "module"

    def _location(self):
        """The current op's location; for an op without a file (in a function JAX made,
        as for ``jnp.sort``), the user's line of the innermost call that has one."""
        location = self.current_op.location if self.current_op is not None else None
        if location is None or location.file is None:
            outer = next((loc for loc in reversed(self.call_locations)
                          if loc is not None and loc.file), None)
            if outer is not None:
                return ir.Location(outer.file, outer.line, outer.column,
                                   location.name if location else outer.name)
        return location

    def unsupported(self, reason: str, supported: Sequence[str] | None = None):
        return UnsupportedError(self._op_name(), reason, self._location(), supported)

    # ---------------------------------------------------------------- bindings
    def bind(self, value: ir.Value, binding: Binding) -> None:
        self.scope.env[value.name] = binding

    def binding(self, value: ir.Value) -> Binding:
        return self.scope.env[value.name]

    def resolve(self, binding: Binding) -> Union[Array, Literal, View]:
        """A pending elementwise result -> its array, emitting its cluster if needed; a
        concatenation -> its array, written if needed."""
        if isinstance(binding, (Pending, PendingView)):
            source = binding.source if isinstance(binding, PendingView) else binding
            if not source.cluster.closed:
                source.cluster.required.add(source.key)
                self.close_cluster(source.cluster)
            array = source.cluster.resolved.get(source.key)
            if array is None:  # its cluster did not write it: recompute what is read
                from .fusion import emit_recomputed

                return emit_recomputed(self, binding, self.add_array("fused", binding.type))
            if isinstance(binding, Pending):
                return array
            return View(array, binding.axes, binding.type) if binding.axes else \
                View(array, (Axis(None, 0, 0),), binding.type)
        if isinstance(binding, Pieces):
            if not binding.materialised:
                target = self.add_array("concat", binding.type)
                self.write_pieces(binding, target)
                binding.materialised.append(target)
            return binding.materialised[0]
        return binding

    def write_pieces(self, pieces: Pieces, target: Array) -> None:
        """Copy each part of a concatenation into its window of ``target``."""
        written = []
        for part, (start, _) in zip(pieces.parts, pieces.extents()):
            offsets = [0] * pieces.type.rank
            offsets[pieces.dimension] = start
            self.copy_into(part, target, offsets)
            if part.type.size:
                written.append(self.read(target.name))  # the access node the copy wrote
        # every piece into ONE access node, so that readers of the result depend on all
        for node in written[:-1]:
            if node is not written[-1]:
                for edge in self.state.in_edges(node):
                    self.state.add_edge(edge.src, edge.src_conn, written[-1], edge.dst_conn,
                                        edge.data)
                self.state.remove_node(node)

    def reusable_array(self, value: ir.Value, op: ir.Op, result: ir.Value) -> Array | None:
        """The array holding ``value`` if ``op`` may write ``result`` into it (an update in
        place, as XLA reuses a dead operand's buffer), else None. It may when the array is a
        transient made in this scope, ``op`` is ``value``'s only user, ``result`` need not
        go into a function result, and no value still to be read (nor another operand of
        ``op``) shares the array. A new state begins (open clusters are emitted first), so
        every earlier read of the array comes before the update."""
        scope = self.scope
        binding = scope.env.get(value.name)
        destination = scope.destinations.get(result.name)
        if (not isinstance(binding, Array) or value.name not in scope.producers
                or binding.name in self.constants
                or not (self.sdfg.arrays[binding.name].transient and destination is None
                        or binding.name == destination)  # see updates_in_results
                or [id(user) for user in scope.uses.get(value.name, ())] != [id(op)]):
            return None
        if any(_holds(scope.env.get(v.name), binding.name) for v in op.operands
               if v.name != value.name):
            return None  # the op also reads the array through another operand
        position = {id(o): k for k, o in enumerate(scope.ops)}
        now = position[id(op)]
        for name, other in scope.env.maps[0].items():
            if name != value.name and _holds(other, binding.name) and any(
                    position.get(id(user), now) > now for user in scope.uses.get(name, ())):
                return None
        scope.destinations.pop(result.name, None)
        self.new_state("in_place")
        return binding

    def operand(self, value: ir.Value) -> Union[Array, Literal, View]:
        """``value`` as something a map can read (never pending)."""
        binding = self.resolve(self.binding(value))
        self.bind(value, binding)
        return binding

    def scalar_operand(self, value: ir.Value) -> Union[Array, Literal]:
        """A 0-d operand as ``indexed_map`` reads it: a literal, or else an array."""
        binding = self.operand(value)
        return binding if isinstance(binding, Literal) else self.array(value)

    def array(self, value: ir.Value) -> Array:
        """``value`` as an array of its own, materialising a literal or view on demand
        (and remembering it)."""
        binding = self.operand(value)
        if isinstance(binding, Array):
            return binding
        target = self.result_array(value, "mat")
        self.copy_into(binding, target)
        self.bind(value, target)
        return target

    def copy_into(self, source: Union[Array, Literal, View], target: Array,
                  offsets: Sequence[int] | None = None) -> None:
        """Write ``source`` into ``target`` (at ``offsets``, else all of it) with one map
        over the source's shape."""
        t = source.type
        if t.size == 0:
            return
        element = dtypes.of(t)
        params = map_params(t.rank)
        inputs = {}
        if isinstance(source, Literal):
            code = f"__out = {literal(source.value, element, storage=True)};"
        else:
            data = source.source.name if isinstance(source, View) else source.name
            subset = ", ".join(index_expressions(source, t.rank))
            inputs["__in"] = dace.Memlet(f"{data}[{subset}]")
            code = "__out = __in;"
        if offsets is None:
            out_subset = ", ".join(params) if t.rank else "0"
        else:
            out_subset = ", ".join(f"{o} + {p}" if o else p for o, p in zip(offsets, params))
        self.mapped_tasklet("copy", t, inputs, code,
                            {"__out": dace.Memlet(f"{target.name}[{out_subset}]")})

    def absorb(self, values: Sequence[ir.Value], op: ir.Op, operands: Sequence[ir.Value]
               ) -> None:
        """Let ``op`` compute each of ``values`` that is pending and read by ``op`` alone in
        its own map (``element_reads``), so that its cluster never writes it, as XLA fuses
        the update of a ``.at[].set`` into it. Not when that would read the array of one of
        ``operands`` (``op`` may update it in place) or one a loop updates in place."""
        if not self.recomputed_ops:
            return
        held = {binding.name for v in operands  # those reusable_array may update
                if isinstance(binding := self.scope.env.get(v.name), Array)
                and v.name in self.scope.producers and self.sdfg.arrays[binding.name].transient}
        for value in values:
            binding = self.binding(value)
            if not (isinstance(binding, Pending) and unresolved(binding)
                    and not binding.cluster.closed
                    and value.name not in self.scope.destinations
                    and [id(user) for user in self.scope.uses.get(value.name, ())] == [id(op)]
                    and sum(v.name == value.name for v in op.operands) == 1):
                continue
            reads = recomputed_reads(binding, 4 * self.recomputed_ops)
            if reads is None:
                continue
            # marked first: writing what it reads may close its cluster (if refused after
            # that, resolving the value recomputes it)
            binding.cluster.absorbed.add(binding.key)
            reads = [self.resolve(read) if isinstance(read, (Pending, Pieces)) else read
                     for read in reads]
            if any(_holds(read, name) for read in reads
                   for name in (*held, *self.written_in_place)):
                binding.cluster.absorbed.discard(binding.key)

    def element_reads(self, values: Sequence[ir.Value], rank: int, prefix: str = "__in",
                      lines: list[str] | None = None
                      ) -> tuple[dict[str, dace.Memlet], list[str]]:
        """Memlets (connectors ``prefix0, prefix1, ...``) and C++ expressions in compute
        types that read each of ``values`` at the point ``__i0..`` of a map over a shape of
        ``rank`` dimensions; splat literals become literals. Values ``absorb`` gave to this
        op are computed by statements appended to ``lines``."""
        inputs, expressions = {}, []
        for k, value in enumerate(values):
            binding = self.binding(value)
            if (lines is not None and isinstance(binding, Pending) and unresolved(binding)
                    and binding.key in binding.cluster.absorbed):
                from .fusion import Recompute

                in_edges: list = []
                recompute = Recompute(self, None, f"{prefix}{k}_", {}, in_edges)
                expressions.append(recompute.value(binding, map_params(rank)))
                lines.extend(recompute.lines)
                inputs.update({conn: memlet for _, conn, memlet, _ in in_edges})
                continue
            binding = self.operand(value)
            element = dtypes.of(value.type)
            if isinstance(binding, Literal):
                expressions.append(f"({literal(binding.value, element)})")
                continue
            data = binding.source.name if isinstance(binding, View) else binding.name
            subset = ", ".join(index_expressions(binding, rank))
            inputs[f"{prefix}{k}"] = dace.Memlet(f"{data}[{subset}]")
            expressions.append(element.load(f"{prefix}{k}"))
        return inputs, expressions

    def pointer_reads(self, values: Sequence[ir.Value], indices: Sequence[str],
                      op: ir.Op) -> tuple[dict[str, Array], list[str], list[str]]:
        """Arrays to read whole (by connector: ``__in<k>`` for operand ``k``, ``__in<k>_<j>``
        for what its computation reads), statements, and C++ expressions in compute types
        that read each of ``values`` at ``indices``, which may be loop variables of the
        tasklet's own code. A value that ``absorb`` lets ``op`` compute is computed by the
        statements from what it reads, so its cluster never writes it (an elementwise
        expression that only a reduction reads)."""
        from .fusion import Recompute

        self.absorb(values, op, ())
        arrays: dict[str, Array] = {}
        lines, expressions = [], []
        for k, value in enumerate(values):
            binding = self.binding(value)
            if (isinstance(binding, Pending) and unresolved(binding)
                    and binding.key in binding.cluster.absorbed):
                recompute = Recompute(self, None, f"__in{k}_", {}, [], arrays)
                expressions.append(recompute.value(binding, list(indices)))
                lines.extend(recompute.lines)
                continue
            array = arrays[f"__in{k}"] = self.array(value)
            flat = flat_index(array.type.shape, indices)
            expressions.append(dtypes.of(value.type).load(f"__in{k}[{flat}]"))
        return arrays, lines, expressions

    def indexed_map(self, label: str, target: Union[Array, Sequence[Array]],
                    arrays: dict[str, Array], scalars: dict[str, Union[Array, Literal]],
                    code: str, work_per_element: int = 1) -> None:
        """One map over ``target``'s shape whose tasklet reads whole ``arrays`` (C++
        pointers, to index with ``flat_index``) and 0-d ``scalars``; the code assigns
        ``__out`` (or ``__out0, __out1, ...`` for a sequence of targets of one shape).
        For ops whose reads depend on the position or on run-time values; loops in the
        code make ``work_per_element`` larger than 1 (see ``schedule_for``)."""
        targets = [target] if isinstance(target, Array) else list(target)
        t = targets[0].type
        if t.size == 0:
            return
        inputs, prelude = self._whole_array_inputs(arrays, scalars)
        out_subset = ", ".join(map_params(t.rank)) if t.rank else "0"
        names = ["__out"] if isinstance(target, Array) else [f"__out{k}" for k in
                                                              range(len(targets))]
        self.mapped_tasklet(label, t, inputs, "\n".join(prelude + [code]),
                            {name: dace.Memlet(f"{array.name}[{out_subset}]")
                             for name, array in zip(names, targets)}, work_per_element)

    def indexed_map_into(self, label: str, space: ir.TensorType,
                         target: Union[Array, Sequence[Array]], arrays: dict[str, Array],
                         scalars: dict[str, Union[Array, Literal]], code: str,
                         work_per_element: int = 1) -> None:
        """One map over ``space`` whose tasklet writes elements of ``target`` it chooses
        through the pointer ``__dst`` (or ``__dst0, __dst1, ...`` for a sequence of
        targets): an in-place update of part of an array, or a block of results."""
        if space.size == 0:
            return
        targets = [target] if isinstance(target, Array) else list(target)
        names = ["__dst"] if isinstance(target, Array) else [f"__dst{k}" for k in
                                                              range(len(targets))]
        inputs, prelude = self._whole_array_inputs(arrays, scalars)
        outputs = {}
        for name, array in zip(names, targets):
            full = ", ".join(f"0:{n}" for n in dace_shape(array.type))
            outputs[name] = dace.Memlet(f"{array.name}[{full}]", dynamic=True)
        self.mapped_tasklet(label, space, inputs, "\n".join(prelude + [code]), outputs,
                            work_per_element)

    def pointer_map(self, label: str, shape: Sequence[int], inputs: dict[str, Array],
                    outputs: dict[str, Array], code: str, work_per_element: int = 1,
                    environments: Sequence[str] = ()) -> None:
        """One tasklet in a map over ``shape`` (alone for no dimensions) that sees every
        array whole through a pointer connector, one-element arrays included, and may
        write any element of its ``outputs`` (scatters, sorts, calls of native libraries,
        which name the DaCe ``environments`` that link them)."""

        def memlet(array: Array, dynamic: bool = False) -> dace.Memlet:
            full = ", ".join(f"0:{n}" for n in dace_shape(array.type))
            return dace.Memlet(f"{array.name}[{full}]", dynamic=dynamic)

        in_memlets = {conn: memlet(array) for conn, array in inputs.items()}
        out_memlets = {conn: memlet(array, dynamic=True) for conn, array in outputs.items()}
        tasklet = self._tasklet_over(label, shape, in_memlets, code, out_memlets,
                                     schedule_for(shape, work_per_element))
        for connectors, arrays in ((tasklet.in_connectors, inputs),
                                   (tasklet.out_connectors, outputs)):
            for conn, array in arrays.items():
                connectors[conn] = dace.pointer(dtypes.of(array.type).storage)
        tasklet.environments = set(environments)

    def _whole_array_inputs(self, arrays: dict[str, Array],
                            scalars: dict[str, Union[Array, Literal]]) -> tuple[dict, list]:
        """Memlets and C++ prelude giving a tasklet ``arrays`` as pointers and 0-d
        ``scalars`` as values."""
        inputs, prelude = {}, []
        for conn, array in arrays.items():
            full = ", ".join(f"0:{n}" for n in dace_shape(array.type))
            if array.type.size == 1:  # DaCe passes a one-element subset by value
                inputs[f"{conn}_value"] = dace.Memlet(f"{array.name}[{full}]")
                prelude.append(f"const auto* {conn} = &{conn}_value;")
                continue
            inputs[conn] = dace.Memlet(f"{array.name}[{full}]")
        for conn, scalar in scalars.items():
            if isinstance(scalar, Literal):
                element = dtypes.of(scalar.type)
                prelude.append(f"const auto {conn} = {literal(scalar.value, element, True)};")
            else:
                inputs[conn] = dace.Memlet(f"{scalar.name}[0]")
        return inputs, prelude

    def mapped_tasklet(self, label: str, t: ir.TensorType, inputs: dict, code: str,
                       outputs: dict, work_per_element: int = 1,
                       schedule: dace.ScheduleType | None = None) -> None:
        """One tasklet, in a map over ``t``'s shape (or alone for a 0-d shape), scheduled
        by ``schedule_for`` unless ``schedule`` says otherwise."""
        self._tasklet_over(label, t.shape, inputs, code, outputs,
                           schedule or schedule_for(t.shape, work_per_element))

    def _tasklet_over(self, label: str, shape: Sequence[int], inputs: dict, code: str,
                      outputs: dict, schedule: dace.ScheduleType) -> dace.nodes.Tasklet:
        """A C++ tasklet with the memlets ``inputs`` and ``outputs``, in a map over
        ``shape`` (alone for no dimensions); returns the tasklet."""
        input_nodes = {m.data: self.read(m.data) for m in inputs.values()}
        output_nodes = {m.data: self.write(m.data) for m in outputs.values()}
        if not shape:
            tasklet = self.state.add_tasklet(self.fresh(label), dict.fromkeys(inputs),
                                             dict.fromkeys(outputs), code,
                                             language=dace.Language.CPP,
                                             debuginfo=self.debuginfo())
            for conn, memlet in inputs.items():
                self.state.add_edge(input_nodes[memlet.data], None, tasklet, conn, memlet)
            for conn, memlet in outputs.items():
                self.state.add_edge(tasklet, conn, output_nodes[memlet.data], None, memlet)
            return tasklet
        ranges = {p: f"0:{n}" for p, n in zip(map_params(len(shape)), shape)}
        tasklet, entry, exit_ = self.state.add_mapped_tasklet(
            self.fresh(label), ranges, inputs, code, outputs, language=dace.Language.CPP,
            external_edges=True, input_nodes=input_nodes, output_nodes=output_nodes,
            schedule=schedule, debuginfo=self.debuginfo(), propagate=False)
        self.propagate_map(entry, exit_)
        return tasklet

    def propagate_map(self, entry: dace.nodes.MapEntry, exit_: dace.nodes.MapExit) -> None:
        """The outer memlets of a new top-level map. DaCe's own propagation looks up the
        map's scope in the whole state, which made translation quadratic in the number of
        ops; a map made here is never nested, so only the SDFG's symbols are defined."""
        from dace.sdfg.propagation import propagate_subset

        state, the_map = self.state, entry.map
        defined = [dace.symbolic.pystr_to_symbolic(name)
                   for name in (*self.sdfg.symbols, *self.sdfg.constants)]
        paths = ([(e, [i for i in state.out_edges(entry) if i.src_conn == "OUT_" + e.dst_conn[3:]],
                   False) for e in state.in_edges(entry) if e.dst_conn] +
                 [(e, [i for i in state.in_edges(exit_) if i.dst_conn == "IN_" + e.src_conn[4:]],
                   True) for e in state.out_edges(exit_) if e.src_conn])
        for outer, inner, use_dst in paths:
            if outer.data.is_empty():
                continue
            memlets = [e.data for e in inner]
            outer.data = propagate_subset(memlets, self.sdfg.arrays[outer.data.data],
                                          the_map.params, the_map.range,
                                          defined_variables=defined, use_dst=use_dst)

    # ---------------------------------------------------------------- elementwise
    def add_elementwise(self, op: ir.Op) -> None:
        t = op.results[0].type
        shape = tuple(t.shape)
        for operand in op.operands:
            binding = self.binding(operand)
            if isinstance(binding, PendingView) and not self._recomputable(binding):
                self.operand(operand)
        cluster = self.open_clusters.get(shape)
        if cluster is None:
            cluster = self.open_clusters[shape] = ElementwiseCluster(shape)
        for operand in op.operands:
            binding = self.binding(operand)
            if isinstance(binding, Pending) and binding.cluster is not cluster:
                self.operand(operand)  # read from another shape's cluster: emit that one
        cluster.members.append((op, self.scope))
        for result in op.results:
            self.bind(result, Pending(cluster, result, self.scope))
        if not self.fuse:
            self.close_cluster(cluster)

    def _recomputable(self, binding: PendingView) -> bool:
        """Whether an elementwise consumer may recompute ``binding``: it takes few ops, and
        reads no array that a loop body's maps write in place (a map could then read an
        element it already overwrote). Concatenations it reads are written first."""
        reads = recomputed_reads(binding, self.recomputed_ops)
        if reads is None:
            return False
        for read in reads:
            if isinstance(read, (Pending, Pieces)):
                read = self.resolve(read)
            if any(_holds(read, target) for target in self.written_in_place):
                return False
        return True

    def close_all_clusters(self) -> None:
        for cluster in list(self.open_clusters.values()):
            self.close_cluster(cluster)

    def close_cluster(self, cluster: ElementwiseCluster) -> None:
        from .fusion import emit_cluster

        if cluster.closed:
            return
        cluster.closed = True
        if self.open_clusters.get(cluster.shape) is cluster:
            del self.open_clusters[cluster.shape]
        emit_cluster(self, cluster)

    # ---------------------------------------------------------------- walking the IR
    def translate_block(self, block: ir.Block, scope: Scope) -> list[Binding]:
        """Translate the ops of ``block`` in ``scope``; returns the bindings of the values
        its terminator returns (terminator ``func.return`` / ``stablehlo.return``), None
        for those the scope does not need (see ``Scope.of``)."""
        outer, self.scope = self.scope, scope
        self.written_in_place |= scope.targets
        try:
            for op in scope.ops[:-1]:
                self.translate_op(op)
            terminator = block.terminator
            self.current_op = terminator
            returned = [scope.env.get(v.name) for v in terminator.operands]
        finally:
            self.scope = outer
        return returned

    def translate_op(self, op: ir.Op) -> None:
        self.current_op = op
        rule = registry.elementwise_rule(op)
        if rule is not None:
            t = op.results[0].type
            if not isinstance(t, ir.TensorType) or not t.is_static:
                raise self.unsupported(f"result type {t}")
            for result in op.results:
                dtypes.of(result.type, op.name, op.location)
            for operand in op.operands:
                dtypes.of(operand.type, op.name, op.location)
                if operand.type.rank and operand.type.shape != t.shape:
                    raise self.unsupported(f"operand of type {operand.type} for a result of "
                                           f"type {t} (shapes must agree)")
            self.add_elementwise(op)
            return
        registry.translator(op, self.target)(self, op)

    def callee(self, op: ir.Op) -> ir.Function:
        """The function a ``func.call`` (or ``stablehlo.call``) calls."""
        callee = op.attr("callee")
        name = callee.name if isinstance(callee, ir.SymbolRef) else str(callee)
        function = self.module.functions.get(name)
        if function is None:
            raise self.unsupported(f"call of unknown function @{name}")
        return function

    def call_function(self, function: ir.Function, arguments: Sequence[Binding],
                      destinations: Sequence[str | None] = ()) -> list[Binding]:
        """Inline ``function`` with ``arguments`` bound to its parameters; a result with a
        ``destinations`` entry is written into that array by the op that computes it (if
        the callee computes it). Pending arguments are emitted first: a cluster's register
        scalars do not cross scopes."""
        arguments = [binding if isinstance(binding, PendingView) else self.resolve(binding)
                     for binding in arguments]
        env = ChainMap({a.name: b for a, b in zip(function.arguments, arguments)})
        block = function.body.entry
        produced = {r.name for op in block.ops for r in op.results}
        wanted = {}
        for value, destination in zip(block.terminator.operands, destinations):
            if destination is not None and value.name in produced:
                wanted.setdefault(value.name, destination)
        scope = Scope.of(env, block, wanted)
        saved_op = self.current_op
        self.call_locations.append(self._location())
        try:
            results = self.translate_block(block, scope)
        finally:
            self.call_locations.pop()
        self.current_op = saved_op
        return results

    def build(self) -> dace.SDFG:
        main = self.entry
        arguments: list[Binding] = []
        # tokens (ordered effects) are neither passed nor returned: they hold no data
        for i, value in enumerate(main.arguments):
            if isinstance(value.type, ir.TokenType):
                arguments.append(TOKEN)
                continue
            if not isinstance(value.type, ir.TensorType):
                raise UnsupportedError("func.func", f"argument {i} of type {value.type}",
                                       main.location)
            arguments.append(self.add_array(f"arg{i}", value.type, transient=False))
            self.argument_names.append(f"arg{i}")
        results: list[Array | None] = []
        for i, t in enumerate(main.result_types):
            if isinstance(t, ir.TokenType):
                results.append(None)
                continue
            if not isinstance(t, ir.TensorType):
                raise UnsupportedError("func.func", f"result {i} of type {t}", main.location)
            results.append(self.add_array(f"__return{i}", t, transient=False))
            self.result_names.append(f"__return{i}")

        # Results computed by an op of main's body are written straight into their arrays.
        block = main.body.entry
        produced = {r.name for op in block.ops for r in op.results}
        destinations: dict[str, str] = {}
        for value, target in zip(block.terminator.operands, results):
            if target is not None and value.name in produced and value.name not in destinations:
                destinations[value.name] = target.name
        updates_in_results(block, destinations)
        env = ChainMap({a.name: b for a, b in zip(main.arguments, arguments)})
        scope = Scope.of(env, block, destinations)
        returned = self.translate_block(block, scope)
        self.scope = scope
        self.current_op = block.terminator
        self.close_all_clusters()
        for binding, target in zip(returned, results):
            if target is None:
                continue
            binding = self.resolve(binding)
            if isinstance(binding, Array) and binding.name == target.name:
                continue
            self.copy_into(binding, target)
        self.scope = None
        self._fp_mode_tasklet(self.new_state("epilogue"), "h2d::leave_fp_mode();")
        return self.sdfg

