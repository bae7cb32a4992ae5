"""Integer values known while translating: what the ops of a block compute from constants
alone, evaluated with NumPy. JAX computes static indices (``x.at[2:5]``, ``x[::2]``) with
iota, broadcasts, arithmetic and concatenations rather than as one constant, and jaxlib's
MLIR ships no StableHLO folder; knowing such indices lets a translator emit plain strided
copies instead of index arithmetic at run time.

Only integer and boolean values of at most ``LIMIT`` elements are evaluated, by ops whose
NumPy counterparts wrap exactly as StableHLO's do (no division, no shifts)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .. import ir
from .builder import Array, Builder, Literal

#: the most elements of a value that is evaluated
LIMIT = 1 << 16

_BINARY: dict[str, Callable] = {
    "stablehlo.add": np.add, "stablehlo.subtract": np.subtract,
    "stablehlo.multiply": np.multiply, "stablehlo.maximum": np.maximum,
    "stablehlo.minimum": np.minimum, "stablehlo.and": np.bitwise_and,
    "stablehlo.or": np.bitwise_or, "stablehlo.xor": np.bitwise_xor,
}
_COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
            "GT": np.greater, "GE": np.greater_equal}


def known_value(b: Builder, value: ir.Value) -> np.ndarray | None:
    """``value``'s elements if the current scope computes them from constants alone."""
    t = value.type
    if not (isinstance(t, ir.TensorType) and t.is_static and t.size <= LIMIT
            and (ir.is_bool(t.element) or ir.is_integer(t.element)
                 and ir.integer_width(t.element) in (8, 16, 32, 64))):
        return None
    binding = b.scope.env.get(value.name)
    if isinstance(binding, Literal):
        return np.full(t.shape, binding.value)
    if isinstance(binding, Array) and binding.name in b.constants:
        return b.constants[binding.name].reshape(t.shape)
    op = b.scope.producers.get(value.name)
    if op is None or len(op.results) != 1:
        return None
    try:
        with np.errstate(over="ignore"):
            result = _evaluate(b, op)
    except _Unknown:
        return None
    return None if result is None else np.asarray(result).reshape(t.shape)


class _Unknown(Exception):
    """An operand is not known."""


def _evaluate(b: Builder, op: ir.Op) -> np.ndarray | None:
    def operand(k: int) -> np.ndarray:
        known = known_value(b, op.operands[k])
        if known is None:
            raise _Unknown
        return known

    t = op.result.type
    dtype = np.dtype(np.bool_) if ir.is_bool(t.element) else _integer_dtype(t)
    name = op.name
    if name == "stablehlo.constant":
        return np.broadcast_to(op.attr("value").array, t.shape)
    if name == "stablehlo.iota":
        dim = int(op.attr("iota_dimension"))
        shape = [1] * t.rank
        shape[dim] = t.shape[dim]
        return np.broadcast_to(np.arange(t.shape[dim]).reshape(shape), t.shape).astype(dtype)
    if name == "stablehlo.broadcast_in_dim":
        source = operand(0)
        shape = [1] * t.rank
        for k, d in enumerate(op.attr("broadcast_dimensions")):
            shape[int(d)] = source.shape[k]
        return np.broadcast_to(source.reshape(shape), t.shape)
    if name in ("stablehlo.reshape", "stablehlo.convert"):
        return operand(0).astype(dtype)
    if name == "stablehlo.transpose":
        return operand(0).transpose([int(d) for d in op.attr("permutation")])
    if name == "stablehlo.reverse":
        return np.flip(operand(0), [int(d) for d in op.attr("dimensions")])
    if name == "stablehlo.concatenate":
        return np.concatenate([operand(k) for k in range(len(op.operands))],
                              axis=int(op.attr("dimension")))
    if name == "stablehlo.slice":
        starts, limits = op.attr("start_indices"), op.attr("limit_indices")
        return operand(0)[tuple(slice(int(s), int(e), int(k)) for s, e, k in
                                zip(starts, limits, op.attr("strides")))]
    if name in _BINARY:
        return _BINARY[name](operand(0), operand(1)).astype(dtype)
    if name == "stablehlo.negate":
        return np.negative(operand(0)).astype(dtype)
    if name == "stablehlo.compare":
        compare = _COMPARE[str(op.attr("comparison_direction"))]
        return compare(operand(0), operand(1))
    if name == "stablehlo.select":
        return np.where(operand(0), operand(1), operand(2))
    if name == "stablehlo.clamp":
        return np.minimum(np.maximum(operand(1), operand(0)), operand(2))
    return None


def _integer_dtype(t: ir.TensorType) -> np.dtype:
    kind = "u" if ir.is_unsigned(t.element) else "i"
    return np.dtype(f"{kind}{ir.integer_width(t.element) // 8}")
