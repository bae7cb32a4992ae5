"""A nearly exact answer for ``compare``: a module's ops evaluated one by one by NumPy in a
wider floating-point type than the program's: float64 for 32-bit and narrower floats, long
double for float64 (the x87's 80-bit format on x86-64: a 64-bit significand against
float64's 53, rounding 2048 times finer). Its rounding errors are far below the program's,
so the distance of XLA's and of hlo2dace's results from it says how much of a difference
between them the formula itself makes (both lose the same digits) and how much is one
side's error.

The ops are evaluated as written in the module (no rewrite of XLA's), each with NumPy's
function of the wider type: the elementwise arithmetic, comparisons, conversions and
functions NumPy has, the shape ops, ``dot_general``, ``reduce`` with a one-op body,
``while`` and ``case``/``if``, and the slices that read or write at computed starts. Any
other op is named in an ``UnsupportedError``. Integers and booleans keep their types."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np

from . import ir
from .errors import UnsupportedError
from .frontend.inline import inline_calls
from .frontend.normalize import normalize
from .frontend.parser import parse_module
from .translate import dtypes


def wider(dtype: Any) -> np.dtype:
    """The type a floating-point ``dtype`` is evaluated in (others stay as they are);
    UnsupportedError where the machine has no float wider than float64."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return np.dtype(np.complex128 if dtype.itemsize <= 8 else long_double_complex())
    if is_float(dtype):
        return np.dtype(np.float64 if dtype.itemsize < 8 else long_double())
    return dtype


def is_float(dtype: np.dtype) -> bool:
    """Real floats of every width, ``ml_dtypes``' bfloat16 and small floats among them."""
    try:
        ml_dtypes.finfo(dtype)
    except ValueError:
        return False
    return dtype.kind != "c"


def long_double() -> np.dtype:
    """NumPy's long double, where it is wider than float64."""
    if np.finfo(np.longdouble).eps >= np.finfo(np.float64).eps:
        raise UnsupportedError("the extended-precision reference", "this machine's long "
                               "double is no wider than float64, so a float64 program has "
                               "no wider type to be evaluated in")
    return np.dtype(np.longdouble)


def long_double_complex() -> np.dtype:
    long_double()
    return np.dtype(np.clongdouble)


def describe(dtypes_of_outputs: Sequence[Any]) -> str:
    """How the reference of a program with outputs of these dtypes is computed."""
    wide = {wider(d) for d in dtypes_of_outputs}
    if np.dtype(np.longdouble) in wide or np.dtype(np.clongdouble) in wide:
        bits = np.finfo(np.longdouble).nmant + 1
        return f"the module's ops in long double ({bits}-bit significand) by NumPy"
    return "the module's ops in float64 by NumPy"


def evaluate(source: Any, arrays: Sequence[np.ndarray], entry: str | None = None
             ) -> list[np.ndarray]:
    """The results of the module ``source`` (what the frontend reads: StableHLO text,
    bytecode, an ``Exported``...) on ``arrays``, its floating-point values evaluated in the
    wider types (``wider``)."""
    module = inline_calls(parse_module(normalize(source).text))
    function = module.functions[entry] if entry else module.main
    values = [np.asarray(a) for a in arrays]
    values = [a.astype(wider(a.dtype)) for a in values]
    with np.errstate(all="ignore"):  # NaN, infinities and overflows as the program's
        return _Evaluator().block(function.body.entry, values)


def _type(value: ir.Value, op: ir.Op) -> np.dtype:
    """The wider NumPy type of an op's result (or operand) ``value``."""
    return wider(dtypes.of(value.type, op.name, op.location).numpy)


class _Evaluator:
    """Evaluates blocks; a region sees the values of the blocks around it (StableHLO's
    regions may use them)."""

    def block(self, block: ir.Block, arguments: Sequence[np.ndarray],
              outer: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
        env = dict(outer or {})
        env.update((a.name, v) for a, v in zip(block.arguments, arguments))
        for op in block.ops:
            operands = [env[v.name] for v in op.operands]
            if op.name in ("func.return", "stablehlo.return"):
                return operands
            rule = _RULES.get(op.name)
            if rule is None:
                raise UnsupportedError(op.name, "the extended-precision reference does not "
                                       "evaluate this op (it evaluates elementwise ops, shape "
                                       "ops, dot_general, reduce with one op, while, case and "
                                       "dynamic slices); compare without the reference",
                                       op.location)
            self.env = env  # what the op's regions see
            results = rule(self, op, operands)
            for value, result in zip(op.results, results):
                env[value.name] = result
        return []

    def region(self, op: ir.Op, k: int, arguments: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Region ``k`` of ``op`` (being evaluated in the current block) on ``arguments``."""
        outer = self.env
        try:
            return self.block(op.regions[k].entry, arguments, outer)
        finally:
            self.env = outer


def _elementwise(function: Callable) -> Callable:
    """A rule computing ``function(*operands)`` in the result's wider type."""
    def rule(evaluator, op, operands):
        result = np.asarray(function(*operands))
        return [result.astype(_type(op.result, op), copy=False)]
    return rule


def _divide(a, b):
    if a.dtype.kind in "iu":  # C's division: toward zero; by zero: all bits set
        divisor = np.where(b == 0, 1, b)
        quotient = a // divisor
        quotient = np.where((quotient < 0) & (quotient * divisor != a), quotient + 1,
                            quotient)
        return np.where(b == 0, -1, quotient).astype(a.dtype)
    return a / b


def _remainder(a, b):
    if a.dtype.kind in "iu":  # the dividend's sign; by zero: the dividend
        return np.where(b == 0, a, np.fmod(a, np.where(b == 0, 1, b)))
    return np.fmod(a, b)


def _compare(evaluator, op, operands):
    a, b = operands
    function = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
                "GT": np.greater, "GE": np.greater_equal}[op.attr("comparison_direction").value]
    return [function(a, b)]


def _convert(evaluator, op, operands):
    (x,) = operands
    target = _type(op.result, op)
    if target.kind in "iu" and x.dtype.kind in "fc":
        x = np.trunc(x.real if x.dtype.kind == "c" else x)
    elif target.kind == "b":
        x = x != 0
    elif target.kind in "f" and x.dtype.kind == "c":
        x = x.real
    with np.errstate(invalid="ignore", over="ignore"):
        return [x.astype(target)]


def _constant(evaluator, op, operands):
    return [np.asarray(op.attr("value").array).astype(_type(op.result, op))]


def _iota(evaluator, op, operands):
    shape, dimension = op.result.type.shape, op.attr("iota_dimension")
    ramp = np.arange(shape[dimension]).reshape(
        [n if d == dimension else 1 for d, n in enumerate(shape)])
    return [np.broadcast_to(ramp, shape).astype(_type(op.result, op))]


def _broadcast_in_dim(evaluator, op, operands):
    (x,) = operands
    shape = op.result.type.shape
    placed = [1] * len(shape)
    for d, n in zip(op.attr("broadcast_dimensions"), x.shape):
        placed[d] = n
    return [np.broadcast_to(x.reshape(placed), shape)]


def _slice(evaluator, op, operands):
    (x,) = operands
    return [x[tuple(slice(b, e, s) for b, e, s in zip(
        op.attr("start_indices"), op.attr("limit_indices"), op.attr("strides")))]]


def _pad(evaluator, op, operands):
    x, value = operands
    low, high, interior = (op.attr(k) for k in ("edge_padding_low", "edge_padding_high",
                                                "interior_padding"))
    spread = [n + (n - 1) * i if n else 0 for n, i in zip(x.shape, interior)]
    full = [max(0, lo) + s + max(0, hi) for lo, s, hi in zip(low, spread, high)]
    result = np.full(full, value, x.dtype)
    result[tuple(slice(max(0, lo), max(0, lo) + s, i + 1)
                 for lo, s, i in zip(low, spread, interior))] = x
    return [result[tuple(slice(max(0, -lo), n - max(0, -hi))
                         for lo, hi, n in zip(low, high, full))]]


def _dot_general(evaluator, op, operands):
    lhs, rhs = operands
    numbers = op.attr("dot_dimension_numbers")
    batch = (numbers.get("lhs_batching_dimensions", ()),
             numbers.get("rhs_batching_dimensions", ()))
    contract = (numbers.get("lhs_contracting_dimensions", ()),
                numbers.get("rhs_contracting_dimensions", ()))
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    left, right = [None] * lhs.ndim, [None] * rhs.ndim
    batch_letters = []
    for dl, dr in zip(*batch):
        left[dl] = right[dr] = letter = next(letters)
        batch_letters.append(letter)
    for dl, dr in zip(*contract):
        left[dl] = right[dr] = next(letters)
    free_left = [d for d in range(lhs.ndim) if left[d] is None]
    free_right = [d for d in range(rhs.ndim) if right[d] is None]
    for d in free_left:
        left[d] = next(letters)
    for d in free_right:
        right[d] = next(letters)
    out = batch_letters + [left[d] for d in free_left] + [right[d] for d in free_right]
    result_type = _type(op.result, op)
    return [np.einsum(f"{''.join(left)},{''.join(right)}->{''.join(out)}",
                      lhs.astype(result_type), rhs.astype(result_type))]


#: the one-op reducer bodies: op -> NumPy's reduction
_REDUCERS = {"stablehlo.add": np.add, "stablehlo.multiply": np.multiply,
             "stablehlo.maximum": np.maximum, "stablehlo.minimum": np.minimum,
             "stablehlo.and": np.logical_and, "stablehlo.or": np.logical_or}


def _reduce(evaluator, op, operands):
    body = op.regions[0].entry
    inner = [o for o in body.ops if o.name != "stablehlo.return"]
    if len(operands) != 2 or len(inner) != 1 or inner[0].name not in _REDUCERS:
        raise UnsupportedError(op.name, "the extended-precision reference evaluates "
                               "reductions of one array by one op (add, multiply, maximum, "
                               "minimum, and, or); compare without the reference",
                               op.location)
    x, init = operands
    function = _REDUCERS[inner[0].name]
    if x.dtype.kind != "b" and function in (np.logical_and, np.logical_or):
        function = np.bitwise_and if function is np.logical_and else np.bitwise_or
    axes = tuple(op.attr("dimensions"))
    reduced = function.reduce(x, axis=axes) if x.size else np.full(
        [n for d, n in enumerate(x.shape) if d not in axes], init, x.dtype)
    return [np.asarray(function(init, reduced)).astype(x.dtype)]


def _while(evaluator, op, operands):
    values = list(operands)
    while bool(evaluator.region(op, 0, values)[0]):
        values = evaluator.region(op, 1, values)
    return values


def _case(evaluator, op, operands):
    index = int(operands[0])
    branches = len(op.regions)
    return evaluator.region(op, index if 0 <= index < branches else branches - 1, [])


def _if(evaluator, op, operands):
    return evaluator.region(op, 0 if bool(operands[0]) else 1, [])


def _starts(x: np.ndarray, starts: Sequence[np.ndarray], sizes: Sequence[int]) -> list[int]:
    """Starts clamped as StableHLO clamps them: the window stays inside ``x``."""
    return [min(max(int(s), 0), n - k) for s, n, k in zip(starts, x.shape, sizes)]


def _dynamic_slice(evaluator, op, operands):
    x, *starts = operands
    sizes = op.attr("slice_sizes")
    begin = _starts(x, starts, sizes)
    return [x[tuple(slice(b, b + k) for b, k in zip(begin, sizes))]]


def _dynamic_update_slice(evaluator, op, operands):
    x, update, *starts = operands
    begin = _starts(x, starts, update.shape)
    result = x.copy()
    result[tuple(slice(b, b + k) for b, k in zip(begin, update.shape))] = update
    return [result]


def _select(evaluator, op, operands):
    predicate, a, b = operands
    return [np.where(predicate, a, b)]


def _logistic(x):
    return 1 / (1 + np.exp(-x))


def _round_afz(x):
    return np.trunc(x + np.copysign(np.asarray(0.5, x.dtype), x))


def _power(a, b):
    if a.dtype.kind in "iu":
        return np.power(a, np.maximum(b, 0)) * (b >= 0)
    return np.power(a, b)


def _bitwise(logical: Callable, bitwise: Callable) -> Callable:
    return lambda a, b: logical(a, b) if a.dtype.kind == "b" else bitwise(a, b)


_RULES: dict[str, Callable] = {
    "stablehlo.constant": _constant,
    "stablehlo.iota": _iota,
    "stablehlo.convert": _convert,
    "stablehlo.compare": _compare,
    "stablehlo.select": _select,
    "stablehlo.broadcast_in_dim": _broadcast_in_dim,
    "stablehlo.reshape": lambda e, op, xs: [xs[0].reshape(op.result.type.shape)],
    "stablehlo.transpose": lambda e, op, xs: [xs[0].transpose(op.attr("permutation"))],
    "stablehlo.slice": _slice,
    "stablehlo.concatenate": lambda e, op, xs: [np.concatenate(xs, op.attr("dimension"))],
    "stablehlo.reverse": lambda e, op, xs: [np.flip(xs[0], op.attr("dimensions"))],
    "stablehlo.pad": _pad,
    "stablehlo.dot_general": _dot_general,
    "stablehlo.reduce": _reduce,
    "stablehlo.while": _while,
    "stablehlo.case": _case,
    "stablehlo.if": _if,
    "stablehlo.dynamic_slice": _dynamic_slice,
    "stablehlo.dynamic_update_slice": _dynamic_update_slice,
    "stablehlo.optimization_barrier": lambda e, op, xs: list(xs),
    "stablehlo.clamp": _elementwise(lambda lo, x, hi: np.minimum(np.maximum(x, lo), hi)),
}

_FUNCTIONS: dict[str, Callable] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": _divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": _power, "atan2": np.arctan2,
    "remainder": _remainder, "negate": np.negative, "abs": np.abs, "sign": np.sign,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "cbrt": np.cbrt,
    "exponential": np.exp, "exponential_minus_one": np.expm1, "log": np.log,
    "log_plus_one": np.log1p, "logistic": _logistic, "sine": np.sin, "cosine": np.cos,
    "tan": np.tan, "tanh": np.tanh, "floor": np.floor, "ceil": np.ceil,
    "round_nearest_even": np.rint, "round_nearest_afz": _round_afz,
    "is_finite": np.isfinite, "not": lambda x: np.logical_not(x) if x.dtype.kind == "b"
    else np.invert(x), "and": _bitwise(np.logical_and, np.bitwise_and),
    "or": _bitwise(np.logical_or, np.bitwise_or), "xor": _bitwise(np.logical_xor,
                                                                  np.bitwise_xor),
    "real": np.real, "imag": np.imag, "complex": lambda a, b: a + 1j * b,
}
for _name, _function in _FUNCTIONS.items():
    _RULES[f"stablehlo.{_name}"] = _elementwise(_function)


def normwise_distance(values: np.ndarray, exact: np.ndarray) -> float:
    """max |values - exact| / max |exact| over the finite elements of ``exact``, computed
    in ``exact``'s type; NaN against a number, or a number against NaN, is infinite."""
    values = np.asarray(values).astype(exact.dtype)
    if not exact.size:
        return 0.0
    same = (values == exact) | (np.isnan(values) & np.isnan(exact))
    with np.errstate(invalid="ignore", over="ignore"):
        difference = np.where(same, 0, np.abs(values - exact))
    difference = np.where(np.isnan(difference), np.inf, difference)
    magnitude = np.abs(exact)
    finite = np.isfinite(magnitude)
    scale = magnitude[finite].max() if finite.any() else 0
    largest = difference.max()
    if scale == 0:
        return 0.0 if largest == 0 else math.inf
    return float(largest / scale)
