"""Op name -> translator. Op families register themselves with the decorators below when
``hlo2dace.translate`` imports them; the builder looks ops up here and never names a family.

Two kinds of translator exist:

* an **op translator** ``fn(builder, op)`` emits SDFG nodes for the op (copies, library
  nodes, nested control flow) and binds the op's results with ``builder.bind``;
* an **elementwise rule** ``fn(op, args, types) -> str`` returns a C++ expression over the
  operands' scalar expressions. The builder fuses connected elementwise ops of one shape
  into a single map, one tasklet per op; see ``builder.ElementwiseCluster``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import ir
from ..errors import UnsupportedError


@dataclass(frozen=True)
class ElementwiseRule:
    """``expression(op, args, in_types, out_type)``: ``args`` are C++ expressions of the
    operands in their compute types; the result is a C++ expression of ``out_type``."""

    expression: Callable
    family: str
    #: ``when(op)``: whether this op is elementwise at all; if not, the op translator
    #: registered under the same name handles it (bitcast_convert between widths)
    when: Callable | None = None
    #: the expression depends on the element's index (iota): it takes ``point``, the C++
    #: index expressions of the element, as a keyword
    indexed: bool = False

    def at(self, op: ir.Op, args: list[str], in_types, out_type, point: list[str]) -> str:
        """The expression for the element at ``point``."""
        if self.indexed:
            return self.expression(op, args, in_types, out_type, point=point)
        return self.expression(op, args, in_types, out_type)


@dataclass(frozen=True)
class OpTranslator:
    translate: Callable
    family: str


_OPS: dict[str, OpTranslator] = {}
_ELEMENTWISE: dict[str, ElementwiseRule] = {}


def _family_of(fn: Callable) -> str:
    return fn.__module__.rsplit(".", 1)[-1]


def register(*names: str):
    """Register ``fn(builder, op)`` as the translator of the ops ``names``."""

    def decorate(fn):
        for name in names:
            rule = _ELEMENTWISE.get(name)
            if name in _OPS or (rule is not None and rule.when is None):
                raise ValueError(f"{name} is registered twice")
            _OPS[name] = OpTranslator(fn, _family_of(fn))
        return fn

    return decorate


def register_elementwise(name: str, expression: Callable, family: str = "elementwise",
                         when: Callable | None = None, indexed: bool = False):
    if name in _ELEMENTWISE or (name in _OPS and when is None):
        raise ValueError(f"{name} is registered twice")
    _ELEMENTWISE[name] = ElementwiseRule(expression, family, when, indexed)


def elementwise_rule(op: ir.Op) -> ElementwiseRule | None:
    """The op's elementwise rule, or None if it is translated by an op translator."""
    rule = _ELEMENTWISE.get(op.name)
    if rule is None or (rule.when is not None and not rule.when(op)):
        return None
    return rule


def elementwise_names() -> list[str]:
    return sorted(_ELEMENTWISE)


def translator(op: ir.Op) -> OpTranslator:
    try:
        return _OPS[op.name]
    except KeyError:
        raise UnsupportedError(op.name, "no translator for this op", op.location,
                               ["see docs/ops.md for the list of supported ops"]) from None


def supported_ops() -> dict[str, str]:
    """Every registered op name and the family that translates it."""
    table = {name: r.family for name, r in _ELEMENTWISE.items()}
    table.update({name: t.family for name, t in _OPS.items() if name not in table})
    return dict(sorted(table.items()))
