"""stablehlo.fft against jax.jit: jnp.fft's fft/ifft/rfft/irfft and their 2-D and n-D
forms, over lengths that are odd, prime, powers of two and neither, with the n argument
padding and cropping, chosen axes, batches, complex64/complex128 (f32/f64 for the real
transforms), inputs that are not Hermitian for the inverse real transforms, NaN and
infinities, empty batches, and transforms inside loops. FFT algorithms differ in their
rounding (XLA's CPU runs ducc0, hlo2dace FFTW), so results are compared to within a few
ULP times log2 of the length, relative to the largest magnitude of the result."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import hlo2dace
from hlo2dace.errors import UnsupportedError
from hlo2dace.translate import fft

from util import assert_arrays_match, dtype_id, needs


@pytest.fixture(autouse=True)
def _fftw():
    needs(fft.fftw_installed(), "FFTW (Debian's libfftw3-dev)")

COMPLEX = (np.complex64, np.complex128)
REAL = (np.float32, np.float64)
LENGTHS = (1, 2, 7, 13, 16, 97, 1000)


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def assert_fft_matches(fun, x, length: int, ulp: float = 4):
    """``fun(x)`` under hlo2dace.jit is XLA's to within ``ulp`` times log2(length) units of
    the result's largest magnitude (the error bound of an FFT)."""
    expected = np.asarray(jax.jit(fun)(x))
    actual = hlo2dace.jit(fun)(x)
    assert isinstance(actual, jax.Array)
    eps = np.finfo(expected.dtype).eps
    scale = float(np.max(np.abs(expected), initial=0.0))
    atol = ulp * eps * max(1.0, math.log2(max(length, 2))) * scale
    assert_arrays_match(expected, actual, atol=atol, signed_zeros=False)


@pytest.mark.parametrize("dtype", COMPLEX, ids=dtype_id)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("name", ["fft", "ifft"])
def test_complex_1d(name, n, dtype):
    assert_fft_matches(getattr(jnp.fft, name), sample(dtype, (3, n)), n)


@pytest.mark.parametrize("dtype", REAL, ids=dtype_id)
@pytest.mark.parametrize("n", LENGTHS)
def test_rfft_1d(n, dtype):
    assert_fft_matches(jnp.fft.rfft, sample(dtype, (2, 3, n)), n)


@pytest.mark.parametrize("dtype", COMPLEX, ids=dtype_id)
@pytest.mark.parametrize("n", LENGTHS)
def test_irfft_1d(n, dtype):
    """Random complex input: not Hermitian (the imaginary parts of the zero and Nyquist
    frequencies are ignored, as XLA ignores them)."""
    x = sample(dtype, (3, n // 2 + 1))
    assert_fft_matches(lambda x: jnp.fft.irfft(x, n=n), x, n)


@pytest.mark.parametrize("n", [5, 13, 16, 31])
@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft"])
def test_n_pads_and_crops(name, n):
    dtype = np.float32 if name == "rfft" else np.complex64
    x = sample(dtype, (4, 12))
    assert_fft_matches(lambda x: getattr(jnp.fft, name)(x, n=n), x, n)


@pytest.mark.parametrize("dtype", COMPLEX, ids=dtype_id)
@pytest.mark.parametrize("name,kwargs", [
    ("fft2", {}), ("ifft2", {}), ("fftn", {}), ("ifftn", {}),
    ("fft2", {"axes": (0, 2)}), ("fftn", {"axes": (1, 0)}), ("ifftn", {"axes": (0, 1, 2)}),
    ("fft2", {"s": (9, 4)}), ("fft2", {"s": (5, 1)}), ("irfft2", {}),
    ("irfftn", {"axes": (0, 1, 2)}), ("irfftn", {"s": (5, 7, 11)}), ("irfft2", {"axes": (0, 1)}),
], ids=lambda v: str(v).replace(" ", ""))
def test_multi_dimensional(name, kwargs, dtype):
    x = sample(dtype, (6, 5, 7))
    assert_fft_matches(lambda x: getattr(jnp.fft, name)(x, **kwargs), x, 6 * 5 * 7)


@pytest.mark.parametrize("dtype", REAL, ids=dtype_id)
@pytest.mark.parametrize("name,kwargs", [
    ("rfft2", {}), ("rfft2", {"axes": (2, 0)}), ("rfft2", {"s": (4, 13)}), ("rfftn", {}),
    ("rfftn", {"axes": (1, 0)}), ("rfftn", {"s": (3, 4, 9)}),
], ids=lambda v: str(v).replace(" ", ""))
def test_rfft_multi_dimensional(name, kwargs, dtype):
    x = sample(dtype, (6, 5, 8))
    assert_fft_matches(lambda x: getattr(jnp.fft, name)(x, **kwargs), x, 6 * 5 * 8)


def test_four_dimensions():
    """JAX splits transforms over more than three dimensions into several ops."""
    x = sample(np.complex128, (3, 4, 5, 6))
    assert_fft_matches(jnp.fft.fftn, x, 360)
    assert_fft_matches(jnp.fft.irfftn, x, 3 * 4 * 5 * 10)


@pytest.mark.parametrize("shape", [(1 << 16,), (256, 512), (2, 3, 96, 100)])
def test_larger_parallel(shape):
    """Transforms large enough to run on several threads, and long columns."""
    x = sample(np.complex64, shape)
    assert_fft_matches(jnp.fft.fftn, x, math.prod(shape))
    assert_fft_matches(jnp.fft.irfftn, x, math.prod(shape))
    assert_fft_matches(jnp.fft.rfftn, x.real, math.prod(shape))


@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "fft2", "rfft2", "irfft2"])
@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf])
def test_non_finite(special, name):
    """Every output depends on every input: a NaN or an infinity makes every element
    non-finite. Which of NaN and +-inf an element gets depends on the FFT's algorithm
    (inf - inf), so only where results are finite is compared."""
    dtype = np.float64 if name.startswith("rfft") else np.complex128
    x = sample(dtype, (3, 8))
    x[1, 3] = special
    x[2, 0] = 1.0
    fun = getattr(jnp.fft, name)
    expected = np.asarray(jax.jit(fun)(x))
    actual = np.asarray(hlo2dace.jit(fun)(x))
    for part in (np.real, np.imag):
        np.testing.assert_array_equal(np.isfinite(part(actual)), np.isfinite(part(expected)))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["fft", "rfft", "irfft", "fft2"])
def test_empty_batch(name):
    dtype = np.float32 if name == "rfft" else np.complex64
    assert_fft_matches(getattr(jnp.fft, name), np.zeros((0, 4, 6), dtype), 6)


def test_in_loops():
    """Transforms inside a scan and a while loop: planned once, run on new arrays."""
    x = sample(np.complex64, (5, 30))

    def scan(x):
        def step(carry, row):
            out = jnp.fft.ifft(jnp.fft.fft(row + carry) * 2)
            return out, jnp.fft.rfft(out.real)
        return lax.scan(step, jnp.zeros(30, jnp.complex64), x)

    def loop(x):
        return lax.fori_loop(0, 3, lambda i, y: jnp.fft.fft2(y) / 30, x)

    for fun in (scan, loop):
        expected = jax.jit(fun)(x)
        actual = hlo2dace.jit(fun)(x)
        for e, a in zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(actual)):
            e = np.asarray(e)
            atol = 32 * np.finfo(np.float32).eps * np.max(np.abs(e))
            assert_arrays_match(e, a, atol=atol, signed_zeros=False)


def test_exact_on_small_integers():
    """Transforms of length 2 and 4 of small integers are exact in every algorithm."""
    x = np.array([[1, 2, 3, 4], [-1, 0, 5, 7]], np.complex128)
    for fun in (jnp.fft.fft, jnp.fft.ifft, jnp.fft.fft2):
        np.testing.assert_array_equal(np.asarray(hlo2dace.jit(fun)(x)),
                                      np.asarray(jax.jit(fun)(x)))


def test_without_fftw(monkeypatch):
    monkeypatch.setattr(fft, "fftw_installed", lambda: False)
    x = sample(np.complex64, (4,))
    with pytest.raises(UnsupportedError, match="FFTW is not installed"):
        hlo2dace.jit(jnp.fft.fft).lower(x).as_sdfg()
