"""Random bits: ``stablehlo.rng_bit_generator`` (THREE_FRY, PHILOX, and DEFAULT, which is
PHILOX on XLA's CPU), bit-exact with XLA, whose RngBitGeneratorExpander builds the
generators of xla/hlo/builder/lib/prng.cc (ported to h2d/rng.h):

* the state is ``[key, counter...]`` and comes back with the key and the advanced counter;
* THREE_FRY (state ui64[2]): the counter plus an element's row-major index through
  Threefry-2x32 gives two words. 64-bit outputs take both (low word first); 32-bit and
  narrower ones (truncated) take one each: the first even dimension (else the largest)
  is halved, and elements 2p and 2p+1 along it share the counter of position p;
* PHILOX (state ui64[2]: counter ``state[1]``, high word ``state[0]``; ui64[3]: the
  128-bit counter ``state[1:3]``, low word first): counter + k through Philox-4x32 gives
  the four words of elements 4k..4k+3 in row-major order (64-bit outputs: two elements of
  two words, low word first).

``jax.random`` with its default threefry implementation emits plain integer ops, and with
``jax_default_prng_impl='rbg'`` this op.

``stablehlo.rng`` (``lax.rng_uniform``) is stateful and its numbers are implementation-
defined: each execution draws a new Philox stream of the program (h2d/rng.h), so calls give
new numbers, as XLA's do, and a fresh process repeats the sequence."""

from __future__ import annotations

import math
import zlib

from .. import ir
from ..prelude import include
from . import dtypes
from .bindings import Binding, flat_index, map_params
from .builder import Builder
from .emitter import Element, Value, Whole
from .registry import register

HEADER = include("rng.h")

#: the algorithms XLA's CPU implements; DEFAULT is PHILOX there
ALGORITHMS = {"THREE_FRY": "THREE_FRY", "PHILOX": "PHILOX", "DEFAULT": "PHILOX"}
#: state sizes each algorithm accepts
STATE_SIZES = {"THREE_FRY": (2,), "PHILOX": (2, 3)}
#: work per output element of a generator map (see builder.schedule_for)
WORK = 16


@register("stablehlo.rng_bit_generator")
def rng_bit_generator(b: Builder, op: ir.Op) -> list[Binding]:
    """XLA's random bits (Threefry or Philox, bit for bit): one map writes the
    values, another the advanced state."""
    (state,), (new_state, output) = op.operands, op.results
    algorithm = ALGORITHMS.get(str(op.attr("rng_algorithm", "DEFAULT")))
    if algorithm is None:
        raise b.unsupported(f"rng_algorithm {op.attr('rng_algorithm')}", sorted(ALGORITHMS))
    if (state.type.rank != 1 or state.type.element not in ("ui64", "i64", "si64")
            or state.type.shape[0] not in STATE_SIZES[algorithm]):
        raise b.unsupported(f"{algorithm} with a state of type {state.type}",
                            [f"tensor<{n}xui64>" for n in STATE_SIZES[algorithm]])
    element = dtypes.of(output.type, op.name, op.location)
    if element.is_complex or element.is_bool:
        raise b.unsupported(f"random bits of type {output.type}", ["integers", "floats"])
    b.emit.include_once(HEADER)
    source = b.array(state)
    values = b.allocate_result(output)
    shape = tuple(output.type.shape)
    n = math.prod(shape)
    bits = element.storage_numpy.itemsize * 8
    if algorithm == "THREE_FRY":
        count = _threefry(b, values, shape, bits, element, source)
    else:
        count = _philox(b, values, n, bits, element, source)
    target = b.allocate_result(new_state)
    code = ["const uint64_t __key = __st[0];"]
    if state.type.shape[0] == 2:  # a 64-bit counter (PHILOX's high word is the key: kept)
        code.append(f"__out = __i0 == 0 ? __key : __st[1] + {count}ULL;")
    else:
        code += [f"const uint64_t __low = __st[1] + {count}ULL;",
                 "__out = __i0 == 0 ? __key : __i0 == 1 ? __low : "
                 "__st[2] + (__low < __st[1] ? 1 : 0);"]
    b.emit.map("rng_state", target.type.shape, "\n".join(code), {"__st": Whole(source)},
               {"__out": Element(target)})
    return [target, values]


def _cast(element: dtypes.ElementType, word: str) -> str:
    """C++ for the low bits of ``word`` as an element of the array (bit-cast: XLA's CPU
    returns float and signed outputs as unsigned integers of their width)."""
    if element.narrow_bits:  # 2- and 4-bit integers, wrapped in their byte
        return element.fit(f"({element.compute})({word})")
    bits = element.storage_numpy.itemsize * 8
    return f"h2d::bit_cast<{element.storage.ctype}>((uint{bits}_t)({word}))"


def _threefry(b: Builder, values, shape: tuple[int, ...], bits: int, element: dtypes.ElementType,
              source) -> int:
    """Threefry's values; returns by how much the counter advances."""
    if bits == 64:
        index = flat_index(shape, map_params(len(shape)))
        b.emit.map("threefry", shape, "\n".join([
            "uint32_t __x0, __x1;",
            f"h2d::rng::threefry2x32(__st[0], __st[1] + (uint64_t)({index}), __x0, __x1);",
            f"__out = {_cast(element, '__x0 | ((uint64_t)__x1 << 32)')};"]),
            {"__st": Whole(source)}, {"__out": Element(values)}, WORK)
        return math.prod(shape)
    dims = list(shape) or [1]
    split = next((d for d, n in enumerate(dims) if n % 2 == 0),
                 max(range(len(dims)), key=lambda d: (dims[d], -d)))
    half = dims.copy()
    half[split] = (dims[split] + 1) // 2
    params = map_params(len(dims))
    first = params.copy()
    first[split] = f"2 * {params[split]}"
    stride = math.prod(dims[split + 1:])
    code = [
        "uint32_t __x0, __x1;",
        f"h2d::rng::threefry2x32(__st[0], __st[1] + (uint64_t)"
        f"({flat_index(half, params)}), __x0, __x1);",
        f"const int64_t __at = {flat_index(dims, first)};",
        f"__dst[__at] = {_cast(element, '__x0')};"]
    second = f"__dst[__at + {stride}] = {_cast(element, '__x1')};"
    if dims[split] % 2:
        second = f"if (2 * {params[split]} + 1 < {dims[split]}) {second}"
    if shape:
        code.append(second)
    b.emit.map("threefry", tuple(half), "\n".join(code), {"__st": Whole(source)},
               {"__dst": Whole(values)}, WORK)
    return math.prod(half)


def _philox(b: Builder, values, n: int, bits: int, element: dtypes.ElementType,
            source) -> int:
    """Philox's values; returns by how much the counter advances."""
    words = 2 if bits == 64 else 4  # elements per counter
    blocks = -(-n // words)
    high = "__st[2]" if source.type.shape[0] == 3 else "__st[0]"
    code = [
        "const uint64_t __low = __st[1] + (uint64_t)__i0;",
        "uint32_t __x[4];",
        f"h2d::rng::philox4x32(__st[0], __low, {high} + (__low < __st[1] ? 1 : 0), __x);"]
    if bits == 64:
        elements = [_cast(element, f"__x[{j}] | ((uint64_t)__x[{j + 1}] << 32)")
                    for j in (0, 2)]
    else:
        elements = [_cast(element, f"__x[{j}]") for j in range(4)]
    for j, value in enumerate(elements):
        store = f"__dst[{words} * __i0 + {j}] = {value};"
        code.append(store if j < n % words or n % words == 0 else
                    f"if ({words} * __i0 + {j} < {n}) {store}")
    b.emit.map("philox", (blocks,), "\n".join(code), {"__st": Whole(source)},
               {"__dst": Whole(values)}, WORK)
    return blocks


#: ``stablehlo.rng``'s distributions and the element kinds each accepts
DISTRIBUTIONS = {"UNIFORM": "integers, bool and floats", "NORMAL": "floats"}


@register("stablehlo.rng")
def rng(b: Builder, op: ir.Op) -> list[Binding]:
    """UNIFORM: ``[a, b)`` (``a`` when the range is empty; a float that rounds to ``b``
    becomes ``a``); NORMAL: mean ``a``, standard
    deviation ``b``, by the Box-Muller transform, computed in double precision."""
    low, high = op.operands[:2]
    result = op.result
    distribution = str(op.attr("rng_distribution"))
    element = dtypes.of(result.type, op.name, op.location)
    if distribution not in DISTRIBUTIONS:
        raise b.unsupported(f"rng_distribution {distribution}", sorted(DISTRIBUTIONS))
    if element.is_complex or (distribution == "NORMAL" and not element.is_float):
        raise b.unsupported(f"{distribution} numbers of type {result.type}",
                            [f"{d}: {kinds}" for d, kinds in DISTRIBUTIONS.items()])
    b.emit.include_once(HEADER)
    stream = b.emit.add_array("rng_stream", ir.TensorType((1,), "ui64"))
    b.emit.map("rng_stream", stream.type.shape, "__out = h2d::rng::next_stream();",
               outputs={"__out": Element(stream)})
    values = b.allocate_result(result)
    a, z = element.load("__a"), element.load("__b")
    if element.is_float and distribution == "UNIFORM":
        value = f"{a} + ({z} - {a}) * ((double)(__w[0] >> 11) * 0x1p-53)"
    elif element.is_float:
        value = (f"{a} + {z} * (std::sqrt(-2.0 * std::log1p(-(double)(__w[0] >> 11) * 0x1p-53))"
                 " * std::cos(6.283185307179586 * ((double)(__w[1] >> 11) * 0x1p-53)))")
    else:
        value = (f"{z} > {a} ? {a} + ({element.compute})(__w[0] % "
                 f"((uint64_t){z} - (uint64_t){a})) : {a}")
    op_number = zlib.crc32(stream.name.encode())
    index = flat_index(result.type.shape, map_params(result.type.rank))
    code = ["uint64_t __w[2];",
            f"h2d::rng::stream_words({op_number}ULL, __s, (uint64_t)({index}), __w);",
            f"{element.compute} __v = {element.fit(f'({element.compute})({value})')};"]
    if element.is_float and distribution == "UNIFORM":  # rounding may reach the end
        code.append(f"if (!(__v < {z}) && {a} < {z}) __v = {a};")
    code.append(f"__out = {element.store('__v')};")
    b.emit.map("rng", values.type.shape, "\n".join(code),
               {"__a": Value(b.value(low)), "__b": Value(b.value(high)), "__s": Value(stream)},
               {"__out": Element(values)}, WORK)
    return [values]
