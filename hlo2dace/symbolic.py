"""Symbolic shapes: one binary for every size of a shape-polymorphic module.

Each dynamic (``?``) dimension of the entry function's arguments becomes a DaCe symbol.
``refine`` infers every other value's dimensions as expressions of those symbols, op by op,
and tracks the contents of small integer tensors computed from dimension sizes
(``get_dimension_size`` and the arithmetic JAX emits around it), so that the shape operands
of dynamic ops and the predicates of JAX's shape assertions are known as expressions too. It
returns the module with those expressions in its types: the translators of the ops whose
records have a ``shape_rule`` (and of every elementwise op) emit maps, arrays and library
nodes sized by symbols, whose values the runtime reads from the arguments' shapes at each
call. The rules live beside the ops' translators (``registry.OpRecord``): this module is the
engine that walks the module and asks them, and the helpers they use.

An op without a rule whose types are dynamic raises ``NeedsSpecialisation``: the module is
then compiled once per concrete argument shape (``normalize.specialise``), as XLA does.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Sequence

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

class Inference:
    """The walk of ``refine`` and what the shape rules use: ``unify``, ``require``, the
    module's functions, the checks and the symbols' aliases found so far."""

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
            dim = as_dim(dim.xreplace(self.aliases))
        return dim

    # -- the walk
    def function(self, function: ir.Function, shapes: Sequence[tuple], knowns: Sequence,
                 name: str) -> tuple[ir.Function, list[tuple], list]:
        env = Env()
        arguments = []
        for value, shape, known in zip(function.arguments, shapes, knowns):
            arguments.append(self.refined_value(value, shape, env.shape))
            if known is not None:
                env.known[value.name] = known
        block, results, result_knowns = self.block(function.body.entry, arguments, env)
        refined = dataclasses.replace(
            function, name=name, arguments=tuple(arguments),
            result_types=tuple(v.type for v in block.terminator.operands),
            body=ir.Region((block,)))
        return refined, results, result_knowns

    def refined_value(self, value: ir.Value, shape: tuple | None, env_shape: dict) -> ir.Value:
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

    def block(self, block: ir.Block, arguments: Sequence[ir.Value], env: Env
              ) -> tuple[ir.Block, list, list]:
        """Refine ``block`` whose arguments become ``arguments``; ``env`` holds what the
        enclosing blocks defined (regions read values from above)."""
        env.rename.update({old.name: new for old, new in zip(block.arguments, arguments)})
        ops = [self.op(op, env) for op in block.ops]
        terminator = ops[-1]
        return (ir.Block(tuple(arguments), tuple(ops)),
                [env.shape.get(v.name) for v in terminator.operands],
                [env.known.get(v.name) for v in terminator.operands])

    def op(self, op: ir.Op, env: Env) -> ir.Op:
        """``op`` with symbolic sizes in its result types: its record's shape rule (or the
        elementwise one) gives them, its value rule the contents of small integer results;
        dynamic ops become their static forms. One op at a time, so a rule sees only
        what refined operands it needs."""
        operands = tuple(env.rename.get(v.name, v) for v in op.operands)
        shapes = [env.shape.get(v.name) for v in operands]
        knowns = [env.known.get(v.name) for v in operands]
        dynamic = any(isinstance(v.type, ir.TensorType) and not is_static(v.type)
                      for v in (*operands, *op.results))
        from .translate import registry

        rule = registry.record(op.name).shape_rule
        if rule is None and registry.elementwise_rule(op) is not None:
            rule = elementwise_shape
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
        value_rule = registry.record(op.name).value_rule
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
        if refined.static_form is not None:  # the shape operand is in the result type now
            name, kept = refined.static_form
            operands = operands[:kept]
        else:
            name = op.name
        return dataclasses.replace(op, name=name, operands=operands, results=tuple(results),
                                   regions=refined.regions, attributes=refined.attributes)


@dataclass
class Env:
    """What a block sees: refined values, their shapes and known contents, by name."""

    rename: dict = dataclasses.field(default_factory=dict)
    shape: dict = dataclasses.field(default_factory=dict)
    known: dict = dataclasses.field(default_factory=dict)

    def inner(self) -> Env:
        return Env(dict(self.rename), dict(self.shape), dict(self.known))


@dataclass(frozen=True)
class Refined:
    """What a shape rule found: result shapes, and for ops with regions or callees the
    rewritten regions and attributes, and the results' known contents; for a dynamic op,
    its static form: the op it becomes and how many of its operands it keeps."""

    shapes: list
    regions: tuple = ()
    attributes: Any = None
    knowns: list | None = None
    static_form: tuple[str, int] | None = None


def is_static(t: ir.TensorType) -> bool:
    """Whether every dimension of ``t`` is a number (not a symbol, not unknown)."""
    return all(isinstance(d, (int, np.integer)) for d in t.shape)


def elementwise_shape(inference: Inference, op, operands, shapes, knowns, env):
    """The shape rule of every elementwise op: the operands' dimensions are equal."""
    rank = op.results[0].type.rank
    shape = [None] * rank
    for s in shapes:
        if s is not None and len(s) == rank:
            shape = [inference.unify(a, b, op) for a, b in zip(shape, s)]
    return [tuple(shape)] * len(op.results)


def declared(inference, op, operands, shapes, knowns, env):
    """The shape rule of ops whose results have their declared (static) types."""
    return [None] * len(op.results)


def same_shapes(inference, op, operands, shapes, knowns, env):
    """The shape rule of ops whose results have their operands' shapes."""
    return shapes[:len(op.results)]


def known_dims(op: ir.Op, knowns, k: int) -> list[Dim]:
    """The contents of operand ``k`` (a shape operand) as dimensions; NeedsSpecialisation
    if they are not known from the argument shapes."""
    known = knowns[k]
    if known is None:
        raise NeedsSpecialisation(op.name, f"operand {k} is not known from the argument "
                                  "shapes", op.location)
    return [as_dim(v) for v in np.asarray(known).reshape(-1)]


def as_dim(value: Any) -> Dim:
    value = sympy.sympify(value)
    return int(value) if value.is_Integer else value


def check_scalar_body(op: ir.Op) -> None:
    """A reducer body works on static (0-d) values; NeedsSpecialisation otherwise."""
    for region in op.regions:
        for inner in region.entry.ops:
            if any(isinstance(v.type, ir.TensorType) and not v.type.is_static
                   for v in (*inner.operands, *inner.results)):
                raise NeedsSpecialisation(op.name, "a dynamic shape in its body", op.location)


def flat_values(op: ir.Op, knowns) -> list | None:
    """The operands' known contents broadcast to the result's static shape and flattened
    (for the value rules of elementwise ops), or None if one is not known."""
    t = op.results[0].type
    if any(k is None for k in knowns) or not is_static(t):
        return None
    return [np.broadcast_to(k, t.shape).reshape(-1) for k in knowns]


# ---------------------------------------------------------------------- entry point

def refine(module: ir.Module, entry: str | None = None) -> tuple[ir.Module, Signature]:
    """The module with symbolic dimensions in its types, and how to read the symbols from
    the arguments; raises ``NeedsSpecialisation``."""
    main = module.functions[entry] if entry else module.main
    inference = Inference(module)
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


def _signature(symbols: Sequence[SymbolSource], inference: Inference) -> Signature:
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


def dimension_groups(module: ir.Module, entry: str | None = None) -> list[list[str]]:
    """The entry function's symbolic dimensions, grouped where the module's shape checks
    require them equal (JAX checks that every argument's ``b`` is the same ``b``); each
    group's first name is the one a user knows: JAX's dimension variable where the module
    names one, else the first dimension's."""
    main = module.functions[entry] if entry else module.main
    if not has_dynamic_types(main):
        return []
    try:
        signature = refine(module, entry)[1]
    except NeedsSpecialisation as exc:
        signature = exc.signature
    names = [s.name for s in signature.symbols]
    group = {name: [name] for name in names}
    for check in signature.checks:
        condition = sympy.sympify(check.condition)
        if isinstance(condition, sympy.Eq) and all(
                isinstance(side, sympy.Symbol) and str(side) in group for side in condition.args):
            first, second = (group[str(side)] for side in condition.args)
            if first is not second:
                first.extend(second)
                for name in second:
                    group[name] = first
    groups = []
    for name in names:
        members = group[name]
        if members not in groups:
            groups.append(members)
    generated = re.compile(r"arg\d+_dim\d+")
    return [sorted(members, key=lambda n: (generated.fullmatch(n) is not None, names.index(n)))
            for members in groups]


def _renamed(module: ir.Module, mapping: dict) -> ir.Module:
    """``module`` with its symbols renamed in every type."""
    cache: dict[int, ir.Value] = {}

    def value(v: ir.Value) -> ir.Value:
        if id(v) not in cache:
            t = v.type
            if is_symbolic(t):
                t = dataclasses.replace(t, shape=tuple(
                    as_dim(sympy.sympify(d).xreplace(mapping)) for d in t.shape))
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
