"""The ``hlo2dace`` command line: convert, run, compare, profile and test StableHLO modules.

Every sub-command reads what the frontend accepts: a ``.mlir`` text file (pretty or
generic form), MLIR bytecode, a StableHLO portable artifact, or ``Exported.serialize()``
bytes. ``--shape b=32`` gives a symbolic dimension its size: ``convert`` then writes the
SDFG at that size, ``run`` makes random inputs of it, ``compare`` runs XLA at it against
the program compiled once for every size.

``--ranks N`` runs ``run`` and ``compare`` as an MPI job of N ranks (``mpirun``, launched by
the command itself): a module exported for N devices is partitioned by XLA and takes
global inputs; a per-device module (collectives, ``mhlo.num_partitions``) takes each
input whole on every rank, or stacked with a leading dimension of N (one slice per rank),
and returns its results stacked so. ``compare --ranks N`` runs XLA's reference on N CPU
devices in its own process.

Exit status: 0; 1 when ``compare`` finds an output that DIFFERS or ``test`` a function that
fails; 2 on an error (its message on stderr). The compilation stages and their durations
(``progress.py``) go to stderr when it is a terminal, or with ``--progress``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .errors import Hlo2DaceError, ParseError


def _sizes(args) -> dict[str, int]:
    """``--shape b=32 --shape n=7`` -> {"b": 32, "n": 7}."""
    sizes = {}
    for item in args.shape or ():
        name, _, value = item.partition("=")
        if not name or not value.lstrip("-").isdigit() or int(value) < 0:
            raise UsageError(f"--shape {item}: expected NAME=SIZE, e.g. b=32")
        sizes[name.strip()] = int(value)
    return sizes


def _lowered(args, specialise: bool):
    """The module of ``args.input``; with ``specialise`` and ``--shape`` sizes, its
    symbolic dimensions made those sizes."""
    from .api import lower_text

    lowered = lower_text(Path(args.input), optimize=args.optimize)
    sizes = _sizes(args)
    if specialise and sizes:
        lowered = lowered.specialised(lowered.argument_types(sizes))
    return lowered


def _convert(args) -> int:
    sdfg = _lowered(args, specialise=True).as_sdfg()
    output = args.output or str(Path(args.input).with_suffix(".sdfgz"))
    sdfg.save(output, compress=output.endswith(".sdfgz"))
    print(f"wrote {output}")
    return 0


class UsageError(Exception):
    """A command line that cannot work (exit status 2, like argparse's own errors)."""


def _load_inputs(path, specs) -> list[np.ndarray]:
    """The arrays of an ``.npz`` file, in argument order: named ``arg_0, arg_1, ...`` (or
    NumPy's ``arr_0, ...``), else in the order the file stores them."""
    if path is None:
        if specs:
            raise UsageError(f"the module takes {len(specs)} argument(s): give them with "
                             "--inputs X.npz (arrays arg_0, arg_1, ...)")
        return []
    with np.load(path) as data:
        keys = list(data.files)
        for prefix in ("arg_", "arr_"):
            if all(f"{prefix}{i}" in keys for i in range(len(specs))):
                keys = [f"{prefix}{i}" for i in range(len(specs))]
                break
        if len(keys) != len(specs):
            raise UsageError(f"{path} holds {len(keys)} array(s); the module takes "
                             f"{len(specs)} argument(s)")
        return [data[k] for k in keys]


def random_inputs(specs, seed: int = 0) -> list[np.ndarray]:
    """Random arrays of the given specs: normal floats, small integers, random booleans."""
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in specs:
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "b":
            arrays.append(rng.random(spec.shape) < 0.5)
        elif dtype.kind in "iu":
            arrays.append(rng.integers(0 if dtype.kind == "u" else -50, 50, spec.shape)
                          .astype(dtype))
        elif dtype.kind == "c":
            arrays.append((rng.standard_normal(spec.shape)
                           + 1j * rng.standard_normal(spec.shape)).astype(dtype))
        else:
            arrays.append(rng.standard_normal(spec.shape).astype(dtype))
    return arrays


def _concrete(lowered, args) -> list:
    """The argument specs at the ``--shape`` sizes (random inputs are made from them)."""
    from .arguments import data_types, tensor_specs

    types = data_types(lowered.argument_types(_sizes(args)))
    return tensor_specs(types, [f"arg{i}" for i in range(len(types))], "argument")


def launch(ranks: int, argv: list[str], timeout: float | None = None) -> int:
    """``hlo2dace argv`` as an MPI job of ``ranks`` processes (more ranks than cores are
    allowed: ``--oversubscribe``); its exit status. The ranks share this machine's cores
    (``OMP_NUM_THREADS``, unless set): each rank's own OpenMP team of all the cores would
    oversubscribe it ``ranks`` times."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise UsageError("--ranks needs mpirun (Debian: openmpi-bin libopenmpi-dev)")
    command = [mpirun, "-n", str(ranks), "--oversubscribe"]
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    command += [sys.executable, "-m", "hlo2dace.cli", *argv]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // ranks)))
    return subprocess.run(command, timeout=timeout, env=env).returncode


def _rank_inputs(args, compiled) -> list[np.ndarray]:
    """This rank's inputs: global ones for a partitioned module (cut by its shardings), or
    whole/stacked ones for a per-device module (random: a seed per rank)."""
    from . import mpi, sharded

    partitioned = compiled.lowered.partitioned
    specs = compiled.program.arguments
    if partitioned is not None:
        global_specs = [dataclasses.replace(spec, shape=shape)
                        for spec, (_, shape) in zip(specs, partitioned.inputs)]
        inputs = _load_inputs(args.inputs, global_specs) if args.inputs else \
            random_inputs(global_specs, args.seed)
        return sharded.local_arguments(partitioned, inputs)[0]
    if not args.inputs:
        return random_inputs(specs, args.seed + mpi.rank())
    inputs = []
    for spec, array in zip(specs, _load_inputs(args.inputs, specs)):
        if array.shape == (args.ranks, *spec.shape):
            array = array[mpi.rank()]
        inputs.append(array)
    return inputs


def _run_ranks(args) -> int:
    """One rank of ``run --ranks N``: rank 0 prints or saves the results."""
    from . import mpi, sharded

    if mpi.launched_size() <= 1:
        return launch(args.ranks, args.argv)
    mpi.check_size(args.ranks, f"run --ranks {args.ranks}")
    lowered = _lowered(args, specialise=False)
    start = time.perf_counter()
    compiled = mpi.once_per_machine(lowered.compile)
    compile_seconds = time.perf_counter() - start
    inputs = _rank_inputs(args, compiled)
    outputs = compiled.call_flat(inputs)
    seconds = median_rank_seconds(lambda: compiled.call_flat(inputs)) if args.time else None
    if lowered.partitioned is not None:
        results = sharded.results(lowered.partitioned, outputs, local=False)
    else:
        everyone = mpi.gather_everywhere(outputs)
        results = [np.stack([rank[k] for rank in everyone]) for k in range(len(outputs))]
    if mpi.rank() != 0:
        return 0
    timings = {} if seconds is None else {"__seconds": np.float64(seconds),
                                          "__compile_seconds": np.float64(compile_seconds)}
    return _report(args.output, results, timings)


def _report(output: str | None, results, timings: dict | None = None) -> int:
    """Save ``results`` (and ``timings``) to ``output`` as .npz, or print them."""
    if output:
        np.savez(output, **{f"result_{i}": r for i, r in enumerate(results)}, **(timings or {}))
        print(f"wrote {len(results)} results to {output}")
    else:
        for i, result in enumerate(results):
            print(f"result {i}: {result.dtype}{list(result.shape)}")
            print(result)
    return 0


def median_rank_seconds(call) -> float:
    """The median time of ``call`` on all ranks together (each timing ends when the slowest
    rank is done: every rank runs the same calls)."""
    from . import mpi
    from .compare import median_seconds

    world = mpi.world()
    return median_seconds(lambda: (call(), world.Barrier()))


def _run(args) -> int:
    if args.ranks > 1:
        return _run_ranks(args)
    lowered = _lowered(args, specialise=False)
    compiled = lowered.compile()
    symbolic = args.inputs is None and any(not isinstance(d, int) for spec in
                                           compiled.program.arguments for d in spec.shape)
    if symbolic or (args.inputs is None and args.shape):
        inputs = random_inputs(_concrete(lowered, args), args.seed)
    else:
        inputs = _load_inputs(args.inputs, compiled.program.arguments)
    return _report(args.output, compiled.call_flat(inputs))


def _compare_ranks(args) -> int:
    """``compare --ranks N``: XLA's reference on N CPU devices in this process, hlo2dace
    as an N-rank MPI job on the same (global) inputs."""
    import jax

    from . import sharded
    from .compare import CompareReport, checked_placement, compare_arrays, median_seconds

    exported = sharded.exported_for_devices(Path(args.input))
    if exported is None or exported.nr_devices != args.ranks:
        raise UsageError(f"compare --ranks {args.ranks} takes a module that jax.export "
                         f"exported for {args.ranks} devices (its shardings say how XLA "
                         "splits the inputs); run a per-device module with run --ranks")
    jax.config.update("jax_num_cpu_devices", args.ranks)
    reference, arguments = sharded.exported_reference(exported)
    inputs = random_inputs(arguments, args.seed)
    with tempfile.TemporaryDirectory() as folder:
        given, produced = Path(folder) / "inputs.npz", Path(folder) / "results.npz"
        np.savez(given, **{f"arg_{i}": a for i, a in enumerate(inputs)})
        argv = ["run", args.input, "--ranks", str(args.ranks), "--inputs", str(given),
                "-o", str(produced), "--time"]
        if args.optimize:
            argv += ["-O", args.optimize]
        status = launch(args.ranks, argv)
        if status:
            raise UsageError(f"the MPI job of {args.ranks} ranks failed (status {status})")
        with np.load(produced) as data:
            actual = [data[f"result_{i}"] for i in range(len(data.files) - 2)]
            seconds, compile_seconds = float(data["__seconds"]), float(
                data["__compile_seconds"])
    expected = [np.asarray(r) for r in jax.tree_util.tree_leaves(reference(*inputs))]
    placed = [jax.device_put(x, a.sharding) for x, a in zip(inputs, arguments)]
    report = CompareReport(
        tuple(compare_arrays(i, e, a, args.rtol, args.atol)
              for i, (e, a) in enumerate(zip(expected, actual))),
        median_seconds(checked_placement(lambda: jax.block_until_ready(reference(*placed)))),
        seconds, compile_seconds)
    print(report)
    return 0 if report.ok else 1


def _compare(args) -> int:
    """XLA and hlo2dace on the same random inputs, timed as ``hlo2dace.compare`` times a
    function: the inputs put on the device once, both called in turn on them."""
    import jax

    from .arguments import Results
    from .compare import CompareReport, checked_placement, compare_arrays, median_pair
    from .xla import XlaModule

    if args.ranks > 1:
        if args.reference:
            raise UsageError("--reference runs in one process: compare without --ranks")
        return _compare_ranks(args)

    lowered = _lowered(args, specialise=False)
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_seconds = time.perf_counter() - start
    inputs = random_inputs(_concrete(lowered, args), args.seed)
    # XLA compiles the module at the concrete sizes; hlo2dace runs its symbolic program
    sizes = _sizes(args)
    text = (lowered.specialised(lowered.argument_types(sizes)) if sizes
            else lowered).as_text()
    xla = XlaModule(text)
    expected, actual = xla(*inputs), compiled.call_flat(inputs)
    exact, reference = [None] * len(expected), None
    if args.reference:
        from .extended import describe, evaluate

        exact = evaluate(text, inputs)
        reference = describe([e.dtype for e in expected])
    placed = xla.place(inputs)
    # hlo2dace's results as hlo2dace.jit returns them, as XLA's are: jax.Arrays
    results = Results.of_arrays(actual)
    xla_seconds, dace_seconds = median_pair(
        checked_placement(lambda: xla.execute(placed)),
        lambda: jax.block_until_ready(results.wrap(compiled.call_flat(placed))))
    report = CompareReport(
        tuple(compare_arrays(i, e, a, args.rtol, args.atol, x)
              for i, (e, a, x) in enumerate(zip(expected, actual, exact))),
        xla_seconds, dace_seconds, compile_seconds, compiled.built, reference)
    print(report)
    return 0 if report.ok else 1


def _profile(args) -> int:
    """The profile's table on stdout; with ``--html``, the report as one HTML page."""
    from .compare import keep_freed_memory
    from .profile import profile_lowered
    from .xla import XlaModule

    # as a long-running program's allocator would, and the benchmarks do: a result's
    # pages are not faulted in again by whichever map first writes them on every call
    keep_freed_memory()
    lowered = _lowered(args, specialise=True)
    specs = _concrete(lowered, args)
    inputs = _load_inputs(args.inputs, specs) if args.inputs else random_inputs(specs, args.seed)
    xla = XlaModule(lowered.as_text())
    placed = xla.place(inputs)
    report = profile_lowered(lowered, inputs, Path(args.input).stem, args.budget,
                             lambda: xla.execute(placed))
    print(report.table(top=args.top))
    if args.html:
        print(f"wrote {report.write_html(args.html)}")
    return 0


def _test(args) -> int:
    """One line per function (PASS, FAIL, ERROR, SKIP), then the counts; exit status 1
    when a function fails or does not compile."""
    from .checktests import run_file

    failed = passed = skipped = 0
    for path in args.files:
        if not Path(path).is_file():
            raise UsageError(f"no such file: {path}")
        for result in run_file(Path(path), combine=not args.separate):
            line = f"{result.status.upper():5} {result.id}"
            if result.message and (result.status != "pass" or args.verbose):
                line += f"  ({result.message})"
            print(line, flush=True)
            passed += result.status == "pass"
            skipped += result.status == "skip"
            failed += result.status in ("fail", "error")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


@contextlib.contextmanager
def _show_stages(stream):
    """The compilation stages (``progress.stage``) on ``stream`` while the command runs."""
    from .progress import LOGGER, TerminalDisplay

    display = TerminalDisplay(stream)
    level = LOGGER.level
    LOGGER.addHandler(display)
    LOGGER.setLevel(display.level)
    try:
        yield
    finally:
        LOGGER.removeHandler(display)
        LOGGER.setLevel(level)


def main(argv=None) -> int:
    """The command line: one sub-command per job, all sharing the module loading, the
    optimisation level and the error report (an Hlo2DaceError on stderr, exit status 2)."""
    parser = argparse.ArgumentParser(prog="hlo2dace", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    convert = commands.add_parser("convert", help="translate a module into an SDFG file")
    convert.add_argument("input")
    levels = {"choices": ["none", "default", "aggressive"], "default": None,
              "help": "optimisation level (default: $HLO2DACE_OPTIMIZE, else default)"}
    convert.add_argument("-O", "--optimize", **levels)
    convert.add_argument("-o", "--output", help="output .sdfg or .sdfgz file")
    shape = {"action": "append", "metavar": "NAME=SIZE",
             "help": "size of a symbolic dimension (repeat for each), e.g. b=32"}
    progress = {"action": argparse.BooleanOptionalAction, "default": None,
                "help": "print each compilation stage and its duration on stderr (default: "
                "when stderr is a terminal)"}
    convert.add_argument("--progress", **progress)
    convert.add_argument("--shape", **shape)
    convert.set_defaults(handler=_convert)
    run = commands.add_parser("run", help="compile and run a module on given inputs")
    run.add_argument("input")
    run.add_argument("-O", "--optimize", **levels)
    run.add_argument("--inputs", help=".npz with one array per argument (arg_0, arg_1, ...)")
    run.add_argument("-o", "--output", help="save the results to this .npz")
    run.add_argument("--shape", **shape)
    run.add_argument("--progress", **progress)
    run.add_argument("--seed", type=int, default=0,
                     help="seed of the random inputs made with --shape and no --inputs")
    ranks = {"type": int, "default": 1, "metavar": "N",
             "help": "run as an MPI job of N ranks (launches mpirun; docs/distributed.md)"}
    run.add_argument("--ranks", **ranks)
    run.add_argument("--time", action="store_true", help=argparse.SUPPRESS)
    run.set_defaults(handler=_run)
    compare = commands.add_parser(
        "compare", help="XLA against DaCe on random inputs",
        description="XLA against DaCe on random inputs: a table of each output's errors and "
        "a verdict against its tolerance; exit status 0 when every output is OK, 1 when one "
        "DIFFERS, 2 on an error")
    compare.add_argument("input")
    compare.add_argument("-O", "--optimize", **levels)
    compare.add_argument("--seed", type=int, default=0)
    compare.add_argument("--shape", **shape)
    compare.add_argument("--progress", **progress)
    compare.add_argument("--rtol", type=float, default=None,
                         help="normwise relative error (max |DaCe - XLA| / max |XLA|) allowed "
                         "for floating-point outputs (default: 1024 units of rounding for 32- "
                         "and 64-bit floats, 16 for narrower ones)")
    compare.add_argument("--atol", type=float, default=0.0,
                         help="absolute errors accepted as well (default 0)")
    compare.add_argument("--reference", choices=["extended"], default=None,
                         help="also compute a nearly exact answer (the module's ops evaluated "
                         "by NumPy in float64 for 32-bit floats, in long double for float64) "
                         "and show how far XLA's and DaCe's outputs are from it; an output "
                         "that differs from XLA's but is as exact counts as OK")
    compare.add_argument("--ranks", **ranks)
    compare.set_defaults(handler=_compare)
    profile = commands.add_parser(
        "profile", help="where a module's time goes, per map and op and source line",
        description="Time every state, map and library call of the compiled module (DaCe's "
        "timers), attributed to the StableHLO ops each computes and to the source lines "
        "they came from, beside XLA's time for the module")
    profile.add_argument("input")
    profile.add_argument("-O", "--optimize", **levels)
    profile.add_argument("--inputs", help=".npz with one array per argument (default: random)")
    profile.add_argument("--seed", type=int, default=0)
    profile.add_argument("--shape", **shape)
    profile.add_argument("--progress", **progress)
    profile.add_argument("--budget", type=float, default=2.0,
                         help="seconds of timed calls (default 2)")
    profile.add_argument("--top", type=int, default=25, help="rows per table (default 25)")
    profile.add_argument("--html", help="also write the report as one self-contained HTML "
                         "page: bars of the time per op and line, the SDFG, the tables")
    profile.set_defaults(handler=_profile)
    test = commands.add_parser("test", help="run functions that use the check dialect")
    test.add_argument("files", nargs="+", help=".mlir files in the StableHLO interpreter's "
                      "test format (functions separated by '// -----', check.* ops)")
    test.add_argument("--separate", action="store_true",
                      help="compile each function on its own (default: one program per file)")
    test.add_argument("-v", "--verbose", action="store_true",
                      help="also print the notes of passing functions")
    test.add_argument("--progress", action="store_true",
                      help="print each compilation stage and its duration on stderr")
    test.set_defaults(handler=_test)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    display = _show_stages(sys.stderr) if show else contextlib.nullcontext()
    try:
        with display:
            return args.handler(args)
    except (Hlo2DaceError, UsageError) as exc:
        # a parse error's line and column are the input file's
        where = f"{args.input}: " if isinstance(exc, ParseError) and "input" in args else ""
        print(f"hlo2dace: error: {where}{exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"hlo2dace: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "),
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
