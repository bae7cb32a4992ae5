"""The folders from which hlo2dace and DaCe load code, and whether to trust them.

A compiled program is a shared library that the process loads; DaCe's build caches hold
precompiled headers included into every build and recorded compile commands that it runs
again; the native helpers (``callpath.py``, ``interop.py``) are libraries too. Whoever can
write one of those folders can run code as the user who compiles next. So every such folder
is checked before use (``problem``): it must be owned by the user and writable by nobody
else, and so must each parent up to one the user owns (root-owned parents must be writable
by nobody else, unless they are sticky, like ``/tmp``). A folder that fails is replaced by
a fresh private one, with a ``CacheWarning`` that names it and says why. Only the program
cache may be shared on purpose (``$HLO2DACE_SHARED_CACHE=1``, see the README).

DaCe itself would keep its build caches in ``/dev/shm/dace_build_cache_<user name>``, a
name anyone can create first; hlo2dace points it at a folder inside its own private one
while it builds (``dace_build_environment``), and refuses a ``.dace.conf`` in the working
folder (which DaCe reads before any other) that another user could have written
(``check_dace_config``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
import threading
import warnings
from pathlib import Path


class CacheWarning(UserWarning):
    """A cache folder is not used as configured: a damaged entry is rebuilt, or a folder
    that cannot be written, or that another user could write, is replaced."""


#: set to 1 to use a program cache that other users can write (a team's cache on a shared
#: file system): it trusts all of them to run code as you
SHARED_CACHE_OPTION = "HLO2DACE_SHARED_CACHE"

_lock = threading.Lock()
#: folders found wanting -> the private folders used instead, for the rest of the process
_replacements: dict[Path, Path] = {}


def shared_cache_allowed() -> bool:
    return os.environ.get(SHARED_CACHE_OPTION, "").strip().lower() in ("1", "true", "yes")


def problem(folder: Path) -> str | None:
    """Why another user could change what the existing ``folder`` holds, or None: it is
    not a folder, is a symbolic link, is owned by someone else or writable by group or
    others, or one of its parents (up to one the user owns) lets someone else replace it."""
    if not hasattr(os, "getuid"):
        return None  # no POSIX ownership to check (Windows)
    folder = Path(os.path.abspath(folder))
    reason = _folder_problem(folder, os.getuid())
    real = os.path.realpath(folder)
    if reason is not None and real != str(folder):
        reason += f" (through symbolic links, it is {real})"
    return reason


def _folder_problem(folder: Path, uid: int) -> str | None:
    try:
        info = os.lstat(folder)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return f"it is a symbolic link to {os.path.realpath(folder)}"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if info.st_uid != uid:
        return f"it is owned by uid {info.st_uid}, not by you (uid {uid})"
    if info.st_mode & 0o022:
        return f"it is writable by {_who(info.st_mode)} (mode {info.st_mode & 0o7777:o})"
    # the parents as named, and as they are after following symbolic links
    for chain in (folder, Path(os.path.realpath(folder))):
        reason = _parents_problem(chain, uid)
        if reason is not None:
            return reason
    return None


def _parents_problem(folder: Path, uid: int) -> str | None:
    """Why a parent of ``folder`` would let another user replace it, or None. Walks up
    until a parent that the user owns (and only they can write) or a root-owned sticky
    one (``/tmp``: others cannot rename what is in it); root-owned ones in between must be
    writable by root alone."""
    for parent in folder.parents:
        try:
            info = os.stat(parent)
        except OSError as exc:
            return f"its parent {parent} cannot be read ({exc.strerror})"
        writable = info.st_mode & 0o022
        if info.st_uid == uid and not writable:
            return None
        if info.st_uid == 0 and (not writable or info.st_mode & stat.S_ISVTX):
            if writable:
                return None  # sticky: nobody else may rename what is in it
            continue
        if info.st_uid not in (uid, 0):
            return f"its parent {parent} is owned by uid {info.st_uid}"
        return (f"its parent {parent} is writable by {_who(info.st_mode)} (mode "
                f"{info.st_mode & 0o7777:o})")
    return None


def _who(mode: int) -> str:
    return " and ".join(who for who, bit in (("its group", 0o020), ("others", 0o002))
                        if mode & bit)


def private_folder(path: Path, what: str) -> Path:
    """``path`` (made private if missing) if only the user can change what it holds;
    else, for the rest of the process, a new private folder, with a CacheWarning that
    names ``path``, ``what`` it is for and why it is not used."""
    path = Path(os.path.abspath(path))
    with _lock:
        if path in _replacements:
            return _replacements[path]
        try:
            make_private(path)
            reason = problem(path)
        except OSError as exc:
            reason = f"it cannot be made ({exc.strerror or exc})"
        if reason is None:
            return path
        replacement = _replacements[path] = fresh_private_folder(f"hlo2dace-{path.name}-")
    warnings.warn(f"hlo2dace: not using {path} ({what}): {reason}; this process uses "
                  f"{replacement} instead", CacheWarning, stacklevel=3)
    return replacement


def make_private(folder: Path) -> None:
    """Make ``folder`` and its missing parents, readable by the user alone (as the XDG
    base directory specification asks of a cache folder)."""
    missing = []
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = folder.parent
    for each in reversed(missing):
        each.mkdir(mode=0o700, exist_ok=True)


def make_files_private(folder: Path) -> None:
    """Take every permission of group and others from what ``folder`` holds."""
    for path in (folder, *folder.rglob("*")):
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & 0o7700)


@contextlib.contextmanager
def file_lock(path: Path):
    """Hold an exclusive lock on the file ``path`` (made if missing) in the ``with``
    block: one process at a time builds what is locked so."""
    make_private(path.parent)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fresh_private_folder(prefix: str) -> Path:
    """A new folder only the user can change (``mkdtemp`` makes it mode 700 with a name
    nobody can guess), in the temporary folder; OSError if even that is not private."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    reason = problem(folder)
    if reason is not None:
        raise OSError(f"no private folder: {folder}: {reason}; set TMPDIR to a folder only "
                      f"you can write")
    return folder


def user_cache() -> Path:
    """``$XDG_CACHE_HOME``, else ``~/.cache``."""
    return Path(os.environ.get("XDG_CACHE_HOME")
                or os.path.join(os.path.expanduser("~"), ".cache"))


def native_dir() -> Path:
    """The user's private folder for what is built once per machine: the native helpers
    of ``callpath.py`` and ``interop.py``, and DaCe's build caches."""
    return private_folder(user_cache() / "hlo2dace-native", "native helpers and DaCe's "
                          "build caches")


@contextlib.contextmanager
def dace_build_environment():
    """DaCe's build caches (``$DACE_BUILD_CACHE_DIR``, to which DaCe adds
    ``dace_build_cache_<user>``) inside ``native_dir()`` while DaCe builds, whatever the
    user's environment says; the caller holds the runtime's build lock."""
    saved = os.environ.get("DACE_BUILD_CACHE_DIR")
    os.environ["DACE_BUILD_CACHE_DIR"] = str(private_folder(native_dir() / "dace",
                                                            "DaCe's build caches"))
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("DACE_BUILD_CACHE_DIR", None)
        else:
            os.environ["DACE_BUILD_CACHE_DIR"] = saved


def check_dace_config() -> None:
    """DaCe reads ``.dace.conf`` from the working folder before any other configuration
    (in each thread): one that another user could have written (it may name the compiler
    DaCe runs) is replaced by DaCe's defaults, with a CacheWarning once per file."""
    import dace

    loaded = dace.Config.cfg_filename()
    if not loaded or os.path.isabs(loaded):
        return  # none, $DACE_CONFIG or ~/.dace.conf: the user's own choice
    path = Path(os.path.abspath(loaded))
    try:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            reason = f"it is a symbolic link to {os.path.realpath(path)}"
        elif info.st_uid != os.getuid():
            reason = f"it is owned by uid {info.st_uid}"
        elif info.st_mode & 0o022:
            reason = f"it is writable by {_who(info.st_mode)}"
        else:
            reason = _parents_problem(path, os.getuid())
    except OSError as exc:
        reason = f"it cannot be read ({exc.strerror})"
    if reason is None:
        return
    dace.Config.load(file=_NoSettings())
    with _lock:
        if path in _replacements:
            return
        _replacements[path] = path
    warnings.warn(f"hlo2dace: DaCe read {path}, which another user could have written: "
                  f"{reason}; hlo2dace uses DaCe's default configuration instead",
                  CacheWarning, stacklevel=3)


class _NoSettings:
    """A configuration file for ``dace.Config.load(file=...)`` with no settings, so that
    DaCe's defaults and the environment apply."""

    @staticmethod
    def read() -> str:
        return "{}"
