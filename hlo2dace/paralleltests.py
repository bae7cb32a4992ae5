"""The StableHLO interpreter's multi-process tests (``interpreter.run_parallel``) as MPI
jobs: each process of the op's grid is a rank running its program, compiled by hlo2dace
with the grid as ``mhlo.num_replicas`` x ``mhlo.num_partitions``; the ranks' results then
go through the test's own check ops (``checktests.py``).

A test's ``@main`` computes the operands of ``run_parallel`` (constants, evaluated here by
XLA: they are the test's inputs, not what is tested), runs it, and checks its results. Here
the operands are cut per process (each program takes its own in process order), the ranks
run their programs, and rank 0 rewrites ``@main`` with the gathered results as constants
in place of the op, which leaves only the check ops to evaluate.

Tests of one grid whose processes all run the same program are compiled as ONE program
(an entry calling every test's program in turn, each test's symbols prefixed), because a
C++ build costs far more than these programs; a group that does not compile falls back to
one program per test, so every test gets its own error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from . import checktests, mpi
from .checktests import CheckResult

_RUN_PARALLEL = re.compile(
    r'(%[\w.$-]+)(?::(\d+))?\s*=\s*"interpreter\.run_parallel"\(([^)]*)\)\s*\{(.*?)\}\s*:'
    r'\s*\(([^)]*)\)\s*->\s*(\((?:[^()]|\([^)]*\))*\)|[^\n]+)', re.S)
#: ops of the interpreter's other runtimes (host transfers, printing and probing for
#: FileCheck): a test using them stays skipped, with the reason checktests gives
NOT_RUN = ("stablehlo.infeed", "stablehlo.outfeed", "stablehlo.send", "stablehlo.recv",
           "interpreter.probe", "interpreter.print", "check.expect_serialized_eq")


@dataclass
class ParallelTest:
    """One test function whose ``@main`` runs ``interpreter.run_parallel``."""

    file: str
    function: str
    piece: str  #: the ``// -----`` piece's text
    grid: tuple[int, int]  #: (replicas, partitions)
    programs: list[str]  #: the program of each process, in process order
    operands: list[str]
    operand_types: list[str]
    results: str  #: the op's result name (``%results``)
    result_types: list[str]
    statement: tuple[int, int]  #: where the op stands in ``piece``
    inputs: list[np.ndarray] = field(default_factory=list)

    @property
    def size(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def id(self) -> str:
        return f"{self.file}::{self.function}"


def _types(text: str) -> list[str]:
    text = text.strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    return [t.strip() for t in checktests.split_top(text) if t.strip()]


def find(path: Path, name: str) -> list[ParallelTest]:
    """The run_parallel tests of the file at ``path`` (``name``: its name in results)."""
    tests = []
    for function in checktests.load_file(path):
        if not (function.skip_reason or "").startswith("interpreter.run_parallel"):
            continue
        piece = checktests.SPLIT_MARKER.split(path.read_text())[function.piece]
        if any(op in piece for op in NOT_RUN):
            continue
        found = _RUN_PARALLEL.search(piece)
        rows = re.findall(r"\[([^\[\]]*)\]", re.search(r"programs\s*=\s*\[(.*)\]",
                                                      found.group(4), re.S).group(1))
        programs = [re.findall(r"@([\w.$-]+)", row) for row in rows]
        tests.append(ParallelTest(
            name, function.id_name, piece, (len(programs), len(programs[0])),
            [p for row in programs for p in row],
            [o.strip() for o in found.group(3).split(",") if o.strip()],
            _types(found.group(5)), found.group(1), _types(found.group(6)),
            (found.start(), found.end())))
    return tests


def _definitions(piece: str) -> dict[str, str]:
    """Every function of ``piece`` by name, as written."""
    code = checktests.mask(piece)
    return {d.name: piece[d.start:d.end] for d in checktests.function_definitions(piece, code)}


def _inputs(test: ParallelTest) -> list[np.ndarray]:
    """The operands of run_parallel: ``@main``'s ops before it, run by XLA."""
    from .frontend.normalize import normalize
    from .xla import XlaModule

    main = _definitions(test.piece)["main"]
    start = test.piece.index(main)
    body = main[main.index("{") + 1:test.statement[0] - start]
    returned = f" {', '.join(test.operands)} : {', '.join(test.operand_types)}" \
        if test.operands else ""
    text = (f"func.func @main() -> ({', '.join(test.operand_types)}) {{{body}\n"
            f"  func.return{returned}\n}}")
    return XlaModule(normalize(text).text)()


def _arity(test: ParallelTest, program: str) -> tuple[int, int]:
    """(arguments, results) of ``program``."""
    header = _definitions(test.piece)[program]
    header = header[:checktests.mask(header).index("{")]
    arguments = checktests.argument_list(header)
    return (len(checktests.split_top(arguments)) if arguments else 0,
            len(checktests.declared_result_types(header)))


def _slices(test: ParallelTest) -> list[tuple[slice, slice]]:
    """Per process: its operands and its results among the op's."""
    out, operand, result = [], 0, 0
    for program in test.programs:
        arguments, results = _arity(test, program)
        out.append((slice(operand, operand + arguments), slice(result, result + results)))
        operand, result = operand + arguments, result + results
    return out


def _module(tests: Sequence[ParallelTest], rank: int) -> tuple[str, str]:
    """A module of the grid of ``tests`` whose entry (returned) calls each test's program
    of process ``rank`` in turn, with each test's symbols prefixed."""
    grid = tests[0].grid
    definitions, arguments, calls, returned, types = [], [], [], [], []
    for k, test in enumerate(tests):
        own = _definitions(test.piece)
        names = {name: f"t{k}_{name}" for name in own}
        definitions += [checktests.rename_symbols(text, names) for name, text in own.items()
                        if name != "main"]
        program = test.programs[rank]
        header = own[program][:checktests.mask(own[program]).index("{")]
        argument_types = [a.split(":", 1)[1].strip() for a in checktests.split_top(
            checktests.argument_list(header))] if checktests.argument_list(header) else []
        result_types = checktests.declared_result_types(header)
        names_in = [f"%a{k}_{j}" for j in range(len(argument_types))]
        arguments += [f"{n}: {t}" for n, t in zip(names_in, argument_types)]
        outs = [f"%r{k}_{j}" for j in range(len(result_types))]
        call = f"func.call @t{k}_{program}({', '.join(names_in)}) : " \
               f"({', '.join(argument_types)}) -> ({', '.join(result_types)})"
        calls.append(f"  {', '.join(outs)} = {call}" if outs else f"  {call}")
        returned += outs
        types += result_types
    entry = "__hlo2dace_rank"
    main = (f"func.func @{entry}({', '.join(arguments)}) -> ({', '.join(types)}) {{\n"
            + "\n".join(calls) + f"\n  func.return {', '.join(returned)}"
            + (f" : {', '.join(types)}" if types else "") + "\n}")
    attributes = f"mhlo.num_replicas = {grid[0]} : i32, mhlo.num_partitions = {grid[1]} : i32"
    return (f"module attributes {{{attributes}}} {{\n" + "\n\n".join([*definitions, main])
            + "\n}\n"), entry


def _run_group(tests: Sequence[ParallelTest]) -> list[list[np.ndarray]] | str:
    """This rank's results of each test of ``tests`` (one program for them all), or why
    the program did not compile or run."""
    from .api import lower_text

    rank = mpi.rank()
    text, entry = _module(tests, rank)
    try:
        program = mpi.once_per_machine(lower_text(text, name="run_parallel",
                                                  entry=entry).compile)
        inputs = []
        for test in tests:
            operands, _ = _slices(test)[rank]
            inputs += test.inputs[operands]
        outputs = program.call_flat(inputs)
    except Exception as exc:  # reported per test by the caller
        return checktests.error_text(exc)
    results, position = [], 0
    for test in tests:
        _, produced = _slices(test)[rank]
        count = produced.stop - produced.start
        results.append(list(outputs[position:position + count]))
        position += count
    return results


def _dense(array: np.ndarray, t: str) -> str:
    """``array`` as an MLIR constant of type ``t``: its bytes in hex (exact for every
    element type; booleans as a list)."""
    if array.dtype == np.bool_:
        return f"stablehlo.constant dense<{json.dumps(array.tolist())}> : {t}"
    data = np.ascontiguousarray(array).tobytes()
    return f'stablehlo.constant dense<"0x{data.hex().upper()}"> : {t}'


def _judge(test: ParallelTest, results: list[np.ndarray]) -> CheckResult:
    """The test's check ops on the gathered ``results``: ``@main`` with constants in place
    of run_parallel, evaluated by XLA (it holds nothing but the results and the checks)."""
    from .frontend.normalize import normalize
    from .xla import XlaModule

    names = [f"%__result{k}" for k in range(len(results))]
    constants = "\n".join(f"  {n} = {_dense(r, t)}"
                          for n, r, t in zip(names, results, test.result_types))
    start, end = test.statement
    piece = test.piece[:start] + constants + test.piece[end:]
    piece = re.sub(re.escape(test.results) + r"#(\d+)\b",
                   lambda m: names[int(m.group(1))], piece)
    if len(names) == 1:
        piece = re.sub(re.escape(test.results) + r"\b(?!#)", names[0], piece)
    function = next(f for f in checktests.load_text(piece) if f.name == "main")
    if function.skip_reason:
        return CheckResult(test.file, test.function, "error", function.skip_reason)
    try:
        outputs = XlaModule(normalize(function.text).text)()
    except Exception as exc:
        return CheckResult(test.file, test.function, "error", checktests.error_text(exc))
    verdict = checktests.judge(test.file, function, outputs)
    return CheckResult(test.file, test.function, verdict.status, verdict.message)


def run(tests: Sequence[ParallelTest]) -> list[CheckResult]:
    """Run ``tests`` (each for as many processes as this job has ranks) as this rank; the
    verdicts on rank 0 (empty elsewhere). Collective: every rank calls it with the same
    tests."""
    for test in tests:
        test.inputs = _inputs(test)
    uniform = [t for t in tests if len(set(t.programs)) == 1]
    groups: dict[tuple[int, int], list[ParallelTest]] = {}
    for test in uniform:
        groups.setdefault(test.grid, []).append(test)
    batches = [group for group in groups.values()]
    batches += [[t] for t in tests if t not in uniform]
    results: dict[str, list[np.ndarray] | str] = {}
    for batch in batches:
        outcome = _run_group(batch)
        if isinstance(outcome, str) and len(batch) > 1:
            batches += [[t] for t in batch]  # again one by one: each gets its own error
            continue
        for k, test in enumerate(batch):
            results[test.id] = outcome if isinstance(outcome, str) else outcome[k]
    verdicts = []
    for test in tests:
        everyone = mpi.gather_everywhere(results[test.id])
        if mpi.rank() != 0:
            continue
        failed = next((r for r in everyone if isinstance(r, str)), None)
        if failed is not None:
            verdicts.append(CheckResult(test.file, test.function, "error", failed))
        else:
            verdicts.append(_judge(test, [a for rank in everyone for a in rank]))
    return verdicts
