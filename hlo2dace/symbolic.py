"""Symbolic shapes: one binary for every size of a shape-polymorphic module.

Each dynamic (``?``) dimension of the entry function's arguments becomes a DaCe symbol.
``refine`` infers every other value's dimensions as expressions of those symbols, op by op,
and tracks the contents of small integer tensors computed from dimension sizes
(``get_dimension_size`` and the arithmetic JAX emits around it), so that the shape operands
of dynamic ops and the predicates of JAX's shape assertions are known as expressions too. It
returns the module with those expressions in its types: the translators of the ops in
``SYMBOLIC_OPS`` (and every elementwise op) emit maps, arrays and library nodes sized by
symbols, whose values the runtime reads from the arguments' shapes at each call.

An op outside that set whose types are dynamic raises ``NeedsSpecialisation``: the module is
then compiled once per concrete argument shape (``normalize.specialise``), as XLA does.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import sympy

from . import ir
from .errors import UnsupportedError

Dim = Any  # an int, or a sympy expression of the symbols


class NeedsSpecialisation(UnsupportedError):
    """An op that cannot be compiled with symbolic sizes: compile per concrete shape."""

    def __init__(self, op: str, reason: str, location: ir.Location | None = None):
        super().__init__(op, f"{reason} (symbolic sizes; it compiles once the argument "
                         "shapes are known)", location)
        #: the symbols of the entry function's dynamic dimensions and the checks found
        #: before this op (set by ``refine``)
        self.signature = Signature((), ())


@dataclass(frozen=True)
class SymbolSource:
    """Symbol ``name`` is dimension ``dim`` of argument ``argument``."""

    name: str
    argument: int
    dim: int


@dataclass(frozen=True)
class Check:
    """A condition on the symbols that every call must meet: a shape assertion of JAX's
    (``message`` has ``{0}``-style fields for ``values``) or two dimensions that the
    module's ops require to be equal."""

    condition: str
    message: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Signature:
    symbols: tuple[SymbolSource, ...]
    checks: tuple[Check, ...]


def is_symbolic(t: ir.Type) -> bool:
    return isinstance(t, ir.TensorType) and any(
        d is not None and not isinstance(d, (int, np.integer)) for d in t.shape)


def has_dynamic_types(function: ir.Function) -> bool:
    return any(isinstance(v.type, ir.TensorType) and not v.type.is_static
               for v in function.arguments) or any(
        isinstance(t, ir.TensorType) and not t.is_static for t in function.result_types)


def symbol(name: str) -> sympy.Symbol:
    import dace

    return dace.symbol(name, dace.int64, nonnegative=True, integer=True)


# ------------------------------------------------------------------------ inference

#: op name -> rule(inference, op, operands, shapes, knowns, env) -> the result shapes
#: (``None`` dims are taken from the declared types), or a ``Refined``: the ops whose
#: translators handle symbolic sizes
_SHAPE_RULES: dict[str, Callable] = {}
#: op name -> rule(op, knowns, shapes) -> the known contents of the result, or None
_VALUE_RULES: dict[str, Callable] = {}


def _registrar(table: dict[str, Callable]):
    """A decorator ``@rule("op", ...)`` that files its function in ``table`` by op name."""
    def rule(*names: str):
        def decorate(fn):
            for name in names:
                table[name] = fn
            return fn
        return decorate
    return rule


_shape_rule = _registrar(_SHAPE_RULES)
_value_rule = _registrar(_VALUE_RULES)


class _Inference:
    def __init__(self, module: ir.Module):
        self.module = module
        self.functions: dict[str, ir.Function] = {}
        #: (callee, argument shapes, known arguments) -> (name, (results, known results))
        self.clones: dict[tuple, tuple] = {}
        self.checks: list[Check] = []
        self.renames: dict[sympy.Symbol, str] = {}
        #: symbol -> the dimension the module's ops require it to equal
        self.aliases: dict[sympy.Symbol, Dim] = {}

    # -- helpers used by the rules
    def unify(self, a: Dim, b: Dim, op: ir.Op) -> Dim:
        """Two dimensions the op requires equal: the first, with a check if they may
        differ."""
        if a is None:
            return b
        if b is None or a == b:
            return a
        if isinstance(a, int) and isinstance(b, int):
            raise NeedsSpecialisation(op.name, f"dimensions {a} and {b} differ", op.location)
        self.require(sympy.Eq(a, b), op, "needs dimension {0} to equal {1}", a, b)
        # one name for both from here on: a symbol becomes the other dimension in every
        # type (the check above makes that true at run time)
        a, b = self.resolve(a), self.resolve(b)
        if a != b:
            if isinstance(b, sympy.Symbol):
                self.aliases[b] = a
            elif isinstance(a, sympy.Symbol):
                self.aliases[a] = b
        return b if isinstance(b, int) else a

    def require(self, condition, op: ir.Op, message: str, *values: Dim) -> None:
        """A condition on the symbols that every call must meet (``message`` names the
        ``values`` as ``{0}``, ``{1}``...)."""
        where = f" at {op.location}" if op.location else ""
        where = where.replace("{", "{{").replace("}", "}}")
        self.checks.append(Check(str(condition), f"{op.name}{where} {message}",
                                 tuple(map(str, values))))

    def resolve(self, dim: Dim) -> Dim:
        """``dim`` with aliased symbols replaced by what they equal."""
        for _ in range(len(self.aliases) + 1):
            if isinstance(dim, int) or not (dim.free_symbols & self.aliases.keys()):
                return dim
            dim = _dim(dim.xreplace(self.aliases))
        return dim

    # -- the walk
    def function(self, function: ir.Function, shapes: Sequence[tuple], knowns: Sequence,
                 name: str) -> tuple[ir.Function, list[tuple], list]:
        env = _Env()
        arguments = []
        for value, shape, known in zip(function.arguments, shapes, knowns):
            arguments.append(self._value(value, shape, env.shape))
            if known is not None:
                env.known[value.name] = known
        block, results, result_knowns = self.block(function.body.entry, arguments, env)
        refined = dataclasses.replace(
            function, name=name, arguments=tuple(arguments),
            result_types=tuple(v.type for v in block.terminator.operands),
            body=ir.Region((block,)))
        return refined, results, result_knowns

    def _value(self, value: ir.Value, shape: tuple | None, env_shape: dict) -> ir.Value:
        t = value.type
        if isinstance(t, ir.TensorType) and shape is not None:
            dims = tuple(d if d is not None else s for d, s in zip(t.shape, shape))
            if any(d is None for d in dims):
                raise NeedsSpecialisation("func.func", f"unknown dimension of {value.name}")
            t = dataclasses.replace(t, shape=dims)
            env_shape[value.name] = dims
            return ir.Value(value.name, t)
        if isinstance(t, ir.TensorType) and not t.is_static:
            raise NeedsSpecialisation("func.func", f"unknown dimension of {value.name}")
        if isinstance(t, ir.TensorType):
            env_shape[value.name] = t.shape
        return value

    def block(self, block: ir.Block, arguments: Sequence[ir.Value], env: _Env
              ) -> tuple[ir.Block, list, list]:
        """Refine ``block`` whose arguments become ``arguments``; ``env`` holds what the
        enclosing blocks defined (regions read values from above)."""
        env.rename.update({old.name: new for old, new in zip(block.arguments, arguments)})
        ops = [self.op(op, env) for op in block.ops]
        terminator = ops[-1]
        return (ir.Block(tuple(arguments), tuple(ops)),
                [env.shape.get(v.name) for v in terminator.operands],
                [env.known.get(v.name) for v in terminator.operands])

    def op(self, op: ir.Op, env: _Env) -> ir.Op:
        operands = tuple(env.rename.get(v.name, v) for v in op.operands)
        shapes = [env.shape.get(v.name) for v in operands]
        knowns = [env.known.get(v.name) for v in operands]
        dynamic = any(isinstance(v.type, ir.TensorType) and not _static(v.type)
                      for v in (*operands, *op.results))
        rule = _SHAPE_RULES.get(op.name)
        if rule is None and _elementwise(op):
            rule = _elementwise_shape
        refined = Refined([None] * len(op.results), op.regions, op.attributes)
        if rule is not None:
            found = rule(self, op, operands, shapes, knowns, env)
            refined = found if isinstance(found, Refined) else \
                dataclasses.replace(refined, shapes=found)
        elif dynamic:
            raise NeedsSpecialisation(op.name, "this op needs static shapes", op.location)
        results = []
        for k, value in enumerate(op.results):
            shape = refined.shapes[k] if k < len(refined.shapes) else None
            t = value.type
            if isinstance(t, ir.TensorType):
                dims = []
                for declared, found in zip(t.shape, shape or (None,) * t.rank):
                    if found is not None and not isinstance(found, int) and (
                            found.has(sympy.Piecewise) or not isinstance(found, sympy.Expr)
                            or found.atoms(sympy.Rel, sympy.logic.boolalg.BooleanFunction)):
                        raise NeedsSpecialisation(op.name, f"a size ({found}) that is not "
                                                  "arithmetic of the symbols", op.location)
                    if declared is None:
                        if found is None:
                            raise NeedsSpecialisation(op.name, f"the size of {value.name} is "
                                                      "not known symbolically", op.location)
                        dims.append(found)
                    else:
                        dims.append(declared if found is None
                                    else self.unify(found, declared, op))
                t = dataclasses.replace(t, shape=tuple(dims))
                env.shape[value.name] = t.shape
            new = ir.Value(value.name, t)
            env.rename[value.name] = new
            results.append(new)
        result_knowns = refined.knowns
        value_rule = _VALUE_RULES.get(op.name)
        if result_knowns is None and value_rule is not None and len(op.results) == 1:
            try:  # contents are known where sympy can follow them; else not at all
                known = value_rule(op, knowns, shapes)
            except (TypeError, ValueError, AttributeError):
                known = None
            result_knowns = [None if known is None else np.asarray(known, dtype=object)
                             .reshape(results[0].type.shape)]
        for value, known in zip(op.results, result_knowns or ()):
            if known is not None:
                env.known[value.name] = known
        name, attributes = op.name, refined.attributes
        if name in _STATIC_FORMS:  # the shape operand is in the result type now
            name, kept, keys = _STATIC_FORMS[name]
            operands = operands[:kept]
            attributes = ir.freeze({k: v for k, v in attributes.items() if k in keys})
        return dataclasses.replace(op, name=name, operands=operands, results=tuple(results),
                                   regions=refined.regions, attributes=attributes)


#: dynamic op -> (its static form, the operands it keeps, the attributes it keeps)
_STATIC_FORMS = {
    "stablehlo.dynamic_iota": ("stablehlo.iota", 0, ("iota_dimension",)),
    "stablehlo.dynamic_broadcast_in_dim": ("stablehlo.broadcast_in_dim", 1,
                                           ("broadcast_dimensions",)),
    "stablehlo.dynamic_reshape": ("stablehlo.reshape", 1, ()),
}


@dataclass
class _Env:
    """What a block sees: refined values, their shapes and known contents, by name."""

    rename: dict = dataclasses.field(default_factory=dict)
    shape: dict = dataclasses.field(default_factory=dict)
    known: dict = dataclasses.field(default_factory=dict)

    def inner(self) -> _Env:
        return _Env(dict(self.rename), dict(self.shape), dict(self.known))


@dataclass(frozen=True)
class Refined:
    """What a shape rule found: result shapes, and for ops with regions or callees the
    rewritten regions and attributes, and the results' known contents."""

    shapes: list
    regions: tuple = ()
    attributes: Any = None
    knowns: list | None = None


def _static(t: ir.TensorType) -> bool:
    return all(isinstance(d, (int, np.integer)) for d in t.shape)


def _elementwise(op: ir.Op) -> bool:
    from .translate import registry

    return registry.elementwise_rule(op) is not None


def _elementwise_shape(inference: _Inference, op, operands, shapes, knowns, env):
    rank = op.results[0].type.rank
    shape = [None] * rank
    for s in shapes:
        if s is not None and len(s) == rank:
            shape = [inference.unify(a, b, op) for a, b in zip(shape, s)]
    return [tuple(shape)] * len(op.results)


def _known(op: ir.Op, knowns, k: int):
    known = knowns[k]
    if known is None:
        raise NeedsSpecialisation(op.name, f"operand {k} is not known from the argument "
                                  "shapes", op.location)
    return [_dim(v) for v in np.asarray(known).reshape(-1)]


def _dim(value: Any) -> Dim:
    value = sympy.sympify(value)
    return int(value) if value.is_Integer else value


@_shape_rule("stablehlo.get_dimension_size", "stablehlo.constant", "stablehlo.iota",
             "stablehlo.optimization_barrier", "stablehlo.return", "func.return",
             "stablehlo.after_all", "stablehlo.create_token", "stablehlo.reverse")
def _declared_or_same(inference, op, operands, shapes, knowns, env):
    """Results of declared (static) types, or of the operand's shape."""
    if op.name == "stablehlo.optimization_barrier":
        return shapes
    if op.name == "stablehlo.reverse":
        return [shapes[0]]
    return [None] * len(op.results)


@_shape_rule("stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice")
def _window(inference, op, operands, shapes, knowns, env):
    """A window of static sizes in a dimension that may be a symbol: the dimension must
    hold it (its start is clamped into ``[0, n - k]``)."""
    sizes = op.attr("slice_sizes") if op.name == "stablehlo.dynamic_slice" else shapes[1]
    for n, k in zip(shapes[0], sizes):
        if not (isinstance(n, int) and isinstance(k, int)):
            inference.require(sympy.Ge(n, k), op, "needs dimension {0} to hold a window of "
                              "{1}", n, k)
    return [None] if op.name == "stablehlo.dynamic_slice" else [shapes[0]]


@_shape_rule("stablehlo.broadcast_in_dim")
def _broadcast(inference, op, operands, shapes, knowns, env):
    result = [None] * op.results[0].type.rank
    for j, d in enumerate(op.attr("broadcast_dimensions")):
        if shapes[0][j] != 1:
            result[d] = shapes[0][j]
    return [tuple(result)]


@_shape_rule("stablehlo.dynamic_broadcast_in_dim")
def _dynamic_broadcast(inference, op, operands, shapes, knowns, env):
    result = _known(op, knowns, 1)
    for j, d in enumerate(op.attr("broadcast_dimensions")):
        if shapes[0][j] != 1:
            inference.unify(shapes[0][j], result[d], op)
    return [tuple(result)]


@_shape_rule("stablehlo.dynamic_reshape", "stablehlo.dynamic_iota")
def _shape_operand(inference, op, operands, shapes, knowns, env):
    result = tuple(_known(op, knowns, len(operands) - 1))
    if op.name == "stablehlo.dynamic_reshape":
        inference.unify(_dim(sympy.Mul(*shapes[0])), _dim(sympy.Mul(*result)), op)
    return [result]


@_shape_rule("stablehlo.reshape")
def _reshape(inference, op, operands, shapes, knowns, env):
    result = op.results[0].type.shape
    inference.unify(_dim(sympy.Mul(*shapes[0])), _dim(sympy.Mul(*result)), op)
    return [result]


@_shape_rule("stablehlo.transpose")
def _transpose(inference, op, operands, shapes, knowns, env):
    return [tuple(shapes[0][p] for p in op.attr("permutation"))]


@_shape_rule("stablehlo.dot_general")
def _dot_general(inference, op, operands, shapes, knowns, env):
    numbers = op.attr("dot_dimension_numbers")
    lb = numbers.get("lhs_batching_dimensions", ())
    rb = numbers.get("rhs_batching_dimensions", ())
    lc = numbers.get("lhs_contracting_dimensions", ())
    rc = numbers.get("rhs_contracting_dimensions", ())
    lhs, rhs = shapes
    batch = [inference.unify(lhs[i], rhs[j], op) for i, j in zip(lb, rb)]
    for i, j in zip(lc, rc):
        inference.unify(lhs[i], rhs[j], op)
    free_l = [d for k, d in enumerate(lhs) if k not in lb and k not in lc]
    free_r = [d for k, d in enumerate(rhs) if k not in rb and k not in rc]
    return [tuple(batch + free_l + free_r)]


@_shape_rule("stablehlo.reduce")
def _reduce(inference, op, operands, shapes, knowns, env):
    half = len(operands) // 2
    dims = set(op.attr("dimensions"))
    shape = shapes[0]
    for other in shapes[1:half]:
        shape = tuple(inference.unify(a, b, op) for a, b in zip(shape, other))
    _check_scalar_body(op)
    return [tuple(d for k, d in enumerate(shape) if k not in dims)] * half


def _check_scalar_body(op: ir.Op) -> None:
    for region in op.regions:
        for inner in region.entry.ops:
            if any(isinstance(v.type, ir.TensorType) and not v.type.is_static
                   for v in (*inner.operands, *inner.results)):
                raise NeedsSpecialisation(op.name, "a dynamic shape in its body", op.location)


@_shape_rule("stablehlo.concatenate")
def _concatenate(inference, op, operands, shapes, knowns, env):
    axis = op.attr("dimension")
    shape = list(shapes[0])
    for other in shapes[1:]:
        for k in range(len(shape)):
            shape[k] = _dim(shape[k] + other[k]) if k == axis else \
                inference.unify(shape[k], other[k], op)
    return [tuple(shape)]


@_shape_rule("stablehlo.custom_call")
def _custom_call(inference, op, operands, shapes, knowns, env):
    if op.attr("call_target_name") != "shape_assertion":
        if any(not _static(v.type) for v in (*operands, *op.results)
               if isinstance(v.type, ir.TensorType)):
            raise NeedsSpecialisation(op.name, "a custom call with dynamic shapes",
                                      op.location)
        return [None] * len(op.results)
    (predicate,) = _known(op, knowns, 0)
    values = [str(_known(op, knowns, k)[0]) for k in range(1, len(operands))]
    if predicate is not sympy.true and predicate is not True:
        inference.checks.append(Check(str(predicate), op.attr("error_message", ""),
                                      tuple(values)))
    return []


@_shape_rule("func.call", "stablehlo.call")
def _call(inference, op, operands, shapes, knowns, env):
    """Each callee is refined once per distinct signature (a clone if signatures differ)."""
    callee = op.attr("callee").name
    function = inference.module.functions[callee]
    key = (callee, tuple(None if s is None else tuple(map(str, s)) for s in shapes),
           tuple(None if k is None else tuple(map(str, k.flat)) for k in knowns))
    if key not in inference.clones:
        taken = {name for name, _ in inference.clones.values()}
        name, k = callee, 0
        while name in taken or (name != callee and name in inference.module.functions):
            k += 1
            name = f"{callee}_clone{k}"
        for known, attributes in zip(knowns, function.argument_attributes):
            global_name = attributes.get("jax.global_constant") if attributes else None
            if global_name and known is not None and known.size == 1 \
                    and isinstance(known.flat[0], sympy.Symbol):
                inference.renames.setdefault(known.flat[0], str(global_name))
        refined, results, result_knowns = inference.function(function, shapes, knowns, name)
        inference.functions[name] = refined
        inference.clones[key] = (name, (results, result_knowns))
    name, (results, result_knowns) = inference.clones[key]
    return Refined(results, op.regions, ir.freeze({**op.attributes,
                                                   "callee": ir.SymbolRef(name)}),
                   result_knowns)


@_shape_rule("stablehlo.while")
def _while(inference, op, operands, shapes, knowns, env):
    """Loop-carried values keep their shapes; their contents are not known (they change)."""
    regions = []
    for region in op.regions:
        inner = env.inner()
        block = region.entry
        arguments = [inference._value(v, s, inner.shape) for v, s in zip(block.arguments,
                                                                          shapes)]
        refined, results, _ = inference.block(block, arguments, inner)
        if region is op.regions[1]:
            for before, after in zip(shapes, results):
                if before is not None:
                    for a, b in zip(before, after):
                        inference.unify(a, b, op)
        regions.append(ir.Region((refined,)))
    return Refined(shapes, tuple(regions), op.attributes)


@_shape_rule("stablehlo.case", "stablehlo.if")
def _branches(inference, op, operands, shapes, knowns, env):
    regions, outcome = [], None
    for region in op.regions:
        refined, results, _ = inference.block(region.entry, [], env.inner())
        outcome = results if outcome is None else [
            None if a is None else tuple(inference.unify(x, y, op) for x, y in zip(a, b))
            for a, b in zip(outcome, results)]
        regions.append(ir.Region((refined,)))
    return Refined(outcome, tuple(regions), op.attributes)


# ---------------------------------------------------------------- known contents

@_value_rule("stablehlo.constant")
def _constant(op, knowns, shapes):
    t = op.results[0].type
    if (ir.is_integer(t.element) or ir.is_bool(t.element)) and _static(t) and t.size <= 64:
        return [sympy.sympify(bool(v) if ir.is_bool(t.element) else int(v))
                for v in np.asarray(op.attr("value").array).reshape(-1)]
    return None


@_value_rule("stablehlo.get_dimension_size")
def _dimension_size(op, knowns, shapes):
    return [sympy.sympify(shapes[0][op.attr("dimension")])]


@_value_rule("stablehlo.convert", "stablehlo.reshape", "stablehlo.broadcast_in_dim",
             "stablehlo.optimization_barrier")
def _same_values(op, knowns, shapes):
    known = knowns[0]
    if known is None:
        return None
    t = op.results[0].type
    if op.name == "stablehlo.broadcast_in_dim":
        if not _static(t) or known.size != 1:
            return None
        return [known.flat[0]] * t.size
    if op.name == "stablehlo.convert":
        source = op.operands[0].type.element
        if ir.is_bool(t.element) and not ir.is_bool(source):
            return [sympy.Ne(v, 0) for v in known.flat]
        if ir.is_bool(source) and not ir.is_bool(t.element):
            return [sympy.Piecewise((1, v), (0, True)) for v in known.flat]
    return list(known.flat)


@_value_rule("stablehlo.concatenate")
def _concatenate_values(op, knowns, shapes):
    if any(k is None or k.ndim != 1 for k in knowns):
        return None
    return [v for k in knowns for v in k.flat]


@_value_rule("stablehlo.slice")
def _slice_values(op, knowns, shapes):
    if knowns[0] is None or knowns[0].ndim != 1:
        return None
    (start,), (limit,), (stride,) = (op.attr(k) for k in ("start_indices", "limit_indices",
                                                          "strides"))
    return list(knowns[0][start:limit:stride])


_ARITHMETIC = {
    "stablehlo.add": lambda a, b: a + b,
    "stablehlo.subtract": lambda a, b: a - b,
    "stablehlo.multiply": lambda a, b: a * b,
    "stablehlo.divide": lambda a, b: sympy.sign(a * b) * (abs(a) // abs(b)),
    "stablehlo.remainder": lambda a, b: sympy.sign(a) * (abs(a) % abs(b)),
    "stablehlo.maximum": sympy.Max,
    "stablehlo.minimum": sympy.Min,
    "stablehlo.and": lambda a, b: sympy.And(a, b),
    "stablehlo.or": lambda a, b: sympy.Or(a, b),
}
_COMPARE = {"EQ": sympy.Eq, "NE": sympy.Ne, "GE": sympy.Ge, "GT": sympy.Gt, "LE": sympy.Le,
            "LT": sympy.Lt}


@_value_rule(*_ARITHMETIC, "stablehlo.compare", "stablehlo.select", "stablehlo.not")
def _arithmetic(op, knowns, shapes):
    if any(k is None for k in knowns):
        return None
    t = op.results[0].type
    if not _static(t):
        return None
    flat = [np.broadcast_to(k, t.shape).reshape(-1) for k in knowns]
    if op.name == "stablehlo.compare":
        relation = _COMPARE[op.attr("comparison_direction").value]
        return [relation(a, b) for a, b in zip(*flat)]
    if op.name == "stablehlo.select":
        return [sympy.Piecewise((a, p), (b, True)) for p, a, b in zip(*flat)]
    if op.name == "stablehlo.not":
        return [sympy.Not(a) if ir.is_bool(t.element) else -a - 1 for a in flat[0]]
    if op.name in ("stablehlo.and", "stablehlo.or") and not ir.is_bool(t.element):
        return None
    return [_ARITHMETIC[op.name](a, b) for a, b in zip(*flat)]


# ---------------------------------------------------------------------- entry point

def refine(module: ir.Module, entry: str | None = None) -> tuple[ir.Module, Signature]:
    """The module with symbolic dimensions in its types, and how to read the symbols from
    the arguments; raises ``NeedsSpecialisation``."""
    main = module.functions[entry] if entry else module.main
    inference = _Inference(module)
    shapes, symbols = [], []
    # arguments counted as a call passes them: tokens are not passed
    tensors = [v for v in main.arguments if isinstance(v.type, ir.TensorType)]
    for value in main.arguments:
        t = value.type
        if not isinstance(t, ir.TensorType):
            shapes.append(None)
            continue
        i = tensors.index(value)
        dims = []
        for d, size in enumerate(t.shape):
            if size is None:
                name = f"arg{i}_dim{d}"
                symbols.append(SymbolSource(name, i, d))
                dims.append(symbol(name))
            else:
                dims.append(size)
        shapes.append(tuple(dims))
    try:
        refined, _, _ = inference.function(main, shapes, [None] * len(shapes), main.name)
    except NeedsSpecialisation as exc:  # what is known so far: checked before specialising
        exc.signature = _signature(symbols, inference)
        raise
    functions = dict(inference.functions)
    functions[main.name] = refined
    module = dataclasses.replace(module, functions=ir.freeze(functions))
    if inference.aliases:
        module = _renamed(module, {s: inference.resolve(s) for s in inference.aliases})
    names = _names(symbols, inference.renames)
    if any(old != new for old, new in names.items()):
        module = _renamed(module, {symbol(old): symbol(new) for old, new in names.items()})
    return module, _signature(symbols, inference)


def _signature(symbols: Sequence[SymbolSource], inference: _Inference) -> Signature:
    """The symbols under their final names, and the checks found, in those names."""
    names = _names(symbols, inference.renames)
    substitute = {sympy.Symbol(old): sympy.Symbol(new) for old, new in names.items()}
    checks = tuple(Check(str(sympy.sympify(c.condition).subs(substitute)), c.message,
                         tuple(str(sympy.sympify(v).subs(substitute)) for v in c.values))
                   for c in inference.checks)
    return Signature(tuple(SymbolSource(names[s.name], s.argument, s.dim) for s in symbols),
                     checks)


def _names(symbols: Sequence[SymbolSource], renames: dict) -> dict[str, str]:
    """Each symbol's final name: the dimension variable JAX named it after, if any."""
    names = {s.name: s.name for s in symbols}
    for old, new in renames.items():
        new = re.sub(r"\W", "_", new)
        if new not in names.values() and re.fullmatch(r"[A-Za-z_]\w*", new):
            names[str(old)] = new
    return names


def _renamed(module: ir.Module, mapping: dict) -> ir.Module:
    """``module`` with its symbols renamed in every type."""
    cache: dict[int, ir.Value] = {}

    def value(v: ir.Value) -> ir.Value:
        if id(v) not in cache:
            t = v.type
            if is_symbolic(t):
                t = dataclasses.replace(t, shape=tuple(
                    _dim(sympy.sympify(d).xreplace(mapping)) for d in t.shape))
            cache[id(v)] = ir.Value(v.name, t)
        return cache[id(v)]

    def block(b: ir.Block) -> ir.Block:
        return ir.Block(tuple(map(value, b.arguments)), tuple(map(op, b.ops)))

    def op(o: ir.Op) -> ir.Op:
        return dataclasses.replace(
            o, operands=tuple(map(value, o.operands)), results=tuple(map(value, o.results)),
            regions=tuple(ir.Region(tuple(map(block, r.blocks))) for r in o.regions))

    functions = {}
    for name, f in module.functions.items():
        body = ir.Region(tuple(map(block, f.body.blocks)))
        functions[name] = dataclasses.replace(
            f, arguments=body.entry.arguments, body=body, result_types=tuple(
                value(v).type for v in body.entry.terminator.operands))
    return dataclasses.replace(module, functions=ir.freeze(functions))


def symbolic_ops() -> list[str]:
    """The ops (besides every elementwise op) that keep symbolic sizes."""
    return sorted(_SHAPE_RULES)
