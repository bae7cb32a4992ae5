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

from ..errors import ParseError

MLIR_BYTECODE_MAGIC = b"ML\xefR"
#: Passes run on every module: CHLO ops become StableHLO ops, as XLA's pipeline does it, and
#: composites become calls of their decompositions.
NORMALIZE_PIPELINE = ("builtin.module(func.func(chlo-legalize-to-stablehlo), "
                      "func.func(stablehlo-legalize-composite-to-call))")

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


def _mlir_error(exc: Exception, what: str) -> ParseError:
    """Turn an ``MLIRError`` into a ParseError carrying the first diagnostic's position."""
    line = column = None
    message = str(exc)
    diagnostics = getattr(exc, "error_diagnostics", None) or []
    if diagnostics:
        first = diagnostics[0]
        message = first.message
        found = re.search(r'":(\d+):(\d+)', str(first.location))
        if found:
            line, column = int(found.group(1)), int(found.group(2))
    return ParseError(f"invalid {what}: {message}", line, column)


def _parse(ctx, source: str | bytes, what: str):
    from jax.extend.mlir import ir

    try:
        return ir.Module.parse(source, context=ctx)
    except Exception as exc:  # MLIRError, or ValueError for undecodable bytes
        raise _mlir_error(exc, what) from None


def _from_bytes(ctx, data: bytes):
    if data.startswith(MLIR_BYTECODE_MAGIC):
        # portable artifacts (VHLO; also what jax.export stores) are bytecode too
        from jaxlib.mlir.dialects import stablehlo

        try:
            return stablehlo.deserialize_portable_artifact(ctx, data)
        except Exception:  # not a portable artifact: plain StableHLO bytecode
            return _parse(ctx, data, "MLIR bytecode")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and ("func" in text or "module" in text):
        return _parse(ctx, text, "StableHLO text")
    from jax import export

    try:
        exported = export.deserialize(bytearray(data))
    except Exception as exc:
        raise ParseError(
            "bytes are neither MLIR bytecode, a StableHLO portable artifact, UTF-8 text, "
            f"nor a serialized jax.export.Exported ({type(exc).__name__}: {exc})") from None
    return _from_bytes(ctx, bytes(exported.mlir_module_serialized))


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
        return _from_bytes(ctx, bytes(source.mlir_module_serialized))
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _from_bytes(ctx, bytes(source))
    if isinstance(source, os.PathLike):
        return _from_bytes(ctx, Path(source).read_bytes())
    if isinstance(source, str):
        return _parse(ctx, source, "StableHLO text")
    raise ParseError(
        f"cannot read a StableHLO module from {type(source).__name__}; expected text, bytes, "
        "a path, a jax.stages.Lowered or a jax.export.Exported")


def normalize(source: Any) -> NormalizedModule:
    """Parse ``source``, legalise CHLO, and print the generic op form with locations."""
    from jax.extend.mlir import passmanager

    ctx = _context()
    with ctx:
        module = _to_mlir_module(ctx, source)
        try:
            passmanager.PassManager.parse(NORMALIZE_PIPELINE, context=ctx).run(module.operation)
        except Exception as exc:
            raise _mlir_error(exc, "module (legalisation failed)") from None
        text = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=True)
        bare = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=False)
    return NormalizedModule(text, hashlib.sha256(bare.encode()).hexdigest())


def stablehlo_op_names() -> list[str]:
    """Every op of the StableHLO dialect in jaxlib's bindings (for the coverage table)."""
    from jaxlib.mlir.dialects import stablehlo

    names = {getattr(getattr(stablehlo, attr), "OPERATION_NAME", None) for attr in dir(stablehlo)}
    return sorted(name for name in names if isinstance(name, str))
