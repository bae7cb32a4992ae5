"""The share_leading_loops pass: a parallel map's short first loops are collapsed until
every thread has work."""

import dataclasses

import dace

import hlo2dace
from hlo2dace.machine import current_machine

from pass_util import operands


def _collapse(fun, *args, machine, disable=()):
    sdfg = hlo2dace.jit(fun, disable_passes=disable, machine=machine).lower(*args).as_sdfg()
    (the_map,) = [n.map for n, _ in sdfg.all_nodes_recursive()
                  if isinstance(n, dace.nodes.MapEntry)]
    return the_map.collapse


def test_a_leading_dimension_of_one():
    x, = operands((1, 300, 400))
    four = dataclasses.replace(current_machine(), threads=4)
    assert _collapse(lambda x: x * 3.0 - x * x, x, machine=four) == 2
    assert _collapse(lambda x: x * 3.0 - x * x, x, machine=four,
                     disable=("share_leading_loops",)) == 1
    wide, = operands((64, 300, 400))
    assert _collapse(lambda x: x * 3.0 - x * x, wide, machine=four) == 1
