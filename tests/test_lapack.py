"""Differential tests of linear algebra (translate/lapack.py, translate/custom_call.py)
against jax.jit: the LAPACK custom calls JAX emits for jnp.linalg, jax.scipy.linalg and
lax.linalg on every LAPACK dtype with batch dimensions, failed factorisations, NaN inputs,
empty and 1x1 matrices, custom calls in other layouts than JAX's, and the
stablehlo.cholesky and stablehlo.triangular_solve ops against XLA on the same module.

XLA calls the same LAPACK routines with the same arguments (but another OpenBLAS build), so
results agree to a few rounding errors; eigenvectors and singular vectors are compared up
to a phase per vector, as another build may pick another one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import hlo2dace
from hlo2dace.errors import UnsupportedError
from hlo2dace.translate import lapack
from hlo2dace.xla import run_module

from util import assert_arrays_match, assert_matches_jax, dtype_id, needs

LAPACK_DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
#: the element types of stablehlo.triangular_solve and stablehlo.cholesky
ELEMENTS = {np.float32: "f32", np.float64: "f64", np.complex64: "complex<f32>",
            np.complex128: "complex<f64>", np.float16: "f16", ml_dtypes.bfloat16: "bf16"}
OP_DTYPES = tuple(ELEMENTS)



@pytest.fixture(autouse=True)
def _lapack():
    needs(lapack.lapack_installed(), "LAPACK (Debian's libopenblas-dev, liblapacke-dev)")


def tolerance(dtype) -> dict:
    """Relative and absolute tolerances for O(n) rounding errors of well-conditioned inputs
    (f16 and bf16: XLA computes in them, hlo2dace in f32 with one rounding at the end)."""
    dtype = np.dtype(dtype)
    if dtype.itemsize == 2:
        return {"rtol": 3e-2, "atol": 3e-2}
    single = dtype in (np.dtype(np.float32), np.dtype(np.complex64))
    return {"rtol": 1e-4 if single else 1e-11, "atol": 1e-5 if single else 1e-12}


def random(dtype, shape, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def positive_definite(dtype, batch, n, seed: int = 0) -> np.ndarray:
    m = random(np.complex128 if np.dtype(dtype).kind == "c" else np.float64, (*batch, n, n),
               seed)
    return (m @ np.conj(np.swapaxes(m, -1, -2)) + n * np.eye(n)).astype(dtype)


def assert_same_up_to_phase(expected, actual, axis: int, dtype) -> None:
    """Vectors along ``axis`` equal up to a unit factor each (sign, complex phase)."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    assert expected.shape == actual.shape and expected.dtype == actual.dtype
    inner = np.sum(np.conj(expected) * actual, axis=axis, keepdims=True)
    phase = np.where(np.abs(inner) > 0, inner / np.abs(inner), 1)
    assert_arrays_match(expected * phase, actual, **tolerance(dtype))


# ------------------------------------------------------------------ factorisations


@pytest.mark.parametrize("dtype", LAPACK_DTYPES, ids=dtype_id)
def test_cholesky(dtype):
    """A batch with a positive definite and an indefinite matrix (NaN result, as under
    XLA); a 1x1 matrix; the upper factor through scipy."""
    a = positive_definite(dtype, (2,), 5)
    a[1] = -a[1]
    one = np.array([[4.0]], dtype)

    def f(a, one):
        return {"batch": jnp.linalg.cholesky(a), "one": jnp.linalg.cholesky(one),
                "upper": jsl.cholesky(a[0], lower=False)}

    assert_matches_jax(f, a, one, **tolerance(dtype))


@pytest.mark.parametrize("dtype", LAPACK_DTYPES, ids=dtype_id)
def test_qr(dtype):
    """Tall and wide batches in the reduced, complete and r-only modes (geqrf, orgqr)."""
    tall, wide = random(dtype, (2, 5, 3)), random(dtype, (2, 3, 5), seed=1)

    def f(tall, wide):
        return {f"{name}_{mode}": jnp.linalg.qr(x, mode=mode)
                for name, x in (("tall", tall), ("wide", wide))
                for mode in ("reduced", "complete", "r")}

    assert_matches_jax(f, tall, wide, **tolerance(dtype))


@pytest.mark.parametrize("dtype", LAPACK_DTYPES, ids=dtype_id)
def test_eigh(dtype):
    """Eigenvalues; eigenvectors up to phase and as a reconstruction; the lower and the
    upper triangle (syevd / heevd)."""
    a = positive_definite(dtype, (2,), 5) - 5 * np.eye(5, dtype=dtype)

    def f(a):
        return (jnp.linalg.eigh(a, UPLO="L", symmetrize_input=False),
                jnp.linalg.eigh(a, UPLO="U", symmetrize_input=False))

    expected, actual = jax.jit(f)(a), hlo2dace.jit(f)(a)
    for (w, v), (w_, v_) in zip(expected, actual):
        assert_arrays_match(w, w_, **tolerance(dtype))
        assert_same_up_to_phase(v, v_, -2, dtype)
        reconstructed = (np.asarray(v_) * np.asarray(w_)[..., None, :]) @ np.conj(
            np.swapaxes(np.asarray(v_), -1, -2))
        assert_arrays_match(a, reconstructed.astype(dtype), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("dtype", LAPACK_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", [(2, 5, 3), (2, 3, 5)], ids=["tall", "wide"])
def test_svd(dtype, shape):
    """Full and thin singular vectors (up to phase) and singular values only (gesdd modes
    A, S, N), and the QR-iteration algorithm (gesvd)."""
    x = random(dtype, shape)

    def f(x):
        return {"full": jnp.linalg.svd(x), "thin": jnp.linalg.svd(x, full_matrices=False),
                "values": jnp.linalg.svd(x, compute_uv=False),
                "qr": lax.linalg.svd(x, algorithm=lax.linalg.SvdAlgorithm.QR)}

    expected, actual = jax.jit(f)(x), hlo2dace.jit(f)(x)
    assert_arrays_match(expected["values"], actual["values"], **tolerance(dtype))
    for key in ("full", "thin", "qr"):
        if key == "qr":
            (e_s, e_u, e_vt), (s, u, vt) = expected[key], actual[key]
        else:
            (e_u, e_s, e_vt), (u, s, vt) = expected[key], actual[key]
        assert_arrays_match(e_s, s, **tolerance(dtype))
        k = min(shape[-2:])  # vectors beyond the singular values are any basis
        assert_same_up_to_phase(np.asarray(e_u)[..., :k], np.asarray(u)[..., :k], -2, dtype)
        assert_same_up_to_phase(np.asarray(e_vt)[..., :k, :], np.asarray(vt)[..., :k, :], -1,
                                dtype)


@pytest.mark.parametrize("dtype", LAPACK_DTYPES, ids=dtype_id)
def test_lu(dtype):
    """LU factors, pivots and permutations exactly; square, tall, wide and singular."""
    square, tall, wide = (random(dtype, (2, 4, 4)), random(dtype, (3, 5, 3), 1),
                          random(dtype, (3, 5), 2))
    square[1, :, 2] = 0  # singular: info > 0, factors kept

    def f(square, tall, wide):
        return [lax.linalg.lu(square), lax.linalg.lu(tall), lax.linalg.lu(wide)]

    assert_matches_jax(f, square, tall, wide, **tolerance(dtype))


@pytest.mark.parametrize("dtype", OP_DTYPES, ids=dtype_id)
def test_solve_triangular(dtype):
    """Every side, triangle, transposition and diagonal of triangular_solve (trsm; for f16
    and bf16 stablehlo.triangular_solve), the unused triangle holding garbage, a batch."""
    a = (random(np.float64, (2, 4, 4)) + 4 * np.eye(4)).astype(dtype)
    b = random(dtype, (2, 4, 3), 1)
    c = random(dtype, (2, 3, 4), 2)

    def f(a, b, c):
        out = {}
        for lower in (True, False):
            for trans in (0, 1, 2):
                for unit in (False, True):
                    key = f"{'lower' if lower else 'upper'}_t{trans}_{'unit' if unit else 'diag'}"
                    out[key] = jsl.solve_triangular(a, b, lower=lower, trans=trans,
                                                    unit_diagonal=unit)
                    out[key + "_right"] = lax.linalg.triangular_solve(
                        a, c, left_side=False, lower=lower, transpose_a=trans > 0,
                        conjugate_a=trans == 2, unit_diagonal=unit)
        return out

    assert_matches_jax(f, a, b, c, **tolerance(dtype))


@pytest.mark.parametrize("dtype", LAPACK_DTYPES, ids=dtype_id)
def test_eig(dtype):
    """General eigenvalues (complex pairs for real input) and left and right eigenvectors
    (geev), with a NaN matrix in the batch (not factorised: all NaN)."""
    a = random(dtype, (3, 4, 4))
    a[2, 1, 1] = np.nan

    def f(a):
        return lax.linalg.eig(a, compute_left_eigenvectors=True)

    expected, actual = jax.jit(f)(a), hlo2dace.jit(f)(a)
    assert_arrays_match(expected[0], actual[0], **tolerance(dtype))
    for e, v in zip(expected[1:], actual[1:]):
        assert_arrays_match(np.isnan(e), np.isnan(v))
        assert_same_up_to_phase(np.asarray(e)[:2], np.asarray(v)[:2], -2, dtype)


@pytest.mark.parametrize("dtype", LAPACK_DTYPES, ids=dtype_id)
def test_other_decompositions(dtype):
    """Hessenberg (gehrd), Schur (gees), tridiagonal reduction (sytrd / hetrd) and solve
    (gtsv), pivoted QR (geqp3), Householder products (orgqr, ormqr)."""
    a = random(dtype, (2, 4, 4))
    h = a + np.conj(np.swapaxes(a, -1, -2))
    rhs = random(dtype, (2, 4, 2), 1)
    taus = random(dtype, (2, 3), 2)

    def f(a, h, rhs, taus):
        return {"hessenberg": jsl.hessenberg(a[0], calc_q=True),
                "tridiagonal": lax.linalg.tridiagonal(h),
                "tridiagonal_solve": lax.linalg.tridiagonal_solve(a[:, 0], a[:, 1], a[:, 2],
                                                                  rhs),
                "qr_pivoting": jsl.qr(a[0], pivoting=True),
                "householder": lax.linalg.householder_product(a, taus),
                "ormqr": lax.linalg.ormqr(a, taus, h, left=False, transpose=True)}

    assert_matches_jax(f, a, h, rhs, taus, **tolerance(dtype))
    # the Schur form is unique only up to a unit factor per Schur vector (and, for real
    # matrices, an orthogonal change of basis within each 2x2 block): another OpenBLAS
    # build (AVX-512 kernels) picks other ones, so its defining properties are compared
    expected_t, _ = jax.jit(jsl.schur)(a[0])
    t, q = hlo2dace.jit(jsl.schur)(a[0])
    assert_schur_form(a[0], np.asarray(t), np.asarray(q), np.asarray(expected_t), dtype)


def assert_schur_form(a, t, q, expected_t, dtype) -> None:
    """``a = q t q^H`` with ``q`` unitary and ``t`` upper triangular (real matrices: 1x1
    and 2x2 diagonal blocks), with the eigenvalues of XLA's ``expected_t``."""
    n = a.shape[-1]
    assert t.dtype == q.dtype == np.dtype(dtype) and t.shape == q.shape == a.shape
    scale = {"rtol": 0, "atol": 50 * np.finfo(dtype).eps * np.abs(a).max() * n}
    np.testing.assert_allclose(q @ t @ np.conj(q.T), a, **scale)
    np.testing.assert_allclose(np.conj(q.T) @ q, np.eye(n), rtol=0,
                               atol=50 * np.finfo(dtype).eps * n)
    below = np.tril(t, -1 if np.iscomplexobj(t) else -2)
    assert not below.any(), f"not (quasi) upper triangular:\n{t}"
    if not np.iscomplexobj(t):  # 2x2 blocks do not overlap
        sub = np.diagonal(t, -1) != 0
        assert not (sub[1:] & sub[:-1]).any(), f"overlapping 2x2 blocks:\n{t}"
    eigenvalues = np.sort_complex(np.linalg.eigvals(t.astype(np.complex128)))
    expected = np.sort_complex(np.linalg.eigvals(expected_t.astype(np.complex128)))
    np.testing.assert_allclose(eigenvalues, expected, **scale)


@pytest.mark.parametrize("dtype", LAPACK_DTYPES, ids=dtype_id)
def test_solve_inv_det(dtype):
    """jnp.linalg.solve, inv, det and slogdet (getrf with while loops, gathers and
    scatters around it), a singular matrix included."""
    a = random(dtype, (3, 4, 4))
    a[2, 3] = a[2, 0]
    b = random(dtype, (3, 4, 2), 1)

    def f(a, b):
        return {"solve": jnp.linalg.solve(a[:2], b[:2]), "inv": jnp.linalg.inv(a[:2]),
                "det": jnp.linalg.det(a[:2]), "slogdet": jnp.linalg.slogdet(a[:2])}

    assert_matches_jax(f, a, b, **tolerance(dtype))
    # the singular matrix's determinant is rounding noise whose sign (for complex
    # matrices, phase) and size depend on the order of the products: only its size is
    # defined, zero to within the rounding of an n-term product of the matrix's entries
    det, (sign, log_abs) = hlo2dace.jit(
        lambda a: (jnp.linalg.det(a), jnp.linalg.slogdet(a)))(a[2])
    noise = 100 * np.finfo(dtype).eps * np.abs(a[2]).max() ** 4
    assert abs(complex(det)) <= noise and float(log_abs) <= np.log(noise), (det, log_abs)
    assert abs(complex(sign)) in (0.0, 1.0) or np.isclose(abs(complex(sign)), 1.0), sign
    np.testing.assert_allclose(complex(sign) * np.exp(float(log_abs)), complex(det),
                               rtol=1e-3, atol=0)


NAN_FUNCTIONS = [jnp.linalg.cholesky, lax.linalg.lu, jnp.linalg.qr, jnp.linalg.eigh,
                 jnp.linalg.svd, jnp.linalg.eig, jnp.linalg.inv]


@pytest.mark.parametrize("fun", NAN_FUNCTIONS, ids=lambda f: f.__name__)
def test_nan_inputs(fun):
    """A NaN in a matrix gives NaNs in its results and in none of the batch's other
    matrices. Where exactly they land depends on the OpenBLAS build (its kernels skip some
    products by zero), so only the NaN matrices are compared, and the others' values."""
    a = positive_definite(np.float64, (3,), 4)
    a[1, 2, 1] = a[1, 1, 2] = np.nan
    a[2, 0, 3] = a[2, 3, 0] = np.inf
    expected, actual = jax.jit(fun)(a), hlo2dace.jit(fun)(a)
    for e, x in zip(jax.tree.leaves(expected), jax.tree.leaves(actual)):
        e, x = np.asarray(e), np.asarray(x)
        assert_arrays_match(e[0], x[0], **tolerance(np.float64))
        for i in (1, 2):
            assert np.isnan(x[i]).any() == np.isnan(e[i]).any(), (i, e[i], x[i])


@pytest.mark.parametrize("fun", NAN_FUNCTIONS, ids=lambda f: f.__name__)
def test_empty_and_1x1_matrices(fun):
    """0x0 matrices, alone and in a batch, an empty batch of matrices, a 1x1 matrix."""

    def f(*xs):
        return [fun(x) for x in xs]

    assert_matches_jax(f, np.zeros((0, 0), np.float32), np.zeros((2, 0, 0), np.float32),
                       np.zeros((0, 3, 3), np.float32), np.full((1, 1), 2.5, np.float32))


# ------------------------------------------------------------------ custom call layouts

POTRF_ROW_MAJOR = """
func.func public @main(%a: tensor<2x3x3xf64>) -> (tensor<2x3x3xf64>, tensor<2xi32>) {
  %0:2 = stablehlo.custom_call @lapack_dpotrf_ffi(%a) {mhlo.backend_config = {uplo = 76 : ui8},
      operand_layouts = [dense<[2, 1, 0]> : tensor<3xindex>],
      result_layouts = [dense<[2, 1, 0]> : tensor<3xindex>, dense<0> : tensor<1xindex>]}
      : (tensor<2x3x3xf64>) -> (tensor<2x3x3xf64>, tensor<2xi32>)
  return %0#0, %0#1 : tensor<2x3x3xf64>, tensor<2xi32>
}"""

GETRF_MIXED_LAYOUTS = """
func.func public @main(%a: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3xi32>) {
  %t = stablehlo.transpose %a, dims = [0, 2, 1] : (tensor<2x3x4xf32>) -> tensor<2x4x3xf32>
  %0:3 = stablehlo.custom_call @lapack_sgetrf_ffi(%t) {mhlo.backend_config = {},
      operand_layouts = [dense<[1, 0, 2]> : tensor<3xindex>],
      result_layouts = [dense<[2, 0, 1]> : tensor<3xindex>, dense<[0, 1]> : tensor<2xindex>,
                        dense<0> : tensor<1xindex>]}
      : (tensor<2x4x3xf32>) -> (tensor<2x4x3xf32>, tensor<2x3xi32>, tensor<2xi32>)
  %1 = stablehlo.transpose %0#0, dims = [0, 2, 1] : (tensor<2x4x3xf32>) -> tensor<2x3x4xf32>
  return %1, %0#1 : tensor<2x3x4xf32>, tensor<2x3xi32>
}"""


@pytest.mark.parametrize("module,dtype,shape", [(POTRF_ROW_MAJOR, np.float64, (2, 3, 3)),
                                                (GETRF_MIXED_LAYOUTS, np.float32, (2, 3, 4))],
                         ids=["potrf_row_major", "getrf_mixed"])
def test_custom_call_layouts(module, dtype, shape):
    """Buffers in the declared layouts, whatever they are: a row-major potrf factorises the
    transpose (the unused triangle keeps the input), a getrf sees a batch-minor buffer."""
    jax.jit(jnp.linalg.cholesky)(np.eye(2))  # initialises jaxlib's LAPACK targets
    x = random(dtype, shape)
    if shape[-1] == shape[-2]:
        x = positive_definite(dtype, shape[:-2], shape[-1]) + np.triu(x, 1)
    expected = run_module(module, [x])
    actual = hlo2dace.compile_text(module)(x)
    for e, a in zip(expected, actual):
        assert_arrays_match(e, np.asarray(a), **tolerance(dtype))


POTRF_COLUMN_MAJOR = """
func.func public @main(%a: tensor<3x6x6x{element}>) -> (tensor<3x6x6x{element}>, tensor<3xi32>) {{
  %0:2 = stablehlo.custom_call @lapack_{letter}potrf_ffi(%a) {{
      mhlo.backend_config = {{uplo = {uplo} : ui8}},
      operand_layouts = [dense<[1, 2, 0]> : tensor<3xindex>],
      result_layouts = [dense<[1, 2, 0]> : tensor<3xindex>, dense<0> : tensor<1xindex>]}}
      : (tensor<3x6x6x{element}>) -> (tensor<3x6x6x{element}>, tensor<3xi32>)
  return %0#0, %0#1 : tensor<3x6x6x{element}>, tensor<3xi32>
}}"""


@pytest.mark.parametrize("uplo", "LU")
@pytest.mark.parametrize("dtype", LAPACK_DTYPES, ids=dtype_id)
def test_column_major_potrf_runs_on_row_major_buffers(dtype, uplo):
    """JAX's column-major potrf factorises the row-major buffers with uplo swapped (the
    factor of the transposed triangle): XLA's factor, unused triangle and info for both
    triangles, an indefinite matrix among them, and no transposed copy of the matrix."""
    jax.jit(jnp.linalg.cholesky)(np.eye(2))  # initialises jaxlib's LAPACK targets
    x = positive_definite(dtype, (3,), 6)
    x[1] = -x[1]
    noise = random(dtype, (3, 6, 6), seed=1)
    x += np.triu(noise, 1) if uplo == "L" else np.tril(noise, -1)
    module = POTRF_COLUMN_MAJOR.format(element=ELEMENTS[dtype], uplo=ord(uplo),
                                       letter="sdcz"[LAPACK_DTYPES.index(dtype)])
    expected = run_module(module, [x])
    lowered = hlo2dace.lower_text(module)
    for e, a in zip(expected, lowered.compile()(x)):
        assert_arrays_match(e, np.asarray(a), **tolerance(dtype))
    assert not [name for name in lowered.as_sdfg().arrays if "_layout" in name]


def test_unknown_custom_call_target():
    module = """
func.func public @main(%a: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @my_kernel(%a) : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}"""
    with pytest.raises(UnsupportedError, match="custom call target 'my_kernel'") as info:
        hlo2dace.lower_text(module).as_sdfg()
    assert "shape_assertion" in info.value.supported
    assert "60 LAPACK kernels (lapack_*_ffi, from jnp.linalg and jax.scipy.linalg); " \
        "docs/ops.md lists them all" in info.value.supported
    assert len(str(info.value)) < 400


def test_unsupported_attribute():
    module = POTRF_ROW_MAJOR.replace("uplo = 76", "uplo = 88")
    with pytest.raises(UnsupportedError, match="attribute uplo = 88"):
        hlo2dace.lower_text(module).as_sdfg()


def test_without_lapack(monkeypatch):
    monkeypatch.setattr(lapack, "lapack_installed", lambda: False)
    with pytest.raises(UnsupportedError, match="LAPACK is not installed"):
        hlo2dace.lower_text(POTRF_ROW_MAJOR).as_sdfg()


# ------------------------------------------------------------------ StableHLO ops


def _ops_module(ops: list[str], types: list[str], element: str) -> str:
    """A module of ``ops`` (each ``%r<i> = ...`` over ``%a`` and ``%b``, of the shapes in
    ``types``: ``a``, ``b``, then the results) returning their results."""
    tensor = [f"tensor<{t}x{element}>" for t in types]
    results = ", ".join(f"%r{i}" for i in range(len(ops)))
    return (f"func.func public @main(%a: {tensor[0]}, %b: {tensor[1]}) -> "
            f"({', '.join(tensor[2:])}) {{\n" + "\n".join(ops)
            + f"\n  return {results} : {', '.join(tensor[2:])}\n}}")



@pytest.mark.parametrize("dtype", OP_DTYPES, ids=dtype_id)
def test_triangular_solve_op(dtype):
    """stablehlo.triangular_solve against XLA: both sides, triangles, every transpose_a and
    unit_diagonal, a batch dimension; the unused triangle of ``a`` is garbage."""
    element = ELEMENTS[dtype]
    a = (random(np.float64, (2, 4, 4)) + 4 * np.eye(4)).astype(dtype)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * random(np.float64, (2, 4, 4), 3).astype(dtype)
    b = random(dtype, (2, 4, 4), 1)
    ops, types = [], ["2x4x4", "2x4x4"]
    for left in ("true", "false"):
        for lower in ("true", "false"):
            for transpose in ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"):
                for unit in ("false", "true"):
                    ops.append(
                        f'  %r{len(ops)} = "stablehlo.triangular_solve"(%a, %b) {{left_side = '
                        f'{left}, lower = {lower}, unit_diagonal = {unit}, transpose_a = '
                        f'#stablehlo<transpose {transpose}>}} : (tensor<2x4x4x{element}>, '
                        f'tensor<2x4x4x{element}>) -> tensor<2x4x4x{element}>')
                    types.append("2x4x4")
    module = _ops_module(ops, types, element)
    expected = run_module(module, [a, b])
    actual = hlo2dace.compile_text(module)(a, b)
    for e, x in zip(expected, actual):
        assert_arrays_match(e, np.asarray(x), **tolerance(dtype))


@pytest.mark.parametrize("dtype", OP_DTYPES, ids=dtype_id)
def test_cholesky_op(dtype):
    """stablehlo.cholesky against XLA: lower and upper, a batch with a positive definite, an
    indefinite and a NaN matrix, garbage in the unused triangle, and a singular positive
    semidefinite matrix (a zero last pivot, which XLA keeps)."""
    element = ELEMENTS[dtype]
    a = positive_definite(dtype, (4,), 3)
    a[1, 2, 2] = -20
    a[2, 1, 0] = a[2, 0, 1] = np.nan
    a[3] = np.array([[4, 0, 0], [0, 1, 1], [0, 1, 1]], dtype)
    b = (a + np.triu(random(dtype, (4, 3, 3), 1), 1)).astype(dtype)  # garbage above
    ops = [f'  %r{i} = "stablehlo.cholesky"(%{x}) {{lower = {lower}}} : '
           f'(tensor<4x3x3x{element}>) -> tensor<4x3x3x{element}>'
           for i, (x, lower) in enumerate([("a", "true"), ("b", "true"), ("a", "false")])]
    module = _ops_module(ops, ["4x3x3"] * 5, element)
    expected = run_module(module, [a, b])
    actual = hlo2dace.compile_text(module)(a, b)
    for e, x in zip(expected, actual):
        assert_arrays_match(e, np.asarray(x), **tolerance(dtype))
