"""Contractions: ``stablehlo.dot_general`` with any batch, contracting and free dimensions,
and the products the plan stage makes of them (``h2d.scaled_dot``, ``h2d.outer_product``).

The result is laid out as the spec says (batch dimensions, then the lhs free ones, then the
rhs free ones), so every product is a loop over the batch of ``C[M, N] = A[M, K] B[K, N]``
where M, N and K are groups of dimensions (``products.Product``). Element types follow XLA
on the CPU (``products.py``). ``precision_config`` and ``algorithm`` change nothing on the
CPU and are ignored, as the reference interpreter does (XLA's CPU rejects the algorithms
that would change precision).

Which kernel computes a product is the plan's decision (``ProductKernel``, from the
``choose_product_kernels`` pass; without it the plain choice, ``products.kernel``):

* ``blas`` and ``skinny_gemm``: OpenBLAS (``blas.py``);
* ``blocked_gemv``: a computed matrix a block of rows at a time into gemv
  (``blas.computed_matvec``);
* ``xla_order``: complex products summed as XLA's dot thunk (jaxlib's Eigen kernels) sums
  each element, bit for bit, up to Eigen's depth block (``h2d::eigen_cdot``);
* ``loops``: integers, booleans (OR of ANDs), everything without OpenBLAS and tiny
  products: a loop nest in one tasklet, parallel over result rows, either blocks of a
  result row accumulated in registers while streaming rows of B (when B's free dimension is
  contiguous), or one register sum per element with K innermost.

A contraction of size 1 (no contracting dimensions: an outer product) is a plain product,
one map over the result, as XLA computes it (so -0.0 stays -0.0); where the plan makes it
``h2d.outer_product`` of broadcasts, its readers' maps compute it.
"""

from __future__ import annotations

import contextlib
import math
from typing import Sequence

from .. import ir
from ..errors import CompilationError
from ..machine import PARALLEL_PRODUCT_WORK
from ..plan.annotations import ProductKernel, annotation
from . import dtypes, products
from .bindings import Array, Binding, Literal, map_params
from .blas import (
    Operand,
    arrange,
    blas_product,
    computed_matvec,
    few_rows_product,
    op_types,
    symbolic_product,
)
from .builder import Builder
from .cpp import Loop, Writer
from .dtypes import ElementType
from .emitter import Element, Whole
from .literals import literal
from .products import Product, converted, dimension_numbers, precision_key, stored
from .reduction import LANES
from .registry import register, register_elementwise


def _dot_general_shape(inference, op, operands, shapes, knowns, env):
    numbers = op.attr("dot_dimension_numbers")
    lb = numbers.get("lhs_batching_dimensions", ())
    rb = numbers.get("rhs_batching_dimensions", ())
    lc = numbers.get("lhs_contracting_dimensions", ())
    rc = numbers.get("rhs_contracting_dimensions", ())
    lhs, rhs = shapes[:2]
    batch = [inference.unify(lhs[i], rhs[j], op) for i, j in zip(lb, rb)]
    for i, j in zip(lc, rc):
        inference.unify(lhs[i], rhs[j], op)
    free_l = [d for k, d in enumerate(lhs) if k not in lb and k not in lc]
    free_r = [d for k, d in enumerate(rhs) if k not in rb and k not in rc]
    return [tuple(batch + free_l + free_r)]


@register("stablehlo.dot_general", shape_rule=_dot_general_shape, whole_result=True)
def dot_general(b: Builder, op: ir.Op) -> list[Binding]:
    return _contraction(b, op)


@register("h2d.scaled_dot", shape_rule=_dot_general_shape, whole_result=True)
def scaled_dot(b: Builder, op: ir.Op) -> list[Binding]:
    """A dot_general of its first two operands whose operand ``h2d.scaled_operand`` is
    scaled by its third (a 0-d value, or a splat constant), made by the
    ``fold_scale_into_products`` pass: BLAS's alpha scales the sum, so the scaled operand
    is never written (``alpha * A @ B``; XLA writes ``alpha * A``)."""
    return _contraction(b, op, (int(op.attr("h2d.scaled_operand")), op.operands[2]))


def _contraction(b: Builder, op: ir.Op, scale: tuple[int, ir.Value] | None = None
                 ) -> list[Binding]:
    fields, (lhs_batch, rhs_batch, lhs_contract, rhs_contract) = dimension_numbers(op)
    if len(lhs_batch) != len(rhs_batch) or len(lhs_contract) != len(rhs_contract):
        raise b.unsupported(f"dimension numbers {dict(fields)} pair unequal numbers of "
                            "dimensions")
    lhs_element, rhs_element, result, compute = op_types(b, op, "product")
    full = Product.of(op)
    kernel = annotation(op, ProductKernel) or products.kernel(op, b.machine, tuned=False)
    if kernel is not None and kernel.kernel == "blocked_gemv":
        computed = computed_matvec(b, op)
        if computed is not None:
            return [computed]
        kernel = ProductKernel("blas")
    # every path of a contraction (``_product``: also where k is a symbol) in the result's
    # own type writes it through a pointer
    whole = full.k not in (0, 1) and not compute.is_stored_as_bits \
        and precision_key(compute) == precision_key(result)
    target = b.allocate_result(op.result, whole=whole)
    if scale is not None and any(b.binding(v).holds(target.name)
                                 for v in (op.operands[scale[0]], scale[1])):
        # the scaled operand reads the array the product writes: another one
        target = b.emit.add_array(op.result.name.lstrip("%"), op.result.type)
    if op.result.type.size == 0:
        pass
    elif full.k == 0:  # an empty sum
        b.emit.copy(Literal(result.numpy.type(0), op.result.type), target)
    elif full.k == 1:
        _outer_product(b, op, full, compute, target)
    else:
        _product(b, op, full.without_units(), compute, target, kernel, scale)
    return [target]


def _product(b: Builder, op: ir.Op, product: Product, compute: ElementType,
             target: Array, kernel: ProductKernel | None,
             scale: tuple[int, ir.Value] | None) -> None:
    """A contraction, by the kernel the plan chose."""
    accumulate = products.accumulated(compute)
    if products.is_symbolic_product(op):
        symbolic_product(b, op, product, (compute, accumulate), target)
    elif kernel.kernel in ("blas", "skinny_gemm"):
        blas_product(b, op, product, (compute, accumulate), target, kernel, scale)
    elif kernel.kernel == "few_rows":
        few_rows_product(b, op, product, accumulate, target, kernel, scale)
    elif scale is not None:
        raise CompilationError(f"internal error: {op.name} at {op.location} with the "
                               f"{kernel.kernel} kernel")
    elif kernel.kernel == "xla_order":
        _complex_product(b, op, product, compute, target)
    else:
        _loop_product(b, op, product, compute, target)


register_elementwise("h2d.outer_product",
                     lambda op, args, in_types, out_type: f"h2d::mul({args[0]}, {args[1]})")




def _outer_product(b: Builder, op: ir.Op, product: Product, compute: ElementType,
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


def _strided_operands(b: Builder, op: ir.Op, product: Product
                      ) -> tuple[Operand, Operand, tuple[int, int, int, int]]:
    """Both operands for a loop nest, read where they lie unless their free or contracted
    dimensions do not index like one dimension each (then copied once), and the strides of
    lhs free, lhs contracted, rhs free, rhs contracted (0 for a group of one element)."""
    def fits(side, operand, order):
        return product.groups(side, operand, order)[0]

    (a, x), order = arrange(b, op, product, fits, None)
    _, a_free, a_k = product.groups(0, a, order)
    _, x_free, x_k = product.groups(1, x, order)
    return a, x, tuple(stride or 0 for stride in (a_free, a_k, x_free, x_k))


def _complex_product(b: Builder, op: ir.Op, product: Product, compute: ElementType,
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


def _loop_product(b: Builder, op: ir.Op, product: Product, compute: ElementType,
                  target: Array) -> None:
    """Everything BLAS does not multiply. One tasklet, parallel over the rows of the
    result (batch x M), whose innermost loops stream contiguous data without a guard so
    that GCC vectorises them; the ``h2d::scalar_loop`` calls sit in the outer loops (no
    map surrounds this loop nest: there is no map loop to vectorise across it). A sum over
    K of 16 or more runs in lanes, as a long reduction's does: in order, ``jnp.vdot`` of
    4,096 floats took 3.4 us, a chain of dependent adds."""
    m, n, k = product.m, product.n, product.k
    a, x, (a_free, a_k, x_free, x_k) = _strided_operands(b, op, product)
    result = dtypes.of(op.result.type)
    batch = [product.shapes[0][pair[0]] for pair in product.batch]
    # lhs and rhs of the loops, by connector: ``A^T v`` (a matrix-vector product down the
    # columns) runs as ``v^T A``, the result a row over A's contiguous rows
    sides = [("__a", a.element, a_free, a_k), ("__b", x.element, x_free, x_k)]
    swapped = n == 1 < m and a_free == 1 != a_k
    if swapped:
        sides.reverse()
        m, n = 1, m
    (lhs, lhs_element, lhs_free, lhs_k), (rhs, rhs_element, rhs_free, rhs_k) = sides
    rows = math.prod(batch) * m
    zero = literal(compute.numpy.type(0), compute)
    load_a = converted(f"__pa[__k * {lhs_k}LL]", lhs_element, compute)
    code = Writer()
    with _rows_loop(code, batch, rows, m, rows * n * k):
        pa, px, pc = product.offsets((a, x), [f"__b{j}" for j in range(len(batch))])
        if swapped:
            pa, px = px, pa
        code.line(f"const auto* __pa = {lhs} + ({pa} + {lhs_free}LL * __m);",
                  f"const auto* __pb = {rhs} + ({px});",
                  f"auto* __pc = __c + ({pc} + {n}LL * __m);")
        if rhs_free == 1 and n > 1:  # blocks of a result row in registers; rows of B streamed
            width = 4 if compute.is_stored_as_bits else compute.numpy.itemsize
            block = max(1, min(n, b.machine.register_block_bytes // width))
            step = (f"__acc[__j] = h2d::add(__acc[__j], h2d::mul(__x, "
                    f"{converted('__row[__j]', rhs_element, compute)}));")
            with code.loops(Loop("__n0", "0", f"{n}LL", block), scalar=True):
                code.line(f"const int64_t __nb = std::min<int64_t>({block}, {n}LL - __n0);",
                          f"{compute.compute} __acc[{block}];",
                          f"for (int __j = 0; __j < {block}; ++__j) __acc[__j] = {zero};")
                with code.loops(Loop("__k", "0", f"{k}LL"), scalar=True):
                    code.line(f"const {compute.compute} __x = {load_a};",
                              f"const auto* __row = __pb + (__k * {rhs_k}LL + __n0);",
                              f"if (__nb == {block}) {{ for (int __j = 0; __j < {block}; "
                              f"++__j) {step} }}",
                              f"else {{ for (int64_t __j = 0; __j < __nb; ++__j) {step} }}")
                code.line("for (int64_t __j = 0; __j < __nb; ++__j) "
                          f"__pc[__n0 + __j] = {stored('__acc[__j]', compute, result)};")
        else:  # one sum per element, K innermost
            def term(at: str) -> str:
                return (f"h2d::mul({converted(f'__pa[({at}) * {lhs_k}LL]', lhs_element, compute)}"
                        f", {converted(f'__col[({at}) * {rhs_k}LL]', rhs_element, compute)})")

            with code.loops(Loop("__n", "0", f"{n}LL"), scalar=True):
                code.line(f"const auto* __col = __pb + __n * {rhs_free}LL;")
                if k < LANES:  # in order
                    code.line(f"{compute.compute} __acc = {zero};",
                              f"for (int64_t __k = 0; __k < {k}LL; ++__k) "
                              f"__acc = h2d::add(__acc, {term('__k')});",
                              f"__pc[__n] = {stored('__acc', compute, result)};")
                else:  # in lanes, as a long reduction folds: the loop vectorises
                    code.line(f"{compute.compute} __lanes[{LANES}];",
                              f"for (int __l = 0; __l < {LANES}; ++__l) __lanes[__l] = {zero};",
                              "int64_t __k = 0;",
                              f"for (; __k + {LANES} <= {k}LL; __k += {LANES}) for (int __l = 0;"
                              f" __l < {LANES}; ++__l) __lanes[__l] = h2d::add(__lanes[__l], "
                              f"{term('__k + __l')});",
                              f"for (int __l = 0; __k < {k}LL; ++__k, ++__l) __lanes[__l] = "
                              f"h2d::add(__lanes[__l], {term('__k')});",
                              f"for (int __w = {LANES // 2}; __w > 0; __w /= 2) for (int __l = 0;"
                              " __l < __w; ++__l) __lanes[__l] = h2d::add(__lanes[__l], "
                              "__lanes[__l + __w]);",
                              f"__pc[__n] = {stored('__lanes[0]', compute, result)};")
    b.emit.map("dot_loops", (), code.text(), {"__a": Whole(a.array), "__b": Whole(x.array)},
               {"__c": Whole(target)})
