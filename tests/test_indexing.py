"""stablehlo.gather and stablehlo.scatter (translate/indexing.py) against jax.jit and XLA:
NumPy-style indexing, take/take_along_axis, ``.at[]`` updates and segment reductions over
many dtypes, with duplicate, negative and out-of-range indices in every mode; index types
of every width; batching dimensions (vmap); empty and 0-d edge cases; the order in which
duplicate updates are combined; and random dimension numbers written as StableHLO text
(any index_vector_dim, which JAX never emits) compared with XLA directly."""

from __future__ import annotations

import dace
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import hlo2dace
from hlo2dace.machine import current_machine
from hlo2dace.translate.emitter import PARALLEL_MAP_WORK
from hlo2dace.translate.indexing import CHUNK
from hlo2dace.xla import run_module

from util import assert_arrays_match, assert_matches_jax, dtype_id, special_values

DTYPES = (np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8, np.bool_,
          np.complex64, ml_dtypes.bfloat16, np.float16)


def sample(dtype, shape, seed: int = 0) -> np.ndarray:
    values = special_values(dtype, np.random.default_rng(seed), random=max(8, int(np.prod(shape))))
    return np.resize(np.random.default_rng(seed + 1).permutation(values), shape).astype(dtype)


#: positions into a dimension of 5: duplicates, negative (counted from the end by jnp, out
#: of bounds for lax) and out of range on both sides
INDICES = np.array([2, 0, -1, 7, 2, -9, 4, 0, 2], np.int32)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_numpy_indexing_and_updates(dtype):
    x = sample(dtype, (5, 4))
    u = sample(dtype, (9, 4), seed=2)
    r = sample(dtype, (5, 9), seed=3)
    i = INDICES
    j = np.array([[3, 0, 3], [1, -2, 9], [0, 0, 2], [-4, 3, 1], [2, 2, 2]], np.int32)
    numeric = dtype != np.bool_
    fill = sample(dtype, (), seed=4).item()

    def f(x, u, r, i, j):
        out = {
            "embedding": x[i],
            "columns": x[:, i[:4]],
            "pairs": x[i, i[::-1] % 4],
            "take_along_axis": jnp.take_along_axis(x, j, axis=1),
            "take_clip": jnp.take(x, i, axis=0, mode="clip"),
            "take_fill": jnp.take(x, i, axis=1, mode="fill"),
            "take_fill_value": jnp.take(x, i, axis=0, mode="fill", fill_value=fill),
            "set": x.at[i].set(u),
            "set_drop": x.at[i].set(u, mode="drop"),
            "set_clip": x.at[i].set(u, mode="clip"),
            "set_columns": x.at[:, i[:4]].set(r[:, :4]),
            "set_scalar": x.at[i[1], i[2]].set(u[0, 0]),
            "min": x.at[i].min(u),
            "max": x.at[i].max(u, mode="drop"),
            "segment_max": jax.ops.segment_max(u, i % 5, num_segments=6),
        }
        if numeric:
            out.update({
                "add": x.at[i].add(u),
                "add_drop": x.at[i].add(u, mode="drop"),
                "add_columns": x.at[:, i].add(r),
                "mul": x.at[i].multiply(u),
                "segment_sum": jax.ops.segment_sum(u, i, num_segments=5),
            })
        return out

    # XLA contracts the complex products of a scatter body into FMAs (its elementwise
    # multiply, and hlo2dace, round each product): a few ULP apart
    tolerances = {"['mul']": 4} if dtype == np.complex64 else None
    assert_matches_jax(f, x, u, r, i, j, tolerances=tolerances)


@pytest.mark.parametrize("width", [1, 7, 16, 17, 40])
@pytest.mark.parametrize("dtype", (np.float32, np.float64, np.int32, ml_dtypes.bfloat16),
                         ids=dtype_id)
def test_scatters_of_rows(dtype, width):
    """Rows scattered with colliding and out-of-range indices, the row loop vectorised
    where a row holds a vector (its ``#pragma GCC unroll 1``): sums, maxima and sets,
    around the vector lengths, on an odd row offset."""
    rng = np.random.default_rng(width)
    rows = sample(dtype, (300, width + 1), seed=width)[:, 1:]
    ids = rng.integers(-2, 12, 300).astype(np.int32)

    def f(rows, ids):
        base = jnp.zeros((10, width), rows.dtype)
        return {"sum": jax.ops.segment_sum(rows, ids, num_segments=10),
                "max": base.at[ids].max(rows, mode="drop"),
                "set": base.at[ids % 10].set(rows)}

    assert_matches_jax(f, rows, ids)
    if width == 40:  # rows longer than any vector
        assert "#pragma GCC unroll 1" in hlo2dace.jit(f).lower(rows, ids).compile().as_text()


#: ``.at[]`` updates with static indices: name -> (update, whether the indices make a
#: strided box that ``_strided_window`` turns into a plain copy)
STATIC_UPDATES = {
    "slice": (lambda x, u: x.at[1:3, ::2].set(u[:2, :2]), True),
    "row_max": (lambda x, u: x.at[1].max(u[0]), True),
    "column": (lambda x, u: x.at[:, 1].set(u[:5, 0]), True),
    "negative": (lambda x, u: x.at[-1, -2:].set(u[0, :2]), True),
    "reversed": (lambda x, u: x.at[::-1, 0].set(u[:5, 1]), True),
    "window_max": (lambda x, u: x.at[2:4, 1:4].max(u[:2, :3]), True),
    "constant_list": (lambda x, u: x.at[jnp.array([0, 2, 4])].min(u[:3]), True),
    "scalar": (lambda x, u: x.at[4, 3].set(u[1, 1]), True),
    "duplicates": (lambda x, u: x.at[jnp.array([1, 1, 3])].set(u[:3]), False),
    "out_of_bounds": (lambda x, u: x.at[jnp.array([1, 7])].set(u[:2], mode="drop"), False),
    "unordered": (lambda x, u: x.at[jnp.array([3, 0, 1])].max(u[:3]), False),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_static_updates_are_strided_copies(dtype):
    """Static ``.at[]`` indices are evaluated while translating: a strided box of distinct
    elements becomes one map with no index arithmetic; other static indices (duplicates,
    dropped windows, no common stride) keep the general scatter."""
    x, u = sample(dtype, (5, 4)), sample(dtype, (9, 4), seed=2)

    def f(x, u):
        return {name: update(x, u) for name, (update, _) in STATIC_UPDATES.items()}

    assert_matches_jax(f, x, u)
    for name, (update, strided) in STATIC_UPDATES.items():
        sdfg = hlo2dace.jit(update, optimize="default").lower(x, u).as_sdfg()
        code = [node.code.as_string for node, _ in sdfg.all_nodes_recursive()
                if isinstance(node, dace.nodes.Tasklet) and "scatter" in node.label]
        assert code and any("__start" in c for c in code) != strided, name


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32,
                                   np.uint32, np.int64, np.uint64], ids=dtype_id)
def test_index_element_types(dtype):
    """Start indices of every integer type reach the op unconverted (lax, not jnp): the
    gather clamps them and the scatter drops what lies outside, unsigned values above the
    signed range included."""
    info = np.iinfo(dtype)
    i = np.array([0, 3, 1, 4, 5, info.max, info.min, info.max - 1, 1], dtype).reshape(9, 1)
    x = sample(np.float32, (6, 3))
    u = sample(np.float32, (9, 2), seed=1)
    gather = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                        start_index_map=(0,))
    scatter = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                          scatter_dims_to_operand_dims=(0,))

    def f(x, u, i):
        return {
            "gather": lax.gather(x, i, gather, (1, 2), mode="promise_in_bounds"),
            "scatter_add": lax.scatter_add(x, i, u, scatter, mode="promise_in_bounds"),
            "scatter": lax.scatter(x, i, u, scatter, mode="promise_in_bounds"),
        }

    assert_matches_jax(f, x, u, i)


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint8, np.bool_, np.complex64,
                                   ml_dtypes.bfloat16], ids=dtype_id)
def test_gathers_read_by_elementwise_ops_are_gathered_in_their_maps(dtype):
    """A gather of one element per result element that only elementwise ops read (also
    through views) is gathered by the maps of those ops, as XLA fuses it: no gather map,
    no gathered array. Indices out of range (clamped), negative, unsigned, computed in the
    same map, read through views, gathers of gathers and batched gathers agree with XLA,
    and so do the ways that write it after all (a reduction reading it, an update in place
    of its operand after it)."""
    x = sample(dtype, (5, 4))
    i = INDICES
    j = np.array([[3, 0, 3], [1, -2, 9], [0, 0, 2], [-4, 3, 1], [2, 2, 2]], np.int32)
    x3 = sample(dtype, (3, 5, 2), seed=5)
    k = np.array([[4, 0, 4, 1], [-1, 2, 9, 2], [1, 1, 1, 1]], np.int32)
    ones = np.ones((), dtype)

    def f(x, i, j, x3, k, one):
        plus = (lambda a: a | one) if dtype == np.bool_ else (lambda a: a * one + one)
        y = plus(x)
        out = {
            "rows": plus(x[i]),
            "take_along_axis": plus(jnp.take_along_axis(x, j, axis=1)),
            "clip": plus(jnp.take(x, i, axis=0, mode="clip")),
            "unsigned": plus(x[i.astype(np.uint8) % 5]),
            "computed": plus(x[(i * 3 + 1) % 5]),
            "transposed_operand": plus(x.T[i % 4]),
            "view_of_gathered": plus(x[i].T[::-1]),
            "nested": plus(x[i[j % 9]]),
            "batched": jax.vmap(lambda r, c: plus(r[c]))(x3, k),
            "in_place_after": (plus(y[i]), y.at[0].set(x[1])),
        }
        if dtype != np.bool_:
            out["reduced"] = jnp.sum(x[i] * one, axis=1)
        return out

    assert_matches_jax(f, x, i, j, x3, k, ones)
    sdfg = hlo2dace.jit(lambda x, i: x[i] * 2, optimize="default").lower(
        np.ones((5, 4), np.float32), i).as_sdfg()
    maps = [n.label for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.MapEntry)]
    assert maps and not any(label.startswith("gather") for label in maps), maps


def test_searchsorted_loop_gathers_in_its_maps():
    """``jnp.histogram``'s binary search (NPBench's azimint_hist): each step computes the
    middle index and reads the bin edge there in one map; no gather map in the loop."""
    edges = np.sort(np.random.default_rng(0).random(33))
    q = np.concatenate([np.random.default_rng(1).random(200), [0.0, 1.0, np.nan, edges[3]]])

    def f(edges, q):
        return jnp.searchsorted(edges, q), jnp.histogram(q, 16)[0]

    assert_matches_jax(f, edges, q)
    sdfg = hlo2dace.jit(f, optimize="default").lower(edges, q).as_sdfg()
    maps = [n.label for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.MapEntry)]
    assert not any(label.startswith("gather") for label in maps), maps


def test_batching_dimensions_from_vmap():
    x = sample(np.float64, (3, 5, 2))
    i = np.array([[4, 0, 4, 1], [-1, 2, 9, 2], [1, 1, 1, 1]], np.int32)
    u = sample(np.float64, (3, 4, 2), seed=1)

    def f(x, i, u):
        return {
            "gather": jax.vmap(lambda r, j: r[j])(x, i),
            "gather_inner": jax.vmap(lambda r, j: r[j], in_axes=(2, None))(x, i[0]),
            "scatter": jax.vmap(lambda r, j, v: r.at[j].add(v))(x, i, u),
            "scatter_set": jax.vmap(lambda r, j, v: r.at[j].set(v, mode="drop"))(x, i, u),
            "nested": jax.vmap(jax.vmap(lambda r, j: r[j], in_axes=(1, None)),
                               in_axes=(0, 0))(x, i[:, :2]),
        }

    text = jax.jit(f).lower(x, i, u).as_text()
    assert "operand_batching_dims" in text and "input_batching_dims" in text
    assert_matches_jax(f, x, i, u)


def test_empty_and_zero_dimensional():
    x = sample(np.float32, (5, 3))
    s = np.float32(2.5)
    e = np.zeros((0, 3), np.float32)
    none = np.zeros((0,), np.int32)
    one = np.array([3], np.int32)
    i = INDICES
    to_scalar = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(),
                                           start_index_map=())

    def f(x, s, e, none, one, i):
        return {
            "no_indices": x[none],
            "no_updates": x.at[none].add(x[none]),
            "empty_operand": e[none],
            "empty_window": x[:, :0][i],
            "scalar_operand": lax.gather(s, jnp.zeros((4, 0), jnp.int32), to_scalar, ()),
            "scalar_index": x[i[0]],
            "one_index": (x[one], x.at[one].add(x[:1]), x[:1].at[one[0] - 3].mul(s)),
            "one_element": x[:1, :1].at[i].add(jnp.ones((9, 1), jnp.float32), mode="drop"),
            "splat_operand": jnp.full((5, 3), 7.0, jnp.float32)[i],
            "view_operands": x.T[:, i].at[i[:2] % 3].set(jnp.broadcast_to(x[0, :2, None], (2, 9))),
        }

    assert_matches_jax(f, x, s, e, none, one, i)


def test_duplicates_combine_in_update_order():
    """Float additions round differently in another order; XLA adds in update order, and
    the last of several sets wins."""
    x = np.zeros(3, np.float32)
    u = np.array([1e8, 1.0, -1e8, 1.0, 3.0, 1e-8, 7.0], np.float32)
    i = np.array([0, 0, 0, 0, 2, 2, 2], np.int32)
    m = np.zeros((3, 64), np.float32)
    v = np.repeat(u[:, None], 64, 1) * np.linspace(1, 2, 64, dtype=np.float32)

    def f(x, u, i, m, v):
        return {
            "add": x.at[i].add(u),
            "set": x.at[i].set(u),
            "rows": m.at[i].add(v),  # windows in parallel, updates in order
            "rows_set": m.at[i].set(v),
            "apply": x.at[i].apply(jnp.sin),
        }

    assert_matches_jax(f, x, u, i, m, v)


def test_updates_without_start_indices_all_combine():
    """Updates whose start index vectors are empty all land on one window. The spec
    combines them all; XLA's CPU scatter keeps only the last (the 1-d case) or fails to
    compile (the 0-d operand), so the expectation is NumPy's."""
    x = np.array([-13.0, 5.0], np.float32)
    u = np.array([1.0, 4.0, 2.0], np.float32)
    none = np.zeros((3, 0), np.int32)
    into_vector = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                              scatter_dims_to_operand_dims=())
    into_scalar = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(),
                                              scatter_dims_to_operand_dims=())

    def f(x, u, none):
        return (lax.scatter_add(x, none, u, into_vector),
                lax.scatter_max(x[0], none, u, into_scalar))

    vector, scalar = hlo2dace.jit(f)(x, u, none)
    assert_arrays_match(np.array([-6.0, 5.0], np.float32), vector)
    assert_arrays_match(np.float32(4.0), scalar)


def test_partially_out_of_bounds_window_is_dropped_whole():
    x = sample(np.float32, (4, 6))
    u = sample(np.float32, (3, 2, 3), seed=1)
    i = np.array([[0, 3], [3, 2], [2, 4]], np.int32)  # the windows at [3, 2] and [2, 4] overhang
    numbers = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(),
                                          scatter_dims_to_operand_dims=(0, 1))

    def f(x, u, i):
        return lax.scatter_add(x, i, u, numbers, mode="promise_in_bounds")

    assert_matches_jax(f, x, u, i)


@pytest.mark.parametrize("large", [False, True], ids=["cached", "large"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, np.float32], ids=dtype_id)
def test_parallel_updates(dtype, large):
    """Integer and boolean add/max/min/or (atomic updates into large results), unique
    indices (plain parallel writes), windows updated in parallel chunks, and many
    duplicates, against the same sequential XLA result (enough updates for threads)."""
    n = current_machine().atomic_min_bytes // np.dtype(dtype).itemsize + 3 if large else 37
    rng = np.random.default_rng(0)
    i = np.concatenate([rng.integers(-3, 40, 5000), rng.integers(0, n + 3, PARALLEL_MAP_WORK)])
    i = i.astype(np.int32)
    u = sample(dtype, (i.size,), seed=2)
    x = sample(dtype, (n,), seed=3)
    perm = rng.permutation(n).astype(np.int32)[:5000]
    rows = sample(dtype, (3, 2 * CHUNK + 1), seed=4)
    per_batch = PARALLEL_MAP_WORK // 8 + 100  # batches updated in parallel

    def f(x, u, i, perm, rows):
        out = {
            "max": x.at[i].max(u, mode="drop"),
            "min": x.at[i].min(u, mode="drop"),
            "unique": x.at[perm].set(u[:perm.size], unique_indices=True),
            "rows": jnp.zeros((50, rows.shape[1]), dtype).at[i[:1000]].max(
                jnp.resize(rows, (1000, rows.shape[1]))),
            "rows_set": jnp.zeros((50, rows.shape[1]), dtype).at[i[:1000]].set(
                jnp.resize(rows, (1000, rows.shape[1]))),
            "batched": jax.vmap(lambda r, j, v: r.at[j].max(v, mode="drop"))(
                jnp.broadcast_to(x[:37], (8, 37)), i[:8 * per_batch].reshape(8, per_batch),
                u[:8 * per_batch].reshape(8, per_batch)),
        }
        if dtype == np.bool_:
            out["or"] = jax.ops.segment_max(u, i, num_segments=n)
        else:
            out["add"] = x.at[i].add(u, mode="drop")
            out["histogram"] = jnp.zeros(n, jnp.int32).at[i].add(1)
        return out

    assert_matches_jax(f, x, u, i, perm, rows)


# -------------------------------------------- random dimension numbers, as StableHLO text

INDEX_TYPES = {"i8": np.int8, "ui8": np.uint8, "i16": np.int16, "i32": np.int32,
               "i64": np.int64, "ui32": np.uint32, "ui64": np.uint64}


def _tensor(shape, element: str) -> str:
    return f"tensor<{''.join(f'{n}x' for n in shape)}{element}>"


def _field(name: str, values) -> str:
    return f"{name} = [{', '.join(map(str, values))}]" if len(values) else ""


def _indices(rng, n_start: int, operand_shape, batching):
    """Random start indices: (shape, index_vector_dim, the indices' batching dimensions, a
    NumPy array of a random integer type with values in and out of range). Without start
    indices, the batch has at most one element per batching position: XLA combines only
    the last of several updates that share an empty index vector (see
    ``test_updates_without_start_indices_all_combine``)."""
    batch = [int(n) for n in rng.integers(0, 4 if n_start else 2, rng.integers(0, 3))]
    positions = []
    for d in batching:
        at = int(rng.integers(0, len(batch) + 1))
        positions = [p + (p >= at) for p in positions] + [at]
        batch.insert(at, operand_shape[d])
    ivd = int(rng.integers(0, len(batch) + 1))
    shape = list(batch)
    if n_start != 1 or ivd < len(batch) or rng.random() < 0.5:
        shape.insert(ivd, n_start)
        positions = [p + (p >= ivd) for p in positions]
    element = str(rng.choice(list(INDEX_TYPES)))
    dtype = np.dtype(INDEX_TYPES[element])
    hi = max(operand_shape, default=1) + 2
    values = rng.integers(0 if dtype.kind == "u" else -2, hi, shape)
    values = np.where(rng.random(shape) < 0.05, np.iinfo(dtype).max, values).astype(dtype)
    return shape, ivd, positions, element, values, batch


def _random_gather(rng, k: int, a: int):
    """A random gather ``%r{k}`` of the arguments ``%arg{a}, %arg{a+1}``: their types and
    values (None: a sample), the op's text and its result type."""
    rank = int(rng.integers(1, 4))
    shape = [int(n) for n in rng.integers(1, 5, rank)]
    dims = list(rng.permutation(rank))
    batching = sorted(d for d in dims if rng.random() < 0.25)
    rest = [d for d in dims if d not in batching]
    start_map = [int(d) for d in rest if rng.random() < 0.6]
    collapsed = sorted(int(d) for d in rest if rng.random() < 0.4)
    sizes = [1 if d in batching or d in collapsed else int(rng.integers(0, shape[d] + 1))
             for d in range(rank)]
    ishape, ivd, ibatching, element, values, batch = _indices(rng, len(start_map), shape,
                                                              batching)
    window = [sizes[d] for d in range(rank) if d not in batching and d not in collapsed]
    result_rank = len(batch) + len(window)
    offset_dims = sorted(int(d) for d in rng.choice(result_rank, len(window), replace=False))
    windows, batches = iter(window), iter(batch)
    result = [next(windows) if d in offset_dims else next(batches) for d in range(result_rank)]
    fields = ", ".join(f for f in (
        _field("offset_dims", offset_dims), _field("collapsed_slice_dims", collapsed),
        _field("operand_batching_dims", batching),
        _field("start_indices_batching_dims", ibatching),
        _field("start_index_map", start_map), f"index_vector_dim = {ivd}") if f)
    op = (f'%r{k} = "stablehlo.gather"(%arg{a}, %arg{a + 1}) {{dimension_numbers = '
          f"#stablehlo.gather<{fields}>, slice_sizes = array<i64{': ' if rank else ''}"
          f"{', '.join(map(str, sizes))}>, indices_are_sorted = false}} : "
          f"({_tensor(shape, 'f32')}, {_tensor(ishape, element)}) -> "
          f"{_tensor(result, 'f32')}")
    return [(shape, "f32", None), (ishape, element, values)], op, _tensor(result, "f32")


def _random_scatter(rng, k: int, a: int):
    """A random scatter ``%r{k}`` of the arguments ``%arg{a}..%arg{a+2}``, as
    ``_random_gather``."""
    rank = int(rng.integers(1, 4))
    shape = [int(n) for n in rng.integers(1, 5, rank)]
    dims = list(rng.permutation(rank))
    batching = sorted(d for d in dims if rng.random() < 0.25)
    rest = [d for d in dims if d not in batching]
    to_operand = [int(d) for d in rest if rng.random() < 0.6]
    inserted = sorted(int(d) for d in rest if rng.random() < 0.4)
    window = [int(rng.integers(0, shape[d] + 1)) for d in range(rank)
              if d not in batching and d not in inserted]
    ishape, ivd, ibatching, element, values, batch = _indices(rng, len(to_operand), shape,
                                                              batching)
    update_rank = len(batch) + len(window)
    window_dims = sorted(int(d) for d in rng.choice(update_rank, len(window), replace=False))
    windows, batches = iter(window), iter(batch)
    updates = [next(windows) if d in window_dims else next(batches)
               for d in range(update_rank)]
    body = str(rng.choice(["add", "maximum", "set"]))
    region = ("stablehlo.return %b : tensor<f32>" if body == "set" else
              f"%s = stablehlo.{body} %a, %b : tensor<f32>\n stablehlo.return %s : tensor<f32>")
    fields = ", ".join(f for f in (
        _field("update_window_dims", window_dims), _field("inserted_window_dims", inserted),
        _field("input_batching_dims", batching),
        _field("scatter_indices_batching_dims", ibatching),
        _field("scatter_dims_to_operand_dims", to_operand), f"index_vector_dim = {ivd}") if f)
    op = (f'%r{k} = "stablehlo.scatter"(%arg{a}, %arg{a + 1}, %arg{a + 2}) ({{\n'
          f"^bb0(%a: tensor<f32>, %b: tensor<f32>):\n{region}\n}}) {{"
          f"scatter_dimension_numbers = #stablehlo.scatter<{fields}>, "
          "indices_are_sorted = false, unique_indices = false} : "
          f"({_tensor(shape, 'f32')}, {_tensor(ishape, element)}, {_tensor(updates, 'f32')})"
          f" -> {_tensor(shape, 'f32')}")
    arguments = [(shape, "f32", None), (ishape, element, values), (updates, "f32", None)]
    return arguments, op, _tensor(shape, "f32")


@pytest.mark.parametrize("seed", range(4))
def test_random_dimension_numbers_match_xla(seed):
    """Eight random gathers and eight random scatters (batching dimensions, collapsed and
    inserted dimensions, index vectors along any dimension or implicit, every index type,
    empty windows) in one module, run by hlo2dace and by XLA."""
    rng = np.random.default_rng(seed)
    arguments, ops, results = [], [], []
    for k in range(16):
        args, op, result = (_random_scatter if k % 2 else _random_gather)(rng, k,
                                                                          len(arguments))
        arguments += args
        ops.append(op)
        results.append(result)
    signature = ", ".join(f"%arg{n}: {_tensor(s, e)}" for n, (s, e, _) in enumerate(arguments))
    text = (f"func.func @main({signature}) -> ({', '.join(results)}) {{\n" + "\n".join(ops)
            + f"\nreturn {', '.join(f'%r{k}' for k in range(16))} : {', '.join(results)}\n}}")
    values = [sample(np.float32, s, seed=n) if v is None else v
              for n, (s, _, v) in enumerate(arguments)]
    expected = run_module(hlo2dace.lower_text(text).as_text(), values)
    actual = hlo2dace.compile_text(text)(*values)
    for n, (e, a) in enumerate(zip(expected, actual)):
        assert_arrays_match(e, a, where=ops[n].splitlines()[0])


def _copy_maps(fun, *args) -> list:
    """The copy maps of ``fun``'s SDFG, each with the rank of the arrays it writes."""
    sdfg = hlo2dace.jit(fun, optimize="default").lower(*args).as_sdfg()
    return [(node.map, {len(state.sdfg.arrays[e.data.data].shape)
                        for e in state.out_edges(state.exit_node(node))})
            for node, state in sdfg.all_nodes_recursive()
            if isinstance(node, dace.nodes.MapEntry) and node.label.startswith("copy")]


def _copies(fun, *args) -> int:
    return len(_copy_maps(fun, *args))


def _copied_elements(fun, *args) -> int:
    """How many elements the copy maps of ``fun``'s SDFG into arrays of the rank of its
    first argument write (not those of its index vectors)."""
    return sum(int(np.prod([int(stop) - int(start) + 1 for start, stop, _ in the_map.range]))
               for the_map, ranks in _copy_maps(fun, *args) if ranks == {np.ndim(args[0])})


@pytest.mark.parametrize("dtype", [np.float64, np.int32, ml_dtypes.bfloat16], ids=dtype_id)
def test_copies_leave_out_what_later_sets_replace(dtype):
    """An operand copied into a scatter's result leaves out the box that the scatter and
    the ``.set``s after it replace before anything reads them (pyhpc's isoneutral fills
    ``Ai[1:-2, 2:-2, k:, i, j]`` of an argument this way); a box read in between, added
    to, or set at indices known only at run time is copied. Where the pieces left would
    share most cache lines with what is left out, a set of one element of the last
    dimensions writes the operand's elements beside it itself; else all is copied."""
    x, u = sample(dtype, (16, 16, 32, 2, 2)), sample(dtype, (16, 16, 32), seed=1)
    i = np.int32(2)

    def corners(x, u, i):
        for k in range(2):
            for j in range(2):
                x = x.at[1:-2, 2:-2, 1 - k:, j, k].set(u[1:-2, 2:-2, 1 - k:] * (j + 1))
        return x

    def from_zeros(x, u, i):
        return jnp.zeros_like(x).at[2:5].set(x[:3] * 2).at[:, 1:].set(x[:, :-1] + 1)

    def read_between(x, u, i):
        y = x.at[1:3].set(x[5:7] * 2)
        return y.at[2:5].set(y[2:5] * 2)

    def added_after(x, u, i):
        return x.at[1:3].set(x[5:7] * 2).at[2:5].add(x[6:9])

    def set_at_run_time(x, u, i):
        return x.at[1:3].set(x[5:7] * 2).at[i].set(x[8])

    def one_of_a_block(x, u, i):  # tke's ``tke.at[2:-2, 2:-2, :, 1].set``
        return x.at[2:-2, 2:-2, :, :, 1].set(x[:-4, :-4, :, :, 0] * 3)

    def one_of_a_block_then_more(x, u, i):
        y = x.at[2:-2, 2:-2, :, 1, 1].set(u[:-4, :-4] * 3)
        return y.at[:, 1].set(-x[:, 2]).at[:, :, :, 0, 0].set(u)

    def many_of_a_block(x, u, i):
        return x.at[:, :, :, 0, :].set(x[:, :, :, 1, :] * 2)

    for fun in (corners, from_zeros, read_between, added_after, set_at_run_time,
                one_of_a_block, one_of_a_block_then_more, many_of_a_block):
        assert_matches_jax(fun, x, u, i)
    whole, row = x.size, x[0].size
    assert _copied_elements(corners, x, u, i) == whole - 13 * 12 * (2 * 31 + 2 * 32)
    assert _copied_elements(from_zeros, x, u, i) == whole - (3 * row + 16 * 15 * 128
                                                             - 3 * 15 * 128)
    for fun in (read_between, added_after, set_at_run_time):
        assert _copied_elements(fun, x, u, i) == whole - 2 * row, fun.__name__
    # a set of one element of the last 2 (or 4) that would share every cache line with
    # the rest writes those whole, the copy the slabs around; of two, the whole is copied
    assert _copied_elements(one_of_a_block, x, u, i) == whole - 12 * 12 * 32 * 4
    assert _copied_elements(one_of_a_block_then_more, x, u, i) == whole - (
        12 * 12 * 32 * 4 + 16 * 32 * 4 + 16 * 16 * 32 - 12 * 12 * 32 - 16 * 32)
    assert _copied_elements(many_of_a_block, x, u, i) == whole
    small = x[:6, :6, :6]  # 7 KB or less: copied whole by one map
    assert_matches_jax(one_of_a_block, small, u, i)
    assert _copied_elements(one_of_a_block, small, u, i) == small.size


def test_updates_at_last_use_are_in_place():
    """A scatter or dynamic_update_slice whose operand is dead afterwards updates the
    operand's array instead of a copy (as XLA reuses the buffer), also where the operand
    was read before, in the function result it is built in; an operand still read later,
    or read by the update itself, is copied."""
    x = np.linspace(-3.0, 4.0, 96).astype(np.float32).reshape(12, 8)
    i = np.int32(3)

    def chain(x, i):
        y = x * 2.0
        for k in range(5):
            y = y.at[k].add(float(k))
            y = lax.dynamic_update_slice(y, y[k + 6:k + 7] * 0.5, (i + k, i * 0))
        return y

    def still_read(x, i):
        y = x * 2.0
        z = y.at[0].set(5.0)
        return z, y + 1.0

    def read_by_update(x, i):
        y = x * 2.0
        return y.at[1:].set(y[:-1]), lax.dynamic_update_slice(y, y[2:4], (i, i * 0))

    def read_before_update(x, i):  # the first update's result is read, then updated
        y = jnp.sin(x).at[2].set(1.0)
        z = lax.dynamic_update_slice(x * 2.0, x[:1] + 1.0, (i, i * 0))
        return y.at[0].set(jnp.sum(y, axis=0)), z.at[1:3].add(z[3:5] * 3.0)

    def read_after_update(x, i):  # views of the operand still to be read after it
        y = (x * 3.0).at[2].set(1.0)
        return y.at[3].set(7.0), y[3:5] * 2.0, y.T[1:3] + 1.0

    for fun in (chain, still_read, read_by_update, read_after_update):
        assert_matches_jax(fun, x, i)
    assert_matches_jax(read_before_update, x, i, rtol=1e-6)  # a sum in another order
    assert _copies(chain, x, i) == 0
    assert _copies(still_read, x, i) == 1
    assert _copies(read_before_update, x, i) == 0


def test_set_of_every_element_copies_nothing():
    """``x.at[:, :].set(y)`` (NPBench's hdiff on its argument) writes every element of the
    result: the operand is not copied first. A set of fewer elements, or an ``add`` of
    every element, still is; a vmapped batch of whole-row sets too is one strided box."""
    x = np.linspace(-3.0, 4.0, 24).reshape(4, 6)
    cases = {
        "whole": (lambda x: x.at[:, :].set(jnp.sin(x[::-1]) * 2.0), 0),
        "no components": (lambda x: x.at[:].set(x.T.reshape(4, 6) - x), 0),
        "rows": (lambda x: x.at[0:4].set(jnp.cos(x)), 0),
        "all but one row": (lambda x: x.at[1:].set(x[:-1] * 2.0), 1),
        "add": (lambda x: x.at[:, :].add(1.5), 1),
        "strided": (lambda x: x.at[:, ::2].set(0.5), 1),
    }
    for name, (fun, copies) in cases.items():
        # sin and cos within libmvec's bounds: a loop's vector width picks the variant
        assert_matches_jax(fun, x, rtol=5 * 2.0 ** -52, atol=0)
        assert _copies(fun, x) == copies, name


def test_set_of_every_element_is_its_update():
    """A ``.set`` of every element at its own position whose result is no function
    result is the update itself, as XLA's simplifier makes it: no map writes it (a
    product's result, an argument, a pending value, read by a later op); a ``.set`` that
    moves elements (a transpose), or an ``add``, still runs."""
    x = np.linspace(-3.0, 4.0, 24).reshape(4, 6)
    y = np.linspace(1.0, 2.0, 24).reshape(4, 6)
    w = np.linspace(0.5, 1.5, 36).reshape(6, 6)

    def whole(x, y, w):
        return {"product": jnp.sin(x.at[:].set(x @ w)),
                "argument": x.at[:, :].set(y) * 2.0,
                "pending": jnp.cos(x.at[:].set(jnp.exp(y))) + x}

    def partly(x, y, w):
        return {"add": x.at[:].add(y) * 2.0, "rows": x.at[1:].set(y[1:]) * 2.0}

    for fun, scatters in ((whole, 0), (partly, 2)):
        assert_matches_jax(fun, x, y, w, rtol=1e-13, atol=1e-13)
        sdfg = hlo2dace.jit(fun, optimize="default").lower(x, y, w).as_sdfg()
        maps = [n.label for n, _ in sdfg.all_nodes_recursive()
                if isinstance(n, dace.nodes.MapEntry) and n.label.startswith("scatter")]
        assert len(maps) == scatters, maps
