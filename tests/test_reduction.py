"""stablehlo.reduce against jax.jit: the reductions of jnp and jax.nn over every dtype,
several and empty reduced dimensions, NaN, integer overflow, and variadic (argmax) bodies."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import hlo2dace

from util import (
    COMPLEX_DTYPES,
    FLOAT_DTYPES,
    INTEGER_DTYPES,
    assert_matches_jax,
    dtype_id,
    special_values,
)


def sample(dtype, shape, seed=0):
    values = special_values(dtype, np.random.default_rng(seed), random=64)
    finite = values[np.isfinite(values)] if np.dtype(dtype).kind in "fc" else values
    return np.resize(finite, shape).astype(dtype)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=dtype_id)
def test_integer_reductions_wrap(dtype):
    x = sample(dtype, (6, 5))

    def f(x):
        return {"sum": jnp.sum(x, axis=0, dtype=x.dtype), "prod": jnp.prod(x, 1, dtype=x.dtype),
                "max": x.max(), "min": x.min(axis=(0, 1)), "argmax": jnp.argmax(x, axis=0),
                "argmin": jnp.argmin(x, axis=1), "and": lax.reduce_and(x, (0,)),
                "or": lax.reduce_or(x, (1,)), "xor": lax.reduce_xor(x, (0, 1))}

    assert_matches_jax(f, x)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_float_reductions(dtype):
    x = sample(dtype, (8, 6)) / 4
    y = x.copy()
    y[2, 3] = np.nan  # max/min/argmax propagate NaN as XLA does

    def f(x, y):
        return {"sum": x.sum(0), "sum_all": x.sum(), "mean": x.mean(1), "max": x.max(1),
                "min": x.min(0), "nan_max": y.max(0), "nan_min": y.min(1),
                "nan_argmax": jnp.argmax(y, 1), "argmin": jnp.argmin(x, 0),
                "prod": jnp.prod(x[:3], 0)}

    wide = np.dtype(dtype).itemsize >= 4
    assert_matches_jax(f, x, y, rtol=1e-6 if wide else 1e-2, atol=1e-6 if wide else 1e-2)


@pytest.mark.parametrize("dtype", COMPLEX_DTYPES, ids=dtype_id)
def test_complex_sums(dtype):
    x = sample(dtype, (4, 5))
    assert_matches_jax(lambda x: (x.sum(0), jnp.prod(x[:2], 0)), x, rtol=1e-6, atol=1e-6)


def test_bool_reductions():
    x = np.random.default_rng(0).random((5, 4)) < 0.5
    x[0] = True
    assert_matches_jax(lambda x: (x.any(0), x.all(1), x.all(), jnp.sum(x, 0)), x)


def test_statistics_and_softmax():
    x = np.random.default_rng(1).standard_normal((16, 10)).astype(np.float32)

    def f(x):
        return {"var": x.var(0), "std": x.std(1), "logsumexp": jax.nn.logsumexp(x, axis=1),
                "softmax": jax.nn.softmax(x, axis=-1), "norm": jnp.linalg.norm(x, axis=0)}

    assert_matches_jax(f, x, rtol=2e-6, atol=2e-6)


def test_empty_and_zero_dimensional():
    def f(e, s, x):
        return {"empty_sum": e.sum(0), "empty_max": e.max(0, initial=-jnp.inf),
                "empty_prod": jnp.prod(e, 0), "scalar": s.sum(), "keep": x.sum(axis=()),
                "to_empty": x[:0].sum(1), "ones": jnp.ones((3, 1, 2)).sum(1)}

    assert_matches_jax(f, np.zeros((0, 3)), np.float64(2.5), np.arange(6.0).reshape(2, 3))


def test_bf16_and_f16_accumulate_like_xla():
    x = np.linspace(-3, 3, 300).astype(ml_dtypes.bfloat16).reshape(3, 100)
    h = np.linspace(-3, 3, 300).astype(np.float16).reshape(100, 3)
    assert_matches_jax(lambda x, h: (x.sum(1), h.sum(0), x.max(1)), x, h, rtol=1e-2, atol=1e-2)


def test_reduce_body_that_is_not_elementwise_is_unsupported():
    text = """
    func.func @main(%x: tensor<4xf32>) -> tensor<f32> {
      %0 = stablehlo.constant dense<0.0> : tensor<f32>
      %1 = stablehlo.reduce(%x init: %0) across dimensions = [0] : (tensor<4xf32>, tensor<f32>)
          -> tensor<f32>
       reducer(%a: tensor<f32>, %b: tensor<f32>) {
        %2 = stablehlo.custom_call @foo(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        stablehlo.return %2 : tensor<f32>
      }
      return %1 : tensor<f32>
    }
    """
    with pytest.raises(hlo2dace.UnsupportedError, match="stablehlo.custom_call"):
        hlo2dace.compile_text(text)
