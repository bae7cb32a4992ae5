"""Calls and control flow.

``func.call`` is inlined: the callee's ops join the caller's dataflow, so its elementwise
ops fuse with the caller's and no call boundary costs time at run time (StableHLO has no
recursion, so inlining always terminates).

``stablehlo.while`` becomes a DaCe ``LoopRegion``. A counted loop (``fori_loop`` and
``scan``: a signed counter compared ``LT`` with a constant or loop-invariant bound and
incremented by a positive constant) is a for-loop over a DaCe symbol, which DaCe's loop
passes can analyse; any other loop runs its condition region at the top of every
iteration and leaves through a ``BreakBlock``. Each carried value lives in one array for
the whole loop; a value the body passes through unchanged gets none. The body writes a new
carried value straight into its array where that is safe (an elementwise update, or a
``dynamic_update_slice``, ``scatter`` or inner loop into a carried tensor nothing else
reads, also through calls). A large carried value that cannot be updated in place (a stencil) gets a
second buffer in a counted loop, whose body is then emitted twice (from the first buffer
into the second, and back) so nothing is copied; other new values are copied back at the
end of the iteration.

``stablehlo.case`` and ``stablehlo.if`` become a ``ConditionalBlock`` whose branches write
their results into shared arrays; a constant index or predicate inlines its branch."""

from __future__ import annotations

from collections.abc import Sequence

import dace
import sympy
from dace.properties import CodeBlock
from dace.sdfg.state import BreakBlock, ConditionalBlock, ControlFlowRegion, LoopRegion

from .. import ir, symbolic
from ..plan.annotations import CarriesInPlace, InPlace, SwappedCarries, annotation
from .bindings import TOKEN, Array, Binding
from .builder import Builder
from .emitter import Element
from .known import counted_loop
from .registry import define, register
from .scopes import updates_in_place


def _call_shape(inference, op, operands, shapes, knowns, env):
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
    return symbolic.Refined(results, op.regions, ir.freeze({**op.attributes,
                                                            "callee": ir.SymbolRef(name)}),
                            result_knowns)


@register("func.call", "stablehlo.call", shape_rule=_call_shape)
def call(b: Builder, op: ir.Op) -> list[Binding]:
    function = b.callee(op)
    destinations = [b.claim(r) for r in op.results]
    results = b.call_function(function, [b.binding(v) for v in op.operands], destinations)
    for k, (value, binding, destination) in enumerate(zip(op.results, results, destinations)):
        # a destination that still holds a value read later (a loop-carried array whose
        # update the callee could not make in place) is written by the loop at its end
        if (destination is not None and not binding.lands_in(destination)
                and b.overwritable(destination, op)):
            target = Array(destination, value.type)
            b.emit.copy(b.resolve(binding), target)
            results[k] = target
    return results


# terminators: results of their declared types (none)
define("func.return", shape_rule=symbolic.declared)
define("stablehlo.return", shape_rule=symbolic.declared)


@register("stablehlo.after_all", "stablehlo.create_token", shape_rule=symbolic.declared)
def token(b: Builder, op: ir.Op) -> list[Binding]:
    """Tokens order side effects; the program runs its ops in order, so they hold nothing."""
    return [TOKEN]


# ---------------------------------------------------------------------------- while


def _tensor_types(b: Builder, op: ir.Op) -> None:
    for value in (*op.operands, *op.results):
        if not isinstance(value.type, ir.TensorType):
            raise b.unsupported(f"operand or result of type {value.type}",
                                ["tensors (tuples and tokens are not carried)"])


def _while_shape(inference, op, operands, shapes, knowns, env):
    """Loop-carried values keep their shapes; their contents are not known (they change)."""
    regions = []
    for region in op.regions:
        inner = env.inner()
        block = region.entry
        arguments = [inference.refined_value(v, s, inner.shape)
                     for v, s in zip(block.arguments, shapes)]
        refined, results, _ = inference.block(block, arguments, inner)
        if region is op.regions[1]:
            for before, after in zip(shapes, results):
                if before is not None:
                    for a, b in zip(before, after):
                        inference.unify(a, b, op)
        regions.append(ir.Region((refined,)))
    return symbolic.Refined(shapes, tuple(regions), op.attributes)


@register("stablehlo.while", shape_rule=_while_shape, carries=True, code_regions=True)
def while_loop(b: Builder, op: ir.Op) -> list[Binding]:
    _tensor_types(b, op)
    body = op.regions[1].entry
    returned = body.terminator.operands
    passed = {k for k, arg in enumerate(body.arguments) if returned[k] == arg}
    inits = [b.readable(v) for v in op.operands]
    counted = counted_loop(op)

    # carried values: one array each for the whole loop; pass-throughs keep their binding
    bindings: list[Binding] = list(inits)
    carries: dict[int, Array] = {}
    for k, (value, init) in enumerate(zip(op.results, inits)):
        if k in passed:
            continue
        if _reusable(b, op, k, init):  # the loop runs in its initial value's array
            carries[k] = bindings[k] = Array(init.name, value.type)
            continue
        carries[k] = b.allocate_result(value, "carry")
        if (counted is None or k != counted[0]) and not init.is_array(carries[k].name):
            b.emit.copy(init, carries[k])
        bindings[k] = carries[k]

    if counted is not None:
        _counted_loop(b, op, counted, bindings, carries)
    else:
        _general_loop(b, op, bindings, carries)
    return bindings


def _reusable(b: Builder, op: ir.Op, k: int, init: Binding) -> bool:
    """Whether carried value ``k`` may live in its initial value's array for the whole
    loop, with no copy: a temporary array (never an argument or a result), whose value
    nothing reads after the loop (nor another operand of it), for a result that need not
    end in an array of its own (a function result's). NPBench's vadv chains five loops
    over the same columns; each copied them whole."""
    planned = annotation(op, InPlace)
    return (planned is not None and k in planned.operands and isinstance(init, Array)
            and b.emit.sdfg.arrays[init.name].transient and not b.destination(op.results[k])
            and b.overwritable(init.name, op, op.operands[k]))


def _loop_bound(b: Builder, value: ir.Value, assignments: dict[str, str]) -> str:
    """An interstate expression for the 0-d integer ``value``: a literal is itself, else
    its array is read into a fresh symbol (added to ``assignments``)."""
    binding = b.readable(value)
    if binding.is_literal:
        return str(int(binding.value))
    symbol = b.emit.fresh("__bound")
    b.emit.sdfg.add_symbol(symbol, dace.int64)
    assignments[symbol] = f"{b.array(value).name}[0]"
    return symbol


def _counted_loop(b: Builder, op: ir.Op, counted, bindings: list[Binding],
                  carries: dict[int, Array]) -> None:
    """A DaCe for-loop over a symbol: the counter's array is written from the symbol
    first in each iteration, so the condition region is never run; carried values the
    plan swaps (``SwappedCarries``) alternate between two buffers, two iterations a trip."""
    counter, bound_slot, bound, step = counted
    assignments: dict[str, str] = {}
    start = _loop_bound(b, op.operands[counter], assignments)
    if bound_slot is None:
        end = str(int(bound))
    else:
        end = _loop_bound(b, op.operands[bound_slot], assignments)
        bindings[bound_slot] = b.readable(op.operands[bound_slot])
    variable = b.emit.fresh("__it")
    counter_array = carries[counter]
    ctype = "int32_t" if counter_array.type.element == "i32" else "int64_t"
    slots = [k for k in carries if k != counter]
    planned = annotation(op, SwappedCarries)
    swapped = [k for k in slots if planned is not None and k in planned.operands]
    stride = 2 * step if swapped else step
    loop = LoopRegion(b.emit.fresh("for"), f"{variable} < {end}", variable,
                      f"{variable} = {start}", f"{variable} = {variable} + {stride}")
    b.append_block(loop, assignments)
    with b.inside(loop):
        _write_symbol(b, counter_array, f"({ctype}){variable}")
        if not swapped:
            _body(b, op, bindings, carries, slots)
        else:  # two iterations per trip, the swapped values going to the spares and back
            spares = {k: b.emit.add_array("spare", carries[k].type) for k in swapped}
            _body(b, op, bindings, {**carries, **spares}, slots)
            second = ConditionalBlock(b.emit.fresh("second"))
            b.append_block(second)
            more = ControlFlowRegion(b.emit.fresh("more"))
            last = ControlFlowRegion(b.emit.fresh("last"))
            second.add_branch(f"{variable} + {step} < {end}", more)
            second.add_branch(None, last)
            with b.inside(more):
                _write_symbol(b, counter_array, f"({ctype})({variable} + {step})")
                _body(b, op, [spares.get(k, binding) for k, binding in enumerate(bindings)],
                      carries, slots)
            with b.inside(last):
                for k in swapped:
                    b.emit.copy(spares[k], carries[k])
    # the counter's final value: the first value of the sequence not below the bound
    _write_symbol(b, counter_array,
                  f"({ctype})(({start}) < ({end}) ? ({start}) + ((({end}) - ({start}) + "
                  f"{step - 1}) / {step}) * {step} : ({start}))")


def _write_symbol(b: Builder, target: Array, expression: str) -> None:
    """``target[0] = expression`` (of interstate symbols: the loop's counter)."""
    b.emit.map("counter", (), f"__out = {expression};", outputs={"__out": Element(target)})


def _general_loop(b: Builder, op: ir.Op, bindings: list[Binding],
                  carries: dict[int, Array]) -> None:
    cond = op.regions[0].entry
    loop = LoopRegion(b.emit.fresh("while"), "True")
    b.append_block(loop)
    with b.inside(loop):
        scope = b.nested_scope(cond, dict(zip((a.name for a in cond.arguments), bindings)))
        (flag,) = b.translate_block(cond, scope)
        with b.entered(scope):
            flag = b.resolve(flag)
            if flag.is_literal:
                stop = None if bool(flag.value) else "True"
            else:
                stop = f"not {b.array(cond.terminator.operands[0]).name}[0]"
        if stop is not None:
            exit_ = ConditionalBlock(b.emit.fresh("exit"))
            b.append_block(exit_)
            leave = ControlFlowRegion(b.emit.fresh("leave"))
            leave.add_node(BreakBlock(b.emit.fresh("break")), is_start_block=True)
            exit_.add_branch(CodeBlock(stop), leave)
        _body(b, op, bindings, carries, list(carries))


def _body(b: Builder, op: ir.Op, sources: Sequence[Binding], targets: dict[int, Array],
          slots: Sequence[int]) -> None:
    """One iteration of the loop body, reading the carried values from ``sources``: the new
    values of the carried ``slots`` end in their ``targets``, written there by the ops
    that compute them where the target is another buffer, the plan says so
    (``CarriesInPlace``) or ``updates_in_place`` allows, else copied at the end."""
    body = op.regions[1].entry
    returned = body.terminator.operands
    in_place = annotation(op, CarriesInPlace)
    destinations = {}
    for k in slots:
        value, source = returned[k], sources[k]
        if value.name in destinations or not any(value in o.results for o in body.ops):
            continue
        if not source.is_array(targets[k].name) or (in_place and k in in_place.operands):
            destinations[value.name] = targets[k].name
            continue
        for step in updates_in_place(b.module, body, body.arguments[k], value) or ():
            destinations.setdefault(step.name, targets[k].name)
    scope = b.nested_scope(body, dict(zip((a.name for a in body.arguments), sources)),
                           destinations, returned=slots)
    results = b.translate_block(body, scope)
    with b.entered(scope):
        b.close_all_clusters()
        copies = []
        for k in slots:
            binding = b.resolve(results[k])
            if not binding.is_array(targets[k].name):
                copies.append((k, binding))
        if copies:
            # stage the new values that read an array written below, so no copy
            # overwrites an array that another copy still reads
            written = {targets[k].name for k, _ in copies}
            b.new_state("stage")
            staged = []
            for k, binding in copies:
                if binding.data in written:
                    temporary = b.emit.add_array("next", binding.type)
                    b.emit.copy(binding, temporary)
                    binding = temporary
                staged.append((k, binding))
            b.new_state("carry")
            for k, binding in staged:
                b.emit.copy(binding, targets[k])


# ------------------------------------------------------------------------ case / if


def _branches_shape(inference, op, operands, shapes, knowns, env):
    regions, outcome = [], None
    for region in op.regions:
        refined, results, _ = inference.block(region.entry, [], env.inner())
        outcome = results if outcome is None else [
            None if a is None else tuple(inference.unify(x, y, op) for x, y in zip(a, b))
            for a, b in zip(outcome, results)]
        regions.append(ir.Region((refined,)))
    return symbolic.Refined(outcome, tuple(regions), op.attributes)


@register("stablehlo.case", "stablehlo.if", shape_rule=_branches_shape, code_regions=True)
def conditional(b: Builder, op: ir.Op) -> list[Binding]:
    """``case``: branch ``index`` (the last one when it is out of range); ``if``: the first
    region when the predicate holds, else the second."""
    _tensor_types(b, op)
    (selector,) = op.operands
    branches = [region.entry for region in op.regions]
    binding = b.readable(selector)
    if binding.is_literal:  # a constant selector: only its branch runs
        if op.name == "stablehlo.if":
            taken = 0 if bool(binding.value) else 1
        else:
            taken = int(binding.value)
            taken = taken if 0 <= taken < len(branches) else len(branches) - 1
        return _branch(b, branches[taken], None)
    targets = [b.allocate_result(v, "branch_result") for v in op.results]
    data = b.array(selector).name
    if op.name == "stablehlo.if":
        conditions = [f"{data}[0]", None]
    else:
        conditions = [f"{data}[0] == {j}" for j in range(len(branches) - 1)] + [None]
    block = ConditionalBlock(b.emit.fresh(op.name.rsplit(".", 1)[-1]))
    b.append_block(block)
    for condition, branch in zip(conditions, branches):
        region = ControlFlowRegion(b.emit.fresh("branch"))
        block.add_branch(condition, region)
        with b.inside(region):
            _branch(b, branch, targets)
    return targets


def _branch(b: Builder, block: ir.Block, targets: Sequence[Array] | None) -> list[Binding]:
    """Translate one branch in a scope of its own; with ``targets``, its results end in
    them (written there directly by the ops that compute them where possible)."""
    destinations = {}
    produced = {r.name for o in block.ops for r in o.results}
    for value, target in zip(block.terminator.operands, targets or ()):
        if value.name in produced and value.name not in destinations:
            destinations[value.name] = target.name
    scope = b.nested_scope(block, {}, destinations)
    results = b.translate_block(block, scope)
    if targets is None:
        return results
    with b.entered(scope):
        b.close_all_clusters()
        for binding, target in zip(results, targets):
            binding = b.resolve(binding)
            if not binding.is_array(target.name):
                b.emit.copy(binding, target)
    return list(targets)
