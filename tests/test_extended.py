"""The nearly exact reference of ``compare(..., reference="extended")``: a module's ops
evaluated by NumPy in a wider type. Differentially against XLA: a float32 module evaluated
in float64 gives XLA's float64 results of the same function, a float64 one in long double
gives XLA's float64 results within their own rounding; where a formula loses digits, the
reference keeps 2048 times more of them than float64."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hlo2dace import UnsupportedError, extended


def _loop(x):
    return jax.lax.fori_loop(0, 5, lambda i, y: y * 0.5 + jnp.sin(y), x)


def _branch(x, p):
    return jax.lax.cond(p > 0, lambda: x * 2, lambda: jnp.exp(x) - 1)


#: functions of float arrays (constants exact in float32), and their arguments' shapes
CASES = {
    "product": (lambda x, w: jnp.tanh(x @ w) * 2 + 1, [(4, 6), (6, 3)]),
    "batched product": (lambda a, b: jnp.einsum("bij,bkj->bki", a, b), [(2, 3, 4), (2, 5, 4)]),
    "reductions": (lambda x: (jnp.exp(x).sum(axis=0), x.max(axis=1), x.prod()), [(3, 5)]),
    "shapes": (lambda x: (jnp.pad(x, ((1, 2), (0, 1))), jnp.concatenate([x, x[::-1]]),
                          x.T.reshape(-1)[2:9:3], jnp.broadcast_to(x[:1], (4, 5))), [(3, 5)]),
    "interior padding": (lambda x: jax.lax.pad(x, jnp.asarray(0.5, x.dtype), ((1, -1, 2),)),
                         [(4,)]),
    "elementwise": (lambda x, y: (jnp.where(x > y, jnp.sqrt(jnp.abs(x)), jnp.log1p(y * y)),
                                  jnp.arctan2(x, y), jnp.clip(x, -0.5, 0.5),
                                  jax.nn.sigmoid(x), jnp.round(x * 4), x ** 3,
                                  jnp.expm1(x) / jnp.cbrt(y + 3)), [(6,), (6,)]),
    "loop": (_loop, [(4,)]),
    "iota and conversions": (lambda x: (x + jnp.arange(4, dtype=x.dtype),
                                        (x * 3).astype(jnp.int32),
                                        jnp.arange(6).reshape(2, 3) % 4), [(4,)]),
}


def _arguments(shapes, dtype):
    rng = np.random.default_rng(5)
    return [rng.standard_normal(shape).astype(dtype) for shape in shapes]


@pytest.mark.parametrize("name", CASES)
def test_a_float32_module_evaluated_in_float64_is_xlas_float64_result(name):
    fun, shapes = CASES[name]
    narrow = _arguments(shapes, np.float32)
    exact = extended.evaluate(jax.jit(fun).lower(*narrow).as_text(), narrow)
    wide = jax.tree_util.tree_leaves(jax.jit(fun)(*[a.astype(np.float64) for a in narrow]))
    assert len(exact) == len(wide)
    for e, w in zip(exact, wide):
        w = np.asarray(w)
        assert e.dtype == (np.float64 if w.dtype == np.float64 else w.dtype), name
        np.testing.assert_allclose(e, w, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("name", CASES)
def test_a_float64_module_evaluated_in_long_double_is_xlas_within_its_rounding(name):
    fun, shapes = CASES[name]
    arguments = _arguments(shapes, np.float64)
    exact = extended.evaluate(jax.jit(fun).lower(*arguments).as_text(), arguments)
    for e, x in zip(exact, jax.tree_util.tree_leaves(jax.jit(fun)(*arguments))):
        x = np.asarray(x)
        if x.dtype == np.float64:
            assert e.dtype == np.longdouble
        np.testing.assert_allclose(e.astype(x.dtype), x, rtol=1e-12, atol=1e-12,
                                   err_msg=name)


def test_branches_integers_and_dynamic_slices():
    x = np.linspace(-1, 1, 12).reshape(4, 3)
    for p in (1.0, -1.0):
        (e,) = extended.evaluate(jax.jit(_branch).lower(x, p).as_text(), [x, p])
        np.testing.assert_allclose(e.astype(np.float64), _branch(x, p), rtol=1e-14)

    def slices(x, i):
        window = jax.lax.dynamic_slice(x, (i, 0), (2, 3))
        return window, jax.lax.dynamic_update_slice(x, window * 0, (i + 1, 0))

    for i in (-3, 1, 7):  # starts clamped into the array
        exact = extended.evaluate(jax.jit(slices).lower(x, i).as_text(), [x, np.int32(i)])
        for e, r in zip(exact, slices(x, i)):
            np.testing.assert_array_equal(e.astype(np.float64), r)

    i, j = np.array([7, -7, 7, -7, 5, 0], np.int32), np.array([2, 2, -2, -2, 3, 4], np.int32)
    division = lambda i, j: (i // j, i % j, jax.lax.div(i, j), jax.lax.rem(i, j))  # noqa: E731
    exact = extended.evaluate(jax.jit(division).lower(i, j).as_text(), [i, j])
    for e, r in zip(exact, division(i, j)):
        np.testing.assert_array_equal(e, r)


def test_the_reference_keeps_the_digits_a_formula_loses():
    """``(log(1 + d) - d) / d^2`` for small d cancels about log2(1/d) bits: float64 is
    1e-6 off, the long-double reference about 2048 times less (a series in long double
    is the exact value here)."""
    d = np.random.default_rng(1).uniform(1e-5, 1e-3, 1000)

    def fun(d):
        return (jnp.log(1 + d) - d) / (d * d)

    (exact,) = extended.evaluate(jax.jit(fun).lower(d).as_text(), [d])
    wide = d.astype(np.longdouble)
    series = sum((-1) ** (k + 1) * wide ** (k - 2) / k for k in range(2, 12))
    float64_error = extended.normwise_distance(np.asarray(jax.jit(fun)(d)), series)
    reference_error = extended.normwise_distance(exact, series)
    assert float64_error > 1e-8 and reference_error < float64_error / 500, (
        float64_error, reference_error)


def test_an_op_it_does_not_evaluate_is_named():
    x = np.arange(5.0)
    with pytest.raises(UnsupportedError, match="`stablehlo.sort`.*extended-precision "
                                               "reference does not evaluate this op"):
        extended.evaluate(jax.jit(jnp.sort).lower(x).as_text(), [x])
