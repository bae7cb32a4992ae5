"""The pair_matvecs pass: two matrix-vector products of one large matrix in one pass."""

import jax.numpy as jnp

from pass_util import check_pass, expect, operands, planned


def _module(n):
    return f"""
        func.func @main(%a: tensor<{n}x{n}xf64>, %x: tensor<{n}xf64>, %y: tensor<{n}xf64>)
            -> (tensor<{n}xf64>, tensor<{n}xf64>, tensor<{n}xf64>) {{
          %0 = stablehlo.dot_general %a, %x, contracting_dims = [1] x [0]
            : (tensor<{n}x{n}xf64>, tensor<{n}xf64>) -> tensor<{n}xf64>
          %1 = stablehlo.dot_general %y, %a, contracting_dims = [0] x [0]
            : (tensor<{n}xf64>, tensor<{n}x{n}xf64>) -> tensor<{n}xf64>
          %2 = stablehlo.dot_general %0, %a, contracting_dims = [0] x [0]
            : (tensor<{n}xf64>, tensor<{n}x{n}xf64>) -> tensor<{n}xf64>
          return %0, %1, %2 : tensor<{n}xf64>, tensor<{n}xf64>, tensor<{n}xf64>
        }}"""


def test_the_first_two_products_of_a_large_matrix_are_paired():
    """mvt's ``A @ x`` and ``y @ A`` in one pass; the third product (atax's chained one)
    stays apart, the matrix already taken by the pair."""
    assert planned(_module(600), "pair_matvecs") == expect("""
        %0, %1 = h2d.paired_matvecs(%arg0, %arg1, %arg2)
          %0_in_pair = stablehlo.dot_general(%arg0_in_pair, %arg1_in_pair)
          %1_in_pair = stablehlo.dot_general(%arg2_in_pair, %arg0_in_pair)
          stablehlo.return(%0_in_pair, %1_in_pair)
        %2 = stablehlo.dot_general(%0, %arg0)
        func.return(%0, %1, %2)
        """)


def test_a_matrix_that_stays_in_cache_is_not():
    assert "paired" not in planned(_module(100), "pair_matvecs")


def test_a_chained_pair():
    """atax: ``(A @ x) @ A``, the second product's weights the first's result."""
    text = planned("""
        func.func @main(%a: tensor<700x600xf64>, %x: tensor<600xf64>) -> tensor<600xf64> {
          %0 = stablehlo.dot_general %a, %x, contracting_dims = [1] x [0]
            : (tensor<700x600xf64>, tensor<600xf64>) -> tensor<700xf64>
          %1 = stablehlo.dot_general %0, %a, contracting_dims = [0] x [0]
            : (tensor<700xf64>, tensor<700x600xf64>) -> tensor<600xf64>
          return %1 : tensor<600xf64>
        }""", "pair_matvecs")
    assert text.splitlines()[0] == "%0, %1 = h2d.paired_matvecs(%arg0, %arg1)"


def test_mvt_reads_its_matrix_once():
    a, x, y = operands((700, 600), (600,), (700,), dtype=jnp.float64)
    check_pass("pair_matvecs", lambda a, x, y: (a @ x, y @ a), a, x, y, rtol=1e-12,
               atol=1e-12)
