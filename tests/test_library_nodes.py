"""Ops as DaCe's library nodes (``translate/library.py``, ``translate/expansions.py``):
which products, reductions and Fourier transforms become which node, that the target's
implementation and DaCe's own ones compute what ``jax.jit`` computes, and that what no
DaCe node expresses stays hlo2dace's code."""

from __future__ import annotations

import dace
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dace.libraries import blas
from dace.libraries.fft import FFT, IFFT
from dace.libraries.standard import Reduce

import hlo2dace
from hlo2dace.translate import library

from util import assert_matches_jax
from util import random_operand as operand

#: name -> (function, operand shapes, the node it becomes): more than FEW_ROWS rows, which
#: the few_rows kernel computes on a machine with 64-byte vectors
PRODUCTS = {
    "matrix": (lambda a, b: a @ b, [(70, 50), (50, 40)], blas.Gemm),
    "transposed lhs": (lambda a, b: a.T @ b, [(50, 70), (50, 40)], blas.Gemm),
    "transposed rhs": (lambda a, b: a @ b.T, [(70, 50), (40, 50)], blas.Gemm),
    "square, transposed": (lambda a, b: a.T @ b, [(100, 100), (100, 100)], blas.Gemm),
    "matrix-vector": (lambda a, b: a @ b, [(300, 200), (200,)], blas.Gemv),
    "transposed matrix-vector": (lambda a, b: a.T @ b, [(200, 300), (200,)], blas.Gemv),
    "vector-matrix": (lambda a, b: a @ b, [(200,), (200, 300)], blas.Gemv),
    "dot": (lambda a, b: a @ b, [(5000,), (5000,)], blas.Dot),
    "batched": (lambda a, b: a @ b, [(3, 60, 50), (3, 50, 40)], blas.BatchedMatMul),
    "in an expression": (lambda a, b: jnp.tanh(a @ b + 1.0), [(70, 50), (50, 40)], blas.Gemm),
}


def _nodes(sdfg) -> list:
    return [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.LibraryNode)]


def _args(shapes, dtype):
    return [operand(dtype, shape, seed=k) for k, shape in enumerate(shapes)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", list(PRODUCTS))
def test_products_are_blas_nodes(name, dtype):
    """Each product BLAS computes is one DaCe node of the kind its shapes call for,
    implemented as the CPU target says, and no tasklet calls BLAS itself."""
    fun, shapes, kind = PRODUCTS[name]
    args = _args(shapes, dtype)
    sdfg = hlo2dace.jit(fun).lower(*args).as_sdfg()
    nodes = _nodes(sdfg)
    assert [type(n) for n in nodes] == [kind], nodes
    assert nodes[0].implementation == library.IMPLEMENTATIONS["cpu"][kind]
    assert not [n for n, _ in sdfg.all_nodes_recursive()
                if isinstance(n, dace.nodes.Tasklet) and "cblas_" in n.code.as_string]
    tolerance = 1e-4 if dtype == np.float32 else 1e-12  # the order of BLAS's sums
    assert_matches_jax(fun, *args, rtol=tolerance, atol=tolerance)


def _implemented_as(implementation: str):
    def transform(sdfg):
        for node in _nodes(sdfg):
            node.implementation = implementation
        sdfg.expand_library_nodes()
        return sdfg
    return transform


@pytest.mark.parametrize("name", list(PRODUCTS))
def test_daces_pure_expansion_computes_the_product(name):
    """A user who picks DaCe's pure expansion (maps DaCe's transformations can tile and
    move) gets the product jax.jit computes, up to the order of the sums."""
    fun, shapes, _ = PRODUCTS[name]
    args = _args(shapes, np.float64)
    pure = hlo2dace.jit(fun, transform=_implemented_as("pure"))
    np.testing.assert_allclose(np.asarray(pure(*args)), np.asarray(jax.jit(fun)(*args)),
                               rtol=1e-12, atol=1e-12)


def test_tiling_the_pure_expansion():
    """DaCe's MapTiling applies to a product once it is maps, and the tiled program still
    computes the product."""
    from dace.transformation.dataflow import MapTiling

    def tiled(sdfg):
        sdfg = _implemented_as("pure")(sdfg)
        maps = [(node, state) for node, state in sdfg.all_nodes_recursive()
                if isinstance(node, dace.nodes.MapEntry) and "gemm" in node.map.label]
        assert maps
        for node, state in maps:  # once each: MapTiling matches its own tiles again
            MapTiling.apply_to(state.sdfg, options={"tile_sizes": (16,)}, map_entry=node)
        return sdfg

    fun, shapes, _ = PRODUCTS["matrix"]
    args = _args(shapes, np.float64)
    np.testing.assert_allclose(np.asarray(hlo2dace.jit(fun, transform=tiled)(*args)),
                               np.asarray(jax.jit(fun)(*args)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", ["int32", "float16", "complex64", "scaled", "two batches",
                                  "broadcast batch"])
def test_products_no_dace_node_expresses_stay_hlo2dace_code(case):
    """Integer products, 16-bit ones accumulated in f32, complex ones summed in XLA's
    order, a product scaled by a runtime scalar, two batch dimensions and a matrix
    broadcast over a batch are hlo2dace's own tasklets, and right."""
    a, b = operand(np.float32, (64, 48)), operand(np.float32, (48, 32), seed=1)
    s = np.float32(1.5)
    batch = operand(np.float32, (2, 3, 20, 30)), operand(np.float32, (2, 3, 30, 10), seed=1)
    fun, args = {
        "int32": (lambda a, b: a @ b, ((a * 50).astype(np.int32), (b * 50).astype(np.int32))),
        "float16": (lambda a, b: a @ b, (a.astype(np.float16), b.astype(np.float16))),
        "complex64": (lambda a, b: a @ b, (a + 1j * a, b.astype(np.complex64))),
        "scaled": (lambda a, b, s: (s * a) @ b, (a, b, s)),
        "two batches": (lambda a, b: a @ b, batch),
        "broadcast batch": (lambda a, b: jnp.einsum("bmk,kn->bmn", a, b),
                            (operand(np.float32, (3, 20, 48)), b)),
    }[case]
    sdfg = hlo2dace.jit(fun).lower(*args).as_sdfg()
    assert not [n for n in _nodes(sdfg) if isinstance(n, (blas.Gemm, blas.Gemv, blas.Dot,
                                                          blas.BatchedMatMul))]
    tolerance = 1e-2 if case == "float16" else 1e-4
    assert_matches_jax(fun, *args, rtol=tolerance, atol=tolerance)


def test_census_counts_nodes_and_opaque_code():
    """``bench/library_nodes.py`` counts a product's node, a reduction's loop and an FFT's
    call: the numbers docs/architecture.md reports."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "library_nodes.py"
    spec = importlib.util.spec_from_file_location("library_nodes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = operand(np.float64, (96, 96))  # more rows than the few_rows kernel takes
    sdfg = hlo2dace.jit(lambda x: (jnp.fft.fft(x @ x).real.sum(0))).lower(x).as_sdfg()
    counts = module.census(sdfg)
    assert counts["library_nodes"] == {"Gemm": 1}
    assert counts["opaque_tasklets"].get("fft") == 1 and counts["opaque_tasklets"].get("loop")


#: name -> (function, operand): reductions of one array by one op
REDUCTIONS = {
    "sum rows f32": (lambda x: jnp.sum(x, axis=1), np.float32),
    "sum columns f64": (lambda x: jnp.sum(x, axis=0), np.float64),
    "sum all f32": (lambda x: jnp.sum(x), np.float32),
    "max with NaN f64": (lambda x: jnp.max(x, axis=1), np.float64),
    "min f32": (lambda x: jnp.min(x, axis=0), np.float32),
    "prod f64": (lambda x: jnp.prod(x, axis=0), np.float64),
    "sum int64": (lambda x: jnp.sum(x, axis=0), np.int64),
    "max int32": (lambda x: jnp.max(x), np.int32),
    "any": (lambda x: jnp.any(x, axis=1), np.bool_),
    "all": (lambda x: jnp.all(x, axis=0), np.bool_),
}


def _reduced(name: str):
    fun, dtype = REDUCTIONS[name]
    x = operand(dtype, (300, 257))
    if name.startswith("prod"):
        x = 1 + x / 300  # no overflow
    if "NaN" in name:
        x[3, 5] = np.nan
    return fun, [x]


@pytest.mark.parametrize("optimize", ["none", "default"])
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions_are_reduce_nodes(name, optimize):
    """A reduction of an array by one op is DaCe's Reduce node, implemented by hlo2dace's
    own expansion, which computes what the C++ it replaced computed: XLA's results to its
    order of summation, NaNs propagated by max."""
    fun, args = _reduced(name)
    sdfg = hlo2dace.jit(fun, optimize=optimize).lower(*args).as_sdfg()
    nodes = [n for n in _nodes(sdfg) if isinstance(n, Reduce)]
    assert len(nodes) == 1, _nodes(sdfg)
    assert nodes[0].implementation == library.OWN
    expected = np.asarray(jax.jit(fun)(*args))
    actual = np.asarray(hlo2dace.jit(fun, optimize=optimize)(*args))
    if "NaN" in name:  # the spec's maximum propagates it; XLA's vectorised code drops it
        assert np.isnan(actual[3])
        actual, expected = np.delete(actual, 3), np.delete(expected, 3)
    tolerance = 1e-4 if args[0].dtype == np.float32 else 1e-11  # sums of ~300 normals
    np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("implementation", ["pure", "OpenMP"])
def test_daces_reduce_expansions_compute_the_reductions(implementation):
    """DaCe's own expansions of the Reduce nodes (a user's choice, or auto_optimize's)
    compute the reductions, up to the order of the sums (not NaN's propagation: left
    out here)."""
    names = [name for name in REDUCTIONS if "NaN" not in name]
    args = [_reduced(name)[1][0] for name in names]

    def fun(*args):
        return [REDUCTIONS[name][0](x) for name, x in zip(names, args)]

    ours = hlo2dace.jit(fun, transform=_implemented_as(implementation))(*args)
    for name, a, e in zip(names, ours, jax.jit(fun)(*args)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-4, atol=1e-4,
                                   err_msg=name)


def test_a_reduction_computing_its_operand_stays_hlo2dace_code():
    """At the default level, a sum of an expression the plan computes in its loop, and
    a row maximum its readers compute a row at a time (softmax), are code; at ``none``
    both are Reduce nodes."""
    def fun(x):
        return jnp.sum(x * 2.0 + 1.0, axis=0), jax.nn.softmax(x, axis=-1)

    x = operand(np.float32, (200, 300))
    kinds = {level: [type(n) for n in _nodes(hlo2dace.jit(fun, optimize=level)
                                                .lower(x).as_sdfg())]
             for level in ("none", "default")}
    assert kinds["default"] == [] and kinds["none"].count(Reduce) == 3, kinds
    assert_matches_jax(fun, x, rtol=1e-5, atol=1e-7)


def test_a_saved_reduce_node_expands_as_a_fresh_one(tmp_path):
    """A Reduce node read back from a file (its identity, -inf, now a string) expands
    into hlo2dace's code again, and the program computes the maximum."""
    def fun(x):
        return jnp.max(x, axis=1)

    x = operand(np.float32, (64, 4096))
    lowered = hlo2dace.jit(fun).lower(x)
    path = tmp_path / "max.sdfgz"
    lowered.as_sdfg().save(str(path), compress=True)
    compiled = hlo2dace.load(path, like=lowered)
    np.testing.assert_array_equal(np.asarray(compiled(x)), np.asarray(jax.jit(fun)(x)))


FOURIER = {
    "fft c128": (jnp.fft.fft, (256,), np.complex128, FFT),
    "ifft c128": (jnp.fft.ifft, (100,), np.complex128, IFFT),
    "fft2 c64": (jnp.fft.fft2, (12, 20), np.complex64, FFT),
    "ifftn c64": (jnp.fft.ifftn, (4, 6, 10), np.complex64, IFFT),
}


def _complex(shape, dtype):
    return (operand(np.float64, shape) + 1j * operand(np.float64, shape, seed=1)).astype(dtype)


@pytest.mark.parametrize("name", list(FOURIER))
def test_whole_array_fourier_transforms_are_fft_nodes(name):
    """A complex transform over every dimension is DaCe's FFT or IFFT node (1/n as the
    IFFT's factor), expanded into hlo2dace's FFTW call."""
    fun, shape, dtype, kind = FOURIER[name]
    z = _complex(shape, dtype)
    nodes = _nodes(hlo2dace.jit(fun).lower(z).as_sdfg())
    assert [type(n) for n in nodes] == [kind]
    assert nodes[0].implementation == library.OWN
    if kind is IFFT:
        assert float(nodes[0].factor) == pytest.approx(1 / np.prod(shape))
    tolerance = 1e-5 if dtype == np.complex64 else 1e-13
    assert_matches_jax(fun, z, rtol=tolerance, atol=tolerance * np.sqrt(np.prod(shape)))


@pytest.mark.parametrize("name", ["fft c128", "ifft c128"])
def test_daces_pure_dft_computes_the_transform(name):
    """DaCe's own (O(n^2)) expansion of a one-dimensional node computes the transform."""
    fun, shape, dtype, _ = FOURIER[name]
    z = _complex(shape, dtype)
    np.testing.assert_allclose(
        np.asarray(hlo2dace.jit(fun, transform=_implemented_as("pure"))(z)),
        np.asarray(jax.jit(fun)(z)), rtol=1e-10, atol=1e-10)


def test_batched_and_real_transforms_stay_hlo2dace_code():
    """Transforms over some dimensions (a batch) and real ones have no DaCe node."""
    def fun(z, x):
        return jnp.fft.fft(z, axis=-1), jnp.fft.rfft(x), jnp.fft.irfft(z[0])

    z, x = _complex((8, 32), np.complex128), operand(np.float64, (64,))
    assert not _nodes(hlo2dace.jit(fun).lower(z, x).as_sdfg())
    assert_matches_jax(fun, z, x, rtol=1e-12, atol=1e-12)


def test_auto_optimize_keeps_hlo2daces_implementations_when_asked():
    """``auto_optimize`` picks DaCe's pure FFT, which takes one dimension only (it raises
    on this 2-D one); asked to prefer hlo2dace's implementations, it expands the nodes
    with them and the program is right."""
    from dace.transformation.auto.auto_optimize import auto_optimize

    def optimized(sdfg):
        auto_optimize(sdfg, dace.DeviceType.CPU,
                      find_fast_library_fn=lambda device: [library.OWN])
        return sdfg

    def fun(z):
        return jnp.fft.fft2(z), jnp.sum(z.real, axis=0)

    z = _complex((12, 20), np.complex128)

    def plain(sdfg):
        auto_optimize(sdfg, dace.DeviceType.CPU)
        return sdfg

    with pytest.raises(hlo2dace.TransformationError, match="N-dimensional"):
        hlo2dace.jit(fun, transform=plain)(z)
    np.testing.assert_allclose(
        np.asarray(hlo2dace.jit(fun, transform=optimized)(z)[0]),
        np.asarray(jax.jit(fun)(z)[0]), rtol=1e-12, atol=1e-12)


def _spd(n: int, dtype, seed: int = 0) -> np.ndarray:
    a = operand(np.float64, (n, n), seed=seed)
    return (a @ a.T + n * np.eye(n)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_cholesky_is_a_potrf_node(dtype):
    """An unbatched real Cholesky factorisation (lower and upper; one that fails, which
    JAX turns into NaNs from LAPACK's info) is DaCe's Potrf node with hlo2dace's
    implementation, jaxlib's kernel: the results are XLA's."""
    from dace.libraries.lapack import Potrf

    def fun(a, bad):
        return (jnp.linalg.cholesky(a), jax.scipy.linalg.cholesky(a, lower=False),
                jnp.linalg.cholesky(bad))

    a, bad = _spd(40, dtype), _spd(40, dtype, seed=1)
    bad[7, 7] = -1e6
    nodes = _nodes(hlo2dace.jit(fun).lower(a, bad).as_sdfg())
    assert [type(n) for n in nodes] == [Potrf] * 3
    assert {n.implementation for n in nodes} == {library.OWN}
    assert all(n.lower for n in nodes)  # JAX's upper factor is the lower one transposed
    tolerance = 1e-5 if dtype == np.float32 else 1e-13
    assert_matches_jax(fun, a, bad, rtol=tolerance, atol=tolerance)


def test_daces_lapacke_expansion_computes_the_factor():
    """DaCe's own OpenBLAS (LAPACKE) expansion of the Potrf nodes computes the factors."""
    from dace.libraries.lapack import Potrf

    def lapacke(sdfg):
        for node in _nodes(sdfg):
            if isinstance(node, Potrf):
                node.implementation = "OpenBLAS"
        return sdfg

    def fun(a):
        return jnp.linalg.cholesky(a), jax.scipy.linalg.cholesky(a, lower=False)

    a = _spd(60, np.float64)
    for got, want in zip(hlo2dace.jit(fun, transform=lapacke)(a), jax.jit(fun)(a)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12,
                                   atol=1e-12)


def test_batched_and_complex_factorisations_stay_hlo2dace_code():
    """DaCe's Potrf has no batch and hlo2dace keeps complex ones as jaxlib's call."""
    def fun(a, c):
        return jnp.linalg.cholesky(a), jnp.linalg.cholesky(c)

    a = np.stack([_spd(16, np.float64), _spd(16, np.float64, seed=1)])
    c = (_spd(16, np.float64) + 0j).astype(np.complex128)
    assert not _nodes(hlo2dace.jit(fun).lower(a, c).as_sdfg())
    assert_matches_jax(fun, a, c, rtol=1e-12, atol=1e-12)
