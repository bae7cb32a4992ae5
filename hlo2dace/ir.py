"""The typed, immutable op-graph IR between the parser and the translators.

Translators see only these classes: never a lark tree, never an MLIR object. The IR keeps
exactly what StableHLO's generic form says (op name, operands, results, attributes,
regions, source location); attribute values are decoded into plain Python values:

==============================  ===================================================
MLIR attribute                  Python value
==============================  ===================================================
``42 : i64``, ``1.5 : f32``     ``int``, ``float``
``true`` / ``false``            ``bool``
``"text"``                      ``str``
unit (``{foo}``)                ``True``
``array<i64: 1, 2>``            ``tuple`` of ``int`` (``bool``/``float`` likewise)
``[a, b]``                      ``tuple`` of decoded values
``dense<...> : tensor<...>``    ``DenseElements`` (a read-only ``numpy.ndarray``)
``#stablehlo<kind VALUE>``      ``EnumAttr(kind, value)``
``#stablehlo.name<k = v, ..>``  ``StructAttr(name, fields)``
``@sym``                        ``SymbolRef``
a type                          ``TensorType`` / ``TokenType`` / ``TupleType`` ...
``{k = v}`` dictionary          ``dict`` wrapped in ``types.MappingProxyType``
==============================  ===================================================
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterator, Mapping, Sequence, Union

import numpy as np

# ----------------------------------------------------------------------------- types

#: Element types by their MLIR spelling. Signless ``iN`` are two's complement integers;
#: ``uiN`` are unsigned; ``i1`` is the boolean type.
INTEGER_WIDTHS = (2, 4, 8, 16, 32, 64)
FLOAT_TYPES = (
    "f16", "bf16", "f32", "f64",
    "f4E2M1FN", "f6E2M3FN", "f6E3M2FN", "f8E3M4", "f8E4M3", "f8E4M3FN", "f8E4M3FNUZ",
    "f8E4M3B11FNUZ", "f8E5M2", "f8E5M2FNUZ", "f8E8M0FNU", "tf32",
)


def is_bool(element: str) -> bool:
    return element == "i1"


def is_integer(element: str) -> bool:
    """Signed or unsigned integers of any width, ``i1`` excluded."""
    return element != "i1" and (element.startswith(("i", "si", "ui"))) and element[-1].isdigit()


def is_unsigned(element: str) -> bool:
    return element.startswith("ui")


def is_float(element: str) -> bool:
    return element in FLOAT_TYPES


def is_complex(element: str) -> bool:
    return element.startswith("complex<")


def integer_width(element: str) -> int:
    return int(element.lstrip("sui"))


def complex_part(element: str) -> str:
    """``complex<f32>`` -> ``f32``."""
    return element[len("complex<"):-1]


@dataclass(frozen=True)
class TensorType:
    """A ranked tensor. ``None`` in ``shape`` is a dynamic (``?``) dimension."""

    shape: tuple[int | None, ...]
    element: str
    encoding: Any = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(d is not None for d in self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            if d is None:
                raise ValueError("size of a dynamically shaped tensor")
            n *= d
        return n

    def __str__(self) -> str:
        dims = "".join(("?" if d is None else str(d)) + "x" for d in self.shape)
        return f"tensor<{dims}{self.element}>"


@dataclass(frozen=True)
class TokenType:
    def __str__(self) -> str:
        return "!stablehlo.token"


@dataclass(frozen=True)
class TupleType:
    types: tuple[Type, ...]

    def __str__(self) -> str:
        return "tuple<" + ", ".join(map(str, self.types)) + ">"


@dataclass(frozen=True)
class FunctionType:
    inputs: tuple[Type, ...]
    results: tuple[Type, ...]

    def __str__(self) -> str:
        return f"({', '.join(map(str, self.inputs))}) -> ({', '.join(map(str, self.results))})"


@dataclass(frozen=True)
class OpaqueType:
    """A type the IR does not model (``!quant...``, a scalar ``f32``, ``index``...)."""

    text: str

    def __str__(self) -> str:
        return self.text


Type = Union[TensorType, TokenType, TupleType, FunctionType, OpaqueType]

# ------------------------------------------------------------------------ attributes


@dataclass(frozen=True)
class EnumAttr:
    """``#stablehlo<comparison_direction LT>`` -> ``EnumAttr("comparison_direction", "LT")``."""

    kind: str
    value: str

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StructAttr:
    """``#stablehlo.dot<lhs_batching_dimensions = [0], ...>`` and its kin."""

    name: str
    fields: Mapping[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


@dataclass(frozen=True)
class SymbolRef:
    name: str


@dataclass(frozen=True, eq=False)
class DenseElements:
    """A dense constant. ``array`` has the tensor's shape and the element type's NumPy
    dtype (``ml_dtypes`` supplies bf16, the f8 family and the 2- and 4-bit integers;
    ``i1`` is ``bool``; ``complex<f32>`` is ``complex64``)."""

    array: np.ndarray
    type: TensorType

    @property
    def is_splat(self) -> bool:
        flat = self.array.reshape(-1)
        return flat.size > 0 and bool(np.all(flat.view(np.uint8).reshape(flat.size, -1)
                                             == flat[:1].view(np.uint8)))

    def __hash__(self) -> int:
        return hash((self.type, self.array.tobytes()))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, DenseElements) and self.type == other.type
                and self.array.tobytes() == other.array.tobytes())


@dataclass(frozen=True)
class OpaqueAttr:
    """An attribute kept as text because no translator needs its structure."""

    text: str


# --------------------------------------------------------------------------- graph


@dataclass(frozen=True)
class Location:
    """Where an op came from: the user's file and line when known, and a name
    (``jit(f)/tanh``)."""

    file: str | None = None
    line: int | None = None
    column: int | None = None
    name: str | None = None

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
        if self.name and where:
            return f"{where} ({self.name})"
        return where or self.name or "unknown location"


@dataclass(frozen=True)
class Value:
    """An SSA value: ``%3``, ``%0#1`` or a block argument ``%arg0``."""

    name: str
    type: Type

    def __str__(self) -> str:
        return f"{self.name} : {self.type}"


@dataclass(frozen=True)
class Block:
    arguments: tuple[Value, ...]
    ops: tuple[Op, ...]

    @property
    def terminator(self) -> Op:
        return self.ops[-1]


@dataclass(frozen=True)
class Region:
    blocks: tuple[Block, ...]

    @property
    def entry(self) -> Block:
        return self.blocks[0]


@dataclass(frozen=True)
class Op:
    name: str
    operands: tuple[Value, ...]
    results: tuple[Value, ...]
    attributes: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    regions: tuple[Region, ...] = ()
    location: Location | None = None

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attributes.get(key, default)

    @property
    def result(self) -> Value:
        (only,) = self.results
        return only

    def walk(self) -> Iterator[Op]:
        """This op and every op nested in its regions, depth first."""
        yield self
        for region in self.regions:
            for block in region.blocks:
                for op in block.ops:
                    yield from op.walk()

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


@dataclass(frozen=True)
class Function:
    name: str
    arguments: tuple[Value, ...]
    result_types: tuple[Type, ...]
    body: Region
    visibility: str = "public"
    argument_attributes: tuple[Mapping[str, Any], ...] = ()
    result_attributes: tuple[Mapping[str, Any], ...] = ()
    location: Location | None = None

    @property
    def ops(self) -> tuple[Op, ...]:
        return self.body.entry.ops


@dataclass(frozen=True)
class Module:
    functions: Mapping[str, Function]
    name: str | None = None
    attributes: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def main(self) -> Function:
        """The entry point: ``main`` if present, else the only public function."""
        if "main" in self.functions:
            return self.functions["main"]
        public = [f for f in self.functions.values() if f.visibility == "public"]
        if len(public) != 1:
            raise LookupError("the module has no `main` and not exactly one public function")
        return public[0]

    def walk(self) -> Iterator[Op]:
        for function in self.functions.values():
            for op in function.ops:
                yield from op.walk()


def live_ops(block: Block, returned: Sequence[int] | None = None) -> list[Op]:
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


def combiner(op: Op) -> Op | None:
    """The op of ``op``'s body (a reduction's, a scatter's) if the body applies one binary
    op to its two arguments and returns its result; None otherwise."""
    block = op.regions[0].entry
    if len(block.arguments) != 2 or len(block.ops) != 2:
        return None
    (inner, terminator) = block.ops
    if (terminator.operands != inner.results
            or set(inner.operands) != set(block.arguments) or len(inner.operands) != 2):
        return None
    return inner


def collect_uses(ops: Sequence[Op]) -> dict[str, list[Op]]:
    """Value name -> the ops among ``ops`` that use it, ops nested in regions counted as
    uses by the top-level op that holds them."""
    uses: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        seen = set()
        for inner in op.walk():
            for operand in inner.operands:
                if operand.name not in seen:
                    seen.add(operand.name)
                    uses[operand.name].append(op)
    return uses


def freeze(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))



def values_of(types: Sequence[Type], prefix: str) -> tuple[Value, ...]:
    """Values named ``prefix0, prefix1, ...`` (the arguments of a body-less declaration)."""
    return tuple(Value(f"{prefix}{i}", t) for i, t in enumerate(types))


def constant_value(op: Op | None) -> np.ndarray | None:
    """The array a ``stablehlo.constant`` op makes; None for another op (or none)."""
    if op is None or op.name != "stablehlo.constant":
        return None
    value = op.attr("value")
    return value.array if isinstance(value, DenseElements) else None


def constant_op(name: str, t: TensorType, value: np.ndarray,
                location: Location | None = None) -> Op:
    """A ``stablehlo.constant`` op making ``value`` as the value ``name`` of type ``t``."""
    return Op("stablehlo.constant", (), (Value(name, t),),
              freeze({"value": DenseElements(np.asarray(value).reshape(t.shape), t)}),
              location=location)
