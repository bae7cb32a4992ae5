"""The expensive_ops_alone pass: an expensive op of a map over short rows that reads
slices runs in a map of its own, over its operand's contiguous array."""

import re

import jax.numpy as jnp
import numpy as np
import pytest

from pass_util import check_pass, code_of, operands, planned

#: a map over rows of 3 of a 32 x 32 x 4 array's slices: ``%t`` is computed alone
SLICED = """
    func.func @main(%x: tensor<32x32x4xf64>, %y: tensor<32x32x4xf64>)
        -> tensor<29x28x3xf64> {
      %0 = stablehlo.slice %x [1:30, 2:30, 1:4] : (tensor<32x32x4xf64>) -> tensor<29x28x3xf64>
      %1 = stablehlo.slice %y [1:30, 2:30, 0:3] : (tensor<32x32x4xf64>) -> tensor<29x28x3xf64>
      %2 = stablehlo.multiply %0, %1 : tensor<29x28x3xf64>
      %t = stablehlo.OP %2 : tensor<29x28x3xf64>
      %4 = stablehlo.add %t, %0 : tensor<29x28x3xf64>
      return %4 : tensor<29x28x3xf64>
    }"""


def _decided(source: str) -> dict[str, str]:
    text = planned(source, "fuse_elementwise", "expensive_ops_alone")
    return {line.split(" = ")[0].strip(): line for line in text.splitlines() if " = " in line}


@pytest.mark.parametrize("op", ["tanh", "exponential", "log", "sine"])
def test_an_expensive_op_of_sliced_short_rows_is_alone(op):
    lines = _decided(SLICED.replace("OP", op))
    assert "#h2d.own_map<row = 3>" in lines["%3"]  # %t, numbered
    assert "own_map" not in lines["%2"] + lines["%4"]


@pytest.mark.parametrize("source", [
    # a cheap op
    SLICED.replace("OP", "negate"),
    # no slice: the map's rows are contiguous, and collapse_short_rows merges them
    """
    func.func @main(%x: tensor<29x28x3xf64>) -> tensor<29x28x3xf64> {
      %2 = stablehlo.multiply %x, %x : tensor<29x28x3xf64>
      %t = stablehlo.tanh %2 : tensor<29x28x3xf64>
      %4 = stablehlo.add %t, %x : tensor<29x28x3xf64>
      return %4 : tensor<29x28x3xf64>
    }""",
    # a broadcast row is read contiguously
    """
    func.func @main(%x: tensor<29x28x3xf64>, %r: tensor<3xf64>) -> tensor<29x28x3xf64> {
      %0 = stablehlo.broadcast_in_dim %r, dims = [2] : (tensor<3xf64>) -> tensor<29x28x3xf64>
      %2 = stablehlo.multiply %x, %0 : tensor<29x28x3xf64>
      %t = stablehlo.tanh %2 : tensor<29x28x3xf64>
      return %t : tensor<29x28x3xf64>
    }""",
    # long rows vectorise whole in the fused map
    """
    func.func @main(%x: tensor<8x300xf64>) -> tensor<7x299xf64> {
      %0 = stablehlo.slice %x [1:8, 1:300] : (tensor<8x300xf64>) -> tensor<7x299xf64>
      %t = stablehlo.tanh %0 : tensor<7x299xf64>
      return %t : tensor<7x299xf64>
    }""",
    # one row: nothing to gather
    """
    func.func @main(%x: tensor<300xf64>) -> tensor<299xf64> {
      %0 = stablehlo.slice %x [1:300] : (tensor<300xf64>) -> tensor<299xf64>
      %t = stablehlo.tanh %0 : tensor<299xf64>
      return %t : tensor<299xf64>
    }""",
    # 8.6 MB, beyond any core's L2: written and read back, it costs more than gathers
    """
    func.func @main(%x: tensor<3000x52x7xf64>) -> tensor<2999x51x6xf64> {
      %0 = stablehlo.slice %x [1:3000, 1:52, 1:7] : (tensor<3000x52x7xf64>) -> tensor<2999x51x6xf64>
      %t = stablehlo.tanh %0 : tensor<2999x51x6xf64>
      return %t : tensor<2999x51x6xf64>
    }""",
], ids=["cheap", "contiguous", "broadcast", "long rows", "rank 1", "beyond L2"])
def test_refused(source):
    assert "own_map" not in planned(source, "fuse_elementwise", "expensive_ops_alone")


def test_refused_where_the_split_writes_too_many_values():
    """Eleven products computed before the ``tanh`` and summed after it: splitting the
    map there would write all eleven."""
    products = "\n".join(f"%c{k} = stablehlo.constant dense<{k + 2}.0> : tensor<29x28x3xf64>\n"
                         f"%p{k} = stablehlo.multiply %0, %c{k} : tensor<29x28x3xf64>"
                         for k in range(11))
    sums = "\n".join(f"%s{k + 1} = stablehlo.add %s{k}, %p{k} : tensor<29x28x3xf64>"
                     for k in range(11))
    text = planned(f"""
        func.func @main(%x: tensor<32x32x4xf64>) -> tensor<29x28x3xf64> {{
          %0 = stablehlo.slice %x [1:30, 2:30, 1:4] : (tensor<32x32x4xf64>) -> tensor<29x28x3xf64>
          {products}
          %s0 = stablehlo.tanh %0 : tensor<29x28x3xf64>
          {sums}
          return %s11 : tensor<29x28x3xf64>
        }}""", "fuse_elementwise", "expensive_ops_alone")
    assert "own_map" not in text


def _taper(x, y):
    """pyhpc isoneutral's slope taper over columns of 3 of 4."""
    sx = -x[1:-2, 2:-2, 1:] / (jnp.minimum(0.0, y[1:-2, 2:-2, :-1]) - 1e-20)
    taper = 0.5 * (1.0 + jnp.tanh((-jnp.abs(sx) + 1e-3) / 1e-3))
    return taper * sx * y[1:-2, 2:-2, 1:], taper


#: f64's tanh is XLA's to the bit; f32's a few units apart, which ``1 + tanh`` near -1
#: turns into a small absolute difference (3.7e-10 of 4.7e-7)
@pytest.mark.parametrize("dtype, tolerance", [("float64", {"ulp": 0}),
                                              ("float32", {"ulp": 4, "atol": 1e-7})])
def test_the_taper_computes_its_tanh_in_a_contiguous_map(dtype, tolerance):
    x, y = operands((32, 32, 4), (32, 32, 4), dtype=dtype)
    code = code_of(_taper, x, y)
    # the tanh's tasklet computes it alone
    tasklet = next(block for block in re.split(r"\n\s*\{\s*\n", code) if "tanh_(" in block)
    assert tasklet.count("// op ") == 1, tasklet
    check_pass("expensive_ops_alone", _taper, x, y, **tolerance)


def test_edge_values():
    """NaN, infinities, signed zeros and subnormals go through the map of its own as
    through the fused one."""
    x, y = operands((32, 32, 4), (32, 32, 4), dtype="float64")
    edges = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, -5e-324, 1e308])
    x.flat[::7] = np.resize(edges, x.size)[::7]
    y.flat[::5] = np.resize(edges[::-1], y.size)[::5]
    check_pass("expensive_ops_alone", _taper, x, y)
