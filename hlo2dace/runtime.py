"""Builds SDFGs into shared libraries, caches them on disk, and calls them.

The runtime knows nothing about StableHLO: it receives an SDFG, the specs of its argument
and result arrays, and the hidden constant arrays. A cache entry is a folder
``<cache>/<key>/`` holding DaCe's build folder, ``meta.json`` and ``constants.npz``; it is
built in a temporary folder and renamed into place, so a crash never leaves a
half-written entry, and a file lock makes concurrent builders of one key build it once.

The cache location is ``$HLO2DACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/hlo2dace``, else
``~/.cache/hlo2dace``.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import hashlib
import json
import os
import shutil
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import ml_dtypes  # noqa: F401  (registers bfloat16, int4, ... as NumPy dtype names)
import numpy as np

from . import callpath
from .errors import ArgumentError, CompilationError

# OpenMP workers that spin while waiting for the next parallel region take the cores from
# everything else on a busy machine: a 100-step stencil took 8 s instead of 50 ms next to
# two other processes. Sleeping workers cost microseconds per region on an idle machine.
# Read by libgomp when the first compiled library loads; the user's setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

RUNTIME_VERSION = "1"

_process_lock = threading.Lock()


def cache_dir() -> Path:
    root = os.environ.get("HLO2DACE_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hlo2dace"


_configured = threading.local()


def configure_dace() -> None:
    """Set DaCe's options for this thread (DaCe's configuration is thread-local)."""
    if getattr(_configured, "done", False):
        return
    import dace

    dace.Config.set("compiler", "build_type", value="Release")
    dace.Config.set("debugprint", value=False)
    # arguments are made C-contiguous by TensorSpec.to_storage; reshaped ones are views
    dace.Config.set("compiler", "allow_view_arguments", value=True)
    _configured.done = True


@dataclass(frozen=True)
class TensorSpec:
    """One argument or result array: its data name in the SDFG, shape, the dtype users see
    and the dtype the compiled code stores."""

    name: str
    shape: tuple[int, ...]
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
                and array.flags.c_contiguous):
            return array  # the common case: already what the compiled code reads
        dtype, storage = np.dtype(self.dtype), np.dtype(self.storage)
        if array.dtype != dtype:
            array = array.astype(dtype)
        if storage != dtype:
            array = array.view(storage) if self.bits else array.astype(storage)
        return np.ascontiguousarray(array).reshape(self.storage_shape)

    def from_storage(self, array: np.ndarray) -> np.ndarray:
        dtype, storage = np.dtype(self.dtype), np.dtype(self.storage)
        if storage != dtype:
            array = array.view(dtype) if self.bits else array.astype(dtype)
        return array.reshape(self.shape)


def cache_key(*parts: str) -> str:
    import dace

    digest = hashlib.sha256()
    for part in (RUNTIME_VERSION, dace.__version__, *parts):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


@contextlib.contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Program:
    """A compiled SDFG with its calling convention."""

    def __init__(self, compiled: Any, arguments: Sequence[TensorSpec],
                 results: Sequence[TensorSpec], constants: dict[str, np.ndarray],
                 folder: Path, built: bool):
        self._compiled = compiled
        # transients are allocated once per program (persistent) and DaCe's call wrapper
        # keeps state: one call at a time per program
        self._call_lock = threading.Lock()
        self.arguments = tuple(arguments)
        self.results = tuple(results)
        # what every call checks and allocates, made once
        #: the NumPy dtype of each argument
        self.argument_dtypes = [np.dtype(spec.dtype) for spec in self.arguments]
        #: per argument: the (shape, dtype) of a NumPy array passed as it is, or None
        #: where the compiled code stores another type (16-bit floats, 0-d arrays)
        self._as_is = [(spec.shape, np.dtype(spec.storage))
                       if spec.dtype == spec.storage and spec.shape else None
                       for spec in self.arguments]
        self._output_layouts = [(spec.storage_shape, np.dtype(spec.storage),
                                 int(np.prod(spec.storage_shape)) * np.dtype(spec.storage)
                                 .itemsize >= ALIGNED_BYTES) for spec in self.results]
        self._results_as_is = all(spec.dtype == spec.storage and spec.shape
                                  for spec in self.results)
        self._constants = constants
        #: per C argument: the position of its array in a call's arguments + results, or
        #: the pointer of a constant (None: not prepared yet; empty: DaCe's marshalling)
        self._slots: list[int | ctypes.c_void_p] | None = None
        #: the C call path (``callpath.py``) once prepared, else None: ctypes
        self._native = None
        self.folder = folder
        #: True if this process built the binary, False if it came from the disk cache
        self.built = built

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
            if (as_is is not None and (kind is np.ndarray and array.flags.c_contiguous
                                       or kind in exported)
                    and array.shape == as_is[0] and array.dtype == as_is[1]):
                converted.append(array)
            else:
                converted.append(self._convert(i, array))
        return converted

    def _convert(self, i: int, array: Any) -> np.ndarray:
        spec, dtype = self.arguments[i], self.argument_dtypes[i]
        array = np.asarray(array)
        if array.shape != spec.shape:
            raise ArgumentError(f"argument {i}: expected shape {spec.shape}, got "
                                f"{tuple(array.shape)}")
        if array.dtype != dtype:
            raise ArgumentError(f"argument {i}: expected dtype {np.dtype(spec.dtype).name}, "
                                f"got {array.dtype.name}")
        return spec.to_storage(array)

    def __call__(self, *arrays: Any) -> list[np.ndarray]:
        inputs = self.check(arrays)
        outputs = [_aligned_empty(shape, dtype) if aligned else np.empty(shape, dtype)
                   for shape, dtype, aligned in self._output_layouts]
        buffers = inputs + outputs
        with self._call_lock:
            if self._slots is None:
                self._prepare(buffers)
            if self._native is not None:
                try:
                    self._native(*self._native_prefix, *buffers)
                except (BufferError, TypeError):  # a jax.Array without a host buffer
                    buffers = [self._convert(i, a) for i, a in enumerate(inputs)] + outputs
                    self._native(*self._native_prefix, *buffers)
            elif self._slots:
                self._cfunc(self._handle, *[buffers[slot].__array_interface__["data"][0]
                                            if isinstance(slot, int) else slot
                                            for slot in self._slots])
            else:  # arguments that are not all arrays: DaCe's own marshalling
                self._compiled(**self._named(buffers))
        if self._results_as_is:
            return outputs
        return [spec.from_storage(out) for spec, out in zip(self.results, outputs)]

    def _named(self, buffers: list[np.ndarray]) -> dict[str, Any]:
        names = [spec.name for spec in self.arguments + self.results]
        return {**self._constants, **dict(zip(names, buffers))}

    def _prepare(self, buffers: list[np.ndarray]) -> None:
        """Initialise the library through DaCe once, then call its entry point directly:
        each argument of the C signature is a pointer, taken from the call's arrays (their
        position in ``buffers``) or, for constants, made once here."""
        import dace

        compiled = self._compiled
        compiled.initialize(**self._named(buffers))
        position = {spec.name: k for k, spec in enumerate(self.arguments + self.results)}
        slots: list[int | ctypes.c_void_p] = []
        for name in compiled._sig:
            if not isinstance(compiled._typedict[name], dace.data.Array):
                self._slots = []
                return
            slots.append(position[name] if name in position else
                         ctypes.c_void_p(self._constants[name].ctypes.data))
        self._cfunc, self._handle = compiled._cfunc, compiled._libhandle
        # pointers as plain ints: ctypes converts them without c_void_p objects
        self._cfunc.argtypes = [ctypes.c_void_p] * (1 + len(slots))
        self._slots = slots
        native = callpath.native()
        if native is not None and len(slots) <= native.MAX_POINTERS:
            constants = [name for name in compiled._sig if name not in position]
            self._native_prefix = (
                ctypes.cast(self._cfunc, ctypes.c_void_p).value, self._handle.value,
                tuple(position[name] if name in position else -1 - constants.index(name)
                      for name in compiled._sig),
                tuple(self._constants[name] for name in constants))
            self._native = native.call


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
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(size + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + size].view(dtype).reshape(shape)


def _load(folder: Path, built: bool, sdfg: Any = None) -> Program:
    """Load an entry; ``sdfg``, when the caller has it, spares reading program.sdfgz."""
    from dace.codegen.compiler import load_precompiled_sdfg

    configure_dace()
    meta = json.loads((folder / "meta.json").read_text())
    with np.load(folder / "constants.npz") as data:
        constants = {k: data[k] for k in data.files}
    compiled = load_precompiled_sdfg(folder / "build", sdfg=sdfg)
    def specs(entries):
        return [TensorSpec(**{**e, "shape": tuple(e["shape"])}) for e in entries]

    return Program(compiled, specs(meta["arguments"]), specs(meta["results"]), constants,
                   folder, built)


#: programs loaded by this process, by cache folder: a library is loaded once per process
_loaded: dict[Path, Program] = {}


def lookup(key: str) -> Program | None:
    """The cached program of ``key``, or None."""
    folder = cache_dir() / key
    if folder in _loaded:
        return _loaded[folder]
    if (folder / "meta.json").is_file():
        try:
            program = _load(folder, built=False)
        except Exception:  # a damaged entry: rebuild it
            shutil.rmtree(folder, ignore_errors=True)
            return None
        _loaded[folder] = program
        return program
    return None


def build(sdfg: Any, key: str, arguments: Sequence[TensorSpec], results: Sequence[TensorSpec],
          constants: dict[str, np.ndarray], cpu_flags: str) -> Program:
    """Compile ``sdfg`` with the C++ flags ``cpu_flags`` into the cache entry ``key`` (or
    load it if another process did)."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with _process_lock, _file_lock(root / f"{key}.lock"):
        cached = lookup(key)
        if cached is not None:
            return cached
        staging = Path(tempfile.mkdtemp(prefix=f"{key}.", suffix=".tmp", dir=root))
        try:
            import dace

            configure_dace()
            dace.Config.set("compiler", "cpu", "args", value=cpu_flags)
            sdfg.name = f"h2d_{key[:16]}"
            sdfg.build_folder = str(staging / "build")
            try:
                sdfg.compile(validate=True, return_program_handle=False)
            except Exception as exc:
                raise CompilationError(f"DaCe could not compile the translated program: "
                                       f"{type(exc).__name__}: {exc}") from exc
            np.savez(staging / "constants.npz", **constants)
            meta = {"arguments": [asdict(a) for a in arguments],
                    "results": [asdict(r) for r in results]}
            (staging / "meta.json").write_text(json.dumps(meta))
            final = root / key
            shutil.rmtree(final, ignore_errors=True)
            os.rename(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        sdfg.build_folder = str(final / "build")
        program = _loaded[final] = _load(final, built=True, sdfg=sdfg)
    return program
