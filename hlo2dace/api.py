"""The public stages: ``compile_text``, ``jit`` with ``Lowered`` and ``Compiled``.

The flow of one call of ``jit(f)(x)``: abstract signature -> in-memory cache hit? call :
``jax.jit(f).lower(x)`` -> normalise (generic text) -> disk cache hit? load : parse (IR) ->
build (SDFG) -> DaCe compile -> ``Compiled`` -> call with ``x``'s buffer -> ``jax.Array``s.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any, Callable, Sequence

import numpy as np

from . import ir, optimize, runtime, symbolic
from .errors import ArgumentError, CompilationError, Hlo2DaceError, UnsupportedError
from .frontend.normalize import NormalizedModule, normalize, specialise
from .frontend.parser import parse_module
from .frontend.sink import sink_constants


def _specs(types: Sequence[ir.Type], names: Sequence[str], what: str):
    from .translate import dtypes

    specs = []
    for i, (t, name) in enumerate(zip(types, names)):
        if not isinstance(t, ir.TensorType) or not t.is_static:
            raise UnsupportedError("func.func", f"{what} {i} of type {t}")
        element = dtypes.of(t, "func.func")
        shape = tuple(d if isinstance(d, int) else str(d) for d in t.shape)
        specs.append(runtime.TensorSpec(name, shape, element.numpy.name,
                                        element.storage_numpy.name,
                                        bits=element.narrow_bits is None))
    return specs


def _data(types: Sequence[ir.Type]) -> list[ir.Type]:
    """The types of what a call passes or returns: tokens (ordered effects) are neither."""
    return [t for t in types if not isinstance(t, ir.TokenType)]


@functools.lru_cache(maxsize=1)
def translator_fingerprint() -> str:
    """A digest of the sources that decide what a module compiles to (frontend, IR,
    translators, runtime): a changed translator never reuses old binaries, while editing
    the CLI or the test runner keeps them."""
    import hashlib
    from pathlib import Path

    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    files = sorted([package / "ir.py", package / "runtime.py",
                    *(package / "frontend").glob("*.py"), *(package / "translate").glob("*.*"),
                    *(package.parent / "grammar").glob("*.lark")])
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()


class Lowered:
    """A module on its way to machine code: its StableHLO text, its SDFG, its binary."""

    def __init__(self, normalized: NormalizedModule, name: str = "program",
                 entry: str | None = None, optimize: str | None = None):
        self._normalized = normalized
        self._name = name
        self._entry = entry
        #: the optimisation level (``hlo2dace.optimize``)
        self.level = _level(optimize)
        self._module: ir.Module | None = None
        self._translation = None
        self._symbols: tuple[symbolic.SymbolSource, ...] | None = None

    @property
    def module(self) -> ir.Module:
        if self._module is None:
            self._module = sink_constants(parse_module(self._normalized.text))
        return self._module

    @property
    def main(self) -> ir.Function:
        """The entry function: ``entry``, else ``main`` or the only public function."""
        return self.module.functions[self._entry] if self._entry else self.module.main

    @property
    def key(self) -> str:
        return runtime.cache_key(self._normalized.digest, self._entry or "",
                                 translator_fingerprint(), self.level.name,
                                 self.level.cpu_flags)

    def as_text(self) -> str:
        """The normalised StableHLO module, in MLIR's generic op form."""
        return self._normalized.text

    def _translate(self):
        """The SDFG, argument and result specs, constants and symbols (``symbolic.py``);
        raises ``NeedsSpecialisation`` for a module with dynamic shapes that must be
        compiled per concrete shape."""
        if self._translation is None:
            from .translate import Builder

            module, signature = self.module, None
            try:
                main = self.main
            except LookupError:
                main = None  # the Builder says what is missing
            try:
                if main is not None and symbolic.has_dynamic_types(main):
                    module, signature = symbolic.refine(module, self._entry)
                builder = Builder(module, self._name, self._entry, optimize=self.level,
                                  signature=signature)
                sdfg = builder.build()
            except symbolic.NeedsSpecialisation as exc:
                if signature is not None and not exc.signature.symbols:
                    exc.signature = signature  # raised by a translator, after refine
                raise
            except Hlo2DaceError:
                raise
            except Exception as exc:  # a translator's bug: still an Hlo2DaceError
                raise CompilationError(f"internal error while translating: "
                                       f"{type(exc).__name__}: {exc}") from exc
            main = builder.entry
            arguments = _specs(_data([v.type for v in main.arguments]),
                               builder.argument_names, "argument")
            results = _specs(_data(main.result_types), builder.result_names, "result")
            self._translation = (sdfg, arguments, results, builder.constants, signature)
        return self._translation

    def as_sdfg(self):
        """The ``dace.SDFG`` the module translates to (before compilation)."""
        return self._translate()[0]

    def compile(self) -> Compiled:
        """Build (or load from the cache) the program. A module whose dynamic shapes
        cannot stay symbolic gives a program that compiles once per argument shape."""
        program = runtime.lookup(self.key)
        if program is None:
            try:
                sdfg, arguments, results, constants, signature = self._translate()
            except symbolic.NeedsSpecialisation as reason:
                return Compiled(SpecialisingProgram(self, reason), self)
            symbols = [dataclasses.asdict(s) for s in signature.symbols] if signature else ()
            checks = [dataclasses.asdict(c) for c in signature.checks] if signature else ()
            program = runtime.build(sdfg, self.key, arguments, results, constants,
                                    self.level.cpu_flags, symbols, checks)
        return Compiled(program, self)

    def symbols(self) -> tuple[symbolic.SymbolSource, ...]:
        """The symbols the entry function's dynamic dimensions become (named after JAX's
        dimension variables where the module says them)."""
        if self._symbols is None:
            self._symbols = ()
            if symbolic.has_dynamic_types(self.main):
                try:
                    self._symbols = symbolic.refine(self.module, self._entry)[1].symbols
                except symbolic.NeedsSpecialisation as exc:
                    self._symbols = exc.signature.symbols
        return self._symbols

    def argument_types(self, sizes: dict[str, int]) -> list[ir.Type]:
        """The entry function's argument types with the symbols at ``sizes``."""
        main = self.main
        names = {(s.argument, s.dim): s.name for s in self.symbols()}
        missing = sorted({n for n in names.values() if n not in sizes})
        if missing:
            raise ArgumentError(f"give the size of {', '.join(missing)} (e.g. --shape "
                                f"{missing[0]}=8)")
        types, position = [], 0
        for value in main.arguments:
            t = value.type
            if isinstance(t, ir.TensorType):
                t = ir.TensorType(tuple(sizes[names[(position, d)]] if n is None else n
                                        for d, n in enumerate(t.shape)), t.element)
                position += 1
            types.append(t)
        return types

    def specialised(self, types: Sequence[ir.TensorType]) -> Lowered:
        """This module with its entry function's argument types made ``types``."""
        return Lowered(specialise(self._normalized, [str(t) for t in types]), self._name,
                       self._entry, self.level.name)


class SpecialisingProgram:
    """A module with dynamic shapes that an op needs static: at each new combination of
    argument shapes it is specialised (StableHLO's shape refinement) and compiled, and the
    programs are cached per shape, as XLA compiles exported modules."""

    def __init__(self, lowered: Lowered, reason: symbolic.NeedsSpecialisation):
        self.lowered, self.reason = lowered, reason
        main = lowered.main
        self._all_types = [v.type for v in main.arguments]
        self._types = _data(self._all_types)
        names = {(s.argument, s.dim): s.name for s in reason.signature.symbols}
        self.arguments = tuple(_specs([ir.TensorType(tuple(
            names.get((i, d), "?") if n is None else n for d, n in enumerate(t.shape)),
            t.element) for i, t in enumerate(self._types)],
                                      [f"arg{i}" for i in range(len(self._types))],
                                      "argument"))
        self.argument_dtypes = [np.dtype(spec.dtype) for spec in self.arguments]
        self.results = ()
        #: JAX's shape assertions, checked with its messages before each specialisation
        self.symbols = runtime.Symbols(
            self.arguments, [dataclasses.asdict(s) for s in reason.signature.symbols],
            [dataclasses.asdict(c) for c in reason.signature.checks])
        self._programs: dict[tuple, runtime.Program] = {}
        self._lock = threading.Lock()
        self.folder = None
        self.built = False

    def program_for(self, arrays: Sequence[Any]) -> runtime.Program:
        shapes = tuple(tuple(np.shape(a)) for a in arrays)
        program = self._programs.get(shapes)
        if program is None:
            self.symbols.values(arrays)
            with self._lock:
                program = self._programs.get(shapes)
                if program is None:
                    types = []
                    for i, (t, shape) in enumerate(zip(self._types, shapes)):
                        if len(shape) != t.rank or any(
                                d is not None and d != n for d, n in zip(t.shape, shape)):
                            raise ArgumentError(f"argument {i}: expected shape "
                                                f"{self.arguments[i].shape}, got {shape}")
                        types.append(ir.TensorType(shape, t.element))
                    given = iter(types)
                    types = [t if isinstance(t, ir.TokenType) else next(given)
                             for t in self._all_types]
                    program = self.lowered.specialised(types).compile().program
                    self._programs[shapes] = program
        return program

    def __call__(self, *arrays: Any) -> list[np.ndarray]:
        if len(arrays) != len(self.arguments):
            raise ArgumentError(f"expected {len(self.arguments)} arguments, got {len(arrays)}")
        return self.program_for(arrays)(*arrays)


class Compiled:
    """A compiled module. ``Compiled(*arrays)`` takes NumPy arrays or ``jax.Array``s for
    the ``main`` function's arguments and returns one NumPy array for a single result, a
    tuple for several."""

    def __init__(self, program: runtime.Program, lowered: Lowered | None = None):
        self.program = program
        self.lowered = lowered

    @property
    def folder(self):
        """The cache folder holding the binary and its SDFG (``build/program.sdfgz``)."""
        return self.program.folder

    def call_flat(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        return self.program(*arrays)

    def __call__(self, *arrays: Any):
        results = self.program(*arrays)
        return results[0] if len(results) == 1 else tuple(results)


def lower_text(source: Any, name: str = "program", entry: str | None = None,
               optimize: str | None = None) -> Lowered:
    """``source``: anything the frontend accepts (text, bytes, path, Lowered, Exported);
    ``entry``: the function to compile (default: ``main``, or the only public function);
    ``optimize``: "none", "default" or "aggressive" (see ``hlo2dace.optimize``)."""
    return Lowered(normalize(source), name, entry, optimize)


def compile_text(source: Any, optimize: str | None = None) -> Compiled:
    """Compile a StableHLO module (text in pretty or generic form, MLIR bytecode, a portable
    artifact, ``Exported.serialize()`` bytes, a ``jax.export.Exported`` or a
    ``jax.stages.Lowered``) into a callable, at the optimisation level ``optimize``."""
    return lower_text(source, optimize=optimize).compile()


def _level(name: str | None) -> optimize.Level:
    try:
        return optimize.level(name)
    except ValueError as exc:
        raise ArgumentError(str(exc)) from None


# ---------------------------------------------------------------------------- jit


#: argument types ``JitFunction`` keys its cache on directly (shape, dtype, weak type)
_ARRAY_TYPES = (np.ndarray, *runtime.exported_array_types())
#: marks such a key (a pytree's keys begin with its treedef)
_FLAT = "arrays"


class JitFunction:
    """``hlo2dace.jit(f)``: calls ``f`` through StableHLO and DaCe-compiled code."""

    def __init__(self, fun: Callable, static_argnums: Sequence[int] = (),
                 static_argnames: Sequence[str] = (), optimize: str | None = None,
                 polymorphic_shapes: Any = None, donate_argnums: Sequence[int] = ()):
        import jax

        self._fun = fun
        #: arguments whose buffers a result may take inside jax.jit (``interop.py``)
        self._donate_argnums = (donate_argnums,) if isinstance(donate_argnums, int) \
            else tuple(donate_argnums)
        self._optimize = _level(optimize).name
        #: ``jax.export``'s shape specifications of the positional arguments, or None
        self._polymorphic_shapes = polymorphic_shapes
        self._polymorphic: dict = {}
        self._static_argnums = tuple(sorted({static_argnums} if isinstance(static_argnums, int)
                                            else set(static_argnums)))
        self._static_argnames = (static_argnames,) if isinstance(static_argnames, str) \
            else tuple(static_argnames)
        self._jitted = jax.jit(fun, static_argnums=self._static_argnums,
                               static_argnames=self._static_argnames, keep_unused=True)
        self._cache: dict = {}
        self._lock = threading.Lock()
        functools.update_wrapper(self, fun)

    def _split(self, args, kwargs):
        dynamic_args = [a for i, a in enumerate(args) if i not in self._static_argnums]
        static_args = tuple((i, a) for i, a in enumerate(args) if i in self._static_argnums)
        dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in self._static_argnames}
        static_kwargs = tuple(sorted((k, v) for k, v in kwargs.items()
                                     if k in self._static_argnames))
        return dynamic_args, dynamic_kwargs, (static_args, static_kwargs)

    def _signature(self, args, kwargs):
        import jax

        if not kwargs and not self._static_argnums and all(
                type(a) in _ARRAY_TYPES for a in args):  # arrays only: no pytree to flatten
            return (_FLAT, tuple((a.shape, a.dtype, getattr(a, "weak_type", False))
                                 for a in args), bool(jax.config.jax_enable_x64)), args
        if kwargs or self._static_argnums:
            dynamic_args, dynamic_kwargs, statics = self._split(args, kwargs)
        else:  # the common case, without the copies
            dynamic_args, dynamic_kwargs, statics = list(args), {}, ((), ())
        leaves, tree = jax.tree_util.tree_flatten((dynamic_args, dynamic_kwargs))
        abstract = tuple(_abstract(leaf) for leaf in leaves)
        return (tree, abstract, statics, bool(jax.config.jax_enable_x64)), leaves

    def lower(self, *args, **kwargs) -> JitLowered:
        if self._polymorphic_shapes is not None:
            return self._lower_polymorphic(args, kwargs)
        from . import interop

        with interop.inlining():  # hlo2dace.jit functions that f calls join its program
            traced = self._jitted.trace(*args, **kwargs)
            lowered = traced.lower()
        name = getattr(self._fun, "__name__", "program")
        return JitLowered(normalize(lowered), name,
                          _Results(lowered.out_tree, traced.jaxpr.out_avals), self._optimize)

    def __call__(self, *args, **kwargs):

        key, leaves = self._signature(args, kwargs)
        if key[0] is not _FLAT:
            from . import interop

            if interop.traced(leaves):  # inside a JAX transformation (interop.py)
                return interop.traced_call(self, args, kwargs)
        entry = self._cache.get(key)
        if entry is None:
            with self._lock:
                entry = self._cache.get(key)
                if entry is None:
                    entry = self._cache[key] = self._compile(args, kwargs)
        compiled, results = entry
        program = compiled.program
        arrays = [leaf if type(leaf) in _ARRAY_TYPES and leaf.dtype == dtype
                  else _as_array(leaf, spec)
                  for leaf, spec, dtype in zip(leaves, program.arguments,
                                               program.argument_dtypes)]
        return results.wrap(program(*arrays))


    def _compile(self, args, kwargs):
        """The compiled program and result builder for ``args``: with polymorphic shapes,
        the one that serves every size of the marked dimensions."""
        if self._polymorphic_shapes is None:
            lowered = self.lower(*args, **kwargs)
            return lowered.compile(), lowered.results
        specs = self._symbolic_specs(args, kwargs)
        key = tuple((str(spec.shape), str(spec.dtype)) for spec in specs)
        entry = self._polymorphic.get(key)
        if entry is None:
            lowered = self._lower_polymorphic(args, kwargs, specs)
            entry = self._polymorphic[key] = (lowered.compile(), lowered.results)
        return entry

    def _symbolic_specs(self, args, kwargs):
        import jax

        if kwargs or self._static_argnums or self._static_argnames:
            raise ArgumentError("polymorphic_shapes takes positional array arguments only "
                                "(no keyword or static arguments)")
        try:
            return jax.export.symbolic_args_specs(args, self._polymorphic_shapes)
        except (ValueError, TypeError) as exc:
            raise ArgumentError(f"polymorphic_shapes {self._polymorphic_shapes!r}: {exc}") \
                from None

    def _lower_polymorphic(self, args, kwargs, specs=None) -> JitLowered:
        """Lowered through ``jax.export`` with symbolic dimensions: one module for every
        size, whose symbols the compiled program reads from its arguments."""
        import jax

        specs = specs if specs is not None else self._symbolic_specs(args, kwargs)
        exported = jax.export.export(self._jitted, platforms=["cpu"])(*specs)
        name = getattr(self._fun, "__name__", "program")
        return JitLowered(normalize(exported), name,
                          _Results(exported.out_tree, exported.out_avals, polymorphic=True),
                          self._optimize)


class JitLowered(Lowered):
    """A lowering by ``hlo2dace.jit``: also knows how to rebuild the Python results."""

    def __init__(self, normalized: NormalizedModule, name: str, results: _Results,
                 optimize: str | None = None):
        super().__init__(normalized, name, optimize=optimize)
        self.results = results


class _Results:
    """Turns the compiled code's NumPy results into what ``jax.jit`` returns: ``jax.Array``s
    with the avals (weak types included) of the lowering, typed PRNG keys, in its pytree.
    Each array is put on the CPU device by jaxlib's ``batched_device_put`` with the aval
    and sharding made here once: ``jax.device_put`` costs ten times as much per call."""

    def __init__(self, tree, avals, polymorphic: bool = False):
        import jax
        from jax._src.lib import xla_client
        from jax.sharding import SingleDeviceSharding

        self.tree = tree
        self.polymorphic = polymorphic
        self.device = jax.devices("cpu")[0]
        self.sharding = SingleDeviceSharding(self.device)
        #: (key type, None) for a typed PRNG key, (None, None) for a dtype jaxlib's CPU
        #: buffers cannot hold (f6E2M3FN, f6E3M2FN: returned as NumPy arrays), else
        #: (None, aval)
        self.leaves = [(aval.dtype, None) if _is_key(aval.dtype)
                       else (None, aval) if _device_holds(aval.dtype) else (None, None)
                       for aval in avals]
        self.concrete: dict[tuple[int, tuple], Any] = {}  # (leaf, shape) -> its aval
        # looked up once: the imports and attribute lookups are on every call's path
        self._put = xla_client.batched_device_put
        self._unflatten = jax.tree_util.tree_unflatten
        self._wrap_key = lambda array, key_type: jax.random.wrap_key_data(
            jax.device_put(array), impl=key_type._impl)

    def wrap(self, arrays: Sequence[np.ndarray]):
        if self.polymorphic:  # the avals' symbolic sizes made concrete, once per shape
            return self._unflatten(self.tree, [
                self._put(self._concrete(k, aval, array.shape), self.sharding, [array],
                          [self.device], False, False) if aval is not None
                else array if key_type is None else self._wrap_key(array, key_type)
                for k, (array, (key_type, aval)) in enumerate(zip(arrays, self.leaves))])
        results = [self._put(aval, self.sharding, [array], [self.device], False, False)
                   if aval is not None else array if key_type is None
                   else self._wrap_key(array, key_type)
                   for array, (key_type, aval) in zip(arrays, self.leaves)]
        return self._unflatten(self.tree, results)


    def _concrete(self, k: int, aval, shape: tuple):
        concrete = self.concrete.get((k, shape))
        if concrete is None:
            concrete = self.concrete[(k, shape)] = aval.update(shape=shape)
        return concrete


@functools.cache
def _device_holds(dtype) -> bool:
    """Whether a jax.Array on the CPU can hold ``dtype`` (XLA has no f6 types)."""
    import jax

    try:
        jax.device_put(np.zeros((), dtype), jax.devices("cpu")[0])
    except Exception:  # JaxRuntimeError: Unknown NumPy dtype
        return False
    return True


def _abstract(leaf: Any):
    if isinstance(leaf, (bool, int, float, complex)):
        return (type(leaf),)
    shape = getattr(leaf, "shape", None)
    dtype = getattr(leaf, "dtype", None)
    if shape is None or dtype is None:
        leaf = np.asarray(leaf)
        shape, dtype = leaf.shape, leaf.dtype
    name = str(dtype) if _is_key(dtype) else np.dtype(dtype).str
    return (tuple(shape), name, bool(getattr(leaf, "weak_type", False)))


def _is_key(dtype: Any) -> bool:
    """Typed PRNG keys (``jax.random.key``): StableHLO sees their uint32 key data."""
    if dtype is None or isinstance(dtype, np.dtype):
        return False
    import jax

    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _as_array(leaf: Any, spec: runtime.TensorSpec) -> np.ndarray:
    """A leaf as the NumPy array the compiled code takes: Python scalars, weakly typed
    values and 64-bit arrays with x64 off take the dtype JAX gave them in the lowering."""
    import jax

    if isinstance(leaf, (bool, int, float, complex)):
        return np.asarray(leaf, dtype=np.dtype(spec.dtype))
    if _is_key(getattr(leaf, "dtype", None)):
        leaf = jax.random.key_data(leaf)
    array = np.asarray(leaf)
    expected = np.dtype(spec.dtype)
    if array.dtype != expected and (getattr(leaf, "weak_type", False)
                                    or jax.dtypes.canonicalize_dtype(array.dtype) == expected):
        array = array.astype(expected)
    return array


def jit(fun: Callable | None = None, *, static_argnums: Sequence[int] = (),
        static_argnames: Sequence[str] = (), optimize: str | None = None,
        polymorphic_shapes: Any = None, donate_argnums: Sequence[int] = ()):
    """A drop-in for ``jax.jit`` whose compiled code is generated by DaCe. ``optimize``:
    "none", "default" or "aggressive" (see ``hlo2dace.optimize``; default:
    ``$HLO2DACE_OPTIMIZE``, else "default"). ``polymorphic_shapes``: the specifications
    ``jax.export.symbolic_args_specs`` takes (``"(b, 128)"`` per argument): one compiled
    program serves every size of the dimensions they name. ``donate_argnums``: inside
    ``jax.jit``, results may be written into these arguments' buffers where the program
    provably can (``interop.py``); a direct call leaves its arguments as they are."""
    if fun is None:
        return functools.partial(jit, static_argnums=static_argnums,
                                 static_argnames=static_argnames, optimize=optimize,
                                 polymorphic_shapes=polymorphic_shapes,
                                 donate_argnums=donate_argnums)
    return JitFunction(fun, static_argnums, static_argnames, optimize, polymorphic_shapes,
                       donate_argnums)


__all__ = ["ArgumentError", "Compiled", "JitFunction", "Lowered", "compile_text", "jit",
           "lower_text"]
