"""Contractions: ``stablehlo.dot_general`` with any batch, contracting and free dimensions.

The result is laid out as the spec says (batch dimensions, then the lhs free ones, then the
rhs free ones), so every product is a loop over the batch of ``C[M, N] = A[M, K] B[K, N]``
where M, N and K are groups of dimensions. Each operand is read in place wherever its
groups are single-strided (several contracting dimensions contiguous in both operands
are one K; transposes become BLAS's Trans flags and leading dimensions; a broadcast batch
has stride 0), else it is copied once, transposed, into a layout that is.

Element types follow XLA on the CPU: operands are converted to the result type when that
is the more precise one (XLA's operand upcasting: int8 x int8 -> int32, bf16 -> f32, f32
-> f64, integers -> floats); otherwise the product is computed in the operand type and
converted at the end (f32 x f32 -> bf16 rounds an f32 sum, f32 -> i32 saturates one).
f16/bf16 products accumulate in f32 and round once. ``precision_config`` and
``algorithm`` change nothing on the CPU and are ignored, as the reference interpreter
does (XLA's CPU rejects the algorithms that would change precision).

* Complex products (an operand of another type converted as it is read) sum each
  element in the order of XLA's dot thunk, jaxlib's Eigen kernels (a multiply and a
  reduce for one row times one column), bit for bit, up to Eigen's depth block and
  ``EIGEN_ORDER_WORK`` multiply-adds (``_complex_product``, ``h2d::eigen_cdot``).
* f32/f64 and larger complex products go to OpenBLAS (cblas_?gemm, ?gemv when M or N is
  1, ?dot / ?dotu_sub when both are), one call per batch element, from a tasklet that
  loops over the batch; f16/bf16 and mixed float products are converted by their copy
  and take the same path. An operand that is a scalar times a matrix, read by nothing
  else (``alpha * A @ B``), is never written: BLAS's alpha scales the sum.
* Integers, booleans (OR of ANDs) and everything when OpenBLAS is missing are a loop nest
  in one tasklet, parallel over result rows: either blocks of a result row accumulated in
  registers while streaming rows of B (when B's free dimension is contiguous), or one
  register sum per element with K innermost.
* A contraction of size 1 (no contracting dimensions: an outer product) is a plain
  product, one map over the result, as XLA computes it (so -0.0 stays -0.0).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import math
import warnings
from dataclasses import dataclass
from types import MappingProxyType
from typing import Sequence, Union

import dace
import ml_dtypes
import numpy as np

from .. import ir, symbolic
from ..optimize import shared_threads
from . import dtypes
from .bindings import (
    Array,
    Axis,
    Binding,
    Literal,
    Pending,
    Reshaped,
    View,
    cpp_size,
    dace_shape,
    map_params,
    view_of,
)
from .builder import Builder
from .cpp import Loop, Writer
from .dtypes import ElementType
from .emitter import Element, Whole
from .literals import literal
from .registry import register, register_elementwise

#: element types OpenBLAS multiplies, with the letter of their cblas routines
BLAS_TYPES = {"f32": "s", "f64": "d", "complex<f32>": "c", "complex<f64>": "z"}
#: BLAS sizes, strides and leading dimensions are 32-bit ints
BLAS_INT_MAX = 2**31 - 1
#: bytes of result row a register block of the loop kernel accumulates
REGISTER_BLOCK_BYTES = 256
#: multiply-adds below which the loop kernel's rows are not worth parallelising
PARALLEL_PRODUCT_WORK = 1 << 22
#: multiply-adds per batch element up to which the loop kernel beats a BLAS call
SMALL_PRODUCT = 4096
#: a product with a side this short and ``PARALLEL_PRODUCT_WORK`` multiply-adds is shared
#: out among the threads in blocks of the long side (``_skinny_gemm``): at least
#: SKINNY_PART long, their edges on multiples of SKINNY_BLOCK
SKINNY_SIDE = 32
SKINNY_PART = 512
SKINNY_BLOCK = 64


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


def op_types(b: Builder, op: ir.Op, what: str
             ) -> tuple[ElementType, ElementType, ElementType, ElementType]:
    """The element types of a product-like op's two operands and result, and the type it
    computes in (``compute_type``); a float ``what`` cannot be narrowed to 2/4-bit ints."""
    lhs, rhs, result = (dtypes.of(v.type, op.name, op.location)
                        for v in (*op.operands[:2], op.result))
    compute = compute_type(lhs, rhs, result)
    if result.narrow_bits and not compute.is_integer:
        raise b.unsupported(f"a {compute.element} {what} converted to {result.element}",
                            [f"integer results of integer {what}s"])
    return lhs, rhs, result, compute


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


# ---------------------------------------------------------------------- operands


@dataclass(frozen=True)
class Operand:
    """An operand as the product reads it: its element ``(i_0, i_1, ...)`` is
    ``array[offset + sum(strides[d] * i_d)]`` (flat), in ``array``'s element type."""

    array: Array
    offset: int
    strides: tuple[int, ...]

    @property
    def element(self) -> ElementType:
        return dtypes.of(self.array.type)

    def group(self, shape: Sequence[int], dims: Sequence[int]) -> tuple[bool, int | None]:
        """Whether ``dims`` (in this order) index like one dimension, and its stride (None
        for a group of one element, which any stride reads)."""
        dims = [d for d in dims if shape[d] != 1]
        for d, e in zip(dims, dims[1:]):
            if self.strides[d] != self.strides[e] * shape[e]:
                return False, None
        return True, (self.strides[dims[-1]] if dims else None)


def row_major(shape: Sequence[int]) -> list[int]:
    strides, stride = [], 1
    for n in reversed(list(shape)):
        strides.append(stride)
        stride *= n
    return strides[::-1]


def strided_operand(binding: Union[Array, Literal, View]) -> Operand | None:
    """The operand read where it lies: an array, or a view of one (any affine
    re-indexing: transpose, slice, reverse, broadcast); None for a literal."""
    if binding.is_literal:
        return None
    if not isinstance(binding, View):
        return Operand(binding, 0, tuple(row_major(binding.type.shape)))
    offset, strides = 0, [0] * binding.type.rank
    for stride, axis in zip(row_major(dace_shape(binding.source.type)), binding.axes):
        offset += stride * axis.offset
        if axis.dim is not None:
            strides[axis.dim] += stride * axis.stride
    return Operand(binding.source, offset, tuple(strides))


def _operand_in_place(b: Builder, value: ir.Value) -> Operand | None:
    """``strided_operand`` of ``value``; a reshape of a whole array (``Reshaped``) is that
    array's memory in the reshape's row-major layout, read where it lies, not copied."""
    bound = b.binding(value)
    if isinstance(bound, Reshaped) and isinstance(bound.source, Array) \
            and bound.axes is None and not bound.materialised:
        return Operand(bound.source, 0, tuple(row_major(value.type.shape)))
    return strided_operand(b.readable(value))


def read_element(binding: Union[Array, Literal, View], element: ElementType,
                 positions: Sequence[str]) -> tuple[str, dict[str, Element]]:
    """C++ for the element of ``binding`` at logical ``positions`` (in storage form) and
    the inputs it needs: a literal is written out, anything else read through the
    connector ``__in``."""
    if binding.is_literal:
        return literal(binding.value, element, storage=True), {}
    return "__in", {"__in": Element(binding, positions)}


def _copy(b: Builder, value: ir.Value, order: Sequence[int],
          convert: tuple[ElementType, ElementType] | None) -> Operand:
    """One map that copies ``value`` into a new array with its dimensions in ``order``;
    ``convert`` (compute, storage): its elements converted as the product converts them
    and stored as ``storage``, else copied as they are."""
    binding = b.readable(value)
    source = dtypes.of(value.type)
    shape = value.type.shape
    storage = convert[1] if convert else source
    t = ir.TensorType(tuple(shape[d] for d in order), storage.element)
    copy = b.emit.add_array(f"{value.name.lstrip('%')}_t", t)
    params = map_params(len(order))
    positions = [params[order.index(d)] for d in range(len(shape))]
    read, inputs = read_element(binding, source, positions)
    if convert:
        read = storage.store(converted(read, source, convert[0]))
    _sequential_map(b, "dot_operand", t, inputs, f"__out = {read};", {"__out": Element(copy)})
    strides = [0] * len(shape)
    for d, stride in zip(order, row_major(t.shape)):
        strides[d] = stride
    return Operand(copy, 0, tuple(strides))


def _sequential_map(b: Builder, label: str, t: ir.TensorType, inputs: dict, code: str,
                    outputs: dict) -> None:
    """``Emitter.map``, but run by one thread: for the copies next to a BLAS call, which
    cost O(n^2) to its O(n^3), and whose OpenMP workers, spinning after the map, would take
    the cores OpenBLAS's threads need (and the reverse)."""
    b.emit.map(label, t.shape, code, inputs, outputs, schedule=dace.ScheduleType.Sequential)


# ------------------------------------------------------------------- the product


@dataclass(frozen=True)
class _Product:
    """A dot_general's dimensions: ``batch`` and ``contract`` pair lhs and rhs dimensions,
    ``free`` lists each operand's free dimensions (in result order). ``without_units``
    drops the dimensions of size 1, which index nothing."""

    shapes: tuple[tuple[int, ...], tuple[int, ...]]
    result_shape: tuple[int, ...]
    batch: tuple[tuple[int, int, int], ...]  #: (lhs, rhs, result dimension)
    contract: tuple[tuple[int, int], ...]
    free: tuple[tuple[int, ...], tuple[int, ...]]

    @classmethod
    def of(cls, op: ir.Op, batch, contract) -> _Product:
        shapes = tuple(tuple(v.type.shape) for v in op.operands)
        batch = tuple((lhs, rhs, j) for j, (lhs, rhs) in enumerate(batch))
        free = tuple(tuple(d for d in range(len(shape)) if d not in
                           [pair[side] for pair in batch + contract])
                     for side, shape in enumerate(shapes))
        return cls(shapes, tuple(op.result.type.shape), batch, contract, free)

    def without_units(self) -> _Product:
        lhs, rhs = self.shapes
        return _Product(self.shapes, self.result_shape,
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

    def groups(self, side: int, operand: Operand, order) -> tuple[bool, int | None, int | None]:
        """Whether the operand's free and contracting groups (the latter in ``order``, a
        sequence of pairs of ``contract``) are single-strided, and their strides."""
        shape = self.shapes[side]
        ok_free, free_stride = operand.group(shape, self.free[side])
        ok_k, k_stride = operand.group(shape, [pair[side] for pair in order])
        return ok_free and ok_k, free_stride, k_stride

    def offsets(self, operands: Sequence[Operand], indices: Sequence[str]) -> list[str]:
        """C++ offsets of the operands' and the result's matrices at the batch ``indices``."""
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


def _dot_general_shape(inference, op, operands, shapes, knowns, env):
    numbers = op.attr("dot_dimension_numbers")
    lb = numbers.get("lhs_batching_dimensions", ())
    rb = numbers.get("rhs_batching_dimensions", ())
    lc = numbers.get("lhs_contracting_dimensions", ())
    rc = numbers.get("rhs_contracting_dimensions", ())
    lhs, rhs = shapes
    batch = [inference.unify(lhs[i], rhs[j], op) for i, j in zip(lb, rb)]
    for i, j in zip(lc, rc):
        inference.unify(lhs[i], rhs[j], op)
    free_l = [d for k, d in enumerate(lhs) if k not in lb and k not in lc]
    free_r = [d for k, d in enumerate(rhs) if k not in rb and k not in rc]
    return [tuple(batch + free_l + free_r)]


def _dimension_numbers(op: ir.Op) -> tuple[dict, tuple[tuple[int, ...], ...]]:
    """A dot_general's dimension numbers (its attribute's fields) and its lhs and rhs
    batching dimensions, then its lhs and rhs contracting dimensions."""
    numbers = op.attr("dot_dimension_numbers")
    fields = numbers.fields if isinstance(numbers, ir.StructAttr) else {}
    return fields, tuple(tuple(int(d) for d in fields.get(f"{side}_{kind}_dimensions", ()))
                         for kind in ("batching", "contracting") for side in ("lhs", "rhs"))


@register("stablehlo.dot_general", shape_rule=_dot_general_shape, whole_result=True)
def dot_general(b: Builder, op: ir.Op) -> list[Binding]:
    computed = b.scope.env.maps[0].get(op.result.name)
    if computed is not None:  # by an earlier product's pass over the same matrix
        return [computed]
    paired = _paired_matvecs(b, op)
    if paired is not None:
        return [paired]
    computed = _computed_matvec(b, op)
    if computed is not None:
        return [computed]
    lhs, rhs = op.operands
    fields, (lhs_batch, rhs_batch, lhs_contract, rhs_contract) = _dimension_numbers(op)
    if len(lhs_batch) != len(rhs_batch) or len(lhs_contract) != len(rhs_contract):
        raise b.unsupported(f"dimension numbers {dict(fields)} pair unequal numbers of "
                            "dimensions")
    lhs_element, rhs_element, result, compute = op_types(b, op, "product")
    full = _Product.of(op, tuple(zip(lhs_batch, rhs_batch)),
                       tuple(zip(lhs_contract, rhs_contract)))
    if full.k == 1 and _elementwise(b, op, (lhs_element, rhs_element, result), compute):
        return b.add_elementwise(_broadcast_product(b, op, full))
    # every path of a contraction (``_product``: also where k is a symbol) in the result's
    # own type writes it through a pointer
    whole = full.k not in (0, 1) and not compute.is_stored_as_bits \
        and precision_key(compute) == precision_key(result)
    target = b.allocate_result(op.result, whole=whole)
    if op.result.type.size == 0:
        pass
    elif full.k == 0:  # an empty sum
        b.emit.copy(Literal(result.numpy.type(0), op.result.type), target)
    elif full.k == 1:
        _outer_product(b, op, full, compute, target)
    else:
        _product(b, op, full.without_units(), compute, target)
    return [target]


def _product(b: Builder, op: ir.Op, product: _Product, compute: ElementType,
             target: Array) -> None:
    """A contraction: by OpenBLAS, in XLA's order (complex), or in a loop nest."""
    accumulate = dtypes.element_type("f32") if compute.is_stored_as_bits else compute
    sizes = (product.m, product.n, product.k)
    if symbolic.is_symbolic(op.result.type) or any(map(symbolic.is_symbolic,
                                                       (v.type for v in op.operands))):
        _symbolic_product(b, op, product, (compute, accumulate), target)
        return
    if accumulate.is_complex and _in_eigen_order(product, accumulate):
        _complex_product(b, op, product, compute, target)
        return
    small = not accumulate.is_complex and math.prod(sizes) <= SMALL_PRODUCT
    if (accumulate.element in BLAS_TYPES and blas_implementation() == "OpenBLAS"
            and max(sizes) <= BLAS_INT_MAX and not small):
        _blas_product(b, op, product, (compute, accumulate), target)
    else:
        _loop_product(b, op, product, compute, target)


#: the attribute of a dot_general made by ``_broadcast_product``: its operands are views of
#: the real ones in the result's shape, so its product is elementwise
BROADCAST_OPERANDS = "h2d.broadcast_operands"

register_elementwise("stablehlo.dot_general",
                     lambda op, args, in_types, out_type: f"h2d::mul({args[0]}, {args[1]})",
                     when=lambda op: bool(op.attr(BROADCAST_OPERANDS)))


def _elementwise(b: Builder, op: ir.Op, elements: Sequence[ElementType],
                 compute: ElementType) -> bool:
    """Whether a product without a contraction (or with one of size 1) is the multiply of
    its operands broadcast to the result: in one element type, computed in it, and not to
    be written into an array of another shape (``whole_result``) or of symbolic size."""
    t = op.result.type
    destination = b.scope.destinations.get(op.result.name)
    return (not symbolic.is_symbolic(t) and not any(
                symbolic.is_symbolic(v.type) for v in op.operands)
            and len({e.element for e in elements}) == 1 and t.size > 0
            and precision_key(compute) == precision_key(elements[-1])
            and (destination is None or b.shaped_as(destination, op.result)))


def _broadcast_product(b: Builder, op: ir.Op, product: _Product) -> ir.Op:
    """An outer product as an elementwise op of the cluster of its shape: a dot_general
    of views of the operands broadcast to the result (``BROADCAST_OPERANDS``), bound in
    the scope and made the producer of the result. Its readers compute it where they
    read it, as XLA fuses such a product into them: a transpose of it, or an add of a
    bias, writes the result's array in the order it is read, with no array between."""
    t = op.result.type
    operands = []
    for side, value in enumerate(op.operands):
        axes = [Axis(None, 0, 0) if j is None else Axis(j) for j in product.result_dims(side)]
        broadcast = ir.Value(f"{op.result.name}_operand{side}",
                             ir.TensorType(t.shape, value.type.element))
        b.scope.env[broadcast.name] = view_of(b.readable(value), axes, broadcast.type)
        operands.append(broadcast)
    elementwise = ir.Op(op.name, tuple(operands), op.results,
                        MappingProxyType({BROADCAST_OPERANDS: True}), location=op.location)
    b.scope.producers[op.result.name] = elementwise
    return elementwise


def _outer_product(b: Builder, op: ir.Op, product: _Product, compute: ElementType,
                   target: Array) -> None:
    """No contraction (or one of size 1) where the product is not elementwise: result =
    lhs * rhs, one map over the result."""
    params = map_params(op.result.type.rank)
    inputs, args = {}, []
    for side, value in enumerate(op.operands):
        element = dtypes.of(value.type)
        binding = b.readable(value)
        if binding.is_literal:
            read = literal(binding.value, element, storage=True)
        else:
            inputs[f"__in{side}"] = Element(binding, product.result_positions(side, params))
            read = f"__in{side}"
        args.append(converted(read, element, compute))
    value = stored(compute.fit(f"h2d::mul({args[0]}, {args[1]})"), compute,
                    dtypes.of(op.result.type))
    b.emit.map("outer_product", target.type.shape, f"__out = {value};", inputs,
               {"__out": Element(target)})


def _arrange(b: Builder, op: ir.Op, product: _Product, fits,
             convert: tuple[ElementType, ElementType] | None,
             values: Sequence[ir.Value] | None = None
             ) -> tuple[tuple[Operand, Operand], tuple]:
    """Both operands (``values``, else ``op``'s), and the order of the contracting pairs:
    each read in place where ``fits(side, operand, order)`` accepts it (and it holds
    ``convert``'s storage type), else copied once into the layout batch x free x K (lhs)
    or batch x K x free (rhs)."""
    values = list(values or op.operands)
    in_place = [_operand_in_place(b, v) for v in values]
    for side, operand in enumerate(in_place):
        if (operand is not None and convert is not None
                and precision_key(operand.element) != precision_key(convert[1])):
            in_place[side] = None
    orders = [product.contract]
    for side, operand in enumerate(in_place):  # the one order that makes its K one stride
        if operand is not None:
            orders.append(tuple(sorted(product.contract,
                                       key=lambda pair: -operand.strides[pair[side]])))

    def accepted(side, order):
        return in_place[side] is not None and fits(side, in_place[side], order)

    order = next((o for o in orders if accepted(0, o) and accepted(1, o)),
                 next((o for o in orders if accepted(0, o) or accepted(1, o)),
                      product.contract))
    operands = []
    for side, value in enumerate(values):
        if accepted(side, order):
            operands.append(in_place[side])
            continue
        batch = [pair[side] for pair in product.batch]
        contract = [pair[side] for pair in order]
        free = list(product.free[side])
        layout = batch + (free + contract if side == 0 else contract + free)
        layout += [d for d in range(value.type.rank) if d not in layout]  # unit dims
        operands.append(_copy(b, value, layout, convert))
    return (operands[0], operands[1]), order


# -------------------------------------------------------------------------- BLAS


def _matrix(rows: int, row_stride: int | None, cols: int, col_stride: int | None
            ) -> tuple[bool, int] | None:
    """A rows x cols matrix as row-major BLAS reads it: (transposed, leading dimension),
    None if neither of its strides is 1 (or the other is below BLAS's minimum)."""
    if col_stride in (None, 1):
        ld = row_stride if row_stride is not None else max(1, cols)
        if max(1, cols) <= ld <= BLAS_INT_MAX:
            return False, ld
    if row_stride in (None, 1):
        ld = col_stride if col_stride is not None else max(1, rows)
        if max(1, rows) <= ld <= BLAS_INT_MAX:
            return True, ld
    return None


def _increment(stride: int | None) -> int | None:
    """A vector's BLAS increment (positive: a negative one walks backwards from the end)."""
    if stride is None:
        return 1
    return stride if 0 < stride <= BLAS_INT_MAX else None


def _trans(transposed: bool) -> str:
    return "CblasTrans" if transposed else "CblasNoTrans"


def _blas_product(b: Builder, op: ir.Op, product: _Product,
                  convert: tuple[ElementType, ElementType], target: Array) -> None:
    """``C = A B`` per batch element by one OpenBLAS call: dot, gemv or gemm."""
    from dace.libraries.blas.environments.openblas import OpenBLAS

    m, n, k = product.m, product.n, product.k
    accumulate = convert[1]

    def fits(side, operand, order):
        ok, free, contract = product.groups(side, operand, order)
        if not ok:
            return False
        if (m, n)[side] == 1:  # a vector
            return _increment(contract) is not None
        if side == 0:
            return _matrix(m, free, k, contract) is not None
        return _matrix(k, contract, n, free) is not None

    result = dtypes.of(op.result.type)
    direct = precision_key(accumulate) == precision_key(result)
    values, inputs, outputs = list(op.operands), {}, {}
    scaled = _scaled_operand(b, op, target) if direct and not accumulate.is_complex else None
    if scaled is not None:
        side, values[side], scale = scaled
    (a, x), order = _arrange(b, op, product, fits, convert, values)
    _, a_free, a_k = product.groups(0, a, order)
    _, x_free, x_k = product.groups(1, x, order)
    out = target if direct else b.emit.add_array(
        "dot_sum", ir.TensorType(tuple(op.result.type.shape), accumulate.element))
    prefix = BLAS_TYPES[accumulate.element]
    code = Writer()
    if accumulate.is_complex:
        code.line(f"const {accumulate.compute} __one(1), __zero(0);")
        alpha, beta = "&__one", "&__zero"
    else:
        alpha, beta = "1", "0"
    if scaled is not None:
        alpha = _scale_by(b, code, scale, (a, x)[side], "__a" if side == 0 else "__b",
                          inputs, outputs)
    indices = [f"__b{j}" for j in range(len(product.batch))]
    pa, px, pc = (f"{p} + ({offset})" for p, offset in
                  zip(("__a", "__b", "__c"), product.offsets((a, x), indices)))
    with code.loops(*(Loop(index, "0", str(product.shapes[0][pair[0]]))
                      for index, pair in zip(indices, product.batch)), scalar=bool(indices)):
        if m == 1 and n == 1:
            vectors = f"{k}, {pa}, {_increment(a_k)}, {px}, {_increment(x_k)}"
            if accumulate.is_complex:
                code.line(f"cblas_{prefix}dotu_sub({vectors}, {pc});")
            else:
                code.line(f"*({pc}) = {alpha} * cblas_{prefix}dot({vectors});")
        elif n == 1:  # y = A x
            transposed, ld = _matrix(m, a_free, k, a_k)
            rows, cols = (k, m) if transposed else (m, k)
            code.line(f"cblas_{prefix}gemv(CblasRowMajor, {_trans(transposed)}, {rows}, "
                      f"{cols}, {alpha}, {pa}, {ld}, {px}, {_increment(x_k)}, {beta}, {pc}, "
                      "1);")
        elif m == 1:  # y = B^T x
            transposed, ld = _matrix(k, x_k, n, x_free)
            rows, cols = (n, k) if transposed else (k, n)
            code.line(f"cblas_{prefix}gemv(CblasRowMajor, {_trans(not transposed)}, {rows}, "
                      f"{cols}, {alpha}, {px}, {ld}, {pa}, {_increment(a_k)}, {beta}, {pc}, "
                      "1);")
        else:
            trans_a, lda = _matrix(m, a_free, k, a_k)
            trans_b, ldb = _matrix(k, x_k, n, x_free)

            def gemm(rows: str, cols: str, pa: str, px: str, pc: str) -> str:
                return (f"cblas_{prefix}gemm(CblasRowMajor, {_trans(trans_a)}, "
                        f"{_trans(trans_b)}, {rows}, {cols}, {k}, {alpha}, {pa}, {lda}, {px}, "
                        f"{ldb}, {beta}, {pc}, {n});")

            parts = max(1, min(shared_threads(), max(m, n) // SKINNY_PART))
            if indices or min(m, n) > SKINNY_SIDE or m * n * k < PARALLEL_PRODUCT_WORK \
                    or parts == 1:
                code.line(gemm(str(m), str(n), pa, px, pc))
            else:
                _skinny_gemm(code, m, n, parts, (trans_a, lda), (trans_b, ldb),
                             (pa, px, pc), gemm)
        if accumulate.is_complex and k > 1:
            code.line(f"h2d::no_negative_zero_sums({pc}, {m * n});")
    b.emit.map("blas", (), code.text(), {"__a": Whole(a.array), "__b": Whole(x.array), **inputs},
               {"__c": Whole(out), **outputs}, environments=[OpenBLAS.full_class_path()])
    if not direct:
        _sequential_map(b, "dot_result", op.result.type, {"__in": Element(out)},
                        f"__out = {stored('__in', accumulate, result)};",
                        {"__out": Element(target)})


@dataclass(frozen=True)
class _Matvec:
    """A dot_general of a real matrix and a vector in one type: ``rows`` when it contracts
    the matrix's rows with the vector (``A @ v``: one dot per row), else its columns
    (``v @ A``: the rows combined with the vector's elements as weights)."""

    op: ir.Op
    matrix: ir.Value
    vector: ir.Value
    rows: bool

    @classmethod
    def of(cls, op: ir.Op) -> _Matvec | None:
        if op.name != "stablehlo.dot_general":
            return None
        _, (lhs_batch, _, lhs_contract, rhs_contract) = _dimension_numbers(op)
        lhs, rhs = op.operands
        if (lhs_batch or len(lhs_contract) != 1
                or {lhs.type.element, rhs.type.element, op.result.type.element} not in
                ({"f32"}, {"f64"}) or any(symbolic.is_symbolic(v.type)
                                          for v in (lhs, rhs, op.result))):
            return None
        if (lhs.type.rank, rhs.type.rank) == (2, 1):
            return cls(op, lhs, rhs, lhs_contract[0] == 1)
        if (lhs.type.rank, rhs.type.rank) == (1, 2):
            return cls(op, rhs, lhs, rhs_contract[0] == 1)
        return None


#: a row-major matrix of at least this many bytes that two matrix-vector products read
#: is read once for both (``_paired_matvecs``), and one that an elementwise expression
#: computes for one such product is never written whole (``_computed_matvec``); a smaller
#: one stays in the caches
MATVEC_PASS_BYTES = 1 << 21
#: the rows that both products read in turn, or that the computed matrix's buffer holds,
#: are about this many bytes (they stay in L2)
MATVEC_BLOCK_BYTES = 1 << 19


def _paired_matvecs(b: Builder, op: ir.Op) -> Array | None:
    """``op``'s result, if ``op`` and a later product of the same block read the same
    large row-major matrix with a vector each (NPBench's mvt: ``A @ y1`` and ``y2 @ A``,
    bicg; atax's ``(A @ x) @ A``, whose second vector is the first product): both computed
    in one pass over the matrix, block of rows by block of rows, each block read by both
    gemv calls in turn while it is in L2, where two products read the matrix from memory
    twice (XLA's way). The later product's result is bound now; its own turn takes it.
    Its vector must be known already, or be ``op``'s result when ``op`` takes row dots and
    the later one combines rows (each row's weight is then ready when the row is read)."""
    first = _Matvec.of(op)
    if first is None:
        return None
    m, n = first.matrix.type.shape
    element = dtypes.of(op.result.type)
    if (m * n * element.numpy.itemsize < MATVEC_PASS_BYTES or min(m, n) < 2
            or max(m, n) > BLAS_INT_MAX or blas_implementation() != "OpenBLAS"):
        return None
    second = None
    for later in b.scope.ops[b.scope.now + 1:]:
        candidate = _Matvec.of(later)
        if candidate is None or candidate.matrix.name != first.matrix.name:
            continue
        chained = candidate.vector.name == op.result.name
        if (chained and first.rows and not candidate.rows) or (
                not chained and b.scope.env.get(candidate.vector.name) is not None):
            second = candidate
            break
    # read only now: a pending matrix is written (where one product would fold a scale)
    matrix = _operand_in_place(b, first.matrix) if second is not None else None
    if matrix is None or matrix.strides != (n, 1) or matrix.element.element != element.element:
        return None
    products = (first, second)
    targets = [b.allocate_result(p.op.result, whole=True) for p in products]
    inputs, outputs = {"__a": Whole(matrix.array)}, {}
    vectors = []  # per product: (pointer to its vector's first element, increment)
    for k, product in enumerate(products):
        outputs[f"__y{k}"] = Whole(targets[k])
        if product.vector.name == op.result.name:
            vectors.append(("__y0", 1))
            continue
        vector, increment = _vector_operand(b, product.vector, element)
        inputs[f"__v{k}"] = Whole(vector.array)
        vectors.append((f"__v{k} + {vector.offset}LL", increment))
    block = [f"const {element.storage} * __block = __a + {matrix.offset}LL + __r * {n}LL;"]
    _blocked_matvecs(b, products, vectors, _RowBlocks.of(m, n, element), block, inputs,
                     outputs, second.op)
    b.scope.env[second.op.result.name] = targets[1]
    return targets[0]


def _vector_operand(b: Builder, value: ir.Value, element: ElementType
                    ) -> tuple[Operand, int]:
    """A gemv's vector ``value`` and its increment: read where it lies if it is strided
    and of the product's type, else copied contiguous."""
    vector = _operand_in_place(b, value)
    increment = vector and _increment(vector.strides[0])
    if increment is None or vector.element.element != element.element:
        return _copy(b, value, [0], None), 1
    return vector, increment


@dataclass(frozen=True)
class _RowBlocks:
    """How blocked matrix-vector products go over an m x n matrix: blocks of ``rows`` rows
    (about ``MATVEC_BLOCK_BYTES``, so that a block stays in L2 between the passes over it),
    ``count`` of them, shared out among ``parts`` threads."""

    m: int
    n: int
    rows: int
    count: int
    parts: int

    @classmethod
    def of(cls, m: int, n: int, element: ElementType) -> _RowBlocks:
        rows = max(1, min(m, MATVEC_BLOCK_BYTES // (n * element.numpy.itemsize)))
        count = -(-m // rows)
        return cls(m, n, rows, count, max(1, min(shared_threads(), count)))


def _blocked_matvecs(b: Builder, products: Sequence[_Matvec], vectors: list[tuple[str, int]],
                     blocks: _RowBlocks, block: list[str], inputs: dict, outputs: dict,
                     origin: ir.Op | None = None) -> None:
    """One tasklet that computes ``products`` (results ``__y<k>``, vectors at ``vectors``:
    pointer and increment) of one m x n matrix a block of rows at a time, the blocks shared
    out among the threads: ``block`` are the statements that make ``__block`` point to the
    rows ``__r`` to ``__r + __rows`` (of thread ``__part``), which each product's gemv then
    reads in turn. A product that weighs the rows sums each thread's part apart
    (``__p<k>``) and adds them up after. ``origin``: a later op that the tasklet computes
    too, named in its code for the profiler."""
    m, n, parts = blocks.m, blocks.n, blocks.parts
    element = dtypes.of(products[0].op.result.type)
    prefix = BLAS_TYPES[element.element]
    code = Writer()
    if origin is not None:
        with b.emit.at(origin):
            code.line(b.emit.origin())
    for k, product in enumerate(products):
        if not product.rows and parts > 1:  # the weighted rows of each part, summed after
            partial = b.emit.add_array("matvec_part", ir.TensorType((parts - 1, n),
                                                                    element.element))
            outputs[f"__p{k}"] = Whole(partial)
    code.line("#ifdef OPENBLAS_VERSION", "const int __blas_threads = openblas_get_num_threads();",
              "openblas_set_num_threads(1);", "#endif")
    if parts > 1:
        code.line("#pragma omp parallel for schedule(static)")
    with code.block(f"for (int __part = 0; __part < {parts}; ++__part)"):
        code.line(f"const int64_t __first = {blocks.count}LL * __part / {parts} * {blocks.rows};",
                  f"const int64_t __last = std::min<int64_t>({m}LL, {blocks.count}LL * "
                  f"(__part + 1) / {parts} * {blocks.rows});")
        with code.block(f"for (int64_t __r = __first; __r < __last; __r += {blocks.rows})"):
            code.line(f"const int __rows = (int)std::min<int64_t>({blocks.rows}, __last - __r);")
            code.lines(block)
            for k, (product, (vector, increment)) in enumerate(zip(products, vectors)):
                if product.rows:
                    code.line(f"cblas_{prefix}gemv(CblasRowMajor, CblasNoTrans, __rows, {n}, "
                              f"1, __block, {n}, {vector}, {increment}, 0, __y{k} + __r, 1);")
                else:
                    total = f"(__part == 0 ? __y{k} : __p{k} + (__part - 1) * {n}LL)" \
                        if parts > 1 else f"__y{k}"
                    code.line(f"cblas_{prefix}gemv(CblasRowMajor, CblasTrans, __rows, {n}, "
                              f"1, __block, {n}, {vector} + __r * {increment}LL, {increment}, "
                              f"__r == __first ? 0 : 1, {total}, 1);")
    for k, product in enumerate(products):
        if not product.rows and parts > 1:
            with code.block(f"for (int __part = 1; __part < {parts}; ++__part)"):
                code.line(f"cblas_{prefix}axpy({n}, 1, __p{k} + (__part - 1) * {n}LL, 1, "
                          f"__y{k}, 1);")
    code.line("#ifdef OPENBLAS_VERSION", "openblas_set_num_threads(__blas_threads);", "#endif")
    from dace.libraries.blas.environments.openblas import OpenBLAS

    b.emit.map("matvecs", (), code.text(), inputs, outputs,
               environments=[OpenBLAS.full_class_path()])


def _computed_matvec(b: Builder, op: ir.Op) -> Array | None:
    """``op``'s result, if ``op`` multiplies a vector and a large matrix that an
    elementwise expression computes and only ``op`` reads (NPBench's gesummv,
    ``(alpha * A + beta * B) @ x``): the matrix is computed a block of rows at a time into
    a buffer that stays in L2, which gemv reads from there, so it is never written to
    memory and read back (XLA writes it: two passes over the matrix of the three). Not a
    scalar times a matrix already written: BLAS's alpha scales that (``_scaled_operand``),
    reading the matrix where it lies."""
    product = _Matvec.of(op)
    if product is None or _scales_written(b, product.matrix):
        return None
    m, n = product.matrix.type.shape
    element = dtypes.of(op.result.type)
    binding = b.binding(product.matrix)
    if (m * n * element.numpy.itemsize < MATVEC_PASS_BYTES or min(m, n) < 2
            or max(m, n) > BLAS_INT_MAX or blas_implementation() != "OpenBLAS"
            or not isinstance(binding, Pending) or not binding.unresolved
            or binding.cluster.closed or product.matrix.name in b.scope.destinations
            or not b.scope.only_user(product.matrix, op)):
        return None
    reads, lines, (expression,) = b.pointer_reads([product.matrix], ["__r + __i", "__j"], op)
    if "__in0" in reads:  # not computed here after all: its array was written
        return None
    vector, increment = _vector_operand(b, product.vector, element)
    target = b.allocate_result(op.result, whole=True)
    blocks = _RowBlocks.of(m, n, element)
    buffer = b.emit.add_array("matvec_block", ir.TensorType(
        (blocks.parts * blocks.rows * n,), element.element))
    fill = Writer()
    fill.line(f"{element.storage} * __block = __buffer + __part * {blocks.rows * n}LL;")
    with fill.loops(Loop("__i", "0", "__rows"), Loop("__j", "0", str(n))):
        fill.lines(lines)
        fill.line(f"__block[__i * {n}LL + __j] = {element.store(expression)};")
    inputs = {**reads, "__v0": Whole(vector.array)}
    outputs = {"__y0": Whole(target), "__buffer": Whole(buffer)}
    _blocked_matvecs(b, [product], [(f"__v0 + {vector.offset}LL", increment)], blocks,
                     fill.text().splitlines(), inputs, outputs)
    return target


def _scales_written(b: Builder, value: ir.Value) -> bool:
    """Whether ``value`` is a broadcast scalar times a value already in an array."""
    producer = b.scope.producers.get(value.name)
    if producer is None or producer.name != "stablehlo.multiply":
        return False
    for factor, other in (producer.operands, producer.operands[::-1]):
        matrix = b.binding(other)
        if _broadcast_scalar(b, factor) is not None and not (
                matrix.is_pending and matrix.pending.unresolved):
            return True
    return False


def _skinny_gemm(code: Writer, m: int, n: int, parts: int, a: tuple[bool, int],
                 x: tuple[bool, int], pointers: tuple[str, str, str], gemm) -> None:
    """A product with one side of at most ``SKINNY_SIDE`` (a small batch through a large
    layer: 8 x 30000 by 30000 x 10000) as single-threaded gemms over blocks of the long
    side, shared out among the threads. OpenBLAS's own threads do not share such a
    product out: on two cores it took as long as on one (NPBench's mlp at preset M,
    149 ms both), where two blocks took half the time. ``parts`` blocks, one per thread
    the program is built for (``optimize.shared_threads``): fixed when it is compiled, so
    that every call gives the same bits whichever thread count the tuner tries (more
    blocks than threads cost: each call packs the short side again). ``gemm(rows, cols,
    pa, px, pc)``: the call."""
    (trans_a, lda), (trans_b, ldb), (pa, px, pc) = a, x, pointers
    long_side = max(m, n)
    if n >= m:  # blocks of columns: of B (stored k x n, or n x k) and of C
        block = (str(m), "__end - __start", pa,
                 f"{px} + __start * {ldb if trans_b else 1}LL", f"{pc} + __start")
    else:  # blocks of rows: of A (stored m x k, or k x m) and of C
        block = ("__end - __start", str(n), f"{pa} + __start * {1 if trans_a else lda}LL",
                 px, f"{pc} + __start * {n}LL")
    code.line("#ifdef OPENBLAS_VERSION",
              "const int __blas_threads = openblas_get_num_threads();",
              "openblas_set_num_threads(1);",
              "#endif",
              "#pragma omp parallel for schedule(dynamic)")
    with code.block(f"for (int __part = 0; __part < {parts}; ++__part)"):
        # block edges on multiples of SKINNY_BLOCK, so that every block is whole vectors
        code.line(f"const int64_t __start = {long_side}LL * __part / {parts} / "
                  f"{SKINNY_BLOCK} * {SKINNY_BLOCK};",
                  f"const int64_t __end = __part + 1 == {parts} ? {long_side}LL : "
                  f"{long_side}LL * (__part + 1) / {parts} / {SKINNY_BLOCK} * {SKINNY_BLOCK};",
                  gemm(*block))
    code.line("#ifdef OPENBLAS_VERSION", "openblas_set_num_threads(__blas_threads);",
              "#endif")


def _scaled_operand(b: Builder, op: ir.Op, target: Array
                    ) -> tuple[int, ir.Value, ir.Value] | None:
    """``(side, matrix, scalar)`` where operand ``side`` is ``scalar * matrix`` (a multiply
    by a broadcast 0-d value or a splat constant, in the product's type) that only this
    product reads and that is not written yet: the product scales its sum instead (BLAS's
    alpha), one pass over the matrix and its copy fewer (``alpha * A @ B``; XLA writes
    ``alpha * A``). Its cluster is told not to write it (``absorbed``). Not when the
    product writes the matrix's array."""
    scope = b.scope
    for side, value in enumerate(op.operands):
        producer, binding = scope.producers.get(value.name), b.binding(value)
        if (producer is None or producer.name != "stablehlo.multiply"
                or producer.result.type.element != op.result.type.element
                or not isinstance(binding, Pending) or not binding.unresolved
                or binding.cluster.closed or value.name in scope.destinations
                or not scope.only_user(value, op)
                or sum(v.name == value.name for v in op.operands) != 1):
            continue
        for k, factor in enumerate(producer.operands):
            scalar = _broadcast_scalar(b, factor)
            matrix = producer.operands[1 - k]
            if scalar is not None and not b.binding(matrix).holds(target.name) \
                    and not b.binding(scalar).holds(target.name):
                binding.cluster.absorbed.add(binding.key)
                return side, matrix, scalar
    return None


def _broadcast_scalar(b: Builder, value: ir.Value) -> ir.Value | None:
    """The 0-d value that ``value`` broadcasts, or ``value`` itself if it is a splat
    constant; None otherwise, and for a constant that BLAS's alpha may not stand for (0,
    inf, NaN: ``_scale_by`` checks those only at run time)."""
    producer = b.scope.producers.get(value.name)
    if producer is None:
        return None
    if producer.name == "stablehlo.broadcast_in_dim" and producer.operands[0].type.rank == 0:
        scalar = producer.operands[0]
    elif producer.name == "stablehlo.constant":
        scalar = value
    else:
        return None
    binding = b.binding(scalar)
    if binding.is_literal and not (np.ndim(binding.value) == 0
                                   and math.isfinite(binding.value) and binding.value != 0):
        return None
    return scalar


def _scale_by(b: Builder, code: Writer, scalar: ir.Value, operand: Operand, pointer: str,
              inputs: dict, outputs: dict) -> str:
    """BLAS's alpha for a product whose ``operand`` (read through ``pointer``) is scaled by
    ``scalar``. ``alpha * (A B)`` is ``(alpha A) B`` but for rounding, except where alpha
    is zero, infinite or NaN (0 * inf, and OpenBLAS skips the product when alpha is 0):
    then the operand's array is scaled into a copy that the product reads instead."""
    element = dtypes.of(scalar.type)
    binding = b.readable(scalar)
    if binding.is_literal:  # a splat constant, finite and not zero (``_broadcast_scalar``)
        return literal(binding.value, element)
    code.line(f"const {element.compute} __alpha = __scale;")
    inputs["__scale"] = Element(binding)
    copy = b.emit.add_array("scaled", operand.array.type)
    outputs["__scaled"] = Whole(copy)
    size = operand.array.type.size
    code.line(f"{element.compute} __blas_alpha = __alpha;",
              "if (!std::isfinite(__alpha) || __alpha == 0) {",
              f"    for (int64_t __s = 0; __s < {size}; ++__s)",
              f"        __scaled[__s] = h2d::mul(__alpha, {pointer}[__s]);",
              f"    {pointer} = __scaled;",
              "    __blas_alpha = 1;",
              "}")
    return "__blas_alpha"


def _symbolic_product(b: Builder, op: ir.Op, product: _Product,
                      convert: tuple[ElementType, ElementType], target: Array) -> None:
    """Sizes that are symbols: both operands in the contiguous layouts batch x M x K and
    batch x K x N (copied unless they are arrays laid out so), then one gemm per batch
    element, its sizes and leading dimensions read from the symbols at run time."""
    from dace.libraries.blas.environments.openblas import OpenBLAS

    accumulate = convert[1]
    if (accumulate.element not in BLAS_TYPES or blas_implementation() != "OpenBLAS"
            or precision_key(accumulate) != precision_key(dtypes.of(op.result.type))):
        raise symbolic.NeedsSpecialisation(op.name, f"a product in {accumulate.element} "
                                           "without OpenBLAS", op.location)
    free = product.free
    batch = [[pair[side] for pair in product.batch] for side in (0, 1)]
    contract = [[pair[side] for pair in product.contract] for side in (0, 1)]

    def operand(side: int, dims: list[int]) -> Array:
        """The operand in the layout ``dims`` (then its unit dimensions): as it is if it
        is an array laid out so, else a copy."""
        value = op.operands[side]
        order = dims + [d for d in range(value.type.rank) if d not in dims]
        binding = b.readable(value)
        if (binding.is_array(binding.data) and order == sorted(order)
                and precision_key(dtypes.of(value.type)) == precision_key(accumulate)):
            return binding
        return _copy(b, value, order, convert).array

    a = operand(0, batch[0] + list(free[0]) + contract[0])
    x = operand(1, batch[1] + contract[1] + list(free[1]))
    m, n, k = (cpp_size(size) for size in (product.m, product.n, product.k))
    count = cpp_size(product.size(0, batch[0]))
    prefix = BLAS_TYPES[accumulate.element]
    code = Writer()
    code.line(f"const int64_t __m = {m}, __n = {n}, __k = {k};")
    if accumulate.is_complex:
        code.line(f"const {accumulate.compute} __one(1), __zero(0);")
        alpha, beta = "&__one", "&__zero"
    else:
        alpha, beta = "1", "0"
    with code.loops(Loop("__i", "0", count), scalar=True):
        code.line(f"cblas_{prefix}gemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, __m, __n, "
                  f"__k, {alpha}, __a + __i * __m * __k, std::max<int64_t>(1, __k), "
                  f"__b + __i * __k * __n, std::max<int64_t>(1, __n), {beta}, "
                  "__c + __i * __m * __n, std::max<int64_t>(1, __n));")
    b.emit.map("blas", (), code.text(), {"__a": Whole(a), "__b": Whole(x)},
               {"__c": Whole(target)}, environments=[OpenBLAS.full_class_path()])


# ------------------------------------------------------------ complex: XLA's order

#: Eigen's depth block (its kc for an L1 data cache of 32 KiB: (32768 - 256) / 96 and /
#: 128, rounded down to a multiple of 8): a longer contraction is summed in blocks, whose
#: length depends on the machine's caches; up to it, the order is Eigen's kernels' alone
EIGEN_DEPTH = {"complex<f32>": 336, "complex<f64>": 248}
#: Eigen's matrix-vector kernel (a product with one row) sums contractions this long or
#: longer in blocks of columns
EIGEN_GEMV_DEPTH = 128
#: multiply-adds up to which a complex product takes the loop nest in XLA's order, above
#: which OpenBLAS's speed wins
EIGEN_ORDER_WORK = 1 << 22


def _in_eigen_order(product: _Product, accumulate: ElementType) -> bool:
    """Whether a complex product is computed in the order of XLA's (Eigen's) kernels."""
    batch = math.prod(product.shapes[0][pair[0]] for pair in product.batch)
    reduce = product.m == product.n == 1  # XLA's multiply and reduce: any length
    return ((reduce or product.k <= EIGEN_DEPTH[accumulate.element]
             and (product.m > 1 or product.k < EIGEN_GEMV_DEPTH))
            and batch * product.m * product.n * product.k <= EIGEN_ORDER_WORK)


def _strided_operands(b: Builder, op: ir.Op, product: _Product
                      ) -> tuple[Operand, Operand, tuple[int, int, int, int]]:
    """Both operands for a loop nest, read where they lie unless their free or contracted
    dimensions do not index like one dimension each (then copied once), and the strides of
    lhs free, lhs contracted, rhs free, rhs contracted (0 for a group of one element)."""
    def fits(side, operand, order):
        return product.groups(side, operand, order)[0]

    (a, x), order = _arrange(b, op, product, fits, None)
    _, a_free, a_k = product.groups(0, a, order)
    _, x_free, x_k = product.groups(1, x, order)
    return a, x, tuple(stride or 0 for stride in (a_free, a_k, x_free, x_k))


def _complex_product(b: Builder, op: ir.Op, product: _Product, compute: ElementType,
                     target: Array) -> None:
    """A complex product, an operand of another type converted as it is read (XLA
    converts it first), each element summed as XLA's dot thunk (Eigen) sums it
    (``h2d::eigen_cdot``): bit for bit XLA's results, where OpenBLAS's FMAs and order
    were 8 to 172 ULP off in components that cancel. One tasklet, parallel over rows."""
    m, n, k = product.m, product.n, product.k
    a, x, (a_free, a_k, x_free, x_k) = _strided_operands(b, op, product)
    real = "float" if compute.element == "complex<f32>" else "double"
    batch = [product.shapes[0][pair[0]] for pair in product.batch]
    rows = math.prod(batch) * m
    code = Writer()
    with _rows_loop(code, batch, rows, m, rows * n * k):
        pa, px, pc = product.offsets((a, x), [f"__b{j}" for j in range(len(batch))])
        cdot = (f"h2d::eigen_cdot<{real}>(__lhs, __rhs, {k}LL, "
                f"h2d::cdot_order<{real}>(__m, __n, {m}LL, {n}LL))")
        code.line(f"const auto* __pa = __a + ({pa} + {a_free}LL * __m);",
                  f"auto* __pc = __c + ({pc} + {n}LL * __m);",
                  f"auto __lhs = [&](int64_t __k) {{ "
                  f"return {converted(f'__pa[__k * {a_k}LL]', a.element, compute)}; }};")
        with code.loops(Loop("__n", "0", f"{n}LL"), scalar=True):
            code.line(f"const auto* __col = __b + ({px} + {x_free}LL * __n);",
                      f"auto __rhs = [&](int64_t __k) {{ "
                      f"return {converted(f'__col[__k * {x_k}LL]', x.element, compute)}; }};",
                      f"__pc[__n] = {stored(cdot, compute, dtypes.of(op.result.type))};")
    b.emit.map("dot_complex", (), code.text(), {"__a": Whole(a.array), "__b": Whole(x.array)},
               {"__c": Whole(target)})


@contextlib.contextmanager
def _rows_loop(code: Writer, batch: Sequence[int], rows: int, m: int, work: int):
    """The loop over the result's rows (batch x M) of a product's loop nest, parallel when
    ``work`` multiply-adds pay for it, with the row's batch indices ``__b0, ...`` and its
    index ``__m`` within the batch element."""
    if work > PARALLEL_PRODUCT_WORK:
        code.line("#pragma omp parallel for schedule(static)")
    with code.loops(Loop("__r", "0", f"{rows}LL"), scalar=True):
        code.line(f"int64_t __t = __r / {m}LL;")
        for j, size in reversed(list(enumerate(batch))):
            code.line(f"const int64_t __b{j} = __t % {size}LL; __t /= {size}LL;")
        code.line(f"const int64_t __m = __r % {m}LL;")
        yield


# --------------------------------------------------------------------- loop nest


def _loop_product(b: Builder, op: ir.Op, product: _Product, compute: ElementType,
                  target: Array) -> None:
    """Everything BLAS does not multiply. One tasklet, parallel over the rows of the
    result (batch x M), whose innermost loops stream contiguous data without a guard so
    that GCC vectorises them; the ``h2d::scalar_loop`` calls sit in the outer loops (no
    map surrounds this loop nest: there is no map loop to vectorise across it)."""
    m, n, k = product.m, product.n, product.k
    a, x, (a_free, a_k, x_free, x_k) = _strided_operands(b, op, product)
    result = dtypes.of(op.result.type)
    batch = [product.shapes[0][pair[0]] for pair in product.batch]
    rows = math.prod(batch) * m
    zero = literal(compute.numpy.type(0), compute)
    load_a = converted(f"__pa[__k * {a_k}LL]", a.element, compute)
    code = Writer()
    with _rows_loop(code, batch, rows, m, rows * n * k):
        pa, px, pc = product.offsets((a, x), [f"__b{j}" for j in range(len(batch))])
        code.line(f"const auto* __pa = __a + ({pa} + {a_free}LL * __m);",
                  f"const auto* __pb = __b + ({px});",
                  f"auto* __pc = __c + ({pc} + {n}LL * __m);")
        if x_free == 1 and n > 1:  # blocks of a result row in registers; rows of B streamed
            width = 4 if compute.is_stored_as_bits else compute.numpy.itemsize
            block = max(1, REGISTER_BLOCK_BYTES // width)
            step = (f"__acc[__j] = h2d::add(__acc[__j], h2d::mul(__x, "
                    f"{converted('__row[__j]', x.element, compute)}));")
            with code.loops(Loop("__n0", "0", f"{n}LL", block), scalar=True):
                code.line(f"const int64_t __nb = std::min<int64_t>({block}, {n}LL - __n0);",
                          f"{compute.compute} __acc[{block}];",
                          f"for (int __j = 0; __j < {block}; ++__j) __acc[__j] = {zero};")
                with code.loops(Loop("__k", "0", f"{k}LL"), scalar=True):
                    code.line(f"const {compute.compute} __x = {load_a};",
                              f"const auto* __row = __pb + (__k * {x_k}LL + __n0);",
                              f"if (__nb == {block}) {{ for (int __j = 0; __j < {block}; "
                              f"++__j) {step} }}",
                              f"else {{ for (int64_t __j = 0; __j < __nb; ++__j) {step} }}")
                code.line("for (int64_t __j = 0; __j < __nb; ++__j) "
                          f"__pc[__n0 + __j] = {stored('__acc[__j]', compute, result)};")
        else:  # one register sum per element, K innermost
            load_x = converted(f"__col[__k * {x_k}LL]", x.element, compute)
            with code.loops(Loop("__n", "0", f"{n}LL"), scalar=True):
                code.line(f"const auto* __col = __pb + __n * {x_free}LL;",
                          f"{compute.compute} __acc = {zero};",
                          f"for (int64_t __k = 0; __k < {k}LL; ++__k) "
                          f"__acc = h2d::add(__acc, h2d::mul({load_a}, {load_x}));",
                          f"__pc[__n] = {stored('__acc', compute, result)};")
    b.emit.map("dot_loops", (), code.text(), {"__a": Whole(a.array), "__b": Whole(x.array)},
               {"__c": Whole(target)})
