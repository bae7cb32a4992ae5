"""The disk cache of compiled programs. A cache entry is a folder ``<cache>/<key>/``
holding DaCe's build folder, ``meta.json`` and ``constants.npz``; it is built in a
temporary folder and renamed into place, so a crash never leaves a half-written entry, and
a file lock makes concurrent builders of one key build it once. ``meta.json`` lists the
SHA-256 of every other file of the entry and its own: an entry damaged since (a truncated
or corrupted file) is rebuilt, never loaded.

The cache location is ``$HLO2DACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/hlo2dace``, else
``~/.cache/hlo2dace``. A location that cannot be written (read-only, full, not a folder)
is replaced for the rest of the process by ``<tmp>/hlo2dace-<uid>``, with a CacheWarning;
so is one that another user could write (``folders.problem``), unless the cache is shared
on purpose (``$HLO2DACE_SHARED_CACHE``)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
import threading
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import compiled_sdfg, folders, sdfg_build
from ..errors import CompilationError
from ..folders import CacheWarning, file_lock
from .build import compile_sdfg, has_parallel_regions, toolchain
from .program import Program, SymbolicProgram, TensorSpec
from .settings import configure_dace

RUNTIME_VERSION = "2"


_process_lock = threading.Lock()


def cache_dir() -> Path:
    """The configured cache folder (``build`` may use another, see ``_fallbacks``)."""
    root = os.environ.get("HLO2DACE_CACHE_DIR")
    if root:
        return Path(root)
    return folders.user_cache() / "hlo2dace"


def cache_key(*parts: str) -> str:
    """The key of a binary made from ``parts`` (the module, the options, the flags) on this
    machine: with this runtime, DaCe version, compiler and CPU (``-march=native`` code
    need not run on another CPU of a shared cache folder)."""
    digest = hashlib.sha256()
    for part in (RUNTIME_VERSION, *toolchain(), *parts):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


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
            program = load(folder, built=False)
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
            signature = compile_sdfg(sdfg, staging / "build", cpu_flags, code_passes)
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
        program = _loaded[final] = load(final, built=True, sdfg=signature)
    return program


def load(folder: Path, built: bool, sdfg: Any = None) -> Program:
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
