"""The scatter_per_window pass: a select_and_scatter whose windows share no element (max
pooling's gradient) selects once per window and writes its choice."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pass_util import check_pass, planned


def _max_pool(y, window, strides, padding):
    return lax.reduce_window(y, -jnp.inf, lax.max, window, strides, padding)


def test_max_pooling_gradients_select_once_per_window():
    """Windows that cover the input exactly, ones that leave its last row and column out
    (7 by 7), padded ones ("SAME" at odd sizes), and strides past the window: ties take
    the first element of a window, a NaN or an infinity is selected as XLA selects it,
    and elements no window selects keep the init value."""
    x = np.random.default_rng(3).standard_normal((2, 7, 8, 3)).astype(np.float32)
    x[0, 0, :2, 0] = 5.0            # a tie in one window
    x[1, 2, 3, 1] = np.nan
    x[1, 4, 4, 2], x[0, 6, 7, 0] = np.inf, -np.inf

    def pooled(y):
        return (_max_pool(y[:, :6], (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),   # exact cover
                _max_pool(y[:, :, :7], (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),  # left out
                _max_pool(y, (1, 2, 2, 1), (1, 2, 2, 1), "SAME"),             # padded
                _max_pool(y, (1, 2, 2, 1), (1, 3, 3, 1), "VALID"))            # strided

    def gradients(x):
        return jax.grad(lambda y: sum(jnp.sum(p * (k + 1.0))
                                      for k, p in enumerate(pooled(y))))(x)

    check_pass("scatter_per_window", gradients, x)


def _select_and_scatter(name: str, source: str, windows: int, window: int) -> str:
    """``name``: a select_and_scatter of ``%x`` (8x8) with ``window`` x ``window`` windows
    of stride 2, ``windows`` x ``windows`` of them (the source ``source``)."""
    return f"""
          {name} = "stablehlo.select_and_scatter"(%x, {source}, %0) ({{
            ^bb0(%a: tensor<f32>, %b: tensor<f32>):
              %c = stablehlo.compare GE, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
              stablehlo.return %c : tensor<i1>
          }}, {{
            ^bb0(%a: tensor<f32>, %b: tensor<f32>):
              %c = stablehlo.add %a, %b : tensor<f32>
              stablehlo.return %c : tensor<f32>
          }}) {{window_dimensions = array<i64: {window}, {window}>,
              window_strides = array<i64: 2, 2>}}
            : (tensor<8x8xf32>, tensor<{windows}x{windows}xf32>, tensor<f32>)
            -> tensor<8x8xf32>"""


def test_overlapping_windows_are_gathered_per_element():
    text = planned(f"""
        func.func @main(%x: tensor<8x8xf32>, %s: tensor<3x3xf32>, %t: tensor<4x4xf32>)
            -> (tensor<8x8xf32>, tensor<8x8xf32>) {{
          %0 = stablehlo.constant dense<0.0> : tensor<f32>{_select_and_scatter("%1", "%s", 3, 3)}
          {_select_and_scatter("%2", "%t", 4, 2).strip()}
          return %1, %2 : tensor<8x8xf32>, tensor<8x8xf32>
        }}""", "scatter_per_window")
    lines = {line.split(" = ")[0]: line for line in text.splitlines() if " = " in line}
    assert "scatter_per_window" not in lines["%1"]
    assert "scatter_per_window" in lines["%2"]
