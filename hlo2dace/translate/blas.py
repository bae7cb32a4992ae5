"""BLAS and the operands it reads: what the products (``linalg.py``, ``matvec.py``) and the
convolutions (``convolution.py``) share. An operand is read in place wherever its groups of
dimensions are single-strided (several contracting dimensions contiguous in both operands
are one K; transposes become BLAS's Trans flags and leading dimensions; a broadcast batch
has stride 0), else it is copied once, transposed, into a layout that is.

* f32/f64 and larger complex products go to OpenBLAS (cblas_?gemm, ?gemv when M or N is
  1, ?dot / ?dotu_sub when both are), one call per batch element, from a tasklet that
  loops over the batch; f16/bf16 and mixed float products are converted by their copy
  and take the same path. A product of a scaled operand (``h2d.scaled_dot``, made by the
  ``fold_scale_into_products`` pass) passes the scale as BLAS's alpha.
* A skinny product (``skinny_gemm`` kernel) is gemms over blocks of its long side, one
  per thread; matrix-vector products over one large matrix read it a block of rows at a
  time (``blocked_matvecs``), and a computed matrix is computed a block at a time into a
  buffer that gemv reads (``computed_matvec``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

import dace
import numpy as np

from .. import ir, symbolic
from ..machine import SKINNY_BLOCK, Machine
from ..plan.annotations import ProductKernel
from . import dtypes, library
from .bindings import Array, Literal, Pending, Reshaped, View, cpp_size, dace_shape, map_params
from .builder import Builder
from .cpp import Loop, Writer
from .dtypes import ElementType
from .emitter import Element, Whole
from .literals import literal
from .products import (
    BLAS_INT_MAX,
    BLAS_TYPES,
    Matvec,
    Product,
    compute_type,
    converted,
    precision_key,
    row_major,
    stored,
)


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


def operand_in_place(b: Builder, value: ir.Value) -> Operand | None:
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


def copy_operand(b: Builder, value: ir.Value, order: Sequence[int],
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
    sequential_map(b, "dot_operand", t, inputs, f"__out = {read};", {"__out": Element(copy)})
    strides = [0] * len(shape)
    for d, stride in zip(order, row_major(t.shape)):
        strides[d] = stride
    return Operand(copy, 0, tuple(strides))


def sequential_map(b: Builder, label: str, t: ir.TensorType, inputs: dict, code: str,
                    outputs: dict) -> None:
    """``Emitter.map``, but run by one thread: for the copies next to a BLAS call, which
    cost O(n^2) to its O(n^3), and whose OpenMP workers, spinning after the map, would take
    the cores OpenBLAS's threads need (and the reverse)."""
    b.emit.map(label, t.shape, code, inputs, outputs, schedule=dace.ScheduleType.Sequential)


def arrange(b: Builder, op: ir.Op, product: Product, fits,
             convert: tuple[ElementType, ElementType] | None,
             values: Sequence[ir.Value] | None = None
             ) -> tuple[tuple[Operand, Operand], tuple]:
    """Both operands (``values``, else ``op``'s), and the order of the contracting pairs:
    each read in place where ``fits(side, operand, order)`` accepts it (and it holds
    ``convert``'s storage type), else copied once into the layout batch x free x K (lhs)
    or batch x K x free (rhs)."""
    values = list(values or op.operands)
    in_place = [operand_in_place(b, v) for v in values]
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
        operands.append(copy_operand(b, value, layout, convert))
    return (operands[0], operands[1]), order


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


def blas_product(b: Builder, op: ir.Op, product: Product,
                 convert: tuple[ElementType, ElementType], target: Array,
                 kernel: ProductKernel, scale: tuple[int, ir.Value] | None = None) -> None:
    """``C = A B`` per batch element by one OpenBLAS call: dot, gemv or gemm (gemms over
    blocks of the long side for the ``skinny_gemm`` kernel). ``scale``: (side, scalar) for
    a product whose operand ``side`` is to be scaled by ``scalar`` (BLAS's alpha)."""
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
    inputs, outputs = {}, {}
    (a, x), order = arrange(b, op, product, fits, convert, op.operands[:2])
    _, a_free, a_k = product.groups(0, a, order)
    _, x_free, x_k = product.groups(1, x, order)
    batch = None
    if len(product.batch) == 1:
        (lhs, rhs, _), = product.batch
        batch = (product.batch_size, a.strides[lhs], x.strides[rhs])
    if direct and scale is None and kernel.kernel == "blas" and len(product.batch) < 2 \
            and library.blas_node(b.emit, b.target, (m, n, k), (a_free, a_k, x_free, x_k),
                                  (a, x), target, accumulate, batch):
        return
    out = target if direct else b.emit.add_array(
        "dot_sum", ir.TensorType(tuple(op.result.type.shape), accumulate.element))
    prefix = BLAS_TYPES[accumulate.element]
    code = Writer()
    if accumulate.is_complex:
        code.line(f"const {accumulate.compute} __one(1), __zero(0);")
        alpha, beta = "&__one", "&__zero"
    else:
        alpha, beta = "1", "0"
    if scale is not None:
        side, scalar = scale
        alpha = _scale_by(b, code, scalar, (a, x)[side], "__a" if side == 0 else "__b",
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

            if kernel.kernel == "skinny_gemm":
                _skinny_gemm(code, m, n, kernel.parts, (trans_a, lda), (trans_b, ldb),
                             (pa, px, pc), gemm)
            else:
                code.line(gemm(str(m), str(n), pa, px, pc))
        if accumulate.is_complex and k > 1:
            code.line(f"h2d::no_negative_zero_sums({pc}, {m * n});")
    b.emit.map("blas", (), code.text(), {"__a": Whole(a.array), "__b": Whole(x.array), **inputs},
               {"__c": Whole(out), **outputs}, environments=[OpenBLAS.full_class_path()])
    if not direct:
        sequential_map(b, "dot_result", op.result.type, {"__in": Element(out)},
                        f"__out = {stored('__in', accumulate, result)};",
                        {"__out": Element(target)})


def few_rows_product(b: Builder, op: ir.Op, product: Product, accumulate: ElementType,
                     target: Array, kernel: ProductKernel,
                     scale: tuple[int, ir.Value] | None = None) -> None:
    """``C = A B`` for few rows of A (the ``few_rows`` kernel): ``h2d::few_rows_product``
    (h2d/products.h) reads B's rows where they lie, with no packing; A in either
    orientation, B row-major (else copied once so); ``scale`` as ``blas_product``'s."""
    m, n, k = product.m, product.n, product.k

    def fits(side, operand, order):
        ok, free, contract = product.groups(side, operand, order)
        if side == 0:
            return ok and _matrix(m, free, k, contract) is not None
        return ok and _matrix(k, contract, n, free) == (False, contract)

    (a, x), order = arrange(b, op, product, fits, (accumulate, accumulate), op.operands[:2])
    _, a_free, a_k = product.groups(0, a, order)
    _, x_free, x_k = product.groups(1, x, order)
    trans_a, lda = _matrix(m, a_free, k, a_k)
    _, ldb = _matrix(k, x_k, n, x_free)
    pa, px, _ = product.offsets((a, x), [])
    a_row, a_col = (1, lda) if trans_a else (lda, 1)
    code, inputs, outputs, alpha = Writer(), {}, {}, "1"
    if scale is not None:
        side, scalar = scale
        alpha = _scale_by(b, code, scalar, (a, x)[side], "__a" if side == 0 else "__b",
                          inputs, outputs)
    code.line(f"h2d::few_rows_product<{accumulate.compute}>({m}LL, {n}LL, {k}LL, "
              f"__a + ({pa}), {a_row}LL, {a_col}LL, __b + ({px}), {ldb}LL, __c, {n}LL, "
              f"({accumulate.compute})({alpha}), {kernel.parts});")
    b.emit.map("few_rows", (), code.text(),
               {"__a": Whole(a.array), "__b": Whole(x.array), **inputs},
               {"__c": Whole(target), **outputs})


def _skinny_gemm(code: Writer, m: int, n: int, parts: int, a: tuple[bool, int],
                 x: tuple[bool, int], pointers: tuple[str, str, str], gemm) -> None:
    """A product with one side of at most ``machine.SKINNY_SIDE`` (a small batch through a large
    layer: 8 x 30000 by 30000 x 10000) as single-threaded gemms over blocks of the long
    side, shared out among the threads. OpenBLAS's own threads do not share such a
    product out: on two cores it took as long as on one (NPBench's mlp at preset M,
    149 ms both), where two blocks took half the time. ``parts`` blocks, one per thread
    the program is built for (``Machine.threads``): fixed when it is compiled, so
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


def _scale_by(b: Builder, code: Writer, scalar: ir.Value, operand: Operand, pointer: str,
              inputs: dict, outputs: dict) -> str:
    """BLAS's alpha for a product whose ``operand`` (read through ``pointer``) is scaled by
    ``scalar``. ``alpha * (A B)`` is ``(alpha A) B`` but for rounding, except where alpha
    is zero, infinite or NaN (0 * inf, and OpenBLAS skips the product when alpha is 0):
    then the operand's array is scaled into a copy that the product reads instead."""
    element = dtypes.of(scalar.type)
    binding = b.readable(scalar)
    if binding.is_literal and np.isfinite(binding.value) and binding.value != 0:
        return literal(binding.value, element)
    if binding.is_literal:  # known while translating: 0, infinite or NaN
        code.line(f"const {element.compute} __alpha = {literal(binding.value, element)};")
    else:
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


def symbolic_product(b: Builder, op: ir.Op, product: Product,
                      convert: tuple[ElementType, ElementType], target: Array) -> None:
    """Sizes that are symbols: both operands in the contiguous layouts batch x M x K and
    batch x K x N (copied unless they are arrays laid out so), then one gemm per batch
    element, its sizes and leading dimensions read from the symbols at run time."""
    from dace.libraries.blas.environments.openblas import OpenBLAS

    accumulate = convert[1]
    if (accumulate.element not in BLAS_TYPES or b.machine.blas != "OpenBLAS"
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
        return copy_operand(b, value, order, convert).array

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


def vector_operand(b: Builder, value: ir.Value, element: ElementType
                    ) -> tuple[Operand, int]:
    """A gemv's vector ``value`` and its increment: read where it lies if it is strided
    and of the product's type, else copied contiguous."""
    vector = operand_in_place(b, value)
    increment = vector and _increment(vector.strides[0])
    if increment is None or vector.element.element != element.element:
        return copy_operand(b, value, [0], None), 1
    return vector, increment


@dataclass(frozen=True)
class RowBlocks:
    """How blocked matrix-vector products go over an m x n matrix: blocks of ``rows`` rows
    (about ``machine.matvec_block_bytes``, so that a block stays in L2 between the passes
    over it), ``count`` of them, shared out among ``parts`` threads."""

    m: int
    n: int
    rows: int
    count: int
    parts: int

    @classmethod
    def of(cls, m: int, n: int, element: ElementType, machine: Machine) -> RowBlocks:
        rows = max(1, min(m, machine.matvec_block_bytes // (n * element.numpy.itemsize)))
        count = -(-m // rows)
        return cls(m, n, rows, count, max(1, min(machine.threads, count)))


def blocked_matvecs(b: Builder, products: Sequence[Matvec], vectors: list[tuple[str, int]],
                     blocks: RowBlocks, block: list[str], inputs: dict, outputs: dict,
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


def computed_matvec(b: Builder, op: ir.Op) -> Array | None:
    """``op``'s result, for the ``blocked_gemv`` kernel (a vector times a large matrix that
    an elementwise expression computes and only ``op`` reads, NPBench's gesummv: ``(alpha
    * A + beta * B) @ x``): the matrix is computed a block of rows at a time into a buffer
    that stays in L2, which gemv reads from there, so it is never written to memory and
    read back (XLA writes it: two passes over the matrix of the three). None where the
    matrix is in an array already (its map was emitted for another reason)."""
    product = Matvec.of(op)
    m, n = product.matrix.type.shape
    element = dtypes.of(op.result.type)
    binding = b.binding(product.matrix)
    if not isinstance(binding, Pending) or not binding.unresolved or binding.cluster.closed:
        return None
    reads, lines, (expression,) = b.pointer_reads([product.matrix], ["__r + __i", "__j"], op)
    if "__in0" in reads:  # not computed here after all: its array was written
        return None
    vector, increment = vector_operand(b, product.vector, element)
    target = b.allocate_result(op.result, whole=True)
    blocks = RowBlocks.of(m, n, element, b.machine)
    buffer = b.emit.add_array("matvec_block", ir.TensorType(
        (blocks.parts * blocks.rows * n,), element.element))
    fill = Writer()
    fill.line(f"{element.storage} * __block = __buffer + __part * {blocks.rows * n}LL;")
    with fill.loops(Loop("__i", "0", "__rows"), Loop("__j", "0", str(n))):
        fill.lines(lines)
        fill.line(f"__block[__i * {n}LL + __j] = {element.store(expression)};")
    inputs = {**reads, "__v0": Whole(vector.array)}
    outputs = {"__y0": Whole(target), "__buffer": Whole(buffer)}
    blocked_matvecs(b, [product], [(f"__v0 + {vector.offset}LL", increment)], blocks,
                     fill.text().splitlines(), inputs, outputs)
    return target
