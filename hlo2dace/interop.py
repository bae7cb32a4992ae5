"""``hlo2dace.jit`` functions inside JAX's transformations: ``jax.jit``, ``grad``, ``vjp``,
``jvp``, ``jacfwd``, ``jacrev``, ``vmap`` and their compositions, computed by DaCe code.

Under a trace a call binds one primitive, ``hlo2dace_call``, that stands for "run the
compiled program of this function on these arrays". Each transformation of it is another
function that hlo2dace lowers and compiles in turn:

- JVP (forward and reverse mode): the primal part of ``jax.linearize`` (outputs and
  residuals) and its linear part (residuals, tangents -> output tangents), two programs;
- transposition (reverse mode): ``jax.linear_transpose`` of the linear part, so the
  backward program takes the forward program's residuals instead of recomputing them;
- batching: ``jax.vmap`` of the function, one program for the whole batch;
- lowering inside ``jax.jit``: an XLA FFI call of ``h2d_ffi.cc``'s handler, which calls
  the program's entry point on XLA's own buffers (no copies; a result takes a donated
  argument's buffer where the program provably may); without a C++ compiler, a
  ``jax.pure_callback`` that calls it on host arrays (one copy of each result);
- evaluation outside any ``jit`` (eager ``grad``, ``vmap``): the same FFI call, compiled
  by XLA for the primitive alone; without the handler, the program called directly.

An ``hlo2dace.jit`` function called on jax.Arrays again and again, outside any trace, is
called as ``jax.jit`` of itself (``xla_route``): JAX's C++ dispatch checks the arguments and
XLA makes all the results, where making each NumPy result a ``jax.Array`` costs a jaxlib
call, and the program runs as the same FFI call.

Programs, traces and transformed functions are made once per function and signature.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jaxlib
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from . import api, arguments, folders, runtime
from .arguments import inlining
from .errors import UnsupportedError
from .frontend.normalize import normalize

#: the XLA FFI target name of ``h2d_ffi.cc``'s handler
TARGET = "hlo2dace_call"
FFI_SOURCE = Path(__file__).with_name("h2d_ffi.cc")
#: the most C arguments the handler passes (``kMaxPointers``); more go through a callback
MAX_POINTERS = 256
#: an attribute of every FFI call: executables holding this process's addresses are never
#: found by another process in XLA's persistent compilation cache
_SESSION = secrets.randbits(62)
_Tracer = jax.core.Tracer


# ---------------------------------------------------------------------- counting calls


_count_lock = threading.Lock()
_python_calls = 0


def _counted() -> None:
    global _python_calls
    with _count_lock:
        _python_calls += 1


def calls() -> int:
    """How many times this process ran a compiled program for a traced call (through XLA's
    FFI, a callback, or eager evaluation of a transformation) or through ``xla_route``:
    a test that expects DaCe code under a trace sees this grow, where a silent fallback to
    XLA would not."""
    library = ffi_library()
    return _python_calls + (library.h2d_ffi_calls() if library is not None else 0)


def last_ffi_pointers() -> list[int]:
    """The data addresses the FFI handler's latest call passed to its program (in the
    order of the program's C arguments, constants included): tests compare them with the
    addresses of XLA's buffers to show they were used in place."""
    library = ffi_library()
    if library is None:
        return []
    out = (ctypes.c_int64 * MAX_POINTERS)()
    count = library.h2d_ffi_last_pointers(out, len(out))
    return list(out[:count])


# ---------------------------------------------------------------------- the FFI handler


@functools.lru_cache(maxsize=1)
def ffi_library() -> ctypes.CDLL | None:
    """``h2d_ffi.cc`` built (once per machine and jaxlib, beside ``callpath.py``'s
    extension) and registered with XLA as ``TARGET``; None without a C++ compiler, and
    calls inside ``jax.jit`` go through ``jax.pure_callback``."""

    include = jax.ffi.include_dir()
    digest = hashlib.sha256(FFI_SOURCE.read_bytes() + include.encode()
                            + jaxlib.__version__.encode()).hexdigest()[:16]
    root = folders.native_dir()
    library = root / f"h2d_ffi-{digest}" / "h2d_ffi.so"
    try:
        with folders.file_lock(root / f"h2d_ffi-{digest}.lock"):
            if not library.is_file():
                _build(library, include)
        handle = ctypes.CDLL(str(library))
        handle.h2d_ffi_calls.restype = ctypes.c_int64
        handle.h2d_ffi_last_pointers.restype = ctypes.c_int64
        handle.h2d_ffi_lock.restype = ctypes.c_void_p
        handle.h2d_ffi_lock.argtypes = [ctypes.c_int64]
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(handle.H2dCall), platform="cpu")
        return handle
    except (OSError, subprocess.CalledProcessError):
        return None


def _build(library: Path, include: str) -> None:
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        raise OSError("no C++ compiler")
    library.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=library.parent) as staging:
        built = Path(staging) / library.name
        subprocess.run([compiler, "-std=c++17", "-O2", "-shared", "-fPIC", "-w",
                        f"-I{include}", str(FFI_SOURCE), "-o", str(built)],
                       check=True, capture_output=True)
        os.replace(built, library)


# ---------------------------------------------------------------------- functions


def _signature(avals: Sequence[Any]) -> tuple:
    return (tuple((tuple(a.shape), np.dtype(a.dtype).str, bool(a.weak_type)) for a in avals),
            bool(jax.config.jax_enable_x64))


def _struct(aval: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def _interleave(mask: Sequence[bool], when_true: Sequence[Any], when_false: Sequence[Any]):
    """``mask``'s positions filled from ``when_true`` and ``when_false`` in order."""
    true, false = iter(when_true), iter(when_false)
    return [next(true) if m else next(false) for m in mask]


class Function:
    """A function of arrays that the primitive runs compiled; its outputs are the leaves
    of what ``fun`` returns. Compared by identity: derived functions are made once."""

    def __init__(self, fun: Callable, name: str, level: str, donated: Sequence[int] = ()):
        self.fun = fun
        self.name = name
        self.level = level
        #: the arguments whose buffers a result may take (``donate_argnums``' leaves)
        self.donated = tuple(donated)
        self._jitted = jax.jit(fun, keep_unused=True)
        self._lock = threading.RLock()
        self._traces: dict[tuple, Any] = {}
        self._programs: dict[tuple, tuple[runtime.Program, arguments.Results]] = {}
        self._derived: dict[tuple, Function] = {}
        self._in_place: dict[Path, dict[int, int]] = {}
        #: outside any jit: the primitive alone as an XLA executable (an FFI call)
        self.dispatch = jax.jit(functools.partial(call_p.bind, fn=self))

    def __repr__(self) -> str:
        return f"hlo2dace.Function({self.name})"

    def leaves(self, *arrays: Any) -> list[Any]:
        return jax.tree_util.tree_leaves(self.fun(*arrays))

    def trace(self, avals: Sequence[Any]):
        key = _signature(avals)
        traced = self._traces.get(key)
        if traced is None:
            with self._lock, inlining():
                traced = self._traces.get(key)
                if traced is None:
                    traced = self._jitted.trace(*map(_struct, avals))
                    # values of an enclosing trace it closes over (JAX hoists them)
                    if any(isinstance(c, _Tracer) for c in
                           (*traced.jaxpr.consts, *getattr(traced, "_consts", ()))):
                        raise _closure_error(self.name)
                    self._traces[key] = traced
        return traced

    def out_avals(self, avals: Sequence[Any]) -> list[Any]:
        return list(self.trace(avals).jaxpr.out_avals)

    def program(self, avals: Sequence[Any]) -> tuple[runtime.Program, arguments.Results]:
        """The compiled program for arguments of ``avals``, and its results' wrapper."""
        key = _signature(avals)
        entry = self._programs.get(key)
        if entry is None:
            with self._lock:
                entry = self._programs.get(key)
                if entry is None:
                    traced = self.trace(avals)
                    with inlining():
                        lowered = traced.lower()
                    program = api.Lowered(normalize(lowered), self.name,
                                          optimize=self.level).compile().program
                    if len(program.arguments) != len(avals):
                        raise _closure_error(self.name)
                    out = traced.jaxpr.out_avals
                    tree = jax.tree_util.tree_structure([0] * len(out))
                    entry = self._programs[key] = (program, arguments.Results(tree, out))
        return entry

    def adopt(self, avals: Sequence[Any], program: runtime.Program) -> bool:
        """Run ``program``, compiled by the ``hlo2dace.jit`` function for arguments of
        ``avals``, for them (rather than compiling it again); False where it takes other
        arguments than the leaves (a token)."""
        if len(program.arguments) != len(avals):
            return False
        key = _signature(avals)
        with self._lock:
            if key not in self._programs:
                out = self.trace(avals).jaxpr.out_avals
                self._programs[key] = (program, arguments.Results(
                    jax.tree_util.tree_structure([0] * len(out)), out))
        return True

    def in_place(self, program: runtime.Program) -> dict[int, int]:
        """Donated argument -> the result ``program`` can write into its buffer."""
        pairs = self._in_place.get(program.folder)
        if pairs is None:
            pairs = self._in_place[program.folder] = _in_place_pairs(program, self.donated) \
                if self.donated else {}
        return pairs

    def derived(self, key: tuple, make: Callable[[], Any]) -> Any:
        """What ``make`` makes from this function (a transformed function), made once."""
        function = self._derived.get(key)
        if function is None:
            with self._lock:
                function = self._derived.get(key)
                if function is None:
                    function = self._derived[key] = make()
        return function


def _closure_error(name: str) -> UnsupportedError:
    return UnsupportedError("hlo2dace.jit", f"{name} closes over a value traced by an "
                            "enclosing transformation; pass it as an argument")


#: per hlo2dace.jit function: its Function per argument tree and static arguments
_functions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _function_of(jitted: api.JitFunction, tree, statics, donated) -> Function:
    table = _functions.setdefault(jitted, {})
    function = table.get((tree, statics, donated))
    if function is None:
        (static_args, static_kwargs) = statics
        fun = jitted.fun

        def traced_function(*leaves):  # its name is in the module: no user's program's
            dynamic_args, dynamic_kwargs = jax.tree_util.tree_unflatten(tree, leaves)
            args = list(dynamic_args)
            for i, value in static_args:
                args.insert(i, value)
            return fun(*args, **dynamic_kwargs, **dict(static_kwargs))

        name = getattr(fun, "__name__", "program")
        function = Function(traced_function, name, jitted.optimize, donated)
        table[(tree, statics, donated)] = function
    return function


def _donated_leaves(jitted: api.JitFunction, args: Sequence[Any],
                    dynamic_kwargs: dict[str, Any]) -> tuple[int, ...]:
    """The positions of the donated arguments' leaves among the dynamic arguments'."""
    if not jitted.donate_argnums:
        return ()
    marks = [jax.tree_util.tree_map(lambda _, d=i in jitted.donate_argnums: d, arg)
             for i, arg in enumerate(args) if i not in jitted.static_argnums]
    flags = jax.tree_util.tree_leaves(
        (marks, jax.tree_util.tree_map(lambda _: False, dynamic_kwargs)))
    return tuple(k for k, flag in enumerate(flags) if flag)


def traced_call(jitted: api.JitFunction, args: Sequence[Any], kwargs: dict[str, Any]):
    """``jitted(*args, **kwargs)`` where some argument is a JAX tracer: one primitive."""
    if arguments.inlined():
        return jitted.fun(*args, **kwargs)
    dynamic_args, dynamic_kwargs, statics = jitted.split_static(args, kwargs)
    leaves, tree = jax.tree_util.tree_flatten((dynamic_args, dynamic_kwargs))
    if any(arguments.is_key(getattr(leaf, "dtype", None)) for leaf in leaves):
        raise UnsupportedError("hlo2dace.jit", "typed PRNG keys as arguments under a JAX "
                               "transformation; pass jax.random.key_data(key)")
    leaves = [leaf if isinstance(leaf, (jax.Array, _Tracer)) else jax.numpy.asarray(leaf)
              for leaf in leaves]
    donated = _donated_leaves(jitted, args, dynamic_kwargs)
    function = _function_of(jitted, tree, statics, donated)
    outs = call_p.bind(*leaves, fn=function)
    traced = function.trace([jax.typeof(leaf) for leaf in leaves])
    return jax.tree_util.tree_unflatten(traced.out_tree, outs)


# ---------------------------------------------------------------------- the primitive


call_p = Primitive("hlo2dace_call")
call_p.multiple_results = True


def _abstract_eval(*avals, fn: Function):
    out_avals = fn.out_avals(avals)
    if any(arguments.is_key(aval.dtype) for aval in out_avals):
        raise UnsupportedError("hlo2dace.jit", "typed PRNG keys as results under a JAX "
                               "transformation; return jax.random.key_data(key)")
    return out_avals


def _impl(*arrays, fn: Function):
    """Outside any jit (eager ``grad``, ``vmap``): XLA's FFI call as inside one, so that
    every call of a program goes through one lock and XLA's buffers; without the handler,
    the program called as ``hlo2dace.jit`` calls it."""
    if ffi_library() is not None:
        return fn.dispatch(*arrays)
    program, results = fn.program([jax.typeof(a) for a in arrays])
    arrays = [a if type(a) in arguments.ARRAY_TYPES and a.dtype == dtype
              else arguments.as_array(a, spec)
              for a, spec, dtype in zip(arrays, program.arguments, program.argument_dtypes)]
    outputs = program(*arrays)
    _counted()
    return results.wrap(outputs)


def _ffi_ready(program: runtime.Program) -> bool:
    """True if XLA's buffers can be handed to ``program`` as they are: every array is
    stored as XLA stores it (2- and 4-bit integers are widened to a byte)."""
    return type(program) is runtime.Program and all(
        spec.bits or spec.dtype == spec.storage
        for spec in program.arguments + program.results)


def _lowering(ctx, *operands, fn: Function):
    """Inside ``jax.jit``: the FFI call (or a callback) of the compiled program. While
    hlo2dace itself lowers, the function's own StableHLO, so DaCe compiles one program;
    for ``jax.export`` too, as addresses mean nothing in another process."""
    if arguments.inlined() or ctx.module_context.lowering_parameters.for_export:
        return mlir.lower_fun(fn.leaves, multiple_results=True)(ctx, *operands)
    program, _ = fn.program(ctx.avals_in)
    entry = program.c_entry() if ffi_library() is not None and _ffi_ready(program) else None
    ctx.module_context.add_keepalive(program)  # its addresses live in the executable
    if entry is None or len(entry[2]) > MAX_POINTERS:
        return mlir.lower_fun(functools.partial(_callback, program=program),
                              multiple_results=True)(ctx, *operands)
    address, handle, slots, constants = entry
    # a direct call of the same program (an hlo2dace.jit function whose calls go through
    # XLA also runs its program directly on other arguments) takes the handler's lock
    program.share_lock(ffi_library().h2d_ffi_lock(handle))
    rule = jax.ffi.ffi_lowering(TARGET, operand_output_aliases=fn.in_place(program) or None)
    return rule(ctx, *operands, session=np.int64(_SESSION), entry=np.int64(address),
                handle=np.int64(handle), slots=np.asarray(slots, np.int64),
                constants=np.asarray(constants, np.int64))


def xla_route(jitted: api.JitFunction, args: tuple, kwargs: dict,
              compiled: api.Compiled) -> Callable | None:
    """``jax.jit`` of ``jitted``, for its calls outside any trace: JAX's C++ dispatch checks
    the arguments and XLA makes the results, at jax.jit's cost per call, and the trace of
    a signature is one primitive whose lowering calls the program through the FFI
    handler, ``compiled``'s program for ``args`` (adopted, not compiled again). None where
    its calls cannot go through XLA: without the handler, where XLA stores an array
    otherwise (``_ffi_ready``), for a program whose thread count is tuned per call (a
    direct call's), for results that are not plain arrays (``Results.plain_avals``: keys,
    symbolic sizes) and where jax.Arrays may live on another device than the one CPU
    device."""
    program = compiled.program
    if compiled.lowered.results.plain_avals is None or program.threads is not None \
            or not _ffi_ready(program) or jax.default_backend() != "cpu" \
            or jax.device_count() != 1 or ffi_library() is None:
        return None
    entry = program.c_entry()
    if entry is None or len(entry[2]) > MAX_POINTERS \
            or not program.share_lock(ffi_library().h2d_ffi_lock(entry[1])):
        return None  # (direct calls through ctypes cannot take the handler's lock)
    dynamic_args, dynamic_kwargs, statics = jitted.split_static(args, kwargs)
    leaves, tree = jax.tree_util.tree_flatten((dynamic_args, dynamic_kwargs))
    function = _function_of(jitted, tree, statics,
                            _donated_leaves(jitted, args, dynamic_kwargs))
    if not function.adopt([jax.typeof(leaf) for leaf in leaves], program):
        return None
    return jax.jit(lambda *args, **kwargs: traced_call(jitted, args, kwargs),
                   static_argnums=jitted.static_argnums,
                   static_argnames=jitted.static_argnames,
                   donate_argnums=jitted.donate_argnums)


def _in_place_pairs(program: runtime.Program, donated: Sequence[int]) -> dict[int, int]:
    """Donated argument -> a result of its shape and type that the program writes where it
    reads the argument (``Program.in_place``), as XLA pairs donations: the first such
    result not taken yet."""
    pairs: dict[int, int] = {}
    for i in donated:
        taken = set(pairs.values())
        j = next((j for a, j in program.in_place if a == i and j not in taken), None)
        if j is not None:
            pairs[i] = j
    return pairs


def _callback(*arrays, program: runtime.Program):
    shapes = [jax.ShapeDtypeStruct(spec.shape, spec.dtype) for spec in program.results]

    def run(*host):
        outputs = program(*host)
        _counted()
        return outputs

    return jax.pure_callback(run, shapes, *arrays)


def _jvp(primals, tangents, *, fn: Function):
    """Two programs: ``jax.linearize``'s primal part gives the outputs and residuals, its
    linear part maps residuals and the nonzero tangents to the output tangents."""
    nonzero = tuple(type(t) is not ad.Zero and t.dtype != jax.dtypes.float0 for t in tangents)
    avals = [jax.typeof(p) for p in primals]
    out_avals = fn.out_avals(avals)
    if not any(nonzero):
        return call_p.bind(*primals, fn=fn), [ad.Zero(a.to_tangent_aval()) for a in out_avals]
    forward, linear = _linearized(fn, avals, nonzero)
    results = call_p.bind(*primals, fn=forward)
    outs, residuals = results[:len(out_avals)], results[len(out_avals):]
    differentiable = [_differentiable(a) for a in out_avals]
    given = [t for t, nz in zip(tangents, nonzero) if nz]
    out_tangents = call_p.bind(*residuals, *given, fn=linear) if any(differentiable) else []
    return outs, _interleave(differentiable, out_tangents,
                             [ad.Zero(a.to_tangent_aval()) for a, d in
                              zip(out_avals, differentiable) if not d])


def _differentiable(aval: Any) -> bool:
    return jax.numpy.issubdtype(aval.dtype, jax.numpy.inexact)


def _linearized(fn: Function, avals: Sequence[Any], nonzero: tuple[bool, ...]):
    """The functions of ``jax.linearize(fn)`` in the ``nonzero`` arguments at ``avals``:
    primals -> outputs + residuals, and residuals + tangents -> output tangents. The
    residuals' pytree (the linear jaxpr) is known once the first one is traced."""
    def make_pair():
        state = {}

        def forward(*primals):
            def at(*varying):
                return fn.leaves(*_interleave(nonzero, varying, primals_fixed))

            primals_fixed = [p for p, nz in zip(primals, nonzero) if not nz]
            outs, jvp = jax.linearize(at, *[p for p, nz in zip(primals, nonzero) if nz])
            residuals, state["tree"] = jax.tree_util.tree_flatten(jvp)
            state["count"] = len(residuals)
            return [*outs, *residuals]

        def linear(*arrays):
            count = state["count"]
            jvp = jax.tree_util.tree_unflatten(state["tree"], arrays[:count])
            tangents = jvp(*arrays[count:])
            return [t for t in tangents if _differentiable(t)]

        primal = Function(forward, f"{fn.name}_fwd", fn.level)
        primal.trace(avals)  # fills state
        return primal, Function(linear, f"{fn.name}_lin", fn.level)

    return fn.derived(("linearize", _signature(avals), nonzero), make_pair)


def _transpose(cotangents, *args, fn: Function):
    """Cotangents of the arguments that are linear (undefined), from the program of
    ``jax.linear_transpose`` of ``fn`` in them, the others fixed."""
    linear = tuple(ad.is_undefined_primal(a) for a in args)
    linear_avals = [a.aval for a in args if ad.is_undefined_primal(a)]
    fixed = [a for a in args if not ad.is_undefined_primal(a)]
    nonzero = tuple(type(c) is not ad.Zero for c in cotangents)
    if not any(nonzero):
        return [ad.Zero(a.aval) if ad.is_undefined_primal(a) else None for a in args]
    zero_avals = [c.aval for c in cotangents if type(c) is ad.Zero]

    def make():
        def transposed(*arrays):
            held, given = arrays[:len(fixed)], arrays[len(fixed):]
            zeros = [jax.numpy.zeros(a.shape, a.dtype) for a in zero_avals]
            forward = jax.linear_transpose(
                lambda *varying: fn.leaves(*_interleave(linear, varying, held)),
                *map(_struct, linear_avals))
            return list(forward(_interleave(nonzero, given, zeros)))

        return Function(transposed, f"{fn.name}_transpose", fn.level)

    key = ("transpose", linear, _signature(linear_avals), nonzero, _signature(zero_avals))
    outs = call_p.bind(*fixed, *[c for c in cotangents if type(c) is not ad.Zero],
                       fn=fn.derived(key, make))
    return _interleave(linear, outs, [None] * len(fixed))


def _batch(args, dims, *, fn: Function):
    """One program for the batch: ``jax.vmap`` of ``fn``, batched along axis 0."""
    dims = tuple(dims)

    def make():
        return Function(jax.vmap(fn.leaves, in_axes=dims), f"{fn.name}_vmap", fn.level)

    outs = call_p.bind(*args, fn=fn.derived(("vmap", dims), make))
    return outs, [0] * len(outs)


call_p.def_impl(_impl)
call_p.def_abstract_eval(_abstract_eval)
ad.primitive_jvps[call_p] = _jvp
ad.primitive_transposes[call_p] = _transpose
batching.primitive_batchers[call_p] = _batch
mlir.register_lowering(call_p, _lowering, platform="cpu")
api.handle_traced_calls(traced_call)
api.handle_xla_routes(xla_route)
