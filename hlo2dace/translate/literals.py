"""Exact C++ literals for scalar constants (hex floats and bit patterns, so that NaN
payloads, infinities, -0.0 and the extreme integers survive the trip through C++)."""

from __future__ import annotations

import numpy as np

from .dtypes import ElementType


def _float(value: float, ctype: str) -> str:
    if ctype == "float":
        bits = int(np.float32(value).view(np.uint32))
        if not np.isfinite(value):
            return f"h2d::bit_cast<float>((uint32_t){bits}u)"
        return f"{float(np.float32(value)).hex()}f"
    bits = int(np.float64(value).view(np.uint64))
    if not np.isfinite(value):
        return f"h2d::bit_cast<double>((uint64_t){bits}ull)"
    return float(value).hex()


def literal(value, element: ElementType, storage: bool = False) -> str:
    """``value`` as a C++ expression of the element's compute type (or of its storage type
    with ``storage=True``, which differs for floats stored as bits)."""
    if element.is_bool:
        return "true" if bool(value) else "false"
    if element.is_integer:
        ctype = element.storage.ctype if storage else element.compute
        unsigned = int(value) % (1 << 64)
        return f"(({ctype}){unsigned}ull)"
    if element.is_complex:
        part = "float" if element.element == "complex<f32>" else "double"
        value = complex(value)
        return f"{element.compute}({_float(value.real, part)}, {_float(value.imag, part)})"
    if element.is_stored_as_bits:
        bits = int(np.asarray(value, dtype=element.numpy).view(element.storage_numpy))
        ctype = element.storage.ctype
        if storage:
            return f"(({ctype}){bits}u)"
        return f"h2d::{element.rounding}_to_float(({ctype}){bits}u)"
    return _float(float(value), element.compute)
