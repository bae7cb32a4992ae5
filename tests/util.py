"""Differential testing against jax.jit: the shared assertions of every test module."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import ml_dtypes
import numpy as np
import pytest

import hlo2dace
from hlo2dace.compare import ulp_distance
from hlo2dace.optimize import level

#: set by ``make test``, which installs everything the suite needs (OpenMPI, mpi4py,
#: OpenBLAS, LAPACK, FFTW, the console script): there, a missing piece fails its tests
REQUIRE_ALL = os.environ.get("HLO2DACE_REQUIRE_ALL") == "1"


def needs(available: bool, what: str) -> None:
    """Skip the test, naming ``what`` it needs, unless ``available``; under ``make test``
    (``REQUIRE_ALL``), which installs it, fail instead: a missing piece is an error of the
    set-up, not a reason to check less."""
    if available:
        return
    if REQUIRE_ALL:
        pytest.fail(f"needs {what}, which make test installs (HLO2DACE_REQUIRE_ALL=1)")
    pytest.skip(f"needs {what} (make test installs it)")


FLOAT_DTYPES = (np.float16, ml_dtypes.bfloat16, np.float32, np.float64)
SIGNED_DTYPES = (np.int8, np.int16, np.int32, np.int64)
UNSIGNED_DTYPES = (np.uint8, np.uint16, np.uint32, np.uint64)
INTEGER_DTYPES = SIGNED_DTYPES + UNSIGNED_DTYPES
COMPLEX_DTYPES = (np.complex64, np.complex128)
ALL_DTYPES = (np.bool_,) + INTEGER_DTYPES + FLOAT_DTYPES + COMPLEX_DTYPES


def dtype_id(dtype) -> str:
    return np.dtype(dtype).name


def special_values(dtype, rng: np.random.Generator | None = None, random: int = 8):
    """Edge cases of ``dtype`` (NaN, +-inf, -0.0, extremes, denormals / INT_MIN, -1, max),
    followed by ``random`` random values."""
    dtype = np.dtype(dtype)
    rng = rng or np.random.default_rng(0)
    if dtype.kind == "b":
        return np.array([False, True] + list(rng.random(random) < 0.5), dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = [0, 1, 2, 3, 7, info.max, info.max - 1, info.min, info.min + 1]
        if dtype.kind == "i":
            values += [-1, -2, -3, -7]
        values += list(rng.integers(info.min, info.max, random, dtype=dtype, endpoint=True))
        return np.array(values, dtype)
    if dtype.kind == "c":
        part = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
        real = special_values(part, rng, random)
        imag = np.roll(real, 3)
        with np.errstate(invalid="ignore"):  # inf * 1j has a NaN real part, as intended
            return (real + 1j * imag).astype(dtype)
    finfo = ml_dtypes.finfo(dtype)
    values = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, np.inf, -np.inf, np.nan,
              -np.nan, float(finfo.max), float(-finfo.max), float(finfo.tiny),
              float(finfo.smallest_subnormal), 1e-3, 100.0]
    values += list(rng.standard_normal(random) * 10)
    return np.array(values, dtype=np.float64).astype(dtype)


def pairs(a: np.ndarray, b: np.ndarray):
    """Every combination of the elements of ``a`` and ``b``, as two flat arrays."""
    return np.repeat(a, b.size), np.tile(b, a.size)


def _float_like(array: np.ndarray) -> bool:
    """NumPy's floats and complex numbers, and ml_dtypes' (bf16, the 8-, 6- and 4-bit
    floats)."""
    if array.dtype.kind in "fc":
        return True
    try:
        ml_dtypes.finfo(array.dtype)
    except ValueError:
        return False
    return True


def assert_arrays_match(expected: Any, actual: Any, *, ulp: float = 0, rtol: float = 0.0,
                        atol: float = 0.0, signed_zeros: bool = True, where: str = "") -> None:
    """``actual`` equals ``expected`` up to ``ulp`` units in the last place (or ``rtol``
    and ``atol``); NaNs at the same places; infinities and (optionally) zero signs equal."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    assert actual.shape == expected.shape, f"{where}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != {expected.dtype}"
    if not _float_like(expected):
        bad = np.argwhere(np.atleast_1d(actual != expected))
        assert bad.size == 0, (f"{where}: {len(bad)} elements differ, first at {bad[0]}: "
                               f"{np.atleast_1d(actual)[tuple(bad[0])]!r} != "
                               f"{np.atleast_1d(expected)[tuple(bad[0])]!r}")
        return
    parts = ([(expected.real, actual.real), (expected.imag, actual.imag)]
             if expected.dtype.kind == "c" else [(expected, actual)])
    for e, a in parts:
        e64, a64 = e.astype(np.float64), a.astype(np.float64)
        nan_e, nan_a = np.isnan(e64), np.isnan(a64)
        ok = nan_e == nan_a
        finite = ~nan_e & ~nan_a
        close = ulp_distance(e, a) <= ulp
        if rtol or atol:
            with np.errstate(invalid="ignore"):  # inf - inf: infinities are checked below
                close |= np.abs(e64 - a64) <= atol + rtol * np.abs(e64)
        inf = np.isinf(e64) | np.isinf(a64)
        close = np.where(inf, e64 == a64, close)
        if signed_zeros:
            zero = (e64 == 0) & (a64 == 0)
            close = np.where(zero, np.signbit(e64) == np.signbit(a64), close)
        ok &= ~finite | close
        bad = np.argwhere(np.atleast_1d(~ok))
        assert bad.size == 0, (
            f"{where}: {len(bad)} of {e.size} elements differ, first at {bad[0]}: got "
            f"{np.atleast_1d(a)[tuple(bad[0])]!r}, XLA gives {np.atleast_1d(e)[tuple(bad[0])]!r}")


def contraction_tolerance(products: np.ndarray) -> dict[str, float]:
    """How far a result may be from XLA's where XLA contracts ``a * b + c`` into one fused
    multiply-add and ``products`` are the values of ``a * b``: at the plain lowering
    (``optimize="none"``: no ``contract_multiply_adds``) the product is rounded before it
    is added, half an ULP of the largest product, and the sum then rounds to a neighbour
    of XLA's, one ULP of the result; nothing at the other levels."""
    if level().name != "none":
        return {}
    eps = float(np.finfo(products.dtype).eps)
    return {"atol": float(np.max(np.abs(products))) * eps / 2, "rtol": eps}


def assert_matches_jax(fun: Callable, *args, ulp: float = 0, rtol: float = 0.0,
                       atol: float = 0.0, tolerances: dict | None = None,
                       signed_zeros: bool = True, **kwargs) -> Any:
    """Run ``fun`` with ``jax.jit`` and ``hlo2dace.jit`` and compare every output leaf.
    ``tolerances`` maps a leaf's path (as jax.tree_util.keystr prints it) to an ``ulp``."""
    expected = jax.jit(fun)(*args, **kwargs)
    actual = hlo2dace.jit(fun)(*args, **kwargs)
    expected_leaves = jax.tree_util.tree_leaves_with_path(expected)
    actual_leaves = jax.tree_util.tree_leaves(actual)
    assert jax.tree_util.tree_structure(expected) == jax.tree_util.tree_structure(actual)
    for (path, e), a in zip(expected_leaves, actual_leaves):
        where = jax.tree_util.keystr(path)
        leaf_ulp = (tolerances or {}).get(where, ulp)
        assert isinstance(a, jax.Array), f"{where}: result is {type(a)}, not a jax.Array"
        assert_arrays_match(e, a, ulp=leaf_ulp, rtol=rtol, atol=atol,
                            signed_zeros=signed_zeros, where=where)
    return actual


def random_operand(dtype, shape, seed: int = 0, exact_16_bit: bool = False) -> np.ndarray:
    """Random operands of products and convolutions: normal values for floats (complex:
    both parts); the extremes among integers, so that products and sums wrap; 30% true
    booleans. ``exact_16_bit``: small integers for f16/bf16, so that f32 sums are exact and
    rounding once gives XLA's bits."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        values = special_values(dtype, rng, random=max(8, int(np.prod(shape))))
        return np.resize(rng.permutation(values), shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.3
    if exact_16_bit and dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        return rng.integers(-3, 4, shape).astype(dtype)
    values = rng.standard_normal(shape)
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


# ------------------------------------------------------------ what BLAS receives

BLAS_LOG_SOURCE = Path(__file__).with_name("blas_log.c")
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class BlasCall:
    """One call of a CBLAS routine: its name (``dgemm``...), transposes (gemm: of A and
    B; gemv: of A), sizes (gemm: M, N, K; gemv: M, N; dot and axpy: N), alpha (1 for dot)
    and the addresses of its operands (gemm: A, B, C; gemv: A, x, y; dot: x, y; axpy: x,
    y; 0 for none)."""

    routine: str
    transposes: tuple[int, int]
    sizes: tuple[int, ...]
    alpha: complex
    operands: tuple[int, ...]

    @property
    def kind(self) -> str:
        return self.routine[1:]


@functools.lru_cache(maxsize=1)
def blas_log_library() -> Path:
    """tests/blas_log.c built once per test process (the C compiler DaCe uses)."""
    folder = Path(tempfile.mkdtemp(prefix="h2d-blas-log-"))
    library = folder / "libblaslog.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(library), str(BLAS_LOG_SOURCE),
                    "-ldl"], check=True, capture_output=True, text=True)
    return library


_BLAS_CHILD = """
import json, sys
import numpy as np
import hlo2dace
import dataclasses
from hlo2dace.machine import current_machine
from hlo2dace.pipeline import Options
texts, inputs, log, vector_bytes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
with open(texts) as file:
    modules = json.load(file)
machine = current_machine()
if vector_bytes:
    machine = dataclasses.replace(machine, vector_bytes=int(vector_bytes))
addresses = []
for k, text in enumerate(modules):
    with np.load(f"{inputs}{k}.npz") as data:
        args = [data[f"arg_{i}"] for i in range(len(data.files))]
    compiled = hlo2dace.compile_text(text, optimize=Options(machine=machine))
    with open(log, "a") as file:
        file.write(f"case {k}\\n")
    compiled(*args)
    addresses.append([a.ctypes.data for a in args])
print(json.dumps(addresses))
"""


def blas_calls(cases: Sequence[tuple[Callable, Sequence[Any]]], threads: int | None = None,
               vector_bytes: int | None = None) -> list[tuple[list[BlasCall], list[int]]]:
    """Per ``(fun, args)``: the CBLAS calls of one call of ``hlo2dace.jit(fun)``'s program
    on ``args``, and the addresses of the arguments it was given (NumPy arrays passed
    without a copy), so that a test can say which operand BLAS read. The programs run in
    one child process whose BLAS goes through tests/blas_log.c; ``threads``: the
    ``OMP_NUM_THREADS`` it is built and run for; ``vector_bytes``: the vector width of the
    machine model it is built for (32: every product of f32 or f64 goes to BLAS, none to
    the ``few_rows`` kernel of 64-byte vectors)."""
    folder = Path(tempfile.mkdtemp(prefix="h2d-blas-calls-"))
    texts = [hlo2dace.jit(fun).lower(*args).as_text() for fun, args in cases]
    (folder / "modules.json").write_text(json.dumps(texts))
    for k, (_, args) in enumerate(cases):
        np.savez(folder / f"inputs{k}.npz", **{f"arg_{i}": np.asarray(a)
                                               for i, a in enumerate(args)})
    log = folder / "blas.log"
    env = dict(os.environ, LD_PRELOAD=str(blas_log_library()), H2D_BLAS_LOG=str(log))
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    done = subprocess.run([sys.executable, "-c", _BLAS_CHILD, str(folder / "modules.json"),
                           str(folder / "inputs"), str(log), str(vector_bytes or "")],
                          env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    addresses = json.loads(done.stdout.strip().splitlines()[-1])
    calls: list[list[BlasCall]] = []
    for line in log.read_text().splitlines():
        if line.startswith("case "):
            calls.append([])
            continue
        routine, ta, tb, *rest = line.split()
        m, n, k, alpha, alpha_imag = rest[:5]
        sizes = {"gemm": (m, n, k), "gemv": (m, n)}.get(routine[1:], (m,))
        calls[-1].append(BlasCall(routine, (int(ta), int(tb)), tuple(int(s) for s in sizes),
                                  complex(float(alpha), float(alpha_imag)),
                                  tuple(0 if p == "(nil)" else int(p, 16) for p in rest[5:])))
    return list(zip(calls, addresses))
