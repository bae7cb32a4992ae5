"""Facts of an SDFG's maps that the SDFG passes (and the emitter) read: sizes as integers,
how far a map's parameters move a memlet, the top-level maps."""

from __future__ import annotations

from typing import Iterator

import dace
import numpy as np


def top_level_maps(sdfg: dace.SDFG) -> Iterator[tuple[dace.SDFGState, dace.nodes.MapEntry]]:
    """Every map of ``sdfg`` (nested SDFGs and control-flow regions included) that is not
    inside another map, with its state."""
    for state, _ in sdfg.all_nodes_recursive():
        if isinstance(state, dace.SDFGState):
            for node in state.nodes():
                if isinstance(node, dace.nodes.MapEntry) and state.entry_node(node) is None:
                    yield state, node


def memlet_steps(memlet: dace.Memlet, array, params, signed: bool = False
           ) -> dict[str, int] | None:
    """How many elements of ``array`` each of ``params`` moves ``memlet``'s element by
    (those that move it; with ``signed``, negative for a reversed one), or None where
    that is not known (not one element, a symbolic stride, an index that is not linear
    in them)."""
    if not isinstance(memlet.subset, dace.subsets.Range):
        return None
    steps: dict[str, int] = {}
    for (begin, end, _), stride in zip(memlet.subset.ranges, array.strides):
        if begin != end:
            return None
        for name, symbol in dace.symbolic.symlist(begin).items():
            if name not in params:
                continue
            factor = integer(dace.symbolic.pystr_to_symbolic(begin).diff(symbol))
            stride = integer(stride)
            if factor is None or stride is None:
                return None
            steps[name] = steps.get(name, 0) + (factor if signed else abs(factor)) * stride
    return steps


def integer(n) -> int | None:
    """``n`` (a Python, NumPy or sympy number, or a symbolic size) as an int, if it is one."""
    if isinstance(n, (int, np.integer)) or getattr(n, "is_Integer", False):
        return int(n)
    return None
