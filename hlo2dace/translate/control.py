"""Calls and control flow. ``func.call`` is inlined: the callee's ops join the caller's
dataflow, so its elementwise ops fuse with the caller's and no call boundary costs time
at run time (StableHLO has no recursion, so inlining always terminates)."""

from __future__ import annotations

from .. import ir
from .builder import Builder
from .registry import register


@register("func.call", "stablehlo.call")
def call(b: Builder, op: ir.Op) -> None:
    callee = op.attr("callee")
    name = callee.name if isinstance(callee, ir.SymbolRef) else str(callee)
    function = b.module.functions.get(name)
    if function is None:
        raise b.unsupported(f"call of unknown function @{name}")
    results = b.call_function(function, [b.binding(v) for v in op.operands])
    for value, binding in zip(op.results, results):
        b.bind(value, binding)
