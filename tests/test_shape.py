"""Differential tests of the shape and data-movement ops (translate/shape.py) against
jax.jit: constants, iota, broadcast_in_dim, reshape, transpose, slice, concatenate, pad,
reverse, dynamic_slice, dynamic_update_slice, tuples and optimization_barrier, over every
dtype and over 0-d, empty and large-ish shapes. Cases are batched into few programs (one
compilation each): every function returns a dict whose keys name the cases."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import hlo2dace
from hlo2dace import cpp_split

from util import (
    ALL_DTYPES,
    assert_arrays_match,
    assert_matches_jax,
    dtype_id,
    random_operand,
    special_values,
)


def sample(dtype, shape, seed: int = 0) -> np.ndarray:
    """An array of ``shape`` filled with ``dtype``'s special values and random ones."""
    values = special_values(dtype, np.random.default_rng(seed), random=max(8, int(np.prod(shape))))
    values = np.random.default_rng(seed + 1).permutation(values)
    return np.resize(values, shape).astype(dtype)


# --------------------------------------------------------------- every op, every dtype


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_every_op(dtype):
    """Every op of shape.py once on each dtype (its variants: ``test_variants``)."""
    x = sample(dtype, (2, 3, 4))
    s = sample(dtype, (), seed=1)
    e = sample(dtype, (0, 3), seed=3)
    dense = sample(dtype, (2, 3), seed=4)
    pad_value = sample(dtype, (), seed=5)

    def f(x, s, e):
        x0 = x[:, :, 0]
        return {
            # constants: dense (a hidden array) read by a select, splat, 0-d, empty
            "dense": lax.select(x0 != x0, x0, jnp.asarray(dense)),
            "dense_only": jnp.asarray(dense),
            "splat": jnp.full((2, 3), dense[0, 1], dtype),
            "scalar_constant": jnp.asarray(dense[1, 2]),
            "empty_constant": jnp.asarray(np.zeros((0, 2), dtype)),
            "iota": lax.broadcasted_iota(dtype, (3, 4), 1) if dtype != np.bool_
            else lax.broadcasted_iota(np.int32, (3, 4), 1) > 1,
            "bcast": lax.broadcast_in_dim(x[:, :1], (4, 3, 5, 2), (3, 1, 0)),
            "bcast_scalar": jnp.broadcast_to(s, (2, 3)),
            "reshape": x.reshape(4, 6),
            "transpose": x.transpose(2, 0, 1),
            "slice": x[1:, ::2, 1:4:2],
            "concat": jnp.concatenate([x, x[:, :0], x[:, ::-1]], 1),
            "pad": lax.pad(x, pad_value, [(1, 0, 0), (-1, 2, 1), (0, -2, 2)]),
            "reverse": jnp.flip(x, (0, 2)),
            "dslice": lax.dynamic_slice(x, (1, 5, -7), (1, 2, 3)),
            "dupdate": lax.dynamic_update_slice(x, x[:1, :2, ::-2], (3, 1, -1)),
            "barrier": lax.optimization_barrier((x, s))[1],
            "empty": e.T,
        }

    assert_matches_jax(f, x, s, e)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8], ids=dtype_id)
def test_variants(dtype):
    """Each op's special cases: 0-d, empty and unit-dimension operands, views as operands."""
    x = sample(dtype, (2, 3, 4))
    s = sample(dtype, (), seed=1)
    v = sample(dtype, (5,), seed=2)
    e = sample(dtype, (0, 3), seed=3)
    pad_value = sample(dtype, (), seed=5)

    def f(x, s, v, e):
        return {
            # broadcast_in_dim: size-1 expansion, new and reordered dimensions, empty
            "bcast_unit": jnp.broadcast_to(x[:, :1, :], (2, 3, 4)),
            "bcast_new": jnp.broadcast_to(v, (3, 5)),
            "bcast_reorder": lax.broadcast_in_dim(x, (4, 3, 5, 2), (3, 1, 0)),
            "bcast_empty": jnp.broadcast_to(e[:, None, :], (0, 2, 3)),
            "bcast_0d_to_0d": lax.broadcast_in_dim(s, (), ()),
            # reshape
            "reshape_flat": x.reshape(-1),
            "reshape_unit": x.reshape(2, 1, 3, 1, 4),
            "reshape_to_0d": v[:1].reshape(()),
            "reshape_from_0d": s.reshape(1, 1),
            "reshape_of_view": x.transpose(2, 0, 1).reshape(8, 3),
            "reshape_of_reverse": x[::-1, :, ::-1].reshape(3, 8),
            "reshape_of_bcast": jnp.broadcast_to(v, (2, 5)).reshape(10),
            "reshape_of_literal": jnp.full((2, 3), v.dtype.type(3)).reshape(3, 2),
            "reshape_empty": e.reshape(3, 0),
            "reshape_1_to_0d": x[1:2, 2:3, 3:].reshape(()),
            # transpose
            "transpose_empty": e.T,
            "transpose_0d": lax.transpose(s, ()),
            # slice
            "slice_0d": x[1, 2, 3],
            "slice_empty": x[:, 2:2, :],
            "slice_strided": x[::2, ::2, 3:0:-2],
            # concatenate on each axis, with empty operands and views
            "concat0": jnp.concatenate([x, x[:1], x[::-1]], 0),
            "concat1": jnp.concatenate([x, x[:, :0], x[:, :1]], 1),
            "concat2": jnp.concatenate([x[..., 3:], x, x.transpose(0, 1, 2)], 2),
            "concat_empty": jnp.concatenate([e, e], 0),
            "concat_literal": jnp.concatenate([v, jnp.full((3,), v.dtype.type(2)), v[::-1]]),
            "concat_0d_pieces": jnp.stack([s, v[0], s]),
            # pad
            "pad_0d": lax.pad(s, pad_value, []),
            "pad_empty": lax.pad(e, pad_value, [(1, 1, 0), (0, 0, 1)]),
            "pad_view": lax.pad(x[::-1].transpose(1, 0, 2), pad_value,
                                [(0, 0, 1), (-1, 1, 0), (2, -1, 1)]),
            # reverse
            "reverse_all": x[::-1, ::-1, ::-1],
            "reverse_0d": lax.rev(s, ()),
            "reverse_unit": x[:1, ::-1],
            # dynamic_(update_)slice
            "dupdate_empty": lax.dynamic_update_slice(x, x[:, :0], (0, 1, 0)),
            "dupdate_all": lax.dynamic_update_slice(x, x[::-1], (0, 0, 0)),
            "dupdate_0d": lax.dynamic_update_slice(s, s, ()),
            "dslice_of_view": lax.dynamic_slice(x.transpose(2, 1, 0), (1, 1, 1), (2, 2, 1)),
            "dupdate_of_literal": lax.dynamic_update_slice(jnp.full((4,), v.dtype.type(7)), v[:2],
                                                          (1,)),
            # 0-d operands and results
            "scalar_arg": s,
            "scalar_slice_then_pad": lax.pad(x[1, 1, 1], s, []),
        }

    assert_matches_jax(f, x, s, v, e)


# ------------------------------------------------------------------------ constants


def test_constants_every_dtype():
    """Dense, splat, 0-d and empty constants of every dtype in one program (no arguments)."""
    values = {dtype_id(d): sample(d, (3, 4), seed=7) for d in ALL_DTYPES}

    def f():
        out = {}
        for name, value in values.items():
            out[name] = jnp.asarray(value)
            out[name + "_row_splat"] = jnp.asarray(np.broadcast_to(value[0, 0], (2, 3)))
            out[name + "_0d"] = jnp.asarray(value[1, 1])
            out[name + "_empty"] = jnp.asarray(value[:0])
        return out

    assert_matches_jax(f)


CONSTANTS_MODULE = """
func.func @main() -> (tensor<4xf32>, tensor<2xf32>, tensor<2x2xf64>, tensor<f32>, tensor<3xf64>,
                      tensor<2xcomplex<f32>>, tensor<complex<f64>>, tensor<3xi1>, tensor<i1>,
                      tensor<2xui64>, tensor<2xi64>, tensor<4xi4>, tensor<2xui4>, tensor<2xf16>,
                      tensor<2xbf16>, tensor<0x3xi32>, tensor<2xui8>, tensor<2xf32>) {
  %0 = stablehlo.constant dense<"0x0000803F000000400000C07F0000807F"> : tensor<4xf32>
  %1 = stablehlo.constant dense<0x7FC00001> : tensor<2xf32>
  %2 = stablehlo.constant dense<[[1.5, -0.0], [0x7FF0000000000000, 2.0e-308]]> : tensor<2x2xf64>
  %3 = stablehlo.constant dense<-3.25> : tensor<f32>
  %4 = stablehlo.constant dense<[0xFFF0000000000000, 4.9406564584124654E-324, 1.0]>
      : tensor<3xf64>
  %5 = stablehlo.constant dense<[(1.0, -2.0), (0.0, 3.5)]> : tensor<2xcomplex<f32>>
  %6 = stablehlo.constant dense<(-1.25, 0.5)> : tensor<complex<f64>>
  %7 = stablehlo.constant dense<[true, false, true]> : tensor<3xi1>
  %8 = stablehlo.constant dense<true> : tensor<i1>
  %9 = stablehlo.constant dense<18446744073709551615> : tensor<2xui64>
  %10 = stablehlo.constant dense<[-9223372036854775808, 9223372036854775807]> : tensor<2xi64>
  %11 = stablehlo.constant dense<[-8, 7, -1, 0]> : tensor<4xi4>
  %12 = stablehlo.constant dense<[15, 1]> : tensor<2xui4>
  %13 = stablehlo.constant dense<[0x7C00, 6.5e4]> : tensor<2xf16>
  %14 = stablehlo.constant dense<"0x803FC0FF"> : tensor<2xbf16>
  %15 = stablehlo.constant dense<> : tensor<0x3xi32>
  %16 = stablehlo.constant dense<"0xFF00"> : tensor<2xui8>
  %17 = stablehlo.constant dense<"0x0000803F"> : tensor<2xf32>
  return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17
      : tensor<4xf32>, tensor<2xf32>, tensor<2x2xf64>, tensor<f32>, tensor<3xf64>,
        tensor<2xcomplex<f32>>, tensor<complex<f64>>, tensor<3xi1>, tensor<i1>,
        tensor<2xui64>, tensor<2xi64>, tensor<4xi4>, tensor<2xui4>, tensor<2xf16>,
        tensor<2xbf16>, tensor<0x3xi32>, tensor<2xui8>, tensor<2xf32>
}
"""


def _bits(value, dtype) -> np.ndarray:
    return np.array(value, dtype=np.uint32 if np.dtype(dtype).itemsize == 4 else np.uint64)


def test_constants_literal_forms():
    """Every literal form of the StableHLO text: hex blobs, hex splats (NaN payloads),
    nested lists, complex, bool, extreme integers, sub-byte integers, f16/bf16, empty."""
    results = hlo2dace.compile_text(CONSTANTS_MODULE)()
    expected = [
        np.array([1.0, 2.0, np.nan, np.inf], np.float32),
        _bits([0x7FC00001] * 2, np.float32).view(np.float32),
        np.array([[1.5, -0.0], [np.inf, 2.0e-308]]),
        np.array(-3.25, np.float32),
        np.array([-np.inf, 5e-324, 1.0]),
        np.array([1 - 2j, 3.5j], np.complex64),
        np.array(-1.25 + 0.5j),
        np.array([True, False, True]),
        np.array(True),
        np.array([2**64 - 1] * 2, np.uint64),
        np.array([-2**63, 2**63 - 1], np.int64),
        np.array([-8, 7, -1, 0], ml_dtypes.int4),
        np.array([15, 1], ml_dtypes.uint4),
        np.array([np.inf, 6.5e4], np.float16),
        np.array([1.0, np.nan], ml_dtypes.bfloat16),
        np.zeros((0, 3), np.int32),
        np.array([255, 0], np.uint8),
        np.array([1.0, 1.0], np.float32),
    ]
    assert len(results) == len(expected)
    for i, (e, a) in enumerate(zip(expected, results)):
        assert_arrays_match(e, a, where=f"result {i}")
    # NaN payloads survive bit for bit
    assert (np.asarray(results[1]).view(np.uint32) == 0x7FC00001).all()
    assert np.asarray(results[14]).view(np.uint16)[1] == 0xFFC0


# ---------------------------------------------------------------------------- iota


def test_iota():
    def f():
        out = {}
        for dtype in ALL_DTYPES[1:]:
            name = dtype_id(dtype)
            out[f"iota_{name}"] = lax.iota(dtype, 7)
            out[f"arange_{name}"] = jnp.arange(2, 12, 3, dtype=dtype)
        for dim in range(3):
            out[f"bcast_iota_{dim}"] = lax.broadcasted_iota(np.int32, (3, 4, 5), dim)
            out[f"bcast_iota_f_{dim}"] = lax.broadcasted_iota(np.float32, (3, 4, 5), dim) * 0.5
            out[f"bcast_iota_empty_{dim}"] = lax.broadcasted_iota(np.int64, (3, 0, 5), dim)
        out["iota_0"] = lax.iota(np.int32, 0)
        out["iota_f16_large"] = lax.iota(np.float16, 3000)  # rounds above 2048
        out["iota_bf16_large"] = lax.iota(ml_dtypes.bfloat16, 600)
        out["iota_i8_wrap"] = lax.iota(np.int8, 300)
        out["iota_u8_wrap"] = lax.iota(np.uint8, 300)
        return out

    assert_matches_jax(f)


def test_iota_text():
    """Iota over each dimension of a 3-D shape, without JAX's rewriting."""
    module = """
func.func @main() -> (tensor<2x3x4xi32>, tensor<2x3x4xf64>, tensor<2x3x4xui16>,
                      tensor<2x3x4xcomplex<f32>>) {
  %0 = stablehlo.iota dim = 0 : tensor<2x3x4xi32>
  %1 = stablehlo.iota dim = 1 : tensor<2x3x4xf64>
  %2 = stablehlo.iota dim = 2 : tensor<2x3x4xui16>
  %3 = stablehlo.iota dim = 2 : tensor<2x3x4xcomplex<f32>>
  return %0, %1, %2, %3 : tensor<2x3x4xi32>, tensor<2x3x4xf64>, tensor<2x3x4xui16>,
      tensor<2x3x4xcomplex<f32>>
}
"""
    results = hlo2dace.compile_text(module)()
    grids = np.indices((2, 3, 4))
    expected = [grids[0].astype(np.int32), grids[1].astype(np.float64),
                grids[2].astype(np.uint16), grids[2].astype(np.complex64)]
    for i, (e, a) in enumerate(zip(expected, results)):
        assert_arrays_match(e, a, where=f"result {i}")


# ------------------------------------------------------------------------------ pad


def test_pad():
    """lax.pad with negative edges and interior padding on 1-D to 3-D operands."""
    x1 = sample(np.float32, (7,))
    x2 = sample(np.float64, (4, 5), seed=1)
    x3 = sample(np.int32, (3, 4, 5), seed=2)

    def f(x1, x2, x3):
        f32, f64, i32 = np.float32(-7.5), np.float64(np.nan), np.int32(-1)
        configs1 = [(2, 3, 0), (-2, -3, 0), (-3, 2, 2), (1, -4, 1), (-1, -1, 3), (0, 0, 4),
                    (-5, -5, 1), (-13, 0, 1)]
        out = {f"pad1_{i}": lax.pad(x1, f32, [c]) for i, c in enumerate(configs1)}
        out["pad1_dynamic_value"] = lax.pad(x1, x1[3], [(-1, 2, 1)])
        out["pad2_a"] = lax.pad(x2, f64, [(-1, 2, 1), (2, -3, 2)])
        out["pad2_b"] = lax.pad(x2, f64, [(0, 0, 3), (-2, -2, 0)])
        out["pad2_all_cut"] = lax.pad(x2, f64, [(-4, 0, 0), (0, 0, 0)])
        out["pad3"] = lax.pad(x3, i32, [(1, -1, 1), (-2, 3, 0), (0, -3, 2)])
        out["pad3_of_view"] = lax.pad(x3.transpose(2, 1, 0)[::-1], i32,
                                      [(-1, 1, 1), (0, 0, 1), (2, -1, 0)])
        out["pad_then_add"] = lax.pad(x2, 0.0, [(1, 1, 1), (0, 0, 0)]) + 1.0
        return out

    assert_matches_jax(f, x1, x2, x3)


# ------------------------------------------------------------------ dynamic slicing


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64, np.uint32, np.int8, np.uint8,
                                         np.uint64, np.int16], ids=dtype_id)
def test_dynamic_slice_clamping(index_dtype):
    """Start indices as traced arguments: in range, negative and too large (clamped as the
    spec says); the same compiled program is called with every index pair."""
    x = sample(np.float32, (6, 7))
    upd = sample(np.float32, (2, 3), seed=1)

    def f(x, upd, i, j):
        return {
            "dslice": lax.dynamic_slice(x, (i, j), (3, 4), allow_negative_indices=False),
            "dslice_full": lax.dynamic_slice(x, (i, j), (6, 7), allow_negative_indices=False),
            "dslice_view": lax.dynamic_slice(x.T[::-1], (j, i), (2, 2),
                                             allow_negative_indices=False) * 2,
            "dupdate": lax.dynamic_update_slice(x, upd, (i, j), allow_negative_indices=False),
            "dupdate_view": lax.dynamic_update_slice(x[::-1], upd.T, (j, i),
                                                     allow_negative_indices=False),
            "wrapped": lax.dynamic_slice(x, (i, j), (2, 2)),  # JAX's negative-index wrap
        }

    info = np.iinfo(index_dtype)
    starts = [(0, 0), (1, 2), (3, 3), (5, 6), (100, 1), (2, 100), (info.max, info.max)]
    if info.min < 0:
        starts += [(-1, 2), (-3, -5), (-100, 4), (info.min, info.min)]
    compiled = hlo2dace.jit(f)
    expected_fn = jax.jit(f)
    for i, j in starts:
        args = (x, upd, index_dtype(i), index_dtype(j))
        expected, actual = expected_fn(*args), compiled(*args)
        for key in expected:
            assert_arrays_match(expected[key], actual[key], where=f"{key} at {(i, j)}")


@pytest.mark.pipeline
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32], ids=dtype_id)
def test_dynamic_slices_read_by_elementwise_ops_are_read_in_place(dtype):
    """NPBench's vadv: a loop reads planes ``u[:, :, k]`` of arrays it does not write.
    Its elementwise maps read each plane in place (a ``Gathered`` binding); no map copies
    one (``w``'s). A plane of the carried array, and one a reduction reads too, are still
    copied first, and every result is XLA's."""
    u = sample(dtype, (5, 6, 7))
    w = sample(dtype, (5, 6, 7), seed=1)

    def f(u, w):
        def body(k, carry):
            acc, total = carry
            plane = u[:, :, k] * 2 + w[:, :, k + 1] - acc[:, :, k - 1]
            return acc.at[:, :, k].set(plane), total + jnp.max(w[:, :, k])
        return lax.fori_loop(1, 6, body, (jnp.zeros_like(u), jnp.zeros((), dtype)))

    sdfg = hlo2dace.jit(f).lower(u, w).as_sdfg()
    copies = [n.label for n, _ in sdfg.all_nodes_recursive()
              if type(n).__name__ == "MapEntry" and n.label.startswith("dynamic_slice")]
    assert len(copies) == 2, copies  # acc[:, :, k - 1], and w[:, :, k] for the maximum
    assert_matches_jax(f, u, w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, ml_dtypes.bfloat16],
                         ids=dtype_id)
@pytest.mark.pipeline
def test_rolls_by_traced_shifts_copy_from_the_parts(dtype):
    """``jnp.roll`` by a traced shift is a window of the array laid twice end to end
    (NPBench's durbin rolls a flipped vector every step): the window is copied from the
    parts, never the doubled array first. Along each axis, of a flipped array and of a
    slice, by shifts that wrap, negative ones, zero and whole turns; XLA's results."""
    x = sample(dtype, (5, 6, 7))

    def f(x, k):
        return {"axis0": jnp.roll(x, k, 0), "axis1": jnp.roll(x, -k, 1),
                "flipped": jnp.roll(jnp.flip(x[1:4], 2), k, 2) * 2,
                "flat": jnp.roll(x[2, 3], k), "twice": jnp.roll(x, (k, 2 * k), (0, 2))}

    for k in (0, 1, 3, -2, 6, 7, -14, 35):
        assert_matches_jax(f, x, k)
    sdfg = hlo2dace.jit(f).lower(x, 3).as_sdfg()
    doubled = [name for name, a in sdfg.arrays.items() if a.transient and
               a.total_size in (2 * x.size, 3 * 6 * 14, 14)]
    assert not doubled, doubled


DYNAMIC_TEXT = """
func.func @main(%x: tensor<5x6xf32>, %u: tensor<2x2xf32>, %i: tensor<{t}>, %j: tensor<{t}>)
    -> (tensor<2x3xf32>, tensor<5x6xf32>) {{
  %0 = stablehlo.dynamic_slice %x, %i, %j, sizes = [2, 3]
      : (tensor<5x6xf32>, tensor<{t}>, tensor<{t}>) -> tensor<2x3xf32>
  %1 = stablehlo.dynamic_update_slice %x, %u, %i, %j
      : (tensor<5x6xf32>, tensor<2x2xf32>, tensor<{t}>, tensor<{t}>) -> tensor<5x6xf32>
  return %0, %1 : tensor<2x3xf32>, tensor<5x6xf32>
}}
"""


def _reference_dynamic(x, u, i, j):
    si = int(min(max(int(i), 0), x.shape[0] - 2))
    sj_slice = int(min(max(int(j), 0), x.shape[1] - 3))
    sj_update = int(min(max(int(j), 0), x.shape[1] - 2))
    updated = x.copy()
    updated[si:si + 2, sj_update:sj_update + 2] = u
    return x[si:si + 2, sj_slice:sj_slice + 3], updated


@pytest.mark.parametrize("index_type", ["i8", "ui8", "ui64"])
def test_dynamic_slice_text(index_type):
    """Index types JAX rewrites before they reach StableHLO (it wraps signed negative
    indices): the raw op clamps, also for unsigned indices above INT64_MAX."""
    compiled = hlo2dace.compile_text(DYNAMIC_TEXT.format(t=index_type))
    dtype = {"i8": np.int8, "ui8": np.uint8, "ui64": np.uint64}[index_type]
    info = np.iinfo(dtype)
    x = sample(np.float32, (5, 6))
    u = sample(np.float32, (2, 2), seed=3)
    for i, j in [(0, 0), (2, 1), (4, 5), (info.max, 3), (1, info.max), (info.min, info.min),
                 (info.max // 2 + 1, 2)]:
        actual = compiled(x, u, dtype(i), dtype(j))
        expected = _reference_dynamic(x, u, dtype(i), dtype(j))
        for k, (e, a) in enumerate(zip(expected, actual)):
            assert_arrays_match(e, a, where=f"result {k} at {(i, j)}")


# ---------------------------------------------------------------- composed views


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex128, ml_dtypes.bfloat16],
                         ids=dtype_id)
def test_view_chains(dtype):
    """Views composed through several ops, read by elementwise ops (fused maps)."""
    x = sample(dtype, (3, 4, 5))
    v = sample(dtype, (4,), seed=1)
    s = sample(dtype, (), seed=2)

    def f(x, v, s):
        b = jnp.broadcast_to(v[:, None], (4, 6))
        return {
            "transpose_slice_bcast": b[1:, ::2].T + b[::-1][1:, 1:4].T,
            "reverse_reverse": x[::-1][::-1] + x,
            "reverse_of_slice": x[1:, ::-1, 1::2][::-1, :, ::-1] - x[:2, :, 0:3:2][::-1],
            "slice_of_reverse": x[::-1, ::-1][1:3, 1::2],
            "transpose_transpose": x.transpose(2, 0, 1).transpose(2, 0, 1) - x.transpose(1, 2, 0),
            "bcast_of_slice_of_0d": -jnp.broadcast_to(s.reshape(1, 1)[0:1, ::-1], (3, 4)),
            "unit_reshape_of_reverse": -x[::-1, 1:2, :].reshape(3, 5)[::-1, 1:],
            "stride_3": x[:, ::3, ::-2] - s,
            "view_of_concat": jnp.concatenate([x, x[::-1]], 1)[::-1, ::3].transpose(2, 1, 0),
            "mixed_views": jnp.broadcast_to(x[:, None, 1, ::-1], (3, 2, 5)).transpose(1, 2, 0)
            + jnp.broadcast_to(v[1:].reshape(1, 1, 3), (2, 5, 3)),
            # results that are views or literals of arguments
            "arg": x,
            "arg_transpose": x.transpose(1, 0, 2),
            "arg_reverse": x[:, ::-1],
            "arg_bcast": jnp.broadcast_to(s, (2, 2)),
            "literal": jnp.full((2, 3), s.dtype.type(1)),
        }

    assert_matches_jax(f, x, v, s)


# --------------------------------------------------------------- empty arrays


def test_empty_arrays():
    """Zero-size arguments, results and intermediate values through every op."""
    e = np.zeros((0, 4), np.float32)
    e3 = np.zeros((2, 0, 3), np.int16)
    x = sample(np.float32, (3, 4))

    def f(e, e3, x):
        return {
            "arg": e,
            "add": e + 1.0,
            "transpose": e3.transpose(2, 1, 0) * 2,
            "reshape": e3.reshape(0, 6),
            "reshape_2": e3.reshape(6, 0, 1),
            "concat": jnp.concatenate([e, x, e], 0),
            "concat_empty_result": jnp.concatenate([e, e], 0),
            "pad_empty": lax.pad(e, np.float32(3), [(1, 2, 0), (0, 0, 0)]),
            "pad_to_empty": lax.pad(x, np.float32(3), [(-3, 0, 0), (0, 0, 0)]),
            "slice_empty": x[2:2],
            "reverse": e3[::-1, :, ::-1],
            "bcast": jnp.broadcast_to(e[:, None], (0, 5, 4)),
            "dslice": lax.dynamic_slice(e3, (1, 0, 2), (1, 0, 1)),
            "dupdate": lax.dynamic_update_slice(e3, e3[:1], (1, 0, 0)),
            "iota": lax.broadcasted_iota(np.int32, (0, 3), 1),
            "sum_of_x": x + jnp.concatenate([x[:0], x], 0),
        }

    assert_matches_jax(f, e, e3, x)
    # every argument and result empty
    assert_matches_jax(lambda e, e3: (e.T, e3[::-1] + 1, jnp.concatenate([e, e])), e, e3)


# ------------------------------------------------------------------- large arrays


def test_large_arrays():
    x = sample(np.float32, (300, 500))
    y = sample(np.float64, (64, 48, 40), seed=1)

    def f(x, y):
        return {
            "transpose": x.T,
            "transpose3": y.transpose(2, 0, 1) + 1.0,
            "transpose4": y.reshape(8, 8, 48, 40).transpose(3, 1, 0, 2),
            "reverse": x[::-1, ::-1] * 2,
            "concat": jnp.concatenate([x, x[::-1], x[:7]], 0),
            "pad": lax.pad(y, 0.0, [(1, -1, 1), (-3, 3, 0), (0, 0, 2)]),
            "slice": x[3:290:7, ::-3],
            "reshape": x.reshape(500, 300) - x.T,
            "dslice": lax.dynamic_slice(y, (jnp.int32(10), jnp.int32(40), jnp.int32(7)),
                                        (40, 20, 30)),
        }

    assert_matches_jax(f, x, y)


# -------------------------------------------------------- tuples, barriers, 4-D transposes


@pytest.mark.parametrize("permutation", [(3, 2, 1, 0), (1, 3, 0, 2), (0, 2, 3, 1)])
def test_transpose_4d(permutation):
    x = sample(np.complex64, (2, 3, 4, 5))
    y = sample(np.uint16, (2, 3, 4, 5), seed=1)

    def f(x, y):
        return {"x": x.transpose(permutation), "y": y.transpose(permutation),
                "x_chain": x.transpose(permutation).transpose(np.argsort(permutation)) + x,
                "y_reshape": y.transpose(permutation).reshape(6, 20)}

    assert_matches_jax(f, x, y)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int8, ml_dtypes.bfloat16,
                                   np.complex128], ids=dtype_id)
@pytest.mark.pipeline
def test_large_transpositions_run_in_tiles(dtype):
    """Maps that read a large array along another dimension than their innermost one (a
    transpose alone, fused with arithmetic, flattened, and a stack of transposed arrays as
    pyhpc's tridiagonal solver builds it) run in tiles of both dimensions, sizes that are
    not multiples of a tile too, with XLA's results; a small transpose is not tiled."""
    import dace

    a, b = sample(dtype, (100, 70, 40)), sample(dtype, (100, 70, 40), seed=1)
    small = sample(dtype, (20, 30), seed=2)

    def f(a, b, small):
        return {"alone": a.transpose(2, 0, 1), "fused": jnp.swapaxes(a, 1, 2) + b[:, 0:1, 0:1],
                "flat": a.reshape(100, 2800).T,
                "stack": jnp.stack([x.transpose(2, 0, 1) for x in (a, b)], axis=1),
                "small": small.T}

    assert_matches_jax(f, a, b, small)
    sdfg = hlo2dace.jit(f).lower(a, b, small).as_sdfg()
    tiled, untiled = [], []
    for node, state in sdfg.all_nodes_recursive():
        if isinstance(node, dace.nodes.MapEntry) and state.entry_node(node) is None:
            inner = [n for n in state.scope_children()[node]
                     if isinstance(n, dace.nodes.MapEntry)]
            reads = {e.data.data for e in state.in_edges(node) if not e.data.is_empty()}
            (tiled if inner else untiled).append(reads)
            assert all(n.map.schedule == dace.ScheduleType.Sequential
                       and sum(size != 1 for size in n.map.range.size()) == 2
                       for n in inner)
    assert len(tiled) >= 4 and not any("arg2" in reads for reads in tiled), (tiled, untiled)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int8, ml_dtypes.bfloat16,
                                   np.complex64], ids=dtype_id)
@pytest.mark.pipeline
def test_short_rows_run_as_one_loop(dtype):
    """A map whose innermost dimension is short runs it and the one around it as one loop
    where every array it moves along them is contiguous in both (an elementwise
    expression, a stencil along the outer dimensions), so that the loop vectorises without
    a scalar remainder per row; a map that reads a broadcast or a shifted row keeps its
    loops unless it computes enough per element to pay for gathering them, and then says
    that its iterations are independent (``#pragma GCC ivdep``). XLA's results either
    way."""
    import dace

    a, c = sample(dtype, (40, 30, 7)), sample(dtype, (40, 30, 5), seed=1)
    b = sample(dtype, (5,), seed=2)

    def heavy(a, b):  # enough ops per element to pay for gathering b
        y = a + b
        for _ in range(16):
            y = y * 3 - a
        return y

    def f(a, b, c):
        return {"scaled": a * 3 + 1, "stencil": a[1:-1, 1:-1] - a[2:, 1:-1] * a[1:-1, :-2],
                "shifted": a[:, :, 1:] - a[:, :, :-1], "broadcast": c * b,
                "heavy": heavy(c[:20], b)}

    assert_matches_jax(f, a, b, c)
    sdfg = hlo2dace.jit(f).lower(a, b, c).as_sdfg()
    maps = {tuple(int(n) for n in node.map.range.size()): state.scope_children()[node]
            for node, state in sdfg.all_nodes_recursive()
            if isinstance(node, dace.nodes.MapEntry) and state.entry_node(node) is None}
    assert {(40, 210), (38, 196), (40, 30, 6), (40, 30, 5)} <= maps.keys(), maps
    marked = [shape for shape, nodes in maps.items() if any(
        isinstance(n, dace.nodes.Tasklet) and cpp_split.INDEPENDENT_ITERATIONS
        in n.code.as_string for n in nodes)]
    assert len(marked) == 1 and len(marked[0]) < 3 and np.prod(marked[0]) == 3000, marked


@pytest.mark.pipeline
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32], ids=dtype_id)
def test_tiny_rows_of_slices_run_the_longer_loop_innermost(dtype):
    """A map whose innermost loop is at most ``machine.tiny_row`` long and whose arrays are
    not contiguous across the loop around it (slices of columns of 4, as pyhpc's
    isoneutral at 4,096 points: 32 x 32 x 4), written into a window of a larger array,
    runs the longer loop innermost so that it vectorises, and says that its iterations
    are independent; a reduction along the short axis keeps its order. XLA's results."""
    import dace

    a, b = sample(dtype, (32, 32, 4)), sample(dtype, (32, 32, 4), seed=1)
    out = np.zeros((32, 32, 4, 2), dtype)

    def f(a, b, out):
        inner = a[2:-2, 2:-2, 1:] * b[2:-2, 1:-3, 1:] - a[2:-2, 3:-1, :-1]
        return {"window": out.at[2:-2, 2:-2, 1:, 1].set(inner * 3 + b[2:-2, 2:-2, 1:]),
                "summed": inner.sum(axis=2)}

    assert_matches_jax(f, a, b, out)
    sdfg = hlo2dace.jit(f).lower(a, b, out).as_sdfg()
    maps = {tuple(int(n) for n in node.map.range.size()): state.scope_children()[node]
            for node, state in sdfg.all_nodes_recursive()
            if isinstance(node, dace.nodes.MapEntry) and state.entry_node(node) is None}
    assert (28, 3, 28) in maps and (28, 28, 3) not in maps, maps.keys()
    assert any(isinstance(n, dace.nodes.Tasklet) and cpp_split.INDEPENDENT_ITERATIONS
               in n.code.as_string for n in maps[(28, 3, 28)])


def test_optimization_barrier_tuple():
    x = sample(np.float64, (3, 4))
    s = sample(np.int32, ())

    def f(x, s):
        a, b, c = lax.optimization_barrier((x * 2, s, x.T))
        d, e = lax.optimization_barrier((a + c.T, jnp.full((2,), 7.0)))
        return {"a": a, "b": b, "c": c, "d": d, "e": e, "b_plus": b + 1}

    assert_matches_jax(f, x, s)


TUPLE_MODULE = """
func.func @main(%x: tensor<3xf32>, %y: tensor<i64>) -> (tensor<3xf32>, tensor<i64>,
                                                       tensor<3xf32>) {
  %t = stablehlo.tuple %x, %y : tuple<tensor<3xf32>, tensor<i64>>
  %n = stablehlo.tuple %t, %x : tuple<tuple<tensor<3xf32>, tensor<i64>>, tensor<3xf32>>
  %inner = stablehlo.get_tuple_element %n[0]
      : (tuple<tuple<tensor<3xf32>, tensor<i64>>, tensor<3xf32>>)
      -> tuple<tensor<3xf32>, tensor<i64>>
  %a = stablehlo.get_tuple_element %inner[0] : (tuple<tensor<3xf32>, tensor<i64>>)
      -> tensor<3xf32>
  %b = stablehlo.get_tuple_element %inner[1] : (tuple<tensor<3xf32>, tensor<i64>>)
      -> tensor<i64>
  %c = stablehlo.get_tuple_element %n[1]
      : (tuple<tuple<tensor<3xf32>, tensor<i64>>, tensor<3xf32>>) -> tensor<3xf32>
  %d = stablehlo.add %a, %c : tensor<3xf32>
  return %a, %b, %d : tensor<3xf32>, tensor<i64>, tensor<3xf32>
}
"""


def test_tuple_text():
    x = np.array([1.0, -2.0, 3.5], np.float32)
    y = np.array(-7, np.int64)
    a, b, d = hlo2dace.compile_text(TUPLE_MODULE)(x, y)
    assert_arrays_match(x, a)
    assert_arrays_match(y, b)
    assert_arrays_match(x + x, d)


SCALAR_DYNAMIC_MODULE = """
func.func @main(%s: tensor<f32>, %u: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
  %0 = "stablehlo.dynamic_slice"(%s) <{slice_sizes = array<i64>}>
      : (tensor<f32>) -> tensor<f32>
  %1 = "stablehlo.dynamic_update_slice"(%s, %u) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %0, %1 : tensor<f32>, tensor<f32>
}
"""


def test_dynamic_slice_0d_text():
    """0-d dynamic_slice / dynamic_update_slice (no start indices; JAX's pretty printer
    writes them in a form MLIR does not read back, so the module is in generic form)."""
    s, u = np.array(1.5, np.float32), np.array(-2.0, np.float32)
    a, b = hlo2dace.compile_text(SCALAR_DYNAMIC_MODULE)(s, u)
    assert_arrays_match(s, a)
    assert_arrays_match(u, b)


def test_concatenate_one_access_node():
    """The copies of a concatenate write into one access node, so that every reader of
    the result depends on all of them (no code is generated or run here)."""
    import dace

    x = np.zeros((2, 3), np.float32)

    def f(x):
        c = jnp.concatenate([x, x[:0], x[::-1], jnp.full((1, 3), 2.0, np.float32)], 0)
        return c.T * 2

    sdfg = hlo2dace.jit(f).lower(x).as_sdfg()
    (state,) = [s for s in sdfg.states() if any(isinstance(n, dace.nodes.MapEntry)
                                                for n in s.nodes())]
    writes = {}
    for node in state.data_nodes():
        if state.in_degree(node):
            writes.setdefault(node.data, []).append(node)
    pieces = [nodes for nodes in writes.values()
              if any(state.in_degree(n) == 3 for n in nodes)]
    assert len(pieces) == 1 and len(pieces[0]) == 1, writes


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex128, ml_dtypes.bfloat16,
                                   np.bool_], ids=dtype_id)
@pytest.mark.pipeline
def test_reshapes_read_in_place_by_elementwise_ops(dtype):
    """A reshape that moves elements across dimensions (a transpose made flat, a repeat, a
    strided slice regrouped, a reshape of a reshape) and that only elementwise ops read is
    read in place by their maps: no reshaping map, XLA's results; one that a product or a
    loop reads is written once; and a loop that updates its carried array in place reads
    the reshape of it before the update."""
    x = sample(dtype, (4, 6, 10))
    y = sample(dtype, (24, 10), seed=3)

    def elementwise(x, y):
        def read(v):  # an elementwise op of every dtype
            return jnp.where(v == v, v, v[::-1])

        flat = jnp.reshape(jnp.transpose(x, (1, 0, 2)), (240,))
        return {"transposed": jnp.reshape(flat, (24, 10)) == y,
                "repeat": jnp.reshape(jnp.repeat(x[:, :1], 6, axis=1), (24, 10)) != y,
                "strided": read(jnp.reshape(x[:, ::2, 1::3], (4, 9))),
                "twice": read(jnp.reshape(jnp.reshape(x.T, (60, 4)), (12, 20)).T)}

    assert_matches_jax(elementwise, x, y)
    sdfg = hlo2dace.jit(elementwise).lower(x, y).as_sdfg()
    labels = [n.label for n, _ in sdfg.all_nodes_recursive() if type(n).__name__ == "MapEntry"]
    assert not [label for label in labels if "reshape" in label], labels
    if np.dtype(dtype).kind in "fc":
        def others(x, y):
            product = jnp.reshape(x.T, (60, 4)) @ jnp.ones((4, 3), x.dtype)

            def step(i, carry):
                flat = jnp.reshape(carry.T, (240,))
                return carry.at[0].set(jnp.reshape(flat[:60], (6, 10)) * 2) + 1

            return {"product": product, "loop": lax.fori_loop(0, 3, step, x)}

        assert_matches_jax(others, x, y, rtol=1e-2 if dtype == ml_dtypes.bfloat16 else 1e-6)


@pytest.mark.pipeline
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128], ids=dtype_id)
def test_reshapes_of_whole_arrays_read_in_place_by_products(dtype):
    """A reshape of a whole array that only products read (a batch of matrices made one
    tall matrix, either operand, merged or split dimensions) is read by the BLAS call in
    the array's memory: no reshaping map, XLA's results. A reshape of a view, or one that
    another op reads too, is written once, as before."""
    x, w, v = (random_operand(dtype, shape, seed=k)
               for k, shape in enumerate([(6, 5, 8), (8, 7), (3, 40)]))

    def products(x, w, v):
        return {"merged": jnp.reshape(x, (30, 8)) @ w,
                "both": jnp.reshape(v, (6, 20)) @ jnp.reshape(x, (20, 12)),
                "as rhs": w.T @ jnp.reshape(x, (8, 30))}

    def mixed(x, w, v):
        flat = jnp.reshape(x, (30, 8))
        return {"also elementwise": (flat @ w, jnp.sin(flat)),
                "of a view": jnp.reshape(x[:, 1:], (24, 8)) @ w}

    rtol = 2e-5 if dtype == np.float32 else 1e-12
    assert_matches_jax(products, x, w, v, rtol=rtol, atol=rtol)
    assert_matches_jax(mixed, x, w, v, rtol=rtol, atol=rtol)
    sdfg = hlo2dace.jit(products).lower(x, w, v).as_sdfg()
    labels = [n.label for n, _ in sdfg.all_nodes_recursive() if type(n).__name__ == "MapEntry"]
    assert not [label for label in labels if "reshape" in label], labels


@pytest.mark.pipeline
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32], ids=dtype_id)
def test_products_reshaped_into_results_write_there(dtype):
    """A product whose result only a reshape, or a ``.set`` of every element, brings to
    a function result (NPBench's doitgen: ``A.at[:].set(reshape(reshape(A) @ C))``)
    writes the result's array in its own shape: no map copies it there. A product that
    does not write through one pointer (an outer product, bf16 summed in f32), or whose
    result is read elsewhere too, goes through its own array, as before."""
    a, w = random_operand(dtype, (4, 5, 6), seed=1), random_operand(dtype, (6, 6), seed=2)

    def direct(a, w):
        return {"doitgen": a.at[:].set(jnp.reshape(jnp.reshape(a, (4, 5, 1, 6)) @ w,
                                                   (4, 5, 6))),
                "flat": (a @ w).reshape(-1), "rows": (a @ w.T).reshape(20, 6)}

    def through_own_array(a, w):
        return {"outer": (a[..., :1] @ w[:1]).reshape(20, 6),
                "bf16": (a.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)).reshape(-1),
                "read too": ((a @ w).reshape(-1), jnp.sum(a @ w))}

    rtol = 2e-5 if dtype == np.float32 else 1e-12
    for fun, copies in ((direct, 0), (through_own_array, 3)):
        assert_matches_jax(fun, a, w, rtol=rtol, atol=rtol, tolerances={"['bf16']": 4})
        sdfg = hlo2dace.jit(fun).lower(a, w).as_sdfg()
        maps = [n.label for n, _ in sdfg.all_nodes_recursive()
                if type(n).__name__ == "MapEntry"
                and n.label.startswith(("copy", "reshape", "scatter"))]
        assert len(maps) == copies, maps
