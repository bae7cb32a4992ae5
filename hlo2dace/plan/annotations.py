"""What the plan stage decides, recorded on the IR as typed annotations: each an
attribute ``h2d.<name>`` of the op it concerns (or of the module), which the translators
read and ``printer.module_text`` prints, so that ``as_text()`` of a planned module shows
every decision.

A translator reads the annotations of the op it is given and nothing around it. It may
decline one only for a memory hazard that it sees in its operands' bindings (the array it
would write is still read later, a value was written already): the plan decides, the
lowering checks that the decision is safe where the IR alone cannot say.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, TypeVar

from .. import ir
from ..printer import attribute_text

#: the prefix of every annotation's attribute name
PREFIX = "h2d."


@dataclass(frozen=True)
class Annotation:
    """One decision of a pass: ``name`` is its attribute's name after ``h2d.``."""

    name: ClassVar[str]

    @classmethod
    def key(cls) -> str:
        return PREFIX + cls.name

    def text(self, compact: bool = False) -> str:
        """As an attribute prints: ``#h2d.<name><field = value, ...>``."""
        fields = ", ".join(f"{f.name} = {attribute_text(getattr(self, f.name), compact)}"
                           for f in dataclasses.fields(self))
        return f"#h2d.{self.name}<{fields}>"

    def __str__(self) -> str:
        return self.text()


A = TypeVar("A", bound=Annotation)


def annotated(op: ir.Op, *annotations: Annotation) -> ir.Op:
    """``op`` with ``annotations`` added (replacing any of the same kind)."""
    attributes = dict(op.attributes)
    attributes.update((a.key(), a) for a in annotations)
    return dataclasses.replace(op, attributes=MappingProxyType(attributes))


def annotation(op: ir.Op, kind: type[A]) -> A | None:
    """The annotation of ``kind`` on ``op``, or None."""
    return op.attributes.get(kind.key())


def module_annotation(module: ir.Module, kind: type[A]) -> A | None:
    return module.attributes.get(kind.key())


def module_annotated(module: ir.Module, *annotations: Annotation) -> ir.Module:
    attributes = dict(module.attributes)
    attributes.update((a.key(), a) for a in annotations)
    return dataclasses.replace(module, attributes=MappingProxyType(attributes))


# --------------------------------------------------------------------------- kinds


@dataclass(frozen=True)
class Fusion(Annotation):
    """An elementwise op that joins the open map of its shape (``fusion.py``): ``group``
    numbers the ops of one shape in one block, which the builder emits as one map where it
    can (a value that an op outside the group needs as an array closes the map early)."""

    name: ClassVar[str] = "fusion"
    group: int


@dataclass(frozen=True)
class OwnMap(Annotation):
    """An elementwise op computed by a map of its own, over its operands' arrays: the open
    map of its shape is emitted first, and its readers read its result's array (XLA's
    fusions end at a ``tanh`` too). ``row``: the innermost length that decided it."""

    name: ClassVar[str] = "own_map"
    row: int


@dataclass(frozen=True)
class FusionOptions(Annotation):
    """Of the module: how much elementwise readers recompute of the values they read
    through views (slices, transposes, broadcasts) instead of reading them from memory:
    producers of up to ``recompute`` ops, and broadcasts only where ``broadcasts``."""

    name: ClassVar[str] = "fusion_options"
    recompute: int
    broadcasts: bool


@dataclass(frozen=True)
class ComputedByReaders(Annotation):
    """An op whose result its readers compute where they read it, never written whole
    (XLA's producer fusion): ``readers`` is ``"elementwise"`` (their maps recompute each
    element: a reshape, a gather, a concatenation, a reduction of rows) or ``"products"``
    (a reshape of a whole array that BLAS reads in place)."""

    name: ClassVar[str] = "computed_by_readers"
    readers: str


@dataclass(frozen=True)
class FusedOperands(Annotation):
    """Operands (by position) whose elementwise producers this op computes itself, in
    its own map or loops, so that their values are never written: the update of a
    ``.at[].set``, what a reduction reduces, a matrix a product reads in blocks."""

    name: ClassVar[str] = "fused_operands"
    operands: tuple[int, ...]


@dataclass(frozen=True)
class Contraction(Annotation):
    """An add or subtract that may be computed as one fused multiply-add with the product
    that is one of its operands (XLA's contraction of a product into its reader):
    ``candidates`` are, in the order to try, ``(operand, negated, shared)``: the operand, a
    product or (for an add) a negated product, and whether it or the product has other
    readers (then it is contracted only where none of them is computed in the same map)."""

    name: ClassVar[str] = "contract"
    candidates: tuple[tuple[int, bool, bool], ...]
    subtract: bool


@dataclass(frozen=True)
class Destinations(Annotation):
    """Results computed straight into the entry function's result arrays: per result of
    the op, the function result it is (or -1)."""

    name: ClassVar[str] = "destinations"
    results: tuple[int, ...]


@dataclass(frozen=True)
class InPlace(Annotation):
    """Results that may be computed in an operand's own array (an update of a window, a
    loop's carried value): for each such result, the operand, which the op is the last
    to read."""

    name: ClassVar[str] = "in_place"
    operands: tuple[int, ...]


@dataclass(frozen=True)
class CarriesInPlace(Annotation):
    """Carried values of a loop that its body computes in one elementwise map, which reads
    each carry only at the position it writes: that map writes the new values into the
    carries' own arrays, with no copy back."""

    name: ClassVar[str] = "carries_in_place"
    operands: tuple[int, ...]


@dataclass(frozen=True)
class SwappedCarries(Annotation):
    """Carried values of a counted loop that alternate between two buffers, two
    iterations a trip, instead of being copied back every iteration."""

    name: ClassVar[str] = "swapped_carries"
    operands: tuple[int, ...]


@dataclass(frozen=True)
class ProductKernel(Annotation):
    """How a product is computed: ``"blas"`` (OpenBLAS: dot, gemv, gemm), ``"blocked_gemv"``
    (a computed matrix a block of rows at a time into gemv), ``"skinny_gemm"`` (gemms over
    blocks of the long side, shared out among ``parts`` threads), ``"loops"`` (a loop nest)
    or ``"xla_order"`` (complex, summed as XLA's Eigen kernels sum)."""

    name: ClassVar[str] = "kernel"
    kernel: str
    parts: int = 1


@dataclass(frozen=True)
class ReplacedLater(Annotation):
    """Boxes of a scatter's result that later scatters replace before anything reads
    them, so that copying its operand may skip them."""

    name: ClassVar[str] = "replaced_later"
    boxes: tuple[tuple[tuple[int, int], ...], ...]


@dataclass(frozen=True)
class ReadPrefix(Annotation):
    """Per result of a sort: how many leading elements of each row its readers read
    (``lax.top_k`` slices the first k), -1 for a result nothing reads."""

    name: ClassVar[str] = "read_prefix"
    lengths: tuple[int, ...]


@dataclass(frozen=True)
class ScatterPerWindow(Annotation):
    """A select_and_scatter whose windows share no element: each window selects once and
    writes its choice, rather than each element gathering from the windows around it."""

    name: ClassVar[str] = "scatter_per_window"
