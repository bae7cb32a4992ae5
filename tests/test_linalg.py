"""Differential tests of dot_general (translate/linalg.py) against jax.jit: plain products
and every kind of dimension numbers (batch dimensions anywhere, several contracting
dimensions in any order, none: outer products), transposed and viewed operands read in
place, mixed element types (XLA's operand upcasting), integer wrapping, complex, bool,
f16/bf16, NaN/inf/-0.0, empty dimensions, and both the BLAS and the loop-nest paths."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from dace.sdfg import nodes
from jax import lax

import hlo2dace
from hlo2dace import blas_core
from hlo2dace.errors import UnsupportedError
from hlo2dace.machine import SMALL_PRODUCT, assumed, current_machine
from hlo2dace.pipeline import Options

from util import assert_arrays_match, assert_matches_jax, blas_calls, dtype_id, needs
from util import random_operand as operand

PRODUCT_DTYPES = (np.float32, np.float64, np.complex64, np.complex128, np.int32, np.int64)
INTEGER_DTYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
                  np.uint64)

#: summation order differs between OpenBLAS, the loop nest and XLA's Eigen: relative
#: tolerances per element of a sum of ~10 terms of size ~1
RTOL = {np.dtype(np.float32): 2e-5, np.dtype(np.complex64): 2e-5,
        np.dtype(np.float64): 1e-13, np.dtype(np.complex128): 1e-13}


def contract(lhs, rhs, lhs_dims, rhs_dims, lhs_batch=(), rhs_batch=(), **kwargs):
    return lax.dot_general(lhs, rhs, ((lhs_dims, rhs_dims), (lhs_batch, rhs_batch)), **kwargs)


def check(f, *args, **kwargs):
    """``assert_matches_jax`` with the dtype's summation-order tolerance."""
    rtol = max(RTOL.get(np.dtype(a.dtype), 0.0) for a in args)
    return assert_matches_jax(f, *args, rtol=rtol, atol=rtol, **kwargs)


def _tasklets(fun, *args, machine=None) -> list[nodes.Tasklet]:
    """The tasklets of the code that runs: library nodes expanded as the target implements
    them (``machine``: the model it is built for)."""
    options = Options("default", machine=machine)
    sdfg = hlo2dace.jit(fun, optimize=options).lower(*args).as_sdfg()
    sdfg.expand_library_nodes()
    return [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, nodes.Tasklet)]


# ----------------------------------------------------------------- plain products


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
            "strided": x[::2, ::2] @ w[::2],
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

    check(f, x, w, u, v, t)


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


# ------------------------------------------------------------ dimension numbers


EINSUMS = {
    "bij,bkj->bik": ((2, 3, 4), (2, 5, 4)),
    "bij,bjk->bik": ((3, 4, 5), (3, 5, 2)),
    "ijb,jkb->bik": ((3, 4, 2), (4, 5, 2)),
    "bhqd,bhkd->bhqk": ((2, 3, 4, 5), (2, 3, 6, 5)),
    "bqhd,bkhd->bhqk": ((2, 4, 3, 5), (2, 6, 3, 5)),
    "ij,kl->ijkl": ((3, 4), (2, 5)),
    "i,j->ij": ((3,), (4,)),
    "bi,bj->bij": ((2, 3), (2, 4)),
    "ijk,ijk->": ((3, 4, 5), (3, 4, 5)),
    "ij,ij->i": ((3, 4), (3, 4)),
    "ij,ij->j": ((3, 4), (3, 4)),
    "bi,bi->b": ((6, 5), (6, 5)),
    "ijk,jkl->il": ((2, 3, 4), (3, 4, 5)),
    "ijk,kjl->il": ((2, 3, 4), (4, 3, 5)),
    "ikj,jlk->il": ((2, 4, 3), (3, 5, 4)),
    "kij,jk->i": ((4, 2, 3), (3, 4)),
    "bij,jk->bik": ((2, 3, 4), (4, 5)),
    "abcd,cdbe->abe": ((2, 3, 4, 5), (4, 5, 3, 2)),
    "bxy,byz->bxz": ((1, 3, 4), (1, 4, 5)),
    "ibj,jbk->bik": ((3, 2, 4), (4, 2, 5)),
    "bmk,bkn->bmn": ((5, 1, 4), (5, 4, 3)),
    "bmk,bkn->bnm": ((5, 3, 4), (5, 4, 1)),
}


@pytest.mark.parametrize("dtype", (np.float32, np.float64, np.complex64, np.int32,
                                   np.float16), ids=dtype_id)
def test_einsum(dtype):
    """Batch dimensions on both operands at any position, transposed operands, several
    contracting dimensions in either order, outer products and full contractions."""
    args, specs = [], list(EINSUMS)
    for i, spec in enumerate(specs):
        lhs_shape, rhs_shape = EINSUMS[spec]
        args += [operand(dtype, lhs_shape, seed=2 * i), operand(dtype, rhs_shape, seed=2 * i + 1)]

    def f(*args):
        return {spec: jnp.einsum(spec, lhs, rhs)
                for spec, lhs, rhs in zip(specs, args[::2], args[1::2])}

    check(f, *args, ulp=1 if dtype == np.float16 else 0)


def test_dimension_numbers():
    """dot_general's own dimension numbers, as jnp.einsum never writes them: batch
    dimensions in different positions on the two operands and not first on either,
    contracting dimensions listed out of order, a batched outer product."""
    x = operand(np.float64, (4, 2, 3, 5))  # k, b, m, k2
    w = operand(np.float64, (5, 6, 4, 2), seed=1)  # k2, n, k, b
    y = operand(np.float64, (3, 2), seed=2)
    z = operand(np.float64, (2, 4), seed=3)

    def f(x, w, y, z):
        return {
            "batch_last": contract(x, w, (0, 3), (2, 0), (1,), (3,)),
            "contract_reversed": contract(x, w, (3, 0), (0, 2), (1,), (3,)),
            "batch_only": contract(y, z, (), (), (1,), (0,)),
            "two_batch": contract(x, x, (3,), (3,), (0, 1), (0, 1)),
            "two_batch_swapped": contract(x, jnp.swapaxes(x, 0, 1), (3,), (3,), (0, 1),
                                          (1, 0)),
        }

    check(f, x, w, y, z)


def test_batched_matmul_broadcasting():
    """``@`` broadcasts batch dimensions: JAX broadcasts the operand (a view with stride 0
    in the batch dimension, read in place) or folds it into a free dimension."""
    a = operand(np.float32, (2, 1, 3, 4))
    b = operand(np.float32, (5, 4, 6), seed=1)
    c = operand(np.float32, (4, 6), seed=2)
    v = operand(np.float32, (4,), seed=3)

    def f(a, b, c, v):
        return {"4d_3d": a @ b, "3d_2d": b.transpose(0, 2, 1) @ c, "2d_3d": c.T @ b,
                "vector_batch": v @ b, "batch_vector": b.transpose(0, 2, 1) @ v,
                "bcast_batch": jnp.broadcast_to(c, (3, 4, 6)).transpose(0, 2, 1) @ b[:3]}

    check(f, a, b, c, v)


# ------------------------------------------------------------------ element types


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=dtype_id)
def test_integer_products(dtype):
    """Integer products wrap like XLA's; both loop forms (a block of a result row
    accumulated while streaming rows of B; one sum per element when B's free dimension is
    not contiguous), block tails, batches, and products big enough to run in parallel."""
    x = operand(dtype, (6, 9))
    w = operand(dtype, (9, 300), seed=1)
    b = operand(dtype, (3, 5, 9), seed=2)
    big_a = operand(dtype, (260, 130), seed=3)
    big_b = operand(dtype, (130, 140), seed=4)

    def f(x, w, b, big_a, big_b):
        return {"rows": x @ w, "dots": x @ w[:6, :9].T, "transposed_b": w[:, :5].T @ x.T,
                "batched": b @ w[:, 70:140], "batched_t": jnp.einsum("bij,bkj->bik", b, b),
                "vector": x[0] @ w, "mv": x @ w[:, 3], "vv": x[1] @ x[2],
                "parallel": big_a @ big_b}

    check(f, x, w, b, big_a, big_b)


def test_integer_overflow_wraps():
    """Sums and products past the type's range wrap (XLA computes modulo 2^bits)."""
    a = np.full((3, 4), np.iinfo(np.int32).max, np.int32)
    b = np.full((4, 2), 3, np.int32)
    c = np.array([2**62, 2**62, -2**63, 7], np.int64)
    u = np.array([[255, 255, 128]], np.uint8)
    assert_arrays_match(jax.jit(jnp.matmul)(a, b), hlo2dace.jit(jnp.matmul)(a, b))
    assert_arrays_match(jax.jit(jnp.dot)(c, c), hlo2dace.jit(jnp.dot)(c, c))
    assert_arrays_match(jax.jit(jnp.dot)(np.ones((3, 4), np.int64) * c, c),
                        hlo2dace.jit(jnp.dot)(np.ones((3, 4), np.int64) * c, c))
    check(lambda u: {"u8": u @ u.T, "u8_u32": lax.dot(u, u.T, preferred_element_type=np.uint32),
                     "u8_i8": lax.dot(u, u.T, preferred_element_type=np.int8)}, u)


def test_narrow_types():
    """f16/bf16 (accumulated in f32, rounded once: the loop nest for small products, f32
    BLAS for large ones), 4-bit integers (wrapping), bool products (OR of ANDs)."""
    args = [(operand(np.float32, shape, seed=i) / 3).astype(dtype)
            for i, (dtype, shape) in enumerate([
                (np.float16, (4, 9)), (np.float16, (9, 3)),
                (ml_dtypes.bfloat16, (4, 9)), (ml_dtypes.bfloat16, (9, 3)),
                (np.float16, (40, 70)), (ml_dtypes.bfloat16, (70, 50))])]
    rng = np.random.default_rng(0)
    i4 = rng.integers(-8, 8, (2, 5, 7)).astype(ml_dtypes.int4)
    u4 = rng.integers(0, 16, (7, 3)).astype(ml_dtypes.uint4)
    flags = operand(np.bool_, (6, 7)), operand(np.bool_, (7, 5), seed=1)

    def f(h, hw, bf, bfw, big_h, big_bf, i4, u4, p, q):
        return {"f16": h @ hw, "f16_t": hw.T @ h.T, "bf16": bf @ bfw, "bf16_vv": bf[0] @ bfw[:, 0],
                "big_f16": big_h @ big_bf.astype(np.float16), "big_bf16": big_h.T.astype(
                    ml_dtypes.bfloat16).T @ big_bf, "i4": i4 @ i4[0].T,
                "u4": u4.T @ u4, "bool": p @ q, "bool_vv": p[0] @ q[:, 1],
                "bool_outer": jnp.einsum("i,j->ij", p[0], q[0])}

    check(f, *args, i4, u4, *flags, ulp=1)


MIXED = {
    # (lhs dtype, rhs dtype, preferred element type)
    "i8_i32": (np.int8, np.int8, np.int32),
    "i8_i16": (np.int8, np.int8, np.int16),
    "u8_u32": (np.uint8, np.uint8, np.uint32),
    "i32_i64": (np.int32, np.int32, np.int64),
    "i8_f32": (np.int8, np.int8, np.float32),
    "i32_f32": (np.int32, np.int32, np.float32),  # products in float: no wrapping
    "bf16_f32": (ml_dtypes.bfloat16, ml_dtypes.bfloat16, np.float32),
    "f16_f32": (np.float16, np.float16, np.float32),
    "f16_f64": (np.float16, np.float16, np.float64),
    "f32_f64": (np.float32, np.float32, np.float64),
    "f32_bf16": (np.float32, np.float32, ml_dtypes.bfloat16),  # an f32 sum, rounded
    "f32_f16": (np.float32, np.float32, np.float16),
    "f32_i32": (np.float32, np.float32, np.int32),  # an f32 sum, saturated
    "bool_i32": (np.bool_, np.bool_, np.int32),
    "c64_c128": (np.complex64, np.complex64, np.complex128),
}


#: products computed in f32 and converted to a narrower (or integer) result type
SUMMED_IN_F32 = ("f32_bf16", "f32_f16", "f32_i32")


@pytest.mark.parametrize("case", sorted(MIXED))
def test_preferred_element_type(case):
    """Operands converted to the result type when it is the more precise (as XLA's
    operand upcasting does), else products in the operand type converted at the end:
    small (loop nest), large (BLAS with converting copies), batched and outer products."""
    lhs_dtype, rhs_dtype, result = MIXED[case]
    scale = 1e3 if case == "f32_i32" else 1.0
    small = operand(lhs_dtype, (4, 6)), operand(rhs_dtype, (6, 5), seed=1)
    large = operand(lhs_dtype, (2, 30, 40)), operand(rhs_dtype, (2, 40, 50), seed=1)
    if np.dtype(lhs_dtype).kind == "f":
        small = tuple((x * scale).astype(x.dtype) for x in small)
        large = tuple((x * scale).astype(x.dtype) for x in large)

    def f(a, b, c, d):
        def dot(x, y, dims):
            return lax.dot_general(x, y, dims, preferred_element_type=result)

        return {"small": dot(a, b, (((1,), (0,)), ((), ()))),
                "transposed": dot(b, a, (((0,), (1,)), ((), ()))),
                "batched": dot(c, d, (((2,), (1,)), ((0,), (0,)))),
                "large_t": dot(d, c, (((1,), (2,)), ((0,), (0,)))),
                "outer": dot(a, b, (((), ()), ((), ()))),
                "vv": dot(a[0], b[:, 0], (((0,), (0,)), ((), ())))}

    expected, actual = jax.jit(f)(*small, *large), hlo2dace.jit(f)(*small, *large)
    wide = np.complex128 if np.dtype(result).kind == "c" else np.float64
    for key in expected:
        e, a = np.asarray(expected[key]), np.asarray(actual[key])
        assert a.dtype == e.dtype, key
        if e.dtype.kind in "iub" and case not in SUMMED_IN_F32:
            assert_arrays_match(e, a, where=key)  # integer sums: exactly
            continue
        # sums in another order: apart by the rounding errors of two sums of 40 terms
        # (in f32 or the result type) and of the final rounding to the result type
        result_eps = ml_dtypes.finfo(e.dtype).eps if e.dtype.kind in "fcV" else 0.0
        sum_eps = np.finfo(np.float32).eps if case in SUMMED_IN_F32 else result_eps
        terms = 40 * max(np.abs(x.astype(wide)).max() for x in small + large) ** 2
        error = np.abs(e.astype(wide) - a.astype(wide)).max()
        assert error <= 2 * (sum_eps + result_eps) * terms + (e.dtype.kind == "i"), key


def test_precision_and_algorithm_ignored():
    """precision_config and an algorithm change nothing on the CPU (nor do they in XLA)."""
    x = operand(np.float32, (5, 7))
    w = operand(np.float32, (7, 4), seed=1)

    def f(x, w):
        return {"highest": lax.dot(x, w, precision=lax.Precision.HIGHEST),
                "high": lax.dot(x, w, precision=(lax.Precision.HIGH, lax.Precision.DEFAULT)),
                "f32_f32_f32": lax.dot(x, w, precision=lax.DotAlgorithmPreset.F32_F32_F32)}

    check(f, x, w)


# ------------------------------------------------------------------ edge values


@pytest.mark.parametrize("dtype", (np.float32, np.float64, np.complex128, np.float16),
                         ids=dtype_id)
def test_special_values(dtype):
    """NaN and infinities propagate through every path (gemm, gemv, dot, batched, the
    loop nest for small products); a contraction of size 1 is a plain product, in which
    -0.0 stays -0.0 (as XLA's), while longer sums start at +0.0."""
    # no overflowing products (whose sum is inf or NaN depending on the order of the
    # terms and on FMA) and no denormals (OpenBLAS's own threads do not flush them)
    part = np.float32 if dtype == np.complex64 else np.float64
    real = np.concatenate([[np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5],
                           np.random.default_rng(0).standard_normal(20)]).astype(part)
    with np.errstate(invalid="ignore"):  # inf * 1j has a NaN real part, as intended
        values = (real + 1j * np.roll(real, 3)).astype(dtype) if np.dtype(dtype).kind == "c" \
            else real.astype(dtype)
    x = np.resize(values, (4, 10, 12)).astype(dtype)
    w = np.resize(np.roll(values, 7), (4, 12, 10)).astype(dtype)
    zeros = np.full((3, 5), -0.0, dtype)
    ones = np.ones((5, 3), dtype)

    def f(x, w, zeros, ones):
        return {"batched": x @ w, "mv": x[0] @ w[0, :, 1], "vv": x[1, 2] @ w[1, :, 3],
                "outer": jnp.einsum("ij,kl->ijkl", x[0, :3, :4], w[0, :2, :3]),
                "minus_zero_k1": zeros[:, :1] @ ones[:1], "minus_zero_k5": zeros @ ones,
                "minus_zero_outer": jnp.einsum("i,j->ij", zeros[0], ones[0])}

    check(f, x, w, zeros, ones, ulp=1 if dtype == np.float16 else 0, signed_zeros=True)


@pytest.mark.parametrize("dtype", (np.float32, np.int32, np.float16), ids=dtype_id)
def test_empty_dimensions(dtype):
    """A contraction over an empty dimension gives zeros (of the result type); an empty
    batch or free dimension an empty result."""
    x = operand(dtype, (2, 3, 4))
    w = operand(dtype, (2, 4, 5), seed=1)

    def f(x, w):
        return {"empty_k": x[:, :, :0] @ w[:, :0], "empty_batch": x[:0] @ w[:0],
                "empty_m": x[:, :0] @ w, "empty_k_mixed": lax.dot_general(
                    x[:, :, :0], w[:, :0], (((2,), (1,)), ((0,), (0,))),
                    preferred_element_type=np.float64),
                "empty_k_several": jnp.einsum("ijk,jkl->il", x[:, :0], w[:0, :, :]),
                "empty_outer": jnp.einsum("i,j->ij", x[0, 0, :0], w[0, 0])}

    check(f, x, w)


# --------------------------------------------------------------- how it is emitted


def test_transposes_absorbed():
    """Transposed operands become cblas's Trans flags and leading dimensions, batches a
    loop of calls with the batch strides, contiguous contracting dimensions one K: no copy
    of an operand. Copies only where BLAS cannot read the operand."""
    x = operand(np.float64, (80, 60))
    w = operand(np.float64, (80, 50), seed=1)
    q = operand(np.float64, (2, 3, 20, 30))
    k = operand(np.float64, (2, 3, 25, 30), seed=1)
    t = operand(np.float64, (20, 30, 40), seed=2)
    u = operand(np.float64, (30, 40, 50), seed=3)

    def f(x, w, q, k, t, u):
        return {"xT_w": x.T @ w, "wT_x": w.T @ x, "contract": contract(x, w, (0,), (0,)),
                "x_xT": x @ x.T, "xT_v": x.T @ w[:, 0],
                "attention": jnp.einsum("bhqd,bhkd->bhqk", q, k),
                "two_k": jnp.einsum("ijk,jkl->il", t, u), "sliced": x[1:, 1:5] @ w[:, :4].T}

    # a machine of 32-byte vectors, whose f64 products all go to BLAS (no few_rows kernel)
    avx2 = dataclasses.replace(current_machine(), vector_bytes=32)
    code = [t.code.as_string for t in _tasklets(f, x, w, q, k, t, u, machine=avx2)]
    calls = [c for c in code if "cblas_" in c]
    assert len(calls) == 8 and not [c for c in code if "__out = __in" in c], code
    assert sum("CblasTrans" in c for c in calls) == 7, calls
    check(f, x, w, q, k, t, u)
    # the contracting dimensions lie apart (a and c of "amc", m free between): one
    # transposing copy of each operand, then BLAS
    code = [t.code.as_string for t in _tasklets(lambda q: jnp.einsum("amc,anc->mn", q, q), q[0])]
    assert sum("__out = __in" in c for c in code) == 2 and any("cblas_dgemm" in c for c in code)


#: transposed products: (function of (a, b, c, d), whether the transposition folds into the
#: product, its operands swapped)
TRANSPOSED_PRODUCTS = {
    # JAX's gradient of x @ w with respect to w
    "dw": (lambda a, b, c, d: contract(b, a, (0,), (0,)).T * 2, True),
    "batched": (lambda a, b, c, d: jnp.transpose(jnp.einsum("bij,bjk->bik", c, d),
                                                 (0, 2, 1)) + 1, True),
    "two free each": (lambda a, b, c, d: jnp.transpose(contract(c, d, (2,), (1,)),
                                                       (2, 3, 0, 1)), True),
    "free dimensions mixed": (lambda a, b, c, d: jnp.transpose(
        contract(c, d, (2,), (1,)), (3, 0, 1, 2)), False),
    "free groups swapped": (lambda a, b, c, d: jnp.transpose(
        contract(c[0], d, (1,), (1,)), (1, 2, 0)), True),
    "also read as it is": (lambda a, b, c, d: (contract(b, a, (0,), (0,)).T,
                                               contract(b, a, (0,), (0,))), False),
    "batch moved": (lambda a, b, c, d: jnp.transpose(jnp.einsum("bij,bjk->bik", c, d),
                                                     (1, 0, 2)), False),
}


@pytest.mark.parametrize("case", TRANSPOSED_PRODUCTS)
@pytest.mark.parametrize("dtype", (np.float32, np.float64, np.complex64, np.int32),
                         ids=dtype_id)
def test_transposed_products_are_products_of_the_swapped_operands(case, dtype):
    """A transposition that only swaps a product's operands' free dimensions (batch ones
    first) folds into the product of the swapped operands, as XLA folds it, so that its
    readers read rows (``frontend/xla_rewrites.py``); not where the product is read
    untransposed too, or the batch dimensions move. XLA's results."""
    f, folds = TRANSPOSED_PRODUCTS[case]
    args = (operand(dtype, (12, 7)), operand(dtype, (12, 9), seed=1),
            operand(dtype, (3, 5, 6), seed=2), operand(dtype, (3, 6, 4), seed=3))
    ops = hlo2dace.jit(f).lower(*args).main.body.blocks[0].ops
    producers = {r.name: op for op in ops for r in op.results}
    transposed = [op for op in ops if op.name == "stablehlo.transpose"
                  and producers.get(op.operands[0].name, op).name == "stablehlo.dot_general"]
    assert bool(transposed) != folds
    assert sum(op.name == "stablehlo.dot_general" for op in ops) == 1
    check(f, *args)


@pytest.mark.parametrize("dtype", (np.float32, np.float64, np.complex64, np.int32,
                                   ml_dtypes.bfloat16), ids=dtype_id)
def test_outer_products_are_computed_where_they_are_read(dtype):
    """An outer product is the multiply of its broadcast operands, computed by the maps
    that read it (XLA fuses it the same way): per-example weight gradients transposed on
    their way out (``vmap(grad)``'s ``x^T delta``), an outer product plus a bias, and one
    of a value read twice. None of the results' sizes is an array between the ops."""
    x = operand(dtype, (6, 5))
    y = operand(dtype, (6, 7), seed=1)
    bias = operand(dtype, (7,), seed=2)

    def f(x, y, bias):
        outer = jnp.einsum("bi,bj->bij", x, y)
        return {"transposed": jnp.swapaxes(outer, 1, 2), "bias": outer + bias,
                "twice": jnp.einsum("i,j->ij", x[0], x[0] * 2)}

    check(f, x, y, bias)
    sdfg = hlo2dace.jit(f, optimize="default").lower(x, y, bias).as_sdfg()
    assert not [(name, a.shape) for name, a in sdfg.arrays.items()
                if a.transient and a.total_size in (5 * 7 * 6, 25)], sdfg.arrays

    def per_example(w, x):
        return jax.vmap(jax.grad(lambda w, x: jnp.sum(jnp.tanh(x @ w) ** 2)),
                        in_axes=(None, 0))(w, x)

    if np.dtype(dtype).kind == "f" and dtype != ml_dtypes.bfloat16:
        w = operand(dtype, (5, 7), seed=3)
        check(per_example, w, x)
        sdfg = hlo2dace.jit(per_example, optimize="default").lower(w, x).as_sdfg()
        assert not [name for name, a in sdfg.arrays.items()
                    if a.transient and a.total_size == 6 * 5 * 7], sdfg.arrays


def test_paths():
    """Which path takes a product: BLAS calls for f32/f64/complex (gemm, gemv, dot), the
    loop nest for integers and for products too small for a BLAS call to pay off, outer
    products elementwise (fused into their readers) where they compute in their operands'
    type, else one map."""
    def labels(fun, *args):
        sdfg = hlo2dace.jit(fun, optimize="default").lower(*args).as_sdfg()
        return sorted({type(n).__name__ if isinstance(n, nodes.LibraryNode)
                       else n.label.rsplit("_", 1)[0]
                       for n, _ in sdfg.all_nodes_recursive()
                       if isinstance(n, (nodes.Tasklet, nodes.LibraryNode))} &
                      {"Gemm", "blas", "dot_loops", "outer_product", "fused"})

    big, small = np.ones((128, 128), np.float32), np.ones((4, 4), np.float32)
    assert labels(jnp.matmul, big, big) == ["Gemm"]
    assert labels(jnp.matmul, big.astype(np.float16), big.astype(np.float16)) == ["blas"]
    assert labels(jnp.matmul, small, small) == ["dot_loops"]
    assert labels(jnp.matmul, big.astype(np.int32), big.astype(np.int32)) == ["dot_loops"]
    assert labels(lambda u, v: jnp.einsum("i,j->ij", u, v), big[0], big[1]) == ["fused"]
    assert labels(lambda u, v: jnp.einsum("i,j->ij", u, v, preferred_element_type=jnp.float32),
                  big[0].astype(np.float16), big[1].astype(np.float16)) == ["outer_product"]
    assert SMALL_PRODUCT < 64 ** 3


@pytest.mark.parametrize("dtype", (np.float32, np.float64), ids=dtype_id)
def test_blas_calls(dtype):
    """Each BLAS routine in both orientations, at sizes where the call pays off: gemm,
    gemv for a matrix times a vector and a vector times a matrix (each operand either
    way round), dot for long vectors, and batches of each."""
    x = operand(dtype, (70, 90))
    y = operand(dtype, (90, 80), seed=1)
    u = operand(dtype, (90,), seed=2)
    long = operand(dtype, (3, 9000), seed=3)
    batch = operand(dtype, (3, 70, 90), seed=4)

    def f(x, y, u, long, batch):
        return {"gemm": x @ y, "gemm_tt": y.T @ x.T, "gemv": x @ u, "gemv_t": y.T @ u,
                "vector_gemv": u @ y, "vector_gemv_t": u @ x.T, "dot": long[0] @ long[1],
                "dot_strided": long[0, ::2] @ long[1, 1::2], "batched_dot": jnp.einsum(
                    "bi,bi->b", long, long[::-1]), "batched_gemv": batch @ u,
                "batched_vector_gemv": jnp.einsum("bk,bmk->bm", batch[:, 0], batch)}

    code = "\n".join(t.code.as_string for t in _tasklets(f, x, y, u, long, batch))
    prefix = "s" if dtype == np.float32 else "d"
    for routine, count in (("gemm", 2), ("gemv", 6), ("dot", 3)):
        assert code.count(f"cblas_{prefix}{routine}(") == count, (routine, code)
    rtol = {np.dtype(np.float32): 2e-4, np.dtype(np.float64): 1e-12}[np.dtype(dtype)]
    assert_matches_jax(f, x, y, u, long, batch, rtol=rtol, atol=rtol)


@pytest.mark.pipeline
@pytest.mark.parametrize("dtype", (np.float32, np.float64, np.complex128), ids=dtype_id)
def test_skinny_products_share_out_their_long_side(dtype):
    """A product with a side of at most 32 and millions of multiply-adds (a small batch
    through a large layer) is single-threaded gemms over blocks of its long side (one per
    thread it is built for), columns or rows, each operand either way round: XLA's
    results, and the same bits from every call whichever thread count the tuner tries (the
    blocks are fixed when the program is compiled)."""
    x = operand(dtype, (8, 600))
    w = operand(dtype, (600, 1100), seed=1)

    def f(x, w):
        return {"columns": x @ w, "columns_bt": x @ w.T.copy().T, "rows": w.T @ x.T,
                "rows_at": (w.T.copy().T).T @ (x.T.copy()), "scaled": (2.0 * x) @ w}

    # what BLAS is asked: per product, one gemm of the 8 short rows or columns by the
    # 600 deep sums per block of the 1,100 long side; two blocks (of at least 512) where
    # the program is built for two threads or more; "scaled" with 2 as its alpha (a
    # complex product is given the scaled matrix)
    ((calls, _),) = blas_calls([(f, (x, w))], vector_bytes=32)  # no few_rows kernel
    parts = 2 if current_machine().threads > 1 else 1
    assert {c.kind for c in calls} == {"gemm"} and len(calls) == 5 * parts, calls
    assert all(c.sizes[2] == 600 and min(c.sizes[:2]) == 8 for c in calls), calls
    long_sides = [max(c.sizes[:2]) for c in calls]
    assert sum(long_sides) == 5 * 1100 and all(512 <= n for n in long_sides), long_sides
    assert all(n < 1100 for n in long_sides) == (parts > 1)
    scaled = 2 if np.dtype(dtype).kind == "f" else 1
    assert sorted(c.alpha.real for c in calls) == [1] * 4 * parts + [scaled] * parts
    assert all(c.alpha.imag == 0 for c in calls)
    rtol = 2e-4 if dtype == np.float32 else 1e-12
    assert_matches_jax(f, x, w, rtol=rtol, atol=rtol)
    compiled = hlo2dace.jit(f).lower(x, w).compile()
    results = [compiled(x, w) for _ in range(8)]
    tuner = compiled.program.threads
    if tuner is not None:  # more than one core: both settings were tried
        assert all(tuner.times[n] for n in tuner.settings), tuner.times
    for other in results[1:]:
        for a, b in zip(jax.tree_util.tree_leaves(results[0]), jax.tree_util.tree_leaves(other)):
            assert np.array_equal(np.asarray(a), np.asarray(b))


def _scaled_products(scale, a, b, c, x, v):
    return {"lhs": scale * a @ b, "rhs": a @ (b * scale), "gemv": scale * c @ x,
            "dot": scale * v @ v, "constant": 2.5 * a @ b}


@pytest.mark.pipeline
def test_scalar_factors_reach_blas_as_alpha():
    """What BLAS receives for ``_scaled_products``, for each dtype and factor: a finite,
    nonzero factor is the alpha of the gemm calls (lhs, rhs) and of the gemv, whose
    operands are the arguments themselves (nothing wrote a scaled copy); a factor of 0,
    inf or NaN scales a copy first (alpha 1, an operand that is no argument), as XLA's
    ``(alpha * A) @ B`` differs there; the constant 2.5 is always an alpha; dot has no
    alpha and reads the arguments (or, where the factor is not folded, a scaled copy of
    one)."""
    cases, factors = [], []
    for dtype in (np.float32, np.float64):
        a = operand(dtype, (60, 80))
        b = operand(dtype, (80, 70), seed=1)
        x = operand(dtype, (80,), seed=2)
        v = operand(dtype, (5000,), seed=3)
        c = operand(dtype, (60, 80), seed=4)
        for alpha in (1.5, -0.25, 0.0, np.inf, np.nan):
            cases.append((_scaled_products, (dtype(alpha), a, b, c, x, v)))
            factors.append(alpha)
    for (calls, (_, a, b, c, x, v)), alpha in zip(blas_calls(cases, vector_bytes=32), factors):
        folded = bool(np.isfinite(alpha)) and alpha != 0
        gemms = [k for k in calls if k.kind == "gemm"]
        (gemv,) = [k for k in calls if k.kind == "gemv"]
        (dot,) = [k for k in calls if k.kind == "dot"]
        assert len(gemms) == 3 and len(calls) == 5, calls
        arguments = {a, b}
        constant = [k for k in gemms if k.alpha == 2.5]
        assert len(constant) == 1 and set(constant[0].operands[:2]) == arguments
        scaled = [k for k in gemms if k is not constant[0]]
        if folded:
            assert all(k.alpha == alpha and set(k.operands[:2]) == arguments for k in scaled)
            assert gemv.alpha == alpha and gemv.operands[:2] == (c, x)
        else:  # one operand of each is a scaled copy
            assert all(k.alpha == 1 and len(arguments & set(k.operands[:2])) == 1
                       for k in scaled), scaled
            assert gemv.alpha == 1 and gemv.operands[0] != c and gemv.operands[1] == x
        assert dot.operands == (v, v, 0) if folded else \
            dot.operands[0] != v and dot.operands[1:] == (v, 0)


@pytest.mark.parametrize("alpha", [1.5, -0.25, 0.0, np.inf, np.nan],
                         ids=["1.5", "-0.25", "0", "inf", "nan"])
@pytest.mark.parametrize("dtype", (np.float32, np.float64), ids=dtype_id)
def test_scalar_factors_become_blas_alpha(dtype, alpha):
    """``alpha * A @ B``, ``A @ (B * alpha)``, ``alpha * A @ x`` and a constant's product:
    the BLAS call scales its sum (alpha), and reads the matrix where it lies. An alpha of
    0, inf or NaN scales a copy first, as XLA computes ``(alpha * A) @ B``: 0 * inf is NaN,
    and OpenBLAS would skip a product whose alpha is 0. XLA's results, with NaN and
    infinities among the operands."""
    a = operand(dtype, (60, 80))
    a[3, 4], a[5] = np.inf, 0  # NaN where 0 * inf, inf * 0
    b = operand(dtype, (80, 70), seed=1)
    x = operand(dtype, (80,), seed=2)
    v = operand(dtype, (5000,), seed=3)
    c = operand(dtype, (60, 80), seed=4)
    scale = dtype(alpha)

    f = _scaled_products  # what BLAS receives: test_scalar_factors_reach_blas_as_alpha
    rtol = {np.dtype(np.float32): 2e-4, np.dtype(np.float64): 1e-12}[np.dtype(dtype)]
    assert_matches_jax(f, scale, a, b, c, x, v, rtol=rtol, atol=rtol, signed_zeros=False)
    # the same factor as a constant of the program: folded where finite and not zero
    assert_matches_jax(lambda a, b: dtype(alpha) * a @ b, a, b, rtol=rtol, atol=rtol,
                       signed_zeros=False)


@pytest.mark.parametrize("dtype", (np.float32, np.complex64, np.complex128), ids=dtype_id)
def test_without_openblas(dtype):
    """Without OpenBLAS (a machine model without it) every product is the loop nest, which
    handles floats and complex numbers too."""
    x = operand(dtype, (3, 40, 50))
    w = operand(dtype, (3, 50, 60), seed=1)

    def f(x, w):
        return {"batched": x @ w, "transposed": jnp.einsum("bij,bkj->bik", x, x),
                "mv": x[0] @ w[0, :, 0], "vv": x[0, 0] @ w[0, :, 1]}

    with assumed(dataclasses.replace(current_machine(), blas="none")):
        assert not [t for t in _tasklets(f, x, w) if "cblas_" in t.code.as_string]
        check(f, x, w)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.int8], ids=dtype_id)
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_loop_nest_alignment(offset, dtype):
    """The loop nest's vectorised inner loops must not depend on the operands' alignment
    (the GCC 12 miscompile that h2d::scalar_loop works around was alignment-dependent):
    operands at several offsets of a cache line give XLA's result."""
    def place(values):
        buffer = np.zeros(values.size + 64, dtype)
        start = (-buffer.ctypes.data // buffer.itemsize) % 16 + offset
        out = buffer[start:start + values.size].reshape(values.shape)
        out[...] = values
        return out

    a = place(operand(dtype, (7, 13)))
    b = place(operand(dtype, (13, 70), seed=1))

    def f(a, b):
        return a @ b, a @ b[:, :9][::-1].T.T, a[1:, 2:] @ b[2:, 1:], a[:, :7] @ b[:7, :7].T

    expected = jax.jit(f)(a, b)
    actual = hlo2dace.jit(f, optimize="default").lower(a, b).compile()(a, b)
    rtol = RTOL.get(np.dtype(dtype), 0.0)
    for i, (e, x) in enumerate(zip(expected, actual)):
        assert_arrays_match(e, x, rtol=rtol, atol=rtol, where=str(i))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, ml_dtypes.bfloat16,
                                   np.complex64], ids=dtype_id)
def test_long_sums_of_the_loop_kernel(dtype):
    """The loop kernel sums a long contraction in lanes, tail and fold included: vector
    dots of 64 to 4,096 terms (around multiples of the lanes), a column read with a
    stride, a short one in order, a batch, with NaN and infinities spread through one."""
    def f(x, y, m, special):
        return ([jnp.vdot(x[:k], y[:k]) for k in (15, 63, 64, 65, 100, 1000, 4096)]
                + [m[:, 0] @ x[:64], m[:64, :].T @ x[:64], jnp.einsum("bk,bk->b", m, m),
                   jnp.vdot(special, y[:80])])

    x, y, m = operand(dtype, (4096,)), operand(dtype, (4096,), seed=1), \
        operand(dtype, (64, 3), seed=2)
    special = operand(dtype, (80,), seed=3)
    if np.dtype(dtype).kind in "fcV":
        special[[5, 40]] = np.inf
        special[70] = -np.inf if dtype != np.complex64 else np.nan
    expected = jax.jit(f)(x, y, m, special)
    actual = hlo2dace.jit(f, optimize="default")(x, y, m, special)
    rtol = {np.dtype(ml_dtypes.bfloat16): 2e-2}.get(np.dtype(dtype), RTOL.get(np.dtype(dtype),
                                                                              0.0))
    for i, (e, a) in enumerate(zip(expected, actual)):
        assert_arrays_match(e, a, rtol=rtol, atol=rtol * 64, where=str(i))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, ml_dtypes.bfloat16],
                         ids=dtype_id)
def test_small_matrix_vector_products_down_columns(dtype):
    """``A^T v`` in the loop kernel runs as ``v^T A`` over A's contiguous rows: square,
    wide, tall, batched, from a slice, against XLA."""
    a, v = operand(dtype, (3, 20, 24)), operand(dtype, (3, 20), seed=1)

    def f(a, v):
        return (a[0, :16, :16].T @ v[0, :16], a[1].T @ v[1], a[2, :, :5].T @ v[2],
                jnp.einsum("bkm,bk->bm", a[:, :8, :8], v[:, :8]), v[0] @ a[0, :, :3],
                a[1, :16, ::2].T @ v[1, :16])

    rtol = {np.dtype(ml_dtypes.bfloat16): 2e-2}.get(np.dtype(dtype), RTOL.get(np.dtype(dtype),
                                                                              0.0))
    for i, (e, x) in enumerate(zip(jax.jit(f)(a, v), hlo2dace.jit(f)(a, v))):
        assert_arrays_match(e, x, rtol=rtol, atol=rtol * 16, where=str(i))


# ------------------------------------------------------------------------ errors


def test_unsupported_narrow_result_of_float_product():
    """A float product converted to a 4-bit integer has no translation (JAX never writes
    one); the error names the op and the reason, before anything is compiled."""
    module = """
func.func @main(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>) -> tensor<2x2xi4> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]
      : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xi4>
  return %0 : tensor<2x2xi4>
}
"""
    with pytest.raises(UnsupportedError, match=r"`stablehlo.dot_general`.*f32 product "
                                               r"converted to i4"):
        hlo2dace.compile_text(module)


def _mlp_parameters(dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    params = {"w1": rng.normal(size=(64, 128)) / 8, "b1": rng.normal(size=128),
              "w2": rng.normal(size=(128, 10)) / 11, "b2": rng.normal(size=10)}
    params = {name: value.astype(dtype) for name, value in params.items()}
    return params, rng.normal(size=(32, 64)).astype(dtype), rng.integers(0, 10, 32)


def _mlp(params, x, accumulate=None):
    def dense(a, w, bias):
        return jnp.matmul(a, w, preferred_element_type=accumulate).astype(a.dtype) + bias

    hidden = jax.nn.gelu(dense(x, params["w1"], params["b1"]))
    return jax.nn.log_softmax(dense(hidden, params["w2"], params["b2"]))


@pytest.mark.parametrize("accumulate", [None, np.float32], ids=["16-bit", "f32-accumulated"])
@pytest.mark.parametrize("dtype", (ml_dtypes.bfloat16, np.float16), ids=dtype_id)
def test_16_bit_mlp_training_step(dtype, accumulate):
    """An MLP layer pair in bf16/f16 and one SGD step through jax.grad: every op rounds to
    the 16-bit type as XLA's does; products accumulate in f32 in both but in another order
    (OpenBLAS vs Eigen), which moves a rounded value by an ULP and, after log_softmax's
    cancellation, by an ULP of its operands (log-probabilities of magnitude up to ~4)."""
    params, x, labels = _mlp_parameters(dtype)

    def step(params, x, labels):
        def loss(params):
            log_probabilities = _mlp(params, x, accumulate)
            return -jnp.mean(jnp.take_along_axis(log_probabilities, labels[:, None], axis=1))

        value, grads = jax.value_and_grad(loss)(params)
        return value, _mlp(params, x, accumulate), jax.tree.map(
            lambda w, g: w - 0.1 * g, params, grads)

    assert_matches_jax(step, params, x, labels, ulp=2,
                       atol=4 * float(ml_dtypes.finfo(dtype).eps))


# ------------------------------------------------- complex products in XLA's order

#: operand types of the non-complex side of mixed complex products
MIXED_COMPLEX_OTHERS = (ml_dtypes.bfloat16, np.float16, np.float32, np.float64, np.int8,
                        np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32)
#: (M, K, N): every kernel of Eigen's a product lands in (blocks of two packets of
#: columns, one packet and half a packet, the last column with four partial sums, rows
#: outside panels of 4), one row (matrix-vector), one column, one row and one column
#: (XLA's multiply and reduce, in windows of 32 beyond 32 terms)
COMPLEX_SHAPES = [(4, 3, 6), (3, 5, 7), (20, 30, 25), (9, 11, 7), (16, 33, 5), (13, 9, 1),
                  (1, 100, 7), (1, 40, 1), (1, 70, 1)]

def _mixed_dot(c: str, o: str) -> str:
    """One module with, for each of COMPLEX_SHAPES, a product of a complex operand by one
    of element type ``o`` and of the transposed pair the other way round (one module, so
    one build, per pair of types)."""
    arguments, lines, results, returned = [], [], [], []
    for s, (m, k, n) in enumerate(COMPLEX_SHAPES):
        arguments += [f"%a{s}: tensor<{m}x{k}x{c}>", f"%b{s}: tensor<{k}x{n}x{o}>",
                      f"%at{s}: tensor<{k}x{m}x{o}>", f"%bt{s}: tensor<{n}x{k}x{c}>"]
        for r, (x, y, lhs, rhs) in enumerate(((f"%a{s}", f"%b{s}", 1, 0),
                                              (f"%at{s}", f"%bt{s}", 0, 1))):
            tx, ty = ((f"{m}x{k}x{c}", f"{k}x{n}x{o}") if r == 0 else
                      (f"{k}x{m}x{o}", f"{n}x{k}x{c}"))
            lines.append(
                f'  %r{s}_{r} = "stablehlo.dot_general"({x}, {y}) <{{dot_dimension_numbers = '
                f"#stablehlo.dot<lhs_contracting_dimensions = [{lhs}], "
                f"rhs_contracting_dimensions = [{rhs}]>}}> : (tensor<{tx}>, tensor<{ty}>) "
                f"-> tensor<{m}x{n}x{c}>")
            results.append(f"tensor<{m}x{n}x{c}>")
            returned.append(f"%r{s}_{r}")
    return (f"func.func @main({', '.join(arguments)}) -> ({', '.join(results)}) {{\n"
            + "\n".join(lines) + f"\n  return {', '.join(returned)} : "
            f"{', '.join(results)}\n}}\n")


@pytest.mark.parametrize("complex_dtype", [np.complex64, np.complex128], ids=dtype_id)
@pytest.mark.parametrize("other", MIXED_COMPLEX_OTHERS, ids=dtype_id)
def test_mixed_complex_products_are_xla_bit_for_bit(complex_dtype, other):
    """A dot_general of a complex operand and one of another type (on either side,
    transposed operands too): XLA converts the other operand to complex and runs its
    complex product, Eigen's kernels (or, for one row and one column, a multiply and a
    reduce), each element's four real sums in the order of the kernel it falls in, no
    FMA; hlo2dace sums in that order (h2d::eigen_cdot): 0 ULP on every shape, where
    OpenBLAS's cgemm was 8 to 172 ULP off in the components that cancel."""
    from hlo2dace.translate.dtypes import element_of_numpy
    from hlo2dace.xla import run_module

    def values(shape, seed):  # integers at their extremes; floats around +-4
        if np.dtype(other).kind in "iu":
            return operand(other, shape, seed=seed)
        return (np.random.default_rng(seed).standard_normal(shape) * 4).astype(other)

    arguments = []
    for m, k, n in COMPLEX_SHAPES:
        arguments += [operand(complex_dtype, (m, k), seed=m), values((k, n), n),
                      values((k, m), k), operand(complex_dtype, (n, k), seed=k + 1)]
    text = _mixed_dot(element_of_numpy(complex_dtype), element_of_numpy(other))
    expected = run_module(text, arguments)
    actual = hlo2dace.compile_text(text)(*arguments)
    for index, (want, got) in enumerate(zip(expected, actual)):
        shape = COMPLEX_SHAPES[index // 2]
        assert_arrays_match(want, np.asarray(got), where=f"{shape} result {index % 2}")


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=dtype_id)
def test_complex_products_are_xla_bit_for_bit(dtype):
    """Complex products of every kernel shape, batched and transposed ones, vector
    products (XLA's multiply and reduce, windows of 32 beyond 32 terms) and special
    values (infinities become NaN in the other component through Eigen's alpha, as in
    XLA): 0 ULP. Products longer than Eigen's depth block (336, 248 terms) or larger than
    EIGEN_ORDER_WORK keep OpenBLAS (test_products' tolerances)."""
    args = []
    for m, k, n in COMPLEX_SHAPES:
        args += [operand(dtype, (m, k), seed=m + k), operand(dtype, (k, n), seed=n + k)]
    args += [operand(dtype, (3, 8, 20), seed=1), operand(dtype, (3, 20, 9), seed=2),
             operand(dtype, (2000,), seed=3), operand(dtype, (2000,), seed=4)]
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -2.5, 3.0])
    with np.errstate(invalid="ignore"):  # inf * 1j has a NaN real part, as intended
        args += [(special + 1j * np.roll(special, 3)).astype(dtype).reshape(2, 4),
                 (np.roll(special, 1) - 1j * special).astype(dtype).reshape(4, 2)]

    def f(*args):
        pairs = list(zip(args[::2], args[1::2]))
        out = {f"{m}x{k}x{n}": x @ y for (m, k, n), (x, y) in zip(COMPLEX_SHAPES, pairs)}
        batched, vectors, special = pairs[len(COMPLEX_SHAPES):]
        out |= {"batched": batched[0] @ batched[1],
                "transposed": jnp.swapaxes(batched[1], 1, 2) @ jnp.swapaxes(batched[0], 1, 2),
                "vv_2000": vectors[0] @ vectors[1], "vv_7": vectors[0][:7] @ vectors[1][:7],
                "special": special[0] @ special[1]}
        return out

    assert_matches_jax(f, *args)


# ------------------------------------------------------------------ OpenBLAS's kernels

AVX2 = {"avx", "avx2", "fma"}
AVX512 = AVX2 | {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}


@pytest.mark.parametrize("unaided, flags, chosen", [
    ("Prescott", AVX512, "SkylakeX"), ("Prescott", AVX2, "Haswell"),
    ("Nehalem", {"avx"}, "Sandybridge"), ("Sandybridge", AVX2, "Haswell"),
    ("Haswell", AVX512, "SkylakeX"), ("SkylakeX", AVX512, None), ("Cooperlake", AVX512, None),
    ("Zen", AVX2, None), ("Haswell", AVX2, None), ("Prescott", {"sse4_2"}, None),
    ("Prescott", AVX512 - {"avx512bw"}, "Haswell"), ("Unheard", AVX2, None),
])
def test_openblas_kernels_follow_the_cpus_vector_instructions(unaided, flags, chosen):
    """The kernels hlo2dace asks of OpenBLAS: the CPU's largest vector instruction set
    (every flag it needs) where the library's own choice uses a smaller one, else none; a
    name it does not know (a newer library's) is left alone."""
    assert blas_core.better_kernels(unaided, flags) == chosen


PROBE_KERNELS = """
import ctypes, json, os
import numpy as np
import hlo2dace
from hlo2dace import blas_core
x = np.ones((64, 64))
np.testing.assert_allclose(np.asarray(hlo2dace.jit(lambda a: a @ a)(x)), x @ x)
library = ctypes.CDLL(blas_core.LIBRARY)
library.openblas_get_corename.restype = ctypes.c_char_p
flags = blas_core.cpu_features()
print(json.dumps([library.openblas_get_corename().decode(), blas_core.cpu_level(flags),
                  os.environ.get("OPENBLAS_CORETYPE")]))
"""


def test_programs_run_openblas_kernels_of_the_cpus_instruction_set():
    """A program's products run OpenBLAS kernels of the CPU's largest vector instruction
    set, even where the library does not know the CPU's model (Debian 12's OpenBLAS runs
    SSE3 kernels on an Emerald Rapids Xeon unaided, 5.8x slower), and the environment
    is left as it was; a user's ``OPENBLAS_CORETYPE`` is kept."""
    needs(current_machine().blas == "OpenBLAS", "OpenBLAS (Debian's libopenblas-dev)")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    ran = subprocess.run([sys.executable, "-c", PROBE_KERNELS], env=env, capture_output=True,
                         text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-4000:]
    core, level, left = json.loads(ran.stdout.splitlines()[-1])
    used = blas_core.kernel_level(core)
    assert (used is None or used >= level) and left is None, (core, level)
    ran = subprocess.run([sys.executable, "-c", PROBE_KERNELS], capture_output=True, text=True,
                         env=dict(env, OPENBLAS_CORETYPE="Prescott"), timeout=600)
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert json.loads(ran.stdout.splitlines()[-1])[::2] == ["Prescott", "Prescott"]


#: two matrix-vector products of one matrix ``a`` (m x n) with vectors ``x``, ``z`` (n) and
#: ``y`` (m), and whether they read it in one pass (the ``pair_matvecs`` pass)
MATRIX_VECTOR_PAIRS = {
    "chained (atax)": (lambda a, x, z, y: (a @ x) @ a, True),
    "independent (mvt)": (lambda a, x, z, y: (a @ x + 1.0, y @ a), True),
    "columns first (bicg)": (lambda a, x, z, y: (y @ a, a @ x), True),
    "a reversed vector": (lambda a, x, z, y: (lambda r: (a @ x, r @ a))(y[::-1]), True),
    "two row products": (lambda a, x, z, y: (a @ x, a @ z), True),
    "weights from the combined rows": (lambda a, x, z, y: a @ (y @ a), False),
    "a vector computed in between": (lambda a, x, z, y: (a @ x, a @ jnp.sin(x)), False),
}


@pytest.mark.pipeline
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=dtype_id)
@pytest.mark.parametrize("case", sorted(MATRIX_VECTOR_PAIRS))
@pytest.mark.parametrize("shape", [(900, 700), (31, 40)], ids=str)
def test_matrix_vector_products_of_one_matrix_read_it_once(case, shape, dtype):
    """NPBench's atax, mvt and bicg: two products of the same large matrix with a vector
    each run as one pass over its rows (a block of rows read by both gemv calls in turn),
    where the second's vector is known before the first or is the first's result; with
    XLA's results up to the summation order. A small matrix (in the caches anyway) and
    other dependences keep two products. The pass is shared out in blocks of rows fixed
    when the program is compiled: the same bits whichever thread count the tuner tries."""
    fun, paired = MATRIX_VECTOR_PAIRS[case]
    m, n = shape
    args = [operand(dtype, s, seed) for s, seed in (((m, n), 1), ((n,), 2), ((n,), 3),
                                                     ((m,), 4))]
    large = args[0].nbytes >= current_machine().matvec_pass_bytes
    sdfg = hlo2dace.jit(fun).lower(*args).as_sdfg()
    passes = [n for n, _ in sdfg.all_nodes_recursive()
              if isinstance(n, nodes.Tasklet) and n.label.startswith("matvecs")]
    assert len(passes) == int(paired and large), passes
    # sums of a few hundred terms in another order: within 64 ulps of the largest result
    peak = max(float(np.max(np.abs(leaf))) for leaf in jax.tree_util.tree_leaves(
        jax.jit(fun)(*args)))
    assert_matches_jax(fun, *args, rtol=RTOL[np.dtype(dtype)],
                       atol=64 * float(np.finfo(dtype).eps) * peak)
    compiled = hlo2dace.jit(fun).lower(*args).compile()
    results = [jax.tree_util.tree_leaves(compiled(*args)) for _ in range(6)]
    for other in results[1:]:
        assert all(np.array_equal(np.asarray(a), np.asarray(b))
                   for a, b in zip(results[0], other))


def _long_expression(a, b):
    """More ops than a reader may recompute (``Builder.absorb``): the matrix is written."""
    for _ in range(60):
        a = a * 1.0001 + b
    return a


#: a product of a vector with a matrix (m x n) that an elementwise expression of ``a``, ``b``
#: computes, and what becomes of the matrix when it is large: computed block by block by
#: the product (the ``blocked_gemv`` kernel), written whole, or never written because
#: BLAS's alpha scales a matrix that is written already (``fold_scale_into_products``)
COMPUTED_MATRICES = {
    "scaled sum (gesummv)": (lambda a, b, x, y: (1.5 * a + 1.2 * b) @ x, "blocked"),
    "rows weighted, a transcendental": (lambda a, b, x, y: y @ jnp.tanh(a - b), "blocked"),
    "vector first, rows dotted with it": (
        lambda a, b, x, y: lax.dot_general(x, a * b, (((0,), (1,)), ((), ()))), "blocked"),
    "a reversed vector": (lambda a, b, x, y: (a - b) @ x[::-1], "blocked"),
    "the matrix read by a reduction too": (
        lambda a, b, x, y: (lambda c: (c @ x, c.sum()))(a + b), "written"),
    "too long an expression to recompute": (
        lambda a, b, x, y: _long_expression(a, b) @ x, "written"),
    "a scalar times an argument (BLAS's alpha)": (lambda a, b, x, y: (2.5 * a) @ x, "folded"),
}


def _computed_matrix_case(case, shape, dtype):
    """The function, its arguments (NaN and infinities among them) and whether the matrix
    is written: an array of its size among the SDFG's (the buffer of the blocks is never
    that size for these shapes). What BLAS reads instead is
    ``test_what_blas_reads_of_a_computed_matrix``'s."""
    fun, _ = COMPUTED_MATRICES[case]
    m, n = shape
    args = [operand(dtype, s, seed) for s, seed in (((m, n), 1), ((m, n), 2), ((n,), 3),
                                                     ((m,), 4))]
    args[0][m // 2, n // 3] = np.nan
    args[1][m // 3, :] = np.inf
    sdfg = hlo2dace.jit(fun).lower(*args).as_sdfg()
    written = [name for name, array in sdfg.arrays.items()
               if array.transient and tuple(array.shape) in ((m, n), (m * n,))]
    return fun, args, bool(written)


def _gemv_reads(calls, arguments) -> tuple[list[int], set[int], bool]:
    """The rows of each gemv call, the matrices they read, and whether one is an
    argument."""
    gemvs = [c for c in calls if c.kind == "gemv"]
    matrices = {c.operands[0] for c in gemvs}
    return [c.sizes[0] for c in gemvs], matrices, bool(matrices & set(arguments))


@pytest.mark.pipeline
def test_what_blas_reads_of_a_computed_matrix():
    """For each computed matrix of 900 x 700 doubles: a blocked one reaches gemv a block
    of rows at a time, all rows once, from buffers that are no argument; a written one
    whole, from its array; a scalar times an argument is the argument itself with the
    scalar as alpha."""
    cases = {case: _computed_matrix_case(case, (900, 700), np.float64)
             for case in sorted(COMPUTED_MATRICES)}
    reads = blas_calls([(fun, args) for fun, args, _ in cases.values()])
    for (case, (_, _, written)), (calls, arguments) in zip(cases.items(), reads):
        rows, matrices, reads_an_argument = _gemv_reads(calls, arguments)
        became = COMPUTED_MATRICES[case][1]
        assert written == (became == "written"), case
        if became == "blocked":
            assert sum(rows) == 900 and max(rows) < 900 and not reads_an_argument, (case, calls)
        elif became == "written":
            assert rows == [900] and not reads_an_argument, (case, calls)
        else:
            (gemv,) = [c for c in calls if c.kind == "gemv"]
            assert rows == [900] and matrices == {arguments[0]} and gemv.alpha == 2.5, calls


def _assert_product_matches_jax(fun, args, dtype):
    """XLA's results up to the order of the sums: within 64 ulps of the largest finite."""
    peak = max(float(np.max(np.abs(leaf[np.isfinite(leaf)]), initial=0.0))
               for leaf in map(np.asarray, jax.tree_util.tree_leaves(jax.jit(fun)(*args))))
    assert_matches_jax(fun, *args, rtol=RTOL[np.dtype(dtype)],
                       atol=64 * float(np.finfo(dtype).eps) * peak)


@pytest.mark.pipeline
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=dtype_id)
@pytest.mark.parametrize("case", sorted(COMPUTED_MATRICES))
@pytest.mark.parametrize("shape", [(900, 700), (31, 40)], ids=str)
def test_a_computed_matrix_times_a_vector_is_never_written(case, shape, dtype):
    """NPBench's gesummv: a large matrix computed elementwise and read only by a
    matrix-vector product is computed a block of rows at a time into a buffer that gemv
    reads while it is in L2, never written whole; NaN and infinities in its inputs
    propagate as in XLA's product. A small one (in the caches anyway), one that something
    else reads or that takes too many ops to recompute is written as before, and a scalar
    times an argument goes to BLAS's alpha, whatever its size (what gemv reads:
    ``test_what_blas_reads_of_a_computed_matrix``)."""
    fun, args, written = _computed_matrix_case(case, shape, dtype)
    large = args[0].nbytes >= current_machine().matvec_pass_bytes
    became = COMPUTED_MATRICES[case][1]
    assert written == (became == "written" or not large and became != "folded")
    _assert_product_matches_jax(fun, args, dtype)


@pytest.mark.parametrize("case", ["rows weighted, a transcendental",
                                  "vector first, rows dotted with it"])
@pytest.mark.pipeline
def test_a_computed_matrix_shared_out_in_parts(case):
    """Built for three threads, the blocks of a computed matrix are three parts, each with
    its own buffer (and, where rows are weighted, its own partial sums): XLA's results on
    this machine's threads, the same bits on every call."""
    fun, args, written = _computed_matrix_case(case, (900, 700), np.float64)
    assert not written
    # built for three threads (OMP_NUM_THREADS=3 in the child): gemv reads every row once
    # from three buffers, one per part
    ((calls, arguments),) = blas_calls([(fun, args)], threads=3)
    rows, matrices, reads_an_argument = _gemv_reads(calls, arguments)
    assert sum(rows) == 900 and len(matrices) == 3 and not reads_an_argument, calls
    _assert_product_matches_jax(fun, args, np.float64)
    compiled = hlo2dace.jit(fun).lower(*args).compile()
    first = np.asarray(compiled(*args))
    assert all(np.array_equal(first, np.asarray(compiled(*args)), equal_nan=True)
               for _ in range(4))


def test_matrix_vector_pairs_without_openblas():
    """Without OpenBLAS two products of one large matrix are two loop nests."""
    fun = MATRIX_VECTOR_PAIRS["chained (atax)"][0]
    args = [operand(np.float64, s, seed) for s, seed in (((700, 600), 1), ((600,), 2),
                                                          ((600,), 3), ((700,), 4))]
    assert args[0].nbytes >= current_machine().matvec_pass_bytes
    with assumed(dataclasses.replace(current_machine(), blas="none")):
        assert not [t for t in _tasklets(fun, *args) if "cblas_" in t.code.as_string
                    or t.label.startswith("matvecs")]
        assert_matches_jax(fun, *args, rtol=1e-13, atol=1e-11)
