"""Test set-up: a cache folder of compiled programs shared by the test workers (inside
.pytest_cache, so repeated local runs reuse binaries and CI starts empty), and x64 mode
so that every dtype JAX supports can be tested; every SDFG validated.

One rule for every test: a test that passes must have checked something. Passing
``assert`` statements (pytest's ``pytest_assertion_pass`` hook, in the test modules and in
tests/util.py's helpers), numpy.testing's ``assert_*`` calls and ``pytest.raises`` /
``pytest.warns`` count as checks; a test that passes with none fails, naming itself."""

import functools
import os
from pathlib import Path

os.environ.setdefault("HLO2DACE_CACHE_DIR",
                      str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "hlo2dace"))

# every SDFG the tests build is validated (users' compiles skip it: hlo2dace/sdfg_build.py)
os.environ["HLO2DACE_VALIDATE"] = "1"

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# the shared helpers' asserts are rewritten too, so that their passing asserts count
pytest.register_assert_rewrite("util")

from hlo2dace import runtime  # noqa: E402


@pytest.fixture
def private_cache(monkeypatch, tmp_path):
    """A fresh cache folder, and a process that has loaded nothing from it yet."""
    monkeypatch.setenv("HLO2DACE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(runtime.cache, "_loaded", {})
    monkeypatch.setattr(runtime.cache, "_fallbacks", {})
    return tmp_path / "cache"


# ---------------------------------------------------------------- levels

@pytest.fixture(autouse=True)
def _pipeline_level(request, monkeypatch):
    """A test marked ``pipeline`` checks what the default pipeline's passes do (the code
    they generate, XLA's contracted bits): where the suite runs at the plain lowering
    (``HLO2DACE_OPTIMIZE=none``: no pass), it runs at the default level."""
    if request.node.get_closest_marker("pipeline") \
            and os.environ.get("HLO2DACE_OPTIMIZE") == "none":
        monkeypatch.setenv("HLO2DACE_OPTIMIZE", "default")


def pytest_collection_modifyitems(items):
    """Every test of a pass (``test_pass_<name>.py``) is a ``pipeline`` test."""
    for item in items:
        if item.path.name.startswith("test_pass_"):
            item.add_marker("pipeline")


# ---------------------------------------------------------------- checks per test

#: checks made by the test now running (its call phase)
_checks = [0]


def _counted(check):
    """``check`` (an assertion function or context) counted each time it is called: one
    that fails raises and fails the test anyway."""

    @functools.wraps(check)
    def counted(*args, **kwargs):
        _checks[0] += 1
        return check(*args, **kwargs)

    return counted


for _name in dir(np.testing):
    if _name.startswith("assert_") and callable(getattr(np.testing, _name)):
        setattr(np.testing, _name, _counted(getattr(np.testing, _name)))
pytest.raises = _counted(pytest.raises)
pytest.warns = _counted(pytest.warns)


def pytest_assertion_pass(item, lineno, orig, expl):
    _checks[0] += 1


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    _checks[0] = 0
    result = yield  # a test that raised fails as it is
    if not _checks[0]:
        pytest.fail(f"{item.nodeid} passed without checking anything: no assert passed, "
                    "no numpy.testing assertion, pytest.raises or pytest.warns ran",
                    pytrace=False)
    return result


def pytest_configure(config):
    """pytest caches its rewrite of a test module (``__pycache__/*-pytest-*.pyc``) by the
    source's time and size only: one written before the assertion hook was enabled would
    count no ``assert``. Such files (they never name the hook's helper) are removed, so
    that pytest rewrites their modules again."""
    config.addinivalue_line("markers", "pipeline: checks what the default pipeline's passes "
                            "do; under HLO2DACE_OPTIMIZE=none it runs at the default level")
    for cached in (Path(__file__).parent / "__pycache__").glob("*-pytest-*.pyc"):
        try:
            if b"_call_assertion_pass" not in cached.read_bytes():
                cached.unlink()
        except OSError:  # another worker removed or rewrote it
            pass
