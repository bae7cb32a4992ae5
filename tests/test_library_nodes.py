"""Products as DaCe's BLAS library nodes (``translate/library.py``): which products become
which node, that the target's implementation and DaCe's own pure one compute what
``jax.jit`` computes, and that the products no DaCe node expresses stay hlo2dace's code."""

from __future__ import annotations

import dace
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dace.libraries import blas

import hlo2dace
from hlo2dace.translate import library

from util import assert_matches_jax
from util import random_operand as operand

#: name -> (function, operand shapes, the node it becomes)
PRODUCTS = {
    "matrix": (lambda a, b: a @ b, [(70, 50), (50, 40)], blas.Gemm),
    "transposed lhs": (lambda a, b: a.T @ b, [(50, 70), (50, 40)], blas.Gemm),
    "transposed rhs": (lambda a, b: a @ b.T, [(70, 50), (40, 50)], blas.Gemm),
    "square, transposed": (lambda a, b: a.T @ b, [(60, 60), (60, 60)], blas.Gemm),
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
    x = operand(np.float64, (64, 64))
    sdfg = hlo2dace.jit(lambda x: (jnp.fft.fft(x @ x).real.sum(0))).lower(x).as_sdfg()
    counts = module.census(sdfg)
    assert counts["library_nodes"] == {"Gemm": 1}
    assert counts["opaque_tasklets"].get("fft") == 1 and counts["opaque_tasklets"].get("loop")
