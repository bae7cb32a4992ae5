"""Everything hlo2dace knows about an op, in one record per op name (``OpRecord``), filled
by the op's family beside its translator when ``hlo2dace.translate`` imports the family,
as JAX keeps a primitive's rules on adjacent lines of ``lax.py``. The builder, the
symbolic-shape pass (``symbolic.py``), known values (``known.py``), loops (``control.py``)
and fusion ask the record; none of them names an op.

A record holds:

* translators by **target** (``register(name, target="cpu")``, as JAX registers lowerings
  per platform): ``fn(builder, op)`` emits the op and returns the bindings of its results,
  one per result, which the builder checks and binds;
* or an **elementwise rule** (``register_elementwise``): a C++ expression over the
  operands' scalar expressions; the builder fuses such ops into one map
  (``fusion.py``);
* ``shape_rule`` and ``value_rule``: the op's result shapes and known contents as
  expressions of a module's size symbols (``symbolic.py``); an op with a shape rule keeps
  symbolic sizes (every elementwise op does);
* ``known``: its result from known integer operands, with NumPy (``known.py``);
* ``updates``: which of its results is an operand with some elements replaced, and so
  may be computed in that operand's array;
* ``expensive``: tens of simple ops (a transcendental function): a pending value it
  computes is written once rather than recomputed by each of its readers;
* ``identity``: as the one op of a reducer body, its exact identity per element type, so
  that a reduction may fold in any grouping (lanes, chunks);
* ``exact``: its result is one of its operands' values, or a value their type holds
  (maximum, select, negation, floor): a 16-bit float's result needs no rounding;
* ``scalar_alias``: on one element, its result is its first operand (reshapes and
  broadcasts inside reducer bodies and comparators);
* ``view``: its result re-indexes its operand (slices, transposes, broadcasts);
* ``carries``: its results are its operands carried through a loop.
* ``same_memory``: its result is one operand's elements in the same row-major order (a
  reshape; a ``.set`` of every element is its updates), so that operand may be computed
  in the result's destination;
* ``whole_result``: its translator writes its result through one pointer (a product), so
  its destination may be an array of another shape of as many elements;
* ``code_regions``: its regions are translated as code of their own (control flow's
  bodies and branches), not compiled as scalar bodies (a reducer, a comparator).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .. import ir
from ..errors import UnsupportedError

#: the target whose translators the builder uses unless told otherwise
DEFAULT_TARGET = "cpu"


@dataclass(frozen=True)
class ElementwiseRule:
    """``expression(op, args, in_types, out_type)``: ``args`` are C++ expressions of the
    operands in their compute types; the result is a C++ expression of ``out_type``."""

    expression: Callable
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
class OpRecord:
    """What hlo2dace knows about one op (see the module's docstring)."""

    name: str
    family: str = ""
    translators: Mapping[str, Callable] = field(default_factory=dict)
    elementwise: ElementwiseRule | None = None
    #: ``rule(inference, op, operands, shapes, knowns, env)`` (``symbolic.py``)
    shape_rule: Callable | None = None
    #: ``rule(op, knowns, shapes)`` -> the known contents of the one result, or None
    value_rule: Callable | None = None
    #: ``known(op, operand)`` -> the result as a NumPy array, or None if the op's
    #: semantics are not NumPy's there; ``operand(k)`` gives the k-th operand's values
    known: Callable | None = None
    #: ``updates(op)`` -> {operand index: result index}: the result is the operand with
    #: some elements replaced, so it may be written into the operand's array
    updates: Callable | None = None
    expensive: bool = False
    #: ``identity(element)`` -> the exact identity for the ``ElementType``, or None
    identity: Callable | None = None
    #: the result is an operand's value or one the operands' type holds (``ElementType.fit``)
    exact: bool = False
    scalar_alias: bool = False
    #: the result is its operand re-indexed (``shape._view``): a value bound lazily (a
    #: pending value, a gather) stays lazy through it
    view: bool = False
    #: result ``k`` is operand ``k`` carried through a loop, which may run in that
    #: operand's array (``control._reusable``)
    carries: bool = False
    #: ``same_memory(op)`` -> the operand whose elements the result is in their row-major
    #: order, or None (``scopes.updates_in_results``)
    same_memory: Callable | None = None
    #: the translator writes the whole result through one pointer: its destination may
    #: have another shape (``Builder.allocate_result``)
    whole_result: bool = False
    #: its regions are translated as code (``Builder.translate_block``), not scalar bodies
    code_regions: bool = False

    def translator(self, target: str) -> Callable | None:
        return self.translators.get(target)


_RECORDS: dict[str, OpRecord] = {}


def _family_of(fn: Callable) -> str:
    return fn.__module__.rsplit(".", 1)[-1]


def define(name: str, **properties: Any) -> OpRecord:
    """Set ``properties`` (fields of ``OpRecord``) of the op ``name``'s record, making it
    if needed; a property set twice to different values is an error."""
    record = _RECORDS.get(name) or OpRecord(name)
    for key, value in properties.items():
        old = getattr(record, key)
        if old not in (None, False, "", {}) and old != value and key != "translators":
            raise ValueError(f"{name}: {key} is defined twice")
    record = _RECORDS[name] = dataclasses.replace(record, **properties)
    return record


def register(*names: str, target: str = DEFAULT_TARGET, **properties: Any):
    """Register ``fn(builder, op) -> results`` as the translator of the ops ``names`` on
    ``target``, with the other ``properties`` of their records."""

    def decorate(fn):
        for name in names:
            record = _RECORDS.get(name)
            if record is not None and (target in record.translators or (
                    record.elementwise is not None and record.elementwise.when is None)):
                raise ValueError(f"{name} is registered twice for {target}")
            translators = dict(record.translators) if record else {}
            translators[target] = fn
            family = record.family if record and record.family else _family_of(fn)
            define(name, translators=translators, family=family, **properties)
        return fn

    return decorate


def register_elementwise(name: str, expression: Callable, when: Callable | None = None,
                         indexed: bool = False, family: str | None = None,
                         **properties: Any) -> None:
    """Register the C++ ``expression`` of the elementwise op ``name`` (for every target),
    with the other ``properties`` of its record."""
    record = _RECORDS.get(name)
    if record is not None and (record.elementwise is not None
                               or (record.translators and when is None)):
        raise ValueError(f"{name} is registered twice")
    define(name, elementwise=ElementwiseRule(expression, when, indexed),
           family=family or _family_of(expression), **properties)


def record(name: str) -> OpRecord:
    """The record of ``name`` (an empty one for an op nothing registered)."""
    return _RECORDS.get(name) or OpRecord(name)


def elementwise_rule(op: ir.Op) -> ElementwiseRule | None:
    """The op's elementwise rule, or None if it is translated by an op translator."""
    rule = record(op.name).elementwise
    if rule is None or (rule.when is not None and not rule.when(op)):
        return None
    return rule


def translator(op: ir.Op, target: str = DEFAULT_TARGET) -> Callable:
    """The translator of ``op`` on ``target``; UnsupportedError if it has none."""
    found = record(op.name)
    fn = found.translator(target)
    if fn is None:
        where = [t for t in found.translators]
        reason = (f"no translator for this op on the {target} target (only on "
                  f"{', '.join(where)})" if where else "no translator for this op")
        raise UnsupportedError(op.name, reason, op.location,
                               ["see docs/ops.md for the list of supported ops"])
    return fn


def elementwise_names() -> list[str]:
    return sorted(name for name, r in _RECORDS.items() if r.elementwise is not None)


def supported_ops(target: str = DEFAULT_TARGET) -> dict[str, str]:
    """Every op name that translates on ``target``, and the family that translates it."""
    return dict(sorted((name, r.family) for name, r in _RECORDS.items()
                       if r.elementwise is not None or target in r.translators))


def symbolic_ops() -> list[str]:
    """The ops that keep symbolic sizes: those with a shape rule, and elementwise ones."""
    return sorted(name for name, r in _RECORDS.items()
                  if r.shape_rule is not None or r.elementwise is not None)
