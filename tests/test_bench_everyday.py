"""bench/everyday_suite.py: its runner gives every program a row with a verdict (a timed-out
one included), and its document counts failures instead of dropping them (issue 47)."""

import importlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
suite = importlib.import_module("everyday_suite")

CHEAP = ["elementwise_chain", "f16_elementwise", "softmax_cross_entropy", "segment_sum"]


def test_the_suite_has_at_least_30_programs():
    assert len(suite.PROGRAMS) >= 30


def test_each_row_has_a_verdict_and_both_times(capsys):
    for name in CHEAP:
        suite.measure(name, ["small"], budget=0.01)
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["program"] for r in rows] == CHEAP
    for row in rows:
        assert "error" not in row, row
        assert row["verdict"] == "OK", row
        assert row["xla_s"] > 0 and row["hlo2dace_s"] > 0 and row["first_call_s"] > 0


def test_a_program_that_times_out_is_a_row():
    rows = suite.run_setting(["elementwise_chain"], ["small"], 0.01, 1, timeout=0.5,
                             memory=False)
    assert len(rows) == 1 and rows[0]["timed_out"] and "timeout" in rows[0]["error"]


@pytest.fixture
def rows():
    common = {"size": "small", "threads": "1", "machine": "test", "load_average": 0.0}
    return [
        {**common, "program": "fast", "xla_s": 2e-3, "hlo2dace_s": 1e-3, "verdict": "OK",
         "normwise_error": 1e-7, "xla_peak_mb": 2.0, "hlo2dace_peak_mb": 1.0,
         "xla_first_call_s": 0.1, "first_call_s": 1.0},
        {**common, "program": "wrong", "xla_s": 1e-3, "hlo2dace_s": 1e-3,
         "verdict": "DIFFERS", "normwise_error": 0.5},
        {**common, "program": "broken", "error": "Hlo2DaceError: unsupported op"},
        {**common, "program": "slow", "error": "timeout after 900 s", "timed_out": True},
    ]


def test_the_summary_counts_failures_and_timeouts(rows):
    line = suite.summary(rows)[-1]
    cells = [c.strip() for c in line.strip("|").split("|")]
    # size, threads, programs, ran, correct, differs, failed, timed out, geomean
    assert cells[:8] == ["small", "1", "4", "2", "1", "1", "1", "1"]
    assert cells[8] == "0.50 (1 of 4)"


def test_the_document_lists_every_row(rows, tmp_path, monkeypatch):
    monkeypatch.setattr(suite, "DOCS", tmp_path)
    suite.write(rows, "python bench/everyday_suite.py")
    document = (tmp_path / "everyday.md").read_text()
    assert "do not edit" in document
    for name in ("fast", "wrong", "broken", "slow"):
        assert f"| {name} |" in document
    assert "failed: Hlo2DaceError" in document and "timed out: timeout" in document


def test_the_plot_has_every_setting(rows, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="the bench extra's matplotlib draws the plot")
    monkeypatch.setattr(suite, "DOCS", tmp_path)
    suite.plot(rows)
    assert (tmp_path / "everyday.png").stat().st_size > 0
