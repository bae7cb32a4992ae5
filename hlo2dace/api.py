"""The public stages: ``compile_text``, ``jit`` with ``Lowered`` and ``Compiled``.

The flow of one call of ``jit(f)(x)``: abstract signature -> in-memory cache hit? call :
``jax.jit(f).lower(x)`` -> normalise (generic text) -> disk cache hit? load : parse (IR) ->
build (SDFG) -> DaCe compile -> ``Compiled`` -> call with ``x``'s buffer -> ``jax.Array``s.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import threading
import time
from typing import Any, Callable, Sequence

import numpy as np

from . import costs, ir, mpi, runtime, sharded, symbolic, user_sdfg
from .arguments import (
    ARRAY_TYPES,
    JAX_ARRAY_TYPES,
    LEAF_TYPES,
    PYTHON_SCALARS,
    Results,
    as_array,
    committed,
    compiling_calls,
    data_types,
    inlining,
    is_key,
    leaf_key,
    tensor_specs,
    traced,
)
from .errors import ArgumentError, CompilationError, Hlo2DaceError
from .frontend.inline import inline_calls
from .frontend.normalize import NormalizedModule, normalize, specialise
from .frontend.parser import GRAMMAR_PATH, parse_module
from .frontend.sink import sink_constants
from .frontend.xla_rewrites import xla_rewrites
from .machine import Machine
from .pipeline import Options
from .printer import module_text
from .progress import collector_paused, stage
from .sdfg_passes import liveness


@functools.lru_cache(maxsize=1)
def translator_fingerprint() -> str:
    """A digest of the sources that decide what a module compiles to (frontend, IR,
    translators, runtime): a changed translator never reuses old binaries, while editing
    the CLI or the test runner keeps them."""
    import hashlib
    from pathlib import Path

    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    files = sorted([package / "ir.py", *(package / "runtime").glob("*.py"),
                    package / "sdfg_build.py",
                    package / "cpp_split.py", package / "sdfg_repeats.py", GRAMMAR_PATH,
                    package / "pipeline.py", package / "machine.py", package / "prelude.py",
                    *(package / "include" / "h2d").glob("*.h"),
                    *(package / "frontend").glob("*.py"), *(package / "translate").glob("*.*"),
                    *(package / "plan").glob("*.py"), *(package / "sdfg_passes").glob("*.py")])
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()


class Lowered:
    """A module on its way to machine code: its StableHLO text, its SDFG, its binary."""

    def __init__(self, normalized: NormalizedModule, name: str = "program",
                 entry: str | None = None, optimize: Options | str | None = None,
                 partitioned: sharded.Partitioned | None = None):
        self._normalized = normalized
        self._name = name
        self._entry = entry
        #: for a program over several devices: how its arrays are cut (``sharded.py``)
        self.partitioned = partitioned
        #: the optimisation level, the passes switched off, the machine (``pipeline.py``)
        self.options = Options.of(optimize).resolved()
        #: the passes this module's compilation runs
        self.pipeline = self.options.pipeline()
        self.level = self.pipeline.level
        self._module: ir.Module | None = None
        self._planned: tuple[ir.Module, symbolic.Signature | None] | None = None
        self._translation = None
        self._symbols: tuple[symbolic.SymbolSource, ...] | None = None
        #: an SDFG given in place of the translated one (``with_sdfg``)
        self._given_sdfg = None

    @property
    def module(self) -> ir.Module:
        if self._module is None:
            with stage("parse"):
                self._module = xla_rewrites(
                    sink_constants(inline_calls(parse_module(self._normalized.text))))
        return self._module

    @property
    def main(self) -> ir.Function:
        """The entry function: ``entry``, else ``main`` or the only public function."""
        return self.module.functions[self._entry] if self._entry else self.module.main

    @property
    def key(self) -> str:
        """The binary's cache key: the module and the options, and the content of an SDFG
        that a user's transformation made or a user gave (``user_sdfg.py``), which must
        then be translated to be known."""
        user = (user_sdfg.content_key(self._translate()[0]),) if self._user_sdfg else ()
        return runtime.cache_key(self._normalized.digest, self._entry or "",
                                 translator_fingerprint(), self.level.name,
                                 self.level.cpu_flags, self.pipeline.key,
                                 self.options.machine.key(), *user)

    @property
    def _user_sdfg(self) -> bool:
        return self._given_sdfg is not None or self.options.transform is not None

    def with_sdfg(self, sdfg: Any) -> Lowered:
        """This module compiled from ``sdfg`` (this one's SDFG transformed, or one loaded
        from a file) instead of its translation: ``sdfg`` must read and write the arrays
        the translation does (``user_sdfg.check_signature``). A copy is kept: compiling
        changes what it compiles."""
        import dace

        if not isinstance(sdfg, dace.SDFG):
            raise ArgumentError(f"sdfg must be a dace.SDFG, not a {type(sdfg).__name__}")
        given = copy.copy(self)
        given._given_sdfg = user_sdfg.validated(copy.deepcopy(sdfg), "the SDFG given")
        given._translation = None
        return given

    def as_text(self) -> str:
        """The normalised StableHLO module, in MLIR's generic op form."""
        return self._normalized.text

    def planned(self) -> tuple[ir.Module, symbolic.Signature | None]:
        """The module after the plan stage's passes (``pipeline.py``), its decisions
        recorded on its ops (``plan/annotations.py``), and for a module with dynamic shapes
        the signature its symbols are read from (``symbolic.refine``)."""
        if self._planned is None:
            from .translate import Builder  # noqa: F401  the families, whose records the
            # passes read (DaCe's import counts: 1 s the first time)

            module, signature = self.module, None
            try:
                main = self.main
            except LookupError:
                main = None  # the Builder says what is missing
            if main is not None and symbolic.has_dynamic_types(main):
                module, signature = symbolic.refine(module, self._entry)
            with stage("plan"):
                module = self.pipeline.plan(module, self.options.context(self._entry))
            self._planned = (module, signature)
        return self._planned

    def as_planned_text(self, debug_info: bool = False) -> str:
        """The module after the plan stage, each op with the decisions of the passes that
        concern it (``h2d.*`` attributes); with ``debug_info``, each op's source location."""
        return module_text(self.planned()[0], locations=debug_info)

    def _translate(self):
        """The SDFG, argument and result specs, constants and symbols (``symbolic.py``);
        raises ``NeedsSpecialisation`` for a module with dynamic shapes that must be
        compiled per concrete shape."""
        if self._translation is None:
            signature = None
            try:
                module, signature = self.planned()
                with stage("translate"):
                    from .translate import Builder

                    context = self.options.context(self._entry)
                    builder = Builder(module, self._name, self._entry, signature=signature,
                                      machine=context.machine, target=context.target)
                    sdfg = builder.build()
                with stage("SDFG passes"):
                    self.pipeline.transform(sdfg, context)
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
            arguments = tensor_specs(data_types([v.type for v in main.arguments]),
                               builder.argument_names, "argument")
            results = tensor_specs(data_types(main.result_types), builder.result_names, "result")
            if self._user_sdfg:
                sdfg = self._replaced(sdfg)
            self._translation = (sdfg, arguments, results, builder.constants, signature,
                                 builder.emit.process_values)
        return self._translation

    def _replaced(self, sdfg: Any) -> Any:
        """The user's SDFG in place of the translated ``sdfg``: the one given, or
        ``sdfg`` after the options' transformation; checked against ``sdfg``'s
        signature."""
        expected = user_sdfg.signature(sdfg)
        if self._given_sdfg is not None:
            sdfg = copy.deepcopy(self._given_sdfg)
        else:
            with stage("user transformation"):
                sdfg = user_sdfg.apply(self.options.transform, sdfg, self._name)
        user_sdfg.check_signature(sdfg, expected, self._name)
        return sdfg

    def as_sdfg(self):
        """A copy of the ``dace.SDFG`` the module translates to, after the options'
        ``transform`` (for a module given an SDFG, ``with_sdfg``, of that one): to look
        at, transform and compile (``compile(sdfg=...)``) without changing this module's
        program."""
        return copy.deepcopy(self._translate()[0])

    def cost_analysis(self) -> dict[str, Any]:
        """``{"flops", "transcendentals", "bytes accessed"}`` of one call, as
        ``jax.stages.Lowered.cost_analysis`` names them: the flops counted on the module's
        ops, the bytes on the SDFG's memlets (``costs.py``). A count that depends on
        symbolic sizes is None (flops) or an expression of them (bytes)."""
        accessed = costs.bytes_accessed(self._translate()[0])
        if symbolic.has_dynamic_types(self.main):
            flops = transcendentals = None
        else:
            flops, transcendentals = (float(n) for n in costs.flops(self.main))
        return {"flops": flops, "transcendentals": transcendentals,
                "bytes accessed": float(accessed) if isinstance(accessed, int) else accessed}

    def compile(self, sdfg: Any = None) -> Compiled:
        """Build (or load from the cache) the program; with ``sdfg``, from that SDFG
        (``with_sdfg``). A module whose dynamic shapes cannot stay symbolic gives a
        program that compiles once per argument shape."""
        if sdfg is not None:
            return self.with_sdfg(sdfg).compile()
        with stage("cache lookup") as lookup:
            try:
                key = self.key
            except symbolic.NeedsSpecialisation as reason:  # translated for the user's SDFG
                if self._given_sdfg is not None:
                    raise ArgumentError(
                        f"an SDFG is given for `{self._name}`, whose dynamic shapes are "
                        f"compiled once per shape ({reason}): lower it at concrete shapes "
                        "and give the SDFG of each") from None
                return Compiled(SpecialisingProgram(self, reason), self, None)
            program = runtime.lookup(key)
            lookup.note = "not found" if program is None else "found"
        built = False
        if program is None:
            with collector_paused():
                try:
                    sdfg, arguments, results, constants, signature, process_values = \
                        self._translate()
                except symbolic.NeedsSpecialisation as reason:
                    return Compiled(SpecialisingProgram(self, reason), self, None)
                symbols = [dataclasses.asdict(s) for s in signature.symbols] \
                    if signature else ()
                checks = [dataclasses.asdict(c) for c in signature.checks] if signature else ()
                # the build generates code from the SDFG itself, which changes it (DaCe's
                # defaults filled in), rather than from a copy (1.3 s at 3,000 ops); a later
                # ``as_sdfg`` translates again
                self._translation = None
                with stage("C++ build"), self.pipeline.build_environment():
                    program = runtime.build(sdfg, key, arguments, results, constants,
                                            self.level.cpu_flags, symbols, checks,
                                            process_values, self.pipeline.code_passes)
                built = program.built  # False: another process built it meanwhile
        return Compiled(program, self, built)

    def compile_uncached(self, folder, adjust: Callable[[Any], None]) -> Compiled:
        """Build a copy of the SDFG, changed by ``adjust`` (the profiler's timers), into
        the private folder ``folder``, outside the cache: what it builds is not the module's
        program. The module's sizes must be known (``specialised``)."""
        sdfg, arguments, results, constants, signature, process_values = self._translate()
        if signature is not None and signature.symbols:
            raise ArgumentError("give the sizes of the module's symbolic dimensions")
        if process_values:
            raise ArgumentError("a program of several processes (an MPI job's) is built "
                                "for its job: profile it on one device")
        sdfg = copy.deepcopy(sdfg)
        adjust(sdfg)
        with stage("C++ build"), self.pipeline.build_environment():
            program = runtime.build_uncached(sdfg, folder, arguments, results, constants,
                                             self.level.cpu_flags, self.pipeline.code_passes)
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
                       self._entry, self.options)


class SpecialisingProgram:
    """A module with dynamic shapes that an op needs static: at each new combination of
    argument shapes it is specialised (StableHLO's shape refinement) and compiled, and the
    programs are cached per shape, as XLA compiles exported modules."""

    def __init__(self, lowered: Lowered, reason: symbolic.NeedsSpecialisation):
        self.lowered, self.reason = lowered, reason
        main = lowered.main
        self._all_types = [v.type for v in main.arguments]
        self._types = data_types(self._all_types)
        names = {(s.argument, s.dim): s.name for s in reason.signature.symbols}
        self.arguments = tuple(tensor_specs([ir.TensorType(tuple(
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
    """A compiled module, shaped like ``jax.stages.Compiled`` where the module came from a
    Python function (``hlo2dace.jit(f).lower(...).compile()``; ``compile_text`` of a
    ``jax.stages.Lowered`` or a ``jax.export.Exported``): called with the arguments of the
    function (the static ones may be left out, as JAX's own ``Compiled`` requires), it
    returns ``jax.Array``s in the function's output structure. A module given as text or
    bytes has no Python signature: it is called with one array (NumPy or ``jax.Array``)
    per argument of its entry function and returns one NumPy array for a single result, a
    tuple for several."""

    def __init__(self, program: runtime.Program, lowered: Lowered | None = None,
                 built: bool | None = None):
        self.program = program
        self.lowered = lowered
        #: whether this compilation built the program (True) or found it in the cache
        #: (False); None for a module compiled once per argument shape, when called
        self.built = built
        #: seconds the direct calls spent making their results: each NumPy result made a
        #: ``jax.Array`` costs a ``batched_device_put`` of about 3 us, where XLA makes all
        #: of a call's results in one step from C++ (``JitFunction._route``)
        self.making_results_s = 0.0

    @property
    def folder(self):
        """The cache folder holding the binary and its signature (``build/program.sdfgz``:
        the SDFG's arguments; ``Lowered.as_sdfg`` gives the whole SDFG)."""
        return self.program.folder

    def call_flat(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        """The program on one array per argument of its entry function; NumPy results."""
        return self.program(*arrays)

    def __call__(self, *args: Any, **kwargs: Any):
        lowered = self.lowered
        if not isinstance(lowered, JitLowered):
            if kwargs:
                raise ArgumentError("a module compiled from text takes its arguments by "
                                    "position (one array per argument of its entry "
                                    "function)")
            results = self.program(*args)
            return results[0] if len(results) == 1 else tuple(results)
        leaves = lowered.leaves(args, kwargs)
        if lowered.partitioned is not None:
            return self._call_sharded(leaves)
        program = self.program
        infos = lowered.leaf_infos()
        on_device = committed(leaves)
        if len(leaves) == len(program.arguments) == len(infos):
            leaves = [_argument(leaf, spec, dtype, info) for leaf, spec, dtype, info in
                      zip(leaves, program.arguments, program.argument_dtypes, infos)]
        return lowered.results.wrap(program(*leaves), on_device)

    def call_leaves(self, leaves: Sequence[Any]):
        """The program on the leaves of the function's dynamic arguments; its results as
        the function returns them."""
        lowered = self.lowered
        if lowered.partitioned is not None:
            return self._call_sharded(leaves)
        program = self.program
        arrays = [leaf if type(leaf) in ARRAY_TYPES and leaf.dtype == dtype
                  else as_array(leaf, spec)
                  for leaf, spec, dtype in zip(leaves, program.arguments,
                                               program.argument_dtypes)]
        return self._wrapped(program(*arrays), leaves)

    def takes_as_is(self, leaves: Sequence[Any]) -> bool:
        """Whether the leaves are jax.Arrays the program takes as they are
        (``runtime.Program.takes_as_is``): then ``call_checked`` may run it on them."""
        program = self.program
        return self.lowered.partitioned is None and type(program) is runtime.Program \
            and program.takes_as_is(leaves)

    def call_checked(self, leaves: Sequence[Any]):
        """``call_leaves`` on leaves like those ``takes_as_is`` accepted."""
        return self._wrapped(self.program.call_checked(leaves), leaves)

    def _wrapped(self, outputs: list[np.ndarray], leaves: Sequence[Any]):
        """The results of a call on ``leaves``, as jax.jit returns them, counting the time
        spent making them (``making_results_s``)."""
        start = time.perf_counter()
        wrapped = self.lowered.results.wrap(outputs, committed(leaves))
        self.making_results_s += time.perf_counter() - start
        return wrapped

    def _call_sharded(self, leaves: Sequence[Any]):
        """A call as one rank of an MPI job: this rank's shards in, its results out, as
        process-local arrays or gathered (``sharded.py``)."""
        partitioned, results = self.lowered.partitioned, self.lowered.results
        local, stay_local = sharded.local_arguments(partitioned, leaves)
        arrays = [as_array(leaf, spec) for leaf, spec in zip(local, self.program.arguments)]
        outputs = sharded.results(partitioned, self.call_flat(arrays), stay_local)
        if stay_local:
            return results.unflatten(outputs)
        return results.wrap(outputs)

    # jax.stages.Compiled's description of the call
    args_info = property(lambda self: self._signature().args_info)
    in_tree = property(lambda self: self._signature().in_tree)
    in_avals = property(lambda self: self._signature().in_avals)
    out_tree = property(lambda self: self._signature().out_tree)
    out_info = property(lambda self: self._signature().out_info)
    donate_argnums = property(lambda self: self._signature().donate_argnums)

    def _signature(self) -> JitLowered:
        if not isinstance(self.lowered, JitLowered):
            raise Hlo2DaceError("a module compiled from text has no Python signature; "
                                "compile a function's lowering (hlo2dace.jit(f).lower(...), "
                                "jax.jit(f).lower(...) or a jax.export.Exported) for one")
        return self.lowered

    def as_text(self) -> str | None:
        """The C++ code DaCe generated for the program (``jax.stages.Compiled.as_text``
        gives XLA's optimised HLO); None for a module compiled per argument shape."""
        if self.program.folder is None:
            return None
        build = self.program.folder / "build"
        files = [line.strip().split(",") for line in
                 (build / "dace_files.csv").read_text().splitlines() if line.strip()]
        return "\n".join((build / "src" / target / kind / name).read_text()
                         for target, kind, name in files)

    def cost_analysis(self) -> dict[str, Any] | None:
        """``{"flops", "transcendentals", "bytes accessed"}`` of one call, as
        ``jax.stages.Compiled.cost_analysis`` names them: the flops counted on the module's
        ops, the bytes on the SDFG's memlets (``costs.py``; the SDFG is translated again);
        None for a module compiled per argument shape."""
        if self.lowered is None or self.program.folder is None:
            return None
        return self.lowered.cost_analysis()

    def memory_analysis(self) -> costs.MemoryAnalysis | None:
        """The bytes of the arguments, results, constants and transients and of the
        library (``costs.MemoryAnalysis``, with the names of jaxlib's
        ``CompiledMemoryStats``); None for a module compiled per argument shape."""
        program = self.program
        if self.lowered is None or program.folder is None:
            return None

        def total(specs):
            sizes = [costs.array_bytes(spec.shape, spec.dtype) for spec in specs]
            return sum(sizes) if all(isinstance(n, int) for n in sizes) else \
                " + ".join(map(str, sizes))

        sdfg, _, _, constants, _, _ = self.lowered._translate()
        aliased = {j for _, j in program.in_place}
        library = next((program.folder / "build" / "build").glob("lib*.so"), None)
        return costs.MemoryAnalysis(
            generated_code_size_in_bytes=library.stat().st_size if library else 0,
            argument_size_in_bytes=total(program.arguments),
            output_size_in_bytes=total(program.results),
            alias_size_in_bytes=total([program.results[j] for j in sorted(aliased)]),
            temp_size_in_bytes=self._transient_bytes(sdfg),
            constant_size_in_bytes=sum(int(np.asarray(c).nbytes) for c in constants.values()))

    def _transient_bytes(self, sdfg: Any) -> int | str:
        """The bytes of ``sdfg``'s transients as the program allocates them: those that
        the ``transient_arena`` pass places in one allocation counted as that
        allocation's bytes."""
        total = costs.transient_bytes(sdfg)
        if "transient_arena" not in self.lowered.pipeline.code_passes \
                or not isinstance(total, int):
            return total
        arena = liveness.arena_layout(sdfg)
        return total if arena is None else total - arena.apart + arena.size


def _argument(leaf: Any, spec: runtime.TensorSpec, dtype: np.dtype, info: Any) -> Any:
    """A leaf of a ``Compiled`` call as the program takes it: converted as ``jax.jit``
    converts it (a weakly typed Python scalar, a 64-bit array with x64 off, a typed PRNG
    key), else as it is, for the program to read or to say why it cannot (as JAX's
    ``Compiled``, a strongly typed argument of another dtype is an error)."""
    kind = type(leaf)
    if kind is np.ndarray:
        return leaf if leaf.dtype == dtype else as_array(leaf, spec)
    if kind in JAX_ARRAY_TYPES:  # the aval: a jax.Array's dtype is a property
        return leaf if leaf.aval.dtype == dtype else as_array(leaf, spec)
    if kind in PYTHON_SCALARS:
        return as_array(leaf, spec) if info is None or info._aval.weak_type else leaf
    if is_key(getattr(leaf, "dtype", None)):
        return as_array(leaf, spec)
    return leaf


def lower_text(source: Any, name: str = "program", entry: str | None = None,
               optimize: Options | str | None = None) -> Lowered:
    """``source``: anything the frontend accepts (text, bytes, path, Lowered, Exported);
    ``entry``: the function to compile (default: ``main``, or the only public function);
    ``optimize``: "none", "default" or "aggressive" (see ``hlo2dace.optimize``). A module
    exported for several devices is partitioned by XLA (``sharded.partition_exported``):
    its program is one rank's of an MPI job. A ``jax.stages.Lowered`` or a
    ``jax.export.Exported`` brings its function's signature: its ``Compiled`` takes the
    function's arguments and returns its output structure."""
    exported = sharded.exported_for_devices(source)
    if exported is not None:
        partitioned = sharded.partition_exported(exported)
        normalized = partitioned.normalized
    else:
        partitioned, normalized = None, normalize(source)
    signature = _signature_of(source) if entry is None else None
    if signature is not None:
        return JitLowered(normalized, name, *signature, optimize=optimize,
                          partitioned=partitioned)
    return Lowered(normalized, name, entry, optimize, partitioned)


def _signature_of(source: Any) -> tuple | None:
    """(results, args_info, out_info) of a ``jax.stages.Lowered`` or
    ``jax.export.Exported``; None for a source without a Python signature."""
    import jax

    if isinstance(source, jax.stages.Lowered):
        out = jax.tree_util.tree_leaves(source.out_info)
        shardings = [o.sharding for o in out]
        return (Results(source.out_tree, [jax.core.ShapedArray(o.shape, o.dtype) for o in out],
                        shardings=shardings if None not in shardings else None),
                source.args_info, source.out_info)
    if isinstance(source, jax.export.Exported):
        args_info = jax.tree_util.tree_unflatten(source.in_tree, [
            jax.stages.ArgInfo(aval, False) for aval in source.in_avals])
        out_info = jax.tree_util.tree_unflatten(source.out_tree, [
            jax.ShapeDtypeStruct(aval.shape, aval.dtype) for aval in source.out_avals])
        symbolic_shapes = not all(isinstance(d, int) for aval in source.out_avals
                                  for d in aval.shape)
        return (Results(source.out_tree, source.out_avals, polymorphic=symbolic_shapes),
                args_info, out_info)
    return None


def compile_text(source: Any, optimize: Options | str | None = None,
                 target: str | None = None) -> Compiled:
    """Compile a StableHLO module (text in pretty or generic form, MLIR bytecode, a portable
    artifact, ``Exported.serialize()`` bytes, a ``jax.export.Exported`` or a
    ``jax.stages.Lowered``) into a callable, at the optimisation level ``optimize``, for
    ``target`` ("cpu", the default, or "cuda": docs/gpu.md) (``Compiled`` says how each
    is called)."""
    if target is not None:
        optimize = dataclasses.replace(Options.of(optimize), target=target)
    return lower_text(source, optimize=optimize).compile()


# ---------------------------------------------------------------------------- jit


#: marks a ``JitFunction`` cache key of leaves (arrays, scalars; a pytree's keys begin with its
#: treedef)
_FLAT = "arrays"


def _traced_call(jitted: JitFunction, args, kwargs):
    raise Hlo2DaceError("hlo2dace.interop was not imported: an hlo2dace.jit function "
                        "cannot run under a JAX transformation without it")


#: seconds of making results one at a time after which a function's calls run through XLA
#: (``JitFunction._route``): what the first call through XLA took last (tracing, compiling
#: XLA's module; about 12 ms on a 2-core Zen 4), 25 ms before any
xla_call_after_s = 0.025


def _xla_route(jitted: JitFunction, args: tuple, kwargs: dict, compiled: Compiled):
    return None  # until interop.py is imported: every call is a direct one


def handle_xla_routes(maker: Callable) -> None:
    """Make ``maker(jitted, args, kwargs, compiled)`` give ``jax.jit`` of the ``hlo2dace.jit``
    function ``jitted``, whose trace at ``args`` runs ``compiled``'s program as an FFI call
    (``interop.py``), or None where its calls cannot go through XLA."""
    global _xla_route
    _xla_route = maker


def handle_traced_calls(handler: Callable) -> None:
    """Make ``handler(jitted, args, kwargs)`` run the calls of ``hlo2dace.jit`` functions
    whose arguments JAX traces (``interop.py`` registers itself so when the package is
    imported; the stages here know nothing of JAX's transformations)."""
    global _traced_call
    _traced_call = handler


class JitFunction:
    """``hlo2dace.jit(f)``: calls ``f`` through StableHLO and DaCe-compiled code. Its
    stages are JAX's: ``trace`` gives a ``Traced``, ``lower`` a ``JitLowered``, whose
    ``compile`` gives a ``Compiled`` called as the function is."""

    def __init__(self, fun: Callable, static_argnums: Sequence[int] = (),
                 static_argnames: Sequence[str] = (), optimize: Options | str | None = None,
                 polymorphic_shapes: Any = None, donate_argnums: Sequence[int] = (),
                 in_shardings: Any = None, out_shardings: Any = None,
                 keep_unused: bool = False, inline: bool = False):
        import jax

        self.fun = fun
        #: arguments whose buffers a result may take inside jax.jit (``interop.py``)
        self.donate_argnums = (donate_argnums,) if isinstance(donate_argnums, int) \
            else tuple(donate_argnums)
        #: the level, the passes switched off, the machine (``pipeline.Options``)
        self.optimize = Options.of(optimize).resolved()
        #: ``jax.export``'s shape specifications of the positional arguments, or None
        self._polymorphic_shapes = polymorphic_shapes
        self._polymorphic: dict = {}
        self.static_argnums = tuple(sorted({static_argnums} if isinstance(static_argnums, int)
                                            else set(static_argnums)))
        self.static_argnames = (static_argnames,) if isinstance(static_argnames, str) \
            else tuple(static_argnames)
        #: as jax.jit's: JAX may drop arguments the function does not use, hlo2dace keeps
        #: them all (an argument the program does not read costs it nothing)
        self.keep_unused = keep_unused
        shardings = {key: value for key, value in (("in_shardings", in_shardings),
                                                   ("out_shardings", out_shardings))
                     if value is not None}
        #: results take the shardings jax.jit gives them (``_result_shardings``)
        self._sharded = bool(shardings)
        self._jitted = jax.jit(fun, static_argnums=self.static_argnums,
                               static_argnames=self.static_argnames, keep_unused=True,
                               inline=inline, **shardings)
        self._cache: dict = {}
        self._lock = threading.Lock()
        #: in an MPI job, how arguments are sharded decides each rank's program; in one
        #: process it changes nothing (a merely sharded array is read whole), so it is no
        #: part of the call's key there
        self._keyed_by_sharding = mpi.launched_size() > 1
        #: ``jax.jit`` of this function (``_xla_route``), which JAX's C++ dispatch calls
        #: for a known signature at jax.jit's cost, running the program as XLA's FFI call:
        #: taken once the direct calls' results cost what making it does
        #: (``xla_call_after_s``); None until then, False where calls cannot go through it
        self._route: Any = None
        #: whether the route's first call, which traces and compiles, is still to come
        self._route_cold = False
        functools.update_wrapper(self, fun)

    def split_static(self, args, kwargs):
        """The dynamic positional and keyword arguments, and the static ones as a key
        (ArgumentError for a static value that cannot be a key, as jax.jit's)."""
        dynamic_args = [a for i, a in enumerate(args) if i not in self.static_argnums]
        static_args = tuple((i, a) for i, a in enumerate(args) if i in self.static_argnums)
        dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        static_kwargs = tuple(sorted((k, v) for k, v in kwargs.items()
                                     if k in self.static_argnames))
        for where, value in (*static_args, *static_kwargs):
            try:
                hash(value)
            except TypeError:
                name = getattr(self.fun, "__name__", "the function")
                hint = (": it is traced by an enclosing JAX transformation; make it static "
                        "there too (jax.jit(..., static_argnums=...))" if traced([value])
                        else "")
                raise ArgumentError(f"static argument {where!r} of `{name}` must be "
                                    f"hashable, as jax.jit's are; got a "
                                    f"{type(value).__name__}{hint}") from None
        return dynamic_args, dynamic_kwargs, (static_args, static_kwargs)

    def _signature(self, args, kwargs):
        import jax

        sharding = self._keyed_by_sharding
        if not kwargs and not self.static_argnums and LEAF_TYPES.issuperset(
                map(type, args)):  # leaves only: no pytree to flatten
            key = tuple(map(leaf_key, args))
            if sharding:
                key += tuple(getattr(a, "sharding", None) for a in args)
            return (_FLAT, key, bool(jax.config.jax_enable_x64)), args
        if kwargs or self.static_argnums:
            dynamic_args, dynamic_kwargs, statics = self.split_static(args, kwargs)
        else:  # the common case, without the copies
            dynamic_args, dynamic_kwargs, statics = list(args), {}, ((), ())
        leaves, tree = jax.tree_util.tree_flatten((dynamic_args, dynamic_kwargs))
        avals = tuple(map(leaf_key, leaves))
        if sharding:
            avals += tuple(getattr(leaf, "sharding", None) for leaf in leaves)
        return (tree, avals, statics, bool(jax.config.jax_enable_x64)), leaves

    def trace(self, *args, **kwargs) -> Traced:
        """``jax.jit(f).trace``: the function traced at these arguments (hlo2dace.jit
        functions it calls traced into it); ``Traced.lower`` lowers it for hlo2dace."""
        statics = self.split_static(args, kwargs)[2]
        args, kwargs = sharded.traceable((args, kwargs))
        with inlining():
            return Traced(self, self._jitted.trace(*args, **kwargs), statics)

    def eval_shape(self, *args, **kwargs):
        """``jax.jit(f).eval_shape``: the results' shapes and dtypes, nothing compiled."""
        return self._jitted.eval_shape(*args, **kwargs)

    def clear_cache(self) -> None:
        """Forget the programs this function compiled and JAX's traces of it; the next
        call compiles again (from the disk cache, where its program is)."""
        with self._lock:
            self._cache.clear()
            self._polymorphic.clear()
            self._route, self._route_cold = None, False
        self._jitted.clear_cache()

    def lower(self, *args, **kwargs) -> JitLowered:
        if self._polymorphic_shapes is not None:
            return self._lower_polymorphic(args, kwargs)
        with stage("JAX lowering"):  # tracing included
            traced = self.trace(*args, **kwargs)
            lowered = traced.jax_lowering()
        return self.lowered_from(traced, lowered)

    def lowered_from(self, traced: Traced, lowered) -> JitLowered:
        """The ``JitLowered`` of JAX's lowering ``lowered`` of ``traced``."""
        name = getattr(self.fun, "__name__", "program")
        signature = dict(args_info=traced.args_info, out_info=lowered.out_info,
                         statics=traced.statics, static_argnums=self.static_argnums,
                         static_argnames=self.static_argnames, optimize=self.optimize)
        text = lowered.as_text()
        grid = sharded.processes(text)
        if grid != (1, 1) and sharded.runs_as_ranks(text):  # XLA's per-device program
            partitioned = sharded.partition(lowered, grid)
            return JitLowered(partitioned.normalized, name,
                              Results(lowered.out_tree, traced.jaxpr.out_avals),
                              partitioned=partitioned, **signature)
        shardings = self._result_shardings(lowered) if self._sharded else None
        return JitLowered(normalize(lowered), name,
                          Results(lowered.out_tree, traced.jaxpr.out_avals,
                                  shardings=shardings), **signature)

    @staticmethod
    def _result_shardings(lowered) -> list:
        """The results' shardings as jax.jit returns them: the ``out_shardings`` asked
        for, else those XLA's compilation propagates from the ``in_shardings``."""
        import jax

        shardings = [o.sharding for o in jax.tree_util.tree_leaves(lowered.out_info)]
        if None in shardings:
            shardings = jax.tree_util.tree_leaves(lowered.compile().output_shardings)
        return shardings

    def __call__(self, *args, **kwargs):
        route = self._route
        if route and compiling_calls():
            try:
                return self._first_routed(args, kwargs) if self._route_cold else \
                    route(*args, **kwargs)
            except RuntimeError:  # JAX refused an argument (deleted): the direct call says
                pass
        key, leaves = self._signature(args, kwargs)
        arrays = JAX_ARRAY_TYPES.issuperset(map(type, leaves))  # (then no tracers)
        if not arrays and key[0] is not _FLAT and not LEAF_TYPES.issuperset(
                map(type, leaves)) and traced(leaves):  # inside a JAX transformation
            return _traced_call(self, args, kwargs)
        entry = self._cache.get(key)
        if entry is None:
            with self._lock:
                entry = self._cache.get(key)
                if entry is None:
                    entry = self._cache[key] = [self._compile(args, kwargs), None]
        compiled, as_is = entry
        # jax.Arrays that went to the program as they were at this signature's first call
        # with jax.Arrays do so again (the key holds their shapes and dtypes): no
        # per-argument tests
        if as_is and arrays:
            results = compiled.call_checked(leaves)
        else:
            results = compiled.call_leaves(leaves)
            if as_is is None and arrays:
                entry[1] = compiled.takes_as_is(leaves)
        if arrays and self._route is None and compiled.making_results_s >= xla_call_after_s:
            self._take_route(args, kwargs, compiled)
        return results

    def _take_route(self, args, kwargs, compiled: Compiled) -> None:
        """From now on, calls through ``_xla_route``: where the function's results and
        program allow it (plain arrays on the one CPU device, no per-call thread tuning,
        no shardings or symbolic shapes)."""
        route = None
        if not (self._sharded or self._keyed_by_sharding or self._polymorphic_shapes
                is not None or compiled.lowered.partitioned is not None):
            route = _xla_route(self, args, kwargs, compiled)
        self._route, self._route_cold = route or False, route is not None

    def _first_routed(self, args, kwargs):
        """The route's first call, which traces and compiles XLA's module: what taking a
        route costs (``xla_call_after_s``)."""
        global xla_call_after_s
        start = time.perf_counter()
        results = self._route(*args, **kwargs)
        self._route_cold = False
        xla_call_after_s = time.perf_counter() - start
        return results

    def _compile(self, args, kwargs) -> Compiled:
        """The compiled program for ``args``: with polymorphic shapes, the one that serves
        every size of the marked dimensions."""
        if self._polymorphic_shapes is None:
            lowered = self.lower(*args, **kwargs)
            if lowered.partitioned is not None:
                size = lowered.partitioned.size
                mpi.check_size(size, f"`{getattr(self.fun, '__name__', 'the function')}`")
                mpi.agree("the signature of a sharded call", repr(self._signature(
                    args, kwargs)[0]))
                return mpi.once_per_machine(lowered.compile)
            return lowered.compile()
        specs = self._symbolic_specs(args, kwargs)
        key = tuple((str(spec.shape), str(spec.dtype)) for spec in specs)
        compiled = self._polymorphic.get(key)
        if compiled is None:
            compiled = self._polymorphic[key] = \
                self._lower_polymorphic(args, kwargs, specs).compile()
        return compiled

    def _symbolic_specs(self, args, kwargs):
        import jax

        if kwargs or self.static_argnums or self.static_argnames:
            raise ArgumentError("polymorphic_shapes takes positional array arguments only "
                                "(no keyword or static arguments)")
        try:
            return jax.export.symbolic_args_specs(args, self._polymorphic_shapes)
        except (ValueError, TypeError, IndexError) as exc:
            raise ArgumentError(_polymorphic_mismatch(args, self._polymorphic_shapes) or
                                f"polymorphic_shapes {self._polymorphic_shapes!r}: {exc}") \
                from None

    def _lower_polymorphic(self, args, kwargs, specs=None) -> JitLowered:
        """Lowered through ``jax.export`` with symbolic dimensions: one module for every
        size, whose symbols the compiled program reads from its arguments."""
        import jax

        specs = specs if specs is not None else self._symbolic_specs(args, kwargs)
        with stage("JAX export"):
            exported = jax.export.export(self._jitted, platforms=["cpu"])(*specs)
        name = getattr(self.fun, "__name__", "program")
        results, args_info, out_info = _signature_of(exported)
        return JitLowered(normalize(exported), name, results, args_info=args_info,
                          out_info=out_info, optimize=self.optimize)


class Traced:
    """``jax.stages.Traced`` of an ``hlo2dace.jit`` function: JAX's trace (its ``jaxpr``,
    ``args_info``, ``out_info``...), whose ``lower`` gives hlo2dace's ``JitLowered``."""

    def __init__(self, jitted: JitFunction, traced, statics: tuple):
        self._jitted, self._traced = jitted, traced
        #: the static arguments traced with: ((position, value), ...), ((name, value), ...)
        self.statics = statics

    jaxpr = property(lambda self: self._traced.jaxpr)
    fun_name = property(lambda self: self._traced.fun_name)
    args_info = property(lambda self: self._traced.args_info)
    in_tree = property(lambda self: self._traced.in_tree)
    in_avals = property(lambda self: self._traced.in_avals)
    out_info = property(lambda self: self._traced.out_info)
    out_avals = property(lambda self: self._traced.out_avals)
    out_tree = property(lambda self: self._traced.out_tree)
    donate_argnums = property(lambda self: self._traced.donate_argnums)

    def lower(self) -> JitLowered:
        with stage("JAX lowering"):
            lowered = self.jax_lowering()
        return self._jitted.lowered_from(self, lowered)

    def jax_lowering(self):
        """JAX's ``Lowered`` of the trace (hlo2dace.jit functions it calls lowered into
        it: one program)."""
        with inlining():
            return self._traced.lower()


def _polymorphic_mismatch(args, specifications) -> str | None:
    """How ``args`` differ from the ``polymorphic_shapes`` specifications (one string for
    every argument, or one per argument), said plainly: JAX's own message quotes its
    parser. None where the specifications are of another form or nothing plain is found."""
    import jax

    if isinstance(specifications, str):
        specifications = [specifications] * len(args)
    if not isinstance(specifications, (list, tuple)):
        return None
    if len(specifications) != len(args):
        return (f"called with {len(args)} argument(s); polymorphic_shapes gives "
                f"{len(specifications)} specification(s)")
    for i, (arg, specification) in enumerate(zip(args, specifications)):
        if not isinstance(specification, str):
            continue
        try:
            dims = jax.export.symbolic_shape(specification)
        except (ValueError, TypeError):  # placeholders (``_``, ``...``) need the argument
            continue
        shape = tuple(np.shape(arg))
        if len(dims) != len(shape) or any(isinstance(d, int) and d != n
                                           for d, n in zip(dims, shape)):
            return f"argument {i} has shape {shape}; the specification is {specification}"
    return None


class JitLowered(Lowered):
    """A lowering of a Python function (``hlo2dace.jit``'s, or ``compile_text`` of a
    ``jax.stages.Lowered`` or ``jax.export.Exported``), shaped like
    ``jax.stages.Lowered``: it knows the function's arguments (``args_info``, ``in_tree``)
    and results (``out_info``, ``out_tree``), so that its ``Compiled`` is called as the
    function is and returns what it returns."""

    def __init__(self, normalized: NormalizedModule, name: str, results: Results,
                 args_info: Any = None, out_info: Any = None, statics: tuple | None = None,
                 static_argnums: Sequence[int] = (), static_argnames: Sequence[str] = (),
                 optimize: Options | str | None = None,
                 partitioned: sharded.Partitioned | None = None):
        super().__init__(normalized, name, optimize=optimize, partitioned=partitioned)
        #: turns the program's NumPy results into what the function returns
        self.results = results
        #: as jax.stages.Lowered's: the dynamic arguments' ``ArgInfo``s (pytree of
        #: (args, kwargs)), and the results' ``ShapeDtypeStruct``s
        self.args_info, self.out_info = args_info, out_info
        #: the static arguments lowered with (``JitFunction.split_static``), or None
        self.statics = statics
        self.static_argnums, self.static_argnames = static_argnums, static_argnames

    @functools.cached_property
    def in_tree(self):
        """The pytree of the dynamic arguments ``(args, kwargs)`` (made once: every call of
        the ``Compiled`` compares its arguments' with it)."""
        import jax

        return jax.tree_util.tree_structure(self.args_info)

    @property
    def in_avals(self):
        import jax

        return jax.tree_util.tree_map(lambda info: info._aval, self.args_info)

    @property
    def out_tree(self):
        return self.results.tree

    @property
    def donate_argnums(self) -> tuple[int, ...]:
        import jax

        return tuple(i for i, info in enumerate(jax.tree_util.tree_leaves(self.args_info))
                     if info.donated)

    def leaf_infos(self) -> tuple[Any, ...]:
        """The ``ArgInfo`` of each leaf of the dynamic arguments."""
        return self._leaf_infos

    @functools.cached_property
    def _leaf_infos(self) -> tuple[Any, ...]:
        import jax

        return tuple(jax.tree_util.tree_leaves(self.args_info))

    def leaves(self, args: tuple, kwargs: dict) -> list[Any]:
        """The leaves of the dynamic arguments of a call with ``args`` and ``kwargs``: the
        function's dynamic arguments (as ``jax.stages.Compiled`` takes them), or all of
        them with the static ones it was lowered with. A function of arrays alone also
        takes anything NumPy reads as an array (a nested list) in their places, the
        program checking each. ArgumentError otherwise."""
        import jax

        leaves, tree = jax.tree_util.tree_flatten((tuple(args), kwargs))
        if tree == self.in_tree:
            return leaves
        if self.statics is not None and (self.static_argnums or self.static_argnames):
            dynamic_args = [a for i, a in enumerate(args) if i not in self.static_argnums]
            dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
            statics = (tuple((i, a) for i, a in enumerate(args) if i in self.static_argnums),
                       tuple(sorted((k, v) for k, v in kwargs.items()
                                    if k in self.static_argnames)))
            leaves, tree = jax.tree_util.tree_flatten((tuple(dynamic_args), dynamic_kwargs))
            if tree == self.in_tree:
                if statics != self.statics:
                    raise ArgumentError(f"compiled for the static arguments "
                                        f"{_describe_statics(self.statics)}, called with "
                                        f"{_describe_statics(statics)}: lower and compile "
                                        "again for these (the jitted function does that)")
                return leaves
        if not kwargs and self.in_tree == jax.tree_util.tree_structure(
                (tuple(self.leaf_infos()), {})):
            return list(args)  # the program says what is wrong with them
        raise ArgumentError(f"the arguments do not match those this program was compiled "
                            f"for: expected (args, kwargs) structured as {self.in_tree}, got "
                            f"{tree}")


def _describe_statics(statics: tuple) -> str:
    positional, named = statics
    parts = [f"{i}: {v!r}" for i, v in positional] + [f"{k}={v!r}" for k, v in named]
    return "(" + ", ".join(parts) + ")" if parts else "(none)"


def _options(optimize: Options | str | None, disable_passes: Sequence[str],
             machine: Machine | None, transform: Callable | None,
             target: str | None = None) -> Options:
    """``jit``'s options: a level's name (or options already made, as ``compare`` passes)
    with the passes switched off, the machine, the transformation and the target added."""
    given = Options.of(optimize)
    return dataclasses.replace(
        given, disable_passes=tuple(given.disable_passes) + tuple(disable_passes),
        machine=machine or given.machine, transform=transform or given.transform,
        target=target or given.target)


def unwrap_jit(fun: Callable, static_argnums: int | Sequence[int],
               static_argnames: str | Sequence[str], optimize: Options | str | None
               ) -> tuple[Callable, tuple[int, ...], tuple[str, ...], Options | str | None]:
    """The Python function of ``fun``, its static arguments and options: an
    ``hlo2dace.jit`` function brings its own where the caller (``compare``, ``profile``)
    gives none."""
    if isinstance(fun, JitFunction):
        static_argnums = static_argnums or fun.static_argnums
        static_argnames = static_argnames or fun.static_argnames
        optimize = optimize or fun.optimize
        fun = fun.fun
    static_argnums = (static_argnums,) if isinstance(static_argnums, int) \
        else tuple(static_argnums)
    static_argnames = (static_argnames,) if isinstance(static_argnames, str) \
        else tuple(static_argnames)
    return fun, static_argnums, static_argnames, optimize


def load(path: Any, like: Lowered) -> Compiled:
    """The program of the SDFG file ``path`` (``.sdfg`` or ``.sdfgz``, e.g. edited in
    DaCe's viewer), compiled as the module of ``like`` (``hlo2dace.jit(f).lower(...)``),
    whose arrays it must read and write: called as ``like.compile()`` would be."""
    import dace

    if not isinstance(like, Lowered):
        raise ArgumentError(f"like must be a Lowered (hlo2dace.jit(f).lower(...)), not a "
                            f"{type(like).__name__}")
    try:
        sdfg = dace.SDFG.from_file(str(path))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ArgumentError(f"cannot load an SDFG from {path}: {type(exc).__name__}: "
                            f"{exc}") from None
    return like.compile(sdfg=sdfg)


def jit(fun: Callable | None = None, *, static_argnums: Sequence[int] = (),
        static_argnames: Sequence[str] = (), optimize: Options | str | None = None,
        polymorphic_shapes: Any = None, donate_argnums: Sequence[int] = (),
        in_shardings: Any = None, out_shardings: Any = None, keep_unused: bool = False,
        inline: bool = False, disable_passes: Sequence[str] = (),
        machine: Machine | None = None, transform: Callable[[Any], Any] | None = None,
        target: str | None = None):
    """A drop-in for ``jax.jit`` whose compiled code is generated by DaCe. ``optimize``:
    "none", "default" or "aggressive" (see ``hlo2dace.optimize``; default:
    ``$HLO2DACE_OPTIMIZE``, else "default"). ``polymorphic_shapes``: the specifications
    ``jax.export.symbolic_args_specs`` takes (``"(b, 128)"`` per argument): one compiled
    program serves every size of the dimensions they name. ``donate_argnums``: inside
    ``jax.jit``, results may be written into these arguments' buffers where the program
    provably can (``interop.py``); a direct call leaves its arguments as they are.
    ``in_shardings``/``out_shardings``: as ``jax.jit``'s, results carrying the shardings
    ``jax.jit`` gives them; a program over a mesh of ``n`` devices runs as ``n`` MPI ranks
    (``sharded.py``, docs/distributed.md). ``keep_unused`` and ``inline``: as
    ``jax.jit``'s (hlo2dace keeps every argument, used or not; ``inline`` applies where
    JAX traces the function into another, e.g. under ``jax.jit``). ``disable_passes``:
    passes of the pipeline not to run (``hlo2dace passes`` lists them); ``machine``: the
    machine model to tune for (``hlo2dace.machine``; default: this one). ``transform``: a
    function of the translated ``dace.SDFG``, run after the pipeline's SDFG passes (with
    ``optimize="none"``, on the plain lowering), that changes it in place (DaCe's
    transformations) or returns another; every program of the function is built from its
    result, under JAX's transformations too, and cached by its content
    (``user_sdfg.py``). ``target``: ``"cpu"`` (the default) or ``"cuda"`` (CUDA code
    through DaCe's GPU transformation, docs/gpu.md)."""
    if fun is None:
        return functools.partial(jit, static_argnums=static_argnums,
                                 static_argnames=static_argnames, optimize=optimize,
                                 polymorphic_shapes=polymorphic_shapes,
                                 donate_argnums=donate_argnums, in_shardings=in_shardings,
                                 out_shardings=out_shardings, keep_unused=keep_unused,
                                 inline=inline, disable_passes=disable_passes, machine=machine,
                                 transform=transform, target=target)
    return JitFunction(fun, static_argnums=static_argnums, static_argnames=static_argnames,
                       optimize=_options(optimize, disable_passes, machine, transform, target),
                       polymorphic_shapes=polymorphic_shapes, donate_argnums=donate_argnums,
                       in_shardings=in_shardings, out_shardings=out_shardings,
                       keep_unused=keep_unused, inline=inline)


__all__ = ["ArgumentError", "Compiled", "JitFunction", "JitLowered", "Lowered", "Traced",
           "compile_text", "jit", "load", "lower_text"]
