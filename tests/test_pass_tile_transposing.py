"""The tile_transposing pass: a map that transposes a large array runs in tiles."""

import dace

import hlo2dace
from hlo2dace.machine import current_machine

from pass_util import check_pass, operands


def _maps(fun, *args, disable=()):
    sdfg = hlo2dace.jit(fun, disable_passes=disable).lower(*args).as_sdfg()
    return [n.map for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.MapEntry)]


def test_a_large_transpose_runs_in_tiles_a_small_one_does_not():
    x, = operands((600, 500))
    tile = current_machine().transpose_tile
    tiled = {tuple(m.params): m for m in _maps(lambda x: x.T + 1.0, x)}
    assert set(tiled) == {("tile___i0", "tile___i1"), ("__i0", "__i1")}
    inner = tiled[("__i0", "__i1")]
    assert inner.schedule == dace.ScheduleType.Sequential
    assert [int(n) for n in inner.range.size()] == [tile, tile]
    assert len(_maps(lambda x: x.T + 1.0, x, disable=("tile_transposing",))) == 1
    small, = operands((40, 30))
    assert len(_maps(lambda x: x.T + 1.0, small)) == 1
    check_pass("tile_transposing", lambda x: x.T + 1.0, x)
