"""Contractions. This module covers the plain products of ``@`` and ``jnp.dot``:
matrix-matrix (either operand transposed), matrix-vector, vector-matrix and vector-vector,
with operand and result of one element type. f32/f64/complex products go through DaCe's
BLAS library nodes with OpenBLAS (where Debian's is installed); a transpose view of an
operand becomes the node's transA/transB flag, not a copy. Integer and f16/bf16 products,
products with a unit dimension (which DaCe's BLAS nodes squeeze away and then mishandle),
complex vector dots and every product without OpenBLAS are one map of short loops."""

from __future__ import annotations

import functools
import glob
import warnings

import dace
from dace.libraries import blas

from .. import ir
from . import dtypes
from .builder import Array, Builder, Literal, View, dace_shape, flat_index, map_params
from .literals import literal
from .registry import register

#: element types OpenBLAS multiplies; every other type takes ``_naive_product``
BLAS_TYPES = ("f32", "f64", "complex<f32>", "complex<f64>")


@functools.cache
def blas_implementation() -> str:
    """``OpenBLAS`` when its library and ``cblas.h`` are installed, else ``pure`` (said once)."""
    from dace.libraries.blas.environments.openblas import OpenBLAS

    headers = glob.glob("/usr/include/cblas.h") + glob.glob("/usr/include/*/cblas.h")
    if OpenBLAS.is_installed() and headers:
        return "OpenBLAS"
    warnings.warn("hlo2dace: OpenBLAS (Debian's libopenblas-dev) not found; matrix products "
                  "are plain loops, which are much slower", stacklevel=2)
    return "pure"


def _memlet(array: Array) -> dace.Memlet:
    return dace.Memlet(f"{array.name}[{', '.join(f'0:{n}' for n in dace_shape(array.type))}]")


def _operand(b: Builder, value: ir.Value) -> tuple[Array, bool]:
    """``value`` as an array, and whether that array holds it transposed: a transpose view
    of a whole matrix is read in place (the product's transA/transB flag), as is a view
    that only re-reads an array as it is; any other view or literal is materialised."""
    binding = b.operand(value)
    if isinstance(binding, View) and binding.source.type.rank == value.type.rank <= 2:
        source = binding.source
        dims = tuple(axis.dim for axis in binding.axes)
        plain = all(axis.stride == 1 and axis.offset == 0 for axis in binding.axes)
        if plain and sorted(dims) == list(range(len(dims))):
            if tuple(source.type.shape[d] for d in dims) == tuple(value.type.shape):
                return source, dims == (1, 0)
    if isinstance(binding, Array):
        return binding, False
    return b.array(value), False


@register("stablehlo.dot_general")
def dot_general(b: Builder, op: ir.Op) -> None:
    lhs, rhs = op.operands
    numbers = op.attr("dot_dimension_numbers")
    fields = numbers.fields if isinstance(numbers, ir.StructAttr) else {}
    lhs_batch = tuple(fields.get("lhs_batching_dimensions", ()))
    lhs_contract = tuple(fields.get("lhs_contracting_dimensions", ()))
    rhs_contract = tuple(fields.get("rhs_contracting_dimensions", ()))
    result_element = op.result.type.element
    supported = ["matrix-matrix, matrix-vector, vector-matrix and vector-vector products "
                 "with one contracting dimension and operands of the result's element type"]
    if lhs_batch:
        raise b.unsupported(f"batch dimensions {list(lhs_batch)} (batched products are not "
                            "translated yet)", supported)
    if len(lhs_contract) != 1 or len(rhs_contract) != 1:
        raise b.unsupported(f"{len(lhs_contract)} contracting dimensions (only one is "
                            "translated)", supported)
    if not (lhs.type.element == rhs.type.element == result_element):
        raise b.unsupported(f"mixed element types {lhs.type.element} x {rhs.type.element} -> "
                            f"{result_element}", supported)
    ranks = (lhs.type.rank, rhs.type.rank)
    if max(ranks) > 2:
        raise b.unsupported(f"contraction of a rank {ranks[0]} and a rank {ranks[1]} operand",
                            supported)
    element = dtypes.of(op.result.type, op.name, op.location)
    if element.narrow_bits or element.is_bool:
        raise b.unsupported(f"products of {result_element}",
                            BLAS_TYPES + ("f16", "bf16", "integers of 8 to 64 bits"))
    (lc,), (rc,) = lhs_contract, rhs_contract
    target = b.result_array(op.result)
    if lhs.type.shape[lc] == 0 or op.result.type.size == 0:  # empty contraction: zeros
        b.copy_into(Literal(element.numpy.type(0), op.result.type), target)
        b.bind(op.result, target)
        return
    a, a_transposed = _operand(b, lhs)
    x, x_transposed = _operand(b, rhs)
    use_blas = result_element in BLAS_TYPES and blas_implementation() == "OpenBLAS"
    # f16/bf16 accumulate in float and round once, as XLA's CPU products do
    if (not use_blas or 1 in lhs.type.shape or 1 in rhs.type.shape
            or (ranks == (1, 1) and element.is_complex)):
        # DaCe's BLAS nodes squeeze unit dimensions away and then reject (or, for Gemm
        # with one column, miscompute) the product, its OpenBLAS Dot calls a cblas_?dot
        # that does not exist for complex types, and its pure code accumulates with
        # atomics (a vector dot of integers ~50x slower than XLA): a map of loops instead
        _naive_product(b, op, (a, a_transposed, lc), (x, x_transposed, rc), target)
        b.bind(op.result, target)
        return
    if ranks == (2, 2):  # C = op(A) op(B)
        node = blas.Gemm(b.fresh("gemm"), transA=(lc == 0) != a_transposed,
                         transB=(rc == 1) != x_transposed)
        connect = (("_a", a), ("_b", x)), "_c"
    elif ranks == (2, 1):  # y = op(A) x
        node = blas.Gemv(b.fresh("gemv"), transA=(lc == 0) != a_transposed)
        connect = (("_A", a), ("_x", x)), "_y"
    elif ranks == (1, 2):  # x @ W = op(W)^T x
        node = blas.Gemv(b.fresh("gemv"), transA=(rc == 0) != x_transposed)
        connect = (("_A", x), ("_x", a)), "_y"
    else:  # plain sum of products: no conjugation, as stablehlo.dot_general
        node = blas.Dot(b.fresh("dot"))
        connect = (("_x", a), ("_y", x)), "_result"
    node.implementation = "OpenBLAS"
    b.state.add_node(node)
    inputs, output = connect
    for conn, array in inputs:
        b.state.add_edge(b.read(array.name), None, node, conn, _memlet(array))
    b.state.add_edge(node, output, b.write(target.name), None, _memlet(target))
    b.bind(op.result, target)


def _naive_product(b: Builder, op: ir.Op, lhs, rhs, target: Array) -> None:
    """``target`` = the product, each element a loop over the contracted dimension
    (wrapping integer arithmetic through ``h2d::add``/``h2d::mul``)."""
    element = dtypes.of(op.result.type)
    params = iter(map_params(op.result.type.rank))
    reads = []
    for conn, (array, transposed, contracted) in zip(("__a", "__b"), (lhs, rhs)):
        logical = ["__k" if d == contracted else next(params) for d in range(len(
            array.type.shape))]
        if transposed:
            logical = logical[::-1]
        reads.append(element.load(f"{conn}[{flat_index(array.type.shape, logical)}]"))
    n = op.operands[0].type.shape[lhs[2]]
    zero = literal(element.numpy.type(0), element)
    code = (f"{element.compute} __acc = {zero};\n"
            f"for (int64_t __k = 0; __k < {n}; ++__k) {{ h2d::scalar_loop(); "
            f"__acc = h2d::add(__acc, h2d::mul({reads[0]}, {reads[1]})); }}\n"
            f"__out = {element.store('__acc')};")
    b.indexed_map("dot", target, {"__a": lhs[0], "__b": rhs[0]}, {}, code)
