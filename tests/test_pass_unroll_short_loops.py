"""The unroll_short_loops pass: a counted loop of a few trips of elementwise work becomes
its trips' ops (which then fuse into one map); small values of constants alone fold."""

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import hlo2dace
from hlo2dace import ir
from hlo2dace.plan.loops import MAX_TRIPS, trip_count

from pass_util import all_passes, check_pass, planned


def _planned_loops(fun, *args, disable=()) -> int:
    lowered = hlo2dace.jit(fun, disable_passes=tuple(disable)).lower(*args)
    return lowered.as_planned_text().count("stablehlo.while")


def test_random_bits_of_threefry_fuse_into_one_map():
    """jax.random's threefry runs five trips of rounds over every word: unrolled, the same
    bits (and the normals made from them) as jax.jit's, for the key XLA was given, in one
    map with the rotation distances as literals."""
    def bits(key, n=1000):
        return jax.random.bits(key, (n,)), jax.random.bits(jax.random.fold_in(key, 3), (7, 5))

    def sample(key, n=1000):  # through erf_inv: a few ULPs from XLA's (tests/test_random.py)
        return jax.random.normal(key, (n,), jnp.float32), \
            jax.random.uniform(jax.random.fold_in(key, 3), (7, 5), jnp.float32)

    key = jax.random.key_data(jax.random.PRNGKey(42))
    for fun in (bits, sample):
        assert _planned_loops(fun, key) == 0
        assert _planned_loops(fun, key, disable=["unroll_short_loops"]) > 0
    check_pass("unroll_short_loops", bits, key)
    check_pass("unroll_short_loops", sample, key, ulp=4)


def test_elementwise_loops_of_few_trips_unrolled_with_their_carries():
    """A fori_loop whose carries swap, one that passes a value through, a loop that does
    not run (its results are its initial values) and one of a single trip; NaN, infinity
    and integer wrap-around in the carries, as jax.jit computes them."""
    def loops(x, n):
        def step(i, carry):
            a, b, k = carry
            return b * 0.5 + jnp.maximum(a, -1.0), a - b * i.astype(x.dtype), k * 3 + i

        first = lax.fori_loop(0, 7, step, (x, x[::-1], n))
        none = lax.fori_loop(5, 5, step, (x, x, n))
        once = lax.fori_loop(2, 3, step, (x, -x, n))
        strided = lax.fori_loop(1, 8, lambda i, c: c * 1.5 + i, x)
        return first, none, once, strided

    x = np.linspace(-3.0, 3.0, 33).astype(np.float32)
    x[4], x[9] = np.nan, np.inf
    n = np.full(33, 2**31 - 100, np.int32)  # k * 3 wraps around
    assert _planned_loops(loops, x, n) == 0
    check_pass("unroll_short_loops", loops, x, n)


def test_long_loops_products_and_carried_bounds_stay_loops():
    """More than MAX_TRIPS trips, a body with a product, a body with a nested conditional,
    a bound the loop carries, and a stencil (slices of a large array: the trips would
    recompute each other's neighbours) are not unrolled (nor are their results changed)."""
    def kept(x, m, n):
        long = lax.fori_loop(0, MAX_TRIPS + 1, lambda i, c: c * 0.9 + 1.0, x)
        product = lax.fori_loop(0, 3, lambda i, c: jnp.tanh(m @ c), x)
        branchy = lax.fori_loop(0, 3, lambda i, c: lax.cond(i > 1, jnp.sin, jnp.cos, c), x)
        carried = lax.fori_loop(0, n, lambda i, c: c + 1.0, x)
        stencil = lax.fori_loop(0, 3, lambda i, c: c + jnp.roll(c, 1) * 0.5, x)
        return long, product, branchy, carried, stencil

    x = np.linspace(0.0, 1.0, 100).astype(np.float32)
    m = np.eye(100, dtype=np.float32) * 0.5
    assert _planned_loops(kept, x, m, np.int32(3)) == 5
    result = hlo2dace.jit(kept)(x, m, np.int32(3))
    for a, e in zip(result, jax.jit(kept)(x, m, np.int32(3))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-6)


FOLDED = """
    func.func @main(%x: tensor<8xui32>) -> tensor<8xui32> {
      %zero = stablehlo.constant dense<0> : tensor<i32>
      %r = stablehlo.constant dense<[13, 15, 26, 6]> : tensor<4xui32>
      %w:3 = stablehlo.while(%i = %zero, %v = %x, %s = %r)
          : tensor<i32>, tensor<8xui32>, tensor<4xui32>
        cond {
          %n = stablehlo.constant dense<2> : tensor<i32>
          %c = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
          stablehlo.return %c : tensor<i1>
        } do {
          %one = stablehlo.constant dense<1> : tensor<i32>
          %next = stablehlo.add %i, %one : tensor<i32>
          %d1 = stablehlo.slice %s [1:2] : (tensor<4xui32>) -> tensor<1xui32>
          %d = stablehlo.reshape %d1 : (tensor<1xui32>) -> tensor<ui32>
          %b = stablehlo.constant dense<32> : tensor<ui32>
          %e = stablehlo.subtract %b, %d : tensor<ui32>
          %eb = stablehlo.broadcast_in_dim %e, dims = [] : (tensor<ui32>) -> tensor<8xui32>
          %y = stablehlo.shift_right_logical %v, %eb : tensor<8xui32>
          %t = stablehlo.slice %s [1:4] : (tensor<4xui32>) -> tensor<3xui32>
          %h = stablehlo.slice %s [0:1] : (tensor<4xui32>) -> tensor<1xui32>
          %rot = stablehlo.concatenate %t, %h, dim = 0
              : (tensor<3xui32>, tensor<1xui32>) -> tensor<4xui32>
          stablehlo.return %next, %y, %rot : tensor<i32>, tensor<8xui32>, tensor<4xui32>
        }
      return %w#1 : tensor<8xui32>
    }"""


def test_small_values_of_constants_are_folded():
    """A trip's shift distance, sliced from a carried array of constants that the trips
    rotate, and subtracted from 32, is a constant: 32 - 15, then 32 - 26."""
    text = planned(FOLDED, "unroll_short_loops")
    kinds = [line.split(" = ")[-1].split("(")[0] for line in text.splitlines()]
    assert kinds == ["stablehlo.constant", "stablehlo.broadcast_in_dim",
                     "stablehlo.shift_right_logical"] * 2 + ["func.return"], text
    module, _ = hlo2dace.lower_text(textwrap.dedent(FOLDED)).planned()
    ops = module.main.body.entry.ops
    shifts = [ir.constant_value(uses_producer) for op in ops
              if op.name == "stablehlo.broadcast_in_dim"
              for uses_producer in ops if uses_producer.results and
              uses_producer.result.name == op.operands[0].name]
    assert [int(v) for v in shifts] == [17, 6]
    x = np.arange(1, 9, dtype=np.uint32) * 0x10001
    np.testing.assert_array_equal(hlo2dace.compile_text(textwrap.dedent(FOLDED))(x),
                                  x >> 17 >> 6)


@pytest.mark.parametrize("start,bound,step,element,expected", [
    (0, 5, 1, "i32", 5), (5, 5, 1, "i32", 0), (7, 5, 1, "i32", 0), (1, 8, 3, "i32", 3),
    (2**31 - 3, 2**31 - 1, 1, "i32", 2),
    (2**31 - 10, 2**31 - 1, 8, "i32", None),  # the second increment passes 2^31 - 1
    (2**31 - 10, 2**31 - 1, 8, "i64", 2)])
def test_trip_counts_and_counters_that_would_wrap(start, bound, step, element, expected):
    assert trip_count(start, bound, step, element) == expected


def test_the_pass_is_listed_first_in_the_plan():
    """The loop is unrolled before any pass decides how its ops are computed."""
    assert all_passes("plan")[0] == "unroll_short_loops"
