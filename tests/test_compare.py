"""``hlo2dace.compare`` and its report: a right answer reads OK even where elements within
rounding of zero have large relative errors, and a wrong one (an element, a shape, a dtype,
a NaN) reads DIFFERS."""

from __future__ import annotations

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import hlo2dace
from hlo2dace.compare import CompareReport, compare_arrays, tolerance

FLOATS = (np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.complex64,
          np.complex128)


def _report(*outputs) -> str:
    return str(CompareReport(tuple(outputs), 1e-3, 1e-3))


def test_seed_example_with_elements_near_zero_is_ok():
    """``tanh(x @ w + b)`` with ``b`` cancelling row 0 of ``x @ w``: that row is rounding
    error, whose elementwise relative error is about 1 (the old report's headline)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 256), dtype=np.float32)
    w = rng.standard_normal((256, 32), dtype=np.float32) / np.float32(16)
    b = -(x[0].astype(np.float64) @ w.astype(np.float64)).astype(np.float32)
    report = hlo2dace.compare(lambda x, w, b: jnp.tanh(x @ w + b), x, w, b, timing_budget=0.02)
    (output,) = report.outputs
    assert output.ok and report.ok
    assert output.near_zero >= 32  # row 0
    assert output.normwise_error <= output.tolerance
    header, _, row = str(report).splitlines()[:3]
    assert "near 0" in header and row.endswith(" OK")


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_rounding_noise_is_ok_and_an_error_beyond_the_tolerance_differs(dtype):
    """Noise of a few units of rounding of the output's scale gives elements near zero any
    relative error and is OK; one element off by twice the tolerance DIFFERS."""
    rng = np.random.default_rng(1)
    real = {np.complex64: np.float32, np.complex128: np.float64}.get(dtype, dtype)
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    values = rng.standard_normal((40, 30))
    scale = float(np.abs(values).max())
    # near zero, as cancellation leaves them: within the tolerance of zero at this scale
    values[0, :5] = np.array([0.5, -0.1, 1e-3, 0.0, 0.9]) * tolerance(dtype) * scale
    expected = values.astype(dtype)
    eps = float(ml_dtypes.finfo(real).eps)
    noise = rng.uniform(-4, 4, values.shape) * eps * scale
    actual = (expected.astype(wide) + noise).astype(dtype)
    right = compare_arrays(0, expected, actual)
    assert right.ok, _report(right)
    assert right.near_zero >= 4
    assert right.tolerance == tolerance(dtype)
    wrong_values = actual.copy()
    wrong_values[7, 3] = expected.astype(wide)[7, 3] + 2 * tolerance(dtype) * scale
    wrong = compare_arrays(1, expected, wrong_values)
    assert not wrong.ok and wrong.verdict == "DIFFERS"
    assert wrong.worst[0] == (7, 3) and wrong.beyond_tolerance == 1


def _perturbed(x):
    y = x.copy()
    y[3, 4] += 0.25
    return y


def _nan(x):
    y = x.copy()
    y[2, 2] = np.nan
    return y


def _inf(x):
    y = x.copy()
    y[1, 0] = np.inf
    return y


WRONG = {
    "one element perturbed": _perturbed,
    "NaN where a number is expected": _nan,
    "infinity where a number is expected": _inf,
    "wrong shape": lambda x: x[:, :3],
    "wrong dtype": lambda x: x.astype(np.float64),
    "transposed": lambda x: x.T.copy().reshape(x.shape),
}


@pytest.mark.parametrize("case", WRONG)
def test_wrong_answers_differ(case):
    expected = np.tanh(np.random.default_rng(2).standard_normal((8, 6))).astype(np.float32)
    result = compare_arrays(0, expected, WRONG[case](expected))
    text = _report(result)
    assert not result.ok and text.splitlines()[2].endswith(" DIFFERS"), text
    if result.shape_ok and result.dtype_ok:
        assert "the largest difference is at" in text


def test_special_values_at_the_same_places_match():
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 1.0, 2.5], np.float32)
    same = compare_arrays(0, x, np.array([np.nan, np.inf, -np.inf, 0.0, 1.0, 2.5], np.float32))
    assert same.ok and same.max_abs_error == 0 and same.max_ulp == 0
    flipped = compare_arrays(0, x, np.array([np.nan, -np.inf, -np.inf, 0.0, 1.0, 2.5],
                                            np.float32))
    assert not flipped.ok and flipped.worst[0] == (1,)


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint32, np.int64])
def test_integers_must_be_equal(dtype):
    x = np.arange(12).reshape(3, 4).astype(dtype)
    assert compare_arrays(0, x, x.copy()).ok
    y = x.copy()
    y[1, 2] = not y[1, 2] if dtype == np.bool_ else y[1, 2] + 1
    different = compare_arrays(0, x, y)
    assert not different.ok and different.worst[0] == (1, 2)
    assert "exact" in _report(different) and different.max_ulp is None


def test_the_tolerance_can_be_given():
    x = np.linspace(1, 2, 10)
    y = x * (1 + 1e-9)
    assert not compare_arrays(0, x, y).ok  # float64: 1024 eps is 2.3e-13
    assert compare_arrays(0, x, y, rtol=1e-8).ok
    assert compare_arrays(0, x, y, atol=1e-8).ok


def test_compare_report_of_a_function():
    report = hlo2dace.compare(lambda x: (jnp.exp(x), x.astype(jnp.int32)), np.linspace(-3, 3, 50),
                              timing_budget=0.05)
    assert len(report.outputs) == 2
    first, second = report.outputs
    assert first.shape_ok and first.dtype_ok and first.max_ulp is not None
    assert first.normwise_error < 1e-12
    assert second.max_abs_error == 0 and second.max_ulp is None
    assert report.xla_seconds > 0 and report.dace_seconds > 0
    text = str(report)
    for heading in ("normwise err", "ULP max", "near 0", "verdict", "median call"):
        assert heading in text
    assert report.ok
