"""Convolutions: ``stablehlo.convolution`` with any dimension numbers (NHWC, NCHW, HWIO,
OIHW or any other permutation), any number of spatial dimensions, window strides,
padding (negative too), lhs dilation (transposed convolutions), rhs dilation (atrous),
window reversal, and feature or batch groups.

A result element at batch ``n``, feature ``o`` and spatial position ``p`` sums
``lhs[n', g * Ci + c, q] * kernel[k, c, o]`` over the kernel's positions ``k`` and input
features ``c``, where ``q = p * stride + k' * rhs_dilation - low`` indexes the lhs padded
with zeros and dilated by ``lhs_dilation - 1`` zeros between elements (``k'`` is ``k``
reversed where ``window_reversal`` says), ``g = o / (O / groups)`` is the group and ``n'``
is ``n`` (feature groups) or ``g * (N / groups) + n`` (batch groups). Padding and dilation
holes contribute ``0 * kernel``, as the spec says: an infinite kernel element over padding
gives NaN. XLA's CPU code does the same for padding of f32/f16 convolutions without lhs
dilation (Eigen's packing) and skips those positions otherwise (its naive loop nest).

Element types follow dot_general (linalg.py): the operands are upcast to the more precise
of the operand and result types (int8 x int8 -> int32); f16/bf16 accumulate in f32 and
round once, as XLA's CPU backend does (it converts them into f32 convolutions).
``precision_config`` changes nothing on the CPU and is ignored.

Which of the two kernels below computes a convolution is the plan's decision
(``choose_product_kernels``, by ``products.convolution_kernel``); the plain lowering takes
im2col wherever OpenBLAS multiplies the type.

* f32/f64/complex (and f16/bf16 or mixed types, converted) with OpenBLAS: im2col. Per
  group, chunks of result rows (batch x output positions, in the result's layout order)
  are packed into a patch matrix (rows x kernel taps x input features, zeros where a tap
  meets padding), read from the lhs in place: one ``memcpy`` per tap of contiguous
  features (NHWC), or per row of taps when those lie side by side too, else a gathering
  loop that converts (NCHW, f16). One ``cblas_?gemm`` multiplies it by the kernel, packed
  once per call as (taps x input features) x output features, straight into the result
  when its rows or its features are single-strided, else into a scratch block scattered
  (and rounded, for f16/bf16) into it. Chunks are tasks that OpenMP threads share, each
  calling a one-thread GEMM on a patch matrix that stays in cache (measured: this beats
  one OpenBLAS-threaded GEMM after another, on a loaded machine by far); a kernel deeper
  than ``MAX_DEPTH`` (a weight gradient's) is cut into slabs whose GEMMs add up.
* Integers, booleans, groups of very few features (depthwise: a GEMM with one column),
  convolutions too small for a BLAS call to pay off, and everything without OpenBLAS:
  one map over the result, each element a loop nest over the window and the input
  features, operands read in place through their strides.
"""

from __future__ import annotations

import contextlib
import math
from typing import Sequence

import numpy as np

from .. import ir
from ..plan.annotations import ProductKernel, annotation
from . import dtypes
from .bindings import Array, Binding, Literal, map_params
from .blas import Operand, op_types, read_element, strided_operand
from .builder import Builder
from .convolution_numbers import Convolution
from .cpp import Loop, Writer
from .dtypes import ElementType
from .emitter import Element, Whole
from .literals import literal
from .products import (
    BLAS_INT_MAX,
    BLAS_TYPES,
    accumulated,
    converted,
    convolution_kernel,
    precision_key,
    row_major,
    stored,
)
from .registry import register

#: products per result element one GEMM sums at most: deeper kernels (weight gradients) are
#: cut into slabs
MAX_DEPTH = 8192
#: rows per GEMM at least (a deep kernel makes the patch matrix larger instead)
MIN_ROWS = 64


@register("stablehlo.convolution")
def convolution(b: Builder, op: ir.Op) -> list[Binding]:
    return _translate(b, op, Convolution.of(op))


@register("stablehlo.dynamic_conv")
def dynamic_conv(b: Builder, op: ir.Op) -> list[Binding]:
    """A convolution whose padding is its third operand: translated when that is a
    constant, whose values are then known here."""
    padding = b.readable(op.operands[2])
    if padding.is_literal:
        values = np.full(op.operands[2].type.shape, padding.value)
    elif padding.data in b.constants:
        values = b.constants[padding.data]
    else:
        raise b.unsupported("padding computed at run time", ["constant padding"])
    return _translate(b, op, Convolution.of(op, values))


def _translate(b: Builder, op: ir.Op, conv: Convolution) -> list[Binding]:
    lhs = op.operands[0]
    lhs_element, kernel_element, result, compute = op_types(b, op, "convolution")
    if conv.feature_groups > 1 and conv.batch_groups > 1:
        raise b.unsupported("both feature_group_count and batch_group_count above 1")
    accumulate = accumulated(compute)
    target = b.allocate_result(op.result)
    if op.result.type.size == 0:
        return [target]
    if conv.depth == 0 or lhs.type.size == 0:  # every window sums nothing (or only padding)
        b.emit.copy(Literal(result.numpy.type(0), op.result.type), target)
        return [target]
    types = (compute, accumulate, result)
    chosen = annotation(op, ProductKernel) or convolution_kernel(op, b.machine, tuned=False)
    if chosen.kernel == "blas":
        _blas_convolution(b, op, conv, types, target)
    else:
        _loop_convolution(b, op, conv, types, target)
    return [target]


# ---------------------------------------------------------------------- loop nest


def _loop_convolution(b: Builder, op: ir.Op, conv: Convolution,
                      types: tuple[ElementType, ElementType, ElementType], target: Array
                      ) -> None:
    """One map over the result; per element, a loop nest over the window (outer) and the
    input features (inner) with one register sum, both operands read in place."""
    compute, accumulate, result = types
    x, w = (strided_operand(b.readable(v)) or strided_operand(b.array(v)) for v in op.operands[:2])
    params = map_params(len(conv.out_shape))
    out_feature, out_batch = params[conv.out_feature], params[conv.out_batch]
    zero = literal(accumulate.numpy.type(0), accumulate)
    code = Writer()
    code.line(f"const int64_t __g = (int64_t){out_feature} / {conv.group_out}LL;",
              f"const auto* __xb = __x + ({x.offset}LL + (int64_t){out_batch} * "
              f"{x.strides[conv.lhs_batch]}LL + __g * {conv.lhs_group_stride(x.strides)}LL);",
              f"const auto* __wb = __w + ({w.offset}LL + (int64_t){out_feature} * "
              f"{w.strides[conv.kernel_out]}LL);",
              f"{accumulate.compute} __acc = {zero};")
    valid, x_terms = "true", [f"__c * {x.strides[conv.lhs_feature]}LL"]
    w_terms = [f"__c * {w.strides[conv.kernel_in]}LL"]
    with contextlib.ExitStack() as window:
        for d, size in enumerate(conv.window):
            window.enter_context(code.loops(Loop(f"__k{d}", "0", f"{size}LL"), scalar=True))
            code.line(f"const int64_t __q{d} = "
                      f"{conv.position(d, params[conv.out_spatial[d]], f'__k{d}')};",
                      f"const bool __v{d} = {valid} && {conv.valid(d, f'__q{d}')};")
            valid = f"__v{d}"
            x_terms.append(conv.lhs_offset(d, f"__q{d}", x.strides))
            w_terms.append(f"__k{d} * {w.strides[conv.kernel_spatial[d]]}LL")
        load_x = converted(f"__xb[{' + '.join(x_terms)}]", x.element, compute)
        load_w = converted(f"__wb[{' + '.join(w_terms)}]", w.element, compute)
        with code.loops(Loop("__c", "0", f"{conv.group_in}LL"), scalar=True):
            code.line(f"const {accumulate.compute} __xv = {valid} ? {load_x} : {zero};",
                      f"__acc = h2d::add(__acc, h2d::mul(__xv, {load_w}));")
    code.line(f"__out = {stored('__acc', accumulate, result)};")
    b.emit.map("convolution", target.type.shape, code.text(),
               {"__x": Whole(x.array), "__w": Whole(w.array)}, {"__out": Element(target)},
               conv.depth)


# -------------------------------------------------------------------------- im2col


def _pack_kernel(b: Builder, value: ir.Value, conv: Convolution,
                 convert: tuple[ElementType, ElementType]) -> Array:
    """The kernel as ``groups`` matrices (window positions x input features) x output
    features in the accumulation type (one map: large for a weight gradient, whose
    "kernel" is the gradient of the result)."""
    compute, accumulate = convert
    shape = (conv.groups, *conv.window, conv.group_in, conv.group_out)
    packed = b.emit.add_array("kernel_packed", ir.TensorType(shape, accumulate.element))
    params = map_params(len(shape))
    positions = [""] * len(conv.kernel_shape)
    for d, dim in enumerate(conv.kernel_spatial):
        positions[dim] = params[1 + d]
    positions[conv.kernel_in] = params[-2]
    positions[conv.kernel_out] = f"({conv.group_out} * {params[0]} + {params[-1]})"
    binding, source = b.readable(value), dtypes.of(value.type)
    read, inputs = read_element(binding, source, positions)
    b.emit.map("kernel_pack", shape, f"__out = {converted(read, source, compute)};", inputs,
               {"__out": Element(packed)})
    return packed


def _single_strided(dims: Sequence[tuple[int, int]]) -> tuple[int, int | None]:
    """The longest tail of ``dims`` ((size, stride) pairs) that indexes like one dimension:
    where it starts, and its stride (None if it holds one element)."""
    start, stride, run = len(dims), None, 1
    for j in reversed(range(len(dims))):
        size, step = dims[j]
        if size != 1:
            if stride is None:
                stride = step
            elif step != stride * run:
                break
            run *= size
        start = j
    return start, stride


def _decode(flat: str, dims: Sequence[tuple[str, int]]) -> list[str]:
    """C++ that splits the row-major ``flat`` index over ``dims`` ((name, size) pairs)."""
    if not dims:
        return []
    lines = [f"int64_t __t = {flat};"]
    for name, size in reversed(dims[1:]):
        lines.append(f"const int64_t {name} = __t % {size}LL; __t /= {size}LL;")
    return lines + [f"const int64_t {dims[0][0]} = __t;"]


def _blas_convolution(b: Builder, op: ir.Op, conv: Convolution,
                      types: tuple[ElementType, ElementType, ElementType], target: Array
                      ) -> None:
    """im2col: per group and chunk of result rows, pack the windows into a patch matrix
    and multiply it by the packed kernel with one ``cblas_?gemm`` (see the module doc)."""
    from dace.libraries.blas.environments.openblas import OpenBLAS

    compute, accumulate, result = types
    lhs_value, kernel_value = op.operands[:2]
    x = strided_operand(b.readable(lhs_value)) or strided_operand(b.array(lhs_value))
    packed = _pack_kernel(b, kernel_value, conv, (compute, accumulate))
    depth, group_out, rows = conv.depth, conv.group_out, conv.rows
    # A deep kernel (a weight gradient's) is cut into slabs of its first spatial dimension,
    # whose products are summed by the GEMMs (beta = 1), so that patches stay small.
    taps = conv.window[0] if conv.rank else 1
    per_slab = max(1, min(taps, MAX_DEPTH * taps // depth))
    slabs, slab_depth = -(-taps // per_slab), per_slab * depth // taps
    out_strides = row_major(conv.out_shape)
    feature_stride = out_strides[conv.out_feature]
    row_dims = conv.row_dims()
    start, row_stride = _single_strided([(size, out_strides[dim]) for _, size, dim in row_dims])
    block = math.prod(size for _, size, _ in row_dims[start:])
    chunk = max(MIN_ROWS, b.machine.patch_elements // slab_depth)

    # Where the GEMM writes: into the result, as rows x features (features contiguous) or
    # features x rows (rows contiguous), if the rows of a block are single-strided and
    # blocks are not too short; else into a scratch block scattered into the result.
    layout = None
    if precision_key(accumulate) == precision_key(result) and block >= min(rows, MIN_ROWS):
        if ((feature_stride == 1 or group_out == 1)
                and group_out <= (row_stride or group_out) <= BLAS_INT_MAX):
            layout = "rows"
        elif row_stride in (1, None) and min(chunk, block) <= feature_stride <= BLAS_INT_MAX:
            layout = "features"
    if layout is None:
        block = rows
    chunk = min(chunk, block)
    per_block = -(-block // chunk)
    chunks = rows // block * per_block
    tasks = conv.groups * chunks
    # Tasks run in parallel, each packing its chunk and calling a one-thread GEMM, when
    # there are enough of them and their patch matrices are small; else one after the
    # other, each GEMM using OpenBLAS's threads.
    small = chunk * slab_depth <= 4 * b.machine.patch_elements
    threads = max(1, min(b.machine.threads, tasks // 2) if small else 1)

    patches = b.emit.add_array("patches", ir.TensorType((threads, chunk, slab_depth),
                                                   accumulate.element))
    scratch = (b.emit.add_array("conv_block", ir.TensorType((threads, chunk, group_out),
                                                       accumulate.element))
               if layout is None else None)
    ctype = accumulate.compute
    code = Writer()
    code.line(f"const auto* __lhs = __x + {x.offset}LL;")
    if accumulate.is_complex:
        code.line(f"const {ctype} __one(1), __zero(0);")
    slab = ("__ka", "__kb", "__s") if slabs > 1 else ("0", str(taps), "0")

    def tasks_loop():
        with code.loops(Loop("__task", "0", f"{tasks}LL"), scalar=True):
            code.line(f"const int64_t __g = __task / {chunks}LL, __chunk = __task % {chunks}LL;",
                      f"const int64_t __r0 = __chunk / {per_block}LL * {block}LL + "
                      f"__chunk % {per_block}LL * {chunk}LL;",
                      f"const int64_t __rn = std::min<int64_t>({chunk}LL, "
                      f"(__chunk / {per_block}LL + 1) * {block}LL - __r0);")
            with contextlib.ExitStack() as slabs_loop:
                if slabs > 1:
                    slabs_loop.enter_context(code.loops(Loop("__s", "0", f"{slabs}LL"),
                                                        scalar=True))
                    code.line(f"const int64_t __ka = __s * {per_slab}LL, "
                              f"__kb = std::min<int64_t>({taps}LL, __ka + {per_slab}LL);")
                code.line(f"const {ctype}* __wg = __w + __g * {depth * group_out}LL + "
                          f"{slab[0]} * {depth // taps * group_out}LL;")
                _pack_patches(code, conv, x, (compute, accumulate), slab, slab_depth)
                _multiply(code, conv, accumulate, layout, slab, slab_depth,
                          (start, block, row_stride, feature_stride))
            if layout is None:
                _scatter(code, conv, accumulate, result, feature_stride)

    buffers = [f"{ctype}* __pt = __patches + __worker * {chunk * slab_depth}LL;"]
    if scratch is not None:
        buffers.append(f"{ctype}* __bt = __block + __worker * {chunk * group_out}LL;")
    if threads == 1:
        code.line("const int64_t __worker = 0;", *buffers)
        tasks_loop()
    else:
        b.emit.include_once("#include <omp.h>\n")
        # one thread per GEMM: OpenBLAS's threads would fight the OpenMP workers for cores
        code.line("#ifdef OPENBLAS_VERSION",
                  "const int __blas_threads = openblas_get_num_threads();",
                  "openblas_set_num_threads(1);",
                  "#endif",
                  f"#pragma omp parallel num_threads(std::min({threads}, omp_get_max_threads()))")
        with code.block(""):
            code.line("const int64_t __worker = omp_get_thread_num();", *buffers,
                      "#pragma omp for schedule(dynamic)")
            tasks_loop()
        code.line("#ifdef OPENBLAS_VERSION",
                  "openblas_set_num_threads(__blas_threads);",
                  "#endif")
    outputs = {"__c": Whole(target), "__patches": Whole(patches)}
    if scratch is not None:
        outputs["__block"] = Whole(scratch)
    b.emit.map("convolution_blas", (), code.text(), {"__x": Whole(x.array), "__w": Whole(packed)},
               outputs, environments=[OpenBLAS.full_class_path()])


def _pack_patches(code: Writer, conv: Convolution, x: Operand,
                  convert: tuple[ElementType, ElementType], slab: tuple[str, str, str],
                  width: int) -> None:
    """C++ that packs rows ``__r0 .. __r0 + __rn`` of group ``__g`` into the patch matrix
    ``__pt`` (rows of ``width``): per result row, the input features of each kernel tap
    side by side, the first spatial dimension's taps from ``slab[0]`` to ``slab[1]`` (C++
    expressions); zeros where a tap falls on padding. Contiguous features that need no
    conversion are one ``memcpy`` per tap, or per row of taps when those lie side by side
    too (the innermost spatial dimension of NHWC without dilation)."""
    compute, accumulate = convert
    ctype = accumulate.compute
    size = f"sizeof({ctype})"
    group_in, window = conv.group_in, conv.window
    feature_stride = x.strides[conv.lhs_feature]
    copies = (precision_key(x.element) == precision_key(accumulate)
              and (feature_stride == 1 or group_in == 1))
    last = conv.rank - 1
    span = (copies and conv.rank > 0 and x.strides[conv.lhs_spatial[last]] == group_in
            and conv.lhs_dilation[last] == 1 and conv.rhs_dilation[last] == 1
            and not conv.reversal[last])

    def taps(d):
        return slab[:2] if d == 0 else ("0", str(window[d]))

    with code.loops(Loop("__r", "0", "__rn"), scalar=True), contextlib.ExitStack() as nest:
        code.lines(_decode("__r0 + __r", [(name, n) for name, n, _ in conv.row_dims()]))
        code.line(f"const auto* __src = __lhs + (__n * {x.strides[conv.lhs_batch]}LL + __g * "
                  f"{conv.lhs_group_stride(x.strides)}LL);",
                  f"{ctype}* __dst = __pt + __r * {width}LL;")
        offsets = []
        for d in range(last if span else conv.rank):
            below = math.prod(window[d + 1:]) * group_in
            first, end = taps(d)
            nest.enter_context(code.loops(Loop(f"__k{d}", first, end), scalar=True))
            code.line(f"const int64_t __q{d} = {conv.position(d, f'__p{d}', f'__k{d}')};",
                      f"if (!({conv.valid(d, f'__q{d}')})) {{ std::memset(__dst, 0, "
                      f"{below}LL * {size}); __dst += {below}LL; continue; }}")
            offsets.append(conv.lhs_offset(d, f"__q{d}", x.strides))
        if span:  # the taps from __lo to __hi of [first, end) are inside the lhs
            first, end = taps(last)
            extent = conv.lhs_shape[conv.lhs_spatial[last]]
            offsets.append(f"(__q{last} + __lo) * {group_in}LL")
            code.line(f"const int64_t __q{last} = {conv.position(last, f'__p{last}', '0')};",
                      f"const int64_t __lo = std::max<int64_t>({first}, -__q{last});",
                      f"const int64_t __hi = std::min<int64_t>({end}, {extent}LL - __q{last});",
                      f"if (__hi <= __lo) std::memset(__dst, 0, ({end} - {first}) * "
                      f"{group_in}LL * {size});")
            with code.block("else"):
                code.line(f"std::memset(__dst, 0, (__lo - {first}) * {group_in}LL * {size});",
                          f"std::memcpy(__dst + (__lo - {first}) * {group_in}LL, "
                          f"__src + ({' + '.join(offsets)}), (__hi - __lo) * {group_in}LL * "
                          f"{size});",
                          f"std::memset(__dst + (__hi - {first}) * {group_in}LL, 0, "
                          f"({end} - __hi) * {group_in}LL * {size});")
            code.line(f"__dst += ({end} - {first}) * {group_in}LL;")
            return
        code.line(f"const auto* __tap = __src + ({' + '.join(offsets) or '0'});")
        if copies:
            code.line(f"std::memcpy(__dst, __tap, {group_in}LL * {size});")
        else:
            value = converted(f"__tap[__c * {feature_stride}LL]", x.element, compute)
            with code.loops(Loop("__c", "0", f"{group_in}LL"), scalar=True):
                code.line(f"__dst[__c] = {value};")
        code.line(f"__dst += {group_in}LL;")


def _multiply(code: Writer, conv: Convolution, accumulate: ElementType, layout: str | None,
              slab: tuple[str, str, str], width: int,
              strides: tuple[int, int, int | None, int]) -> None:
    """C++: the GEMM of the patch matrix (rows of ``width``; the taps of ``slab``) and the
    group's kernel, added to what earlier slabs summed, into the result (in ``layout``;
    ``strides``: where its single-strided row blocks start among the row dimensions, their
    length and stride, the feature stride) or the scratch block."""
    start, block, row_stride, feature_stride = strides
    group_out = conv.group_out
    depth = f"({slab[1]} - {slab[0]}) * {conv.depth // (conv.window[0] if conv.rank else 1)}LL"
    if accumulate.is_complex:
        alpha, beta = "&__one", "&__zero" if slab[2] == "0" else f"{slab[2]} ? &__one : &__zero"
    else:
        alpha, beta = "1", "0" if slab[2] == "0" else f"{slab[2]} ? 1 : 0"
    gemm = f"cblas_{BLAS_TYPES[accumulate.element]}gemm(CblasRowMajor, "
    if layout is None:
        code.line(f"{gemm}CblasNoTrans, CblasNoTrans, __rn, {group_out}, {depth}, {alpha}, "
                  f"__pt, {width}, __wg, {group_out}, {beta}, __bt, {group_out});")
        return
    out_strides = row_major(conv.out_shape)
    row_dims = conv.row_dims()
    with code.block(""):  # a scope for _decode's variables
        code.lines(_decode(f"__r0 / {block}LL", [(name, n) for name, n, _ in row_dims[:start]]))
        terms = [f"__g * {group_out * feature_stride}LL"]
        terms += [f"{name} * {out_strides[dim]}LL" for name, _, dim in row_dims[:start]]
        terms.append(f"(__r0 % {block}LL) * {row_stride or 0}LL")
        out = f"__c + ({' + '.join(terms)})"
        if layout == "rows":
            code.line(f"{gemm}CblasNoTrans, CblasNoTrans, __rn, {group_out}, {depth}, "
                      f"{alpha}, __pt, {width}, __wg, {group_out}, {beta}, {out}, "
                      f"{row_stride or group_out});")
        else:
            code.line(f"{gemm}CblasTrans, CblasTrans, {group_out}, __rn, {depth}, {alpha}, "
                      f"__wg, {group_out}, __pt, {width}, {beta}, {out}, {feature_stride});")


def _scatter(code: Writer, conv: Convolution, accumulate: ElementType,
             result: ElementType, feature_stride: int) -> None:
    """C++ that stores the scratch block's rows into the result (rounded to its type)."""
    out_strides = row_major(conv.out_shape)
    row_dims = conv.row_dims()
    offset = " + ".join([f"__g * {conv.group_out * feature_stride}LL"] + [
        f"{name} * {out_strides[dim]}LL" for name, _, dim in row_dims])
    with code.loops(Loop("__r", "0", "__rn"), scalar=True):
        code.lines(_decode("__r0 + __r", [(name, n) for name, n, _ in row_dims]))
        code.line(f"auto* __dst = __c + ({offset});",
                  f"const {accumulate.compute}* __row = __bt + __r * {conv.group_out}LL;")
        with code.loops(Loop("__o", "0", f"{conv.group_out}LL"), scalar=True):
            code.line(f"__dst[__o * {feature_stride}LL] = "
                      f"{stored('__row[__o]', accumulate, result)};")
