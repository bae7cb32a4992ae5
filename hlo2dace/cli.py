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

from . import __version__
from .errors import Hlo2DaceError, JobSizeError, ParseError


def _sizes(args) -> dict[str, int]:
    """``--shape b=32 --shape n=7`` -> {"b": 32, "n": 7}."""
    sizes = {}
    for item in args.shape or ():
        name, _, value = item.partition("=")
        if not name or not value.lstrip("-").isdigit() or int(value) < 0:
            raise UsageError(f"--shape {item}: expected NAME=SIZE, e.g. b=32")
        sizes[name.strip()] = int(value)
    return sizes


def _options(args):
    """The compilation options of ``-O``, ``--disable`` and ``--target``."""
    from .pipeline import Options

    return Options(args.optimize, tuple(getattr(args, "disable", None) or ()),
                   target=getattr(args, "target", None) or "cpu")


def _dimension_groups(lowered, args) -> list[list[str]]:
    """The module's symbolic dimensions, grouped as ``symbolic.dimension_groups`` says
    (found once per command)."""
    from . import symbolic

    if getattr(args, "dimension_groups", None) is None:
        args.dimension_groups = symbolic.dimension_groups(lowered.module)
    return args.dimension_groups


def _dimension_sizes(lowered, args) -> dict[str, int]:
    """The ``--shape`` sizes, each checked against the module's symbolic dimensions, with
    the dimensions that the module's shape checks make equal to a given one."""
    sizes = _sizes(args)
    if not sizes:
        return sizes
    groups = _dimension_groups(lowered, args)
    known = {name for members in groups for name in members}
    for name, size in sizes.items():
        if name not in known:
            dimensions = (f"its symbolic dimensions are {', '.join(g[0] for g in groups)}"
                          if groups else "its shapes are all fixed")
            raise UsageError(f"--shape {name}={size}: the module has no dimension "
                             f"{name!r}; {dimensions}")
    implied = dict(sizes)
    for members in groups:
        given = [sizes[name] for name in members if name in sizes]
        implied.update({name: given[0] for name in members if given and name not in sizes})
    return implied


def _lowered(args, specialise: bool):
    """The module of ``args.input``; with ``specialise`` and ``--shape`` sizes, its
    symbolic dimensions made those sizes (kept as ``args.sizes``)."""
    from .api import lower_text

    lowered = lower_text(Path(args.input), optimize=_options(args))
    args.sizes = _dimension_sizes(lowered, args)
    if specialise and args.sizes:
        lowered = lowered.specialised(lowered.argument_types(args.sizes))
    return lowered


def _convert(args) -> int:
    sdfg = _lowered(args, specialise=True).as_sdfg()
    output = args.output or str(Path(args.input).with_suffix(".sdfgz"))
    sdfg.save(output, compress=output.endswith(".sdfgz"))
    print(f"wrote {output}")
    return 0


def _passes(args) -> int:
    """The pipeline of passes at ``-O`` (less ``--disable``); with a module, the module
    after the plan stage, each op with the decisions that concern it."""
    options = _options(args).resolved()
    print(options.pipeline().listing(), end="")
    print(f"machine: {options.machine.describe()}")
    if args.input:
        print()
        print(_lowered(args, specialise=True).as_planned_text(debug_info=args.locations),
              end="")
    return 0


class UsageError(Exception):
    """A command line that cannot work (exit status 2, like argparse's own errors)."""


#: how every error the command line reports begins (one line on stderr, exit status 2)
ERROR_PREFIX = "hlo2dace: error: "


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line (the usage is one ``--help`` away)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Version(argparse.Action):
    """``--version``: hlo2dace's version and those of what it builds on (read from the
    installed packages' metadata, without importing them)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0,
                         help="print the versions of hlo2dace, JAX and DaCe, and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib import metadata

        versions = []
        for package in ("jax", "jaxlib", "dace"):
            try:
                versions.append(f"{package} {metadata.version(package)}")
            except metadata.PackageNotFoundError:
                versions.append(f"{package} not installed")
        print(f"hlo2dace {__version__} ({', '.join(versions)})")
        parser.exit(0)


def _number(kind: type, minimum: float, inclusive: bool = True):
    """An argparse type: a finite ``kind`` (int or float) of at least ``minimum`` (above it
    where not ``inclusive``)."""
    import math

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'a whole number' if kind is int else 'a number'}") from None
        if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
            bound = f"{'at least' if inclusive else 'more than'} {minimum}"
            raise argparse.ArgumentTypeError(f"{text} is not {bound}")
        return value

    return parse


def _input_file(text: str) -> str:
    """An argparse type: a file that exists."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a module's file")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return text


def _output_file(text: str) -> str:
    """An argparse type: a file to write, in a folder that exists (none is made: a
    mistyped folder is an error, not a new folder)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: there is no folder {path.parent}")
    return text


def _load_inputs(path, specs, ranks: int = 1) -> list:
    """The arrays of an ``.npz`` file, in argument order: named ``arg_0, arg_1, ...`` (or
    NumPy's ``arr_0, ...``), else in the order the file stores them; a ``.npy`` file holds
    the argument of a module of one. Each must have its argument's dtype and shape, or with
    ``ranks`` > 1 that shape stacked, one per rank. Other arrays are ignored with a
    warning."""
    import zipfile

    if path is None:
        if specs:
            raise UsageError(f"the module takes {len(specs)} argument(s): give them with "
                             "--inputs X.npz (arrays arg_0, arg_1, ...)")
        return []
    try:
        data = np.load(path, allow_pickle=False)
    except OSError as exc:
        raise UsageError(f"--inputs {path}: {exc.strerror or exc}") from None
    except (ValueError, EOFError, zipfile.BadZipFile):
        with open(path, "rb") as file:
            objects = file.read(6) == b"\x93NUMPY"  # a .npy file of Python objects
        raise UsageError(f"--inputs {path}: " + (
            "an array of Python objects (--inputs reads numbers, and never unpickles)"
            if objects else "not a NumPy .npz or .npy file (save the arguments with "
            "numpy.savez(path, arg_0=..., arg_1=...))")) from None
    if isinstance(data, np.ndarray):
        if len(specs) != 1:
            raise UsageError(f"--inputs {path}: a .npy file holds one array and the module "
                             f"takes {len(specs)} argument(s): save them with numpy.savez("
                             "path, arg_0=..., arg_1=...)")
        arrays, names = [data], [Path(path).name]
    else:
        with data:
            keys = list(data.files)
            for prefix in ("arg_", "arr_"):
                if all(f"{prefix}{i}" in keys for i in range(len(specs))):
                    keys = [f"{prefix}{i}" for i in range(len(specs))]
                    break
            if len(keys) != len(specs):
                raise UsageError(f"--inputs {path} holds {len(keys)} array(s) and the module "
                                 f"takes {len(specs)} argument(s) (name them arg_0, arg_1, "
                                 "...)")
            unused = [k for k in data.files if k not in keys]
            if unused:
                print(f"hlo2dace: warning: --inputs {path}: {', '.join(unused)} ignored (the "
                      f"module takes {', '.join(keys) or 'no arguments'})", file=sys.stderr)
            try:
                arrays, names = [data[k] for k in keys], keys
            except ValueError:
                raise UsageError(f"--inputs {path}: an array of Python objects (--inputs "
                                 "reads numbers, and never unpickles)") from None
    for k, (name, array, spec) in enumerate(zip(names, arrays, specs)):
        shape = tuple(array.shape[1:]) if ranks > 1 and array.shape[:1] == (ranks,) \
            else tuple(array.shape)
        fits = len(shape) == len(spec.shape) and all(
            not isinstance(d, int) or d == n for d, n in zip(spec.shape, shape))
        if not fits or array.dtype != np.dtype(spec.dtype):
            stacked = f" (or {ranks} of them stacked, one per rank)" if ranks > 1 else ""
            raise UsageError(f"--inputs {path}: {name} is {array.dtype}{list(array.shape)}; "
                             f"argument {k} of the module is {_spec_text(spec)}{stacked}")
    return arrays


def _spec_text(spec) -> str:
    """``float32[b, 4]``"""
    return f"{np.dtype(spec.dtype)}[{', '.join(str(d) for d in spec.shape)}]"


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

    missing = [members[0] for members in _dimension_groups(lowered, args)
               if members[0] not in args.sizes]
    if missing:
        raise UsageError(f"the module's dimension(s) {', '.join(missing)} have no size: give "
                         f"them with --shape (e.g. --shape {missing[0]}=8) or give --inputs")
    types = data_types(lowered.argument_types(args.sizes))
    return tensor_specs(types, [f"arg{i}" for i in range(len(types))], "argument")


def _ended_with_parent() -> None:
    """In the launcher's child (mpirun): ask Linux for SIGTERM when the launcher dies, so
    that a killed ``hlo2dace run --ranks`` (by a time limit, say) takes mpirun and
    its ranks with it instead of leaving them running."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def launch(ranks: int, argv: list[str]) -> int:
    """``hlo2dace argv`` as an MPI job of ``ranks`` processes (more ranks than cores are
    allowed: ``--oversubscribe``); its exit status. The ranks share this machine's cores
    (``OMP_NUM_THREADS``, unless set): each rank's own OpenMP team of all the cores would
    oversubscribe it ``ranks`` times. The job's stderr passes through until a rank reports
    an error; that error (every rank's is usually the same, and mpirun's account of the
    ranks that stopped follows) is raised here, once."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise UsageError("--ranks needs mpirun (Debian: openmpi-bin libopenmpi-dev)")
    command = [mpirun, "-n", str(ranks), "--oversubscribe"]
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    command += [sys.executable, "-m", "hlo2dace.cli", *argv]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // ranks)))
    job = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True,
                           errors="replace", preexec_fn=_ended_with_parent)
    error = None
    for line in job.stderr:
        if error is None and line.startswith(ERROR_PREFIX):
            error = line[len(ERROR_PREFIX):].strip()
        elif error is None:
            sys.stderr.write(line)
            sys.stderr.flush()
    status = job.wait()
    if error is not None:
        raise UsageError(error)
    return status


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
    for spec, array in zip(specs, _load_inputs(args.inputs, specs, args.ranks)):
        if array.shape == (args.ranks, *spec.shape):
            array = array[mpi.rank()]
        inputs.append(array)
    return inputs


def _check_job(args) -> None:
    """What ``run --ranks N`` can check before it launches its job: a module that is not
    sharded or is made for another number of ranks, ``--shape`` names and the inputs get
    one error here rather than one per rank."""
    from . import sharded
    from .api import lower_text
    from .arguments import data_types, tensor_specs

    exported = sharded.exported_for_devices(Path(args.input))
    if exported is not None:
        if exported.nr_devices != args.ranks:
            raise UsageError(f"{args.input} is exported for {exported.nr_devices} devices: "
                             f"run it with --ranks {exported.nr_devices}")
        if args.inputs:
            _load_inputs(args.inputs, exported.in_avals)
        return
    lowered = lower_text(Path(args.input), optimize=args.optimize)
    text = lowered.as_text()
    if not sharded.has_per_device_code(text):
        raise UsageError(f"{args.input} is not sharded (not exported for several devices, no "
                         "collectives): run it without --ranks")
    replicas, partitions = sharded.processes(text)
    if replicas * partitions > 1 and replicas * partitions != args.ranks:
        raise UsageError(f"{args.input} runs on {replicas * partitions} processes: run it "
                         f"with --ranks {replicas * partitions}")
    _dimension_sizes(lowered, args)
    types = [v.type for v in lowered.main.arguments]
    if args.inputs and all(getattr(t, "is_static", True) for t in types):
        specs = tensor_specs(data_types(types), [f"arg{i}" for i in range(len(types))],
                             "argument")
        _load_inputs(args.inputs, specs, args.ranks)


def _run_ranks(args) -> int:
    """One rank of ``run --ranks N``: rank 0 prints or saves the results."""
    from . import mpi, sharded

    if mpi.launched_size() <= 1:
        _check_job(args)
        return launch(args.ranks, args.argv)
    mpi.check_size(args.ranks, f"run --ranks {args.ranks}")
    lowered = _lowered(args, specialise=False)
    start = time.perf_counter()
    compiled = mpi.once_per_machine(lowered.compile)
    compile_seconds = time.perf_counter() - start
    inputs = _rank_inputs(args, compiled)
    try:
        outputs = compiled.call_flat(inputs)
    except JobSizeError as exc:  # a per-device module's collectives name its process count
        raise UsageError(f"{args.input} runs on {exc.processes} processes: run it with "
                         f"--ranks {exc.processes}") from None
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
        output = output if output.endswith(".npz") else f"{output}.npz"  # as np.savez names it
        np.savez(output, **{f"result_{i}": r for i, r in enumerate(results)}, **(timings or {}))
        print(f"wrote {len(results)} results to {output}")
    else:
        for i, result in enumerate(results):
            print(f"result {i}: {result.dtype}{list(result.shape)}")
            print(result)
    return 0


def median_rank_seconds(call) -> float:
    """The median time of ``call`` on all ranks together: each timing ends when the slowest
    rank is done, and rank 0 decides for all whether to time it again (a rank whose own
    clock said one call more would wait for the others in its collectives for ever)."""
    from . import mpi
    from .compare import median_seconds

    world = mpi.world()
    return median_seconds(lambda: (call(), world.Barrier()),
                          agreed=lambda more: world.bcast(more, root=0))


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
    if exported is None:
        raise UsageError(f"compare --ranks {args.ranks} takes a module that jax.export "
                         f"exported for {args.ranks} devices (its shardings say how XLA "
                         f"splits the inputs), and {args.input} is none; run a per-device "
                         "module with run --ranks")
    if exported.nr_devices != args.ranks:
        raise UsageError(f"{args.input} is exported for {exported.nr_devices} devices: "
                         f"compare it with --ranks {exported.nr_devices}")
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
        for name in args.disable or ():
            argv += ["--disable", name]
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
    sizes = args.sizes
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
    parser = _Parser(prog="hlo2dace", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", required=True)
    convert = commands.add_parser("convert", help="translate a module into an SDFG file")
    convert.add_argument("input", type=_input_file)
    levels = {"choices": ["none", "default", "aggressive"], "default": None,
              "help": "optimisation level (default: $HLO2DACE_OPTIMIZE, else default)"}
    convert.add_argument("-O", "--optimize", **levels)
    convert.add_argument("-o", "--output", type=_output_file,
                         help="output .sdfg or .sdfgz file")
    shape = {"action": "append", "metavar": "NAME=SIZE",
             "help": "size of a symbolic dimension (repeat for each), e.g. b=32"}
    progress = {"action": argparse.BooleanOptionalAction, "default": None,
                "help": "print each compilation stage and its duration on stderr (default: "
                "when stderr is a terminal)"}
    seed = {"type": _number(int, 0), "default": 0}
    convert.add_argument("--progress", **progress)
    convert.add_argument("--shape", **shape)
    disable = {"action": "append", "metavar": "PASS",
               "help": "do not run this pass (repeat for each; hlo2dace passes lists them)"}
    convert.add_argument("--disable", **disable)
    target = {"choices": ["cpu", "cuda"], "default": "cpu",
              "help": "the code's target (cuda: docs/gpu.md; default: cpu)"}
    convert.add_argument("--target", **target)
    convert.set_defaults(handler=_convert)
    passes = commands.add_parser(
        "passes", help="list the passes a compilation runs; with a module, show it planned",
        description="The passes of the pipeline at an optimisation level, stage by stage "
        "(plan: IR to IR; sdfg: the built SDFG; code: the generated C++), and the machine "
        "model their thresholds come from; with a module, the module after the plan stage, "
        "each op with the decisions (h2d.* attributes) that concern it")
    passes.add_argument("input", nargs="?")
    passes.add_argument("-O", "--optimize", **levels)
    passes.add_argument("--disable", **disable)
    passes.add_argument("--target", **target)
    passes.add_argument("--shape", **shape)
    passes.add_argument("--locations", action="store_true",
                        help="with a module: each op's source location too")
    passes.add_argument("--progress", **progress)
    passes.set_defaults(handler=_passes)
    run = commands.add_parser("run", help="compile and run a module on given inputs")
    run.add_argument("input", type=_input_file)
    run.add_argument("-O", "--optimize", **levels)
    run.add_argument("--inputs", help=".npz with one array per argument (arg_0, arg_1, ...), "
                     "or .npy for a module of one argument")
    run.add_argument("-o", "--output", type=_output_file, help="save the results to this .npz")
    run.add_argument("--shape", **shape)
    run.add_argument("--progress", **progress)
    run.add_argument("--seed", **seed,
                     help="seed of the random inputs made with --shape and no --inputs")
    ranks = {"type": _number(int, 1), "default": 1, "metavar": "N",
             "help": "run as an MPI job of N ranks (launches mpirun; docs/distributed.md)"}
    run.add_argument("--ranks", **ranks)
    run.add_argument("--disable", **disable)
    run.add_argument("--target", **target)
    run.add_argument("--time", action="store_true", help=argparse.SUPPRESS)
    run.set_defaults(handler=_run)
    compare = commands.add_parser(
        "compare", help="XLA against DaCe on random inputs",
        description="XLA against DaCe on random inputs: a table of each output's errors and "
        "a verdict against its tolerance; exit status 0 when every output is OK, 1 when one "
        "DIFFERS, 2 on an error")
    compare.add_argument("input", type=_input_file)
    compare.add_argument("-O", "--optimize", **levels)
    compare.add_argument("--seed", **seed)
    compare.add_argument("--shape", **shape)
    compare.add_argument("--progress", **progress)
    compare.add_argument("--rtol", type=_number(float, 0), default=None,
                         help="normwise relative error (max |DaCe - XLA| / max |XLA|) allowed "
                         "for floating-point outputs (default: 1024 units of rounding for 32- "
                         "and 64-bit floats, 16 for narrower ones)")
    compare.add_argument("--atol", type=_number(float, 0), default=0.0,
                         help="absolute errors accepted as well (default 0)")
    compare.add_argument("--reference", choices=["extended"], default=None,
                         help="also compute a nearly exact answer (the module's ops evaluated "
                         "by NumPy in float64 for 32-bit floats, in long double for float64) "
                         "and show how far XLA's and DaCe's outputs are from it; an output "
                         "that differs from XLA's but is as exact counts as OK")
    compare.add_argument("--ranks", **ranks)
    compare.add_argument("--disable", **disable)
    compare.set_defaults(handler=_compare)
    profile = commands.add_parser(
        "profile", help="where a module's time goes, per map and op and source line",
        description="Time every state, map and library call of the compiled module (DaCe's "
        "timers), attributed to the StableHLO ops each computes and to the source lines "
        "they came from, beside XLA's time for the module")
    profile.add_argument("input", type=_input_file)
    profile.add_argument("-O", "--optimize", **levels)
    profile.add_argument("--inputs", help=".npz with one array per argument (default: random)")
    profile.add_argument("--seed", **seed)
    profile.add_argument("--shape", **shape)
    profile.add_argument("--progress", **progress)
    profile.add_argument("--budget", type=_number(float, 0, inclusive=False), default=2.0,
                         help="seconds of timed calls (default 2)")
    profile.add_argument("--top", type=_number(int, 1), default=25,
                         help="rows per table (default 25)")
    profile.add_argument("--html", type=_output_file,
                         help="also write the report as one self-contained HTML page: bars "
                         "of the time per op and line, the SDFG, the tables")
    profile.add_argument("--disable", **disable)
    profile.set_defaults(handler=_profile)
    test = commands.add_parser("test", help="run functions that use the check dialect")
    test.add_argument("files", nargs="+", type=_input_file,
                      help=".mlir files in the StableHLO interpreter's test format "
                      "(functions separated by '// -----', check.* ops)")
    test.add_argument("--separate", action="store_true",
                      help="compile each function on its own (default: one program per file)")
    test.add_argument("-v", "--verbose", action="store_true",
                      help="also print the notes of passing functions")
    test.add_argument("--progress", action="store_true",
                      help="print each compilation stage and its duration on stderr")
    test.set_defaults(handler=_test)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a command line argparse refused
        return exc.code
    args.argv = list(sys.argv[1:] if argv is None else argv)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    display = _show_stages(sys.stderr) if show else contextlib.nullcontext()
    try:
        with display:
            return args.handler(args)
    except (Hlo2DaceError, UsageError) as exc:
        # a parse error's line and column are the input file's
        where = f"{args.input}: " if isinstance(exc, ParseError) and "input" in args else ""
        print(f"{ERROR_PREFIX}{where}{exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{ERROR_PREFIX}{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "),
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
