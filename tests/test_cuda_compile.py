"""The cuda target without a GPU: programs of the test suite's families (``PROGRAMS``, most
of them the CPU tests' own tables) translated for the cuda target and compiled by nvcc for
sm_90, a subset for sm_80 too (``hlo2dace.cuda_check``), and the ops that cannot run on
the device refused with an ``UnsupportedError`` that names them, for a documented reason.

Compiling dominates: the programs' files are compiled as a few unity files, one per CPU
and compiler, once per test session (``checked``)."""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P
from test_collectives import MESH
from test_control import HAZARDS
from test_elementwise import BINARY, BITCAST_GROUPS, DTYPES, SHIFTS, UNARY, category
from test_extended import CASES as EXTENDED
from test_float8 import XLA_TYPES
from test_indexing import DTYPES as INDEXED_TYPES
from test_indexing import STATIC_UPDATES
from test_library_nodes import FOURIER, REDUCTIONS
from test_library_nodes import PRODUCTS as BLAS_PRODUCTS
from test_linalg import COMPUTED_MATRICES, EINSUMS, MATRIX_VECTOR_PAIRS, MIXED, TRANSPOSED_PRODUCTS
from test_random import ROUNDED, SAMPLERS
from test_symbolic import POLYMORPHIC

import hlo2dace
from hlo2dace import cuda_check, cuda_toolchain
from hlo2dace.errors import UnsupportedError
from hlo2dace.pipeline import pipeline
from hlo2dace.sdfg_passes.device import COMPLEX, HOST_ONLY
from hlo2dace.translate import registry
from hlo2dace.translate.cuda import DEVICE_FAMILIES, HOST_FAMILIES

from util import dtype_id, needs
from util import random_operand as operand

jax.config.update("jax_enable_x64", True)


def _array(dtype, shape=(8, 16), seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if dtype.kind in "iu" or dtype in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)):
        return rng.integers(0, 7, shape).astype(dtype)
    return (rng.standard_normal(shape) + 2).astype(dtype)


def _elementwise(dtype):
    """Every unary and binary op of test_elementwise's tables that ``dtype`` has, and
    conversions to and from f32, in one program."""
    kind = category(dtype)
    unary = [fn for fn, kinds in UNARY.values() if kind in kinds]
    binary = [fn for fn, kinds in BINARY.values() if kind in kinds]
    shifts = list(SHIFTS.values()) if kind in "iun" else []

    def program(x, y):
        out = [fn(x) for fn in unary] + [fn(x, y) for fn in binary + shifts]
        out.append(lax.convert_element_type(x, np.float32))
        if kind != "c":
            out.append(lax.convert_element_type(y.astype(np.float32), dtype))
        return out

    return program, (_array(dtype), _array(dtype, seed=1))


f32, f64, i32 = np.float32, np.float64, np.int32
x32, x64 = _array(f32, (32, 48)), _array(f64, (32, 48))


def _shapes(x):
    return (jnp.broadcast_to(x[:, :1], (32, 48)) + x, x.reshape(48, 32), x.T,
            x[2:30:3, ::-1], jnp.concatenate([x, x * 2], axis=0), jnp.pad(x, ((1, 2), (0, 3))),
            lax.dynamic_slice(x, (3, 4), (8, 8)),
            lax.dynamic_update_slice(x, jnp.ones((4, 4), x.dtype), (5, 6)),
            jnp.expand_dims(x, 0).sum(0), jnp.flip(x, 1))


def _reductions(x):
    return (x.sum(), x.sum(axis=0), x.max(axis=1), x.min(), jnp.prod(x[:4], axis=1),
            jnp.argmax(x, axis=1), x.mean(axis=0),
            jnp.any(x > 3, axis=0))


def _products(a, b, v):
    return a @ b.T, a @ v, jnp.dot(v, v), a.T @ a


def _int_products(a, b):
    return a @ b.T, jnp.einsum("ij,ij->i", a, b)


def _cases(x, n):
    switched = lax.switch(n % 3, [lambda: x + 1, lambda: x * 2, lambda: -x])
    chosen = lax.cond(n > 2, lambda: x.sum(), lambda: x.max())
    return switched, chosen


def _loops(x, n):
    looped = lax.fori_loop(0, 5, lambda i, c: c * 0.5 + jnp.roll(c, 1, axis=0), x)
    counted = lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.5),
                             (0, x))[1]
    return looped, counted


def _random(key, state):
    return (jax.random.uniform(key, (64,)), jax.random.bits(key, (16,), np.uint32),
            lax.rng_bit_generator(state, (16,), np.uint32))


def _convolution(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME")


def _indexing(x, idx):
    return x[idx], x.at[idx].add(1.0), x.at[idx, 2].set(0.0), jnp.take(x, idx, axis=1)


def _int_reductions(x, b):
    return (x.sum(axis=0), x.max(axis=1), x.min(), jnp.prod(x[:3], axis=0), jnp.argmin(x, 0),
            b.all(axis=1), b.any(), jnp.count_nonzero(b, axis=0))


def _scatters(x, idx, segments):
    return (jax.ops.segment_sum(x, segments, num_segments=4), x.at[idx].max(0.5),
            x.at[idx].min(-0.5), x.at[idx].multiply(2.0), x.at[-1].set(3.0),
            x.at[idx, idx].add(1.0))


def _gathers(x, idx):
    return (jnp.take_along_axis(x, jnp.broadcast_to(idx, (32, 4)), axis=1),
            x[:, idx], x[idx[:, None], idx[None, :]], x[jnp.array([1, -1])])


def _scans(x):
    def step(carry, row):
        carry = carry * 0.9 + row
        return carry, carry.sum()

    last, sums = lax.scan(step, jnp.zeros(x.shape[1], x.dtype), x)
    written = lax.fori_loop(0, 8, lambda i, a: lax.dynamic_update_slice(
        a, jnp.full((1, 48), i, a.dtype), (i, 0)), x)
    return last, sums, written


def _nested(x, n):
    def body(i, c):
        return lax.cond(i % 2 == 0, lambda: c + 1, lambda: c * 0.5)

    return lax.fori_loop(0, n, body, x), lax.switch(n % 2, [jnp.sin, jnp.cos], x)


def _softmax(x):
    return (jax.nn.softmax(x, axis=1), jax.nn.logsumexp(x, axis=0), jnp.where(x > 2, x, 0.0),
            jnp.clip(x, 1, 3), jnp.arange(48) * x, jax.nn.relu(x) @ x.T)


def _equation_of_state(t, s, p):
    """pyhpc's equation_of_state flavour: a long f64 expression over three fields."""
    r = jnp.sqrt(s + 35.0) * t / (p + 1.0)
    return (r ** 3 - 2 * r * jnp.exp(-t / 40) + jnp.log1p(s) * jnp.tanh(p / 1e3),
            (t * s).sum(axis=-1))


def _shapes_of_every_dtype(x, s):
    """Every shape op of ``test_shape.test_every_op`` on one dtype."""
    return (lax.broadcast_in_dim(x[:, :1], (4, 3, 5, 2), (3, 1, 0)), jnp.broadcast_to(s, (2, 3)),
            x.reshape(4, 6), x.transpose(2, 0, 1), x[1:, ::2, 1:4:2],
            jnp.concatenate([x, x[:, ::-1]], 1), lax.pad(x, s, [(1, 0, 0), (-1, 2, 1), (0, 1, 2)]),
            jnp.flip(x, (0, 2)), lax.dynamic_slice(x, (1, 5, -7), (1, 2, 3)),
            lax.dynamic_update_slice(x, x[:1, :2, ::-2], (3, 1, -1)),
            lax.optimization_barrier((x, s))[1], jnp.full((2, 3), s))


def _scatters_of(x, idx):
    """Gathers and scatters of ``test_indexing.DTYPES`` (booleans: no sums, no products)."""
    sums = (x.at[idx].add(x[1]), x.at[idx].multiply(x[2])) if x.dtype != np.bool_ else ()
    return (x[idx], x.at[idx].set(x[0]), x.at[idx].max(x[2]), x.at[idx, 1].min(x[3, 0]),
            jnp.take(x, idx, axis=1), *sums)


def _windows(x):
    """reduce_window's forms (``test_reduction.test_cumulative_and_pooling``)."""
    return (lax.reduce_window(x, jnp.zeros((), x.dtype), lax.add, (2, 3), (1, 2), "SAME"),
            lax.reduce_window(x, x.min(), lax.max, (3, 3), (2, 2), "VALID"))


def _sorts(x):
    return jnp.sort(x, axis=1), jnp.argsort(x, axis=0), lax.top_k(x, 3)


def _collectives(x):
    """A collective over ``test_collectives``'s one-device mesh."""
    return jax.shard_map(lambda v: jax.lax.psum(v, "x"), mesh=MESH, in_specs=P("x"),
                         out_specs=P(), check_vma=False)(x)


def _bitcasts(group):
    """Each type of a group of ``test_elementwise.BITCAST_GROUPS`` as every other."""
    def program(*xs):
        return [lax.bitcast_convert_type(x, t) for x in xs for t in group]
    return program, tuple(_array(t, (4, 8), seed=k) for k, t in enumerate(group))


def _conversions(dtype):
    """``dtype`` to every type of ``test_elementwise.DTYPES`` but the complex ones."""
    return (lambda x: [lax.convert_element_type(x, t) for t in DTYPES if category(t) != "c"],
            (_array(dtype),))


def _small_floats(dtype):
    """``test_float8``'s types: arithmetic, comparisons and conversions."""
    def program(x, y):
        return (x + y, x * y, jnp.maximum(x, y), x < y, jnp.abs(x), -x,
                x.astype(np.float32), y.astype(np.float32).astype(dtype), x.sum(axis=0))
    return program, (_array(dtype), _array(dtype, seed=1))


def _product(fn, shapes, dtype):
    return fn, tuple(operand(dtype, shape, seed=k) for k, shape in enumerate(shapes))


def _einsums(dtype):
    return {f"einsum/{dtype_id(dtype)}_{spec}": _product(
        functools.partial(jnp.einsum, spec), shapes, dtype) for spec, shapes in EINSUMS.items()}


def _mixed(lhs, rhs, out):
    """A product of ``test_linalg.MIXED``'s operand and result types."""
    return (lambda a, b: jnp.matmul(a, b, preferred_element_type=out),
            (operand(lhs, (6, 5)), operand(rhs, (5, 4), seed=1)))


def _polymorphic(fn, spec):
    return fn, (np.ones((6, 5 if "n" not in spec else 8)),), {"polymorphic_shapes": [spec]}


def _loop_of(hazard):
    """A ``test_control.HAZARDS`` body run in a loop, as that test runs it."""
    return lambda a: lax.fori_loop(0, 3, lambda i, a: hazard(a), a)


key32 = jax.random.PRNGKey(0)

#: "family/case" -> (function, arguments[, options of hlo2dace.jit]): the programs, by
#: family, most of them the CPU tests' own tables
PROGRAMS = {
    **{f"elementwise/{np.dtype(d).name}": _elementwise(d) for d in DTYPES},
    **{f"conversions/{np.dtype(d).name}": _conversions(d) for d in DTYPES
       if category(d) != "c"},
    **{f"bitcasts/{'_'.join(np.dtype(t).name for t in g)}": _bitcasts(g)
       for g in BITCAST_GROUPS},
    **{f"small_floats/{np.dtype(d).name}": _small_floats(d) for d in XLA_TYPES},
    **{f"extended/{name}": (fn, tuple(_array(f32, s, seed=k) for k, s in enumerate(shapes)))
       for name, (fn, shapes) in EXTENDED.items()},
    "elementwise/equation_of_state": (_equation_of_state, (x64, x64 + 1, x64 * 100)),
    "elementwise/softmax": (_softmax, (x32,)),
    **{f"shapes/{np.dtype(d).name}": (_shapes_of_every_dtype, (_array(d, (2, 3, 4)),
                                                               _array(d, (), seed=1)))
       for d in DTYPES},
    "shapes/f32_large": (_shapes, (x32,)),
    "shapes/f64_large": (_shapes, (x64,)),
    **{f"symbolic/{name}": _polymorphic(fn, spec) for name, (fn, spec) in
       POLYMORPHIC.items()},
    "reductions/f32": (_reductions, (x32,)),
    "reductions/f64": (_reductions, (x64,)),
    "reductions/i32": (_int_reductions, (_array(i32, (32, 48)), _array(np.bool_, (32, 48)))),
    **{f"reductions/{name}": (fn, (operand(dtype, (30, 17)),))
       for name, (fn, dtype) in REDUCTIONS.items()},
    **{f"windows/{np.dtype(d).name}": (_windows, (_array(d, (9, 8)),))
       for d in (f32, f64, i32)},
    "windows/cumsum": (lambda x: (jnp.cumsum(x, axis=1), lax.cummax(x, axis=0)), (x32,)),
    "windows/max_pool_gradient": (lambda x: jax.grad(lambda y: lax.reduce_window(
        y, -jnp.inf, lax.max, (3, 3), (2, 2), "SAME").sum())(x), (x32,)),
    "products/f32": (_products, (x32, x32, x32[0])),
    "products/f64": (_products, (x64, x64, x64[0])),
    "products/i32": (_int_products, (_array(i32, (16, 8)), _array(i32, (16, 8)))),
    **{f"products/{name}_{dtype_id(d)}": _product(fn, shapes, d)
       for name, (fn, shapes, _) in BLAS_PRODUCTS.items() for d in (f32, f64)},
    **_einsums(f32), **_einsums(i32),
    **{f"mixed_products/{name}": _mixed(*types) for name, types in MIXED.items()},
    **{f"transposed_products/{name}_{dtype_id(d)}": _product(
        fn, [(6, 4), (6, 5), (3, 4, 5), (3, 5, 2)], d)
       for name, (fn, _) in TRANSPOSED_PRODUCTS.items() for d in (f32, i32)},
    **{f"matrix_vectors/{name}": _product(fn, [(31, 40), (40,), (40,), (31,)], f64)
       for name, (fn, _) in MATRIX_VECTOR_PAIRS.items()},
    **{f"computed_matrices/{name}": _product(fn, [(31, 40), (31, 40), (40,), (31,)], f32)
       for name, (fn, _) in COMPUTED_MATRICES.items()},
    "convolution/i32": (_convolution, (_array(i32, (2, 3, 8, 8)), _array(i32, (4, 3, 3, 3)))),
    "convolution/f32": (_convolution, (_array(f32, (2, 3, 8, 8)), _array(f32, (4, 3, 3, 3)))),
    "indexing/f32": (_indexing, (x32, np.array([3, 1, 7], np.int32))),
    "indexing/scatters": (_scatters, (x32, np.array([3, 1, 7, 3], np.int32),
                                      np.arange(32, dtype=np.int32) % 4)),
    "indexing/gathers": (_gathers, (x32, np.array([3, 1, 7, 0], np.int32))),
    **{f"indexing/{np.dtype(d).name}": (_scatters_of, (_array(d, (6, 5)),
                                                       np.array([4, 0, 4], np.int32)))
       for d in INDEXED_TYPES},
    **{f"static_updates/{name}": (fn, (x32[:5, :4], x32[:9, :4]))
       for name, (fn, _) in STATIC_UPDATES.items()},
    "control/cases": (_cases, (x32, np.int32(4))),
    "control/loops": (_loops, (x32, np.int32(4))),
    "control/scans": (_scans, (x32,)),
    "control/nested": (_nested, (x32, np.int32(5))),
    **{f"control/{name}": (_loop_of(fn), (x64[0, :10],))
       for name, fn in HAZARDS.items() if fn is not None},
    "random/threefry": (_random, (key32, np.arange(4, dtype=np.uint32))),
    **{f"random/{impl}_{name}": (lambda seed, s=sampler, i=impl: s(jax.random.key(seed, impl=i)),
                                 (np.int32(42),))
       for name, sampler in SAMPLERS.items() for impl in ("threefry2x32", "rbg")},
    **{f"random/{name}": (fn, (key32,)) for name, (fn, _) in ROUNDED.items()},
    "random/rng_uniform": (lambda x: lax.rng_uniform(x.min(), x.max(), (4,)), (x32,)),
    "sorting/f32": (_sorts, (x32,)),
    "sorting/i32": (_sorts, (_array(i32, (32, 48)),)),
    **{f"fft/{name}": (fn, (operand(np.float64, shape).astype(dtype),))
       for name, (fn, shape, dtype, _) in FOURIER.items()},
    "fft/rfft": (jnp.fft.rfft, (x32,)),
    "lapack/cholesky": (jnp.linalg.cholesky, (x64 @ x64.T + 48 * np.eye(32),)),
    "lapack/solve_triangular": (lambda a, b: jax.scipy.linalg.solve_triangular(a, b),
                                (np.tril(x64[:, :32]) + 48 * np.eye(32), x64)),
    "lapack/qr": (jnp.linalg.qr, (x64,)),
    "lapack/eigh": (jnp.linalg.eigh, (x64[:, :32] @ x64[:, :32].T,)),
    "collectives/psum": (_collectives, (x32,)),
}


#: programs that fail to compile for a reason too large to fix here -> the reason
KNOWN_FAILURES: dict[str, str] = {}

#: why the cuda target refuses an op, each documented in docs/gpu.md: a refusal for
#: another reason is an accident
DELIBERATE = (*HOST_FAMILIES.values(), *(reason for _, reason, _ in HOST_ONLY), COMPLEX[0])

_OP_NAME = re.compile(r'"((?:stablehlo|mhlo|sdy|func|chlo)\.[a-z_]+)"')


def _lowered(name: str):
    fn, args, *options = PROGRAMS[name]
    return hlo2dace.jit(fn, target="cuda", **(options[0] if options else {})).lower(*args)


def _identifier(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _sdfg(name: str):
    sdfg = _lowered(name).as_sdfg()
    sdfg.name = _identifier(name)
    return sdfg


@dataclass
class Translated:
    """Every program translated for the cuda target: its SDFG, or the UnsupportedError
    that refuses it; and the translator families its StableHLO ops belong to."""

    sdfgs: dict = field(default_factory=dict)
    refused: dict[str, UnsupportedError] = field(default_factory=dict)
    families: dict[str, set[str]] = field(default_factory=dict)


@functools.cache
def translated() -> Translated:
    done = Translated()
    for name in PROGRAMS:
        lowered = _lowered(name)
        records = [registry.record(op) for op in set(_OP_NAME.findall(lowered.as_text()))]
        done.families[name] = {r.family for r in records if r is not None and r.family}
        try:
            done.sdfgs[name] = lowered.as_sdfg()
        except UnsupportedError as refusal:
            done.refused[name] = refusal
            continue
        done.sdfgs[name].name = _identifier(name)
    return done


@functools.cache
def checked() -> dict[str, cuda_check.CheckResult]:
    """Every program's check, made once: all compiled for sm_90 in a unity file per CPU,
    the first program of each family also for sm_80."""
    sdfgs = translated().sdfgs
    firsts = {name.split("/")[0]: _identifier(name) for name in reversed(sdfgs)}
    results = cuda_check.check(sdfgs.values(), every_arch=set(firsts.values()))
    return dict(zip(sdfgs, results))


def test_every_program_compiles_with_nvcc(capsys):
    """Every program that is not refused compiles for sm_90 (a subset for sm_80 too),
    with no warning in hlo2dace's code; the programs cover every translator family (one
    test, so that the programs share the nvcc calls even when pytest runs on several
    workers)."""
    needs(cuda_toolchain.available(), "the CUDA toolchain (pip install '.[cuda]')")
    start = time.perf_counter()
    done = translated()
    translating = time.perf_counter() - start
    results = checked()
    failed = {n: r for n, r in results.items() if not r.ok}
    compiled = {f for n in results if n not in failed for f in done.families[n]}
    with capsys.disabled():
        print(f"\ncuda compile check: {len(PROGRAMS)} programs of "
              f"{len({n.split('/')[0] for n in PROGRAMS})} families: {len(results)} translated "
              f"({translating:.0f} s), {len(results) - len(failed)} compiled "
              f"({time.perf_counter() - start - translating:.0f} s), {len(failed)} failed "
              f"({len(KNOWN_FAILURES)} known), {len(done.refused)} refused "
              f"({', '.join(sorted({e.op for e in done.refused.values()}))}); translator "
              f"families compiled: {', '.join(sorted(compiled))}")
    assert len(PROGRAMS) >= 200 and len({_identifier(n) for n in PROGRAMS}) == len(PROGRAMS)
    accidents = {n: str(e) for n, e in done.refused.items()
                 if not any(reason in str(e) for reason in DELIBERATE)}
    assert not accidents, f"refused for no documented reason: {accidents}"
    assert set(failed) <= set(KNOWN_FAILURES), "\n".join(
        f"{n}: " + "\n  ".join(r.errors + r.warnings) for n, r in failed.items()
        if n not in KNOWN_FAILURES)
    assert set(KNOWN_FAILURES) <= set(failed), "known failures that pass now"
    no_kernel = [n for n, r in results.items() if n not in failed
                 and not any(f.endswith(".cu") for f in r.files)]
    assert not no_kernel, f"no CUDA file (nothing on the GPU): {no_kernel}"
    covered = {family for families in done.families.values() for family in families}
    # ops JAX does not emit: matvec's (the CPU pipeline's pair_matvecs makes it), lapack's
    # stablehlo.cholesky and triangular_solve (JAX calls LAPACK by custom calls)
    assert (set(DEVICE_FAMILIES) | set(HOST_FAMILIES)) - {"matvec", "lapack"} <= covered
    # sorting's translator sorts by the C++ library (HOST_ONLY): every sort is refused
    assert set(DEVICE_FAMILIES) - compiled == {"sorting"}, sorted(set(DEVICE_FAMILIES) - compiled)


def test_kernels_and_cublas():
    """Maps become GPU kernels and f32/f64 products cuBLAS calls (not C++ loops)."""
    import dace

    sdfg = _sdfg("products/f32")
    kinds = {(type(n).__name__, n.implementation) for n, _ in sdfg.all_nodes_recursive()
             if isinstance(n, dace.nodes.LibraryNode)}
    assert kinds and all(impl == "cuBLAS" for _, impl in kinds), kinds
    schedules = {n.map.schedule for n, _ in _sdfg("shapes/f32_large").all_nodes_recursive()
                 if isinstance(n, dace.nodes.MapEntry)}
    assert dace.ScheduleType.GPU_Device in schedules


@pytest.mark.parametrize("fn, args, op", [
    (jnp.fft.fft, (x32.astype(np.complex64),), "stablehlo.fft"),
    (jnp.linalg.cholesky, (x64 @ x64.T + 48 * np.eye(32),), "stablehlo.custom_call"),
    (jnp.sort, (x32,), "stablehlo.sort"),
    (lambda x: jnp.cumsum(x, axis=1), (x32,), "stablehlo.reduce_window"),
    (lambda x: jnp.exp(x * 1j), (x32,), "stablehlo.convert"),
    (lambda x: lax.rng_uniform(x.min(), x.max(), (4,)), (x32,), "stablehlo.rng"),
    (_convolution, (_array(f32, (2, 3, 8, 8)), _array(f32, (4, 3, 3, 3))),
     "stablehlo.convolution"),
], ids=["fft", "cholesky", "sort", "cumsum", "complex", "rng", "convolution_f32"])
def test_host_only_ops_are_refused(fn, args, op):
    """An op that runs on the host only is an UnsupportedError naming it and what the cuda
    target supports, not a compiler error."""
    with pytest.raises(UnsupportedError, match="cuda target") as error:
        hlo2dace.jit(fn, target="cuda").lower(*args).as_sdfg()
    assert error.value.op == op
    assert error.value.supported


def test_cpu_pipeline_has_no_device_pass():
    assert "to_device" not in pipeline("cpu").key
    assert pipeline("cuda").key.startswith("cuda[sm_90,")


def test_cuda_home_is_found_first(tmp_path, monkeypatch):
    """$CUDA_HOME names the root when it holds nvcc and the runtime's headers."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "include").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    (tmp_path / "include" / "cuda_runtime.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    cuda_toolchain.cuda_root.cache_clear()
    try:
        assert cuda_toolchain.cuda_root() == tmp_path.resolve()
    finally:
        cuda_toolchain.cuda_root.cache_clear()


def test_build_root_has_unversioned_libraries():
    """CMake finds libcudart.so in the root DaCe is pointed at (the wheels ship
    libcudart.so.13 only)."""
    needs(cuda_toolchain.available(), "the CUDA toolchain (pip install '.[cuda]')")
    root = cuda_toolchain.build_root()
    assert (root / "lib" / "libcudart.so").exists()
    assert (root / "bin" / "nvcc").exists()
    assert (root / "include" / "cuda_runtime.h").exists()


def test_build_environment_is_restored(monkeypatch):
    """CMake is given nvcc while a cuda program builds, and the CPU's builds after it run
    with the environment they had."""
    import os

    needs(cuda_toolchain.available(), "the CUDA toolchain (pip install '.[cuda]')")
    monkeypatch.delenv("CUDACXX", raising=False)
    path = os.environ["PATH"]
    with pipeline("cuda").build_environment() as root:
        assert os.environ["CUDACXX"] == str(root / "bin" / "nvcc")
        assert Path(os.environ["CUDACXX"]).is_file()
    assert "CUDACXX" not in os.environ
    assert os.environ["PATH"] == path


def test_a_compiler_error_fails_the_check():
    """A kernel that calls what the device does not have fails its program's check, and
    only its: the error lies in its lines of the unity file the two programs share."""
    import dace

    needs(cuda_toolchain.available(), "the CUDA toolchain (pip install '.[cuda]')")
    sdfgs = []
    for name, call in (("good_kernel", "2.0f * 3.0f"),
                       ("broken_kernel", "h2d::no_such_helper(1.0f)")):
        sdfg = dace.SDFG(name)
        sdfg.add_array("A", [8], dace.float32)
        sdfg.add_state().add_mapped_tasklet(
            "calls", {"i": "0:8"}, {}, f"__out = {call};", {"__out": dace.Memlet("A[i]")},
            language=dace.Language.CPP, external_edges=True)
        sdfg.apply_gpu_transformations(simplify=False)
        sdfgs.append(sdfg)
    good, broken = cuda_check.check(sdfgs, archs=("sm_90",), jobs=1)
    assert good.ok, good.errors + good.warnings
    assert not broken.ok
    assert any("broken_kernel_cuda.cu" in e and "error" in e for e in broken.errors), \
        broken.output[-2000:]


def test_command_line_target(capsys):
    """``hlo2dace passes --target cuda`` lists the cuda pipeline."""
    from hlo2dace import cli

    assert cli.main(["passes", "--target", "cuda"]) == 0
    listing = capsys.readouterr().out
    assert "target cuda" in listing and "to_device" in listing
    assert "choose_product_kernels" not in listing


def test_cmake_builds_a_cuda_program(tmp_path, monkeypatch):
    """DaCe's CMake build of a cuda program configures, compiles and links against the
    extra's toolchain (25 s); without a GPU, loading it is a clear error, with one, it runs."""
    import shutil

    needs(cuda_toolchain.available() and cuda_toolchain.cmake_bin_dir() is not None,
          "the CUDA toolchain (pip install '.[cuda]') and PyPI's CMake (DaCe's dependency)")
    monkeypatch.setenv("HLO2DACE_CACHE_DIR", str(tmp_path))
    x = _array(f32, (16, 16))
    lowered = hlo2dace.jit(lambda a: jnp.sin(a) @ a, target="cuda").lower(x)
    compiled = lowered.compile()
    assert list(tmp_path.rglob("*.so")), "no library was built"
    if shutil.which("nvidia-smi") is None:
        with pytest.raises(hlo2dace.errors.CompilationError, match="initialisation failed"):
            compiled(x)
    else:
        np.testing.assert_allclose(compiled(x), np.sin(x) @ x, rtol=1e-5)


def test_the_architecture_is_in_the_cache_key():
    """A binary built for one GPU architecture is not reused for another."""
    import dace

    before = pipeline("cuda").key
    old = dace.Config.get("compiler", "cuda", "cuda_arch")
    dace.Config.set("compiler", "cuda", "cuda_arch", value="80")
    try:
        assert pipeline("cuda").key.startswith("cuda[sm_80,") and pipeline("cuda").key != before
    finally:
        dace.Config.set("compiler", "cuda", "cuda_arch", value=old)


def test_every_family_has_a_cuda_rule():
    """Every op family that translates for the CPU says whether it runs on the device
    (translate/cuda.py): a new family needs a rule."""
    from hlo2dace.translate import cuda

    families = {registry.record(name).family for name in registry.supported_ops("cpu")
                if registry.record(name).translator("cpu") is not None}
    missing = families - set(cuda.DEVICE_FAMILIES) - set(cuda.HOST_FAMILIES)
    assert not missing, f"no cuda rule for the families {sorted(missing)}"
    assert not [name for name in registry.supported_ops("cpu")
                if registry.record(name).translator("cpu") is not None
                and registry.record(name).translator("cuda") is None]
