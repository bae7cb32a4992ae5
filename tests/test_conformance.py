"""The StableHLO specification's executable per-op tests (``stablehlo/tests/interpret``),
read from ``../shared/conformance/stablehlo-interpret/``: one test per function, which
passes when every ``check.*`` op of the function holds for hlo2dace's results.

Functions that cannot pass yet are listed once, with the reason, in
``conformance_expectations.py``; they are strict xfails, so an entry must go when its
function starts to pass. Functions that need the interpreter's own runtime (collectives
across processes, probes, host transfers) or compare printed output are skipped.

All functions of one file are compiled as one program (see ``hlo2dace.checktests``): the
first test of a file compiles and runs them all, the others read the cached results.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from conformance_expectations import EXPECTED_FAILURES

from hlo2dace.checktests import CheckResult, load_file, run_functions

ROOT = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "stablehlo-interpret"

if not ROOT.is_dir():
    pytest.skip(f"the StableHLO interpreter tests are not at {ROOT} (a checkout of the "
                "project without the shared conformance folder)", allow_module_level=True)

FILES = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.mlir"))


def _parameters():
    parameters = []
    for file in FILES:
        for function in load_file(ROOT / file):
            test_id = f"{file}::{function.id_name}"
            marks = ()
            if test_id in EXPECTED_FAILURES:
                marks = pytest.mark.xfail(strict=True, reason=EXPECTED_FAILURES[test_id])
            parameters.append(pytest.param(file, function.id_name, id=test_id, marks=marks))
    return parameters


PARAMETERS = _parameters()


@functools.cache
def _results(file: str) -> dict[str, CheckResult]:
    results = run_functions(load_file(ROOT / file), file)
    return {result.function: result for result in results}


@pytest.mark.parametrize("file, function", PARAMETERS)
def test_interpret(file, function):
    result = _results(file)[function]
    if result.status == "skip":
        pytest.skip(result.message)
    assert result.status == "pass", f"{result.status}: {result.message}"


def test_expectations_name_functions_that_exist():
    ids = {parameter.id for parameter in PARAMETERS}
    assert not sorted(set(EXPECTED_FAILURES) - ids)


def test_every_file_and_function_is_found():
    assert len(FILES) >= 100 and any(file.startswith("chlo/") for file in FILES)
    assert len(PARAMETERS) >= 480
