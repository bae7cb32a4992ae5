"""``hlo2dace.profile`` and ``hlo2dace profile``: every timed map and call is attributed to
the StableHLO ops its tasklets compute and to the user's source lines, times add up, the
HTML report holds the table and DaCe's viewer of the SDFG, and profiling leaves the
module's cached program alone."""

from __future__ import annotations

import html
import inspect
import re
import shutil
import subprocess
from pathlib import Path

import dace
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlo2dace
from hlo2dace import cli
from hlo2dace.translate.emitter import OP_COMMENT


def _steps(x, w):
    def step(i, y):
        return jnp.tanh(y @ w) * 0.5  # the product and the elementwise line
    y = jax.lax.fori_loop(0, 4, step, x)
    return jnp.exp(y).sum(axis=1)  # after the loop


STEP_LINE = inspect.getsource(_steps).splitlines().index(
    "        return jnp.tanh(y @ w) * 0.5  # the product and the elementwise line") + \
    _steps.__code__.co_firstlineno
ARGS = (np.random.default_rng(0).standard_normal((64, 32)),
        np.random.default_rng(1).standard_normal((32, 32)) / 6)


@pytest.fixture(scope="module")
def report():
    return hlo2dace.profile(_steps, *ARGS, budget=0.2)


def test_every_tasklet_names_its_op():
    """The attribution's source: each tasklet's code begins with the op it computes (the
    builder's floating-point mode setting excepted, which computes none; the copy of a
    value into a result array, where a level computes none there, is the return's)."""
    sdfg = hlo2dace.jit(_steps).lower(*ARGS).as_sdfg()
    tasklets = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.Tasklet)
                and n.label != "fp_mode"]
    assert tasklets
    for tasklet in tasklets:
        first = tasklet.code.as_string.split("\n", 1)[0]
        assert first.startswith((OP_COMMENT + "stablehlo.", OP_COMMENT + "func.return")), \
            (tasklet.label, first)


def test_times_are_attributed_to_ops_and_lines(report):
    assert report.runs >= 3 and report.seconds > 0 and report.xla_seconds > 0
    work = [i for i in report.items if i.kind != "state"]
    ops = {op for item in work for op in item.ops}
    assert {"stablehlo.tanh", "stablehlo.multiply", "stablehlo.dot_general",
            "stablehlo.exponential", "stablehlo.reduce"} <= ops
    # the product and tanh run in the loop, 4 times a call
    in_loop = [i for i in work if "stablehlo.tanh" in i.ops]
    assert in_loop and all(i.loops and i.count == 4 for i in in_loop)
    assert all(line == f"{__file__}:{STEP_LINE}" for i in in_loop for line in i.lines)
    lines = dict(report.by(lambda item, op, line: line))
    assert lines[f"{__file__}:{STEP_LINE}"] > 0
    # a map or call runs inside a state: in every call, the states take longer
    assert 0 < max(i.seconds for i in work) <= report.measured_seconds
    text = report.table()
    assert "by StableHLO op" in text and "tanh" in text and "hlo2dace/XLA" in text


def test_the_html_report_is_one_file_with_bars_and_the_sdfg(report, tmp_path):
    """Everything the page shows is in the page: no file beside it, no script or style
    loaded from DaCe's installation; bars per op and per line; the SDFG with its times."""
    page = report.write_html(tmp_path / "steps.html")
    assert [p.name for p in tmp_path.iterdir()] == ["steps.html"]
    text = page.read_text()
    assert "file://" not in text and str(Path(dace.__file__).parent) not in text
    assert not re.search(r"""(src|href)=(&quot;|["'])(?!data:)""", text)
    assert text.count('<svg xmlns="http://www.w3.org/2000/svg" class="bars"') == 2
    assert "stablehlo.tanh" in text and "by source line" in text
    assert "WebSDFV" in text and 'id="sdfg-status"' in text and "{% block" not in text
    # the SDFG shown carries the times in its labels
    assert re.search(r"fused_\d+ \[[\d.]+ [mun]?s\]", html.unescape(text))


#: the Makefile's Debian packages; where make installed them (as root), the browser is
#: among them
NATIVE_PACKAGES = re.search(r"NATIVE_PACKAGES := (.*)", (
    Path(__file__).resolve().parents[1] / "Makefile").read_text()).group(1).split()


def _browser() -> str:
    """Debian's chromium; missing, the test fails where make installed the native
    packages (the others are there) and is skipped elsewhere, naming it."""
    found = shutil.which("chromium")
    if found:
        return found
    others = [p for p in NATIVE_PACKAGES if p != "chromium"]
    installed = shutil.which("dpkg-query") is not None and subprocess.run(
        ["dpkg-query", "-W", *others], capture_output=True).returncode == 0
    if installed:
        pytest.fail("chromium is missing though make installed the other native packages "
                    "(apt-get install chromium)")
    pytest.skip("needs a headless browser: Debian's chromium (make installs it as root)")


def test_the_html_report_renders_in_a_headless_browser(report, tmp_path):
    """The bars are drawn and DaCe's viewer, running from the page alone, draws the SDFG
    (its script reports it in ``#sdfg-status``)."""
    browser = _browser()
    page = report.write_html(tmp_path / "steps.html")
    result = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
         "--virtual-time-budget=20000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    dom = result.stdout
    assert '<p id="sdfg-status" data-state="shown">' in dom, (dom[:500], result.stderr[-2000:])
    assert dom.count("<rect ") >= 4


def test_a_small_programs_table_has_no_empty_rows():
    """A program of a few microseconds: its elements run under the timers' microsecond, so
    their times are means of many calls, not medians of zeros; no "nan" share, no row of
    "0 ns"; the floating-point mode switch is explained, not "?"."""
    small = hlo2dace.profile(lambda a: jnp.log(a) + jnp.sqrt(a), np.ones(256, np.float32),
                             budget=0.3)
    text = small.table()
    assert "nan" not in text and " 0 ns" not in text and "?" not in text, text
    assert "stablehlo.log" in text and small.measured_seconds > 0
    if "fp_mode" in text:
        assert "floating-point mode" in text


def test_profiling_leaves_the_cached_program_alone(report):
    compiled = hlo2dace.jit(_steps).lower(*ARGS).compile()
    cached = dace.SDFG.from_file(str(compiled.folder / "build" / "program.sdfgz"))
    assert not [n for n, _ in cached.all_nodes_recursive()
                if getattr(n, "instrument", None) == dace.InstrumentationType.Timer]
    assert not list(compiled.folder.rglob("report-*.json"))
    np.testing.assert_allclose(compiled(*ARGS), jax.jit(_steps)(*ARGS), rtol=1e-12)


def test_command_line(tmp_path, capsys):
    path = tmp_path / "steps.mlir"
    path.write_text(jax.jit(_steps).lower(*ARGS).as_text(debug_info=True))
    status = cli.main(["profile", str(path), "--budget", "0.1", "--no-progress",
                       "--html", str(tmp_path / "report.html")])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "XLA" in out and "by StableHLO op" in out and "tanh" in out
    assert (tmp_path / "report.html").is_file()


def test_source_lines_of_a_text_module_name_its_file(tmp_path, capsys):
    """Ops of a .mlir file written by hand are attributed to its lines, by file name (MLIR
    names text it parses from a string ``-``)."""
    path = tmp_path / "hand.mlir"
    path.write_text("func.func @main(%x: tensor<65536xf32>) -> tensor<65536xf32> {\n"
                    "  %0 = stablehlo.tanh %x : tensor<65536xf32>\n"
                    "  return %0 : tensor<65536xf32>\n}\n")
    assert cli.main(["profile", str(path), "--budget", "0.05", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "hand.mlir:2  %0 = stablehlo.tanh %x : tensor<65536xf32>" in out, out
    assert "-:2" not in out
