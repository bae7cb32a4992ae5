"""Differential tests of dot_general (translate/linalg.py) against jax.jit: the plain
products matrix-matrix, matrix-vector, vector-matrix and vector-vector, with transposed
operands, views as operands, empty and one-element shapes, and the errors for what the
plain-product translator does not handle."""

from __future__ import annotations

import dace
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from dace.libraries import blas
from jax import lax

import hlo2dace
from hlo2dace.errors import UnsupportedError

from util import assert_arrays_match, assert_matches_jax, dtype_id, special_values

PRODUCT_DTYPES = (np.float32, np.float64, np.complex64, np.complex128, np.int32, np.int64)

#: summation order differs between OpenBLAS and XLA's Eigen: relative tolerances
RTOL = {np.dtype(np.float32): 2e-5, np.dtype(np.complex64): 2e-5,
        np.dtype(np.float64): 1e-13, np.dtype(np.complex128): 1e-13}


def operand(dtype, shape, seed: int = 0) -> np.ndarray:
    """Random values (integers: including the extremes, whose products wrap)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        values = special_values(dtype, rng, random=max(8, int(np.prod(shape))))
        return np.resize(rng.permutation(values), shape).astype(dtype)
    values = rng.standard_normal(shape)
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def contract(lhs, rhs, lhs_dims, rhs_dims):
    return lax.dot_general(lhs, rhs, ((lhs_dims, rhs_dims), ((), ())))


@pytest.mark.parametrize("dtype", PRODUCT_DTYPES, ids=dtype_id)
def test_products(dtype):
    """Every plain product on one dtype; complex vector products do not conjugate."""
    m, k, n = 5, 7, 3
    x = operand(dtype, (m, k))
    w = operand(dtype, (k, n), seed=1)
    u = operand(dtype, (k,), seed=2)
    v = operand(dtype, (k,), seed=3)
    t = operand(dtype, (m, n), seed=4)

    def f(x, w, u, v, t):
        return {
            "mm": x @ w,
            "mv": x @ u,
            "vm": u @ w,
            "vv": u @ v,
            "jnp_dot_vv": jnp.dot(u, v),
            "vdot_conjugates": jnp.vdot(u, v),
            # transposes that JAX emits as stablehlo.transpose, read in place
            "xT_t": x.T @ t,
            "x_wT": x @ w[:, ::-1].T.T.T.T,
            "t_wT": t @ w.T,
            "xT_t_T": (x.T @ t).T,
            "tT_x": t.T @ x,
            "xT_u5": x.T @ t[:, 0],
            "u5_xT": t[:, 1] @ x.T.T,
            # transposes as dot_general contracting dimensions
            "contract_00": contract(x, t, (0,), (0,)),
            "contract_11": contract(x, w.T, (1,), (1,)),
            "contract_01": contract(t, x.T, (0,), (1,)),
            "contract_mv_0": contract(x, t[:, 2], (0,), (0,)),
            "contract_vm_1": contract(u, x, (0,), (1,)),
            # views and literals as operands, products feeding elementwise ops
            "view_operands": x[::-1, 1:] @ w[1:, ::-1] - t,
            "bcast_operand": jnp.broadcast_to(u, (4, k)) @ w,
            "literal_operand": jnp.ones((2, k), dtype) @ w,
            "row_times_matrix": x[1] @ w,
            "chained": (x @ w).T @ x,
            # one-element and degenerate shapes
            "k1": x[:, :1] @ w[:1],
            "one_by_one": x[:1, :1] @ w[:1, :1],
            "one_row": x[:1] @ w,
            "one_col": x @ w[:, :1],
            "vv_len1": u[:1] @ v[:1],
            "mv_one_row": x[:1] @ u,
            # empty contraction: zeros; empty result dimensions
            "empty_k_mm": x[:, :0] @ w[:0],
            "empty_k_mv": x[:, :0] @ u[:0],
            "empty_k_vm": u[:0] @ w[:0],
            "empty_k_vv": u[:0] @ v[:0],
            "empty_m": x[:0] @ w,
            "empty_n": x @ w[:, :0],
        }

    rtol = RTOL.get(np.dtype(dtype), 0.0)
    assert_matches_jax(f, x, w, u, v, t, rtol=rtol, atol=rtol)


def test_products_other_dtypes():
    """f16/bf16 (accumulated in float, rounded once) and 8- to 64-bit integers of either
    signedness (wrapping), all in one program."""
    dtypes = (np.float16, ml_dtypes.bfloat16, np.int8, np.uint8, np.int16, np.uint32,
              np.uint64)
    args = []
    for i, dtype in enumerate(dtypes):
        if np.dtype(dtype).kind == "f" or dtype == ml_dtypes.bfloat16:
            args += [(operand(np.float32, (4, 9), seed=i) / 3).astype(dtype),
                     (operand(np.float32, (9, 3), seed=i + 20) / 3).astype(dtype)]
        else:
            args += [operand(dtype, (4, 9), seed=i), operand(dtype, (9, 3), seed=i + 20)]

    def f(*args):
        out = {}
        for dtype, x, w in zip(dtypes, args[::2], args[1::2]):
            name = np.dtype(dtype).name
            out[name] = {"mm": x @ w, "mv": x @ w[:, 0], "vm": x[1] @ w, "vv": x[2] @ w[:, 1],
                         "xT": (x.T[:, :3] @ w.T).T}
        return out

    assert_matches_jax(f, *args, ulp=1)


def _nodes(sdfg, kind):
    return [node for node, _ in sdfg.all_nodes_recursive() if isinstance(node, kind)]


def test_transposes_absorbed():
    """Transposed operands become Gemm/Gemv's transA/transB flags, not copies: both when
    JAX writes a stablehlo.transpose and when dot_general contracts dimension 0."""
    x = operand(np.float64, (4, 6))
    w = operand(np.float64, (4, 5), seed=1)

    def f(x, w):
        return {"xT_w": x.T @ w, "wT_x": w.T @ x, "contract": contract(x, w, (0,), (0,)),
                "x_xT": x @ x.T, "xT_v": x.T @ w[:, 0]}

    lowered = hlo2dace.jit(f).lower(x, w)
    sdfg = lowered.as_sdfg()
    gemms = _nodes(sdfg, blas.Gemm)
    assert sorted((g.transA, g.transB) for g in gemms) == [(False, True), (True, False),
                                                          (True, False), (True, False)]
    (gemv,) = _nodes(sdfg, blas.Gemv)
    assert gemv.transA
    maps = _nodes(sdfg, dace.nodes.MapEntry)
    assert len(maps) <= 1, f"copies of transposed operands: {[m.label for m in maps]}"
    assert_matches_jax(f, x, w, rtol=1e-13)


def test_large_product():
    """A 1024x1024 f32 product through OpenBLAS matches XLA up to summation order."""
    x = operand(np.float32, (1024, 1024))
    w = operand(np.float32, (1024, 1024), seed=1)
    expected = jax.jit(jnp.matmul)(x, w)
    actual = hlo2dace.jit(jnp.matmul)(x, w)
    # |error| of a dot of length k is ~ sqrt(k) eps |x||w|: relative to the row norms
    scale = np.sqrt(1024.0) * np.abs(x).max() * np.abs(w).max()
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=1e-5,
                               atol=1e-6 * scale)


# ------------------------------------------------------------------------ errors


ERROR_CASES = {
    "batch": (lambda a, b: jnp.matmul(a, b), ((2, 3, 4), np.float32), ((2, 4, 5), np.float32),
              "batch"),
    "two_contracting": (lambda a, b: jnp.tensordot(a, b, 2), ((3, 4, 5), np.float32),
                        ((4, 5), np.float32), "contracting"),
    "mixed_types": (lambda a, b: lax.dot(a, b, preferred_element_type=np.int32),
                    ((3, 4), np.int8), ((4, 2), np.int8), "mixed element types"),
    "mixed_float": (lambda a, b: lax.dot(a, b, preferred_element_type=np.float32),
                    ((3, 4), ml_dtypes.bfloat16), ((4, 2), ml_dtypes.bfloat16),
                    "mixed element types bf16 x bf16 -> f32"),
    "bool": (lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ()))),
             ((3, 4), np.bool_), ((4, 2), np.bool_), "i1"),
    "rank3": (lambda a, b: jnp.tensordot(a, b, 1), ((3, 4, 5), np.float32),
              ((5, 2), np.float32), "rank 3"),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_unsupported_products(case):
    """What the plain-product translator does not handle is an UnsupportedError naming
    the op and the reason, raised before anything is compiled."""
    fun, (lhs_shape, lhs_dtype), (rhs_shape, rhs_dtype), reason = ERROR_CASES[case]
    lhs, rhs = np.zeros(lhs_shape, lhs_dtype), np.zeros(rhs_shape, rhs_dtype)
    with pytest.raises(UnsupportedError) as info:
        hlo2dace.jit(fun).lower(lhs, rhs).as_sdfg()
    assert info.value.op == "stablehlo.dot_general"
    assert "dot_general" in str(info.value) and reason in str(info.value), str(info.value)


def test_unsupported_message_text():
    module = """
func.func @main(%a: tensor<2x3x4xf32>, %b: tensor<2x4x5xf32>) -> tensor<2x3x5xf32> {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1]
      : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
  return %0 : tensor<2x3x5xf32>
}
"""
    with pytest.raises(UnsupportedError, match=r"`stablehlo.dot_general`.*batch"):
        hlo2dace.compile_text(module)


def test_integer_products_wrap():
    """Integer products go through DaCe's pure BLAS code and wrap like XLA's."""
    a = np.full((3, 4), np.iinfo(np.int32).max, np.int32)
    b = np.full((4, 2), 3, np.int32)
    c = np.array([2**62, 2**62, -2**63, 7], np.int64)
    assert_arrays_match(jax.jit(jnp.matmul)(a, b), hlo2dace.jit(jnp.matmul)(a, b))
    assert_arrays_match(jax.jit(jnp.dot)(c, c), hlo2dace.jit(jnp.dot)(c, c))
    assert_arrays_match(jax.jit(jnp.dot)(np.ones((3, 4), np.int64) * c, c),
                        hlo2dace.jit(jnp.dot)(np.ones((3, 4), np.int64) * c, c))
