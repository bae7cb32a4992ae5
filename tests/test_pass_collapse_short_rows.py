"""The collapse_short_rows pass: a short innermost loop runs merged with the loop around
it."""

import dace

import hlo2dace

from pass_util import check_pass, operands


def _sizes(fun, *args, disable=()):
    sdfg = hlo2dace.jit(fun, disable_passes=disable).lower(*args).as_sdfg()
    (the_map,) = [n.map for n, _ in sdfg.all_nodes_recursive()
                  if isinstance(n, dace.nodes.MapEntry)]
    return [int(n) for n in the_map.range.size()]


def test_rows_of_26_run_as_one_loop():
    x, = operands((200, 40, 26), dtype="float64")
    # the rows and the loop around them; the outer loop keeps enough to share out
    assert _sizes(lambda x: x * 3.0 - x * x, x) == [200, 40 * 26]
    assert _sizes(lambda x: x * 3.0 - x * x, x,
                  disable=("collapse_short_rows", "share_leading_loops")) == [200, 40, 26]
    long, = operands((200, 300))
    assert _sizes(lambda x: x * 3.0, long) == [200, 300]
    check_pass("collapse_short_rows", lambda x: x * 3.0 - x * x, x)
