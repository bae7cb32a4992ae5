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
``dynamic_update_slice`` or ``scatter`` into a carried tensor nothing else reads, also
through calls). A large carried value that cannot be updated in place (a stencil) gets a
second buffer in a counted loop, whose body is then emitted twice (from the first buffer
into the second, and back) so nothing is copied; other new values are copied back at the
end of the iteration.

``stablehlo.case`` and ``stablehlo.if`` become a ``ConditionalBlock`` whose branches write
their results into shared arrays; a constant index or predicate inlines its branch."""

from __future__ import annotations

from collections.abc import Sequence

import dace
from dace.properties import CodeBlock
from dace.sdfg.state import BreakBlock, ConditionalBlock, ControlFlowRegion, LoopRegion

from .. import ir
from .builder import TOKEN, Array, Binding, Builder, Literal, Pending, Scope, View, at_most
from .registry import elementwise_rule, register

#: carried values of at least this many elements alternate between two buffers in counted
#: loops instead of being copied back every iteration
SWAP_ELEMENTS = 1 << 14


@register("func.call", "stablehlo.call")
def call(b: Builder, op: ir.Op) -> None:
    function = b.callee(op)
    destinations = [b.scope.destinations.pop(r.name, None) for r in op.results]
    results = b.call_function(function, [b.binding(v) for v in op.operands], destinations)
    for value, binding, destination in zip(op.results, results, destinations):
        if destination is not None and not _lands_in(binding, destination):
            target = Array(destination, value.type)
            b.copy_into(b.resolve(binding), target)
            binding = target
        b.bind(value, binding)


def _lands_in(binding: Binding, destination: str) -> bool:
    """Whether ``binding`` is (or, once its cluster is emitted, will be) written into the
    array ``destination``."""
    if isinstance(binding, Pending):
        return binding.scope.destinations.get(binding.value.name) == destination or (
            binding.cluster.resolved.get(binding.key, Array("", binding.type)).name
            == destination)
    return isinstance(binding, Array) and binding.name == destination


@register("stablehlo.after_all", "stablehlo.create_token")
def token(b: Builder, op: ir.Op) -> None:
    """Tokens order side effects; the program runs its ops in order, so they hold nothing."""
    b.bind(op.result, TOKEN)


# ---------------------------------------------------------------------------- while


def _tensor_types(b: Builder, op: ir.Op) -> None:
    for value in (*op.operands, *op.results):
        if not isinstance(value.type, ir.TensorType):
            raise b.unsupported(f"operand or result of type {value.type}",
                                ["tensors (tuples and tokens are not carried)"])


def _splat(block: ir.Block, value: ir.Value):
    """The scalar of ``value`` if ``block`` defines it with a splat ``constant``."""
    for op in block.ops:
        if value in op.results and op.name == "stablehlo.constant":
            dense = op.attr("value")
            if isinstance(dense, ir.DenseElements) and dense.is_splat:
                return dense.array.reshape(-1)[0].item()
    return None


def _counted(op: ir.Op) -> tuple[int, int | None, int, int] | None:
    """``(counter, bound slot or None, bound constant, step)`` if ``op`` is a counted loop:
    the condition is ``compare LT, counter, bound`` on a signed integer, the bound a
    constant or a carried value the body passes through, and the body adds a positive
    constant to the counter."""
    cond, body = op.regions[0].entry, op.regions[1].entry
    compare = next((o for o in cond.ops if cond.terminator.operands
                    and cond.terminator.operands[0] in o.results), None)
    if (compare is None or compare.name != "stablehlo.compare"
            or str(compare.attr("comparison_direction")) != "LT"):
        return None
    lhs, rhs = compare.operands
    if lhs not in cond.arguments or lhs.type.element not in ("i32", "i64") or lhs.type.rank:
        return None
    counter = cond.arguments.index(lhs)
    bound_slot, bound = None, 0
    if rhs in cond.arguments:
        bound_slot = cond.arguments.index(rhs)
        if body.terminator.operands[bound_slot] != body.arguments[bound_slot]:
            return None
    else:
        bound = _splat(cond, rhs)
        if bound is None:
            return None
    step_value = body.terminator.operands[counter]
    increment = next((o for o in body.ops if step_value in o.results), None)
    if increment is None or increment.name != "stablehlo.add":
        return None
    a, c = increment.operands
    if c == body.arguments[counter]:
        a, c = c, a
    step = _splat(body, c)
    if a != body.arguments[counter] or not isinstance(step, int) or step <= 0:
        return None
    return counter, bound_slot, bound, step


def _in_place(function_block: ir.Block, argument: ir.Value, returned: ir.Value,
              functions) -> bool:
    """Whether ``returned`` may be written into the array that holds ``argument`` while
    the block runs: ``argument``'s only use is the op producing ``returned``, and that op
    reads it at the position it writes (elementwise), updates it in place
    (``dynamic_update_slice``, ``scatter``), or is a call whose callee does so."""
    users = [o for o in function_block.ops if any(argument == v for inner in o.walk()
                                                  for v in inner.operands)]
    if len(users) != 1 or returned not in users[0].results:
        return False
    (user,) = users
    if elementwise_rule(user) is not None:
        return True
    if user.name == "stablehlo.dynamic_update_slice":
        return user.operands[0] == argument and argument not in user.operands[1:]
    if user.name == "stablehlo.scatter":  # operands: n inputs, the indices, n updates
        k = user.operands.index(argument)
        return (k < len(user.results) and user.operands.count(argument) == 1
                and user.results[k] == returned)
    if user.name in ("func.call", "stablehlo.call"):
        callee = user.attr("callee")
        function = functions.get(callee.name if isinstance(callee, ir.SymbolRef) else "")
        if function is None or user.operands.count(argument) != 1:
            return False
        block = function.body.entry
        parameter = function.arguments[user.operands.index(argument)]
        result = block.terminator.operands[user.results.index(returned)]
        return _in_place(block, parameter, result, functions)
    return False


@register("stablehlo.while")
def while_loop(b: Builder, op: ir.Op) -> None:
    _tensor_types(b, op)
    body = op.regions[1].entry
    returned = body.terminator.operands
    passed = {k for k, arg in enumerate(body.arguments) if returned[k] == arg}
    inits = [b.operand(v) for v in op.operands]
    counted = _counted(op)

    # carried values: one array each for the whole loop; pass-throughs keep their binding
    bindings: list[Binding] = list(inits)
    carries: dict[int, Array] = {}
    for k, (value, init) in enumerate(zip(op.results, inits)):
        if k in passed:
            continue
        carries[k] = b.result_array(value, "carry")
        if counted is None or k != counted[0]:
            b.copy_into(init, carries[k])
        bindings[k] = carries[k]

    if counted is not None:
        _counted_loop(b, op, counted, bindings, carries)
    else:
        _general_loop(b, op, bindings, carries)
    for k, value in enumerate(op.results):
        b.bind(value, bindings[k])


def _loop_bound(b: Builder, value: ir.Value, assignments: dict[str, str]) -> str:
    """An interstate expression for the 0-d integer ``value``: a literal is itself, else
    its array is read into a fresh symbol (added to ``assignments``)."""
    binding = b.operand(value)
    if isinstance(binding, Literal):
        return str(int(binding.value))
    symbol = b.fresh("__bound")
    b.sdfg.add_symbol(symbol, dace.int64)
    assignments[symbol] = f"{b.array(value).name}[0]"
    return symbol


def _counted_loop(b: Builder, op: ir.Op, counted, bindings: list[Binding],
                  carries: dict[int, Array]) -> None:
    counter, bound_slot, bound, step = counted
    assignments: dict[str, str] = {}
    start = _loop_bound(b, op.operands[counter], assignments)
    if bound_slot is None:
        end = str(int(bound))
    else:
        end = _loop_bound(b, op.operands[bound_slot], assignments)
        bindings[bound_slot] = b.operand(op.operands[bound_slot])
    variable = b.fresh("__it")
    counter_array = carries[counter]
    ctype = "int32_t" if counter_array.type.element == "i32" else "int64_t"
    slots = [k for k in carries if k != counter]
    swapped = _swapped_slots(b, op, slots)
    stride = 2 * step if swapped else step
    loop = LoopRegion(b.fresh("for"), f"{variable} < {end}", variable,
                      f"{variable} = {start}", f"{variable} = {variable} + {stride}")
    b.append_block(loop, assignments)
    with b.inside(loop):
        _write_symbol(b, counter_array, f"({ctype}){variable}")
        if not swapped:
            _body(b, op, bindings, carries, slots)
        else:  # two iterations per trip, the swapped values going to the spares and back
            spares = {k: b.add_array("spare", carries[k].type) for k in swapped}
            _body(b, op, bindings, {**carries, **spares}, slots)
            second = ConditionalBlock(b.fresh("second"))
            b.append_block(second)
            more, last = ControlFlowRegion(b.fresh("more")), ControlFlowRegion(b.fresh("last"))
            second.add_branch(f"{variable} + {step} < {end}", more)
            second.add_branch(None, last)
            with b.inside(more):
                _write_symbol(b, counter_array, f"({ctype})({variable} + {step})")
                _body(b, op, [spares.get(k, binding) for k, binding in enumerate(bindings)],
                      carries, slots)
            with b.inside(last):
                for k in swapped:
                    b.copy_into(spares[k], carries[k])
    # the counter's final value: the first value of the sequence not below the bound
    _write_symbol(b, counter_array,
                  f"({ctype})(({start}) < ({end}) ? ({start}) + ((({end}) - ({start}) + "
                  f"{step - 1}) / {step}) * {step} : ({start}))")


def _swapped_slots(b: Builder, op: ir.Op, slots: Sequence[int]) -> list[int]:
    """The carried values of a counted loop that alternate between two buffers: those an op
    of the body computes, that cannot be updated in place (a stencil reads neighbours),
    and that are large enough for a copy per iteration to cost more than a second copy
    of the body's code."""
    body = op.regions[1].entry
    returned = body.terminator.operands
    swapped, seen = [], set()
    for k in slots:
        value = returned[k]
        if (value.name not in seen and not at_most(value.type.size, SWAP_ELEMENTS - 1)
                and any(value in o.results for o in body.ops)
                and not _in_place(body, body.arguments[k], value, b.module.functions)):
            swapped.append(k)
            seen.add(value.name)
    return swapped


def _write_symbol(b: Builder, target: Array, expression: str) -> None:
    state = b.state
    tasklet = state.add_tasklet(b.fresh("counter"), {}, {"__out"}, f"__out = {expression};",
                                language=dace.Language.CPP)
    state.add_edge(tasklet, "__out", b.write(target.name), None,
                   dace.Memlet(f"{target.name}[0]"))


def _general_loop(b: Builder, op: ir.Op, bindings: list[Binding],
                  carries: dict[int, Array]) -> None:
    cond = op.regions[0].entry
    loop = LoopRegion(b.fresh("while"), "True")
    b.append_block(loop)
    with b.inside(loop):
        env = b.scope.env.new_child(dict(zip((a.name for a in cond.arguments), bindings)))
        scope = Scope.of(env, cond)
        saved = b.current_op
        (flag,) = b.translate_block(cond, scope)
        b.current_op = saved
        outer, b.scope = b.scope, scope
        flag = b.resolve(flag)
        if isinstance(flag, Literal):
            stop = None if bool(flag.value) else "True"
        else:
            stop = f"not {b.array(cond.terminator.operands[0]).name}[0]"
        b.scope = outer
        if stop is not None:
            exit_ = ConditionalBlock(b.fresh("exit"))
            b.append_block(exit_)
            leave = ControlFlowRegion(b.fresh("leave"))
            leave.add_node(BreakBlock(b.fresh("break")), is_start_block=True)
            exit_.add_branch(CodeBlock(stop), leave)
        _body(b, op, bindings, carries, list(carries))


def _body(b: Builder, op: ir.Op, sources: Sequence[Binding], targets: dict[int, Array],
          slots: Sequence[int]) -> None:
    """One iteration of the loop body, reading the carried values from ``sources``: the new
    values of the carried ``slots`` end in their ``targets``, written there by the ops
    that compute them where the target is another buffer or ``_in_place`` allows, else
    copied at the end."""
    body = op.regions[1].entry
    returned = body.terminator.operands
    destinations = {}
    for k in slots:
        value, source = returned[k], sources[k]
        other_buffer = not (isinstance(source, Array) and source.name == targets[k].name)
        if value.name not in destinations and any(value in o.results for o in body.ops) and (
                other_buffer or _in_place(body, body.arguments[k], value, b.module.functions)):
            destinations[value.name] = targets[k].name
    env = b.scope.env.new_child(dict(zip((a.name for a in body.arguments), sources)))
    scope = Scope.of(env, body, destinations, returned=slots)
    saved = b.current_op
    results = b.translate_block(body, scope)
    b.current_op = saved
    outer, b.scope = b.scope, scope
    b.close_all_clusters()
    copies = []
    for k in slots:
        binding = b.resolve(results[k])
        if isinstance(binding, Array) and binding.name == targets[k].name:
            continue
        copies.append((k, binding))
    if copies:
        # stage the new values that read an array written below, so no copy overwrites
        # an array that another copy still reads
        written = {targets[k].name for k, _ in copies}
        b.new_state("stage")
        staged = []
        for k, binding in copies:
            source = binding.source if isinstance(binding, View) else binding
            if isinstance(source, Array) and source.name in written:
                temporary = b.add_array("next", binding.type)
                b.copy_into(binding, temporary)
                binding = temporary
            staged.append((k, binding))
        b.new_state("carry")
        for k, binding in staged:
            b.copy_into(binding, targets[k])
    b.scope = outer


# ------------------------------------------------------------------------ case / if


@register("stablehlo.case", "stablehlo.if")
def conditional(b: Builder, op: ir.Op) -> None:
    """``case``: branch ``index`` (the last one when it is out of range); ``if``: the first
    region when the predicate holds, else the second."""
    _tensor_types(b, op)
    (selector,) = op.operands
    branches = [region.entry for region in op.regions]
    binding = b.operand(selector)
    if isinstance(binding, Literal):  # a constant selector: only its branch runs
        if op.name == "stablehlo.if":
            taken = 0 if bool(binding.value) else 1
        else:
            taken = int(binding.value)
            taken = taken if 0 <= taken < len(branches) else len(branches) - 1
        results = _branch(b, branches[taken], None)
        for value, result in zip(op.results, results):
            b.bind(value, result)
        return
    targets = [b.result_array(v, "branch_result") for v in op.results]
    data = b.array(selector).name
    if op.name == "stablehlo.if":
        conditions = [f"{data}[0]", None]
    else:
        conditions = [f"{data}[0] == {j}" for j in range(len(branches) - 1)] + [None]
    block = ConditionalBlock(b.fresh(op.name.rsplit(".", 1)[-1]))
    b.append_block(block)
    for condition, branch in zip(conditions, branches):
        region = ControlFlowRegion(b.fresh("branch"))
        block.add_branch(condition, region)
        with b.inside(region):
            _branch(b, branch, targets)
    for value, target in zip(op.results, targets):
        b.bind(value, target)


def _branch(b: Builder, block: ir.Block, targets: Sequence[Array] | None) -> list[Binding]:
    """Translate one branch in a scope of its own; with ``targets``, its results end in
    them (written there directly by the ops that compute them where possible)."""
    destinations = {}
    produced = {r.name for o in block.ops for r in o.results}
    for value, target in zip(block.terminator.operands, targets or ()):
        if value.name in produced and value.name not in destinations:
            destinations[value.name] = target.name
    scope = Scope.of(b.scope.env.new_child(), block, destinations)
    saved = b.current_op
    results = b.translate_block(block, scope)
    b.current_op = saved
    if targets is None:
        return results
    outer, b.scope = b.scope, scope
    b.close_all_clusters()
    for binding, target in zip(results, targets):
        binding = b.resolve(binding)
        if not (isinstance(binding, Array) and binding.name == target.name):
            b.copy_into(binding, target)
    b.scope = outer
    return list(targets)
