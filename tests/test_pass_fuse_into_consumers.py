"""The fuse_into_consumers pass: an elementwise value that only a reduction, a scatter, a
sort or a gather its readers compute reads is computed in that op's loops, or where the
gather reads it."""

import jax
import jax.numpy as jnp
import numpy as np

import hlo2dace

from pass_util import check_pass, code_of, operands, planned
from util import assert_arrays_match


def test_a_reduction_and_a_scatter_take_their_producers():
    text = planned("""
        func.func @main(%x: tensor<64x300xf32>, %u: tensor<2xf32>) -> (tensor<f32>,
            tensor<6xf32>, tensor<64x300xf32>) {
          %0 = stablehlo.exponential %x : tensor<64x300xf32>
          %1 = stablehlo.constant dense<0.0> : tensor<f32>
          %2 = stablehlo.reduce(%0 init: %1) applies stablehlo.add across dimensions = [0, 1]
            : (tensor<64x300xf32>, tensor<f32>) -> tensor<f32>
          %3 = stablehlo.constant dense<0.0> : tensor<6xf32>
          %4 = stablehlo.constant dense<[[1], [3]]> : tensor<2x1xi32>
          %5 = stablehlo.sine %u : tensor<2xf32>
          %6 = "stablehlo.scatter"(%3, %4, %5) ({
            ^bb0(%a: tensor<f32>, %b: tensor<f32>):
              stablehlo.return %b : tensor<f32>
          }) {scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0],
              scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}
            : (tensor<6xf32>, tensor<2x1xi32>, tensor<2xf32>) -> tensor<6xf32>
          %7 = stablehlo.log %x : tensor<64x300xf32>
          %8 = stablehlo.reduce(%7 init: %1) applies stablehlo.add across dimensions = [0, 1]
            : (tensor<64x300xf32>, tensor<f32>) -> tensor<f32>
          %9 = stablehlo.add %2, %8 : tensor<f32>
          return %9, %6, %7 : tensor<f32>, tensor<6xf32>, tensor<64x300xf32>
        }""", "fuse_elementwise", "fuse_into_consumers")
    lines = {line.split(" = ")[0]: line for line in text.splitlines() if " = " in line}
    assert "#h2d.fused_operands<operands = array<i64: 0>>" in lines["%2"]
    assert "#h2d.fused_operands<operands = array<i64: 2>>" in lines["%6"]
    # a value another op reads too (the return) is written once, not computed again
    assert "fused_operands" not in lines["%8"]


def test_only_fused_producers():
    text = planned("""
        func.func @main(%x: tensor<300xf32>) -> tensor<f32> {
          %0 = stablehlo.exponential %x : tensor<300xf32>
          %1 = stablehlo.constant dense<0.0> : tensor<f32>
          %2 = stablehlo.reduce(%0 init: %1) applies stablehlo.add across dimensions = [0]
            : (tensor<300xf32>, tensor<f32>) -> tensor<f32>
          return %2 : tensor<f32>
        }""", "fuse_into_consumers")
    assert "fused_operands" not in text


def test_a_sum_of_squares_without_its_squares_written():
    x, = operands((2000, 300))
    check_pass("fuse_into_consumers", lambda x: (x * x).sum(), x, rtol=1e-5)


def test_a_sort_computes_its_positions():
    """``lax.top_k`` and ``jnp.argsort`` sort an iota beside the keys: the sort computes
    each position where it reads it, and the iota is never written. f16 keys (stored as
    bits) and a computed key (``-x``) are read as the sort's other operands are."""
    from jax import lax

    x, = operands((64, 300))

    def ranks(x):
        return (lax.top_k(x, 5), jnp.argsort(-x, axis=0, stable=True),
                jnp.argsort(x.astype(jnp.float16)[:, 7]))

    check_pass("fuse_into_consumers", ranks, x)
    text = planned("""
        func.func @main(%x: tensor<8x300xf32>) -> (tensor<8x300xf32>, tensor<8x300xi32>) {
          %0 = stablehlo.iota dim = 1 : tensor<8x300xi32>
          %1:2 = "stablehlo.sort"(%x, %0) ({
            ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i32>, %d: tensor<i32>):
              %2 = stablehlo.compare GT, %a, %b, TOTALORDER
                : (tensor<f32>, tensor<f32>) -> tensor<i1>
              stablehlo.return %2 : tensor<i1>
          }) {dimension = 1 : i64, is_stable = true}
            : (tensor<8x300xf32>, tensor<8x300xi32>) -> (tensor<8x300xf32>, tensor<8x300xi32>)
          return %1#0, %1#1 : tensor<8x300xf32>, tensor<8x300xi32>
        }""", "fuse_elementwise", "fuse_into_consumers")
    assert "#h2d.fused_operands<operands = array<i64: 1>>" in text


def test_a_tanh_that_two_consumers_read_is_computed_once():
    """A value whose computation includes a ``tanh``, read by the updates of two
    scatters, is written once, not computed by each of them (pyhpc isoneutral's
    ``taper`` read by two ``.at[].set``s: its ``tanh`` was computed twice)."""
    x, = operands((64, 300), dtype="float64")

    def f(x):
        taper = 0.5 * (1.0 + jnp.tanh(x[1:] * 3.0))
        s = jnp.zeros_like(x).at[1:].set(taper * x[1:])
        t = jnp.zeros_like(x).at[:-1].set(taper + 2.0)
        return s * t

    assert code_of(f, x).count("tanh_(") == 1
    assert_arrays_match(jax.jit(f)(x), hlo2dace.jit(f)(x))


def test_a_gather_computes_its_operand_where_it_gathers():
    """A cross-entropy gathers each row's label from a log-softmax: only those elements
    are computed, and the log-softmax is never written; labels out of range, NaN and
    infinities in the logits, negative labels give XLA's results, also in a
    loop. A gather that reads more elements than its operand has (an embedding of few
    rows) reads it written."""
    logits, = operands((64, 300))
    logits[3, 7], logits[5, :] = np.nan, -np.inf
    logits[6, 0] = np.inf
    labels = np.arange(64, dtype=np.int32) * 37 % 300
    labels[:4] = [299, -1, 300, 7]

    def loss(logits, labels):
        picked = jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], -1)
        return -picked.mean(), picked * 2

    check_pass("fuse_into_consumers", loss, logits, labels, rtol=1e-6, atol=1e-6)
    for disable, written in (((), 0), (("fuse_into_consumers",), 1)):
        sdfg = hlo2dace.jit(loss, disable_passes=disable).lower(logits, labels).as_sdfg()
        assert sum(a.transient and a.total_size == logits.size
                   for a in sdfg.arrays.values()) == written

    def steps(logits, labels):
        return jax.lax.fori_loop(0, 3, lambda i, x: x * 0.5 + loss(x, labels)[1], logits)

    assert_arrays_match(jax.jit(steps)(logits, labels), hlo2dace.jit(steps)(logits, labels),
                        rtol=1e-6, atol=1e-6)

    def updated_after(x, labels):  # the array the gathered log-softmax reads, updated later
        z = jnp.sort(x, axis=1)
        picked = jnp.take_along_axis(jax.nn.log_softmax(z), labels[:, None], -1)
        return picked * 2, z.at[:, 5].set(100.0) + 1

    for got, expected in zip(hlo2dace.jit(updated_after)(logits, labels),
                             jax.jit(updated_after)(logits, labels)):
        assert_arrays_match(expected, got, rtol=1e-6, atol=1e-6)
    text = planned("""
        func.func @main(%x: tensor<4x8xf32>, %i: tensor<64x1xi32>) -> tensor<64x8xf32> {
          %0 = stablehlo.exponential %x : tensor<4x8xf32>
          %1 = "stablehlo.gather"(%0, %i) {dimension_numbers = #stablehlo.gather<
              offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0],
              index_vector_dim = 1>, slice_sizes = array<i64: 1, 8>}
            : (tensor<4x8xf32>, tensor<64x1xi32>) -> tensor<64x8xf32>
          %2 = stablehlo.negate %1 : tensor<64x8xf32>
          return %2 : tensor<64x8xf32>
        }""", "fuse_elementwise", "fuse_into_readers", "fuse_into_consumers")
    assert "computed_by_readers" in text and "fused_operands" not in text
