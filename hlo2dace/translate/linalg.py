"""Contractions through DaCe's BLAS library nodes (OpenBLAS where Debian's is installed,
DaCe's pure implementation elsewhere). This module covers the plain products of ``@`` and
``jnp.dot``: matrix-matrix (either operand transposed), matrix-vector, vector-matrix and
vector-vector, with operand and result of one element type."""

from __future__ import annotations

import functools
import glob
import warnings

import dace
from dace.libraries import blas

from .. import ir
from . import dtypes
from .builder import Array, Builder, Literal, dace_shape
from .registry import register

#: element types OpenBLAS multiplies; every other type takes the pure implementation
BLAS_TYPES = ("f32", "f64", "complex<f32>", "complex<f64>")


@functools.lru_cache(maxsize=None)
def blas_implementation() -> str:
    """``OpenBLAS`` when its library and ``cblas.h`` are installed, else ``pure`` (said once)."""
    from dace.libraries.blas.environments.openblas import OpenBLAS

    headers = glob.glob("/usr/include/cblas.h") + glob.glob("/usr/include/*/cblas.h")
    if OpenBLAS.is_installed() and headers:
        return "OpenBLAS"
    warnings.warn("hlo2dace: OpenBLAS (Debian's libopenblas-dev) not found; matrix products "
                  "use DaCe's pure implementation, which is much slower", stacklevel=2)
    return "pure"


def _memlet(array: Array) -> dace.Memlet:
    return dace.Memlet(f"{array.name}[{', '.join(f'0:{n}' for n in dace_shape(array.type))}]")


@register("stablehlo.dot_general")
def dot_general(b: Builder, op: ir.Op) -> None:
    lhs, rhs = op.operands
    numbers = op.attr("dot_dimension_numbers")
    fields = numbers.fields if isinstance(numbers, ir.StructAttr) else {}
    lhs_batch = tuple(fields.get("lhs_batching_dimensions", ()))
    lhs_contract = tuple(fields.get("lhs_contracting_dimensions", ()))
    rhs_contract = tuple(fields.get("rhs_contracting_dimensions", ()))
    result_element = op.result.type.element
    if lhs_batch or len(lhs_contract) != 1 or len(rhs_contract) != 1:
        raise b.unsupported("batched products and several contracting dimensions come with "
                            "the general dot_general", ["one contracting dimension, no batch"])
    if not (lhs.type.element == rhs.type.element == result_element):
        raise b.unsupported(f"mixed element types {lhs.type.element} x {rhs.type.element} -> "
                            f"{result_element}", ["one element type throughout"])
    element = dtypes.of(op.result.type, op.name, op.location)
    if element.is_stored_as_bits or element.narrow_bits or element.is_bool:
        raise b.unsupported(f"products of {result_element}", BLAS_TYPES + ("integers",))
    (lc,), (rc,) = lhs_contract, rhs_contract
    implementation = blas_implementation() if result_element in BLAS_TYPES else "pure"
    a, x = b.array(lhs), b.array(rhs)
    target = b.result_array(op.result)
    ranks = (lhs.type.rank, rhs.type.rank)
    if ranks == (2, 2):
        node = blas.Gemm(b.fresh("gemm"), transA=lc == 0, transB=rc == 1)
        connect = (("_a", a), ("_b", x)), "_c"
    elif ranks == (2, 1):
        node = blas.Gemv(b.fresh("gemv"), transA=lc == 0)
        connect = (("_A", a), ("_x", x)), "_y"
    elif ranks == (1, 2):  # x @ W = W^T x
        node = blas.Gemv(b.fresh("gemv"), transA=rc == 0)
        connect = (("_A", x), ("_x", a)), "_y"
    elif ranks == (1, 1):
        node = blas.Dot(b.fresh("dot"))
        connect = (("_x", a), ("_y", x)), "_result"
    else:
        raise b.unsupported(f"contraction of rank {ranks[0]} and {ranks[1]} operands")
    if 0 in lhs.type.shape or 0 in rhs.type.shape:  # empty contraction: zeros
        b.copy_into(Literal(element.numpy.type(0), op.result.type), target)
        b.bind(op.result, target)
        return
    node.implementation = implementation
    b.state.add_node(node)
    inputs, output = connect
    for conn, array in inputs:
        b.state.add_edge(b.read(array.name), None, node, conn, _memlet(array))
    b.state.add_edge(node, output, b.write(target.name), None, _memlet(target))
    b.bind(op.result, target)
