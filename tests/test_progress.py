"""Where compilation time goes: the stages of a compilation logged to the ``hlo2dace``
logger with their durations, ``$HLO2DACE_LOG``, and the command line's display of them
(on a terminal, or when forced; nothing otherwise)."""

from __future__ import annotations

import gc
import logging
import os
import pty
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlo2dace
from hlo2dace import api, cli, progress

#: the stages of a first compilation, in order (validation: the tests set
#: $HLO2DACE_VALIDATE), and of one the disk cache serves
BUILD_STAGES = ["JAX lowering", "normalise", "cache lookup", "parse", "plan", "translate",
                "SDFG passes", "validate", "code generation", "C++ compile", "C++ build"]
CACHED_STAGES = ["JAX lowering", "normalise", "cache lookup"]
#: the stages that others run within (the build: code generation and compilation)
ENCLOSING = {re.escape("C++ build")}


def _f(x):
    return jnp.cos(x) * 3.5 - x


X = np.linspace(-1, 1, 6, dtype=np.float32)


def _stage_records(records):
    return [r for r in records if r.name == "hlo2dace" and getattr(r, "stage", None)]


def test_jit_logs_each_stage_with_its_duration(caplog, monkeypatch, tmp_path):
    monkeypatch.setenv("HLO2DACE_CACHE_DIR", str(tmp_path))
    caplog.set_level(logging.INFO, logger="hlo2dace")
    np.testing.assert_allclose(hlo2dace.jit(_f)(X), jax.jit(_f)(X), rtol=1e-6)
    records = _stage_records(caplog.records)
    assert [r.stage for r in records] == BUILD_STAGES
    for record in records:
        assert record.levelno == logging.INFO and record.seconds >= 0
        assert record.cpu_seconds >= 0
        assert re.fullmatch(rf"{re.escape(record.stage)}: \d+\.\d\d s( \(.*\))?",
                            record.getMessage())
    assert records[2].getMessage().endswith("(not found)")
    # the compiler is a child process: its CPU time is counted in its stage's
    assert next(r for r in records if r.stage == "C++ compile").cpu_seconds > 0.01

    caplog.clear()
    hlo2dace.jit(_f)(X)  # a new function object: compiled again, found in the disk cache
    records = _stage_records(caplog.records)
    assert [r.stage for r in records] == CACHED_STAGES
    assert records[-1].getMessage().endswith("(found)")


def test_stage_begins_at_debug_and_an_exception_stops_it(caplog):
    caplog.set_level(logging.DEBUG, logger="hlo2dace")
    with pytest.raises(ValueError), progress.stage("testing"):
        raise ValueError("no")
    messages = [(r.levelno, r.getMessage()) for r in _stage_records(caplog.records)]
    assert messages[0] == (logging.DEBUG, "testing ...")
    assert messages[1][0] == logging.DEBUG
    assert re.fullmatch(r"testing: stopped after \d+\.\d\d s \(ValueError\)", messages[1][1])


@pytest.fixture
def unconfigured_logger(monkeypatch):
    """The hlo2dace logger with no level and no handler, restored afterwards."""
    logger = progress.LOGGER
    saved = list(logger.handlers), logger.level
    logger.handlers.clear()
    logger.setLevel(logging.NOTSET)
    monkeypatch.setattr(progress, "_environment_read", False)
    yield logger
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])


def test_hlo2dace_log_leaves_a_level_the_program_set(unconfigured_logger, monkeypatch):
    monkeypatch.setenv("HLO2DACE_LOG", "debug")
    unconfigured_logger.setLevel(logging.WARNING)
    progress.configure_from_environment()
    assert unconfigured_logger.level == logging.WARNING and not unconfigured_logger.handlers


def test_hlo2dace_log_that_is_no_level_warns(unconfigured_logger, monkeypatch):
    monkeypatch.setenv("HLO2DACE_LOG", "loud")
    with pytest.warns(UserWarning, match="HLO2DACE_LOG='loud' is not a logging level"):
        progress.configure_from_environment()
    assert unconfigured_logger.level == logging.NOTSET and not unconfigured_logger.handlers


@pytest.mark.parametrize("configured", [False, True], ids=["no logging", "basicConfig"])
def test_hlo2dace_log_in_a_program(tmp_path, configured):
    """A program that configured no logging gets the stages on stderr; one that did gets
    them through its own handler, once."""
    script = ("import logging, numpy as np, jax.numpy as jnp, hlo2dace\n"
              + ("logging.basicConfig(format='mine %(name)s %(message)s')\n" if configured
                 else "")
              + "hlo2dace.jit(lambda x: jnp.sin(x) + 2)(np.ones(3))\n")
    env = dict(os.environ, HLO2DACE_CACHE_DIR=str(tmp_path), HLO2DACE_LOG="info")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    prefix = "mine hlo2dace " if configured else "hlo2dace: "
    lines = [line[len(prefix):] for line in done.stderr.splitlines() if line.startswith(prefix)]
    assert [line.split(":")[0] for line in lines] == BUILD_STAGES, done.stderr
    assert configured != ("hlo2dace: " in done.stderr)


@pytest.fixture
def module_file(tmp_path, monkeypatch):
    """A module and its inputs, and an empty cache: the command compiles it."""
    monkeypatch.setenv("HLO2DACE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "f.mlir"
    path.write_text(jax.jit(_f).lower(X).as_text())
    np.savez(tmp_path / "inputs.npz", arg_0=X)
    return path


def _run_command(path):
    return ["run", str(path), "--inputs", str(path.with_name("inputs.npz"))]


def test_cli_prints_no_stages_without_a_terminal(module_file, capsys):
    handlers = list(progress.LOGGER.handlers)
    assert cli.main(_run_command(module_file)) == 0
    assert capsys.readouterr().err == ""
    assert progress.LOGGER.handlers == handlers


def test_cli_prints_the_stages_when_asked(module_file, capsys):
    """Not on a terminal, each stage is one line, written when it ends."""
    handlers, level = list(progress.LOGGER.handlers), progress.LOGGER.level
    assert cli.main([*_run_command(module_file), "--progress"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(":")[1].strip() for line in lines] == BUILD_STAGES[1:], lines
    assert all(re.fullmatch(r"hlo2dace: [^:]+: \d+\.\d\d s( \(.*\))?", line) for line in lines)
    assert progress.LOGGER.handlers == handlers and progress.LOGGER.level == level


def test_cli_shows_the_stages_on_a_terminal(module_file):
    """On a terminal, a stage's line appears when it begins and is completed in place."""
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "hlo2dace.cli", *_run_command(module_file)],
                              stderr=terminal, stdout=subprocess.PIPE, timeout=300)
    finally:
        os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 1 << 16)
        except OSError:  # the terminal's other end is closed and drained
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    assert done.returncode == 0
    for name in BUILD_STAGES[1:]:
        name = re.escape(name)
        if name in ENCLOSING:  # its line ends when the first stage within it begins
            assert re.search(rf"hlo2dace: {name} \.\.\.\r?\n(.*\n)+hlo2dace: {name}: \d+\.\d\d s",
                             shown.decode()), shown
            continue
        assert re.search(rf"hlo2dace: {name} \.\.\.\rhlo2dace: {name}: \d+\.\d\d s",
                         shown.decode()), shown


def test_the_collector_is_paused_while_compiling_and_runs_again_after(monkeypatch,
                                                                      private_cache):
    states = []
    real_translate = api.Lowered._translate

    def translate(self):
        states.append(gc.isenabled())
        return real_translate(self)

    monkeypatch.setattr(api.Lowered, "_translate", translate)
    x = np.arange(3.0)
    with progress.collector_paused():  # nested: one pause
        hlo2dace.jit(lambda x: x * 7 - 1).lower(x).compile()
        assert not gc.isenabled()
    assert states == [False] and gc.isenabled()
    gc.disable()  # a program that runs without the collector keeps it off
    try:
        with progress.collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_first_build_on_a_machine_shows_its_native_setup(caplog, monkeypatch,
                                                             private_cache, tmp_path):
    """The precompiled prelude (DaCe's runtime header and hlo2dace's helpers), made once
    per machine and flag set, is a stage of its own, and the C++ compile that configures
    CMake says so; a second program of the same kind needs neither."""
    from dace.codegen import compiler

    from hlo2dace import folders, prelude

    monkeypatch.setattr(compiler, "build_cache_root", lambda: str(tmp_path / "fresh"))
    monkeypatch.setattr(folders, "native_dir", lambda: tmp_path / "native")
    prelude.precompiled.cache_clear()
    caplog.set_level(logging.INFO, logger="hlo2dace")
    try:
        hlo2dace.jit(_f)(X)
    finally:
        prelude.precompiled.cache_clear()  # the next tests' own folder again
    records = _stage_records(caplog.records)
    stages = [r.stage for r in records]
    build = BUILD_STAGES.index("validate")
    assert stages == [*BUILD_STAGES[:build], "native setup", *BUILD_STAGES[build:]], stages
    assert "precompiled prelude" in records[build].getMessage()
    assert "CMake's configure included" in records[-2].getMessage()
    assert list((tmp_path / "native" / "pch").glob("*/*.gch"))

    caplog.clear()
    hlo2dace.jit(lambda x: jnp.sin(x) * 2.5)(X)
    records = _stage_records(caplog.records)
    assert [r.stage for r in records] == BUILD_STAGES
    assert "configure" not in records[-2].getMessage()
