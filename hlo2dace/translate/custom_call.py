"""``stablehlo.custom_call``: a call of a function the compiler does not see, by the name in
``call_target_name``. Families of targets register a translator per name with
``register_target`` (LAPACK's in lapack.py); an unknown name is unsupported.

A target's code sees its buffers in the layouts the call declares (``operand_layouts``,
``result_layouts``, minor-to-major dimension lists; row-major where absent), as XLA passes
them: JAX declares matrices column-major for LAPACK. ``physical_operands`` and
``physical_results`` give the arrays in those layouts: an operand in another layout is
copied once, transposed, and a result is bound as a transposing view of its buffer, read
in place by its consumers. Output-operand aliases only let XLA reuse an operand's buffer;
the kernels copy their operand first, so the aliases change nothing here."""

from __future__ import annotations

import ctypes.util
import glob
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence, Union

import dace.library
import sympy

from .. import ir, symbolic
from ..errors import ArgumentError
from . import dtypes
from .bindings import Array, Axis, Binding, Literal, View
from .builder import Builder
from .emitter import Whole
from .registry import register

#: target name -> ``fn(builder, call)``
_TARGETS: dict[str, Callable[[Builder, CustomCall], None]] = {}


def register_target(*names: str):
    """Register ``fn(builder, call)`` as the translator of the custom call targets ``names``."""

    def decorate(fn):
        for name in names:
            if name in _TARGETS:
                raise ValueError(f"custom call target {name} is registered twice")
            _TARGETS[name] = fn
        return fn

    return decorate


def supported_targets() -> list[str]:
    return sorted(_TARGETS)


_HOST_CALLBACK = (
    "a host callback (jax.debug.print, jax.debug.callback, jax.pure_callback or "
    "io_callback), which runs Python code of the process that lowered the function: a "
    "compiled program, cached on disk and shared between processes, cannot call it. Call "
    "the Python function outside the compiled function instead, on its arguments or "
    "results")
#: custom call targets of JAX features hlo2dace does not compile: what they are and what
#: to do instead
JAX_FEATURE_TARGETS = {
    "xla_ffi_python_cpu_callback": _HOST_CALLBACK,
    "xla_python_cpu_callback": _HOST_CALLBACK,
    "ApproxTopK": "jax.lax.approx_max_k or approx_min_k: use jax.lax.top_k (of -x for the "
                  "smallest), which is what XLA computes for them on a CPU",
}


def summarised_targets() -> list[str]:
    """The supported targets, LAPACK's kernels counted rather than named (the list in full
    is in docs/ops.md)."""
    lapack = [name for name in supported_targets() if name.startswith("lapack_")]
    others = [name for name in supported_targets() if not name.startswith("lapack_")]
    return [*others, f"{len(lapack)} LAPACK kernels (lapack_*_ffi, from jnp.linalg and "
            "jax.scipy.linalg); docs/ops.md lists them all"]


@dataclass(frozen=True)
class CustomCall:
    """A custom call's decoded attributes."""

    op: ir.Op
    target: str
    #: the FFI attributes: JAX's ``mhlo.backend_config`` dictionary, or a ``backend_config``
    #: that is a dictionary itself (typed-FFI calls written by hand)
    config: Mapping[str, Any]
    #: minor-to-major dimension order of each operand's and result's buffer
    operand_layouts: tuple[tuple[int, ...], ...]
    result_layouts: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, b: Builder, op: ir.Op) -> CustomCall:
        config = op.attr("mhlo.backend_config")
        if not isinstance(config, Mapping):
            backend = op.attr("backend_config")
            config = backend if isinstance(backend, Mapping) else MappingProxyType({})
        return cls(op, op.attr("call_target_name"), config,
                   _layouts(b, op.attr("operand_layouts"), op.operands, "operand"),
                   _layouts(b, op.attr("result_layouts"), op.results, "result"))

    def char(self, b: Builder, name: str, allowed: str) -> str:
        """A one-character attribute (an enum that jaxlib passes as a ``ui8`` character)."""
        value = self.config.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or chr(value) not in allowed:
            raise b.unsupported(f"{self.target}: attribute {name} = {value!r}",
                                [f"{name} = {ord(c)} ({c!r})" for c in allowed])
        return chr(value)

    def value(self, b: Builder, name: str, kind: type) -> Any:
        """An attribute of Python type ``kind`` (``int`` or ``bool``)."""
        value = self.config.get(name)
        if type(value) is not kind:
            raise b.unsupported(f"{self.target}: attribute {name} = {value!r} (a {kind.__name__} "
                                "is needed)")
        return value


def _layouts(b: Builder, attribute, values: Sequence[ir.Value], what: str):
    """Each value's layout: the attribute's, else row-major (minor-to-major ``r-1 .. 0``)."""
    layouts = []
    for i, value in enumerate(values):
        if not isinstance(value.type, ir.TensorType):
            raise b.unsupported(f"{what} {i} of type {value.type}")
        rank = value.type.rank
        if attribute is None:
            layouts.append(tuple(range(rank - 1, -1, -1)))
            continue
        layout = tuple(int(d) for d in attribute[i].array.reshape(-1))
        if sorted(layout) != list(range(rank)):
            raise b.unsupported(f"{what} {i}: layout {list(layout)} for a rank-{rank} tensor")
        layouts.append(layout)
    return tuple(layouts)


def _custom_call_shape(inference, op, operands, shapes, knowns, env):
    """JAX's shape assertions become checks on the symbols; other calls need static
    shapes."""
    if op.attr("call_target_name") != "shape_assertion":
        if any(not symbolic.is_static(v.type) for v in (*operands, *op.results)
               if isinstance(v.type, ir.TensorType)):
            raise symbolic.NeedsSpecialisation(op.name, "a custom call with dynamic shapes",
                                               op.location)
        return [None] * len(op.results)
    (predicate,) = symbolic.known_dims(op, knowns, 0)
    values = [str(symbolic.known_dims(op, knowns, k)[0]) for k in range(1, len(operands))]
    if predicate is not sympy.true and predicate is not True:
        inference.checks.append(symbolic.Check(str(predicate), op.attr("error_message", ""),
                                               tuple(values)))
    return []


@register("stablehlo.custom_call", shape_rule=_custom_call_shape)
def custom_call(b: Builder, op: ir.Op) -> list[Binding]:
    """The translator registered for the target (``register_target``): it returns the
    bindings of the call's results, as op translators do."""
    name = op.attr("call_target_name")
    translate = _TARGETS.get(name)
    if name in JAX_FEATURE_TARGETS:
        raise b.unsupported(f"custom call target {name!r} is {JAX_FEATURE_TARGETS[name]}")
    if translate is None:
        raise b.unsupported(f"custom call target {name!r}", summarised_targets())
    return translate(b, CustomCall.of(b, op))


@register_target("shape_assertion")
def shape_assertion(b: Builder, call: CustomCall) -> list[Binding]:
    """JAX's check of the argument shapes against a polymorphic specification. Once shapes
    are specialised its predicate is a constant: a false one fails with JAX's message. With
    symbolic shapes the runtime checks it at every call (``symbolic.Check``)."""
    predicate, *values = (b.binding(v) for v in call.op.operands)
    if predicate.is_literal:
        if not bool(predicate.value):
            raise ArgumentError(str(call.op.attr("error_message", "shape assertion failed"))
                                .format(*[int(v.value) if v.is_literal else "?"
                                          for v in values]))
    elif b.signature is None:
        raise b.unsupported("a shape assertion on values known only at run time")
    return []


# ------------------------------------------------------------------------ layouts


def _physical_type(t: ir.TensorType, major: Sequence[int]) -> ir.TensorType:
    return ir.TensorType(tuple(t.shape[d] for d in major), t.element)


def _permuted(binding: Union[Array, Literal, View], major: Sequence[int],
              t: ir.TensorType) -> Union[Literal, View]:
    """``binding`` read in the dimension order ``major`` (a transpose view)."""
    if binding.is_literal:
        return Literal(binding.value, t)
    position = {d: k for k, d in enumerate(major)}
    if isinstance(binding, View):
        axes = tuple(a if a.dim is None else Axis(position[a.dim], a.stride, a.offset)
                     for a in binding.axes)
        return View(binding.source, axes, t)
    return View(binding, tuple(Axis(position[d]) for d in range(len(major))), t)


def physical_operands(b: Builder, call: CustomCall) -> list[Array]:
    """The operands as arrays in their declared layouts (row-major order of the dimensions
    from major to minor)."""
    arrays = []
    for value, layout in zip(call.op.operands, call.operand_layouts):
        major = layout[::-1]
        if list(major) == sorted(major):
            arrays.append(b.array(value))
            continue
        t = _physical_type(value.type, major)
        target = b.emit.add_array(f"{value.name.lstrip('%')}_layout", t)
        b.emit.copy(_permuted(b.readable(value), major, t), target)
        arrays.append(target)
    return arrays


def physical_results(b: Builder, call: CustomCall) -> tuple[list[Array], list[Binding]]:
    """Buffers for the results in their declared layouts, and the results' bindings: each
    buffer, or a transposing view of it where the layout is not row-major."""
    arrays, bindings = [], []
    for value, layout in zip(call.op.results, call.result_layouts):
        major = layout[::-1]
        if list(major) == sorted(major):
            target = b.allocate_result(value)
            bindings.append(target)
        else:
            target = b.emit.add_array(f"{value.name.lstrip('%')}_layout",
                                      _physical_type(value.type, major))
            bindings.append(View(target, tuple(Axis(d) for d in major), value.type))
        arrays.append(target)
    return arrays, bindings


# ------------------------------------------------------------------------ calls


def call_tasklet(b: Builder, label: str, call: str, inputs: Sequence[Array],
                 outputs: Sequence[Array], environments: Sequence[str] = ()) -> None:
    """One tasklet that runs the C++ statement ``call`` with ``{in0}, {in1}, ...`` and
    ``{out0}, ...`` replaced by pointers to the whole arrays (null for empty ones), and
    links the libraries of DaCe ``environments``."""
    names, prelude, connected = {}, [], {"in": {}, "out": {}}
    for prefix, arrays in (("in", inputs), ("out", outputs)):
        for i, array in enumerate(arrays):
            name = names[f"{prefix}{i}"] = f"__{prefix}{i}"
            if array.type.size == 0:
                const = "const " if prefix == "in" else ""
                prelude.append(f"{const}{dtypes.of(array.type).storage.ctype}* {name} = nullptr;")
            else:
                connected[prefix][name] = Whole(array)
    b.emit.map(label, (), "\n".join(prelude + [call.format(**names)]), connected["in"],
               connected["out"], environments=environments)


def link_environment(name: str, libraries: Sequence[str], module: str, doc: str):
    """A DaCe environment (registered under ``module.name``) that links ``libraries`` into
    every program one of whose tasklets names it: native libraries called from tasklets
    get linked as those of library nodes do."""
    fields = {"cmake_minimum_version": None, "cmake_packages": [], "cmake_variables": {},
              "cmake_includes": [], "cmake_libraries": list(libraries),
              "cmake_compile_flags": [], "cmake_link_flags": [], "cmake_files": [],
              "headers": [], "state_fields": [], "init_code": "", "finalize_code": "",
              "dependencies": [], "__module__": module, "__qualname__": name, "__doc__": doc}
    return dace.library.environment(type(name, (), fields))


def installed(headers: Sequence[Sequence[str]], libraries: Sequence[str]) -> bool:
    """Whether every header exists (each given as glob patterns, any of which may match)
    and every library is found by the dynamic linker."""
    return (all(any(glob.glob(pattern) for pattern in patterns) for patterns in headers)
            and all(ctypes.util.find_library(name) for name in libraries))
