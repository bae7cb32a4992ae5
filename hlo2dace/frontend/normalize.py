"""Anything that holds a StableHLO module -> one canonical text in MLIR's generic op form.

This is the only module of hlo2dace that touches MLIR objects. It uses the MLIR bindings
bundled in jaxlib: they parse every producer's syntax (pretty or generic text, bytecode,
VHLO portable artifacts), run JAX's own CHLO-to-StableHLO legalisation, and print the
generic form, whose uniform syntax is what ``grammar/stablehlo.lark`` reads.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArgumentError, ParseError, UnsupportedError, pointed_line
from ..ir import Location
from ..progress import stage
from . import bytecode

MLIR_BYTECODE_MAGIC = b"ML\xefR"
#: Passes run on every module: CHLO ops become StableHLO ops, as XLA's pipeline does it,
#: composites become calls of their decompositions, and ops that compute the same value
#: become one (XLA's CSE: JAX writes ``(a*b + c) * (a*b)`` with two products, and whether a
#: product has one use decides whether XLA contracts it into a fused multiply-add).
NORMALIZE_PIPELINE = ("builtin.module(func.func(chlo-legalize-to-stablehlo), "
                      "func.func(stablehlo-legalize-composite-to-call), cse)")
#: Run as well on modules with dynamic shapes or ops: shapes that constants or the argument
#: types determine become static, and dynamic ops with constant shape operands become their
#: static forms (``dynamic_pad`` -> ``pad``), as XLA refines exported modules.
REFINE_PIPELINE = ("builtin.module(stablehlo-refine-shapes, "
                   "func.func(stablehlo-canonicalize-dynamism))")
#: Run as well on the per-device modules XLA's partitioner returns: HLO's ``dot`` comes back
#: as the deprecated ``stablehlo.dot``, which becomes ``dot_general``.
PARTITIONED_PIPELINE = "builtin.module(func.func(stablehlo-legalize-deprecated-ops))"
_DYNAMIC = re.compile(r"tensor<(?:\d+x)*\?|stablehlo\.(?:dynamic_(?:broadcast_in_dim|iota|reshape"
                      r"|pad|gather|conv)|real_dynamic_slice|get_dimension_size)|chlo\.scan")

_lock = threading.Lock()
_passes_registered = False


@dataclass(frozen=True)
class NormalizedModule:
    """Generic-form text (with ``loc`` information) and a digest of the module that ignores
    locations, so moving the user's code does not invalidate compiled binaries."""

    text: str
    digest: str


def _context():
    global _passes_registered
    from jax._src.interpreters import mlir as jax_mlir  # a context with every JAX dialect
    from jaxlib.mlir._mlir_libs import _stablehlo

    with _lock:
        if not _passes_registered:
            _stablehlo.register_stablehlo_passes()
            _passes_registered = True
    return jax_mlir.make_ir_context()


def _mlir_error(exc: Exception, what: str, text: str = "") -> ParseError:
    """Turn an ``MLIRError`` into a ParseError carrying the first diagnostic's position (and
    that line of ``text``, the source parsed, with a caret under the column)."""
    line = column = None
    message = str(exc)
    diagnostics = getattr(exc, "error_diagnostics", None) or []
    if diagnostics:
        first = diagnostics[0]
        message = first.message
        found = re.search(r'":(\d+):(\d+)', str(first.location))
        if found:
            line, column = int(found.group(1)), int(found.group(2))
    return ParseError(f"invalid {what}: {message}", line, column,
                      pointed_line(text, line, column))


def _parse(ctx, source: str | bytes, what: str, path: Path | None = None):
    """``source`` parsed; text read from ``path`` is parsed from that file, so that the
    locations of its ops (in errors, in a profile's source column) name it, not ``-``."""
    from jax.extend.mlir import ir

    try:
        if path is not None:
            return ir.Module.parseFile(str(path), context=ctx)
        return ir.Module.parse(source, context=ctx)
    except Exception as exc:  # MLIRError, or ValueError for undecodable bytes
        error = _mlir_error(exc, what, source if isinstance(source, str) else "")
        if _QUANT_TYPE.search(str(error)):
            raise _quantized(source, error) from None
        if isinstance(source, str) and path is None and _looks_like_a_path(source):
            raise ParseError(f"{source.strip()!r} is not StableHLO text; it looks like a "
                             f"file name: pass pathlib.Path({source.strip()!r}) to read the "
                             "file") from None
        raise error from None


def _looks_like_a_path(text: str) -> bool:
    """Text that names a file rather than holding a module: one line, no op in it."""
    text = text.strip()
    return "\n" not in text and "(" not in text and "{" not in text and (
        Path(text).suffix in (".mlir", ".mlirbc", ".bc", ".bin", ".vhlo", ".exported")
        or os.sep in text or Path(text).is_file())


#: MLIR's complaint about a type of the ``quant`` dialect, which jaxlib does not register
_QUANT_TYPE = re.compile(r'`!"quant"<.*unregistered dialect')
#: the op a line of MLIR text defines (generic or pretty form), or a function header
_OP_ON_LINE = re.compile(r'(?:=\s*|^\s*)"?([A-Za-z_]\w*\.[\w.]+)"?')


def _quantized(source: str | bytes, error: ParseError) -> UnsupportedError:
    """Quantized types (``!quant.uniform<...>``) cannot be read at all: jaxlib 0.10.2
    links no ``quant`` dialect into its MLIR, and none of the dialect registrations it
    exposes (``make_ir_context``, ``register_dialects``, the stablehlo, chlo, mhlo, sdy,
    tpu, mosaic_gpu and triton ones) adds it. Name the op on the offending line."""
    op = "module"
    text = source if isinstance(source, str) else source.decode("utf-8", "replace")
    lines = text.splitlines()
    if error.line is not None and 0 < error.line <= len(lines):
        line = lines[error.line - 1]
        found = _OP_ON_LINE.search(line)
        op = found.group(1) if found else "func.return" if "return" in line else op
    return UnsupportedError(
        op, "quantized element types (`!quant.uniform<...>`): jaxlib 0.10.2's MLIR has no "
        "quant dialect, so a module using them cannot be parsed",
        Location("input", error.line, error.column),
        ["float and integer element types: dequantize in JAX before lowering, or rewrite "
         "the quantized ops into integer arithmetic first with a StableHLO build that has "
         "them (stablehlo-opt --stablehlo-legalize-quant-to-math)"])


def _from_bytes(ctx, data: bytes, path: Path | None = None):
    """The module ``data`` holds (read from the file ``path``, if given)."""
    if data.startswith(MLIR_BYTECODE_MAGIC):
        # portable artifacts (VHLO; also what jax.export stores) are bytecode too; read in a
        # child process: damaged bytecode crashes jaxlib's readers (bytecode.py)
        return _parse(ctx, bytecode.generic_text(data), "MLIR bytecode")
    text = _text(data)
    if text is not None:  # malformed text gets the text parser's line and column
        return _parse(ctx, text, "StableHLO text", path)
    from jax import export

    try:
        exported = export.deserialize(bytearray(data))
    except Exception as exc:
        raise ParseError(
            "bytes that are not text are neither MLIR bytecode, a StableHLO portable "
            f"artifact, nor a serialized jax.export.Exported ({type(exc).__name__}: {exc})") \
            from None
    return _from_exported(ctx, exported)


def _text(data: bytes) -> str | None:
    """``data`` as text if it is UTF-8 without NUL characters, as text files are; the binary
    forms never are: bytecode and portable artifacts begin with ``ML\\xefR`` (not UTF-8),
    and a serialized ``Exported`` holds bytecode and the NUL bytes of its flatbuffer."""
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _from_exported(ctx, exported):
    """An ``Exported``'s module; one exported for several platforms runs its CPU variant:
    the platform-index argument JAX adds becomes that constant."""
    module = _from_bytes(ctx, bytes(exported.mlir_module_serialized))
    if len(exported.platforms) > 1:
        if "cpu" not in exported.platforms:
            raise UnsupportedError("func.func", f"exported for {list(exported.platforms)}: "
                                   "no CPU variant")
        _fix_platform_index(module, exported.platforms.index("cpu"))
    return module


def _fix_platform_index(module, index: int) -> None:
    from jax.extend.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    main = next(op for op in module.body.operations
                if ir.StringAttr(op.attributes["sym_name"]).value == "main")
    block = main.regions[0].blocks[0]
    with ir.InsertionPoint.at_block_begin(block), ir.Location.unknown():
        constant = stablehlo.ConstantOp(ir.DenseElementsAttr.get(
            np.array(index, np.int32), type=ir.IntegerType.get_signless(32)))
    block.arguments[0].replace_all_uses_with(constant.result)
    block.erase_argument(0)
    function_type = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        function_type.inputs[1:], function_type.results))
    if "arg_attrs" in main.attributes:
        main.attributes["arg_attrs"] = ir.ArrayAttr.get(list(main.attributes["arg_attrs"])[1:])


def _to_mlir_module(ctx, source: Any):
    from jax import export, stages
    from jax.extend.mlir import ir

    if isinstance(source, stages.Lowered):
        # the generic form: JAX's pretty printer writes some ops (a 0-d dynamic_slice's
        # `sizes = []`) in a syntax that does not parse back
        source = source.compiler_ir("stablehlo")
    if isinstance(source, ir.Module):
        text = source.operation.get_asm(print_generic_op_form=True, enable_debug_info=True)
        return _parse(ctx, text, "MLIR module")
    if isinstance(source, export.Exported):
        return _from_exported(ctx, source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _from_bytes(ctx, bytes(source))
    if isinstance(source, os.PathLike):
        return _from_bytes(ctx, Path(source).read_bytes(), Path(source))
    if isinstance(source, str):
        return _parse(ctx, source, "StableHLO text")
    raise ParseError(
        f"cannot read a StableHLO module from {type(source).__name__}; expected text, bytes, "
        "a path, a jax.stages.Lowered or a jax.export.Exported")


def normalize(source: Any, processes: tuple[int, int] | None = None) -> NormalizedModule:
    """Parse ``source``, legalise CHLO, refine dynamic shapes where constants determine
    them, and print the generic op form with locations. ``processes``: (replicas,
    partitions) of a per-device module that XLA's partitioner made (which does not say
    them itself), recorded as the module's ``mhlo.num_replicas``/``num_partitions``."""
    with stage("normalise"):
        ctx = _context()
        with ctx:
            module = _to_mlir_module(ctx, source)
            _refuse_reverse_scans(module)
            _dense_replica_groups(module)
            if processes is not None:
                _set_processes(module, processes)
                _run(ctx, module, PARTITIONED_PIPELINE, "legalisation of deprecated ops")
            _run(ctx, module, NORMALIZE_PIPELINE, "legalisation")
            bare = module.operation.get_asm(print_generic_op_form=True,
                                            enable_debug_info=False)
            if _DYNAMIC.search(bare):
                _run(ctx, module, REFINE_PIPELINE, "shape refinement")
                bare = None
            return _printed(module, bare)


def _refuse_reverse_scans(module) -> None:
    """jaxlib's legalisation of ``chlo.scan`` ignores ``is_reverse``: it would compute
    the forward scan, a silently wrong answer."""
    from jax.extend.mlir import ir

    reverse = []

    def visit(op):
        if op.name == "chlo.scan" and "is_reverse" in op.attributes \
                and str(op.attributes["is_reverse"]) == "true":
            reverse.append(str(op.location))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if reverse:
        raise UnsupportedError("chlo.scan", "is_reverse = true (jaxlib's legalisation "
                               "computes the forward scan)", reverse[0])


def _set_processes(module, processes: tuple[int, int]) -> None:
    from jax.extend.mlir import ir

    for name, count in zip(("mhlo.num_replicas", "mhlo.num_partitions"), processes):
        module.operation.attributes[name] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(32), count)


_MESH_AXIS = re.compile(r'"([^"]+)"\s*=\s*(\d+)')
_MESH_DEVICES = re.compile(r"device_ids\s*=\s*\[([\d,\s]*)\]")


def _dense_replica_groups(module) -> None:
    """Replica groups given as axes of a Shardy mesh (``#stablehlo.replica_group_mesh_axes``,
    what XLA's partitioner writes) become the dense groups every consumer reads: one group
    per position on the other axes, holding the devices along the named axes in row-major
    order of those axes (the mesh's ``device_ids``, else the positions themselves)."""
    from jax.extend.mlir import ir

    meshes = {}
    for op in module.body.operations:
        if op.operation.name == "sdy.mesh":
            text = str(op.attributes["mesh"])
            axes = [(name, int(size)) for name, size in _MESH_AXIS.findall(text)]
            devices = _MESH_DEVICES.search(text)
            meshes[ir.StringAttr(op.attributes["sym_name"]).value] = (axes, [
                int(d) for d in devices.group(1).split(",")] if devices else None)

    def visit(op):
        groups = op.attributes["replica_groups"] if "replica_groups" in op.attributes \
            else None
        text = str(groups) if groups is not None else ""
        if "replica_group_mesh_axes" in text:
            mesh = re.search(r"mesh = @([\w.$-]+)", text).group(1)
            names = re.findall(r'axis_ref<name = "([^"]+)"\s*>', text)
            if mesh not in meshes or "sub_axis" in text:
                raise UnsupportedError(op.name, f"replica groups {text}: the mesh @{mesh} "
                                       "is missing or split", str(op.location))
            axes, devices = meshes[mesh]
            ids = np.arange(int(np.prod([n for _, n in axes])), dtype=np.int64)
            ids = np.asarray(devices, np.int64) if devices else ids
            ids = ids.reshape([n for _, n in axes] or [1])
            order = [k for k, (name, _) in enumerate(axes) if name not in names] + \
                [next(k for k, (name, _) in enumerate(axes) if name == wanted)
                 for wanted in names]
            kept = int(np.prod([axes[k][1] for k in order[:len(axes) - len(names)]]))
            dense = ids.transpose(order).reshape(kept, -1)
            op.attributes["replica_groups"] = ir.DenseElementsAttr.get(dense)
        return ir.WalkResult.ADVANCE

    if meshes:
        module.operation.walk(visit)


def specialise(normalized: NormalizedModule, types: list[str]) -> NormalizedModule:
    """``normalized`` with its ``main`` taking arguments of the static ``types`` (MLIR type
    text), every shape refined from them: StableHLO's passes, as JAX runs them on an
    exported module called with concrete shapes."""
    from jax._src.interpreters.mlir import module_to_bytecode
    from jax._src.lib import _jax

    with stage("specialise"):
        ctx = _context()
        with ctx:
            module = _parse(ctx, normalized.text, "normalised module")
            quoted = ",".join(types)
            _run(ctx, module, f"builtin.module(stablehlo-refine-arguments{{types='{quoted}'}})",
                 "argument refinement")
            try:  # JAX's own refinement: it checks and removes the shape assertions
                refined = _jax.mlir.refine_polymorphic_shapes(
                    mlir_module=module_to_bytecode(module), enable_shape_assertions=True,
                    validate_static_shapes=True, enable_shardy=False)
            except Exception as exc:
                message = str(exc)
                failed = re.search(r'loc\("shape_assertion"\): ([^\n]*)', message)
                if failed:
                    raise ArgumentError(failed.group(1)) from None
                raise UnsupportedError("module", "shape refinement at argument types "
                                       f"{', '.join(types)} failed: {message.splitlines()[0]}") \
                    from None
            module = _parse(ctx, refined, "refined module")
            _run(ctx, module, REFINE_PIPELINE, "shape refinement")
            return _printed(module)


def _run(ctx, module, pipeline: str, what: str) -> None:
    from jax.extend.mlir import passmanager

    try:
        passmanager.PassManager.parse(pipeline, context=ctx).run(module.operation)
    except Exception as exc:
        raise _mlir_error(exc, f"module ({what} failed)") from None


def _printed(module, bare: str | None = None) -> NormalizedModule:
    """The module's text, and the digest of its text without locations (``bare``, if
    printed already)."""
    text = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=True)
    if bare is None:
        bare = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=False)
    return NormalizedModule(text, hashlib.sha256(bare.encode()).hexdigest())


def stablehlo_op_names() -> list[str]:
    """Every op of the StableHLO dialect in jaxlib's bindings (for the coverage table)."""
    from jaxlib.mlir.dialects import stablehlo

    names = {getattr(getattr(stablehlo, attr), "OPERATION_NAME", None) for attr in dir(stablehlo)}
    return sorted(name for name in names if isinstance(name, str))
