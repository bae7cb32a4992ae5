"""Builds SDFGs into shared libraries, caches them on disk, and calls them.

The runtime knows nothing about StableHLO: it receives an SDFG, the specs of its argument
and result arrays, and the hidden constant arrays. A cache entry is a folder
``<cache>/<key>/`` holding DaCe's build folder, ``meta.json`` and ``constants.npz``; it is
built in a temporary folder and renamed into place, so a crash never leaves a
half-written entry, and a file lock makes concurrent builders of one key build it once.
``meta.json`` lists the SHA-256 of every other file of the entry and its own: an entry
damaged since (a truncated or corrupted file) is rebuilt, never loaded.

The cache location is ``$HLO2DACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/hlo2dace``, else
``~/.cache/hlo2dace``. A location that cannot be written (read-only, full, not a folder)
is replaced for the rest of the process by ``<tmp>/hlo2dace-<uid>``, with a CacheWarning;
so is one that another user could write (``folders.problem``), unless the cache is shared
on purpose (``$HLO2DACE_SHARED_CACHE``).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import json
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import ml_dtypes  # noqa: F401  (registers bfloat16, int4, ... as NumPy dtype names)
import numpy as np

from . import callpath, compiled_sdfg, folders, mpi, sdfg_build
from .errors import ArgumentError, CompilationError
from .folders import CacheWarning, file_lock
from .optimize import shared_threads

# OpenMP workers that spin while waiting for the next parallel region take the cores from
# everything else on a busy machine: a 100-step stencil took 8 s instead of 50 ms next to
# two other processes. Sleeping workers cost microseconds per region on an idle machine.
# Read by libgomp when the first compiled library loads; the user's setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

RUNTIME_VERSION = "2"

_process_lock = threading.Lock()


__all__ = ["CacheWarning"]  # re-exported: the warning of the cache's folders


def cache_dir() -> Path:
    """The configured cache folder (``build`` may use another, see ``_fallbacks``)."""
    root = os.environ.get("HLO2DACE_CACHE_DIR")
    if root:
        return Path(root)
    return folders.user_cache() / "hlo2dace"


_configured = threading.local()


def configure_dace() -> None:
    """Set DaCe's options for this thread (DaCe's configuration is thread-local)."""
    if getattr(_configured, "done", False):
        return
    import dace

    folders.check_dace_config()
    dace.Config.set("compiler", "build_type", value="Release")
    dace.Config.set("debugprint", value=False)
    # DaCe's own build folder, should it need one besides each program's (``build``)
    dace.Config.set("default_build_folder", value=str(folders.native_dir() / "dace-build"))
    # arguments are made C-contiguous by TensorSpec.to_storage; reshaped ones are views
    dace.Config.set("compiler", "allow_view_arguments", value=True)
    _configured.done = True


@dataclass(frozen=True)
class TensorSpec:
    """One argument or result array: its data name in the SDFG, shape, the dtype users see
    and the dtype the compiled code stores."""

    name: str
    #: sizes; a string is an expression of the program's symbols (``SymbolicProgram``)
    shape: tuple[int | str, ...]
    dtype: str
    storage: str
    #: True: the storage holds the dtype's bit pattern (f16/bf16 as uint16), reinterpreted;
    #: False: values are converted (2- and 4-bit integers widened to a byte)
    bits: bool = True

    @property
    def storage_shape(self) -> tuple[int, ...]:
        return self.shape if self.shape else (1,)

    def to_storage(self, array: np.ndarray) -> np.ndarray:
        if (self.dtype == self.storage and self.shape and array.dtype == self.storage
                and array.flags.c_contiguous and array.flags.aligned):
            return array  # the common case: already what the compiled code reads
        dtype, storage = np.dtype(self.dtype), np.dtype(self.storage)
        if array.dtype != dtype:
            array = array.astype(dtype)
        if storage != dtype:
            array = array.view(storage) if self.bits else array.astype(storage)
        # C reads elements at their natural alignment: a misaligned view is copied
        return np.require(array, requirements=["C", "A"]).reshape(self.storage_shape)

    def from_storage(self, array: np.ndarray) -> np.ndarray:
        if self.dtype == self.storage:
            return array.reshape(self.shape)
        dtype, storage = np.dtype(self.dtype), np.dtype(self.storage)
        if storage != dtype:
            array = array.view(dtype) if self.bits else array.astype(dtype)
        return array.reshape(self.shape)


def cache_key(*parts: str) -> str:
    """The key of a binary made from ``parts`` (the module, the options, the flags) on this
    machine: with this runtime, DaCe version, compiler and CPU (``-march=native`` code
    need not run on another CPU of a shared cache folder)."""
    digest = hashlib.sha256()
    for part in (RUNTIME_VERSION, *machine(), *parts):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


@functools.lru_cache(maxsize=1)
def machine() -> tuple[str, ...]:
    """What besides the module and the flags decides the binary: DaCe's version, the CPU
    (model and instruction-set flags, as DaCe keys its own build caches), the C++ compiler
    (path and version), DaCe's compiler and linker settings, and the threads that code
    whose partition is fixed when it is built shares its work among."""
    import dace
    from dace.codegen import compiler, compiler_family

    configure_dace()  # first: the configuration names the compiler run below
    executable = compiler_family.host_compiler()
    try:
        version = subprocess.run([executable, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout.partition("\n")[0]
    except (OSError, subprocess.SubprocessError):
        version = "unknown"
    settings = [dace.Config.get(*path) for path in (
        ("compiler", "cpu", "executable"), ("compiler", "cpu", "libs"),
        ("compiler", "cpu", "openmp_sections"), ("compiler", "linker", "executable"),
        ("compiler", "linker", "args"))]
    return (dace.__version__, compiler.host_isa_id(), shutil.which(executable) or executable,
            version, json.dumps(settings), f"threads={shared_threads()}")


class ThreadTuner:
    """How many OpenMP threads a program's calls run with: one or all, whichever its own
    calls measure faster. A parallel region costs a wake-up of every worker, which on a
    machine with other work on its cores can take longer than the region's work, so a
    loop of small maps runs slower on all threads than on one; a large map runs faster.
    Which one wins depends on the program and on the load, so it is measured: the first
    calls alternate, each setting keeps the times of its last ``KEPT`` calls, and every
    ``PROBE_EVERY``-th call later runs with the setting not chosen, so that a change of
    load changes the choice. Results do not depend on the choice: every map's partition
    of the work is fixed when it is compiled."""

    KEPT = 5
    PROBE_EVERY = 32

    def __init__(self, most: int):
        self.settings = (1, most)
        #: per setting, the seconds of its last calls
        self.times: dict[int, list[float]] = {n: [] for n in self.settings}
        self._chosen = most
        self._calls = 0

    def next(self) -> int:
        """The thread count for the next call."""
        self._calls += 1
        one, most = (self.times[n] for n in self.settings)
        if len(one) < 3 or len(most) < 3:  # learning: alternate
            return self.settings[self._calls % 2]
        if self._calls % self.PROBE_EVERY == 0:
            return self.settings[self._chosen == 1]
        return self._chosen

    def record(self, threads: int, seconds: float) -> None:
        times = self.times[threads]
        times.append(seconds)
        if len(times) > self.KEPT:
            del times[0]
        (one, most), (one_times, most_times) = self.settings, self.times.values()
        if len(one_times) >= 3 and len(most_times) >= 3:  # the faster median; one on a tie
            self._chosen = one if _median(one_times) <= _median(most_times) else most


def _median(values: list[float]) -> float:
    """``statistics.median`` of a few values, without its checks and conversions: it runs
    after every call of a program with parallel regions."""
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


@functools.lru_cache(maxsize=1)
def _openmp() -> tuple[Any, int]:
    """libgomp (the compiled programs' OpenMP runtime), or None, and the most threads a
    parallel region may have (``OMP_NUM_THREADS``, else the cores), read before any
    program set its own."""
    try:
        library = ctypes.CDLL("libgomp.so.1")
    except OSError:
        return None, 1
    library.omp_set_num_threads.argtypes = [ctypes.c_int]
    return library, library.omp_get_max_threads()


#: the thread count last set in each Python thread (OpenMP's is per calling thread)
_team = threading.local()


def _set_threads(threads: int) -> None:
    if getattr(_team, "size", None) != threads:
        _openmp()[0].omp_set_num_threads(threads)
        _team.size = threads


def thread_tuner(parallel: bool) -> ThreadTuner | None:
    """A tuner for a program with parallel regions, where OpenMP can be told the thread count
    and more than one thread is allowed (``OMP_NUM_THREADS``); else None."""
    library, most = _openmp()
    return ThreadTuner(most) if parallel and library is not None and most > 1 else None


class Program:
    """A compiled SDFG with its calling convention."""

    def __init__(self, compiled: Any, arguments: Sequence[TensorSpec],
                 results: Sequence[TensorSpec], constants: dict[str, np.ndarray],
                 folder: Path, built: bool, in_place: Sequence[Sequence[int]] = (),
                 process_values: dict[str, dict] | None = None, parallel: bool = True):
        """Everything a call checks and allocates is prepared here, once, so that a call
        costs a few microseconds (see the attributes' comments)."""
        self._compiled = compiled
        # transients are allocated once per program (persistent) and DaCe's call wrapper
        # keeps state: one call at a time per program
        self._call_lock = threading.Lock()
        self.arguments = tuple(arguments)
        self.results = tuple(results)
        # what every call checks and allocates, made once
        #: the NumPy dtype of each argument
        self.argument_dtypes = [np.dtype(spec.dtype) for spec in self.arguments]
        #: per argument: the (shape, dtype) of a NumPy array passed as it is (a 0-d one as
        #: one element), or None where the compiled code stores another type (16-bit floats)
        self._as_is = [(spec.shape, np.dtype(spec.storage)) if spec.dtype == spec.storage
                       else None for spec in self.arguments]
        self._output_layouts = [(spec.storage_shape, np.dtype(spec.storage),
                                 int(np.prod(spec.storage_shape)) * np.dtype(spec.storage)
                                 .itemsize >= ALIGNED_BYTES) for spec in self.results
                                if all(isinstance(d, int) for d in spec.shape)]
        self._results_as_is = all(spec.dtype == spec.storage and spec.shape
                                  for spec in self.results)
        self._constants = constants
        #: hidden arguments that differ between the ranks of an MPI job (communicators,
        #: rank-indexed tables), bound at the first call (``mpi.process_value``): making a
        #: communicator is collective, and every rank calls a program it shares with others
        self.process_values = dict(process_values or {})
        #: per C argument: the position of its array in a call's arguments + results, or
        #: the pointer of a constant (None: not prepared yet; empty: DaCe's marshalling)
        self._slots: list[int | ctypes.c_void_p] | None = None
        #: the C call path (``callpath.py``) once prepared, else None: ctypes
        self._native = None
        #: the entry point, once the program is initialised (``_prepare``)
        self._entry: compiled_sdfg.EntryPoint | None = None
        self.folder = folder
        #: True if this process built the binary, False if it came from the disk cache
        self.built = built
        #: (argument, result) positions where the result can take the argument's buffer
        #: (``sdfg_build.written_in_place``), by argument, then result
        self.in_place = tuple(tuple(pair) for pair in in_place)
        #: the thread count of each call, for a program with parallel regions (else None)
        self.threads = thread_tuner(parallel)

    def check(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        """Validate call arguments against the specs; return them in storage layout. A
        C-contiguous NumPy array of the right shape and type passes as it is, checked in
        one test."""
        if len(arrays) != len(self.arguments):
            raise ArgumentError(f"expected {len(self.arguments)} arguments, got {len(arrays)}")
        converted = []
        exported = exported_array_types() if self._native is not None else ()
        for i, array in enumerate(arrays):
            as_is = self._as_is[i]
            kind = type(array)
            if as_is is not None and (kind is np.ndarray and array.flags.c_contiguous
                                      and array.flags.aligned or kind in exported and as_is[0]
                                      ) and array.shape == as_is[0] and array.dtype == as_is[1]:
                converted.append(array if as_is[0] else array.reshape(1))
            else:
                converted.append(self._convert(i, array))
        return converted

    def _convert(self, i: int, array: Any, spec: TensorSpec | None = None) -> np.ndarray:
        """Argument ``i`` checked against ``spec`` (default: its spec; a symbolic program
        passes one at the call's sizes) and converted to its storage layout."""
        spec = spec or self.arguments[i]
        dtype = np.dtype(spec.dtype)
        try:
            array = np.asarray(array)
        except Exception as exc:  # a ragged list, a deleted jax.Array, a failing __array__
            raise ArgumentError(f"argument {i}: expected an array of shape {spec.shape} and "
                                f"dtype {dtype.name}, got a {type(array).__name__} that NumPy "
                                f"cannot read as one ({type(exc).__name__}: {exc})") from None
        if array.shape != spec.shape:
            raise ArgumentError(f"argument {i}: expected shape {spec.shape}, got "
                                f"{tuple(array.shape)}")
        if array.dtype != dtype:
            if array.dtype.newbyteorder("=") != dtype:  # the other byte order: same values
                raise ArgumentError(f"argument {i}: expected dtype "
                                    f"{np.dtype(spec.dtype).name}, got {array.dtype.name}")
            array = array.astype(dtype)
        return spec.to_storage(array)

    #: the symbols the C entry point takes after the arrays (``SymbolicProgram``)
    symbol_names: tuple[str, ...] = ()

    def __call__(self, *arrays: Any) -> list[np.ndarray]:
        inputs = self.check(arrays)
        outputs = [_aligned_empty(shape, dtype) if aligned else np.empty(shape, dtype)
                   for shape, dtype, aligned in self._output_layouts]
        self._run(inputs, outputs)
        if self._results_as_is:
            return outputs
        return [spec.from_storage(out) for spec, out in zip(self.results, outputs)]

    def _run(self, inputs: list, outputs: list, symbols: Sequence[int] = ()) -> None:
        """Run the program on ``inputs`` and ``outputs`` (storage layout) with the
        symbols' values ``symbols``."""
        buffers = inputs + outputs + list(symbols)
        with self._call_lock:
            first = self._slots is None
            if first:
                self._prepare(buffers)
            tuner = self.threads
            if tuner is None or first:  # the first call also allocates: not a sample
                self._call(inputs, outputs, symbols, buffers)
                return
            threads = tuner.next()
            _set_threads(threads)
            start = time.perf_counter()
            self._call(inputs, outputs, symbols, buffers)
            tuner.record(threads, time.perf_counter() - start)

    def _call(self, inputs: list, outputs: list, symbols: Sequence[int], buffers: list) -> None:
        """One call of the entry point (the caller holds the call lock)."""
        if self._native is not None:
            try:
                self._native(*self._native_prefix, *buffers)
            except (BufferError, TypeError):  # a jax.Array without a host buffer
                buffers = ([self._convert(i, a) for i, a in enumerate(inputs)] + outputs
                           + list(symbols))
                self._native(*self._native_prefix, *buffers)
        elif self._slots:  # ctypes: pointers as ints, symbols as their values
            self._entry.function(self._entry.handle, *[slot if not isinstance(slot, int)
                                        else buffers[slot] if slot >= self._first_symbol
                                        else buffers[slot].__array_interface__["data"][0]
                                        for slot in self._slots])
        else:  # arguments that are not all arrays: DaCe's own marshalling
            configure_dace()  # this thread's DaCe settings check the arguments
            self._compiled(**self._named(buffers))

    def _named(self, buffers: list) -> dict[str, Any]:
        names = [spec.name for spec in self.arguments + self.results] + list(self.symbol_names)
        return {**self._constants, **dict(zip(names, buffers))}

    def _prepare(self, buffers: list[np.ndarray]) -> None:
        """Initialise the library through DaCe once, then call its entry point directly:
        each argument of the C signature is a pointer, taken from the call's arrays (their
        position in ``buffers``) or, for constants, made once here."""
        configure_dace()  # the settings are per thread: a first call from a new one
        for name, spec in self.process_values.items():
            self._constants[name] = np.array([mpi.process_value(spec)], np.int64)
        entry = self._entry = compiled_sdfg.entry_point(self._compiled, self._named(buffers))
        names = [spec.name for spec in self.arguments + self.results] + list(self.symbol_names)
        position = {name: k for k, name in enumerate(names)}
        #: positions from here on in a call's buffers are symbols' values, not arrays
        self._first_symbol = len(names) - len(self.symbol_names)
        slots: list[int | ctypes.c_void_p] = []
        for name, is_array in entry.arguments:
            if not (is_array or name in self.symbol_names):
                self._slots = []
                return
            slots.append(position[name] if name in position else
                         ctypes.c_void_p(self._constants[name].ctypes.data))
        # pointers as plain ints: ctypes converts them without c_void_p objects
        entry.function.argtypes = [ctypes.c_void_p] * (1 + len(slots))
        self._slots = slots
        native = callpath.native()
        if native is not None and len(slots) <= native.MAX_POINTERS:
            constants = [name for name, _ in entry.arguments if name not in position]
            self._native_prefix = (
                *entry.addresses,
                tuple(position[name] if name in position else -1 - constants.index(name)
                      for name, _ in entry.arguments),
                tuple(self._constants[name] for name in constants))
            self._native = native.call

    def c_entry(self) -> tuple[int, int, tuple[int, ...], tuple[int, ...]] | None:
        """The direct call for callers outside Python (XLA's FFI, ``interop.py``): the
        addresses of the entry point and of the program's state; per C argument after the
        state, the position of its array in arguments + results, or -1 - j for constant
        j; the constants' addresses (alive as long as this Program). None where the C
        signature is not all pointers. Prepares the program on scratch arrays if needed."""
        with self._call_lock:
            if self._slots is None:
                self._prepare([np.empty(spec.storage_shape, np.dtype(spec.storage))
                               for spec in self.arguments + self.results])
        if not self._slots:
            return None
        constants = [slot.value for slot in self._slots if not isinstance(slot, int)]
        slots, j = [], 0
        for slot in self._slots:
            slots.append(slot if isinstance(slot, int) else -1 - j)
            j += not isinstance(slot, int)
        return (*self._entry.addresses, tuple(slots), tuple(constants))


class Symbols:
    """Reads a program's symbols from its arguments' shapes and checks the module's
    conditions on them (JAX's shape assertions, dimensions its ops need equal)."""

    def __init__(self, arguments: Sequence[TensorSpec], symbols: Sequence[dict],
                 checks: Sequence[dict]):
        self.arguments = tuple(arguments)
        self.symbols = tuple(symbols)
        self.checks = tuple(checks)
        self.names = [s["name"] for s in self.symbols]
        self._conditions = [(_expression(c["condition"], self.names), c["message"],
                             [_expression(v, self.names) for v in c["values"]])
                            for c in self.checks]

    def values(self, arrays: Sequence[Any]) -> dict[str, int]:
        """The symbols' values for a call with ``arrays``; raises ArgumentError if the
        shapes break a condition of the module."""
        values = {}
        for source in self.symbols:
            i = source["argument"]
            shape = tuple(getattr(arrays[i], "shape", None) or np.shape(arrays[i]))
            expected = self.arguments[i].shape
            if len(shape) != len(expected):
                raise ArgumentError(f"argument {i}: expected {len(expected)} dimensions "
                                    f"{_pretty(expected)}, got shape {shape}")
            values[source["name"]] = int(shape[source["dim"]])
        sizes = list(values.values())
        for condition, message, fields in self._conditions:
            if not condition(*sizes):
                raise ArgumentError(message.format(*(int(f(*sizes)) for f in fields)))
        return values


class SymbolicProgram(Program):
    """A program whose sizes are symbols: each call reads them from its arguments' shapes
    (``Symbols``) and passes them to the compiled code, which allocates its temporaries at
    those sizes."""

    def __init__(self, *args, symbols: Sequence[dict], checks: Sequence[dict], **kwargs):
        super().__init__(*args, **kwargs)
        self.symbols = Symbols(self.arguments, symbols, checks)
        names = self.symbols.names
        self.symbol_names = tuple(names)
        self._sizes = [(spec, [_expression(d, names) for d in spec.shape])
                       for spec in (*self.arguments, *self.results)]
        self._specs_at: dict[tuple[int, ...], list[TensorSpec]] = {}

    def __call__(self, *arrays: Any) -> list[np.ndarray]:
        if len(arrays) != len(self.arguments):
            raise ArgumentError(f"expected {len(self.arguments)} arguments, got {len(arrays)}")
        values = self.symbols.values(arrays)
        sizes = tuple(values.values())
        specs = self._specs_at.get(sizes)
        if specs is None:  # the specs at these sizes, made once
            if len(self._specs_at) >= 256:
                self._specs_at.clear()
            specs = self._specs_at[sizes] = [
                TensorSpec(spec.name, tuple(int(f(*sizes)) for f in shape), spec.dtype,
                           spec.storage, spec.bits) for spec, shape in self._sizes]
        inputs = [self._convert(i, array, spec)
                  for i, (spec, array) in enumerate(zip(specs, arrays))]
        results = specs[len(inputs):]
        outputs = [np.empty(spec.storage_shape, np.dtype(spec.storage)) for spec in results]
        self._run(inputs, outputs, sizes)
        return [spec.from_storage(out) for spec, out in zip(results, outputs)]


def _expression(text: int | str, names: Sequence[str]):
    """A function of the symbols' values that computes ``text`` (a size or condition)."""
    if isinstance(text, int):
        return lambda *values: text
    import sympy

    symbols = [sympy.Symbol(n) for n in names]
    expression = sympy.sympify(text, locals=dict(zip(names, symbols)))
    return sympy.lambdify(symbols, expression, "math")


def _pretty(shape: Sequence[int | str]) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


@functools.lru_cache(maxsize=1)
def exported_array_types() -> tuple[type, ...]:
    """Array types besides NumPy's whose host buffer the C call path reads directly."""
    try:
        from jax._src.array import ArrayImpl
    except ImportError:
        return ()
    return (ArrayImpl,)


#: results this large are allocated on 64-byte boundaries: jaxlib then wraps them in a
#: jax.Array without a copy (smaller ones it copies faster than it aliases them)
ALIGNED_BYTES = 1 << 16


def _aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    size = math.prod(shape) * dtype.itemsize  # np.prod costs 3 us a call
    raw = np.empty(size + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + size].view(dtype).reshape(shape)


def _load(folder: Path, built: bool, sdfg: Any = None) -> Program:
    """Load an entry whose files match their checksums; ``sdfg`` (the program's
    signature, ``sdfg_build.signature_sdfg``), when the caller has it, spares reading
    program.sdfgz."""
    configure_dace()
    meta = _checked_meta(folder)
    with np.load(folder / "constants.npz") as data:
        constants = {k: data[k] for k in data.files}
    compiled = compiled_sdfg.load(folder / "build", sdfg=sdfg)
    def specs(entries):
        return [TensorSpec(**{**e, "shape": tuple(e["shape"])}) for e in entries]

    arguments = (compiled, specs(meta["arguments"]), specs(meta["results"]), constants,
                 folder, built, meta["in_place"], meta.get("process_values", {}),
                 meta["parallel"])
    if meta.get("symbols"):
        return SymbolicProgram(*arguments, symbols=meta["symbols"], checks=meta["checks"])
    return Program(*arguments)


#: programs loaded by this process, by cache folder: a library is loaded once per process
_loaded: dict[Path, Program] = {}


def lookup(key: str, warn: bool = True) -> Program | None:
    """The cached program of ``key``, or None: also for an entry that is damaged (a file
    that does not match its checksum, a library that does not load), which ``build``
    replaces (with a CacheWarning if ``warn``)."""
    for root in _roots():
        folder = root / key
        if folder in _loaded:
            return _loaded[folder]
        if not (folder / "meta.json").is_file():
            continue
        try:
            program = _load(folder, built=False)
        except Exception as exc:
            if warn:
                warnings.warn(f"hlo2dace: the cache entry {folder} is damaged "
                              f"({type(exc).__name__}: {exc}); rebuilding it", CacheWarning,
                              stacklevel=2)
            continue
        _loaded[folder] = program
        return program
    return None


def _roots() -> list[Path]:
    """Where entries are looked up: the configured folder (unless another user could
    write it), and its replacement if it has one."""
    root = cache_dir()
    if root not in _fallbacks:
        reason = _distrust(root)
        if reason is not None:
            _replace(root, reason, stacklevel=4)
    if root in _untrusted:
        return [_fallbacks[root]]
    return [root, _fallbacks[root]] if root in _fallbacks else [root]


#: configured cache folders that could not be written, or that another user could write
#: (``_untrusted``) -> the folders used instead
_fallbacks: dict[Path, Path] = {}
_untrusted: set[Path] = set()


def _distrust(root: Path) -> str | None:
    """Why another user could put a library into the cache folder ``root``, or None
    (also for one that does not exist yet, or one shared on purpose)."""
    if folders.shared_cache_allowed() or not os.path.lexists(root):
        return None
    return folders.problem(root)


def _replace(root: Path, reason: str, stacklevel: int) -> Path:
    """Use a private folder instead of the untrusted cache folder ``root``."""
    _untrusted.add(root)
    fallback = _fallbacks[root] = _fallback_dir()
    warnings.warn(f"hlo2dace: not using the cache folder {root}: {reason}; this process "
                  f"keeps its compiled programs in {fallback} (set {folders.SHARED_CACHE_OPTION}"
                  f"=1 to trust a cache folder shared on purpose)", CacheWarning,
                  stacklevel=stacklevel)
    return fallback


def _fallback_dir() -> Path:
    """``<tmp>/hlo2dace-<uid>`` if it is this user's folder and only theirs to write
    (another user could plant libraries in it), else a new private folder."""
    return folders.private_folder(Path(tempfile.gettempdir()) / f"hlo2dace-{os.getuid()}",
                                  "the temporary cache folder")


#: what a build needs free besides its constants (a small program takes under a MB)
_MIN_FREE_BYTES = 64 << 20
_UNWRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT,
               errno.ENOTDIR, errno.EEXIST}
#: the same, as the compiler's messages say it
_UNWRITABLE_TEXT = ("No space left on device", "Disk quota exceeded", "Read-only file system",
                    "Permission denied")


def _unwritable(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) says that the cache folder cannot be written."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in _UNWRITABLE:
            return True
        if any(text in str(exc) for text in _UNWRITABLE_TEXT):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _meta_checksum(meta: dict) -> str:
    body = {k: v for k, v in meta.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _checked_meta(folder: Path) -> dict:
    """``meta.json`` of an entry, once it and every file it lists match their checksums
    (files added since, such as DaCe's copies of a library loaded twice, are ignored)."""
    meta = json.loads((folder / "meta.json").read_text())
    if not isinstance(meta, dict) or meta.get("checksum") != _meta_checksum(meta):
        raise ValueError("meta.json does not match its checksum")
    for name, expected in meta["files"].items():
        if _digest(folder / name) != expected:
            raise ValueError(f"{name} does not match its checksum")
    return meta


def build(sdfg: Any, key: str, arguments: Sequence[TensorSpec], results: Sequence[TensorSpec],
          constants: dict[str, np.ndarray], cpu_flags: str, symbols: Sequence[dict] = (),
          checks: Sequence[dict] = (), process_values: dict[str, dict] | None = None,
          code_passes: frozenset[str] | None = None) -> Program:
    """Compile ``sdfg`` with the C++ flags ``cpu_flags`` and the code stage's passes
    ``code_passes`` (``sdfg_build.CODE_PASSES``; None: all) into the cache entry ``key`` (or
    load it if another process did). ``symbols``: how to read each symbol from the
    arguments (name, argument, dim); ``checks``: conditions on them (see
    ``SymbolicProgram``); ``process_values``: hidden 64-bit arguments each process binds
    when it loads the program (``mpi.process_value``). If the cache folder cannot be
    written, the rest of the process uses a temporary one (``_fallback_dir``), with a
    CacheWarning."""
    process_values = process_values or {}
    configured = cache_dir()
    _roots()  # replaces an untrusted folder
    root = _fallbacks.get(configured, configured)
    needed = _MIN_FREE_BYTES + sum(c.nbytes for c in constants.values())
    try:
        return _build_in(root, needed, sdfg, key, arguments, results, constants, cpu_flags,
                         symbols, checks, process_values, code_passes)
    except _Untrusted as exc:  # made just now, in a folder that another user could write
        root = _replace(configured, str(exc), stacklevel=3)
        return _build_in(root, needed, sdfg, key, arguments, results, constants, cpu_flags,
                         symbols, checks, process_values, code_passes)
    except (OSError, CompilationError) as exc:
        if root != configured or not _unwritable(exc):
            raise _as_compilation_error(exc) from exc
        reason = exc
    fallback = _fallbacks[configured] = _fallback_dir()
    warnings.warn(f"hlo2dace: cannot write the cache folder {configured} ({reason}); this "
                  f"process keeps its compiled programs in {fallback}", CacheWarning,
                  stacklevel=2)
    try:
        return _build_in(fallback, needed, sdfg, key, arguments, results, constants,
                         cpu_flags, symbols, checks, process_values, code_passes)
    except OSError as exc:
        raise _as_compilation_error(exc) from exc


def _in_place(sdfg: Any, arguments: Sequence[TensorSpec], results: Sequence[TensorSpec]
              ) -> list[list[int]]:
    """The positions (argument, result) of arrays of one shape and type where the result
    can take the argument's buffer (``sdfg_build.written_in_place``)."""
    pairs = [(i, j) for i, a in enumerate(arguments) for j, r in enumerate(results)
             if a.shape and (a.shape, a.dtype, a.storage) == (r.shape, r.dtype, r.storage)]
    found = set(sdfg_build.written_in_place(
        sdfg, [(arguments[i].name, results[j].name) for i, j in pairs]))
    return [[i, j] for i, j in pairs if (arguments[i].name, results[j].name) in found]


class _Untrusted(Exception):
    """The cache folder, just made, is in a folder that another user could write."""


def _as_compilation_error(exc: Exception) -> CompilationError:
    if isinstance(exc, CompilationError):
        return exc
    return CompilationError(f"cannot write a cache entry: {type(exc).__name__}: {exc}")


def _build_in(root: Path, needed: int, sdfg: Any, key: str, arguments: Sequence[TensorSpec],
              results: Sequence[TensorSpec], constants: dict[str, np.ndarray],
              cpu_flags: str, symbols: Sequence[dict], checks: Sequence[dict],
              process_values: dict[str, dict], code_passes: frozenset[str] | None) -> Program:
    """``build`` in the cache folder ``root``; OSError if ``root`` cannot be written or
    has less than ``needed`` bytes free."""
    if not root.exists():
        folders.make_private(root)
        reason = _distrust(root)
        if reason is not None:
            raise _Untrusted(reason)
    free = shutil.disk_usage(root).free
    if free < needed:
        raise OSError(errno.ENOSPC, f"{free:,} bytes free in {root}, a build needs {needed:,}")
    with _process_lock, file_lock(root / f"{key}.lock"):
        cached = lookup(key, warn=False)
        if cached is not None:
            return cached
        staging = Path(tempfile.mkdtemp(prefix=f"{key}.", suffix=".tmp", dir=root))
        try:
            sdfg.name = f"h2d_{key[:16]}"
            # read before the build, which changes the SDFG
            in_place, parallel = _in_place(sdfg, arguments, results), has_parallel_regions(sdfg)
            signature = _compile(sdfg, staging / "build", cpu_flags, code_passes)
            # the object files (named after the staging folder) serve no later build
            shutil.rmtree(staging / "build" / "build" / "CMakeFiles", ignore_errors=True)
            np.savez(staging / "constants.npz", **constants)
            meta = {"arguments": [asdict(a) for a in arguments],
                    "results": [asdict(r) for r in results],
                    "symbols": list(symbols), "checks": list(checks),
                    "in_place": in_place,
                    "process_values": process_values,
                    "parallel": parallel,
                    "files": {str(path.relative_to(staging)): _digest(path)
                              for path in sorted(staging.rglob("*")) if path.is_file()}}
            meta["checksum"] = _meta_checksum(meta)
            (staging / "meta.json").write_text(json.dumps(meta))
            if not folders.shared_cache_allowed():
                folders.make_files_private(staging)
            final = root / key
            shutil.rmtree(final, ignore_errors=True)
            os.rename(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        sdfg.build_folder = str(final / "build")
        program = _loaded[final] = _load(final, built=True, sdfg=signature)
    return program


def _compile(sdfg: Any, build_folder: Path, cpu_flags: str,
             code_passes: frozenset[str] | None = None) -> Any:
    """DaCe's code generation and C++ build of ``sdfg`` in ``build_folder``
    (``sdfg_build.build``); returns the SDFG that loads the library (its signature)."""
    import dace

    configure_dace()
    dace.Config.set("compiler", "cpu", "args", value=cpu_flags)
    try:
        with folders.dace_build_environment():
            return sdfg_build.build(sdfg, build_folder, passes=code_passes)
    except Exception as exc:
        raise CompilationError(f"DaCe could not compile the translated program: "
                               f"{type(exc).__name__}: {exc}") from exc


def build_uncached(sdfg: Any, folder: Path, arguments: Sequence[TensorSpec],
                   results: Sequence[TensorSpec], constants: dict[str, np.ndarray],
                   cpu_flags: str, code_passes: frozenset[str] | None = None) -> Program:
    """Compile ``sdfg`` (sizes known) into ``folder``, a private folder of the caller's,
    outside the cache, and load it: for programs that write files beside their binary,
    such as the profiler's instrumented builds (DaCe writes their reports into
    ``<folder>/build/perf``, a path it compiles into the code)."""
    parallel = has_parallel_regions(sdfg)  # before the build, which changes the SDFG
    signature = _compile(sdfg, folder / "build", cpu_flags, code_passes)
    return Program(compiled_sdfg.load(folder / "build", sdfg=signature), arguments, results,
                   constants, folder, built=True, parallel=parallel)


def has_parallel_regions(sdfg: Any) -> bool:
    """Whether any map of ``sdfg`` may run on more than one thread, or any tasklet opens
    a parallel region of its own (a product shared out among the threads)."""
    import dace

    return any(isinstance(node, dace.nodes.MapEntry)
               and node.map.schedule != dace.ScheduleType.Sequential
               or isinstance(node, dace.nodes.Tasklet)
               and "#pragma omp parallel" in node.code.as_string
               for node, _ in sdfg.all_nodes_recursive())
