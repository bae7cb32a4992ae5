"""docs/ops.md is generated from the registry; it must match what the registry says now."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hlo2dace import coverage
from hlo2dace.translate import supported_ops
from hlo2dace.translate.dtypes import SUPPORTED_ELEMENTS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_ops_table_is_generated_from_the_registry():
    text = (DOCS / "ops.md").read_text()
    assert text == coverage.render(), "docs/ops.md is stale: run `make docs`"
    for name in supported_ops():
        assert f"| `{name}` |" in text
    for name in SUPPORTED_ELEMENTS:  # the element types, the small floats among them
        assert f"| `{name}` |" in text


def test_registry_covers_the_foundation_ops():
    foundation = {
        "abs", "add", "subtract", "multiply", "divide", "remainder", "power", "negate", "sign",
        "maximum", "minimum", "sqrt", "rsqrt", "cbrt", "exponential", "exponential_minus_one",
        "log", "log_plus_one", "logistic", "sine", "cosine", "tan", "tanh", "atan2", "floor",
        "ceil", "round_nearest_afz", "round_nearest_even", "is_finite", "not", "and", "or",
        "xor", "shift_left", "shift_right_arithmetic", "shift_right_logical", "popcnt",
        "count_leading_zeros", "compare", "select", "clamp", "convert", "bitcast_convert",
        "real", "imag", "complex", "reduce_precision", "constant", "iota", "broadcast_in_dim",
        "reshape", "transpose", "slice", "concatenate", "pad", "reverse", "dynamic_slice",
        "dynamic_update_slice", "tuple", "get_tuple_element", "optimization_barrier",
        "dot_general"}
    missing = {f"stablehlo.{op}" for op in foundation} - set(supported_ops())
    assert not missing and "func.call" in supported_ops()


def test_ops_table_is_a_users_document():
    """Terminators are no unsupported ops; every op that is not supported says why and
    what to use; no internal work items."""
    text = (DOCS / "ops.md").read_text()
    unsupported = text[text.index("Not supported"):]
    assert "`stablehlo.return`" not in unsupported and "`stablehlo.return`" in text
    for name in coverage.NOT_SUPPORTED:
        assert f"| `{name}` |" in unsupported
    assert not re.search(r"(?i)\bissue\b|planned|not planned", text)


#: a Python block that is not meant to run as it stands says so, and why, on the line
#: before it
NOT_RUN = re.compile(r"<!-- not run: (.+?) -->\n$")
EXAMPLES = [(path.name, k, code, NOT_RUN.search(text[:start]))
            for path in [DOCS.parent / "README.md", *sorted(DOCS.glob("*.md"))]
            for text in [path.read_text()]
            for k, (start, code) in enumerate(
                (m.start(), m.group(1)) for m in re.finditer(r"```python\n(.*?)```", text, re.S))]


@pytest.mark.parametrize("name, k, code, marker", EXAMPLES,
                         ids=[f"{name}:{k}" for name, k, _, _ in EXAMPLES])
def test_every_python_example_runs_as_written(name, k, code, marker, tmp_path):
    """Each Python block of README.md and docs/*.md, run as a script in a fresh process;
    one that cannot run as it stands (an MPI job, an excerpt) carries the marker."""
    if marker is not None:
        assert marker.group(1).strip(), f"{name}: say why the example is not run"
        compile(code, f"{name}:{k}", "exec")  # still valid Python
        return
    script = tmp_path / "example.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=str(DOCS.parent))
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{name}, example {k}:\n{result.stderr[-3000:]}"


def test_the_pass_list_of_the_architecture_is_the_pipeline():
    """docs/architecture.md lists every pass of the CPU pipeline, in its order and stage,
    with the summary ``hlo2dace passes`` prints."""
    from hlo2dace import pipeline
    from hlo2dace.optimize import level

    text = (DOCS / "architecture.md").read_text()
    rows = re.findall(r"^\| (plan|sdfg|code) \| `(\w+)` \| (.+?) \|$", text, re.M)
    passes = pipeline.cpu_passes(level("default"))
    assert [(stage, name) for stage, name, _ in rows] == [(p.stage, p.name) for p in passes]
    for (_, _, documented), p in zip(rows, passes):
        assert documented.replace("`", "") == p.summary.replace("`", ""), p.name
