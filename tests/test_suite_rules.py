"""The suite's own rules: a test that passes without checking anything fails
(tests/conftest.py), and a test that needs what ``make test`` installs fails there when it
is missing, elsewhere is skipped naming it (tests/util.py, ``needs``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import util
from util import needs

HERE = Path(__file__).resolve().parent

INNER = '''
import warnings
import numpy as np
import pytest
from util import assert_arrays_match

def test_computes_but_checks_nothing():
    np.ones(3) + 1

def test_assert():
    assert np.ones(3).sum() == 3

def test_numpy_testing():
    np.testing.assert_allclose(np.ones(3), 1.0)

def test_raises():
    with pytest.raises(ZeroDivisionError):
        1 / 0

def test_warns():
    with pytest.warns(UserWarning):
        warnings.warn("w")

def test_shared_helper():
    assert_arrays_match(np.arange(3.0), np.arange(3.0))

def test_skipped():
    pytest.skip("not here")
'''


def test_a_test_that_checks_nothing_fails(tmp_path):
    """A session of tests/conftest.py's rule on tests of every kind of check: only the
    one without any fails, with a message naming it; a skipped test is left alone."""
    for name in ("conftest.py", "util.py"):
        shutil.copy(HERE / name, tmp_path / name)
    (tmp_path / "test_inner.py").write_text(INNER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent),
                                                        os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-o", "enable_assertion_pass_hook=true", "-rA", "test_inner.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "1 failed, 5 passed, 1 skipped" in out, out
    assert ("test_inner.py::test_computes_but_checks_nothing passed without checking "
            "anything") in out, out


def test_needs_skips_naming_what_is_missing(monkeypatch):
    monkeypatch.setattr(util, "REQUIRE_ALL", False)
    needs(True, "nothing")
    with pytest.raises(pytest.skip.Exception, match=r"needs FFTW \(make test installs it\)"):
        needs(False, "FFTW")


def test_needs_fails_under_make_test(monkeypatch):
    monkeypatch.setattr(util, "REQUIRE_ALL", True)
    with pytest.raises(pytest.fail.Exception,
                       match=r"needs mpi4py, which make test installs \(HLO2DACE_REQUIRE_ALL"):
        needs(False, "mpi4py")
