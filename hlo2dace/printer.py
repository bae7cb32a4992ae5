"""The IR as text: MLIR's generic op form for ops, a ``func.func`` header per function.

What ``Lowered.as_planned_text()`` shows and what the plan passes' tests compare: the
module after the plan stage, with each decision a pass recorded on its op as an
``h2d.*`` attribute (``plan/annotations.py``), printed as the annotation prints itself.
Attribute values print as MLIR spells them where the IR keeps them (types, dense
constants, ``#stablehlo`` enums and structs, symbol references); a large constant prints
as the hex blob JAX writes.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import ir

#: constants with more elements than this print as a hex blob
LISTED_ELEMENTS = 16


def module_text(module: ir.Module, locations: bool = False) -> str:
    """``module`` as text; with ``locations``, each op's source location too."""
    lines = ["module {"]
    for function in module.functions.values():
        arguments = ", ".join(f"{v.name}: {v.type}" for v in function.arguments)
        results = ", ".join(map(str, function.result_types))
        visibility = "" if function.visibility == "public" else f"{function.visibility} "
        lines.append(f"  func.func {visibility}@{function.name}({arguments}) -> ({results}) {{")
        _block(function.body.entry, lines, "    ", locations, arguments=False)
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def decisions_text(function: ir.Function) -> str:
    """The ops of ``function``'s body with only their ``h2d.*`` attributes, without types:
    what the plan decided, one op a line (regions indented), as the passes' tests read it."""
    lines: list[str] = []

    def block(b: ir.Block, indent: str) -> None:
        for op in b.ops:
            results = f"{', '.join(v.name for v in op.results)} = " if op.results else ""
            plan = {k: v for k, v in op.attributes.items() if k.startswith("h2d.")}
            notes = f" {{{_entries(plan, compact=True)}}}" if plan else ""
            lines.append(f"{indent}{results}{op.name}({', '.join(v.name for v in op.operands)})"
                         f"{notes}")
            for region in op.regions:
                for inner in region.blocks:
                    block(inner, indent + "  ")

    block(function.body.entry, "")
    return "\n".join(lines) + "\n"


def op_text(op: ir.Op, locations: bool = False) -> str:
    """One op (its regions included) as text."""
    lines: list[str] = []
    _op(op, lines, "", locations)
    return "\n".join(lines)


def _block(block: ir.Block, lines: list[str], indent: str, locations: bool,
           arguments: bool = True) -> None:
    if arguments:
        names = ", ".join(f"{v.name}: {v.type}" for v in block.arguments)
        lines.append(f"{indent[:-2]}^bb0({names}):")
    for op in block.ops:
        _op(op, lines, indent, locations)


def _op(op: ir.Op, lines: list[str], indent: str, locations: bool) -> None:
    results = f"{', '.join(v.name for v in op.results)} = " if op.results else ""
    operands = ", ".join(v.name for v in op.operands)
    attributes = f" {{{_entries(op.attributes)}}}" if op.attributes else ""
    signature = (f"({', '.join(str(v.type) for v in op.operands)}) -> "
                 + (str(op.results[0].type) if len(op.results) == 1 else
                    f"({', '.join(str(v.type) for v in op.results)})"))
    where = f" loc({_location(op.location)})" if locations and op.location else ""
    if not op.regions:
        lines.append(f'{indent}{results}"{op.name}"({operands}){attributes} : {signature}{where}')
        return
    lines.append(f'{indent}{results}"{op.name}"({operands}) ({{')
    for k, region in enumerate(op.regions):
        if k:
            lines.append(f"{indent}}}, {{")
        for block in region.blocks:
            _block(block, lines, indent + "    ", locations)
    lines.append(f"{indent}}}){attributes} : {signature}{where}")


def _entries(mapping: Mapping[str, Any], compact: bool = False) -> str:
    return ", ".join(f"{key} = {attribute_text(value, compact)}"
                     for key, value in mapping.items())


def attribute_text(value: Any, compact: bool = False) -> str:
    """An attribute's value as MLIR spells it (an annotation as it prints itself);
    ``compact``: numbers without their types."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value)) if compact else f"{int(value)} : i64"
    if isinstance(value, (float, np.floating)):
        return repr(float(value)) if compact else f"{float(value)!r} : f64"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple):
        if value and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                         for v in value):
            return f"array<i64: {', '.join(str(int(v)) for v in value)}>"
        return f"[{', '.join(attribute_text(v, compact) for v in value)}]"
    if isinstance(value, Mapping):
        return f"{{{_entries(value, compact)}}}"
    if isinstance(value, ir.DenseElements):
        return f"{_dense(value)} : {value.type}"
    if isinstance(value, ir.EnumAttr):
        return f"#stablehlo<{value.kind} {value.value}>"
    if isinstance(value, ir.StructAttr):
        return f"#stablehlo.{value.name}<{_entries(value.fields, compact)}>"
    if isinstance(value, ir.SymbolRef):
        return f"@{value.name}"
    if isinstance(value, ir.OpaqueAttr):
        return value.text
    text = getattr(value, "text", None)
    return text(compact) if callable(text) else str(value)  # annotations, types


def _dense(value: ir.DenseElements) -> str:
    array = value.array
    if array.size and value.is_splat:
        return f"dense<{_scalar(array.reshape(-1)[0])}>"
    if array.size <= LISTED_ELEMENTS:
        return f"dense<{_nested(array)}>"
    return f'dense<"0x{np.ascontiguousarray(array).tobytes().hex().upper()}">'


def _nested(array: np.ndarray) -> str:
    if array.ndim == 0:
        return _scalar(array[()])
    return "[" + ", ".join(_nested(a) for a in array) + "]"


def _scalar(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (complex, np.complexfloating)):
        return f"({_scalar(value.real)}, {_scalar(value.imag)})"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    number = float(value)
    if not np.isfinite(number):  # as MLIR prints them: the bits
        bits = np.asarray(value).view(f"u{np.asarray(value).itemsize}")
        return f"0x{int(bits):0{2 * np.asarray(value).itemsize}X}"
    return repr(number)


def _location(location: ir.Location) -> str:
    if location.file:
        return f'"{location.file}":{location.line or 0}:{location.column or 0}'
    return f'"{location.name or "unknown"}"'
