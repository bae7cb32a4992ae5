"""The builder: walks the IR of one module, dispatches each op to its translator through
the registry, binds the results the translator returns (after checking them against the
op's result types), and keeps what is not emitted yet. It composes the jobs of the other
core modules:

* ``bindings.py``: what values are bound to (arrays, literals, views, pending values);
* ``scopes.py``: the scopes of the walk, uses, destinations, updates in place;
* ``emitter.py``: the SDFG under construction and the one API that adds maps to it;
* ``fusion.py``: elementwise clusters, emitted as one map each.

Elementwise ops of one shape gather into an open ``ElementwiseCluster`` and are emitted as
ONE map of one tasklet that computes every op into a C++ local; only values used
outside the cluster are written to arrays. A cluster closes when anything else needs one of
its values as an array, so the dataflow stays acyclic.

What translators use: ``binding`` (what a value is bound to now), ``readable`` (something
a map reads: never pending), ``array`` (an array of its own), ``value`` (a 0-d operand by
value), ``allocate_result`` (the array a result goes into: its function result if it is
one), ``claim_in_place`` (an operand's array to update), and ``emit`` for the SDFG.
"""

from __future__ import annotations

import contextlib
from collections import ChainMap
from typing import Callable, Iterator, Sequence, Union

import dace
import numpy as np

from .. import ir, symbolic
from ..errors import CompilationError, UnsupportedError
from ..machine import Machine, current_machine
from ..plan.annotations import (
    Destinations,
    FusedOperands,
    Fusion,
    FusionOptions,
    InPlace,
    OwnMap,
    annotation,
    module_annotation,
)
from ..prelude import Helpers
from . import dtypes, fusion, registry
from .bindings import (
    TOKEN,
    Array,
    Axis,
    Binding,
    ElementwiseCluster,
    Gathered,
    Literal,
    Pending,
    PendingView,
    Pieces,
    Reshaped,
    RowReduction,
    Tuple,
    View,
    dace_shape,
    flat_index,
    map_params,
    recomputed_reads,
    view_of,
)
from .emitter import Element, Emitter, Whole
from .known import known_value
from .literals import literal
from .scopes import Scope, callee, updates_in_place

#: C++ subscripts of a value -> a C++ expression of its element there (storage type)
Reader = Callable[[Sequence[str]], str]


def binding_reader(binding: Array | Literal | View, conn: str, arrays: dict[str, Array]
                   ) -> Reader:
    """``Builder.reader`` of a binding already an array, a literal or a view."""
    if binding.is_literal:
        text = literal(binding.value, dtypes.of(binding.type), storage=True)
        return lambda indices: text
    source = binding.source if isinstance(binding, View) else binding
    if binding.type.size:
        arrays[conn] = source
    if not isinstance(binding, View):
        return lambda indices: f"{conn}[{flat_index(binding.type.shape, indices)}]"

    def read_view(indices: Sequence[str]) -> str:
        subscripts = [str(axis.offset) if axis.dim is None else indices[axis.dim]
                      if (axis.offset, axis.stride) == (0, 1) else
                      f"{axis.offset} + {axis.stride} * (int64_t)({indices[axis.dim]})"
                      for axis in binding.axes]
        return f"{conn}[{flat_index(source.type.shape, subscripts)}]"

    return read_view


class Builder:
    """Translates one IR module into one SDFG."""

    def __init__(self, module: ir.Module, name: str, entry: str | None = None,
                 target: str = registry.DEFAULT_TARGET,
                 signature: symbolic.Signature | None = None, machine: Machine | None = None,
                 expansion: bool = False):
        self.module = module
        #: the SDFG is a library node's expansion (``translate/expansions.py``): nested in
        #: a program, which sets the floating-point mode and initialises the helpers; its
        #: ops are code, not library nodes again
        self.expansion = expansion
        #: the machine the code is tuned for: every threshold a translator uses
        self.machine = machine or current_machine()
        #: how the symbols in the module's types are read from the arguments, and the
        #: checks the runtime makes on them (``symbolic.refine``); None: static shapes
        self.signature = signature
        #: how much elementwise readers recompute (the plan's ``fuse_elementwise``; none
        #: without it)
        self.fusion = module_annotation(module, FusionOptions) or FusionOptions(0, False)
        #: the key of the registry's translators (``registry.register(target=...)``)
        self.target = target
        try:
            self.entry = module.functions[entry] if entry else module.main
        except LookupError:
            raise UnsupportedError("builtin.module", f"no entry function {entry or 'main'}",
                                   supported=sorted(module.functions)) from None
        self.emit = Emitter(name, self.machine, library_nodes=not expansion)
        if not expansion:
            self.emit.sdfg.append_init_code("h2d::init_program();")
            # the first tasklet brings the helpers' headers (prelude.Helpers)
            self._fp_mode_tasklet("h2d::enter_fp_mode();").environments = {
                Helpers.full_class_path()}
            self.emit.new_state("body")
        self.scope: Scope | None = None
        self.open_clusters: dict[tuple[int, ...], ElementwiseCluster] = {}
        #: the scopes the one being translated is nested in, innermost first
        self.enclosing: list[Scope] = []
        self.argument_names: list[str] = []
        self.result_names: list[str] = []

    def _fp_mode_tasklet(self, code: str) -> dace.nodes.Tasklet:
        """Switch the caller's floating-point mode, as XLA does around its CPU code."""
        return self.emit.state.add_tasklet("fp_mode", {}, {}, code, language=dace.Language.CPP,
                                           side_effects=True)

    @property
    def constants(self) -> dict[str, np.ndarray]:
        """Hidden constant arguments: data name -> array (in storage dtype)."""
        return self.emit.constants

    def unsupported(self, reason: str, supported: Sequence[str] | None = None):
        return self.emit.unsupported(reason, supported)

    def known(self, value: ir.Value) -> np.ndarray | None:
        """``value``'s elements, if the ops of its scope compute them from constants alone
        (``known.known_value``): its binding's literal or hidden constant, or its
        producers' records evaluated."""
        def bound(v: ir.Value) -> np.ndarray | None:
            binding = self.scope.env.get(v.name)
            if binding is not None and binding.is_literal:
                return np.full(v.type.shape, binding.value)
            if binding is not None and binding.data in self.constants \
                    and binding.is_array(binding.data):
                return self.constants[binding.data]
            return None

        return known_value(self.scope.producers, value, bound)

    # ------------------------------------------------------------------ states
    def close_all_clusters(self) -> None:
        for cluster in list(self.open_clusters.values()):
            self.close_cluster(cluster)

    def new_state(self, label: str = "s") -> dace.SDFGState:
        """Emit the open clusters, then continue in a fresh state (for ops whose writes
        must be ordered after everything before)."""
        self.close_all_clusters()
        return self.emit.new_state(label)

    def append_block(self, block: dace.sdfg.state.ControlFlowBlock,
                     assignments: dict[str, str] | None = None) -> None:
        """Emit the open clusters, then add ``block`` (a loop, a conditional) after the
        current state and continue after it (``Emitter.append_block``)."""
        self.close_all_clusters()
        self.emit.append_block(block, assignments)

    @contextlib.contextmanager
    def inside(self, region: dace.sdfg.state.ControlFlowRegion) -> Iterator[None]:
        """Emit into ``region`` (a loop body, a branch) within the ``with`` block; every
        elementwise cluster opened there is emitted there."""
        self.close_all_clusters()
        with self.emit.inside(region):
            yield
            self.close_all_clusters()

    @contextlib.contextmanager
    def entered(self, scope: Scope) -> Iterator[Scope]:
        """Translate in ``scope`` within the ``with`` block."""
        outer, self.scope = self.scope, scope
        if outer is not None:
            self.enclosing.insert(0, outer)
        try:
            yield scope
        finally:
            self.scope = outer
            if outer is not None:
                self.enclosing.pop(0)

    # ------------------------------------------------------------------ values
    def binding(self, value: ir.Value) -> Binding:
        """What ``value`` is bound to now (it may be pending)."""
        return self.scope.env[value.name]

    def destination(self, value: ir.Value) -> str | None:
        """The array ``value`` must end in (a function result, a loop's carried value),
        if it has one and the claim is not taken yet."""
        return self.scope.destinations.get(value.name)

    def nested_scope(self, block: ir.Block, bindings: dict[str, Binding],
                     destinations: dict[str, str] | None = None,
                     returned: Sequence[int] | None = None) -> Scope:
        """A scope for a region of the op being translated (a loop's body, a branch): its
        block arguments bound to ``bindings`` (by name), the rest of the enclosing scopes'
        bindings visible (``Scope.of``)."""
        return Scope.of(self.scope.env.new_child(bindings), block, destinations, returned)

    def claim(self, value: ir.Value) -> str | None:
        """Take the claim on ``value``'s destination: the op being translated makes it
        (``allocate_result`` takes it for the array it returns)."""
        return self.scope.claim(value)

    def written_by_results(self, array: str) -> bool:
        """Whether a result of the scope being translated is to be written into
        ``array``."""
        return array in self.scope.destinations.values()

    def readable(self, value: ir.Value) -> Union[Array, Literal, View]:
        """``value`` as something a map reads (never pending): its cluster is emitted, a
        concatenation written, if need be."""
        binding = self.resolve(self.binding(value))
        self.scope.env[value.name] = binding
        return binding

    def value(self, value: ir.Value) -> Union[Array, Literal]:
        """A 0-d operand as ``emitter.Value`` reads it: a literal, or else an array."""
        binding = self.readable(value)
        return binding if binding.is_literal else self.array(value)

    def array(self, value: ir.Value) -> Array:
        """``value`` as an array of its own, a literal or view copied into one on demand
        (and the value bound to it from then on)."""
        binding = self.readable(value)
        if isinstance(binding, Array):
            return binding
        target = self.allocate_result(value, "mat")
        self.emit.copy(binding, target)
        self.scope.env[value.name] = target
        return target

    def reader(self, value: ir.Value, conn: str, arrays: dict[str, Array]) -> Reader:
        """``value`` read at subscripts that a tasklet computes: an array through the pointer
        ``conn`` (added to ``arrays``), a view in place through its source's pointer (a
        slice or reverse read in a loop is never copied per iteration), a splat literal as
        its literal."""
        binding = self.readable(value)
        if not (binding.is_literal or isinstance(binding, View)):
            binding = self.array(value)
        return binding_reader(binding, conn, arrays)

    def allocate_result(self, value: ir.Value, hint: str = "", scope: Scope | None = None,
                        whole: bool = False) -> Array:
        """The array an op writes ``value`` into: its destination (a function result, a
        loop-carried array; the claim is taken: no other op writes it) if it has one and
        nothing read later still needs what that array holds, else a new transient. A
        destination of another shape (``same_memory``) only where the op writes ``whole``
        arrays through pointers, which see the same row-major memory."""
        assert isinstance(value.type, ir.TensorType)
        destination = (scope or self.scope).claim(value) if (scope or self.scope) else None
        if destination is not None and self.overwritable(destination) and (
                whole or self.shaped_as(destination, value)):
            return Array(destination, value.type)
        return self.emit.add_array(hint or value.name.lstrip("%"), value.type)

    def shaped_as(self, array: str, value: ir.Value) -> bool:
        """Whether ``array`` has the shape of ``value``."""
        return list(map(str, self.emit.sdfg.arrays[array].shape)) == \
            list(map(str, dace_shape(value.type)))

    def resolve(self, binding: Binding, into: Array | None = None) -> Binding:
        """A pending elementwise result -> its array, emitting its cluster if needed; a
        concatenation or a gather not emitted yet -> its array, written if needed;
        anything else as it is. ``into``: the array the caller copies the value into
        (a function's result), where a value in no array yet is written instead, unless
        computing it reads that array."""
        def new_array(hint: str) -> Array:
            if into is not None and into.type == binding.type and not binding.holds(into.name):
                return into
            return self.emit.add_array(hint, binding.type)

        if binding.is_pending:
            source = binding.pending
            if not source.cluster.closed:
                source.cluster.required.add(source.key)
                self.close_cluster(source.cluster)
            array = source.cluster.resolved.get(source.key)
            if array is None:  # its cluster did not write it: recompute what is read
                return fusion.emit_recomputed(self.emit, binding, new_array("fused"),
                                              self.resolve)
            if isinstance(binding, Pending):
                return array
            return View(array, binding.axes or (Axis(None, 0, 0),), binding.type)
        if isinstance(binding, Pieces):
            if not binding.materialised:
                target = new_array("concat")
                self.write_pieces(binding, target)
                binding.materialised.append(target)
            return binding.materialised[0]
        if isinstance(binding, RowReduction):
            if not binding.materialised:
                binding.materialised.extend(binding.materialise())
            array = binding.materialised[binding.index]
            return array if binding.axes is None else view_of(array, binding.axes, binding.type)
        if isinstance(binding, (Gathered, Reshaped)):
            if not binding.materialised:
                binding.materialised.append(fusion.emit_recomputed(
                    self.emit, binding,
                    new_array("gather" if isinstance(binding, Gathered) else "reshape"),
                    self.resolve))
            return binding.materialised[0]
        return binding

    def write_pieces(self, pieces: Pieces, target: Array) -> None:
        """Copy each part of a concatenation into its window of ``target``, every part's
        write in ONE access node, so that readers of the result depend on all."""
        written = []
        for part, (start, _) in zip(pieces.parts, pieces.extents()):
            offsets = [0] * pieces.type.rank
            offsets[pieces.dimension] = start
            self.emit.copy(part, target, offsets)
            if part.type.size:
                written.append(self.emit.read(target.name))  # the node the copy wrote
        self.emit.join_writes(written)

    def claim_in_place(self, value: ir.Value, op: ir.Op, result: ir.Value) -> Array | None:
        """The array holding ``value`` if ``op`` may write ``result`` into it (an update in
        place, as XLA reuses a dead operand's buffer), else None. It may when the array is a
        transient made in this scope or the array ``result`` must go into anyway (a value
        carried through a loop, ``control.py``; a chain of updates that ends in a function
        result, ``updates_in_results``), ``op`` is the last user of ``value``, and nothing
        still to be read shares the array (``overwritable``). When it may, the result's
        claim on a destination is taken and a new state begins (open clusters are emitted
        first), so that every earlier read of the array comes before the update. When the
        array is the destination but something still reads it, the claim is dropped: the
        result goes into a new array, copied into the destination later."""
        scope = self.scope
        binding = scope.env.get(value.name)
        destination = scope.destinations.get(result.name)
        if destination is not None and not binding.is_array(destination):
            # the operand is copied into the destination first: not while something
            # still reads it, and after the open clusters (which may read it) are emitted
            if self.overwritable(destination, op):
                self.new_state("update")
            else:
                scope.claim(result)
            return None
        if not isinstance(binding, Array) or binding.name in self.constants:
            return None
        planned = annotation(op, InPlace)
        if destination is None and not (planned is not None
                                         and op.operands.index(value) in planned.operands
                                         and self.emit.sdfg.arrays[binding.name].transient):
            return None
        if not self.overwritable(binding.name, op, value):
            if destination is not None:
                scope.claim(result)
            return None
        scope.claim(result)
        self.new_state("in_place")
        return binding

    def overwritable(self, array: str, op: ir.Op | None = None,
                     value: ir.Value | None = None) -> bool:
        """Whether the op being translated may overwrite ``array``: no value that an op
        after it uses reads it (a view, a pending value recomputed where it is read), in
        this scope or one it is nested in (the caller of an inlined call, the scope around
        a loop), ``value`` (an operand that the op replaces) included; with ``op``, no
        other operand of ``op`` reads it either (but one that ``absorb`` gave ``op``,
        which reads it only where ``op`` writes)."""
        if op is not None and any(
                (binding.holds(array) and not self.absorbed(binding)
                 or self.absorbed(binding) and self._reads_written(binding, array))
                for v in op.operands
                if (value is None or v.name != value.name)
                and (binding := self.scope.env[v.name]) is not None):
            return False
        for scope in (self.scope, *self.enclosing):
            for name, other in scope.env.maps[0].items():
                if other.holds(array) and scope.used_later(name):
                    return False
        return True

    # ------------------------------------------------------------------ pending values
    def absorb(self, values: Sequence[ir.Value], op: ir.Op, operands: Sequence[ir.Value],
               window: Sequence[Axis] | None = None) -> None:
        """Let ``op`` compute each of ``values`` that is pending and read by ``op`` alone in
        its own map (``element_reads``), so that its cluster never writes it, as XLA fuses
        the update of a ``.at[].set`` into it. Not when that would read an array that ``op``
        may write (one of ``operands``' updated in place, or a result's destination),
        unless ``op`` writes the point of its map at ``window`` of that array (as a view's
        axes) and the value reads it only there: each element is read before it is
        written (``x.at[1:].set(x[1:] * 2)``)."""
        fused = annotation(op, FusedOperands)
        if not self.fusion.recompute or fused is None:
            return
        scope = self.scope
        # the arrays op may write: its results' destinations, and those of ``operands``
        # that claim_in_place may update
        held = {scope.destinations[r.name] for r in op.results if r.name in scope.destinations}
        held |= {binding.name for v in operands
                 if isinstance(binding := scope.env.get(v.name), Array)
                 and v.name in scope.producers
                 and self.emit.sdfg.arrays[binding.name].transient}
        for value in values:
            binding = self.binding(value)
            if not (value in op.operands and op.operands.index(value) in fused.operands
                    and isinstance(binding, Pending) and binding.unresolved
                    and not binding.cluster.closed):
                continue
            reads = recomputed_reads(binding, 4 * self.fusion.recompute)
            if reads is None:
                continue
            # marked first: writing what it reads may close its cluster (if refused after
            # that, resolving the value recomputes it)
            binding.cluster.absorbed.add(binding.key)
            # a row reduction stays unwritten: the reading map may compute it a row at a
            # time (fusion.RowContext)
            reads = [read if isinstance(read, RowReduction) and not read.materialised
                     else self.resolve(read) for read in reads]
            here = window is not None and recomputed_reads(
                binding, 4 * self.fusion.recompute, pointwise=True) is not None
            if any(read.holds(name) and not (here and _reads_window(read, name, window))
                   for read in reads for name in held):
                binding.cluster.absorbed.discard(binding.key)

    def absorbed(self, binding: Binding) -> bool:
        """Whether ``binding`` is a pending value that ``absorb`` gave to its reader."""
        return (isinstance(binding, Pending) and binding.unresolved
                and binding.key in binding.cluster.absorbed)

    @staticmethod
    def _reads_written(binding: Pending, array: str) -> bool:
        """Whether an absorbed value now reads ``array`` through a pending value written
        into it since (``x.at[1:-1].set(x[2:] - x[:-2])`` of a computed ``x``): where,
        ``absorb`` could not check."""
        for read in recomputed_reads(binding, 1 << 20) or ():
            if read.is_pending:
                written = read.pending.cluster.resolved.get(read.pending.key)
                if written is not None and written.name == array:
                    return True
        return False

    def element_reads(self, values: Sequence[ir.Value], rank: int, prefix: str = "__in",
                      lines: list[str] | None = None) -> tuple[dict, list[str]]:
        """Inputs for ``Emitter.map`` (connectors ``prefix0, prefix1, ...``) and C++
        expressions in compute types that read each of ``values`` at the point ``__i0..``
        of a map over a shape of ``rank`` dimensions; splat literals become literals.
        Values ``absorb`` gave to this op are computed by statements appended to
        ``lines``."""
        inputs, expressions = {}, []
        for k, value in enumerate(values):
            binding = self.binding(value)
            if lines is not None and self.absorbed(binding):
                in_edges: list = []
                recompute = fusion.Recompute(self.emit, self.resolve, None, f"{prefix}{k}_",
                                             {}, in_edges)
                expressions.append(recompute.value(binding, map_params(rank)))
                lines.extend(recompute.lines)
                inputs.update({conn: memlet for _, conn, memlet in in_edges})
                continue
            binding = self.readable(value)
            element = dtypes.of(value.type)
            if binding.is_literal:
                expressions.append(f"({literal(binding.value, element)})")
                continue
            inputs[f"{prefix}{k}"] = Element(binding)
            expressions.append(element.load(f"{prefix}{k}"))
        return inputs, expressions

    def pointer_reads(self, values: Sequence[ir.Value], indices: Sequence[str],
                      op: ir.Op) -> tuple[dict[str, Whole], list[str], list[str]]:
        """Arrays to read whole (by connector: ``__in<k>`` for operand ``k``, ``__in<k>_<j>``
        for what its computation reads), statements, and C++ expressions in compute types
        that read each of ``values`` at ``indices``, which may be loop variables of the
        tasklet's own code. A value that ``absorb`` lets ``op`` compute is computed by the
        statements from what it reads, so its cluster never writes it (an elementwise
        expression that only a reduction reads)."""
        self.absorb(values, op, ())
        arrays: dict[str, Array] = {}
        lines, expressions = [], []
        for k, value in enumerate(values):
            binding = self.binding(value)
            if self.absorbed(binding):
                recompute = fusion.Recompute(self.emit, self.resolve, None, f"__in{k}_", {},
                                             [], arrays)
                expressions.append(recompute.value(binding, list(indices)))
                lines.extend(recompute.lines)
                continue
            array = arrays[f"__in{k}"] = self.array(value)
            flat = flat_index(array.type.shape, indices)
            expressions.append(dtypes.of(value.type).read(f"__in{k}", flat))
        return {conn: Whole(array) for conn, array in arrays.items()}, lines, expressions

    def emit_row_reductions(self, rows: list[RowReduction], targets: list[Array]) -> None:
        """Write ``rows`` (the results of one reduction over trailing dimensions) into
        ``targets``, each row's reductions in one map iteration
        (``fusion.emit_row_reductions``)."""
        fusion.emit_row_reductions(self.emit, self.resolve, rows, targets)

    def scalar_region(self, block: ir.Block, arguments: list[str], prefix: str
                      ) -> tuple[list[str], list[str]]:
        """C++ for a region of elementwise ops on 0-d values (``fusion.scalar_region``)."""
        return fusion.scalar_region(self.emit, self.module, block, arguments, prefix)

    # ------------------------------------------------------------------ elementwise
    def add_elementwise(self, op: ir.Op) -> list[Binding]:
        """Join ``op`` to the open cluster of its shape; its results are pending. An op of
        literal integers whose record knows how to compute them is a literal itself."""
        t = op.results[0].type
        if op.operands and all(self.binding(operand).is_literal for operand in op.operands):
            known = self.known(op.results[0])
            if known is not None and known.size and (known == known.flat[0]).all():
                # JAX passes a Python int to ``//`` and ``%`` through a call that converts
                # it: as a literal, the C++ compiler divides by a constant (a shift or a
                # multiplication, no branch for a zero divisor)
                return [Literal(known.flat[0], t)]
        shape = tuple(t.shape)
        alone = annotation(op, OwnMap) is not None
        if alone:  # a map of its own over its operands' arrays, the open one emitted first
            for operand in op.operands:
                self.readable(operand)
            if shape in self.open_clusters:
                self.close_cluster(self.open_clusters[shape])
        for operand in op.operands:
            binding = self.binding(operand)
            if isinstance(binding, PendingView):
                reads = self._recomputed(binding)
                if reads is None:
                    self.readable(operand)
                else:  # what the reader's map reads of it is written first
                    for read in reads:
                        if not isinstance(read, (RowReduction, Reshaped)):
                            self.resolve(read)
        cluster = self.open_clusters.get(shape)
        if cluster is None:
            cluster = self.open_clusters[shape] = ElementwiseCluster(shape)
        for operand in op.operands:
            binding = self.binding(operand)
            if isinstance(binding, Pending) and binding.cluster is not cluster:
                self.readable(operand)  # read from another shape's cluster: emit that one
        cluster.members.append((op, self.scope))
        results = [Pending(cluster, result, self.scope, op) for result in op.results]
        if alone or annotation(op, Fusion) is None:  # the plan fuses it with nothing
            for result, pending in zip(op.results, results):
                self.scope.env[result.name] = pending
            self.close_cluster(cluster)
            return [self.scope.env[result.name] for result in op.results]
        return results

    def _recomputed(self, binding: PendingView) -> list[Binding] | None:
        """What an elementwise reader reads to recompute ``binding``, or None where that
        takes more ops than the plan allows (``FusionOptions.recompute``). An update in
        place never overwrites what a recomputed value still reads (``overwritable``)."""
        return recomputed_reads(binding, self.fusion.recompute)

    def close_cluster(self, cluster: ElementwiseCluster) -> None:
        """Emit ``cluster``'s map (once) and forget it as the open cluster of its shape."""
        if cluster.closed:
            return
        cluster.closed = True
        if self.open_clusters.get(cluster.shape) is cluster:
            del self.open_clusters[cluster.shape]
        fusion.emit_cluster(self.emit, cluster, self.resolve)

    # ------------------------------------------------------------------ the IR walk
    def translate_block(self, block: ir.Block, scope: Scope) -> list[Binding]:
        """Translate the ops of ``block`` in ``scope``; returns the bindings of the values
        its terminator returns (terminator ``func.return`` / ``stablehlo.return``), None
        for those the scope does not need (see ``Scope.of``)."""
        with self.entered(scope):
            for position, op in enumerate(scope.ops[:-1]):
                scope.now = position
                self.translate_op(op)
            scope.now = len(scope.ops) - 1
            return [scope.env.get(v.name) for v in block.terminator.operands]

    def translate_op(self, op: ir.Op) -> None:
        """Translate ``op`` (its elementwise rule, or its translator on this target) and
        bind its results, checked against its result types."""
        self.emit.bound_state()
        with self.emit.at(op):
            rule = registry.elementwise_rule(op)
            if rule is not None:
                self._check_elementwise(op)
                results = self.add_elementwise(op)
                translator = rule.expression
            else:
                translator = registry.translator(op, self.target)
                results = translator(self, op)
            self._bind(op, translator, results)

    def _check_elementwise(self, op: ir.Op) -> None:
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

    def _bind(self, op: ir.Op, translator, results) -> None:
        """Bind ``results`` to ``op``'s results after checking the translator's contract:
        one binding per result, of the result's type; a broken contract is an internal
        error that names the op and the translator."""
        def broken(what: str) -> CompilationError:
            name = f"{getattr(translator, '__module__', '?')}." \
                   f"{getattr(translator, '__qualname__', translator)}"
            return CompilationError(f"internal error: the translator {name} of {op.name}"
                                    f"{f' at {op.location}' if op.location else ''} {what}")

        if not isinstance(results, (list, tuple)):
            raise broken(f"returned {type(results).__name__}, not a list of bindings")
        if len(results) != len(op.results):
            raise broken(f"returned {len(results)} results for {len(op.results)}")
        for k, (value, binding) in enumerate(zip(op.results, results)):
            t = value.type
            if isinstance(t, ir.TokenType):
                ok = binding is TOKEN
            elif isinstance(t, ir.TupleType):
                ok = isinstance(binding, Tuple) and binding.type == t
            else:
                found = getattr(binding, "type", None)
                ok = (isinstance(found, ir.TensorType) and found.element == t.element
                      and tuple(found.shape) == tuple(t.shape))
            if not ok:
                raise broken(f"returned {binding!r} for result {k} of type {t}")
            self.scope.env[value.name] = binding

    def callee(self, op: ir.Op) -> ir.Function:
        """The function a call op calls."""
        function = callee(self.module, op)
        if function is None:
            target = op.attr("callee")
            name = target.name if isinstance(target, ir.SymbolRef) else target
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
                # a chain of updates of an argument in that array: each in place
                for argument, binding in zip(function.arguments, arguments):
                    if binding.is_array(destination):
                        for step in updates_in_place(self.module, block, argument,
                                                     value) or ():
                            wanted.setdefault(step.name, destination)
        with self.emit.calling():
            return self.translate_block(block, Scope.of(env, block, wanted))

    def build(self) -> dace.SDFG:
        """The SDFG of the entry function: arguments and results as arrays (tokens are
        neither passed nor returned: they hold no data), results computed by an op of the
        body written straight into their arrays."""
        main = self.entry
        arguments: list[Binding] = []
        for i, value in enumerate(main.arguments):
            if isinstance(value.type, ir.TokenType):
                arguments.append(TOKEN)
                continue
            if not isinstance(value.type, ir.TensorType):
                raise UnsupportedError("func.func", f"argument {i} of type {value.type}",
                                       main.location)
            arguments.append(self.emit.add_array(f"arg{i}", value.type, transient=False))
            self.argument_names.append(f"arg{i}")
        results: list[Array | None] = []
        for i, t in enumerate(main.result_types):
            if isinstance(t, ir.TokenType):
                results.append(None)
                continue
            if not isinstance(t, ir.TensorType):
                raise UnsupportedError("func.func", f"result {i} of type {t}", main.location)
            results.append(self.emit.add_array(f"__return{i}", t, transient=False))
            self.result_names.append(f"__return{i}")

        block = main.body.entry
        destinations: dict[str, str] = {}  # the plan's (``result_destinations``)
        for op in block.ops:
            found = annotation(op, Destinations)
            for value, k in zip(op.results, found.results if found is not None else ()):
                if k >= 0 and results[k] is not None:
                    destinations[value.name] = results[k].name
        env = ChainMap({a.name: b for a, b in zip(main.arguments, arguments)})
        scope = Scope.of(env, block, destinations)
        returned = self.translate_block(block, scope)
        with self.entered(scope), self.emit.at(block.terminator):
            self.close_all_clusters()
            for binding, target in zip(returned, results):
                if target is None:
                    continue
                binding = self.resolve(binding, into=target)
                if not binding.is_array(target.name):
                    self.emit.copy(binding, target)
        if not self.expansion:
            self.emit.new_state("epilogue")
            self._fp_mode_tasklet("h2d::leave_fp_mode();")
        return self.emit.sdfg


def _reads_window(read: Binding, array: str, window: Sequence[Axis]) -> bool:
    """Whether ``read`` reads ``array`` at ``window`` of the map's point and nowhere else."""
    def key(axes):
        return [(a.dim, a.stride if a.dim is not None else 0, a.offset) for a in axes]

    if isinstance(read, View):
        return read.source.name == array and key(read.axes) == key(window)
    return isinstance(read, Array) and read.name == array and key(window) == key(
        [Axis(d) for d in range(read.type.rank)])
