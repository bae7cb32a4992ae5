"""A compiled SDFG with its calling convention (``Program``): argument checks and storage
conversion, results allocated once, the C call path, the thread count per call; for a
program with symbolic sizes, the sizes read from the arguments (``SymbolicProgram``)."""

from __future__ import annotations

import ctypes
import functools
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import ml_dtypes  # noqa: F401  (registers bfloat16, int4, ... as NumPy dtype names)
import numpy as np

from .. import callpath, compiled_sdfg, mpi
from ..errors import ArgumentError
from .settings import configure_dace
from .tuner import set_threads, thread_tuner


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
            if as_is is not None:
                if kind is np.ndarray:
                    if array.flags.c_contiguous and array.flags.aligned and \
                            array.shape == as_is[0] and array.dtype == as_is[1]:
                        converted.append(array if as_is[0] else array.reshape(1))
                        continue
                elif kind in exported and as_is[0]:
                    aval = array.aval  # one attribute; a jax.Array's shape and dtype are
                    if aval.shape == as_is[0] and aval.dtype == as_is[1]:  # properties
                        converted.append(array)
                        continue
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

    def takes_as_is(self, arrays: Sequence[Any]) -> bool:
        """Whether every one of ``arrays`` is a ``jax.Array`` that ``check`` passes on as it
        is. ``hlo2dace.jit`` asks once per signature: later calls with jax.Arrays of the
        same shapes and dtypes go to ``call_checked``, without the per-argument tests."""
        exported = exported_array_types() if self._native is not None else ()
        return len(arrays) == len(self.arguments) and all(
            type(array) in exported and as_is is not None and as_is[0]
            and array.aval.shape == as_is[0] and array.aval.dtype == as_is[1]
            for array, as_is in zip(arrays, self._as_is))

    def __call__(self, *arrays: Any) -> list[np.ndarray]:
        return self.call_checked(self.check(arrays))

    def call_checked(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        """The program on arguments already in storage layout (``check``'s, or those
        ``takes_as_is`` accepted)."""
        outputs = [_aligned_empty(shape, dtype) if aligned else np.empty(shape, dtype)
                   for shape, dtype, aligned in self._output_layouts]
        self._run(list(inputs), outputs)
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
            set_threads(threads)
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
                *entry.addresses, 0,
                tuple(position[name] if name in position else -1 - constants.index(name)
                      for name, _ in entry.arguments),
                tuple(self._constants[name] for name in constants))
            self._native = native.call

    def share_lock(self, address: int) -> bool:
        """Hold the pthread mutex at ``address`` (the one XLA's FFI handler takes for this
        program's state) around each direct call from now on, so that a direct call and
        an FFI call of the same program on two threads take turns; False where direct
        calls go through ctypes, which cannot take it."""
        with self._call_lock:
            if self._native is None:
                return False
            entry, handle, _, slots, constants = self._native_prefix
            self._native_prefix = (entry, handle, address, slots, constants)
            return True

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
