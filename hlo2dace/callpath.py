"""The C call path (``h2d_call.c``), built once per machine and Python with the C compiler
DaCe uses, into ``folders.native_dir()`` (``$XDG_CACHE_HOME/hlo2dace-native``, beside the
program cache, which tests and benchmarks point elsewhere), then imported. Calling a
program through it costs about a microsecond plus 50 ns per array, where ctypes needs each
array's address from Python first (about half a microsecond each, 10 us for a jax.Array,
which is converted first). It takes up to 1024 arrays (an optimiser's step over a tree of
parameters passes and returns hundreds). Without a C compiler or
Python's headers it is None, and ``runtime.Program`` calls through ctypes."""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

from . import folders

SOURCE = Path(__file__).with_name("h2d_call.c")


@functools.lru_cache(maxsize=1)
def native() -> ModuleType | None:
    """The built extension module, or None if it cannot be built here."""

    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source + suffix.encode()).hexdigest()[:16]
    root = folders.native_dir()
    library = root / f"h2d_call-{digest}" / f"h2d_call{suffix}"
    try:
        with folders.file_lock(root / f"h2d_call-{digest}.lock"):
            if not library.is_file():
                _build(library)
        spec = importlib.util.spec_from_file_location(
            "h2d_call", library, loader=importlib.machinery.ExtensionFileLoader(
                "h2d_call", str(library)))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except (OSError, ImportError, subprocess.CalledProcessError):
        return None


def _build(library: Path) -> None:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    include = sysconfig.get_paths()["include"]
    if compiler is None or not (Path(include) / "Python.h").is_file():
        raise OSError("no C compiler or no Python headers")
    library.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=library.parent) as staging:
        built = Path(staging) / library.name
        subprocess.run([compiler, "-O2", "-shared", "-fPIC", f"-I{include}", str(SOURCE),
                        "-o", str(built)], check=True, capture_output=True)
        os.replace(built, library)
