"""The interchange_tiny_rows pass: a tiny innermost loop runs outside a long one."""

import dace

import hlo2dace

from pass_util import check_pass, operands


def _params(fun, *args, disable=()):
    sdfg = hlo2dace.jit(fun, disable_passes=disable).lower(*args).as_sdfg()
    return [list(n.map.params) for n, _ in sdfg.all_nodes_recursive()
            if isinstance(n, dace.nodes.MapEntry)]


def test_columns_of_3_sliced_from_4():
    """A window of a larger array: its rows are not contiguous across the loop around
    them, so they cannot be merged; the long loop runs innermost instead."""
    x, = operands((64, 64, 4), dtype="float64")

    def f(x):
        return x[:, :, 1:] * 2.0 + x[:, :, :3]

    assert _params(f, x) == [["__i0", "__i2", "__i1"]]
    assert _params(f, x, disable=("interchange_tiny_rows",)) == [["__i0", "__i1", "__i2"]]
    check_pass("interchange_tiny_rows", f, x)
