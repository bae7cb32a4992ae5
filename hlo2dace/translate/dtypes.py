"""The one place that maps IR element types to NumPy, DaCe and C++ types.

Each element type has a *storage* type (what the SDFG's arrays hold and what is passed to
the compiled code) and a *compute* type (what tasklets compute in). They differ where C++
has no arithmetic type of that width on the CPU: f16 and bf16 are stored as their 16-bit
patterns and computed in ``float``, rounded back after every op as XLA does; the 2- and
4-bit integers are stored in a byte and wrapped back to their width after every op.

The 8-, 6- and 4-bit floats (``SMALL_FLOATS``) are stored as their bit patterns in a byte
and computed in ``float`` too. XLA computes each of their ops in f16 (``via``; f8E8M0FNU,
whose range f16 lacks, in f32) and converts the result: an op's value is rounded to f16,
then to the small type. Conversions to them round once, to nearest even (``include/h2d/floats.h``:
``small_float``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import dace
import ml_dtypes
import numpy as np

from .. import ir
from ..errors import UnsupportedError


@dataclass(frozen=True)
class ElementType:
    element: str  #: MLIR spelling, ``f32``
    numpy: np.dtype  #: the dtype users see
    storage: dace.typeclass  #: the SDFG's array element type
    compute: str  #: the C++ type tasklets compute in
    #: for sub-byte integers: their width; for floats stored as bits: the name of their C++
    #: helpers (``h2d::<rounding>_to_float``, ``h2d::float_to_<rounding>``,
    #: ``h2d::round_<rounding>``)
    narrow_bits: int | None = None
    rounding: str | None = None
    #: small floats: the 16-bit type XLA computes their ops in (see the module docstring)
    via: str | None = None
    is_small_float: bool = False

    @property
    def storage_numpy(self) -> np.dtype:
        return np.dtype(self.storage.type)

    def load(self, expression: str) -> str:
        """C++ that turns a value read from an array into the compute type."""
        return f"h2d::{self.rounding}_to_float({expression})" if self.rounding else expression

    def read(self, pointer: str, index: str) -> str:
        """C++ that reads element ``index`` of the array at ``pointer``, in the compute type.
        A bool is read as its byte: GCC 12 vectorises no loop that loads a ``bool`` through
        a pointer ("no vectype"), and a causal softmax, whose row loops read the mask,
        ran scalar at 2.5x XLA's time."""
        if self.is_bool:
            return f"(reinterpret_cast<const unsigned char*>({pointer})[{index}] != 0)"
        return self.load(f"{pointer}[{index}]")

    def store(self, expression: str) -> str:
        """C++ that turns a computed value into what the array holds."""
        return f"h2d::float_to_{self.rounding}({expression})" if self.rounding else expression

    def fit(self, expression: str, exact: bool = False) -> str:
        """C++ that rounds or wraps a freshly computed value to this type's precision (a
        small float's through its ``via`` type, as XLA computes it). ``exact``: the value
        is one its operands' type holds (the op's record says so: a maximum, a negation),
        which an f16 or bf16 keeps without rounding; smaller ones are rounded (an unsigned
        f8's negation is a NaN) and narrow integers wrapped (an i4's negation wraps)."""
        if exact and self.rounding and not self.is_small_float:
            return expression
        if self.via:  # a NaN passes unchanged: its payload is a small float's NaN code
            return (f"h2d::round_{self.rounding}(h2d::unless_nan<h2d::round_{self.via}>"
                    f"({expression}))")
        if self.rounding:
            return f"h2d::round_{self.rounding}({expression})"
        if self.narrow_bits:
            return f"h2d::wrap<{self.narrow_bits}>(({self.compute})({expression}))"
        return expression

    @property
    def is_bool(self) -> bool:
        return ir.is_bool(self.element)

    @property
    def is_integer(self) -> bool:
        return ir.is_integer(self.element)

    @property
    def is_unsigned(self) -> bool:
        return ir.is_unsigned(self.element)

    @property
    def is_float(self) -> bool:
        return ir.is_float(self.element)

    @property
    def is_complex(self) -> bool:
        return ir.is_complex(self.element)

    @property
    def bits(self) -> int:
        """The width of a value (4 for f4E2M1FN and i4, though they fill a byte)."""
        if self.narrow_bits:
            return self.narrow_bits
        if self.is_stored_as_bits:
            return ml_dtypes.finfo(self.numpy).bits
        return self.storage.bytes * 8

    @property
    def is_stored_as_bits(self) -> bool:
        """f16, bf16 and the small floats: arrays hold the bit pattern; loads and stores
        convert."""
        return self.rounding is not None

    def rounded(self, expression: str) -> str:
        """C++ that rounds a float to this type once, as a conversion does (``fit`` rounds
        a small float's op results twice, through its ``via`` type)."""
        return f"h2d::round_{self.rounding}({expression})" if self.rounding else expression

    def to_storage(self, array: np.ndarray) -> np.ndarray:
        """A NumPy array of this type as the compiled code expects it (no copy if possible)."""
        array = np.asarray(array)
        if array.dtype != self.numpy:
            array = array.astype(self.numpy)
        if self.narrow_bits is not None:
            return array.astype(self.storage_numpy)
        if array.dtype != self.storage_numpy:
            return array.view(self.storage_numpy)
        return array

    def from_storage(self, array: np.ndarray) -> np.ndarray:
        if self.narrow_bits is not None:
            return array.astype(self.numpy)
        if array.dtype != self.numpy:
            return array.view(self.numpy)
        return array


#: the 8-, 6- and 4-bit floats: MLIR name -> (ml_dtypes type, the 16-bit type XLA computes
#: their ops in, None for f32)
SMALL_FLOATS = {
    "f8E4M3FN": (ml_dtypes.float8_e4m3fn, "f16"),
    "f8E5M2": (ml_dtypes.float8_e5m2, "f16"),
    "f8E4M3FNUZ": (ml_dtypes.float8_e4m3fnuz, "f16"),
    "f8E5M2FNUZ": (ml_dtypes.float8_e5m2fnuz, "f16"),
    "f8E4M3B11FNUZ": (ml_dtypes.float8_e4m3b11fnuz, "f16"),
    "f8E3M4": (ml_dtypes.float8_e3m4, "f16"),
    "f8E4M3": (ml_dtypes.float8_e4m3, "f16"),
    "f8E8M0FNU": (ml_dtypes.float8_e8m0fnu, None),
    "f6E2M3FN": (ml_dtypes.float6_e2m3fn, "f16"),
    "f6E3M2FN": (ml_dtypes.float6_e3m2fn, "f16"),
    "f4E2M1FN": (ml_dtypes.float4_e2m1fn, "f16"),
}


def _entries():
    """Every element type's NumPy dtype, DaCe storage type and C++ compute type, in one
    table: the only place that maps element types."""
    table = {
        "i1": (np.bool_, dace.bool_, "bool"),
        "f32": (np.float32, dace.float32, "float"),
        "f64": (np.float64, dace.float64, "double"),
        "complex<f32>": (np.complex64, dace.complex64, "dace::complex64"),
        "complex<f64>": (np.complex128, dace.complex128, "dace::complex128"),
    }
    for bits in (8, 16, 32, 64):
        for signed in (True, False):
            np_type = np.dtype(f"{'' if signed else 'u'}int{bits}")
            ctype = f"{'' if signed else 'u'}int{bits}_t"
            dace_type = dace.dtypes.typeclass(np_type.type)
            names = (f"i{bits}", f"si{bits}") if signed else (f"ui{bits}",)
            for name in names:
                table[name] = (np_type, dace_type, ctype)
    entries = {name: ElementType(name, np.dtype(n), d, c) for name, (n, d, c) in table.items()}
    for bits, signed_np, unsigned_np in ((2, ml_dtypes.int2, ml_dtypes.uint2),
                                         (4, ml_dtypes.int4, ml_dtypes.uint4)):
        for name in (f"i{bits}", f"si{bits}"):
            entries[name] = ElementType(name, np.dtype(signed_np), dace.int8, "int8_t",
                                        narrow_bits=bits)
        entries[f"ui{bits}"] = ElementType(f"ui{bits}", np.dtype(unsigned_np), dace.uint8,
                                           "uint8_t", narrow_bits=bits)
    entries["f16"] = ElementType("f16", np.dtype(np.float16), dace.uint16, "float",
                                 rounding="f16")
    entries["bf16"] = ElementType("bf16", np.dtype(ml_dtypes.bfloat16), dace.uint16, "float",
                                  rounding="bf16")
    for name, (numpy, via) in SMALL_FLOATS.items():
        entries[name] = ElementType(name, np.dtype(numpy), dace.uint8, "float",
                                    rounding=name.lower(), via=via, is_small_float=True)
    return entries


_ELEMENTS = _entries()
SUPPORTED_ELEMENTS = tuple(sorted(_ELEMENTS))


@cache
def element_type(element: str, op: str = "type", location: object = None) -> ElementType:
    try:
        return _ELEMENTS[element]
    except KeyError:
        raise UnsupportedError(op, f"element type {element} is not supported", location,
                               SUPPORTED_ELEMENTS) from None


def of(tensor: ir.Type, op: str = "type", location: object = None) -> ElementType:
    if not isinstance(tensor, ir.TensorType):
        raise UnsupportedError(op, f"values of type {tensor} are not supported", location)
    return element_type(tensor.element, op, location)


def element_of_numpy(dtype: np.dtype) -> str:
    """The MLIR element type of a NumPy dtype (for building modules from arrays)."""
    dtype = np.dtype(dtype)
    for name, entry in _ELEMENTS.items():
        if entry.numpy == dtype and not name.startswith("si"):
            return name
    raise UnsupportedError("argument", f"NumPy dtype {dtype} has no StableHLO element type")
