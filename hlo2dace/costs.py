"""What a compiled program costs, for ``Compiled.cost_analysis`` and ``memory_analysis``
(``jax.stages.Compiled``'s methods, with hlo2dace's own figures).

* ``flops`` and ``transcendentals`` come from the module's ops, counted as XLA's cost
  analysis counts them: one per element of each elementwise op's result (transcendental
  functions, the ops whose record says ``expensive``, apart), two per multiply-add of a
  product or a convolution, one per element a reduction folds in per op of its body. A
  loop's body and condition, and the costliest branch of a conditional, count once, as
  XLA counts them: the trip count is known only when the program runs.
* ``bytes accessed`` comes from the SDFG: what the program's maps, copies and library
  calls read and write in arrays (their memlets at the arrays), each state counted once.
  Fused elementwise ops exchange values in registers, so this is what hlo2dace's program
  moves, not what the ops would move one by one.
* The memory analysis: the arguments', results' and constants' bytes, and the
  transients' (every intermediate array the program allocates for itself; they live as
  long as the program, so their sum is its peak).

The op records must be registered (``hlo2dace.translate`` imported) before ``flops`` is
called: the SDFG's translation does it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import ir
from .translate.registry import elementwise_rule, record


def _elements(value: ir.Value) -> int:
    t = value.type
    return t.size if isinstance(t, ir.TensorType) and t.is_static else 0


def _block_flops(block: ir.Block) -> tuple[int, int]:
    """(flops, transcendentals) of one execution of ``block``'s ops."""
    flops = transcendentals = 0
    for op in block.ops:
        f, t = _op_flops(op)
        flops, transcendentals = flops + f, transcendentals + t
    return flops, transcendentals


def _body_per_element(op: ir.Op) -> tuple[int, int]:
    """(flops, transcendentals) of one application of a reducer body on scalars."""
    flops = transcendentals = 0
    for inner in op.regions[0].entry.ops:
        if elementwise_rule(inner) is not None:
            if record(inner.name).expensive:
                transcendentals += 1
            else:
                flops += 1
    return flops, transcendentals


def _op_flops(op: ir.Op) -> tuple[int, int]:
    if elementwise_rule(op) is not None and op.results:
        count = sum(_elements(v) for v in op.results)
        return (0, count) if record(op.name).expensive else (count, 0)
    if op.name == "stablehlo.dot_general":
        numbers = op.attr("dot_dimension_numbers")
        lhs = op.operands[0].type.shape
        contracted = math.prod(lhs[d] for d in numbers.get("lhs_contracting_dimensions", ()))
        return 2 * _elements(op.result) * contracted, 0
    if op.name == "stablehlo.convolution":
        kernel = op.operands[1].type
        out_features = kernel.shape[
            op.attr("dimension_numbers").get("kernel_output_feature_dimension")]
        return 2 * _elements(op.result) * (kernel.size // max(1, out_features)), 0
    if op.name in ("stablehlo.reduce", "stablehlo.reduce_window", "stablehlo.scatter",
                   "stablehlo.select_and_scatter") and op.regions:
        flops, transcendentals = _body_per_element(op)
        half = len(op.operands) // 2 if op.name != "stablehlo.scatter" else 1
        if op.name == "stablehlo.scatter":  # the updates are folded in
            applications = _elements(op.operands[-1])
        elif op.name == "stablehlo.reduce":
            applications = sum(_elements(v) for v in op.operands[:half]) - sum(
                _elements(v) for v in op.results)
        else:  # a window per result element
            window = op.attr("window_dimensions") or ()
            applications = _elements(op.results[0]) * math.prod(window)
        return flops * max(0, applications), transcendentals * max(0, applications)
    if op.name == "stablehlo.while":
        cond, body = (_block_flops(region.entry) for region in op.regions)
        return cond[0] + body[0], cond[1] + body[1]
    if op.name in ("stablehlo.case", "stablehlo.if") and op.regions:
        return max(_block_flops(region.entry) for region in op.regions)
    return 0, 0


def flops(entry: ir.Function) -> tuple[int, int]:
    """(flops, transcendentals) of one call of ``entry`` (see the module's docstring)."""
    return _block_flops(entry.body.entry)


def bytes_accessed(sdfg: Any) -> int | str:
    """The bytes the program's states read and write in arrays, each state once; an
    expression of the size symbols where the sizes are symbolic."""
    import dace

    total = 0
    for state in sdfg.states():
        scopes = state.scope_dict()
        for node in state.nodes():
            if not isinstance(node, dace.nodes.AccessNode) or scopes[node] is not None:
                continue
            size = node.desc(state).dtype.bytes
            for edge in (*state.in_edges(node), *state.out_edges(node)):
                memlet = edge.data
                if memlet.data is None or memlet.is_empty():
                    continue
                volume = memlet.subset.num_elements() if memlet.dynamic else memlet.volume
                total += volume * size
    return _number(total)


@dataclass(frozen=True)
class MemoryAnalysis:
    """``Compiled.memory_analysis()``: bytes, with the field names of jaxlib's
    ``CompiledMemoryStats`` where they mean the same. A size that depends on symbolic
    dimensions is an expression of them (a string)."""

    #: the compiled library's size on disk
    generated_code_size_in_bytes: int
    argument_size_in_bytes: int | str
    output_size_in_bytes: int | str
    #: the part of the outputs that may take donated arguments' buffers inside jax.jit
    alias_size_in_bytes: int | str
    #: the transients: every intermediate array, allocated once per program
    temp_size_in_bytes: int | str
    #: large constants, passed to the library as hidden arguments
    constant_size_in_bytes: int


def array_bytes(shape, dtype: Any) -> int | str:
    """The bytes of an array of ``shape`` (sizes or expressions of the symbols)."""
    import sympy

    return _number(sympy.Mul(*[sympy.sympify(d) for d in shape])
                   * np.dtype(dtype).itemsize)


def transient_bytes(sdfg: Any) -> int | str:
    """The bytes of every transient array of ``sdfg`` and of the SDFGs nested in it."""
    total = 0
    for _, _, descriptor in sdfg.arrays_recursive():
        if descriptor.transient and not isinstance(descriptor, _views()):
            total += descriptor.total_size * descriptor.dtype.bytes
    return _number(total)


def _views():
    import dace

    return (dace.data.View, dace.data.Reference)


def _number(value: Any) -> int | str:
    """An int where ``value`` is a number, else its expression as text."""
    try:
        return int(value)
    except TypeError:
        return str(value)
