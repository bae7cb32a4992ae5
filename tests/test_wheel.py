"""The wheel is complete: ``pip wheel`` of the project, installed into a fresh virtual
environment that sees neither the source tree nor the editable install, compiles and runs
programs from another folder with only the files the wheel holds (the grammar, the C++
headers pasted into generated code, the C call path)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: the third-party packages hlo2dace imports; the fresh environment reads them from the
#: project's environment (a .pth line per folder), so nothing is downloaded
THIRD_PARTY = ("dace", "flatbuffers", "jax", "jaxlib", "lark", "ml_dtypes", "numpy")

SCRIPT = textwrap.dedent("""
    import json
    import numpy as np
    import jax.numpy as jnp
    import hlo2dace

    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    jitted = hlo2dace.jit(lambda x: jnp.tanh(x) * 2 + x.sum(0))(x)
    module = '''
    func.func @main(%a: tensor<4xf64>, %b: tensor<4xf64>) -> tensor<4xf64> {
      %0 = stablehlo.multiply %a, %b : tensor<4xf64>
      %1 = stablehlo.subtract %0, %a : tensor<4xf64>
      return %1 : tensor<4xf64>
    }
    '''
    a, b = np.array([1.5, -2.0, 3.25, 0.0]), np.array([2.0, 0.5, -4.0, 7.0])
    compiled = hlo2dace.compile_text(module)
    print(json.dumps({"file": hlo2dace.__file__, "jit": np.asarray(jitted).tolist(),
                      "text": compiled(a, b).tolist(), "built": compiled.program.built}))
""")


def _copy_source(target: Path) -> None:
    """What the build reads, copied: setuptools' build/ folder in a checkout keeps the
    files of earlier builds, which would hide a file the configuration no longer maps."""
    target.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, target / name)
    for folder in ("hlo2dace", "grammar"):
        shutil.copytree(ROOT / folder, target / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))


def _site_folders() -> list[str]:
    import importlib

    return sorted({str(Path(importlib.import_module(name).__file__).resolve().parents[1])
                   for name in THIRD_PARTY})


def test_installed_wheel_compiles_and_runs(tmp_path):
    _copy_source(tmp_path / "source")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(tmp_path / "source")],
                   check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("hlo2dace-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True,
                             text=True).stdout.strip()
    (Path(purelib) / "third_party.pth").write_text("\n".join(_site_folders()) + "\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # empty caches: the programs and the C call path are built from the installed files
    env.update(HLO2DACE_CACHE_DIR=str(tmp_path / "cache"), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    done = subprocess.run([str(python), "-c", SCRIPT], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])

    assert Path(result["file"]).resolve().is_relative_to(venv.resolve())
    assert result["built"]
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    # f32 tanh: libm's or the vector library's, a few ULP from NumPy's (eps 1.2e-7)
    np.testing.assert_allclose(result["jit"], np.tanh(x) * 2 + x.sum(0), rtol=1e-6, atol=1e-6)
    a, b = np.array([1.5, -2.0, 3.25, 0.0]), np.array([2.0, 0.5, -4.0, 7.0])
    np.testing.assert_array_equal(result["text"], a * b - a)  # exact in f64
