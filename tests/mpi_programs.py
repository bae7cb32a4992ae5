"""Sharded JAX programs run by every rank of an MPI job (``tests/test_mpi.py`` launches
``mpirun -n N python tests/mpi_programs.py [names...]``): each rank calls the
``hlo2dace.jit`` function, whose DaCe code computes the rank's shard and communicates over
MPI, and compares the gathered global results with ``jax.jit`` of the same function on N
simulated CPU devices in its own process (importing hlo2dace gave JAX N devices).

Rank 0 prints one JSON line per program: its name and, per rank, the largest error found
(``None`` when every output is within its bound). Bounds, per program: integers exact;
floats in ULP, with the reason beside each bound."""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import hlo2dace  # before the first mesh: in an MPI job it gives JAX one device per rank
from hlo2dace import mpi
from hlo2dace.compare import ulp_distance

N = mpi.size()
AUTO = AxisType.Auto
LINE = jax.make_mesh((N,), ("x",), axis_types=(AUTO,))
GRID = jax.make_mesh((2, N // 2), ("r", "c"), axis_types=(AUTO, AUTO))
RNG = np.random.default_rng(19)
PROGRAMS = {}


def program(ulp: int = 0, terms: int = 0):
    """Register a program: ``ulp`` bounds its float outputs (0: bit for bit); ``terms``,
    for products, bounds the normwise relative error by ``terms`` float32 epsilons
    instead, the error bound of a sum of ``terms`` products in any order: XLA's CPU
    products (YNNPACK kernels in partitioned modules) sum in an order of their own."""
    def decorate(make):
        PROGRAMS[make.__name__] = (make, ulp, terms)
        return make
    return decorate


def shard_map(f, mesh, in_specs, out_specs):
    return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                         check_vma=False)


# 8 ULP: a mean of gradients on the same data path as XLA (the all-reduce folds the ranks
# in order, as XLA's CPU collectives do), but tanh is libmvec's here and XLA's own
# approximation there (3 ULP apart, docs/vector-math.md), and the backward pass carries
# that into the updated weights. Measured: 4 ULP, 5 once products and sums are contracted
# into fused multiply-adds as XLA contracts them.
@program(ulp=8)
def mlp_training_step():
    """Data-parallel SGD: the batch sharded, parameters replicated, gradients `pmean`."""
    def loss(params, x, y):
        w1, b1, w2 = params
        h = jnp.tanh(x @ w1 + b1)
        return jnp.mean((h @ w2 - y) ** 2)

    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        grads = jax.lax.pmean(grads, "x")
        value = jax.lax.pmean(value, "x")
        return tuple(p - 0.1 * g for p, g in zip(params, grads)), value

    f = shard_map(step, LINE, ((P(), P(), P()), P("x"), P("x")), ((P(), P(), P()), P()))
    params = (RNG.standard_normal((6, 8), np.float32), RNG.standard_normal(8, np.float32),
              RNG.standard_normal((8, 2), np.float32))
    return f, (params, RNG.standard_normal((4 * N, 6), np.float32),
               RNG.standard_normal((4 * N, 2), np.float32))


def _halo_1d(u):
    """Each shard's neighbours' edge cells, through ppermute (zeros at the domain edge)."""
    right = jax.lax.ppermute(u[-1:], "x", [(i, i + 1) for i in range(N - 1)])
    left = jax.lax.ppermute(u[:1], "x", [(i + 1, i) for i in range(N - 1)])
    return jnp.concatenate([right, u, left])


def _heat_1d(u):
    """20 steps of the heat equation on this shard, halos exchanged at each."""
    def body(_, u):
        padded = _halo_1d(u)
        return u + 0.25 * (padded[:-2] - 2 * u + padded[2:])
    return jax.lax.fori_loop(0, 20, body, u)


# 0 ULP: the same three-point update in the same order on every cell.
@program(ulp=0)
def stencil_1d():
    """Heat equation in 1-D, the domain cut in N pieces, 20 steps in a fori_loop."""
    return shard_map(_heat_1d, LINE, P("x"), P("x")), (RNG.standard_normal(8 * N, np.float32),)


# 0 ULP: stencil_1d's program; only where its arrays live differs.
@program(ulp=0)
def process_local_stencil():
    """stencil_1d as a job's ranks hold their data: each rank passes only its shard
    (``hlo2dace.make_array_from_process_local_data``) and gets only its shard back (a
    ``ProcessLocalArray``, which ``hlo2dace.gather`` assembles to compare)."""
    f = shard_map(_heat_1d, LINE, P("x"), P("x"))
    rows = NamedSharding(LINE, P("x"))
    ours = hlo2dace.jit(f)

    def local_call(u):
        width = u.shape[0] // N
        mine = u[mpi.rank() * width:(mpi.rank() + 1) * width]
        result = ours(hlo2dace.make_array_from_process_local_data(rows, mine, u.shape))
        if not isinstance(result, hlo2dace.ProcessLocalArray) or result.local.shape != \
                mine.shape:
            raise AssertionError(f"a process-local call returned {result!r}")
        return hlo2dace.gather(result)

    return local_call, jax.jit(f), (RNG.standard_normal(8 * N, np.float32),)


# 0 ULP: the five-point update in the same order on every cell.
@program(ulp=0)
def stencil_2d():
    """Jacobi in 2-D on a 2 x N/2 process grid: halos along both axes, 10 steps."""
    rows, cols = 2, N // 2

    def exchange(u, axis, name, count):
        first = jax.lax.slice_in_dim(u, 0, 1, axis=axis)
        last = jax.lax.slice_in_dim(u, u.shape[axis] - 1, u.shape[axis], axis=axis)
        before = jax.lax.ppermute(last, name, [(i, i + 1) for i in range(count - 1)])
        after = jax.lax.ppermute(first, name, [(i + 1, i) for i in range(count - 1)])
        return jnp.concatenate([before, u, after], axis=axis)

    def run(u):
        def body(_, u):
            p = exchange(exchange(u, 0, "r", rows), 1, "c", cols)
            return 0.2 * (u + p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:])
        return jax.lax.fori_loop(0, 10, body, u)

    f = shard_map(run, GRID, P("r", "c"), P("r", "c"))
    return f, (RNG.standard_normal((6 * rows, 5 * cols), np.float32),)


# 5 terms: each element is a sum of 5 products.
@program(terms=5)
def matmul_all_gather():
    """Rows of A and columns of B sharded; B's shards gathered before the product."""
    def mm(a, b):
        return a @ jax.lax.all_gather(b, "x", axis=1, tiled=True)

    f = shard_map(mm, LINE, (P("x"), P(None, "x")), P("x"))
    return f, (RNG.standard_normal((2 * N, 5), np.float32),
               RNG.standard_normal((5, 3 * N), np.float32))


# 3 N terms: each element sums 3 products per rank (in XLA's kernel's order or ours) and
# the ranks' partial sums (folded in rank order, as XLA does).
@program(terms=3 * 4)
def matmul_psum_scatter():
    """The contraction dimension sharded; partial products summed and scattered."""
    def mm(a, b):
        return jax.lax.psum_scatter(a @ b, "x", scatter_dimension=0, tiled=True)

    f = shard_map(mm, LINE, (P(None, "x"), P("x")), P("x"))
    return f, (RNG.standard_normal((2 * N, 3 * N), np.float32),
               RNG.standard_normal((3 * N, 4), np.float32))


@program(ulp=0)
def all_to_all_reshard():
    """Rows sharded -> columns sharded with all_to_all (a data movement: exact), integers
    and floats."""
    def reshard(x, y):
        return (jax.lax.all_to_all(x, "x", 1, 0, tiled=True),
                jax.lax.all_to_all(y, "x", 0, 1, tiled=True))

    f = shard_map(reshard, LINE, (P("x"), P(None, "x")), (P(None, "x"), P("x")))
    return f, (RNG.standard_normal((2 * N, 3 * N), np.float32),
               RNG.integers(-99, 99, (N, 2 * N)).astype(np.int32))


# 4 N + 7 terms: the 3-term products (XLA's YNNPACK kernel sums in its own order), tanh
# and exp within 4 ULP (libmvec here, XLA's approximations there: docs/vector-math.md),
# and the sum of 4 N rows of the partial sums, each term one rounding at most.
@program(terms=4 * 4 + 7)
def named_sharding_jit():
    """jax.jit over NamedSharding arguments, no explicit collective: XLA's partitioner
    inserts them (a sum over the sharded axis)."""
    def f(x, w):
        return jnp.tanh(x @ w).sum(axis=0), jnp.exp(x) * 2

    rows = NamedSharding(LINE, P("x"))
    return (hlo2dace.jit(f, in_shardings=(rows, NamedSharding(LINE, P()))),
            jax.jit(f, in_shardings=(rows, NamedSharding(LINE, P()))),
            (RNG.standard_normal((4 * N, 3), np.float32),
             RNG.standard_normal((3, 5), np.float32)))


@program(ulp=0)
def groups_of_one_axis():
    """A 2 x N/2 mesh, collectives over one axis only (groups that are not the whole
    mesh): sums of integers (exact, with a wrapping overflow), a max of floats (folded in
    order: exact), a gather along the other axis, the axis index."""
    def f(i, x):
        return (jax.lax.psum(i, "r"), jax.lax.pmax(x, "c"),
                jax.lax.all_gather(x, "c", tiled=True), jax.lax.axis_index("r") + 0 * i)

    i = RNG.integers(-5, 5, (4, 2 * N)).astype(np.int32)
    i[0, 0] = np.iinfo(np.int32).max  # psum over "r" wraps
    x = RNG.standard_normal((4, 2 * N)).astype(np.float32)
    return shard_map(f, GRID, (P("r", "c"), P("r", "c")),
                     (P("r", "c"), P("r", "c"), P("r", None), P("r", "c"))), (i, x)


@program(ulp=0)
def max_with_nan():
    """pmax over one axis of a group holding a NaN gives NaN, as the spec's max does;
    XLA's CPU all-reduce drops the NaN (it gives the other number), so the reference is
    the spec's: XLA's result where the group holds no NaN, NaN where it does."""
    f = shard_map(lambda x: jax.lax.pmax(x, "c"), GRID, P("r", "c"), P("r", "c"))
    x = RNG.standard_normal((4, 2 * N)).astype(np.float32)
    x[0, 0] = x[1, 2 * N - 1] = np.nan
    columns = N // 2

    def spec(x):
        blocks = np.asarray(jax.jit(f)(x)).reshape(4, columns, -1)
        holds_nan = np.isnan(x.reshape(4, columns, -1)).any(axis=1, keepdims=True)
        return np.where(holds_nan, np.nan, blocks).reshape(4, -1).astype(np.float32)

    return hlo2dace.jit(f), spec, (x,)


def errors(actual, expected, ulp: int, terms: int) -> str | None:
    """Why ``actual`` differs from ``expected`` beyond its bound (integers: exactly)."""
    actual, expected = jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected)
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, XLA has {len(expected)}"
    for k, (a, e) in enumerate(zip(actual, expected)):
        a, e = np.asarray(a), np.asarray(e)
        if a.shape != e.shape or a.dtype != e.dtype:
            return f"output {k}: {a.dtype}{a.shape}, XLA {e.dtype}{e.shape}"
        if a.dtype.kind == "f" and terms:
            scale = float(np.max(np.abs(e))) or 1.0
            error = float(np.max(np.abs(a - e))) / scale
            if error > terms * np.finfo(a.dtype).eps:
                return f"output {k}: normwise relative error {error:.3g} (bound {terms} eps)"
        elif a.dtype.kind == "f":
            distance = ulp_distance(a, e)
            if distance.size and distance.max() > ulp:
                return f"output {k}: {distance.max()} ULP from XLA (bound {ulp})"
        elif not np.array_equal(a, e):
            return f"output {k}: differs from XLA at {np.argwhere(a != e)[:3].tolist()}"
    return None


def run(name: str) -> dict:
    make, ulp, terms = PROGRAMS[name]
    made = make()
    ours, reference, args = made if len(made) == 3 else \
        (hlo2dace.jit(made[0]), jax.jit(made[0]), made[1])
    problem = errors(ours(*args), reference(*args), ulp, terms)
    return {"program": name, "ranks": mpi.gather_everywhere(problem)}


def main(names):
    for name in names or PROGRAMS:
        report = run(name)
        if mpi.rank() == 0:
            print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
