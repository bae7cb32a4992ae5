"""Differential tests of func.call (translate/control.py, inlined calls) against jax.jit:
nested jax.jit functions with several results, calls inside calls, one callee called with
different arguments, callee results returned by main or fused into the caller's
elementwise ops, and main functions that return arguments, views and repeated values."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import hlo2dace

from util import assert_arrays_match, assert_matches_jax, special_values


def sample(dtype, shape, seed: int = 0) -> np.ndarray:
    """Random values (integers: with the extremes; floats: finite, as XLA contracts
    multiply-adds into FMAs whose overflow differs)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        values = special_values(dtype, rng, random=max(8, int(np.prod(shape))))
        return np.resize(rng.permutation(values), shape).astype(dtype)
    return (rng.standard_normal(shape) * 10).astype(dtype)


@jax.jit
def pair(a, b):
    return a - b, jnp.maximum(a, b)


@jax.jit
def scale(a, s):
    return a * s


@jax.jit
def nested(a, b):
    p, q = pair(a, b)
    return scale(p, 2.0) + pair(q, p)[1]


@jax.jit
def deep(a):
    return nested(a, a[::-1]) * nested(a[::-1], a)


@jax.jit
def passthrough(a, b):
    return a, b.T, b  # an argument, a view of one, the other unchanged


@jax.jit
def constant_result(a):
    return jnp.full(a.shape, 3.0, a.dtype), jnp.asarray(np.arange(4.0, dtype=np.float64))


@jax.jit
def product(a, b):
    return a @ b


@jax.jit
def slices(a, i):
    zero = jnp.zeros((), i.dtype)
    return lax.dynamic_slice(a, (i, zero), (2, a.shape[1])), jnp.concatenate([a, a[::-1]], 0)


def test_calls():
    x = sample(np.float64, (3, 4))
    y = sample(np.float64, (3, 4), seed=1)
    s = np.float64(-1.5)

    def f(x, y, s):
        p1, q1 = pair(x, y)
        p2, q2 = pair(y, x)  # the same callee, other arguments
        a, b, c = passthrough(x, y)
        k1, k2 = constant_result(x)
        return {
            "p1": p1, "q1": q1, "p2": p2, "q2": q2,  # callee results returned by main
            "fused": p1 * q2 + scale(x, s),  # callee results read by the caller's map
            "nested": nested(x, y),  # calls inside calls
            "deep": deep(x[0]),
            "same_callee_twice": scale(x, s) - scale(y, 2 * s),
            "passthrough": (a, b, c),
            "passthrough_then_op": b * 2,
            "constants": (k1, k2, k2[::-1] + 1),
            "views_into_call": pair(x.T, y[::-1].T),
            "literal_into_call": pair(jnp.full((3, 4), 2.0), x),
            "scalar_call": scale(s, s),
            "product_call": product(x, y.T) + product(x.T, y)[:3, :3],
            "empty_call": pair(x[:0], y[:0]),
        }

    # XLA contracts products feeding sums (p1 * q2 + x * s) into fused multiply-adds;
    # hlo2dace rounds each op as StableHLO specifies, so such results may differ by 1 ULP
    assert_matches_jax(f, x, y, s, ulp=1)


def test_main_returns_arguments():
    """Main returning an argument unchanged, twice, as views, and a result twice."""
    x = sample(np.int32, (2, 3))
    s = sample(np.float32, ())
    e = np.zeros((0, 5), np.complex64)

    def f(x, s, e):
        y = x + 1
        return x, x, s, e, y, y, x.T, x[::-1, 1:], s.reshape(1, 1), pair(y, y)[0], y

    assert_matches_jax(f, x, s, e)


@pytest.mark.parametrize("index_dtype", [np.int32, np.uint32])
def test_calls_with_dynamic_indices(index_dtype):
    x = sample(np.float32, (5, 3))

    def f(x, i):
        a, b = slices(x, i)
        c, d = slices(b, i + 3)
        return a, b, c, d, slices(x.T.T, i)[0] * 2

    compiled = hlo2dace.jit(f)
    for i in (0, 2, 4, 7, np.iinfo(index_dtype).max):
        expected, actual = jax.jit(f)(x, index_dtype(i)), compiled(x, index_dtype(i))
        for k, (e, a) in enumerate(zip(expected, actual)):
            assert_arrays_match(e, a, where=f"result {k} at i={i}")


CALL_MODULE = """
func.func @main(%x: tensor<3xf32>, %y: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>,
                                                          tensor<3xf32>, tensor<3xf32>) {
  %0:2 = func.call @twice(%x, %y) : (tensor<3xf32>, tensor<3xf32>)
      -> (tensor<3xf32>, tensor<3xf32>)
  %1:2 = func.call @twice(%0#1, %0#0) : (tensor<3xf32>, tensor<3xf32>)
      -> (tensor<3xf32>, tensor<3xf32>)
  %2 = func.call @id(%1#0) : (tensor<3xf32>) -> tensor<3xf32>
  return %2, %1#1, %0#0, %2 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}
func.func private @twice(%a: tensor<3xf32>, %b: tensor<3xf32>)
    -> (tensor<3xf32>, tensor<3xf32>) {
  %0 = stablehlo.add %a, %a : tensor<3xf32>
  return %0, %b : tensor<3xf32>, tensor<3xf32>
}
func.func private @id(%a: tensor<3xf32>) -> tensor<3xf32> {
  return %a : tensor<3xf32>
}
"""


def test_call_text():
    """Calls written by hand: callees that return an argument, a result returned twice."""
    x = np.array([1.0, -2.0, 0.5], np.float32)
    y = np.array([3.0, 4.0, -5.0], np.float32)
    results = hlo2dace.compile_text(CALL_MODULE)(x, y)
    expected = [2 * y, 2 * x, 2 * x, 2 * y]
    for k, (e, a) in enumerate(zip(expected, results)):
        assert_arrays_match(e, a, where=f"result {k}")


def test_unknown_callee():
    module = """
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = func.call @missing(%x) : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
"""
    from hlo2dace.errors import Hlo2DaceError

    with pytest.raises(Hlo2DaceError, match="missing"):
        hlo2dace.compile_text(module)


def test_composite_runs_its_decomposition():
    """`lax.composite` emits stablehlo.composite; the frontend legalises it into a call of
    its decomposition (StableHLO's own pass), which is then inlined."""
    tangent = lax.composite(lambda x: jnp.sin(x) / jnp.cos(x), name="my.tangent")
    x = np.linspace(-1.0, 1.0, 9)
    lowered = hlo2dace.jit(lambda x: tangent(x) * 2.0).lower(x)
    assert "stablehlo.composite" not in lowered.as_text()
    assert_matches_jax(lambda x: tangent(x) * 2.0, x, ulp=1)
