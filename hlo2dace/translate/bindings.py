"""What an SSA value is bound to while a module is translated, and the index algebra of
views. How the builder emits code decides speed more than any later pass, so it never
materialises what it can express otherwise:

* ``Array``: a data container of the SDFG (argument, result, hidden constant, transient);
* ``Literal``: a splat constant, written into tasklet code as a C++ literal;
* ``View``: an affine re-indexing of an array (broadcast_in_dim, transpose, slice, unit
  reshape), read through memlets by its consumers and copied only when an op needs an array;
* ``Pending``: the result of an elementwise op whose map has not been emitted yet (its
  ``ElementwiseCluster`` is open, or closed without writing it);
* ``PendingView``: a ``View`` of a pending value, recomputed by its elementwise readers at
  the index they read, as XLA fuses a cheap producer into each of its consumers;
* ``Pieces``: a concatenation not written yet;
* ``Gathered``: a gather not emitted yet, gathered by its elementwise readers;
* ``RowReduction``: a reduction of rows not emitted yet, computed row by row by the map
  that reads it;
* ``Reshaped``: a reshape that moves elements across dimensions, read in place by its
  elementwise readers;
* ``Token``: a ``!stablehlo.token``, which holds no data;
* ``Tuple``: a ``tuple`` of bindings;
* ``Unused``: a result nothing reads.

Each kind answers the questions the translators ask (``data``, ``subscripts``, ``holds``,
``is_literal``...), so that a new kind is one class here, not a search for ``isinstance``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence, Union

import dace
import numpy as np

from .. import ir
from . import registry

if TYPE_CHECKING:  # only for annotations: scopes.py builds on this module
    from .scopes import Scope

# ------------------------------------------------------------------------ indices


def map_params(rank: int) -> list[str]:
    """The parameters of every map over a shape of ``rank`` dimensions: ``__i0, __i1...``,
    the same everywhere so that DaCe's own passes can fuse what the builder leaves apart."""
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


def unravel(flat: str, shape: Sequence[int]) -> list[str]:
    """C++ for the indices in an array of ``shape`` of the row-major offset ``flat``
    (the inverse of ``flat_index``)."""
    out, stride = [], 1
    for n in reversed(shape):
        out.append(f"({flat} / {cpp_size(stride)}) % {cpp_size(n)}" if stride > 1
                   else f"{flat} % {cpp_size(n)}")
        stride *= n
    return list(reversed(out))


@dataclass(frozen=True)
class Axis:
    """How one dimension of a view's source is indexed: ``offset + stride * i_dim``
    (``dim`` None: the constant ``offset``)."""

    dim: int | None
    stride: int = 1
    offset: int = 0


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


# ------------------------------------------------------------------------ bindings


class _Binding:
    """What every binding answers (see the module's docstring); the kinds override."""

    type: ir.TensorType
    #: a splat constant, written into code as a literal
    is_literal = False
    #: an elementwise value not written yet (or a view of one)
    is_pending = False

    @property
    def data(self) -> str | None:
        """The data container that memlets read for this binding, if it is in one."""
        return None

    def is_array(self, name: str) -> bool:
        """Whether this binding is the whole array ``name``."""
        return False

    def subscripts(self, rank: int, point: Sequence[str] | None = None) -> list[str]:
        """Subscripts of ``data`` that read this binding at the iteration ``point``
        (default: ``__i0..``) of a map over a shape of ``rank`` dimensions (a 0-d operand
        of a shaped op is broadcast)."""
        raise TypeError(f"{type(self).__name__} is not read through memlets")

    def holds(self, array: str) -> bool:
        """Whether reading this binding reads (part of) the array named ``array``."""
        return False

    def lands_in(self, array: str) -> bool:
        """Whether this binding is, or will be once its cluster is emitted, the whole
        array ``array``."""
        return self.is_array(array)


@dataclass(frozen=True)
class Array(_Binding):
    name: str
    type: ir.TensorType

    @property
    def data(self) -> str:
        return self.name

    def is_array(self, name: str) -> bool:
        return self.name == name

    def subscripts(self, rank: int, point: Sequence[str] | None = None) -> list[str]:
        if self.type.rank == 0:
            return ["0"]
        if point is not None:
            return list(point)
        assert self.type.rank == rank
        return map_params(rank)

    def holds(self, array: str) -> bool:
        return self.name == array


@dataclass(frozen=True)
class Literal(_Binding):
    value: object  # a NumPy scalar of the element type's NumPy dtype
    type: ir.TensorType
    is_literal = True


@dataclass(frozen=True)
class View(_Binding):
    source: Array
    axes: tuple[Axis, ...]  # one per source dimension
    type: ir.TensorType

    @property
    def data(self) -> str:
        return self.source.name

    def subscripts(self, rank: int, point: Sequence[str] | None = None) -> list[str]:
        point = list(point) if point is not None else map_params(rank)
        return axes_point(self.axes, point) or ["0"]

    def holds(self, array: str) -> bool:
        return self.source.name == array


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


@dataclass(frozen=True, eq=False)
class Pending(_Binding):
    """Result ``value`` of the elementwise ``op`` (of ``scope``), a member of ``cluster``."""

    cluster: ElementwiseCluster
    value: ir.Value
    scope: Scope
    op: ir.Op
    is_pending = True

    @property
    def key(self) -> tuple[int, str]:
        return (id(self.scope), self.value.name)

    @property
    def type(self) -> ir.TensorType:
        return self.value.type

    @property
    def unresolved(self) -> bool:
        """Whether the value is in no array (its cluster is open, or did not write it)."""
        return self.key not in self.cluster.resolved

    @property
    def pending(self) -> Pending:
        return self

    @property
    def destined(self) -> bool:
        """Whether the value must end in an array of its scope's (a function result)."""
        return self.value.name in self.scope.destinations

    def lands_in(self, array: str) -> bool:
        resolved = self.cluster.resolved.get(self.key)
        return self.scope.destinations.get(self.value.name) == array or (
            resolved is not None and resolved.name == array)

    def holds(self, array: str) -> bool:
        if not self.unresolved:
            return self.cluster.resolved[self.key].holds(array)
        if not self.cluster.closed and self.key not in self.cluster.absorbed:
            return False  # its cluster is emitted before any update in place
        return any(read.holds(array) for read in recomputed_reads(self, 1 << 30, False))


@dataclass(frozen=True, eq=False)
class PendingView(_Binding):
    """``source`` re-indexed by ``axes`` (as a ``View``'s; none for a 0-d source) before
    its cluster wrote it, if it ever does."""

    source: Pending
    axes: tuple[Axis, ...]
    type: ir.TensorType
    is_pending = True

    @property
    def pending(self) -> Pending:
        return self.source

    def holds(self, array: str) -> bool:
        if not self.source.unresolved:
            return self.source.holds(array)
        return any(read.holds(array) for read in recomputed_reads(self, 1 << 30, False))


@dataclass(frozen=True, eq=False)
class Pieces(_Binding):
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

    def holds(self, array: str) -> bool:
        return any(part.holds(array) for part in (*self.parts, *self.materialised))


@dataclass(frozen=True)
class Gathered(_Binding):
    """A gather whose every element reads one operand element, not emitted yet: the
    elementwise maps that read it compute the start index and load the operand element
    themselves (as XLA fuses a gather into its consumers), so the gathered values never
    reach memory. Anything else gets it materialised into an array (once, remembered in
    ``materialised``). The operand is pending where the plan fused it into the gather
    (``FusedOperands``): its elements are computed where gathered. ``starts``: the start
    index (clamped where read) along each of ``start_index_map``'s dimensions, as values
    of this binding's shape; ``position``: per operand dimension, the number of its start
    (None: none) and the axis of this binding's index added to it (the batch position or
    the offset in the window)."""

    operand: Union[Array, View, Pending]
    starts: tuple
    limits: tuple[int, ...]  # the largest start along each start dimension
    position: tuple
    origin: str  # the gather's op comment, for the profiler's attribution
    type: ir.TensorType
    materialised: list = field(default_factory=list)

    def viewed(self, axes: Sequence[Axis], t: ir.TensorType) -> Gathered:
        """This binding re-indexed by ``axes`` (one per dimension of it), as a view."""
        position = tuple((start, compose_axes((axis,), axes)[0])
                         for start, axis in self.position)
        return Gathered(self.operand, tuple(view_of(s, axes, ir.TensorType(t.shape, s.type.element))
                                            for s in self.starts),
                        self.limits, position, self.origin, t)

    def holds(self, array: str) -> bool:
        return any(part.holds(array) for part in (self.operand, *self.starts,
                                                  *self.materialised))


@dataclass(frozen=True, eq=False)
class RowReduction(_Binding):
    """Result ``index`` of a reduction over the trailing dimensions of its operands (a row
    per element of the result) that is read only by elementwise ops and views, not
    emitted yet. As XLA fuses a softmax's or a norm's reductions into their consumers, the
    map that reads it at the point of one row computes it there, in a loop over the row
    before the loop that reads it (``fusion.RowContext``): neither the reduction nor the
    elementwise value it reduces reaches memory. Anything else gets all of the op's
    results written by ``materialise`` (once, into ``materialised``, shared with the
    views) and reads them through ``axes`` (a view's, or None for the result itself).
    ``fold(point, read, prefix)``: the C++ that computes every result of the op at the
    row ``point`` into locals (statements and their names), the operands' elements read
    by ``read(values, point)`` (statements and expressions)."""

    op: ir.Op
    scope: Scope
    index: int
    axes: tuple[Axis, ...] | None
    type: ir.TensorType
    fold: Callable
    materialise: Callable[[], list]
    materialised: list = field(default_factory=list)

    def viewed(self, axes: Sequence[Axis], t: ir.TensorType) -> RowReduction:
        """This binding re-indexed by ``axes`` (one per dimension of it), as a view."""
        composed = tuple(axes) if self.axes is None else compose_axes(self.axes, axes)
        return RowReduction(self.op, self.scope, self.index, composed, t, self.fold,
                            self.materialise, self.materialised)

    def holds(self, array: str) -> bool:
        if self.materialised:
            return any(a.holds(array) for a in self.materialised)
        for value in self.op.operands:
            read = self.scope.env.get(value.name)
            if read is None:
                continue
            if read.is_pending and read.pending.unresolved:
                found = recomputed_reads(read, 1 << 30, False) or ()
                if any(r.holds(array) for r in found):
                    return True
            elif read.holds(array):
                return True
        return False


@dataclass(frozen=True, eq=False)
class Reshaped(_Binding):
    """A reshape of an array or a view (``source``) into ``shape`` that moves elements
    across dimensions (a transposed array made flat, a repeat), read only by elementwise
    ops (through views: ``axes``, or None), not written: their maps read each element in
    place, at the source's index of its row-major position, as XLA fuses a reshape into
    its consumers; or, of a whole array, read only by products, which read the array's
    memory. Anything else gets it written once (``materialised``)."""

    source: Union[Array, View]
    shape: tuple[int, ...]
    axes: tuple[Axis, ...] | None
    type: ir.TensorType
    materialised: list = field(default_factory=list)

    def viewed(self, axes: Sequence[Axis], t: ir.TensorType) -> Reshaped:
        """This binding re-indexed by ``axes`` (one per dimension of it), as a view."""
        composed = tuple(axes) if self.axes is None else compose_axes(self.axes, axes)
        return Reshaped(self.source, self.shape, composed, t)

    def source_point(self, point: Sequence[str]) -> list[str]:
        """The index into the source's array (a view's source's) of the element at
        ``point``."""
        at = list(point) if self.axes is None else axes_point(self.axes, point)
        # the reshape's operand's index (its shape: the source's) of the row-major position
        position = unravel(f"({flat_index(self.shape, at)})", self.source.type.shape)
        return axes_point(self.source.axes, position) if isinstance(self.source, View) \
            else position

    def holds(self, array: str) -> bool:
        return self.source.holds(array) or any(a.holds(array) for a in self.materialised)


def unmaterialised_rows(binding: Binding, budget: int) -> list[RowReduction]:
    """The row reductions not emitted yet that computing ``binding`` element by element
    reads (within ``budget`` ops of recomputation; none past it)."""
    if isinstance(binding, RowReduction):
        return [] if binding.materialised else [binding]
    if not (binding.is_pending and binding.pending.unresolved):
        return []
    return [read for read in recomputed_reads(binding, budget, False) or ()
            if isinstance(read, RowReduction) and not read.materialised]


def view_of(binding: Binding, axes: Sequence[Axis], t: ir.TensorType) -> Binding:
    """``binding`` (an array, a view, a literal, a pending value or a view of one) read
    through ``axes``, one per dimension of it, as a binding of type ``t``."""
    if binding.is_literal:
        return Literal(binding.value, t)
    axes = tuple(axes)
    if isinstance(binding, View):
        return View(binding.source, compose_axes(binding.axes, axes), t)
    if isinstance(binding, PendingView):
        return PendingView(binding.source, compose_axes(binding.axes, axes), t)
    if isinstance(binding, Pending):
        return PendingView(binding, axes if binding.type.rank else (), t)
    if isinstance(binding, (Gathered, RowReduction, Reshaped)):
        return binding.viewed(axes, t)
    if isinstance(binding, Array):
        return View(binding, axes if binding.type.rank else (Axis(None, 0, 0),), t)
    raise TypeError(f"a {type(binding).__name__} has no view")


def clamp_index(start: str, unsigned: bool, largest) -> str:
    """C++ for the start index ``start`` clamped into ``[0, largest]`` as the spec says
    (an unsigned index compared as unsigned: a ui64 above INT64_MAX is too large, not
    negative)."""
    if unsigned:
        return f"(int64_t)std::min<uint64_t>((uint64_t){start}, (uint64_t){cpp_size(largest)})"
    return f"std::min<int64_t>(std::max<int64_t>((int64_t){start}, 0), {cpp_size(largest)})"


@dataclass(frozen=True)
class Token(_Binding):
    """A ``!stablehlo.token``: it orders side effects, and holds no data."""


TOKEN = Token()


@dataclass(frozen=True)
class Tuple(_Binding):
    """A ``tuple`` of values (``get_tuple_element`` takes them apart)."""

    elements: tuple
    type: ir.TupleType

    def holds(self, array: str) -> bool:
        return any(element.holds(array) for element in self.elements)


@dataclass(frozen=True)
class Unused(_Binding):
    """A result that nothing reads, of an op that computes others (argsort's sorted
    keys): never written, never read."""

    type: ir.TensorType


Binding = Union[Array, Literal, View, Pending, PendingView, Pieces, Gathered, RowReduction,
                Reshaped, Token, Tuple, Unused]


def recomputed_reads(binding: Union[Pending, PendingView], budget: int,
                     shared_expensive: bool = True, pointwise: bool = False
                     ) -> list[Binding] | None:
    """What recomputing ``binding`` element by element reads (arrays, views, literals,
    concatenations, values in arrays, and with ``shared_expensive`` pending values with
    other users whose recomputation computes an expensive op, to be written first: XLA
    does not copy a fusion with a ``tanh`` into each of its consumers, and pyhpc's
    isoneutral computed each ``tanh`` taper twice, once per scatter), or None if it takes more than
    ``budget`` ops, or with ``pointwise`` if it reads a view of a pending value (then what
    it reads is not read at the point it computes, through the views above). An op counts
    once per point it is computed at, as ``fusion.Recompute`` emits it: a value that two
    ops read at one point (``where(r * d > 0, 0, r)``) is computed once."""
    reads, ops, seen, expensive = [], 0, set(), {}
    stack = [(binding, tuple(map_params(binding.type.rank)))]
    while stack:
        item, point = stack.pop()
        if isinstance(item, PendingView):
            if pointwise:
                return None
            point = tuple(axes_point(item.axes, point))
        if item.is_pending:
            item = item.pending
        if not (item.is_pending and item.unresolved):
            reads.append(item)
            continue
        key = (item.key, point if item.type.rank else ())
        if key in seen:
            continue
        seen.add(key)
        op = item.op
        if (shared_expensive and item is not binding
                and len(item.scope.uses.get(item.value.name, ())) > 1
                and _computes_expensive(item, expensive)):
            reads.append(item)
            continue
        ops += 1
        if ops > budget:
            return None
        stack.extend((item.scope.env[v.name], point) for v in op.operands)
    return reads


def _computes_expensive(binding: Pending, known: dict[tuple[int, str], bool]) -> bool:
    """Whether recomputing the unresolved ``binding`` computes an expensive op (``known``:
    the answers so far, by key; a walk without recursion, for chains of any length)."""
    stack = [binding]
    while stack:
        item = stack[-1]
        if item.key in known:
            stack.pop()
            continue
        operands = [operand.pending for operand in (item.scope.env[v.name]
                                                    for v in item.op.operands)
                    if operand.is_pending and operand.pending.unresolved]
        expensive = registry.record(item.op.name).expensive
        waiting = [operand for operand in operands if operand.key not in known]
        if waiting and not expensive:
            stack.extend(waiting)
            continue
        stack.pop()
        known[item.key] = expensive or any(known[operand.key] for operand in operands)
    return known[binding.key]
