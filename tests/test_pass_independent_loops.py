"""The independent_loops pass (C++): ``#pragma GCC ivdep`` on loops whose iterations the
SDFG passes marked independent."""

from pass_util import built_code, operands


def test_a_merged_loop_that_gathers_is_marked():
    """Rows of 5 merged, a broadcast row gathered (enough ops per element to pay for it:
    the collapse_short_rows pass marks the loop)."""
    x, p = operands((40, 30, 5), (5,), dtype="float64")

    def f(x, p):
        y = x + p
        for _ in range(16):
            y = y * 3 - x
        return y

    code = built_code(f, x, p)
    assert "ivdep" in code or "parallel for simd" in code
    plain = built_code(f, x, p, disable=["independent_loops"])
    assert "ivdep" not in plain and "parallel for simd" not in plain
