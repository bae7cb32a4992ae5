"""Bad input never crashes the compiler: real modules mutated (the corpus and mutations of
bench/fuzz.py, drawn by hypothesis) end in a value or an Hlo2DaceError, never another
exception, a hang or the death of the process. The inputs that fuzzing found crashing are
kept in tests/data/fuzz/ and replayed here."""

import importlib
import re
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hlo2dace
from hlo2dace.errors import ParseError
from hlo2dace.frontend import bytecode
from hlo2dace.frontend.parser import parse_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
fuzz = importlib.import_module("fuzz")

DATA = Path(__file__).resolve().parent / "data" / "fuzz"

@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.data())
def test_mutated_modules_end_in_a_value_or_an_hlo2dace_error(data):
    """Not an internal error either: the parser's and the translation's last-resort
    guards turn a bug into an Hlo2DaceError that says "internal error"."""
    target, value = fuzz.draw(lambda n: data.draw(st.integers(0, n - 1)))
    outcome, error = fuzz.run(target, value)
    assert not fuzz.is_bug(outcome), "".join(
        traceback.format_exception(error.__cause__ or error))


def test_the_corpus_is_read_in_every_form():
    sources, generic = fuzz.corpus()
    assert [fuzz.run_source(source)[0] for source in sources] == ["translated"] * len(sources)
    assert [fuzz.run_text(text)[0] for text in generic] == ["parsed"] * len(generic)


def test_inputs_that_crashed_the_process_now_raise_parse_error():
    """Damaged bytecode that made jaxlib abort (a message that is not UTF-8), crash on a
    segmentation fault or corrupt the heap; run in a child, so that a regression fails
    this test instead of killing the test run."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import hlo2dace
        for path in sorted(Path({str(DATA)!r}).glob("crash-*.bin")):
            try:
                hlo2dace.lower_text(path.read_bytes()).as_sdfg()
                print(path.name, "value")
            except hlo2dace.Hlo2DaceError as error:
                print(path.name, type(error).__name__)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.split("\n")
    names = sorted(p.name for p in DATA.glob("crash-*.bin"))
    assert len(names) >= 3
    assert [line.split()[0] for line in lines if line] == names
    assert all(line.endswith("ParseError") for line in lines if line)


def test_the_bytecode_reader_survives_a_crash_of_its_child():
    crashing = (DATA / "crash-segfault.bin").read_bytes()
    with pytest.raises(ParseError, match="SIGSEGV"):
        bytecode.generic_text(crashing)
    sources, _ = fuzz.corpus()
    artifact = next(s for s in sources if isinstance(s, bytes) and s.startswith(b"ML\xefR"))
    assert '"func.func"' in bytecode.generic_text(artifact)


def test_a_read_that_does_not_end_is_stopped(monkeypatch):
    """Damaged bytecode on which jaxlib's reader loops (found by atheris)."""
    monkeypatch.setattr(bytecode, "TIMEOUT", 3)
    with pytest.raises(ParseError, match="did not answer"):
        bytecode.generic_text((DATA / "hang.bin").read_bytes())


def test_a_server_that_died_is_replaced():
    sources, _ = fuzz.corpus()
    artifact = next(s for s in sources if isinstance(s, bytes) and s.startswith(b"ML\xefR"))
    bytecode.generic_text(artifact)
    bytecode._server[0].kill()
    bytecode._server[0].wait()
    assert '"func.func"' in bytecode.generic_text(artifact)


def test_result_counts_are_checked_before_a_list_is_made():
    """``%0:2147483647 = ...`` once made a list of two billion names (MemoryError)."""
    text = (DATA / "bug-result-count.txt").read_text()
    with pytest.raises(ParseError, match="defines 2147483647 results but its type lists 3"):
        parse_module(text)


def test_hexadecimal_numbers_in_locations():
    """The grammar reads ``0x106`` as an integer, also as a location's line, which was
    then read with int(): a ValueError (found by bench/fuzz.py)."""
    text = fuzz.corpus()[1][0]
    found = re.search(r'loc\("[^"]*":(\d+):(\d+)', text)
    hexed = (text[:found.start(1)] + hex(int(found.group(1))) + ":" + hex(int(found.group(2)))
             + text[found.end(2):])
    assert hexed != text
    assert ([op.location for op in parse_module(hexed).main.ops]
            == [op.location for op in parse_module(text).main.ops])


def _twice_the_memory() -> str:
    with open("/proc/meminfo") as meminfo:
        available = next(int(line.split()[1]) * 1024 for line in meminfo
                         if line.startswith("MemAvailable:"))
    return str(available // 2)  # f32 elements: twice the bytes available


@pytest.mark.parametrize("dims", ["twice the memory", "100000x100000x100000",
                                  "4294967296x8"])
def test_a_splat_larger_than_memory_is_refused(dims):
    """A line of text can declare a splat of terabytes; written out in full, it took all
    memory until the kernel killed the process (3e9 f32 elements on this 23 GB machine)."""
    dims = _twice_the_memory() if dims == "twice the memory" else dims
    text = (f"func.func @main() -> tensor<{dims}xf32> {{\n"
            f"  %0 = stablehlo.constant dense<1.0> : tensor<{dims}xf32>\n"
            f"  return %0 : tensor<{dims}xf32>\n}}\n")
    with pytest.raises(ParseError, match="more than fits in the memory available"):
        hlo2dace.lower_text(text).module  # noqa: B018


@pytest.mark.parametrize("dims, error", [
    ("-1", "expected non-function type"), ("99999999999999999999", "invalid dimension"),
    ("9223372036854775807", None), ("4611686018427387904x2", None)])
def test_huge_and_negative_dimensions(dims, error):
    text = (f"func.func @main(%a: tensor<{dims}xf32>) -> tensor<{dims}xf32> {{\n"
            f"  return %a : tensor<{dims}xf32>\n}}\n")
    outcome, raised = fuzz.run_source(text)
    if error is None:
        assert not fuzz.is_bug(outcome), outcome
    else:
        assert isinstance(raised, ParseError) and error in str(raised)


def test_a_huge_argument_compiles_to_a_program_that_checks_shapes():
    """2^40 elements: the program is built (nothing is allocated for arguments); a call
    with another shape is an ArgumentError."""
    text = ("func.func @main(%a: tensor<1099511627776xi8>) -> tensor<i8> {\n"
            "  %0 = stablehlo.slice %a [1099511627775:1099511627776] : "
            "(tensor<1099511627776xi8>) -> tensor<1xi8>\n"
            "  %1 = stablehlo.reshape %0 : (tensor<1xi8>) -> tensor<i8>\n"
            "  return %1 : tensor<i8>\n}\n")
    compiled = hlo2dace.compile_text(text)
    with pytest.raises(hlo2dace.ArgumentError, match=r"expected shape \(1099511627776,\)"):
        compiled(np.zeros(3, np.int8))
