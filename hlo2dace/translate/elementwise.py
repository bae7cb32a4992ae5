"""Elementwise ops: one table of C++ expression templates over the operands' compute-type
expressions. The semantics that C++ does not give for free (wrapping integer arithmetic,
division by zero, out-of-range shifts, NaN-propagating max/min, XLA's float-to-int
conversion...) live in ``include/h2d/``. The builder fuses these ops; see ``fusion.py``.
``stablehlo.map`` applies a region of such ops element by element."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import sympy

from .. import ir, symbolic
from ..errors import UnsupportedError
from .bindings import Binding
from .builder import Builder
from .dtypes import ElementType, element_type
from .emitter import Element
from .known import result_dtype
from .literals import literal
from .registry import register, register_elementwise

#: op -> C++ template; ``{0}``, ``{1}``... are the operands. Ops whose expression depends
#: on attributes or types are functions below.
TEMPLATES = {
    "abs": "h2d::abs_({0})",
    "add": "h2d::add({0}, {1})",
    "subtract": "h2d::sub({0}, {1})",
    "multiply": "h2d::mul({0}, {1})",
    "divide": "h2d::div({0}, {1})",
    "power": "h2d::pow_({0}, {1})",
    "negate": "h2d::neg({0})",
    "sign": "h2d::sign({0})",
    "maximum": "h2d::max_({0}, {1})",
    "minimum": "h2d::min_({0}, {1})",
    "sqrt": "h2d::sqrt_({0})",
    "rsqrt": "h2d::rsqrt({0})",
    "exponential": "h2d::exp_({0})",
    "exponential_minus_one": "h2d::expm1_({0})",
    "log": "h2d::log_({0})",
    "log_plus_one": "h2d::log1p_({0})",
    "sine": "h2d::sin_({0})",
    "cosine": "h2d::cos_({0})",
    "tan": "h2d::tan_({0})",
    "tanh": "h2d::tanh_({0})",
    "atan2": "h2d::atan2_({0}, {1})",
    "floor": "std::floor({0})",
    "ceil": "std::ceil({0})",
    "round_nearest_afz": "h2d::round_afz({0})",
    "round_nearest_even": "h2d::round_even({0})",
    "is_finite": "h2d::is_finite({0})",
    "not": "h2d::not_({0})",
    "select": "h2d::select({0}, {1}, {2})",
    "clamp": "h2d::clamp({0}, {1}, {2})",
    "real": "std::real({0})",
    "imag": "std::imag({0})",
}


def _remainder(op, args, ins, out: ElementType):
    if out.is_complex:  # the spec allows it; XLA crashes on it and JAX never emits it
        raise UnsupportedError(op.name, "remainder of complex numbers", op.location,
                               ["integer and floating-point remainder"])
    return f"h2d::rem({args[0]}, {args[1]})"


def _cbrt(op, args, ins, out: ElementType):
    if out.is_complex:  # the spec's principal cube root (XLA rejects it; JAX never emits it)
        return f"std::exp(std::log({args[0]}) / {out.compute}(3))"
    return f"h2d::cbrt_({args[0]})"


def _bitwise(symbol: str, logical: str):
    def expression(op, args, ins, out: ElementType):
        if out.is_bool:
            return f"({args[0]} {logical} {args[1]})"
        return f"(({out.compute})({args[0]} {symbol} {args[1]}))"
    return expression


def _shift(kind: str):
    def expression(op, args, ins, out: ElementType):
        if out.narrow_bits:
            return f"h2d::{kind}_n<{out.narrow_bits}>({args[0]}, {args[1]})"
        return f"h2d::{kind}({args[0]}, {args[1]})"
    return expression


def _mask(arg: str, element: ElementType) -> str:
    if element.narrow_bits:
        return f"(({element.compute})(({arg}) & {(1 << element.narrow_bits) - 1}))"
    return arg


def _popcnt(op, args, ins, out):
    # XLA counts the bits of a signed narrow integer sign-extended to a byte (popcnt of
    # i4 -2 is 7); unsigned ones hold no bits above their width
    return f"h2d::popcnt({args[0]})"


def _clz(op, args, ins, out):
    bits = out.narrow_bits or out.storage.bytes * 8
    return f"h2d::clz({_mask(args[0], out)}, {bits})"


_COMPARISONS = {"EQ": "==", "NE": "!=", "GE": ">=", "GT": ">", "LE": "<=", "LT": "<"}


#: how a literal bf16 zero (either sign) appears among an op's arguments (see fusion.py)
_BF16_ZEROS = {f"({literal(value, element_type('bf16'))})"
               for value in (ml_dtypes.bfloat16(0.0), ml_dtypes.bfloat16(-0.0))}


def _compare(op, args, ins, out):
    direction = str(op.attr("comparison_direction"))
    kind = op.attr("compare_type")
    kind = str(kind) if kind is not None else None
    symbol = _COMPARISONS[direction]
    a, b = args
    element = ins[0]
    if element.is_complex and direction not in ("EQ", "NE"):
        raise UnsupportedError(op.name, f"{direction} on complex numbers", op.location,
                               ["EQ", "NE"])
    if element.element == "bf16" and direction in ("EQ", "NE") and (
            a in _BF16_ZEROS or b in _BF16_ZEROS):
        # XLA tests the bits when comparing a bf16 with a constant zero (x != 0 is how JAX
        # converts to bool): a denormal, zero under DAZ elsewhere, is not zero here
        other = b if a in _BF16_ZEROS else a
        return f"((h2d::bit_cast<uint32_t>({other}) & 0x7FFFFFFFu) {symbol} 0u)"
    if kind == "TOTALORDER" and (element.is_float):
        return f"(h2d::total_order_key({a}) {symbol} h2d::total_order_key({b}))"
    if element.is_bool:
        return f"((int){a} {symbol} (int){b})"
    return f"({a} {symbol} {b})"


def _convert(op, args, ins, out: ElementType):
    """C++ of a conversion as XLA converts: bits tested for 16-bit and small floats to
    bool, saturation and NaN to 0 for floats to integers, small floats rounded once."""
    (source,) = ins
    (x,) = args
    if source.is_stored_as_bits and source.element != "f16" and out.is_bool:
        # XLA tests the bits: a bf16 denormal (or f8E8M0FNU's 2^-127: a float denormal,
        # zero under DAZ) is true
        return f"((h2d::bit_cast<uint32_t>({x}) & 0x7FFFFFFFu) != 0)"
    if out.is_integer and source.is_float:
        info = ml_dtypes.iinfo(out.numpy)
        if out.narrow_bits:
            expression = (f"(({out.compute})h2d::convert<int32_t>("
                          f"h2d::clamp<{source.compute}>({info.min}, {x}, {info.max})))")
        else:
            expression = f"h2d::convert<{out.compute}>({x})"
        if source.is_small_float:
            # XLA saturates where the value reaches the integer range's ends converted to
            # the small type: 6.0, f4E2M1FN's largest, converts to INT32_MAX
            for end in (info.max, info.min):
                edge = np.array(end, np.float64).astype(source.numpy).astype(np.float64)
                if np.isfinite(edge):
                    test = ">=" if end == info.max else "<="
                    expression = (f"({x} {test} {literal(edge, source)} ? "
                                  f"{literal(end, out)} : {expression})")
        return expression
    if "f16" in (source.element, out.element) and source.element != out.element and \
            source.is_float and not source.is_small_float and \
            (out.is_float or out.is_complex) and not out.is_small_float:
        # f16 values keep a signalling NaN (h2d/floats.h); XLA's conversions between f16
        # and the other float types quieten it, as the CPU's instructions do
        x = f"h2d::quiet({x})"
    if source.is_small_float and out.compute == "double":  # exactly, as XLA widens them
        return f"h2d::{source.rounding}_to_double({source.store(x)})"
    if out.is_small_float:  # rounded once, from a double too
        if source.compute == "double":
            return f"h2d::{out.rounding}_to_float(h2d::double_to_{out.rounding}({x}))"
        return out.rounded(f"h2d::convert<float>({x})")
    if out.element == "f16" and source.element in ("f64", "complex<f64>"):
        # once where the CPU has f16 instructions, else through float, as XLA converts
        return f"h2d::f64_to_f16(h2d::convert<double>({x}))"
    # f64 -> bf16: to float here, then rounded by ``fit``: twice, as XLA converts
    return f"h2d::convert<{out.compute}>({x})"


def _same_width(op) -> bool:
    """bitcast_convert is elementwise when the widths agree (the ranks then do too)."""
    return op.operands[0].type.rank == op.result.type.rank


def _bitcast(op, args, ins, out: ElementType):
    (source,) = ins
    if source.bits != out.bits:
        raise UnsupportedError(op.name, f"bitcast between {source.element} and {out.element}",
                               op.location)
    bits = f"h2d::bit_cast<{out.storage.ctype}>({source.store(args[0])})"
    return out.load(bits)


def _complex(op, args, ins, out):
    return f"{out.compute}({args[0]}, {args[1]})"


def _reduce_precision(op, args, ins, out):
    exponent, mantissa = int(op.attr("exponent_bits")), int(op.attr("mantissa_bits"))
    if "f16" in (out.element, out.via):  # on the f16 bits, as XLA does (f16 denormals flush)
        return f"h2d::reduce_precision_f16({args[0]}, {exponent}, {mantissa})"
    # bf16 in a float: the same exponent, and float rounding to >= 7 bits keeps the value
    return f"h2d::reduce_precision({args[0]}, {exponent}, {mantissa})"


def _logistic(op, args, ins, out):
    # XLA expands logistic into 1 / (1 + exp(-x)); for f16 (and the small floats it
    # computes in f16) each op rounds to f16, bf16 is computed in f32 and rounded once
    def r(expression):
        return f"h2d::round_f16({expression})" if "f16" in (out.element, out.via) \
            else f"({expression})"

    one = f"{out.compute}(1)"
    exp = r(f"h2d::exp_logistic({r(f'h2d::neg({args[0]})')})")
    return f"h2d::div({one}, {r(f'h2d::add({one}, {exp})')})"


FUNCTIONS = {
    "remainder": _remainder,
    "cbrt": _cbrt,
    "and": _bitwise("&", "&&"),
    "or": _bitwise("|", "||"),
    "xor": _bitwise("^", "!="),
    "shift_left": _shift("shl"),
    "shift_right_logical": _shift("shr_logical"),
    "shift_right_arithmetic": _shift("shr_arithmetic"),
    "popcnt": _popcnt,
    "count_leading_zeros": _clz,
    "compare": _compare,
    "convert": _convert,
    "bitcast_convert": _bitcast,
    "complex": _complex,
    "reduce_precision": _reduce_precision,
    "logistic": _logistic,
}


def _identity(boolean, integer, floating, complex_=None):
    """The exact identity of an associative, commutative op, by element type (None where
    it has none): ``integer`` may be a function of the type's ``iinfo``. A float identity
    the type cannot hold (no infinity in f8E4M3FN, no zero in f8E8M0FNU) is none."""
    def identity(element: ElementType):
        if element.is_bool:
            value = boolean
        elif element.is_integer:
            value = integer(ml_dtypes.iinfo(element.numpy)) if callable(integer) else integer
        else:
            value = complex_ if element.is_complex else floating
        if value is None:
            return None
        result = np.array(value).astype(element.numpy)[()]
        if element.is_float and float(result) != value:
            return None
        return result
    return identity


#: what a reducer body of one of these ops may start each partial fold from (reductions in
#: lanes and chunks, ``reduction.py``): -0.0 for float sums, so signed zeros survive; no
#: complex product, as (1+0i)(a+bi) is not exact for infinite a or b; all bits for and
IDENTITIES = {
    "add": _identity(False, 0, -0.0, complex(-0.0, -0.0)),
    "multiply": _identity(True, 1, 1.0),
    "maximum": _identity(False, lambda info: info.min, -np.inf),
    "minimum": _identity(True, lambda info: info.max, np.inf),
    "and": _identity(True, -1, None),
    "or": _identity(False, 0, None),
    "xor": _identity(False, 0, None),
}
#: ops that cost tens of simple ops: a pending value one computes is written once for its
#: readers rather than recomputed by each (as XLA will not duplicate them)
EXPENSIVE = {"tanh", "exponential", "exponential_minus_one", "log", "log_plus_one",
             "logistic", "sine", "cosine", "tan", "power", "atan2", "cbrt"}
#: ops whose result is an operand's value or one the operands' type holds: an f16's or
#: bf16's result is not rounded again (an f16 ReLU computed ``round_f16(max(x, 0))``)
EXACT = {"maximum", "minimum", "select", "clamp", "abs", "negate", "sign", "floor", "ceil",
         "round_nearest_afz", "round_nearest_even"}


def _known_binary(function):
    def known(op, operand):
        return function(operand(0), operand(1)).astype(result_dtype(op))
    return known


_KNOWN_COMPARISONS = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
                      "GT": np.greater, "GE": np.greater_equal}

#: how an op computes integers known while translating (``known.py``), in NumPy, whose
#: integers wrap as StableHLO's do (so: no division, no shifts)
KNOWN = {
    "add": _known_binary(np.add), "subtract": _known_binary(np.subtract),
    "multiply": _known_binary(np.multiply), "maximum": _known_binary(np.maximum),
    "minimum": _known_binary(np.minimum), "and": _known_binary(np.bitwise_and),
    "or": _known_binary(np.bitwise_or), "xor": _known_binary(np.bitwise_xor),
    "negate": lambda op, operand: np.negative(operand(0)).astype(result_dtype(op)),
    "sign": lambda op, operand: np.sign(operand(0)).astype(result_dtype(op)),
    "compare": lambda op, operand: _KNOWN_COMPARISONS[str(op.attr("comparison_direction"))](
        operand(0), operand(1)),
    "select": lambda op, operand: np.where(operand(0), operand(1), operand(2)),
    "clamp": lambda op, operand: np.minimum(np.maximum(operand(1), operand(0)), operand(2)),
    "convert": lambda op, operand: operand(0).astype(result_dtype(op)),
}


_SYMBOLIC_COMPARISONS = {"EQ": sympy.Eq, "NE": sympy.Ne, "GE": sympy.Ge, "GT": sympy.Gt,
                         "LE": sympy.Le, "LT": sympy.Lt}


def _symbolic(function):
    """The value rule (``symbolic.py``) of an op computing ``function`` of its operands'
    elements as sympy expressions."""
    def rule(op, knowns, shapes):
        flat = symbolic.flat_values(op, knowns)
        return None if flat is None else [function(op, *args) for args in zip(*flat)]
    return rule


def _symbolic_logic(function):
    """``function`` on booleans only (sympy's And/Or are not bitwise)."""
    def rule(op, knowns, shapes):
        return _symbolic(function)(op, knowns, shapes) \
            if ir.is_bool(op.results[0].type.element) else None
    return rule


def _symbolic_convert(op, knowns, shapes):
    known, t = knowns[0], op.results[0].type
    if known is None:
        return None
    source = op.operands[0].type.element
    if ir.is_bool(t.element) and not ir.is_bool(source):
        return [sympy.Ne(v, 0) for v in known.flat]
    if ir.is_bool(source) and not ir.is_bool(t.element):
        return [sympy.Piecewise((1, v), (0, True)) for v in known.flat]
    return list(known.flat)


#: how an op computes the contents of small integer tensors from the module's size
#: symbols (``symbolic.py``: shape operands of dynamic ops, JAX's shape assertions);
#: integer division and remainder round toward zero
VALUE_RULES = {
    "add": _symbolic(lambda op, a, b: a + b),
    "subtract": _symbolic(lambda op, a, b: a - b),
    "multiply": _symbolic(lambda op, a, b: a * b),
    "divide": _symbolic(lambda op, a, b: sympy.sign(a * b) * (abs(a) // abs(b))),
    "remainder": _symbolic(lambda op, a, b: sympy.sign(a) * (abs(a) % abs(b))),
    "maximum": _symbolic(lambda op, a, b: sympy.Max(a, b)),
    "minimum": _symbolic(lambda op, a, b: sympy.Min(a, b)),
    "and": _symbolic_logic(lambda op, a, b: sympy.And(a, b)),
    "or": _symbolic_logic(lambda op, a, b: sympy.Or(a, b)),
    "compare": _symbolic(lambda op, a, b: _SYMBOLIC_COMPARISONS[
        op.attr("comparison_direction").value](a, b)),
    "select": _symbolic(lambda op, p, a, b: sympy.Piecewise((a, p), (b, True))),
    "not": _symbolic(lambda op, a: sympy.Not(a) if ir.is_bool(op.results[0].type.element)
                     else -a - 1),
    "convert": _symbolic_convert,
}


def _from_template(template: str):
    def expression(op, args, ins, out):
        return template.format(*args)
    return expression


for _name, _expression in [*((n, _from_template(t)) for n, t in TEMPLATES.items()),
                           *FUNCTIONS.items()]:
    register_elementwise(f"stablehlo.{_name}", _expression,
                         when=_same_width if _name == "bitcast_convert" else None,
                         identity=IDENTITIES.get(_name), expensive=_name in EXPENSIVE,
                         exact=_name in EXACT,
                         known=KNOWN.get(_name), value_rule=VALUE_RULES.get(_name))


@register("stablehlo.map")
def map_(b: Builder, op: ir.Op) -> list[Binding]:
    """One map whose tasklet is the region's ops on the operands' elements."""
    t = op.result.type
    if tuple(int(d) for d in op.attr("dimensions", ())) != tuple(range(t.rank)):
        raise b.unsupported(f"dimensions {list(op.attr('dimensions', ()))} (the spec allows "
                            f"only all of them, in order: {list(range(t.rank))})")
    target = b.allocate_result(op.result)
    if t.size == 0:
        return [target]
    inputs, arguments = b.element_reads(op.operands, t.rank)
    body, (returned,) = b.scalar_region(op.regions[0].entry, arguments, "__v")
    element = element_type(t.element, op.name, op.location)
    b.emit.map("map", t.shape, "\n".join(body + [f"__out = {element.store(returned)};"]),
               inputs, {"__out": Element(target)})
    return [target]
