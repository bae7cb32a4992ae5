"""What a ``dot_general`` is, before anything is emitted: its dimensions as a product of
matrices (``Product``), the element type XLA computes it in, whether it is a matrix times
a vector (``Matvec``), and the kernels that may compute it (``kernel``; a convolution's:
``convolution_kernel``). The plan passes
decide from these facts (``plan/products.py``, ``plan/matvec.py``); the translators
(``linalg.py``, ``blas.py``) lower what was decided.

Element types follow XLA on the CPU: operands are converted to the result type when that
is the more precise one (XLA's operand upcasting: int8 x int8 -> int32, bf16 -> f32, f32
-> f64, integers -> floats); otherwise the product is computed in the operand type and
converted at the end (f32 x f32 -> bf16 rounds an f32 sum, f32 -> i32 saturates one).
f16/bf16 products accumulate in f32 and round once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import ml_dtypes

from .. import ir, symbolic
from ..machine import (
    EIGEN_ORDER_WORK,
    FEW_ROWS,
    NARROW_GROUPS,
    PARALLEL_PRODUCT_WORK,
    SKINNY_PART,
    SKINNY_SIDE,
    SMALL_CONVOLUTION,
    SMALL_PRODUCT,
    Machine,
)
from ..plan.annotations import ProductKernel
from . import dtypes
from .convolution_numbers import Convolution
from .dtypes import ElementType

#: element types OpenBLAS multiplies, with the letter of their cblas routines
BLAS_TYPES = {"f32": "s", "f64": "d", "complex<f32>": "c", "complex<f64>": "z"}
#: BLAS sizes, strides and leading dimensions are 32-bit ints
BLAS_INT_MAX = 2**31 - 1
#: Eigen's matrix-vector kernel (a product with one row) sums contractions this long or
#: longer in blocks of columns
EIGEN_GEMV_DEPTH = 128


# ------------------------------------------------------------------- element types


def precision_key(element: ElementType) -> tuple:
    """XLA's order of precision (primitive_util::HigherPrecisionType): complex over real,
    then a float's range and significand, then bit width, then signed over unsigned."""
    component = dtypes.element_type(ir.complex_part(element.element) if element.is_complex
                                    else element.element)
    overflow = significand = -1
    if component.is_float:
        info = ml_dtypes.finfo(component.numpy)
        overflow, significand = info.maxexp, info.nmant + 1
    bits = 1 if element.is_bool else component.bits
    return (element.is_complex, overflow, significand, bits,
            element.is_integer and not element.is_unsigned)


def compute_type(lhs: ElementType, rhs: ElementType, result: ElementType) -> ElementType:
    """The element type the product is computed in, as XLA's CPU backend chooses it."""
    compute = max(lhs, rhs, key=precision_key)
    return result if precision_key(result) > precision_key(compute) else compute


def accumulated(compute: ElementType) -> ElementType:
    """The type a product of ``compute`` sums in: f32 for 16-bit floats."""
    return dtypes.element_type("f32") if compute.is_stored_as_bits else compute


def converted(expression: str, source: ElementType, to: ElementType) -> str:
    """C++ for a value read from an array of ``source`` as a computed value of ``to``."""
    value = source.load(expression)
    if precision_key(source) == precision_key(to):
        return value
    return to.fit(f"h2d::convert<{to.compute}>({value})")


def stored(value: str, compute: ElementType, result: ElementType) -> str:
    """C++ for a computed value of ``compute`` as the result array holds it (rounded or
    wrapped once, to the result's precision)."""
    if precision_key(compute) != precision_key(result):
        value = f"h2d::convert<{result.compute}>({value})"
    return result.store(result.fit(value))


def row_major(shape: Sequence[int]) -> list[int]:
    strides, stride = [], 1
    for n in reversed(list(shape)):
        strides.append(stride)
        stride *= n
    return strides[::-1]


# ------------------------------------------------------------------- dimensions


def dimension_numbers(op: ir.Op) -> tuple[dict, tuple[tuple[int, ...], ...]]:
    """A dot_general's dimension numbers (its attribute's fields) and its lhs and rhs
    batching dimensions, then its lhs and rhs contracting dimensions."""
    numbers = op.attr("dot_dimension_numbers")
    fields = numbers.fields if isinstance(numbers, ir.StructAttr) else {}
    return fields, tuple(tuple(int(d) for d in fields.get(f"{side}_{kind}_dimensions", ()))
                         for kind in ("batching", "contracting") for side in ("lhs", "rhs"))


@dataclass(frozen=True)
class Product:
    """A dot_general's dimensions: ``batch`` and ``contract`` pair lhs and rhs dimensions,
    ``free`` lists each operand's free dimensions (in result order). ``without_units``
    drops the dimensions of size 1, which index nothing."""

    shapes: tuple[tuple[int, ...], tuple[int, ...]]
    result_shape: tuple[int, ...]
    batch: tuple[tuple[int, int, int], ...]  #: (lhs, rhs, result dimension)
    contract: tuple[tuple[int, int], ...]
    free: tuple[tuple[int, ...], tuple[int, ...]]

    @classmethod
    def of(cls, op: ir.Op) -> Product:
        """The product ``op`` (a dot_general, or a composite with its attributes) takes of
        its first two operands."""
        _, (lhs_batch, rhs_batch, lhs_contract, rhs_contract) = dimension_numbers(op)
        shapes = tuple(tuple(v.type.shape) for v in op.operands[:2])
        batch = tuple((lhs, rhs, j) for j, (lhs, rhs) in enumerate(zip(lhs_batch, rhs_batch)))
        contract = tuple(zip(lhs_contract, rhs_contract))
        free = tuple(tuple(d for d in range(len(shape)) if d not in
                           [pair[side] for pair in batch + contract])
                     for side, shape in enumerate(shapes))
        return cls(shapes, tuple(op.results[0].type.shape), batch, contract, free)

    def without_units(self) -> Product:
        lhs, rhs = self.shapes
        return Product(self.shapes, self.result_shape,
                       tuple(pair for pair in self.batch if lhs[pair[0]] != 1),
                       tuple(pair for pair in self.contract if lhs[pair[0]] != 1),
                       tuple(tuple(d for d in free if shape[d] != 1)
                             for free, shape in zip(self.free, self.shapes)))

    def size(self, side: int, dims: Sequence[int]) -> int:
        return math.prod(self.shapes[side][d] for d in dims)

    @property
    def m(self) -> int:
        return self.size(0, self.free[0])

    @property
    def n(self) -> int:
        return self.size(1, self.free[1])

    @property
    def k(self) -> int:
        return self.size(0, [pair[0] for pair in self.contract])

    @property
    def batch_size(self) -> int:
        return math.prod(self.shapes[0][pair[0]] for pair in self.batch)

    def result_dims(self, side: int) -> list[int | None]:
        """For each dimension of an operand, the result dimension it is read along (None:
        a contracting dimension)."""
        where: list[int | None] = [None] * len(self.shapes[side])
        for j, pair in enumerate(self.batch):
            where[pair[side]] = j
        first = len(self.batch) + (0 if side == 0 else len(self.free[0]))
        for j, d in enumerate(self.free[side], first):
            where[d] = j
        return where

    def result_positions(self, side: int, params: Sequence[str]) -> list[str]:
        """Where an operand is read at the result's index ``params`` (contracting
        dimensions, all of size 1 when this is asked, at 0)."""
        return ["0" if j is None else params[j] for j in self.result_dims(side)]

    def groups(self, side: int, operand, order) -> tuple[bool, int | None, int | None]:
        """Whether the operand's free and contracting groups (the latter in ``order``, a
        sequence of pairs of ``contract``) are single-strided, and their strides
        (``blas.Operand.group``)."""
        shape = self.shapes[side]
        ok_free, free_stride = operand.group(shape, self.free[side])
        ok_k, k_stride = operand.group(shape, [pair[side] for pair in order])
        return ok_free and ok_k, free_stride, k_stride

    def offsets(self, operands, indices: Sequence[str]) -> list[str]:
        """C++ offsets of the operands' and the result's matrices at the batch ``indices``
        (``operands``: each with its ``offset`` and ``strides``, ``blas.Operand``)."""
        out = []
        for side, operand in enumerate(operands):
            out.append(" + ".join([f"{operand.offset}LL"] + [
                f"{operand.strides[pair[side]]}LL * {index}"
                for pair, index in zip(self.batch, indices)]))
        # the result's batch dimensions lead, in the order of the pairs
        strides = row_major(self.result_shape)
        out.append(" + ".join(["0LL"] + [f"{strides[pair[2]]}LL * {index}"
                                         for pair, index in zip(self.batch, indices)]))
        return out


def is_symbolic_product(op: ir.Op) -> bool:
    return any(symbolic.is_symbolic(v.type) for v in (*op.operands[:2], op.results[0]))


@dataclass(frozen=True)
class Matvec:
    """A dot_general of a real matrix and a vector in one type: ``rows`` when it contracts
    the matrix's rows with the vector (``A @ v``: one dot per row), else its columns
    (``v @ A``: the rows combined with the vector's elements as weights)."""

    op: ir.Op
    matrix: ir.Value
    vector: ir.Value
    rows: bool

    @classmethod
    def of(cls, op: ir.Op) -> Matvec | None:
        if op.name != "stablehlo.dot_general":
            return None
        _, (lhs_batch, _, lhs_contract, rhs_contract) = dimension_numbers(op)
        lhs, rhs = op.operands
        if (lhs_batch or len(lhs_contract) != 1
                or {lhs.type.element, rhs.type.element, op.result.type.element} not in
                ({"f32"}, {"f64"}) or is_symbolic_product(op)):
            return None
        if (lhs.type.rank, rhs.type.rank) == (2, 1):
            return cls(op, lhs, rhs, lhs_contract[0] == 1)
        if (lhs.type.rank, rhs.type.rank) == (1, 2):
            return cls(op, rhs, lhs, rhs_contract[0] == 1)
        return None

    def passes_over_matrix(self, machine: Machine) -> bool:
        """Whether a pass over the matrix pays: it does not stay in cache between two
        reads (``machine.matvec_pass_bytes``), and BLAS is there to call."""
        m, n = self.matrix.type.shape
        return (m * n * dtypes.of(self.op.result.type).numpy.itemsize
                >= machine.matvec_pass_bytes and min(m, n) >= 2
                and max(m, n) <= BLAS_INT_MAX and machine.blas == "OpenBLAS")


# ------------------------------------------------------------------- kernels


def types(op: ir.Op) -> tuple[ElementType, ElementType, ElementType, ElementType]:
    """The element types of a product's two operands and result, and the type it is
    computed in (``compute_type``)."""
    lhs, rhs, result = (dtypes.of(v.type, op.name, op.location)
                        for v in (*op.operands[:2], op.results[0]))
    return lhs, rhs, result, compute_type(lhs, rhs, result)


def in_xla_order(product: Product, accumulate: ElementType, machine: Machine,
                 tuned: bool) -> bool:
    """Whether a complex product is summed in the order of XLA's (Eigen's) kernels: up to
    Eigen's depth block on this machine (longer ones are blocked, in an order OpenBLAS does
    not keep either) and, ``tuned``, up to ``EIGEN_ORDER_WORK`` multiply-adds, above which
    OpenBLAS's speed wins."""
    reduce = product.m == product.n == 1  # XLA's multiply and reduce: any length
    work = product.batch_size * product.m * product.n * product.k
    return ((reduce or product.k <= machine.eigen_depth(accumulate.element)
             and (product.m > 1 or product.k < EIGEN_GEMV_DEPTH))
            and (not tuned or work <= EIGEN_ORDER_WORK))


def kernel(op: ir.Op, machine: Machine, tuned: bool) -> ProductKernel | None:
    """The kernel that computes the contraction ``op`` (None where it is not one: no
    contracting elements or only one, an empty result, symbolic sizes). Untuned (the
    plain lowering): OpenBLAS where it multiplies the type, XLA's order for complex
    products that keep it, loops otherwise. ``tuned`` adds what is faster on ``machine``:
    loops for tiny products (a BLAS call's set-up costs more), gemms over blocks of the
    long side of a skinny product, one per thread."""
    product = Product.of(op)
    if product.k in (0, 1) or not op.results[0].type.size or is_symbolic_product(op):
        return None
    product = product.without_units()
    accumulate = accumulated(types(op)[3])
    m, n, k = product.m, product.n, product.k
    if accumulate.is_complex and in_xla_order(product, accumulate, machine, tuned):
        return ProductKernel("xla_order")
    small = tuned and not accumulate.is_complex and m * n * k <= SMALL_PRODUCT
    if (accumulate.element not in BLAS_TYPES or machine.blas != "OpenBLAS"
            or max(m, n, k) > BLAS_INT_MAX or small):
        return ProductKernel("loops")
    if tuned and few_rows(op, product, accumulate, machine):
        parallel = m * n * k >= PARALLEL_PRODUCT_WORK
        return ProductKernel("few_rows", machine.threads if parallel else 1)
    parts = max(1, min(machine.threads, max(m, n) // SKINNY_PART))
    if (tuned and m > 1 and n > 1 and not product.batch and min(m, n) <= SKINNY_SIDE
            and m * n * k >= PARALLEL_PRODUCT_WORK and parts > 1):
        return ProductKernel("skinny_gemm", parts)
    return ProductKernel("blas")


def few_rows(op: ir.Op, product: Product, accumulate: ElementType, machine: Machine) -> bool:
    """Whether the ``few_rows`` kernel computes the product (``machine.FEW_ROWS``): f32 or
    f64 of one type on a machine with 64-byte vectors, no batch, at most ``FEW_ROWS`` rows,
    at least a strip of columns (two vectors), B's contracting dimensions in order before
    its free ones (its rows read in place) and B within ``Machine.few_rows_bytes``."""
    rhs_contract = [pair[1] for pair in product.contract]
    width = accumulate.storage.bytes
    return (accumulate.element in ("f32", "f64") and machine.vector_bytes >= 64
            and all(t.element == accumulate.element for t in types(op)[:3])
            and not product.batch and 1 < product.m <= FEW_ROWS
            and product.n >= 2 * machine.vector_bytes // width
            and rhs_contract == sorted(rhs_contract)
            and max(rhs_contract) < min(product.free[1], default=len(product.shapes[1]))
            and product.k * product.n * width <= machine.few_rows_bytes())


def convolution_kernel(op: ir.Op, machine: Machine, tuned: bool) -> ProductKernel:
    """How the convolution ``op`` is computed: ``"blas"`` (im2col and GEMMs) where OpenBLAS
    multiplies its accumulation type, else ``"loops"`` (the loop nest). ``tuned`` adds
    what is faster on ``machine``: the loop nest for depthwise convolutions and for those
    too small for a BLAS call to pay off."""
    conv = Convolution.of(op)
    accumulate = accumulated(types(op)[3])
    blas = (accumulate.element in BLAS_TYPES and machine.blas == "OpenBLAS"
            and max(conv.depth, conv.group_out, conv.rows) <= BLAS_INT_MAX)
    if blas and tuned:
        work = conv.rows * conv.group_out * conv.depth
        blas = (conv.group_in * conv.group_out >= NARROW_GROUPS
                and (accumulate.is_complex or work > SMALL_CONVOLUTION))
    return ProductKernel("blas" if blas else "loops")
