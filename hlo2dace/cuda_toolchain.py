"""The CUDA toolchain the ``cuda`` target compiles with, and DaCe pointed at it.

A CUDA root is found, in this order: ``$CUDA_HOME`` (or ``$CUDA_PATH``), NVIDIA's CUDA 13
wheels of the ``cuda`` extra (``pip install 'hlo2dace[cuda]'``: ``nvidia-cuda-nvcc``,
``nvidia-nvvm``, ``nvidia-cuda-crt``, ``nvidia-cuda-runtime``, ``nvidia-cublas``,
``nvidia-cuda-cccl``, which unpack into one root, ``site-packages/nvidia/cu13``), then the
``nvcc`` on ``PATH``. The CUDA 12 wheels hold
no ``nvcc`` driver, only ``ptxas``.

The wheels ship versioned libraries only (``libcudart.so.13``), which CMake's
``FindCUDAToolkit`` does not find; ``build_root`` makes a private folder that mirrors the
root and adds the unversioned names; ``configure_dace`` points DaCe's configuration
(``compiler.cuda.path``, its nvcc flags) at it, and ``build_environment`` CMake too
(``CUDACXX``, PyPI's CMake), while a cuda program builds.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
from pathlib import Path
from typing import Iterator

from . import folders
from .errors import UnsupportedError

#: the GPU architectures the compile check compiles for by default: the lent H100s'
#: (sm_90) and one older (A100, sm_80)
DEFAULT_ARCHS = ("sm_90", "sm_80")

#: nvcc's flags for hlo2dace's code: the host's constexpr functions (``std::numeric_limits``)
#: callable on the device, and DaCe's own header warning 20012 (``__host__`` on defaulted
#: members of ``dace/pi.h``) silenced, so that a warning of ours stands out
NVCC_FLAGS = ("--expt-relaxed-constexpr", "-diag-suppress", "20012")

#: what the compile check and the target need, for the error that says what to install
INSTALL_HINT = "pip install 'hlo2dace[cuda]' (NVIDIA's CUDA 13 wheels), or set $CUDA_HOME"


def _is_root(folder: Path) -> bool:
    return (folder / "bin" / "nvcc").is_file() and (folder / "include" / "cuda_runtime.h").is_file()


def _wheel_roots() -> list[Path]:
    """The ``nvidia/cu13`` folders of the wheels, in the order Python imports from."""
    return [Path(entry) / "nvidia" / "cu13" for entry in sys.path if entry]


@functools.cache
def cuda_root() -> Path | None:
    """The CUDA root (``bin/nvcc``, ``include/cuda_runtime.h``, ``lib``), or None."""
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(variable) and _is_root(Path(os.environ[variable])):
            return Path(os.environ[variable]).resolve()
    for folder in _wheel_roots():
        if _is_root(folder):
            return folder.resolve()
    nvcc = shutil.which("nvcc")
    if nvcc and _is_root(Path(nvcc).resolve().parents[1]):
        return Path(nvcc).resolve().parents[1]
    return None


def available() -> bool:
    """Whether a CUDA root with ``nvcc`` is installed."""
    return cuda_root() is not None


def require(what: str = "the cuda target") -> Path:
    """The CUDA root; an ``UnsupportedError`` that says what to install if there is none."""
    root = cuda_root()
    if root is None:
        raise UnsupportedError(what, "no CUDA toolchain (nvcc) is installed",
                               supported=[INSTALL_HINT])
    return root


def nvcc() -> Path:
    return require("nvcc") / "bin" / "nvcc"


def include_dirs() -> list[Path]:
    """The root's headers, and CCCL's (CUB, Thrust) where the wheel keeps them apart."""
    root = require()
    return [folder for folder in (root / "include", root / "include" / "cccl")
            if folder.is_dir()]


def key() -> str:
    """What a cuda program's binary depends on besides its code, for its cache key: the
    architecture it is compiled for (this thread's DaCe setting, else ``sm_90``) and the
    toolchain (its root and, for the wheels, nvcc's version)."""
    import importlib.metadata

    import dace

    arch = dace.Config.get("compiler", "cuda", "cuda_arch") or DEFAULT_ARCHS[0]
    root = cuda_root()
    try:
        version = importlib.metadata.version("nvidia-cuda-nvcc")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    return f"sm_{arch.removeprefix('sm_')},{root or 'no toolchain'},{version}"


def build_root() -> Path:
    """A CUDA root CMake can use: the root itself where its libraries have unversioned
    names, else a private folder of links to it, its ``lib`` holding ``libcudart.so`` and
    the like beside the wheels' ``libcudart.so.13``."""
    root = require()
    lib = root / "lib"
    if (lib / "libcudart.so").exists() or not lib.is_dir():
        return root
    mirror = folders.private_folder(folders.native_dir() / "cuda", "the CUDA root's links")
    mirror = mirror / root.as_posix().strip("/").replace("/", "_")
    folders.make_private(mirror / "lib")
    for name in ("bin", "include", "nvvm", "cccl"):
        if (root / name).exists() and not (mirror / name).exists():
            (mirror / name).symlink_to(root / name)
    for path in lib.iterdir():
        names = {path.name}
        if ".so." in path.name:
            names.add(path.name.split(".so.")[0] + ".so")
        for name in names:
            if not (mirror / "lib" / name).exists():
                (mirror / "lib" / name).symlink_to(path)
    return mirror


def configure_dace(arch: str | None = None) -> Path:
    """Point DaCe's ``compiler.cuda`` settings (this thread's: DaCe's configuration is
    thread-local) at the CUDA root, compiling for ``arch`` (None: the one set before, else
    ``sm_90``); the root used."""
    import dace

    root = build_root()
    current = dace.Config.get("compiler", "cuda", "cuda_arch")
    arch = arch.removeprefix("sm_") if arch else current or DEFAULT_ARCHS[0].removeprefix("sm_")
    dace.Config.set("compiler", "cuda", "backend", value="cuda")
    dace.Config.set("compiler", "cuda", "path", value=str(root))
    dace.Config.set("compiler", "cuda", "cuda_arch", value=arch)
    args = dace.Config.get("compiler", "cuda", "args")
    missing = [flag for flag in NVCC_FLAGS if flag not in args.split()]
    if "20012" in args:
        missing = [flag for flag in missing if flag not in ("-diag-suppress", "20012")]
    if missing:
        dace.Config.set("compiler", "cuda", "args", value=" ".join([args, *missing]).strip())
    return root


@contextlib.contextmanager
def build_environment() -> Iterator[Path]:
    """While a cuda program builds: DaCe configured (``configure_dace``), CMake given the
    CUDA compiler (``$CUDACXX``, ``$CUDAToolkit_ROOT``) and PyPI's CMake first on
    ``PATH``; the environment restored afterwards, so that the CPU's builds in the same
    process run as they did."""
    root = configure_dace()
    saved = {name: os.environ.get(name) for name in ("CUDACXX", "CUDAToolkit_ROOT", "PATH")}
    os.environ["CUDACXX"] = str(root / "bin" / "nvcc")
    os.environ["CUDAToolkit_ROOT"] = str(root)
    cmake = cmake_bin_dir()
    if cmake is not None:
        os.environ["PATH"] = os.pathsep.join([cmake, saved["PATH"] or ""])
    try:
        yield root
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def cmake_bin_dir() -> str | None:
    """The folder of PyPI's ``cmake`` (a dependency of DaCe's, 4.4 here), which the cuda
    target's builds run: Debian bookworm's CMake 3.25, first on ``PATH`` unless the
    virtual environment is activated, does not know nvcc's C++20 dialect ("CUDA20") that
    DaCe's CMakeLists asks for; 3.31 and 4.4 do. None where it is not installed."""
    try:
        import cmake
    except ImportError:
        return None
    return getattr(cmake, "CMAKE_BIN_DIR", None)
