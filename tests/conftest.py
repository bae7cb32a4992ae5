"""Test set-up: a cache folder of compiled programs shared by the test workers (inside
.pytest_cache, so repeated local runs reuse binaries and CI starts empty), and x64 mode
so that every dtype JAX supports can be tested; every SDFG validated."""

import os
from pathlib import Path

os.environ.setdefault("HLO2DACE_CACHE_DIR",
                      str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "hlo2dace"))

# every SDFG the tests build is validated (users' compiles skip it: hlo2dace/sdfg_build.py)
os.environ["HLO2DACE_VALIDATE"] = "1"

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

import pytest  # noqa: E402

from hlo2dace import runtime  # noqa: E402


@pytest.fixture
def private_cache(monkeypatch, tmp_path):
    """A fresh cache folder, and a process that has loaded nothing from it yet."""
    monkeypatch.setenv("HLO2DACE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(runtime.cache, "_loaded", {})
    monkeypatch.setattr(runtime.cache, "_fallbacks", {})
    return tmp_path / "cache"
