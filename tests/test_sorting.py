"""stablehlo.sort against jax.jit: jnp.sort/argsort (stable and not, descending), lexsort,
lax.sort with several operands and keys, top_k and the statistics built on sorting, along
every axis, over every dtype, with NaN of both signs, infinities, signed zeros, ties, empty
arrays and rows of one element. Sorted values must be bit for bit XLA's: the order of keys
that compare equal (-0.0 and 0.0, NaNs of both signs, ties in an unstable sort) shows."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import hlo2dace

from util import ALL_DTYPES, FLOAT_DTYPES, assert_matches_jax, dtype_id, special_values


def bits(array) -> np.ndarray:
    """The array's bit patterns (floats and complex parts as unsigned integers)."""
    array = np.asarray(array)
    if array.dtype.kind in "fc" or array.dtype == np.dtype(ml_dtypes.bfloat16):
        parts = 2 if array.dtype.kind == "c" else 1
        return array.view(f"u{array.dtype.itemsize // parts}")
    return array


def assert_same_bits(fun, *args):
    """``fun`` under hlo2dace.jit gives XLA's results exactly, bit for bit."""
    expected = jax.jit(fun)(*args)
    actual = hlo2dace.jit(fun)(*args)
    assert jax.tree_util.tree_structure(expected) == jax.tree_util.tree_structure(actual)
    for (path, e), a in zip(jax.tree_util.tree_leaves_with_path(expected),
                            jax.tree_util.tree_leaves(actual)):
        where = jax.tree_util.keystr(path)
        e, a = np.asarray(e), np.asarray(a)
        assert (a.shape, a.dtype) == (e.shape, e.dtype), where
        bad = np.argwhere(bits(a) != bits(e))
        assert bad.size == 0, (f"{where}: {len(bad)} of {e.size} elements differ, first at "
                               f"{bad[0]}: got {a[tuple(bad[0])]!r}, XLA {e[tuple(bad[0])]!r}")


def sample(dtype, shape, seed=0, distinct=None):
    """Edge values of ``dtype`` (NaN of both signs, infinities, signed zeros, extremes),
    repeated and shuffled to ``shape``; ``distinct``: only that many different values."""
    rng = np.random.default_rng(seed)
    values = special_values(dtype, rng, random=16)
    if distinct is not None:
        values = values[:distinct]
    flat = np.resize(values, int(np.prod(shape)))
    return rng.permutation(flat).reshape(shape)


def sorts(x):
    """The sorts of jnp along the last and first axis, every variant."""
    return {"sort": jnp.sort(x), "sort0": jnp.sort(x, axis=0),
            "unstable": jnp.sort(x, stable=False), "descending": jnp.sort(x, descending=True),
            "argsort": jnp.argsort(x), "argsort0": jnp.argsort(x, axis=0),
            "argsort_unstable": jnp.argsort(x, stable=False),
            "argsort_descending": jnp.argsort(x, descending=True)}


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_sorts_of_every_dtype(dtype):
    # rows longer than 16 with ties: std::sort (is_stable = false) then reorders equal keys
    assert_same_bits(sorts, sample(dtype, (5, 40)))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_], ids=dtype_id)
@pytest.mark.parametrize("n", [17, 100, 1000])
def test_unstable_order_of_ties(dtype, n):
    """XLA's unstable sort puts equal keys in a deterministic order that is not the input
    order; a stable sort would differ."""
    x = sample(dtype, (n,), distinct=3)
    assert_same_bits(lambda x: {"argsort": jnp.argsort(x, stable=False),
                                "descending": jnp.argsort(x, stable=False, descending=True),
                                "lax": lax.sort((x, -jnp.arange(n)), is_stable=False,
                                                num_keys=1)}, x)


@pytest.mark.parametrize("shape", [(4, 5, 6), (2, 3, 1), (1, 7, 2)])
def test_every_axis_of_3d(shape):
    x = sample(np.float32, shape, seed=1)
    assert_same_bits(lambda x: {f"{name}{axis}": fn(x, axis=axis) for axis in (0, 1, 2, -1)
                                for name, fn in (("sort", jnp.sort), ("argsort", jnp.argsort))},
                     x)


def test_many_rows_in_parallel():
    """Enough work to sort the rows in a parallel map."""
    x = sample(np.float64, (300, 200), seed=2)
    assert_same_bits(lambda x: {"rows": jnp.sort(x), "columns": jnp.argsort(x, axis=0)}, x)


@pytest.mark.parametrize("shape,axis", [((0,), 0), ((3, 0), 1), ((0, 4), 1), ((3, 0), 0),
                                        ((1,), 0), ((5, 1), 1), ((1, 5), 0), ((2,), 0)])
def test_empty_and_single_element_rows(shape, axis):
    x = sample(np.float32, shape)
    assert_same_bits(lambda x: {"sort": jnp.sort(x, axis=axis),
                                "argsort": jnp.argsort(x, axis=axis),
                                "lax": lax.sort((x, x * 2), dimension=axis, num_keys=2)}, x)


@pytest.mark.parametrize("is_stable", [True, False])
def test_several_operands_and_keys(is_stable):
    keys = sample(np.int8, (3, 30), distinct=3, seed=3)
    second = sample(np.float16, (3, 30), distinct=4, seed=4)
    payload = sample(np.complex64, (3, 30), seed=5)

    def f(keys, second, payload):
        return {"one_key": lax.sort((keys, second, payload), num_keys=1, is_stable=is_stable),
                "two_keys": lax.sort((keys, second, payload), num_keys=2,
                                     is_stable=is_stable),
                "three_keys": lax.sort((second, keys, payload.real), dimension=0, num_keys=3,
                                       is_stable=is_stable),
                "lexsort": jnp.lexsort((second, keys)),
                "lexsort0": jnp.lexsort((keys, second), axis=0)}

    assert_same_bits(f, keys, second, payload)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int64, np.uint8],
                         ids=dtype_id)
def test_top_k(dtype):
    """k of 16th of a row or less: a heap selects them (ties in position order)."""
    vector = sample(dtype, (200,), seed=6)
    matrix = sample(dtype, (6, 50), seed=7, distinct=5)
    assert_same_bits(lambda v, m: {"k1": lax.top_k(v, 1), "k3": lax.top_k(v, 3),
                                   "k12": lax.top_k(v, 12), "k13": lax.top_k(v, 13),
                                   "all": lax.top_k(v, 200), "rows": lax.top_k(m, 3),
                                   "rows_k20": lax.top_k(m, 20)},
                     vector, matrix)


def test_slices_of_sorted_rows():
    """A sort whose results are read only through slices sorts or selects just as much
    (lax.sort is inlined; jnp.sort is a function of its own that returns the whole sort)."""
    x = sample(np.float32, (4, 100), seed=9, distinct=6)
    i = np.arange(100, dtype=np.int32)[::-1] * np.ones((4, 1), np.int32)

    def f(x, i):
        keys, values = lax.sort_key_val(x, i)
        unstable = lax.sort((x, i), is_stable=False, num_keys=1)
        return {"first": lax.sort(x)[:, :5], "strided": lax.sort(x)[:, 2:9:3],
                "keys": keys[:, :3], "values": values[:, 1:4],
                "only_values": lax.sort_key_val(x, i)[1][:, :6],
                "unstable": (unstable[0][:, :3], unstable[1][:, :3]),
                "axis0": lax.sort(x, dimension=0)[:1], "empty": lax.sort(x)[:, :0],
                "late": lax.sort(x)[:, 90:], "jnp": jnp.sort(x)[:, :5]}

    assert_same_bits(f, x, i)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_median_and_quantiles(dtype):
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((7, 9)) * 10).astype(dtype)
    x[0, 3] = x[0, 4]  # ties
    y = x.copy()
    y[2, 1] = np.nan

    q = np.array([0.0, 0.1, 0.5, 0.9, 1.0], dtype)

    def interpolated(x, y):
        return {"median": jnp.median(x), "median0": jnp.median(x, axis=0),
                "median_nan": jnp.median(y, axis=1), "nanmedian": jnp.nanmedian(y, axis=1),
                "percentile": jnp.percentile(x, 30.0, axis=1),
                "quantile": jnp.quantile(x, q, axis=0)}

    # XLA contracts the interpolation (low * (1 - t) + high * t) into a fused multiply-add;
    # hlo2dace rounds each op as StableHLO specifies, so these may differ by 1 ULP
    assert_matches_jax(interpolated, x, y, ulp=1)
    assert_same_bits(lambda x: {method: jnp.quantile(x, q, axis=1, method=method)
                                for method in ("lower", "higher", "nearest", "midpoint")}, x)


@pytest.mark.parametrize("dtype", [np.float32, np.int16], ids=dtype_id)
def test_functions_built_on_sorting(dtype):
    """jnp.unique with a static size, partition (top_k) and sort_complex."""
    x = sample(dtype, (50,), seed=10, distinct=7)
    assert_same_bits(lambda x: {"unique": jnp.unique(x, size=10, fill_value=0),
                                "unique_all": jnp.unique(x, size=8, return_index=True,
                                                         return_inverse=True,
                                                         return_counts=True),
                                "partition": jnp.partition(x, 3),
                                "argpartition": jnp.argpartition(x, 3),
                                "sort_complex": jnp.sort_complex(x)}, x)


def test_sorts_in_a_loop():
    """Sorts of loop-carried values, written into the arrays they read (rows apart)."""
    x = sample(np.float32, (6, 30), distinct=9)
    y = sample(np.float32, (6, 30), seed=3)

    def f(x, y):
        return {"negated": lax.fori_loop(0, 3, lambda i, x: -jnp.sort(x, axis=0), x),
                "swapped": lax.fori_loop(0, 3, lambda i, c: lax.sort((c[1], c[0]), num_keys=1),
                                         (x, y)),
                "axis0": lax.fori_loop(0, 3, lambda i, c: lax.sort((c[1] * 2, c[0]),
                                                                   dimension=0), (x, y))}

    assert_same_bits(f, x, y)


def _sort_op(k: int, n: int, direction: str, stable: bool, operands: int) -> str:
    """A sort of %x (and %i) by a plain float comparison: with NaN no strict weak order."""
    types = ", ".join([f"tensor<{n}xf32>", f"tensor<{n}xi32>"][:operands])
    results = ", ".join(f"%r{k}_{j}" for j in range(operands))
    arguments = "%a: tensor<f32>, %b: tensor<f32>" + (", %c: tensor<i32>, %d: tensor<i32>"
                                                      if operands == 2 else "")
    return f"""
  {results} = "stablehlo.sort"({", ".join(["%x", "%i"][:operands])}) ({{
    ^bb0({arguments}):
      %p = stablehlo.compare {direction}, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
  }}) {{dimension = 0 : i64, is_stable = {str(stable).lower()}}} : ({types}) -> ({types})"""


@pytest.mark.parametrize("n", [40, 300])
def test_comparators_that_are_no_orders(n):
    """`compare LT, FLOAT` on NaN is no strict weak order: the result is whatever the sorting
    algorithm makes of it, the same as XLA's because the algorithms are the same."""
    from hlo2dace.xla import run_module

    variants = [(d, s, o) for d in ("LT", "GT") for s in (True, False) for o in (1, 2)]
    ops = "".join(_sort_op(k, n, *variant) for k, variant in enumerate(variants))
    returned = [(f"%r{k}_{j}", ["f32", "i32"][j]) for k, (*_, o) in enumerate(variants)
                for j in range(o)]
    types = ", ".join(f"tensor<{n}x{t}>" for _, t in returned)
    text = (f"func.func public @main(%x: tensor<{n}xf32>, %i: tensor<{n}xi32>) -> ({types}) {{"
            f"{ops}\n  return {', '.join(v for v, _ in returned)} : {types}\n}}")
    rng = np.random.default_rng(n)
    x = rng.integers(0, 5, n).astype(np.float32)
    x[rng.random(n) < 0.3] = np.nan
    i = np.arange(n, dtype=np.int32)
    for k, (e, a) in enumerate(zip(run_module(text, [x, i]), hlo2dace.compile_text(text)(x, i))):
        assert (bits(a) == bits(e)).all(), returned[k]
