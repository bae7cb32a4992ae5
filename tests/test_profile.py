"""``hlo2dace.profile`` and ``hlo2dace profile``: every timed map and call is attributed to
the StableHLO ops its tasklets compute and to the user's source lines, times add up, the
HTML report holds the table and DaCe's viewer of the SDFG, and profiling leaves the
module's cached program alone."""

from __future__ import annotations

import inspect

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
    builder's floating-point mode setting excepted, which computes none)."""
    sdfg = hlo2dace.jit(_steps).lower(*ARGS).as_sdfg()
    tasklets = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.Tasklet)
                and n.label != "fp_mode"]
    assert tasklets
    for tasklet in tasklets:
        first = tasklet.code.as_string.split("\n", 1)[0]
        assert first.startswith(OP_COMMENT + "stablehlo."), (tasklet.label, first)


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


def test_html_report_shows_the_sdfg(report, tmp_path):
    page = report.write_html(tmp_path / "steps.html")
    text = page.read_text()
    assert "by source line" in text and 'src="steps.sdfg.html"' in text
    viewer = (tmp_path / "steps.sdfg.html").read_text()
    assert "WebSDFV" in viewer and "sdfv.js" in viewer and "{%" not in viewer
    # the SDFG shown carries the times in its labels
    graph = dace.SDFG.from_file(str(tmp_path / "steps.sdfgz"))
    labels = [n.map.label for n, _ in graph.all_nodes_recursive()
              if isinstance(n, dace.nodes.MapEntry)]
    assert any(label.endswith("s]") for label in labels)


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
    path.write_text("func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {\n"
                    "  %0 = stablehlo.tanh %x : tensor<64xf32>\n"
                    "  return %0 : tensor<64xf32>\n}\n")
    assert cli.main(["profile", str(path), "--budget", "0.05", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "hand.mlir:2  %0 = stablehlo.tanh %x : tensor<64xf32>" in out, out
    assert "-:2" not in out
