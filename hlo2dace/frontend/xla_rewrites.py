"""The rewrites of XLA's algebraic simplifier that change how results round, applied as XLA
applies them, so that results match XLA's bit for bit.

XLA rewrites some arithmetic before it generates code, and the rewritten forms round
differently. Measured against jax.jit:

* **Divisions by a broadcast or a constant** become multiplications by the reciprocal:
  ``A / broadcast(B)`` is ``A * broadcast(1 / B)`` (B real, or a constant; a scalar B that
  is not a constant only where nothing else reads its broadcast) and ``A / C`` is
  ``A * (1 / C)`` (C a constant, A not) for f16, f32, f64 and complex numbers (bf16
  divides). ``y / 3.0`` differs from ``y * (1/3)`` in a third of the elements.
* **Divisions by an exponential, a power or a reciprocal square root** are products:
  ``exp(A) / exp(B)`` is ``exp(A - B)`` and ``A / exp(B)`` is ``A * exp(-B)`` (real
  types: XLA expands a complex ``exp`` first), ``A / pow(B, C)`` is ``A * pow(B, -C)``
  and ``A / rsqrt(B)`` is ``A * sqrt(B)``, whatever else reads the divisor. (XLA turns
  ``A / sqrt(B)`` into ``A * rsqrt(B)`` only sometimes, and its ``rsqrt`` rounds
  otherwise than ``1 / sqrt``: not reproduced.)
* **Chains of divisions are regrouped** into one: ``(A / B) / (C / D)`` is
  ``(A * D) / (B * C)``, ``(A / B) / C`` is ``A / (B * C)`` and ``A / (B / C)`` is
  ``(A * C) / B`` (the same types), whatever else reads the inner division; a division
  by a constant is a product first. ``(a / b) / c`` differed from XLA's in a third of the
  elements (f64) and in nine tenths (complex).
* **Products of broadcast scalars are taken first**: ``(A * c) * s``, with ``c`` a
  broadcast scalar constant and ``s`` any broadcast scalar (a scalar reshaped to one
  element first too, as ``jnp.linspace`` has it), in any operand order, is
  ``A * (c * s)`` (f16, f32, f64; not bf16). ``(x * 2.5) * 0.37`` differs in a third of
  the elements.

A **transposed product** whose transposition only swaps the two operands' free dimensions
(JAX's gradient of ``x @ w`` with respect to ``w`` is ``transpose(dot_general(dy, x))``) is
the product of the swapped operands, as XLA folds it: the elementwise ops reading it then
read rows, not columns (an Adam step over a 256x256 weight spent 195 us in such a
strided read where its update needs about 40).

A **reduction that reduces nothing** (its result has as many elements as its operand:
every reduced axis has length 1) is a reshape of its operand, as XLA's simplifier has it,
where its initial value is its reducer's identity (``+0`` counting as the identity of a
sum, as JAX's ``sum`` writes it). ``jnp.sum(x, -1)`` of a ``(n, 1)`` array then keeps
``-0.0`` as XLA does (``+0 + -0`` is ``+0``), and a program's pairwise distances over one
feature are elementwise code again, not a loop per element. (XLA drops any initial value
there; where it is no identity, the spec's ``init + x`` is kept.)

The products are then also the ones that XLA contracts into fused multiply-adds
(``translate/fusion.py``); and a multiplication is several times cheaper than a division.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np

from .. import ir
from .parser import element_dtype

#: the element types whose divisions XLA rewrites
RECIPROCAL_TYPES = ("f16", "f32", "f64", "complex<f32>", "complex<f64>")
#: the element types whose divisions by an exponential XLA rewrites (it expands a complex
#: ``exp`` before)
EXPONENTIAL_TYPES = ("f16", "f32", "f64")
#: the types whose products of broadcast scalars XLA reassociates
REASSOCIATED_TYPES = ("f16", "f32", "f64")


def xla_rewrites(module: ir.Module) -> ir.Module:
    functions = {name: dataclasses.replace(f, body=_region(f.body))
                 for name, f in module.functions.items()}
    return dataclasses.replace(module, functions=ir.freeze(functions))


def _region(region: ir.Region) -> ir.Region:
    return ir.Region(tuple(_block(block) for block in region.blocks))


def _block(block: ir.Block) -> ir.Block:
    producers: dict[str, ir.Op] = {}
    readers = Counter(v.name for op in block.ops for inner in op.walk() for v in inner.operands)
    ops: list[ir.Op] = []
    for op in block.ops:
        if op.regions:
            op = dataclasses.replace(op, regions=tuple(_region(r) for r in op.regions))
        # a rewrite leaves a product, or a division of values that are no divisions (those
        # earlier in the block were rewritten already), so the loop ends
        while (rewritten := next(filter(None, (rule(op, producers, readers)
                                               for rule in DIVISION_RULES)), None)):
            for new in rewritten[:-1]:
                _add(new, ops, producers)
            op = rewritten[-1]
        op = _reduction_as_reshape(op, producers) or op
        swapped = _swapped_product(op, producers, readers)
        if swapped is not None:
            ops.remove(producers[op.operands[0].name])  # the transpose was its only reader
            op = swapped
        for new in _reassociated(op, producers) or [op]:
            _add(new, ops, producers)
    return ir.Block(block.arguments, tuple(ops))


def _add(op: ir.Op, ops: list[ir.Op], producers: dict[str, ir.Op]) -> None:
    ops.append(op)
    producers.update((result.name, op) for result in op.results)


def _rewritten_division(op: ir.Op) -> ir.TensorType | None:
    """The result type of ``op`` if it is a division of a type whose divisions XLA
    rewrites."""
    t = op.results[0].type if len(op.results) == 1 else None
    if op.name != "stablehlo.divide" or not isinstance(t, ir.TensorType) \
            or t.element not in RECIPROCAL_TYPES:
        return None
    return t


def _divided_by_function(op: ir.Op, producers: dict[str, ir.Op], readers: Counter
                         ) -> list[ir.Op] | None:
    """The ops that compute ``op`` as XLA does, if it is a division by an exponential, a
    power or a reciprocal square root."""
    t = _rewritten_division(op)
    if t is None:
        return None
    numerator, divisor = op.operands
    top, bottom = producers.get(numerator.name), producers.get(divisor.name)
    name = op.result.name

    def unary(kind: str, of: ir.Value, suffix: str, like: ir.Op | None = None) -> ir.Op:
        """``kind`` of ``of`` (with the attributes of ``like``) as value ``name_suffix``."""
        return ir.Op(kind, (of,), (ir.Value(f"{name}_{suffix}", of.type),),
                     like.attributes if like is not None else ir.freeze({}),
                     location=op.location)

    def times(factor: ir.Op) -> ir.Op:
        return _binary("stablehlo.multiply", op, numerator, factor.result)

    if bottom is None:
        return None
    if bottom.name == "stablehlo.exponential" and t.element in EXPONENTIAL_TYPES:
        if top is not None and top.name == "stablehlo.exponential":  # exp(A) / exp(B)
            difference = ir.Op("stablehlo.subtract", (top.operands[0], bottom.operands[0]),
                               (ir.Value(f"{name}_difference", t),), location=op.location)
            return [difference, dataclasses.replace(top, operands=(difference.result,),
                                                    results=op.results, location=op.location)]
        negated = unary("stablehlo.negate", bottom.operands[0], "negated")
        exponential = unary("stablehlo.exponential", negated.result, "exponential", bottom)
        return [negated, exponential, times(exponential)]
    if bottom.name == "stablehlo.power":
        base, exponent = bottom.operands
        negated = unary("stablehlo.negate", exponent, "negated")
        power = ir.Op("stablehlo.power", (base, negated.result),
                      (ir.Value(f"{name}_power", t),), bottom.attributes, location=op.location)
        return [negated, power, times(power)]
    if bottom.name == "stablehlo.rsqrt":
        root = unary("stablehlo.sqrt", bottom.operands[0], "sqrt", bottom)
        return [root, times(root)]
    return None


def _reciprocal(op: ir.Op, producers: dict[str, ir.Op], readers: Counter
                ) -> list[ir.Op] | None:
    """The ops that compute ``op`` as XLA does, if it is a division XLA rewrites
    (``readers``: how many times the block reads each value)."""
    t = _rewritten_division(op)
    if t is None or not t.is_static:
        return None
    numerator, divisor = op.operands
    source = producers.get(divisor.name)
    if source is None or ir.constant_value(producers.get(numerator.name)) is not None:
        return None  # a division of constants is folded as a division
    name = f"{op.result.name}_reciprocal"
    chain = [source]  # broadcasts of broadcasts of a constant: a constant to XLA
    while _broadcast_operand(chain[-1]) is not None and producers.get(
            chain[-1].operands[0].name) is not None:
        chain.append(producers[chain[-1].operands[0].name])
    constant = ir.constant_value(chain[-1])
    if constant is not None:
        ops = [ir.constant_op(name, chain[-1].result.type, _inverse(constant), op.location)]
        for k, broadcast in enumerate(reversed(chain[:-1])):
            ops.append(_rebroadcast(broadcast, ops[-1].result, f"{name}_broadcast{k}"))
        return [*ops, _binary("stablehlo.multiply", op, numerator, ops[-1].result)]
    base = _broadcast_operand(source)
    if base is None:
        return None
    if t.element.startswith("complex") or (base.type.rank == 0 and readers[divisor.name] > 1):
        return None  # XLA divides by a complex value, or a scalar broadcast for others too
    one = ir.constant_op(f"{name}_one", base.type,
                       np.ones(base.type.shape, element_dtype(t.element)), op.location)
    inverse = [one, ir.Op("stablehlo.divide", (one.result, base),
                          (ir.Value(name, base.type),), location=op.location)]
    spread = _rebroadcast(source, inverse[-1].result, f"{name}_broadcast")
    return [*inverse, spread, _binary("stablehlo.multiply", op, numerator, spread.result)]


def _regrouped(op: ir.Op, producers: dict[str, ir.Op], readers: Counter
               ) -> list[ir.Op] | None:
    """The ops that compute ``op`` as XLA does, if it is a division of or by a division
    (XLA's rewrites in this order of preference; its inner divisions are rewritten
    first, as they come first in the block)."""
    t = _rewritten_division(op)
    if t is None:
        return None
    inner = [producers.get(v.name) for v in op.operands]
    over = [o if o is not None and o.name == "stablehlo.divide" else None for o in inner]
    name = op.result.name

    def product(role: str, lhs: ir.Value, rhs: ir.Value) -> ir.Op:
        return ir.Op("stablehlo.multiply", (lhs, rhs), (ir.Value(f"{name}_{role}", t),),
                     location=op.location)

    if over[0] is not None and over[1] is not None:  # (A / B) / (C / D)
        (a, b), (c, d) = over[0].operands, over[1].operands
        top, bottom = product("numerator", a, d), product("divisor", b, c)
        return [top, bottom, _binary("stablehlo.divide", op, top.result, bottom.result)]
    if over[0] is not None:  # (A / B) / C
        (a, b), c = over[0].operands, op.operands[1]
        bottom = product("divisor", b, c)
        return [bottom, _binary("stablehlo.divide", op, a, bottom.result)]
    if over[1] is not None:  # A / (B / C)
        a, (b, c) = op.operands[0], over[1].operands
        top = product("numerator", a, c)
        return [top, _binary("stablehlo.divide", op, top.result, b)]
    return None


def _swapped_product(op: ir.Op, producers: dict[str, ir.Op], readers: Counter
                     ) -> ir.Op | None:
    """The product of the swapped operands in place of ``op``, if ``op`` transposes a
    ``dot_general`` that nothing else reads and only swaps its operands' free dimensions
    (batch dimensions stay first)."""
    product = producers.get(op.operands[0].name) if op.name == "stablehlo.transpose" else None
    if product is None or product.name != "stablehlo.dot_general" \
            or readers[product.result.name] != 1 \
            or set(product.attributes) - {"dot_dimension_numbers", "precision_config"}:
        return None
    numbers = product.attr("dot_dimension_numbers")
    if not isinstance(numbers, ir.StructAttr):
        return None
    lhs, rhs = (operand.type.rank for operand in product.operands)
    batch = len(numbers.get("lhs_batching_dimensions", ()))
    lhs_free = lhs - batch - len(numbers.get("lhs_contracting_dimensions", ()))
    rhs_free = rhs - batch - len(numbers.get("rhs_contracting_dimensions", ()))
    swapped_order = (*range(batch), *range(batch + lhs_free, batch + lhs_free + rhs_free),
                     *range(batch, batch + lhs_free))
    if tuple(op.attr("permutation", ())) != swapped_order:
        return None
    fields = {f"{'rhs' if side == 'lhs' else 'lhs'}{rest}": value
              for side, rest, value in ((key[:3], key[3:], value)
                                        for key, value in numbers.fields.items())}
    attributes = {"dot_dimension_numbers": ir.StructAttr(numbers.name, ir.freeze(fields))}
    if "precision_config" in product.attributes:
        attributes["precision_config"] = tuple(reversed(product.attr("precision_config")))
    return ir.Op("stablehlo.dot_general", tuple(reversed(product.operands)), op.results,
                 ir.freeze(attributes), location=product.location)


def _reassociated(op: ir.Op, producers: dict[str, ir.Op]) -> list[ir.Op] | None:
    """``(A * c) * s`` as ``A * (c * s)`` (``c`` a broadcast scalar constant, ``s`` a
    broadcast scalar), if ``op`` is such a product."""
    if op.name != "stablehlo.multiply" or op.result.type.element not in REASSOCIATED_TYPES:
        return None
    for k in (0, 1):
        inner, outer = producers.get(op.operands[k].name), producers.get(op.operands[1 - k].name)
        s = _scalar(outer, producers)
        if inner is None or inner.name != "stablehlo.multiply" or s is None:
            continue
        for j in (0, 1):
            c = _scalar(producers.get(inner.operands[j].name), producers)
            c_value = None if c is None else ir.constant_value(producers.get(c.name))
            if c_value is None:
                continue
            name = f"{op.result.name}_scale"
            s_value = ir.constant_value(producers.get(s.name))
            if s_value is not None:  # XLA folds the product of two constants
                scale = ir.constant_op(name, c.type, (c_value * s_value).astype(c_value.dtype),
                                     op.location)
            else:
                scale = ir.Op("stablehlo.multiply", (c, s), (ir.Value(name, c.type),),
                              location=op.location)
            spread = _rebroadcast(outer, scale.result, f"{name}_broadcast", scalar=True)
            return [scale, spread, _binary("stablehlo.multiply", op, inner.operands[1 - j],
                                           spread.result)]
    return None


def _reduction_as_reshape(op: ir.Op, producers: dict[str, ir.Op]) -> ir.Op | None:
    """The reshape that ``op`` is if it is a reduction of one operand that reduces nothing,
    from its reducer's identity."""
    if op.name != "stablehlo.reduce" or len(op.operands) != 2:
        return None
    operand, init = op.operands
    reducer, value = ir.combiner(op), ir.constant_value(producers.get(init.name))
    if reducer is None or value is None or not operand.type.is_static \
            or not op.result.type.is_static or operand.type.size != op.result.type.size \
            or not _is_identity(reducer.name, value):
        return None
    return ir.Op("stablehlo.reshape", (operand,), op.results, location=op.location)


def _is_identity(reducer: str, value: np.ndarray) -> bool:
    """Whether ``value`` (0-d) is an identity of ``reducer`` (either zero of a sum)."""
    if value.dtype == np.bool_:
        return {"stablehlo.add": False, "stablehlo.or": False, "stablehlo.xor": False,
                "stablehlo.maximum": False, "stablehlo.and": True, "stablehlo.multiply": True,
                "stablehlo.minimum": True}.get(reducer) == bool(value)
    if value.dtype.kind in "iu":
        info = np.iinfo(value.dtype)
        identity = {"stablehlo.add": 0, "stablehlo.or": 0, "stablehlo.xor": 0,
                    "stablehlo.multiply": 1, "stablehlo.maximum": info.min,
                    "stablehlo.minimum": info.max,
                    "stablehlo.and": -1 if info.min else info.max}.get(reducer)
    else:
        identity = {"stablehlo.add": 0, "stablehlo.multiply": 1, "stablehlo.maximum": -np.inf,
                    "stablehlo.minimum": np.inf}.get(reducer)
    return identity is not None and bool(value == identity)


def _broadcast_operand(op: ir.Op | None) -> ir.Value | None:
    """The operand of a ``broadcast_in_dim`` of static shape."""
    if op is None or op.name != "stablehlo.broadcast_in_dim":
        return None
    operand = op.operands[0]
    return operand if isinstance(operand.type, ir.TensorType) and operand.type.is_static \
        else None


def _scalar(op: ir.Op | None, producers: dict[str, ir.Op]) -> ir.Value | None:
    """The 0-d value that ``op`` broadcasts, if it broadcasts one: directly, or reshaped
    to one element first (``x * y[None]`` with a 0-d ``y``), a reshape that XLA elides."""
    operand = _broadcast_operand(op)
    if operand is None or operand.type.rank == 0:
        return operand
    reshape = producers.get(operand.name)
    if reshape is not None and reshape.name == "stablehlo.reshape" \
            and reshape.operands[0].type.rank == 0:
        return reshape.operands[0]
    return None


def _rebroadcast(broadcast: ir.Op, operand: ir.Value, name: str, scalar: bool = False) -> ir.Op:
    """``broadcast`` (a ``broadcast_in_dim``) of ``operand`` instead, as value ``name``;
    ``scalar``: of a 0-d ``operand``, whatever the rank of the one it broadcast."""
    attributes = ir.freeze({**broadcast.attributes, "broadcast_dimensions": ()}) if scalar \
        else broadcast.attributes
    return dataclasses.replace(broadcast, operands=(operand,), attributes=attributes,
                               results=(ir.Value(name, broadcast.result.type),))


def _inverse(value: np.ndarray) -> np.ndarray:
    """1 / ``value`` in its own type, as XLA folds it (f16: computed in f32, rounded)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return (np.ones_like(value) / value).astype(value.dtype)


def _binary(name: str, replaced: ir.Op, lhs: ir.Value, rhs: ir.Value) -> ir.Op:
    """The op ``name`` of ``lhs`` and ``rhs`` in place of ``replaced`` (its result)."""
    return ir.Op(name, (lhs, rhs), replaced.results, location=replaced.location)


#: XLA's rewrites of a division, in the order it prefers them: each ``rule(op, producers,
#: readers)`` gives the ops that compute ``op`` as XLA does, or None
DIVISION_RULES = (_divided_by_function, _reciprocal, _regrouped)
