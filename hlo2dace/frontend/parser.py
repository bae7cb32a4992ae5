"""MLIR generic-op-form text -> :mod:`hlo2dace.ir`.

``parse_module(text)`` reads what ``module.operation.get_asm(print_generic_op_form=True,
enable_debug_info=True)`` prints, with the LALR grammar ``grammar/stablehlo.lark`` and a lark
``Transformer`` that builds the IR while parsing (no parse tree is kept).

The text is read in two passes over the same characters, each with the other's lines
blanked out, so that line and column numbers stay those of the file:

1. the *prelude*: top-level alias definitions (``#loc3 = loc(...)``, ``#map = ...``,
   ``!alias = ...``), which MLIR prints before *and after* the module, and the trailing
   ``{-# dialect_resources: ... #-}`` section holding ``dense_resource`` blobs;
2. the operations, whose locations and ``dense_resource`` references can then be resolved
   on the spot.

Representation choices (see also the table in :mod:`hlo2dace.ir`):

* A location resolves to ``ir.Location(file, line, column, name)``: ``name`` is the
  outermost quoted name (``"jit(f)/tanh"``); file, line and column come from the first
  ``"file":line:col`` reached by following ``name(child)``, the *callee* of
  ``callsite(callee at caller)`` (the caller when the callee has no file) and the members of
  ``fused[...]``. ``loc(unknown)`` gives ``None``.
* A unit attribute (``{foo}``) is ``True``; ``?`` in a list (bounds) is ``None``.
* Typed scalars (``1 : i32``, ``1.5 : f32``, ``0x7FC00000 : f32``) are plain ``int``/``float``.
* ``@a::@b`` is ``SymbolRef("a::@b")``: the text after the leading ``@``, unquoted.
* ``#stablehlo<kind V>`` and ``#stablehlo.kind<V>`` are ``EnumAttr(kind, "V")``;
  ``#stablehlo.name<k = v, ...>`` is ``StructAttr(name, {k: v})``; the compact
  ``#stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>`` is decoded into the spec's
  ``ConvDimensionNumbers`` field names; ``#stablehlo.bounds<4, ?>`` (a tensor encoding) is
  ``StructAttr("bounds", {"bounds": (4, None)})``; other dialect attributes are ``OpaqueAttr``.
* Scalar and other unmodelled types (``f32``, ``index``, ``!quant.uniform<...>``) are
  ``OpaqueType`` with their text.
* ``Function.argument_attributes``/``result_attributes`` always hold one mapping per
  argument/result (empty when the module has none).
* Top-level operations of the module other than ``func.func`` (``sdy.mesh``...) are skipped.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from pathlib import Path
from types import MappingProxyType
from typing import Any

import ml_dtypes
import numpy as np
from lark import Lark, Token, Transformer
from lark import __version__ as lark_version
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from .. import folders, ir
from ..errors import ParseError, pointed_line

__all__ = ["parse_module", "GRAMMAR_PATH"]


def _grammar_path() -> Path:
    """The grammar's one copy is ``grammar/stablehlo.lark`` at the top of the source tree;
    an installed package holds it as ``hlo2dace/grammar/stablehlo.lark`` (pyproject.toml
    maps the folder into the package)."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "grammar" / "stablehlo.lark"
    return installed if installed.is_file() else package.parent / "grammar" / "stablehlo.lark"


GRAMMAR_PATH = _grammar_path()

_EMPTY: Any = MappingProxyType({})

# ------------------------------------------------------------------------- dtypes

_DTYPES: dict[str, np.dtype] = {
    "i1": np.dtype(np.bool_),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "f4E2M1FN": np.dtype(ml_dtypes.float4_e2m1fn),
    "f6E2M3FN": np.dtype(ml_dtypes.float6_e2m3fn),
    "f6E3M2FN": np.dtype(ml_dtypes.float6_e3m2fn),
    "f8E3M4": np.dtype(ml_dtypes.float8_e3m4),
    "f8E4M3": np.dtype(ml_dtypes.float8_e4m3),
    "f8E4M3FN": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "f8E4M3B11FNUZ": np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    "f8E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "f8E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8E8M0FNU": np.dtype(ml_dtypes.float8_e8m0fnu),
    "complex<f32>": np.dtype(np.complex64),
    "complex<f64>": np.dtype(np.complex128),
    "index": np.dtype(np.int64),
}
_SUB_BYTE_INTS = {2: (ml_dtypes.int2, ml_dtypes.uint2), 4: (ml_dtypes.int4, ml_dtypes.uint4)}
for _width in ir.INTEGER_WIDTHS:
    if _width in _SUB_BYTE_INTS:
        _signed, _unsigned = (np.dtype(t) for t in _SUB_BYTE_INTS[_width])
    else:
        _signed, _unsigned = np.dtype(f"int{_width}"), np.dtype(f"uint{_width}")
    _DTYPES[f"i{_width}"] = _DTYPES[f"si{_width}"] = _signed
    _DTYPES[f"ui{_width}"] = _unsigned

#: Bits that carry a value in a one-byte storage unit (sub-byte floats).
_FLOAT_BITS = {"f4E2M1FN": 4, "f6E2M3FN": 6, "f6E3M2FN": 6}

_INT_ELEMENT = re.compile(r"(?:[su]?i)([0-9]+)")
_QUANT_STORAGE = re.compile(r"!quant\.[\w.]+<\s*([su]?i[0-9]+)")
_TENSOR_DIMS = re.compile(r"((?:(?:[0-9]+|\?)x)*)(.*)", re.S)
_HEX = re.compile(r"[-+]?0x[0-9a-fA-F]+")
_SYMBOL_PART = re.compile(r'@(?:([\w$.\-]+)|"((?:[^"\\]|\\.)*)")')
_ESCAPE = re.compile(rb'\\([0-9A-Fa-f]{2}|.)', re.S)
_ALIAS_LINE = re.compile(r"[ \t]*[#!][\w$.][\w$.\-]*[ \t]*=")
_DENSE = re.compile(r'dense<((?:"(?:[^"\\]|\\.)*"|[^<>"])*)>\s*(?::\s*(.*))?', re.S)
_DIALECT_ATTR = re.compile(r"#([\w$.][\w$.\-]*)<(.*)>", re.S)
_WORD = re.compile(r"\s*([\w$.\-]+)\s*")
_ENUM_BODY = re.compile(r"\s*(\w+)\s+(\w+)\s*")
_CONV = re.compile(r"\s*\[([^\]]*)\]\s*x\s*\[([^\]]*)\]\s*->\s*\[([^\]]*)\]\s*")

#: StableHLO attributes whose structure translators rely on: a malformed one is an error
#: (an unknown ``#stablehlo.x<...>`` that does not parse as fields is kept opaque).
_KNOWN_STRUCTS = frozenset({
    "dot", "gather", "scatter", "conv", "output_operand_alias", "type_extensions",
    "result_accuracy", "channel_handle", "dot_algorithm",
})

#: Readable names of the grammar's regular-expression terminals, for error messages.
_TERMINAL_NAMES = {
    "STRING": "a string", "SSA_DEF": "a value name like %arg0",
    "RESULTS": "results like `%0 =`", "OPERANDS": "operands like (%0, %1)",
    "SIGNATURE": "the operation's type like `: (tensor<f32>) -> tensor<f32>`",
    "TYPED_SCALAR": "a typed number like `1 : i64`",
    "BLOCK_ID": "a block label like ^bb0", "BARE_ID": "an identifier",
    "HASH_ID": "an alias like #loc1", "BANG_ID": "a type alias like !t",
    "SYMBOL_REF": "a symbol like @main", "FLOAT": "a float", "INT": "an integer",
    "TYPE": "a type", "DENSE": "dense<...>", "DENSE_RESOURCE": "dense_resource<...>",
    "ARRAY": "array<...>", "OPAQUE_BUILTIN": "affine_map<...>",
    "DIALECT_ATTR": "#dialect<...>", "LOC_ALIAS": "loc(#alias)", "LOC_UNKNOWN": "loc(unknown)",
    "$END": "end of input",
}


class _Error(Exception):
    """A semantic error found while building the IR, at a position of the text."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        super().__init__(message)
        self.message, self.line, self.column = message, line, column

    @classmethod
    def at(cls, token: Any, message: str) -> _Error:
        return cls(message, getattr(token, "line", None), getattr(token, "column", None))


class _RawLoc(tuple):
    """An unresolved location: ``("file", f, l, c)``, ``("name", n, child)``, ..."""


# ---------------------------------------------------------------------- scalar helpers


def _unescape(token: str) -> str:
    """The value of a string literal (with its quotes): ``\\"``, ``\\\\``, ``\\n``, ``\\t``
    and two-digit hex escapes, decoded as UTF-8."""
    body = token[1:-1]
    if "\\" not in body:
        return body

    def one(m: re.Match[bytes]) -> bytes:
        e = m.group(1)
        if len(e) == 2:
            return bytes((int(e, 16),))
        return {b"n": b"\n", b"t": b"\t"}.get(e, e)

    return _ESCAPE.sub(one, body.encode("utf-8")).decode("utf-8", errors="surrogateescape")


def _parse_int(text: str) -> int:
    text = text.strip()
    if _HEX.fullmatch(text):
        negative = text.startswith("-")
        value = int(text.lstrip("+-"), 16)
        return -value if negative else value
    return int(text)


def _wrap_int(value: int, element: str, hexadecimal: bool) -> int:
    """Check that ``value`` fits the integer element type; signless and signed types accept
    the unsigned range too (MLIR's bit-pattern reading) and wrap it into the signed one."""
    width = ir.integer_width(element)
    if ir.is_unsigned(element):
        if hexadecimal:
            value &= (1 << width) - 1
        if not 0 <= value < (1 << width):
            raise ValueError(f"{value} does not fit {element}")
        return value
    if not -(1 << (width - 1)) <= value < (1 << width):
        raise ValueError(f"{value} does not fit {element}")
    return value - (1 << width) if value >= (1 << (width - 1)) else value


def _float_from_bits(bits: int, dtype: np.dtype) -> Any:
    size = dtype.itemsize
    if not 0 <= bits < (1 << (8 * size)):
        raise ValueError(f"0x{bits:X} has more bits than {dtype.name}")
    return np.array(bits, dtype=f"u{size}").view(dtype)


def _float_bits(text: str, dtype: np.dtype) -> int:
    """The bit pattern of a float literal (decimal or hex) of type ``dtype``."""
    text = text.strip()
    if _HEX.fullmatch(text):
        return _parse_int(text)
    return int(np.array(float(text)).astype(dtype).view(f"u{dtype.itemsize}"))


def _scalar_float(text: str, element: str) -> float:
    """A float attribute or ``array<f32: ...>`` element; hex is a bit pattern."""
    text = text.strip()
    if _HEX.fullmatch(text):
        dtype = _DTYPES.get(element, np.dtype(np.float64))
        return float(_float_from_bits(_parse_int(text), dtype))
    return float(text)


def _closing(text: str, start: int) -> int:
    """The index of the bracket closing the one at ``text[start]`` (strings skipped, ``->``
    not a bracket)."""
    depth, i, n = 0, start, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in "<([{":
            depth += 1
        elif c in ">)]}" and not (c == ">" and i and text[i - 1] == "-"):
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError(f"unbalanced brackets in {text[:60]!r}")


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets and strings (``->`` does not close a bracket)."""
    parts, depth, start, i, n = [], 0, 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in "<([{":
            depth += 1
        elif c in ">)]}":
            if not (c == ">" and i and text[i - 1] == "-"):
                depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


# ---------------------------------------------------------------------- dense elements


def element_dtype(element: str) -> np.dtype:
    dtype = _DTYPES.get(element)
    if dtype is None:
        quant = _QUANT_STORAGE.match(element)
        if quant:
            dtype = _DTYPES.get(quant.group(1))
    if dtype is None:
        raise ValueError(f"dense elements of type {element} are not supported")
    return dtype


def _storage_element(element: str) -> str:
    quant = _QUANT_STORAGE.match(element)
    return quant.group(1) if quant else element


def _finish(array: np.ndarray, shape: tuple[int, ...], size: int, splat: bool) -> np.ndarray:
    if splat:
        _check_memory(size * array.dtype.itemsize)
        array = np.broadcast_to(array.reshape(()), shape).copy()
    elif array.size != size:
        raise ValueError(f"{array.size} elements given for a tensor of {size}")
    else:
        array = array.reshape(shape)
        if not array.flags.c_contiguous:
            array = array.copy()
    base = array
    while isinstance(base, np.ndarray):  # views of our own buffers: freeze those too
        base.flags.writeable = False
        base = base.base
    return array


#: splats larger than this are checked against the memory available
_LARGE_SPLAT = 1 << 26


def _check_memory(nbytes: int) -> None:
    """A splat is written out in full (translators read it as any constant), and reading it
    makes copies: refuse one that would not fit rather than let the kernel kill the process
    (a line of text can declare a splat of terabytes)."""
    if nbytes < _LARGE_SPLAT:
        return
    try:
        with open("/proc/meminfo") as meminfo:
            available = next(int(line.split()[1]) * 1024 for line in meminfo
                             if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if 3 * nbytes > available:
        raise ValueError(f"a splat of {nbytes:,} bytes is more than fits in the memory "
                         f"available ({available:,} bytes)")


def _dense_from_blob(hexdigits: str, element: str, dtype: np.dtype,
                     shape: tuple[int, ...], size: int) -> np.ndarray:
    """Raw little-endian bytes: the whole tensor, or one element when it is a splat. Every
    element takes a whole number of bytes (one for ``i1`` and sub-byte types)."""
    if len(hexdigits) % 2:
        raise ValueError("hex blob with an odd number of digits")
    try:
        raw = bytes.fromhex(hexdigits)
    except ValueError:
        raise ValueError("hex blob with a character that is not a hex digit") from None
    width = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    per_element = dtype.itemsize
    if len(raw) == per_element * size:
        splat = False
    elif len(raw) == per_element and size > 0:
        splat = True
    else:
        raise ValueError(f"hex blob of {len(raw)} bytes for a tensor of {size} elements "
                         f"of {per_element} byte(s) each")
    bits = np.frombuffer(raw, dtype=np.dtype(f"<u{width}")).astype(f"u{width}")
    storage = _storage_element(element)
    if storage == "i1":
        array = bits != 0
    elif ir.is_integer(storage) and ir.integer_width(storage) < 8:
        w = ir.integer_width(storage)
        values = (bits & ((1 << w) - 1)).astype(np.int8)
        if not ir.is_unsigned(storage):
            values = np.where(values >= (1 << (w - 1)), values - (1 << w), values)
        array = values.astype(dtype)
    elif storage in _FLOAT_BITS:
        array = (bits & ((1 << _FLOAT_BITS[storage]) - 1)).view(dtype)
    else:
        array = bits.view(dtype)
    return _finish(array, shape, size, splat)


def _dense_from_literal(content: str, element: str, dtype: np.dtype,
                        shape: tuple[int, ...], size: int) -> np.ndarray:
    """``1.0``, ``[[1, 2], [3, 4]]``, ``[(1.0,2.0), ...]``, ``[true, false]``, hex bit patterns."""
    flat = content.replace("[", " ").replace("]", " ").replace("(", " ").replace(")", " ")
    tokens = [t for t in (s.strip() for s in flat.split(",")) if t]
    is_complex = dtype.kind == "c"
    count = len(tokens) // 2 if is_complex else len(tokens)
    if is_complex and len(tokens) % 2:
        raise ValueError("complex elements need (real, imaginary) pairs")
    splat = count == 1 and size != 1 and not content.startswith("[")
    if not splat and count != size:
        raise ValueError(f"{count} elements given for a tensor of {size}")
    storage = _storage_element(element)
    if storage == "i1":
        values = {"true": True, "false": False, "1": True, "0": False}
        try:
            array = np.array([values[t] for t in tokens], dtype=np.bool_)
        except KeyError as missing:
            raise ValueError(f"{missing.args[0]} is not a boolean") from None
    elif ir.is_integer(storage) or storage == "index":
        kind = "i64" if storage == "index" else storage
        ints = [_wrap_int(_parse_int(t), kind, t.lstrip("+-").startswith("0x")) for t in tokens]
        if dtype.itemsize == 1 and dtype.kind not in "iu":  # int2/int4/uint2/uint4
            array = np.array(ints, dtype=np.int8).astype(dtype)
        else:
            array = np.array(ints, dtype=dtype)
    else:
        part = np.dtype(np.float32 if dtype == np.complex64 else np.float64) if is_complex \
            else dtype
        if any(_HEX.fullmatch(t) for t in tokens):
            bits = [_float_bits(t, part) for t in tokens]
            for b in bits:
                if not 0 <= b < (1 << (8 * part.itemsize)):
                    raise ValueError(f"0x{b:X} has more bits than {element}")
            array = np.array(bits, dtype=f"u{part.itemsize}").view(part)
        else:
            array = np.array([float(t) for t in tokens], dtype=np.float64).astype(part)
        if is_complex:
            array = array.view(dtype)
    return _finish(array, shape, size, splat)


# ---------------------------------------------------------------------------- lark tree to IR


class _TreeToIR(Transformer):
    """The lark callbacks; one instance, its per-parse state reset by :meth:`reset`."""

    def __init__(self) -> None:
        super().__init__(visit_tokens=False)
        self.lark: Lark | None = None
        self.reset()

    def reset(self) -> None:
        self.resolve_locations = False
        self.attr_aliases: dict[str, Any] = {}
        self.type_aliases: dict[str, ir.Type] = {}
        self.loc_aliases: dict[str, tuple[_RawLoc, Token]] = {}
        self.loc_memo: dict[str, ir.Location | None] = {}
        self.loc_active: set[str] = set()
        self.resources: dict[str, tuple[str, Token]] = {}
        self.type_cache: dict[str, ir.Type] = {}
        self.signature_cache: dict[str, ir.FunctionType] = {}
        self.dialect_cache: dict[str, Any] = {}
        self.dense_cache: dict[str, ir.DenseElements] = {}
        self.positions: dict[int, tuple[int, int]] = {}

    # ----------------------------------------------------------------- top level

    def start(self, c):
        return c

    def prelude(self, c):
        return None

    def attr_alias_def(self, c):
        token, value = c
        if token.value in self.attr_aliases or token.value in self.loc_aliases:
            raise _Error.at(token, f"redefinition of alias {token.value}")
        if isinstance(value, _RawLoc):
            self.loc_aliases[token.value] = (value, token)
        else:
            self.attr_aliases[token.value] = value

    def type_alias_def(self, c):
        token, value = c
        if token.value in self.type_aliases:
            raise _Error.at(token, f"redefinition of type alias {token.value}")
        self.type_aliases[token.value] = value
        self.type_cache.clear()
        self.signature_cache.clear()
        self.dense_cache.clear()

    def file_metadata(self, c):
        for section, groups in (x for x in c if x is not None):
            if section != "dialect_resources":
                continue
            for dialect, entries in groups:
                if dialect != "builtin":
                    continue
                for key, (value, token) in entries.items():
                    self.resources[key] = (value, token)

    def metadata_section(self, c):
        return c[0].value, [g for g in c[1:] if g is not None]

    def metadata_group(self, c):
        return self._key_text(c[0]), dict(e for e in c[1:] if e is not None)

    def metadata_entry(self, c):
        key, value = c
        if isinstance(value, Token) and value.type == "STRING":
            return self._key_text(key), (_unescape(value.value), value)
        return self._key_text(key), (value, key)

    @staticmethod
    def _key_text(token: Token) -> str:
        return _unescape(token.value) if token.type == "STRING" else token.value

    # ---------------------------------------------------------------- operations

    def operation(self, c):
        """One op in MLIR's generic form: its operand names resolved against the
        function type, its results typed, its attributes and regions attached; the one rule
        that builds ``ir.Op``, whatever the op."""
        results, name_token, operands, _successors, props, regions, attrs, ftype, loc = c
        name = _unescape(name_token.value)
        inputs, outputs = ftype.inputs, ftype.results
        names = [n.strip() for n in operands.value[1:-1].split(",")]
        if names == [""]:
            names = []
        if len(names) != len(inputs):
            raise _Error.at(name_token, f"`{name}` has {len(names)} operand(s) but its type "
                            f"lists {len(inputs)}")
        operand_values = tuple(map(ir.Value, names, inputs))
        if results is None:
            if outputs:
                raise _Error.at(name_token, f"`{name}` has no results but its type lists "
                                f"{len(outputs)}")
            result_values: tuple = ()
        else:
            names = []
            for group in results.value[:-1].split(","):
                base, _, count = group.strip().partition(":")
                if count and int(count) > len(outputs):  # before making a list that long
                    raise _Error.at(name_token, f"`{name}` defines {count} results but its "
                                    f"type lists {len(outputs)}")
                if count:
                    names.extend(f"{base}#{i}" for i in range(int(count)))
                else:
                    names.append(base)
            if len(names) != len(outputs):
                raise _Error.at(name_token, f"`{name}` defines {len(names)} result(s) but its "
                                f"type lists {len(outputs)}")
            result_values = tuple(map(ir.Value, names, outputs))
        if props is None:
            attributes = attrs if attrs is not None else _EMPTY
        elif attrs is None:
            attributes = props
        else:
            attributes = MappingProxyType({**attrs, **props})
        op = ir.Op(name, operand_values, result_values, attributes, regions or (), loc)
        if name in ("func.func", "builtin.module"):
            self.positions[id(op)] = (name_token.line, name_token.column)
            if name == "builtin.module":
                for region in op.regions:
                    for block in region.blocks:
                        for inner in block.ops:
                            if inner.name == "builtin.module":
                                line, column = self.positions[id(inner)]
                                raise _Error("nested modules are not supported", line, column)
        return op

    def op_type(self, c):
        item = c[0]
        if not isinstance(item, Token):
            return item
        found = self.signature_cache.get(item.value)
        if found is None:
            try:
                found = self._signature(item)
            except (ValueError, IndexError) as error:
                raise _Error.at(item, f"invalid operation type {item.value}: {error}") from None
            self.signature_cache[item.value] = found
        return found

    def _signature(self, token: Token) -> ir.FunctionType:
        """``: (a, b) -> c`` or ``: (a) -> (b, c)``."""
        text = token.value[1:].strip()
        close = _closing(text, 0)
        arrow = text.index("->", close)
        results = text[arrow + 2:].strip()
        if results.startswith("("):
            results = results[1:-1]
            outputs = [p for p in _split_top(results)] if results.strip() else []
        else:
            outputs = [results]
        inputs = _split_top(text[1:close]) if text[1:close].strip() else []
        return ir.FunctionType(tuple(self._type_text(t.strip(), token) for t in inputs),
                               tuple(self._type_text(t.strip(), token) for t in outputs))

    def successors(self, c):
        return c

    def properties(self, c):
        return c[0]

    def regions(self, c):
        return tuple(c)

    def region(self, c):
        blocks = []
        leading = []
        for item in c:
            if isinstance(item, ir.Block):
                blocks.append(item)
            else:
                leading.append(item)
        if leading:
            blocks.insert(0, ir.Block((), tuple(leading)))
        return ir.Region(tuple(blocks))

    def block(self, c):
        return ir.Block(c[1] or (), tuple(c[2:]))

    def block_args(self, c):
        return tuple(a for a in c if a is not None)

    def block_arg(self, c):
        token, type_, _loc = c
        if ":" in token.value:
            raise _Error.at(token, f"a block argument cannot be a result group: {token.value}")
        return ir.Value(token.value, type_)

    # --------------------------------------------------------------------- types

    def type(self, c):
        item = c[0]
        return self._type_token(item) if isinstance(item, Token) else item

    def function_type(self, c):
        return ir.FunctionType(tuple(t for t in c[:-1] if t is not None), c[-1])

    def function_results(self, c):
        if len(c) == 1 and isinstance(c[0], Token):
            return (self._type_token(c[0]),)
        return tuple(t for t in c if t is not None)

    def _type_token(self, token: Token) -> ir.Type:
        return self._type_text(token.value, token)

    def _type_text(self, text: str, token: Token) -> ir.Type:
        found = self.type_cache.get(text)
        if found is None:
            try:
                found = self._decode_type(text)
            except _Error as error:
                if error.line is None:
                    error.line, error.column = token.line, token.column
                raise
            except (ValueError, KeyError, IndexError, AttributeError) as error:
                raise _Error.at(token, f"invalid type {text}: {error}") from None
            self.type_cache[text] = found
        return found

    def _decode_type(self, text: str) -> ir.Type:
        text = text.strip()
        if text in self.type_aliases:
            return self.type_aliases[text]
        if text.startswith("tensor<") and text.endswith(">"):
            parts = _split_top(text[len("tensor<"):-1])
            dims, element = _TENSOR_DIMS.fullmatch(parts[0].strip()).groups()
            if element.startswith("*"):
                return ir.OpaqueType(text)  # unranked
            element = self._element(element.strip(), text)
            shape = tuple(None if d == "?" else int(d) for d in dims.split("x")[:-1])
            if len(parts) > 2:
                raise _Error(f"invalid tensor type {text}")
            encoding = self._attribute_text(parts[1].strip()) if len(parts) == 2 else None
            return ir.TensorType(shape, element, encoding)
        if text.startswith("tuple<") and text.endswith(">"):
            inner = text[len("tuple<"):-1]
            if not inner.strip():
                return ir.TupleType(())
            return ir.TupleType(tuple(self._decode_type(p) for p in _split_top(inner)))
        if text == "!stablehlo.token":
            return ir.TokenType()
        if text.startswith("!") and "." not in text.partition("<")[0]:
            raise _Error(f"undefined type alias {text}")
        return ir.OpaqueType(text)

    def _element(self, element: str, context: str) -> str:
        if element in _DTYPES or element in ir.FLOAT_TYPES or element.startswith("!"):
            return element
        if element.startswith("complex<"):
            normalized = "complex<" + element[len("complex<"):-1].strip() + ">"
            if normalized[len("complex<"):-1] in ir.FLOAT_TYPES:
                return normalized
        if _INT_ELEMENT.fullmatch(element):
            return element  # iN of a width ir.INTEGER_WIDTHS does not list
        raise _Error(f"unknown element type {element!r} in {context}")

    # ---------------------------------------------------------------- attributes

    def attr_dict(self, c):
        if len(c) == 1 and c[0] is None:
            return _EMPTY
        return MappingProxyType(dict(c))

    def attr_entry(self, c):
        key, value = c
        return self._key_text(key), (True if value is None else value)

    struct_field = attr_entry

    def struct_fields(self, c):
        return {} if c == [None] else dict(c)

    def int_attr(self, c):
        return _parse_int(c[0].value)

    def typed_int_attr(self, c):
        token, type_ = c
        return self._typed_scalar(token, token.value, type_)

    def typed_scalar_attr(self, c):
        token = c[0]
        value, _, type_text = token.value.partition(":")
        return self._typed_scalar(token, value.strip(), self._type_text(type_text.strip(), token))

    def _typed_scalar(self, token: Token, text: str, type_: ir.Type) -> Any:
        """``5 : i64`` -> 5, ``1.5 : f32`` -> 1.5, ``0x7FC00000 : f32`` -> nan."""
        element = type_.text if isinstance(type_, ir.OpaqueType) else None
        try:
            if "." in text:
                if element is not None and element not in ir.FLOAT_TYPES:
                    raise ValueError(f"{text} is not a value of type {element}")
                return float(text)
            value = _parse_int(text)
            if element in ir.FLOAT_TYPES and element in _DTYPES:
                if not _HEX.fullmatch(text):
                    return float(value)
                return float(_float_from_bits(value, _DTYPES[element]))
            if element == "i1":
                return bool(value)
            if element is not None and ir.is_integer(element):
                return _wrap_int(value, element, text.lstrip("+-").startswith("0x"))
        except ValueError as error:
            raise _Error.at(token, str(error)) from None
        return value

    def float_attr(self, c):
        return float(c[0].value)

    def typed_float_attr(self, c):
        return float(c[0].value)

    def true_attr(self, c):
        return True

    def false_attr(self, c):
        return False

    def unit_attr(self, c):
        return True

    def unknown_attr(self, c):
        return None

    def string_attr(self, c):
        return _unescape(c[0].value)

    def typed_string_attr(self, c):
        return _unescape(c[0].value)

    def list_attr(self, c):
        return tuple(c)

    def empty_list_attr(self, c):
        return ()

    def symbol_attr(self, c):
        parts = []
        for bare, quoted in _SYMBOL_PART.findall(c[0].value):
            parts.append(bare if bare else _unescape(f'"{quoted}"'))
        return ir.SymbolRef("::@".join(parts))

    def array_attr(self, c):
        token = c[0]
        element, _, items = token.value[len("array<"):-1].partition(":")
        element = element.strip()
        texts = [t.strip() for t in items.split(",")] if items.strip() else []
        try:
            if element == "i1":
                flags = {"true": True, "false": False}
                return tuple(flags[t] for t in texts)
            if element in ir.FLOAT_TYPES:
                return tuple(_scalar_float(t, element) for t in texts)
            if ir.is_integer(element) or element == "index":
                return tuple(_parse_int(t) for t in texts)
        except (KeyError, ValueError) as error:
            raise _Error.at(token, f"invalid {token.value}: {error}") from None
        raise _Error.at(token, f"unsupported array element type {element!r}")

    def dense_attr(self, c):
        token, type_ = c
        if type_ is None:  # the token holds the type too: same text, same (immutable) value
            found = self.dense_cache.get(token.value)
            if found is None:
                found = self._dense_attr(token, None)
                self.dense_cache[token.value] = found
            return found
        return self._dense_attr(token, type_)

    def _dense_attr(self, token: Token, type_: ir.Type | None) -> ir.DenseElements:
        content, type_text = _DENSE.fullmatch(token.value).groups()
        content = content.strip()
        if type_ is None:
            if type_text is None:
                raise _Error.at(token, "dense elements without a type")
            type_ = self._type_text(type_text.strip(), token)
        try:
            return self._dense(content, type_, token, blob=content.startswith('"'))
        except ValueError as error:
            raise _Error.at(token, f"invalid dense elements: {error}") from None

    def dense_resource_attr(self, c):
        token, type_ = c
        key = token.value[len("dense_resource<"):-1].strip()
        if key.startswith('"'):
            key = _unescape(key)
        if key not in self.resources:
            raise _Error.at(token, f"dense_resource<{key}> has no blob in the "
                            "{-# dialect_resources #-} section")
        blob, blob_token = self.resources[key]
        if not isinstance(blob, str) or not blob.startswith("0x") or len(blob) < 10:
            raise _Error.at(blob_token, f"resource {key} is not a hex blob with an alignment")
        try:
            return self._dense(f'"0x{blob[10:]}"', type_, token, blob=True)
        except ValueError as error:
            raise _Error.at(blob_token, f"invalid blob of resource {key}: {error}") from None

    def _dense(self, content: str, type_: ir.Type, token: Token, blob: bool) -> ir.DenseElements:
        if not isinstance(type_, ir.TensorType) or not type_.is_static:
            raise _Error.at(token, f"dense elements need a statically shaped tensor type, "
                            f"not {type_}")
        dtype = element_dtype(type_.element)
        shape, size = type_.shape, type_.size
        if blob:
            text = _unescape(content)
            if not text.startswith("0x"):
                raise ValueError(f"a string literal {content} that is not a hex blob")
            array = _dense_from_blob(text[2:], type_.element, dtype, shape, size)
        elif not content:
            if size:
                raise ValueError(f"no elements given for a tensor of {size}")
            array = np.zeros(shape, dtype=dtype)
            array.flags.writeable = False
        else:
            array = _dense_from_literal(content, type_.element, dtype, shape, size)
        return ir.DenseElements(array, type_)

    def dialect_attr(self, c):
        token = c[0]
        found = self.dialect_cache.get(token.value)
        if found is None:
            try:
                found = self._decode_dialect(token.value)
            except _Error as error:
                if error.line is None:
                    error.line, error.column = token.line, token.column
                raise
            except (ValueError, KeyError, IndexError) as error:
                raise _Error.at(token, f"invalid attribute {token.value}: {error}") from None
            self.dialect_cache[token.value] = found
        return found

    def _decode_dialect(self, text: str) -> Any:
        dialect, body = _DIALECT_ATTR.fullmatch(text).groups()
        if dialect in ("stablehlo", "chlo"):
            enum = _ENUM_BODY.fullmatch(body)
            return ir.EnumAttr(enum.group(1), enum.group(2)) if enum else ir.OpaqueAttr(text)
        if not dialect.startswith("stablehlo."):
            return ir.OpaqueAttr(text)
        name = dialect[len("stablehlo."):]
        if name == "conv":
            return self._conv(body, text)
        if name == "bounds":
            return ir.StructAttr("bounds", ir.freeze({"bounds": tuple(
                None if b.strip() == "?" else _parse_int(b) for b in _split_top(body)
                if b.strip())}))
        word = _WORD.fullmatch(body)
        if word and name not in _KNOWN_STRUCTS:
            return ir.EnumAttr(name, word.group(1))
        try:
            fields = self._struct_fields(body)
        except _Error:
            if name in _KNOWN_STRUCTS:
                raise
            return ir.OpaqueAttr(text)
        return ir.StructAttr(name, ir.freeze(fields))

    def _struct_fields(self, body: str) -> dict:
        try:
            return self.lark.parse(body, start="struct_fields")
        except UnexpectedInput as error:
            raise _Error(f"malformed attribute fields ({_describe(error, self.lark)})") from None

    def _conv(self, body: str, text: str) -> ir.StructAttr:
        if body.lstrip().startswith("raw"):
            return ir.StructAttr("conv", ir.freeze(self._struct_fields(body.lstrip()[3:])))
        match = _CONV.fullmatch(body)
        if not match:
            raise _Error(f"malformed convolution dimension numbers {text}")
        fields: dict[str, Any] = {}
        layouts = (("input", "b", "f", "batch_dimension", "feature_dimension"),
                   ("kernel", "i", "o", "input_feature_dimension", "output_feature_dimension"))
        for (prefix, first, second, first_name, second_name), group in zip(
                layouts + (("output", "b", "f", "batch_dimension", "feature_dimension"),),
                match.groups()):
            labels = [s.strip() for s in group.split(",")]
            spatial = sorted((int(s), i) for i, s in enumerate(labels) if s.isdigit())
            if (labels.count(first) != 1 or labels.count(second) != 1
                    or [s for s, _ in spatial] != list(range(len(labels) - 2))):
                raise _Error(f"malformed convolution dimension numbers {text}")
            fields[f"{prefix}_{first_name}"] = labels.index(first)
            fields[f"{prefix}_{second_name}"] = labels.index(second)
            fields[f"{prefix}_spatial_dimensions"] = tuple(i for _, i in spatial)
        return ir.StructAttr("conv", ir.freeze(fields))

    def _attribute_text(self, text: str) -> Any:
        """A tensor encoding."""
        if text.startswith("#") and "<" in text:
            return self._decode_dialect(text)
        if text in self.attr_aliases:
            return self.attr_aliases[text]
        if text.startswith("#"):
            raise _Error(f"undefined attribute alias {text}")
        return ir.OpaqueAttr(text)

    def alias_attr(self, c):
        token = c[0]
        if token.value in self.attr_aliases:
            return self.attr_aliases[token.value]
        if token.value in self.loc_aliases:
            return self.loc_aliases[token.value][0]
        raise _Error.at(token, f"undefined attribute alias {token.value}")

    def opaque_builtin_attr(self, c):
        return ir.OpaqueAttr(c[0].value)

    def type_attr(self, c):
        return c[0]

    # ----------------------------------------------------------------- locations

    def location(self, c):
        item = c[0]
        if isinstance(item, Token):
            if item.type == "LOC_UNKNOWN":
                raw = _RawLoc(("unknown",))
            else:
                raw = _RawLoc(("alias", item.value[4:-1].strip(), item))
        else:
            raw = item
        if not self.resolve_locations:
            return raw
        return self._resolve(raw)

    def loc_unknown(self, c):
        return _RawLoc(("unknown",))

    def loc_alias(self, c):
        return _RawLoc(("alias", c[0].value, c[0]))

    def loc_file(self, c):
        file, line, column, _range = c
        return _RawLoc(("file", _unescape(file.value), _parse_int(line.value),
                        _parse_int(column.value) if column is not None else None))

    def loc_name(self, c):
        return _RawLoc(("name", _unescape(c[0].value), c[1]))

    def loc_callsite(self, c):
        return _RawLoc(("callsite", c[0], c[1]))

    def loc_fused(self, c):
        return _RawLoc(("fused", tuple(x for x in c[1:] if x is not None)))

    def loc_range(self, c):
        return None

    def _resolve(self, raw: _RawLoc) -> ir.Location | None:
        kind = raw[0]
        if kind == "alias":
            return self._resolve_alias(raw[1], raw[2])
        if kind == "file":
            return ir.Location(raw[1], raw[2], raw[3])
        if kind == "name":
            inner = self._resolve(raw[2]) if raw[2] is not None else None
            if inner is None:
                return ir.Location(name=raw[1])
            return ir.Location(inner.file, inner.line, inner.column, raw[1])
        if kind == "callsite":
            callee = self._resolve(raw[1])
            if callee is not None and callee.file is not None:
                return callee
            caller = self._resolve(raw[2])
            if caller is None:
                return callee
            name = callee.name if callee is not None and callee.name else caller.name
            return ir.Location(caller.file, caller.line, caller.column, name)
        if kind == "fused":
            found = [loc for loc in map(self._resolve, raw[1]) if loc is not None]
            if not found:
                return None
            name = next((loc.name for loc in found if loc.name), None)
            where = next((loc for loc in found if loc.file is not None), None)
            if where is None:
                return ir.Location(name=name)
            return ir.Location(where.file, where.line, where.column, name)
        return None  # unknown

    def _resolve_alias(self, name: str, token: Token) -> ir.Location | None:
        memo = self.loc_memo
        if name in memo:
            return memo[name]
        if name not in self.loc_aliases:
            raise _Error.at(token, f"undefined location alias {name}")
        if name in self.loc_active:
            raise _Error.at(token, f"location alias {name} refers to itself")
        self.loc_active.add(name)
        try:
            resolved = self._resolve(self.loc_aliases[name][0])
        finally:
            self.loc_active.discard(name)
        memo[name] = resolved
        return resolved


# ------------------------------------------------------------------------ the parser

_build_lock = threading.Lock()
_parse_lock = threading.Lock()
_parser: tuple[Lark, _TreeToIR] | None = None


def _get_parser() -> tuple[Lark, _TreeToIR]:
    global _parser
    if _parser is None:
        with _build_lock:
            if _parser is None:
                tree_to_ir = _TreeToIR()
                lark = _build_lark(tree_to_ir)
                tree_to_ir.lark = lark
                _parser = (lark, tree_to_ir)
    return _parser


def _build_lark(tree_to_ir: _TreeToIR) -> Lark:
    """The LALR parser of the grammar. Computing its tables takes 0.4 s, a third of the
    first call of a small program, so lark keeps them (its ``cache``) in the user's private
    folder (``folders.native_dir``: the file is a pickle, which only a folder nobody else
    can write may hold), one file per grammar and lark version (lark checks the options
    itself). A file that lark cannot read (another process is writing it) is computed
    again."""
    grammar = GRAMMAR_PATH.read_text(encoding="utf-8")
    options = dict(parser="lalr", lexer="contextual", maybe_placeholders=True,
                   start=["start", "prelude", "struct_fields"], transformer=tree_to_ir)
    key = hashlib.sha256(f"{grammar}{lark_version}".encode()).hexdigest()[:24]
    try:
        kept = str(folders.native_dir() / f"stablehlo-{key}.lark")
    except OSError:
        kept = False
    return Lark(grammar, cache=kept, **options)


def _describe(error: UnexpectedInput, lark: Lark) -> str:
    """``unexpected X; expected one of: ...`` for a lark error."""
    if isinstance(error, UnexpectedCharacters):
        what = f"unexpected character {error.char!r}"
        expected = error.allowed or set()
    elif isinstance(error, UnexpectedToken):
        token = error.token
        if token.type == "$END":
            what = "unexpected end of input"
        else:
            shown = token.value if len(token.value) <= 40 else token.value[:37] + "..."
            what = f"unexpected {shown!r}"
        expected = error.accepts or error.expected or set()
    elif isinstance(error, UnexpectedEOF):
        what, expected = "unexpected end of input", set(error.expected or ())
    else:
        return str(error)
    names = []
    for name in sorted(expected):
        if name in _TERMINAL_NAMES:
            names.append(_TERMINAL_NAMES[name])
            continue
        try:
            pattern = lark.get_terminal(name).pattern
        except KeyError:
            names.append(name)
            continue
        names.append(repr(pattern.value) if pattern.type == "str" else name)
    names = sorted(set(names))
    if not names:
        return what
    if len(names) > 10:
        names = names[:10] + ["..."]
    return f"{what}; expected {'one of: ' if len(names) > 1 else ''}{', '.join(names)}"


def _error(text: str, message: str, line: int | None, column: int | None) -> ParseError:
    return ParseError(message, line, column, pointed_line(text, line, column))


def _split_passes(text: str) -> tuple[str, str]:
    """(prelude, operations): the same lines, each text with the other's lines blank."""
    lines = text.split("\n")
    prelude = [""] * len(lines)
    in_metadata = False
    for i, line in enumerate(lines):
        if in_metadata:
            in_metadata = "#-}" not in line
        elif _ALIAS_LINE.match(line):
            pass
        elif line.lstrip().startswith("{-#"):
            in_metadata = "#-}" not in line
        else:
            continue
        prelude[i] = line
        lines[i] = ""
    return "\n".join(prelude), "\n".join(lines)


def _end_position(text: str) -> tuple[int, int]:
    stripped = text.rstrip()
    line = stripped.count("\n") + 1
    return line, len(stripped) - (stripped.rfind("\n") + 1) + 1


def parse_module(text: str) -> ir.Module:
    """Parse a module printed in MLIR's generic op form into an :class:`ir.Module`.

    Raises :class:`ParseError` (with a 1-based line and column where there is one) for any
    text that is not such a module, and for anything that is not a ``str``.
    """
    if not isinstance(text, str):
        raise ParseError(f"expected the module's text as str, got {type(text).__name__}")
    try:
        lark, tree_to_ir = _get_parser()
    except Exception as error:  # a missing or broken grammar file
        raise ParseError(f"cannot load the grammar {GRAMMAR_PATH}: {error}") from None
    prelude, body = _split_passes(text)
    with _parse_lock:
        tree_to_ir.reset()
        current = prelude
        try:
            lark.parse(prelude, start="prelude")
            tree_to_ir.resolve_locations = True
            current = body
            ops = lark.parse(body, start="start")
            return _build_module(ops, tree_to_ir.positions, text)
        except ParseError:
            raise
        except _Error as error:
            raise _error(text, error.message, error.line, error.column) from None
        except UnexpectedInput as error:
            line, column = error.line, error.column
            token = getattr(error, "token", None)
            if isinstance(error, UnexpectedEOF) or (
                    token is not None and token.type == "$END") or line is None or line < 1:
                line, column = _end_position(current)
            raise _error(text, _describe(error, lark), line, column) from None
        except RecursionError:
            raise ParseError("the module is nested too deeply to parse") from None
        except Exception as error:  # a bug: still a ParseError for the caller
            raise ParseError(f"internal error while parsing: {type(error).__name__}: "
                             f"{error}") from None
        finally:
            tree_to_ir.reset()


# ------------------------------------------------------------------- module assembly


def _build_module(ops: list, positions: dict, text: str) -> ir.Module:
    """The IR module from the parsed top-level ops: functions by name, their
    arguments' attributes, and a ParseError (with line and column) for anything that is
    not a function or names one twice."""
    def fail(op: ir.Op | None, message: str) -> ParseError:
        line, column = positions.get(id(op), (None, None))
        return _error(text, message, line, column)

    if not ops:
        line, column = _end_position(text)
        raise _error(text, "no operation found: expected a \"builtin.module\"", line, column)
    modules = [op for op in ops if op.name == "builtin.module"]
    name = None
    attributes: Any = _EMPTY
    if modules:
        if len(ops) != 1:
            other = next(op for op in ops[1:] if op is not modules[0]) if ops[0] is modules[0] \
                else ops[0]
            raise fail(other if id(other) in positions else modules[0],
                       "expected a single top-level \"builtin.module\"")
        module = modules[0]
        if len(module.regions) != 1 or len(module.regions[0].blocks) > 1:
            raise fail(module, "\"builtin.module\" must have one region of one block")
        body = module.regions[0].blocks[0].ops if module.regions[0].blocks else ()
        sym_name = module.attr("sym_name")
        name = sym_name if isinstance(sym_name, str) else None
        attributes = ir.freeze({k: v for k, v in module.attributes.items()
                                if k not in ("sym_name", "sym_visibility")})
    else:
        body = tuple(ops)
    functions: dict[str, ir.Function] = {}
    for op in body:
        if op.name != "func.func":
            continue
        function = _build_function(op, fail)
        if function.name in functions:
            raise fail(op, f"function @{function.name} is defined twice")
        functions[function.name] = function
    return ir.Module(MappingProxyType(functions), name, attributes)


def _per_value_attributes(op: ir.Op, key: str, count: int, fail) -> tuple:
    given = op.attr(key)
    if given is None:
        return (_EMPTY,) * count
    if not isinstance(given, tuple) or len(given) != count or not all(
            isinstance(a, MappingProxyType) for a in given):
        raise fail(op, f"`{key}` of func.func must list {count} dictionaries")
    return given


def _build_function(op: ir.Op, fail) -> ir.Function:
    name = op.attr("sym_name")
    if not isinstance(name, str):
        raise fail(op, "func.func without a `sym_name` string")
    ftype = op.attr("function_type")
    if not isinstance(ftype, ir.FunctionType):
        raise fail(op, f"func.func @{name} without a `function_type`")
    visibility = op.attr("sym_visibility", "public")
    if not isinstance(visibility, str):
        raise fail(op, f"`sym_visibility` of @{name} is not a string")
    if len(op.regions) > 1:
        raise fail(op, f"func.func @{name} has {len(op.regions)} regions")
    body = op.regions[0] if op.regions else ir.Region(())
    if body.blocks:
        arguments = body.entry.arguments
        if tuple(a.type for a in arguments) != ftype.inputs:
            raise fail(op, f"the arguments of @{name} do not match its function_type {ftype}")
    else:
        arguments = ir.values_of(ftype.inputs, "%arg")
    return ir.Function(
        name, arguments, ftype.results, body, visibility,
        _per_value_attributes(op, "arg_attrs", len(ftype.inputs), fail),
        _per_value_attributes(op, "res_attrs", len(ftype.results), fail),
        op.location)
