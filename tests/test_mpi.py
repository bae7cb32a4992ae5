"""Sharded programs as real MPI jobs (``mpirun -n 2`` and ``-n 4``, oversubscribed on a
machine with fewer cores), each rank against ``jax.jit`` on N simulated CPU devices
(``tests/mpi_programs.py`` says each program's bound); the StableHLO interpreter's
``interpreter.run_parallel`` tests, one job per process count (``tests/mpi_interpret.py``);
the command line's ``--ranks``; and the failures a job must report loudly instead of
hanging: a rank that raises, a job of the wrong size, ranks that disagree on shapes.

Every job runs under a timeout (a hang fails the test) and all programs of one job size
run in one job (one test per job), compiled once per machine. Measured on 2 cores at load
9-10: 4.8 min with the programs in the disk cache, 9.3 min without (3.5 min of CPU)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from util import needs

HERE = Path(__file__).resolve().parent
MPIRUN = shutil.which("mpirun")
try:
    import mpi4py  # noqa: F401
except ImportError:
    mpi4py = None



@pytest.fixture(autouse=True)
def _mpi():
    needs(MPIRUN is not None and mpi4py is not None,
          "OpenMPI (Debian's libopenmpi-dev, openmpi-bin) and mpi4py")

#: the programs each job size runs (-n 2 runs a 2 x 1 grid for the 2-D ones)
PROGRAMS = {
    4: ["mlp_training_step", "stencil_1d", "stencil_2d", "matmul_all_gather",
        "matmul_psum_scatter", "all_to_all_reshard", "named_sharding_jit",
        "groups_of_one_axis", "max_with_nan"],
    2: ["mlp_training_step", "stencil_1d", "matmul_psum_scatter", "named_sharding_jit",
        "process_local_stencil"],
}
#: seconds a job may take before it counts as hung (cold cache, busy 2-core machine)
JOB_TIMEOUT = 900
INTERPRET = HERE.parents[1] / "shared" / "conformance" / "stablehlo-interpret"
#: run_parallel tests that cannot pass, and why (strict: an entry goes when it passes)
INTERPRET_FAILURES = {
    "collective_broadcast.mlir::main#9": "a collective_broadcast of two operands: jaxlib "
                                         "0.10.2's StableHLO (1.17) allows one",
    "collective_broadcast.mlir::main#10": "a collective_broadcast of two operands: jaxlib "
                                          "0.10.2's StableHLO (1.17) allows one",
    "collective_reduce.mlir::main": "stablehlo.collective_reduce is not an op of jaxlib "
                                    "0.10.2's StableHLO (1.17)",
}


def mpirun(ranks: int, *command: str, timeout: float = JOB_TIMEOUT
           ) -> subprocess.CompletedProcess:
    """``command`` as an MPI job of ``ranks`` processes; a job that outlives ``timeout``
    is killed and fails the test."""
    launcher = [MPIRUN, "-n", str(ranks), "--oversubscribe"]
    if os.geteuid() == 0:
        launcher.append("--allow-run-as-root")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    env.pop("XLA_FLAGS", None)
    try:
        return subprocess.run([*launcher, *command], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=HERE.parent)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the MPI job {command} hung: killed after {timeout} s\n"
                    f"{exc.stdout or ''}{exc.stderr or ''}")


def job(ranks: int) -> dict[str, list]:
    """Every program of ``PROGRAMS[ranks]`` run by one job: program -> per-rank problems."""
    done = mpirun(ranks, sys.executable, str(HERE / "mpi_programs.py"), *PROGRAMS[ranks])
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0:
        pytest.fail(f"the job of {ranks} ranks failed ({done.returncode}):\n"
                    f"{done.stdout[-3000:]}{done.stderr[-5000:]}")
    return {report["program"]: report["ranks"] for report in reports}


# One test per job, not per program: a job takes minutes, and each pytest-xdist worker
# that got one of its tests would launch it again (and pytest 9 ignores xdist_group).
@pytest.mark.parametrize("ranks", sorted(PROGRAMS))
def test_programs_match_xla(ranks):
    """Each program's largest error on each rank beyond its bound (None: within it)."""
    reports = job(ranks)
    problems = {name: reports.get(name, "did not report") for name in PROGRAMS[ranks]}
    assert problems == {name: [None] * ranks for name in PROGRAMS[ranks]}, problems


def _interpret_tests() -> list:
    if not INTERPRET.is_dir():
        return []
    from hlo2dace import paralleltests

    return [(test.size, test.id) for path in sorted(INTERPRET.rglob("*.mlir"))
            for test in paralleltests.find(path, path.relative_to(INTERPRET).as_posix())]


def interpret_job(ranks: int) -> dict[str, dict]:
    """The run_parallel tests of ``ranks`` processes, run by one job: id -> verdict."""
    done = mpirun(ranks, sys.executable, str(HERE / "mpi_interpret.py"), str(INTERPRET))
    if done.returncode != 0:
        pytest.fail(f"the job of {ranks} ranks failed ({done.returncode}):\n"
                    f"{done.stdout[-3000:]}{done.stderr[-5000:]}")
    verdicts = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {verdict["id"]: verdict for verdict in verdicts}


@pytest.mark.parametrize("ranks", sorted({ranks for ranks, _ in _interpret_tests()}) or [None])
def test_interpreter_run_parallel(ranks):
    """Every run_parallel test of ``ranks`` processes passes, except those of
    ``INTERPRET_FAILURES``, which must fail (strict: an entry goes when it passes)."""
    if ranks is None:
        pytest.skip(f"no StableHLO interpreter tests at {INTERPRET} (the shared conformance "
                    "folder beside the checkout)")
    verdicts = interpret_job(ranks)
    expected = [test_id for size, test_id in _interpret_tests() if size == ranks]
    failing = {}
    for test_id in expected:
        verdict = verdicts.get(test_id, {"status": "missing", "message": "did not report"})
        if verdict["status"] != "pass":
            failing[test_id] = verdict["message"]
    unexpected = {test_id: message for test_id, message in failing.items()
                  if test_id not in INTERPRET_FAILURES}
    assert not unexpected, unexpected
    now_passing = [test_id for test_id in expected
                   if test_id in INTERPRET_FAILURES and test_id not in failing]
    assert not now_passing, f"remove from INTERPRET_FAILURES, they pass: {now_passing}"


def test_every_run_parallel_test_is_found():
    """33 of the interpreter's 38 run_parallel functions run under MPI; the other five
    use host transfers (infeed, outfeed, send/recv twice) or print for FileCheck
    (interpreter.print), and stay skipped in test_conformance.py with that reason."""
    if not INTERPRET.is_dir():
        pytest.skip(f"no StableHLO interpreter tests at {INTERPRET} (the shared conformance "
                    "folder beside the checkout)")
    assert len(_interpret_tests()) == 33


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_a_failing_rank_aborts_the_job(tmp_path):
    """Rank 1 raises while rank 0 waits in a collective: the job ends (no hang) with a
    nonzero status, and the output names the rank and the error."""
    script = _script(tmp_path, """
        import hlo2dace
        from hlo2dace import mpi
        if mpi.rank() == 1:
            raise RuntimeError("broken input on this rank")
        mpi.world().Barrier()
    """)
    done = mpirun(2, sys.executable, script, timeout=120)
    assert done.returncode != 0
    assert "rank 1 of 2 failed" in done.stderr
    assert "RuntimeError: broken input on this rank" in done.stderr


def test_ranks_time_a_collective_call_the_same_number_of_times(tmp_path):
    """``run --ranks N --time`` times a program with collectives on every rank: rank 1's
    clock says its budget is spent at once, rank 0's that it has time for more calls;
    they still make the same calls (rank 0 decides), where each rank deciding by its own
    clock left one waiting in a collective for ever."""
    script = _script(tmp_path, """
        import itertools
        import pathlib
        import sys
        import time
        from hlo2dace import cli, mpi
        world = mpi.world()
        if mpi.rank() == 1:
            real, ticks = time.perf_counter, itertools.count()
            time.perf_counter = lambda: real() + 1000.0 * next(ticks)
        calls = []
        cli.median_rank_seconds(lambda: calls.append(world.allreduce(1)))
        pathlib.Path(sys.argv[1], f"calls{mpi.rank()}").write_text(str(len(calls)))
    """)
    done = mpirun(2, sys.executable, script, str(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = [int((tmp_path / f"calls{rank}").read_text()) for rank in (0, 1)]
    assert counts[0] == counts[1] > 6, counts


def test_a_killed_launcher_takes_its_ranks_with_it(tmp_path):
    """``hlo2dace run --ranks 2`` of a long loop, its launcher killed (as a time limit
    kills it): mpirun and both ranks end too, instead of running on."""
    module = tmp_path / "long_loop.mlir"
    module.write_text("""
        func.func @main(%x: tensor<i64>) -> tensor<i64> {
          %0 = stablehlo.constant dense<0> : tensor<i64>
          %1:2 = stablehlo.while(%i = %0, %s = %x) : tensor<i64>, tensor<i64>
            cond {
              %n = stablehlo.constant dense<4000000000000> : tensor<i64>
              %c = stablehlo.compare LT, %i, %n : (tensor<i64>, tensor<i64>) -> tensor<i1>
              stablehlo.return %c : tensor<i1>
            } do {
              %one = stablehlo.constant dense<1> : tensor<i64>
              %j = stablehlo.add %i, %one : tensor<i64>
              %t = stablehlo.xor %s, %j : tensor<i64>
              stablehlo.return %j, %t : tensor<i64>, tensor<i64>
            }
          %2 = "stablehlo.all_reduce"(%1#1) <{replica_groups = dense<[[0, 1]]>
              : tensor<1x2xi64>}> ({
          ^bb0(%a: tensor<i64>, %b: tensor<i64>):
            %m = stablehlo.add %a, %b : tensor<i64>
            stablehlo.return %m : tensor<i64>
          }) : (tensor<i64>) -> tensor<i64>
          return %2 : tensor<i64>
        }""")
    np.savez(tmp_path / "x.npz", arg_0=np.zeros((2,), np.int64))

    def ranks() -> list[int]:
        found = []
        for status in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                command = status.read_bytes().split(b"\0")
            except OSError:
                continue
            if str(module).encode() in command and b"mpirun" not in command[0]:
                found.append(int(status.parent.name))
        return found

    launcher = subprocess.Popen([sys.executable, "-m", "hlo2dace.cli", "run", "--ranks", "2",
                                 str(module), "--inputs", str(tmp_path / "x.npz")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(ranks()) < 3 and time.monotonic() < deadline:  # the launcher and 2 ranks
            time.sleep(0.5)
        assert len(ranks()) == 3, "the job did not start"
        time.sleep(5)  # the ranks compile and enter the loop
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 60
        while ranks() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert ranks() == []
    finally:
        for pid in ranks():
            os.kill(pid, 9)


def test_a_mesh_larger_than_the_job_names_the_command(tmp_path):
    """A module for 4 processes in a job of 2: every rank gets the command to launch."""
    script = _script(tmp_path, """
        import numpy as np
        import hlo2dace
        from hlo2dace.errors import JobSizeError
        module = '''
        func.func @main(%x: tensor<2xi32>) -> tensor<2xi32> {
          %0 = "stablehlo.all_reduce"(%x) <{replica_groups = dense<[[0, 1, 2, 3]]>
              : tensor<1x4xi64>}> ({
          ^bb0(%a: tensor<i32>, %b: tensor<i32>):
            %s = stablehlo.add %a, %b : tensor<i32>
            stablehlo.return %s : tensor<i32>
          }) : (tensor<2xi32>) -> tensor<2xi32>
          return %0 : tensor<2xi32>
        }'''
        program = hlo2dace.compile_text(module)
        try:
            program(np.zeros(2, np.int32))
        except JobSizeError as error:
            print("refused:", error)
    """)
    done = mpirun(2, sys.executable, script, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("refused:") == 2
    assert "runs on 4 processes" in done.stdout and "mpirun -n 4" in done.stdout


def test_shapes_that_disagree_across_ranks_are_reported(tmp_path):
    """Rank 1 passes a batch of another size: the ranks compare signatures before
    compiling, and every rank reports both shapes instead of hanging in a collective."""
    script = _script(tmp_path, """
        import jax
        import numpy as np
        from jax.sharding import AxisType, PartitionSpec as P
        import hlo2dace
        from hlo2dace import mpi
        mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,))
        f = hlo2dace.jit(jax.shard_map(lambda x: jax.lax.psum(x, "x"), mesh=mesh,
                                       in_specs=P("x"), out_specs=P()))
        f(np.ones(4 if mpi.rank() == 0 else 6, np.float32))
    """)
    done = mpirun(2, sys.executable, script, timeout=300)
    assert done.returncode != 0
    assert "the ranks disagree on the signature of a sharded call" in done.stderr
    assert "(4,)" in done.stderr and "(6,)" in done.stderr


def test_command_line_runs_and_compares_an_exported_sharded_module(tmp_path):
    """``hlo2dace compare --ranks 2`` of a shard_map exported for 2 devices: XLA on two
    simulated devices in the command's process, hlo2dace as the MPI job it launches
    (exit status 0: every output within its tolerance); ``run --ranks 2`` of a per-device
    module with inputs stacked per rank returns the results stacked so."""
    export = _script(tmp_path, """
        import sys
        import jax
        import jax.numpy as jnp
        import numpy as np
        from jax.sharding import AxisType, PartitionSpec as P
        jax.config.update("jax_num_cpu_devices", 2)
        mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,))
        def step(u):
            halo = jax.lax.ppermute(u[-1:], "x", [(0, 1)])
            return jnp.tanh(u) + jax.lax.psum(u, "x")[0] + halo[0]
        f = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
        exported = jax.export.export(f)(jax.ShapeDtypeStruct((8,), np.float32))
        open(sys.argv[1], "wb").write(exported.serialize())
    """)
    module = tmp_path / "sharded.bin"
    subprocess.run([sys.executable, export, str(module)], check=True, timeout=300)
    done = subprocess.run([sys.executable, "-m", "hlo2dace.cli", "compare", "--ranks", "2",
                           str(module)], capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert " OK" in done.stdout

    per_device = tmp_path / "sum.mlir"
    per_device.write_text("""
        func.func @main(%x: tensor<3xi64>) -> tensor<3xi64> {
          %0 = "stablehlo.all_reduce"(%x) <{replica_groups = dense<[[0, 1]]>
              : tensor<1x2xi64>}> ({
          ^bb0(%a: tensor<i64>, %b: tensor<i64>):
            %s = stablehlo.add %a, %b : tensor<i64>
            stablehlo.return %s : tensor<i64>
          }) : (tensor<3xi64>) -> tensor<3xi64>
          return %0 : tensor<3xi64>
        }""")
    inputs, results = tmp_path / "x.npz", tmp_path / "y.npz"
    np.savez(inputs, arg_0=np.array([[1, 2, 3], [10, 20, 30]], np.int64))
    done = subprocess.run([sys.executable, "-m", "hlo2dace.cli", "run", "--ranks", "2",
                           str(per_device), "--inputs", str(inputs), "-o", str(results)],
                          capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    with np.load(results) as data:
        np.testing.assert_array_equal(data["result_0"], [[11, 22, 33], [11, 22, 33]])


#: modules exported the way jax.export's documentation shows for sharded arguments
#: (``ShapeDtypeStruct(..., sharding=NamedSharding(mesh, spec))``, meshes from
#: ``jax.make_mesh``): name -> the ranks it runs on
SHARDED_EXPORTS = {
    "shard_map_explicit_axes": 2,  # make_mesh's default axis types (Explicit)
    "shard_map_auto_axes": 2,
    "mesh_2x2_two_axis_names": 4,
    "jit_in_and_out_shardings": 2,  # Auto axes, shardings given to jax.jit
    "jit_out_shardings_explicit_axes": 2,  # shardings of the arguments, Explicit axes
}
EXPORT_SHARDED = """
    import sys
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    jax.config.update("jax_num_cpu_devices", 4)
    folder = sys.argv[1]

    def save(name, f, *specs):
        with open(f"{folder}/{name}.bin", "wb") as file:
            file.write(jax.export.export(f)(*specs).serialize())

    def step(u, w):
        return jnp.tanh(u @ w), jax.lax.psum(u.sum(), "x")

    for name, kinds in (("shard_map_explicit_axes", {}),
                        ("shard_map_auto_axes", {"axis_types": (AxisType.Auto,)})):
        mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2], **kinds)
        save(name, jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P("x"), P()),
                                         out_specs=(P("x"), P()))),
             jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=NamedSharding(mesh, P("x"))),
             jax.ShapeDtypeStruct((4, 4), jnp.float32, sharding=NamedSharding(mesh, P())))

    mesh = jax.make_mesh((2, 2), ("x", "y"))
    save("mesh_2x2_two_axis_names",
         jax.jit(jax.shard_map(lambda u: (jax.lax.psum(u, "x") * 2, jax.lax.pmax(u, ("x", "y"))),
                               mesh=mesh, in_specs=P("x", "y"), out_specs=(P(None, "y"), P()))),
         jax.ShapeDtypeStruct((4, 6), jnp.float32, sharding=NamedSharding(mesh, P("x", "y"))))

    def product(a, b):
        return jnp.sin(a) @ b, a.sum(0)

    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2], axis_types=(AxisType.Auto,))
    rows, whole = NamedSharding(mesh, P("x")), NamedSharding(mesh, P())
    save("jit_in_and_out_shardings",
         jax.jit(product, in_shardings=(rows, whole), out_shardings=(rows, whole)),
         jax.ShapeDtypeStruct((8, 4), jnp.float32), jax.ShapeDtypeStruct((4, 3), jnp.float32))
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
    rows, whole = NamedSharding(mesh, P("x")), NamedSharding(mesh, P())
    save("jit_out_shardings_explicit_axes",
         jax.jit(product, out_shardings=(rows, whole)),
         jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=rows),
         jax.ShapeDtypeStruct((4, 3), jnp.float32, sharding=whole))
"""


@pytest.fixture(scope="module")
def sharded_exports(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sharded_exports")
    script = folder / "export.py"
    script.write_text(textwrap.dedent(EXPORT_SHARDED))
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    subprocess.run([sys.executable, str(script), str(folder)], check=True, timeout=300,
                   env=env)
    return folder


@pytest.mark.parametrize("name", sorted(SHARDED_EXPORTS))
def test_command_line_compares_modules_exported_with_shardings(sharded_exports, name):
    """``compare --ranks N`` rebuilds the exported mesh (axis names, sizes and types) for
    XLA's reference, and every output of the N-rank job matches it."""
    ranks = SHARDED_EXPORTS[name]
    done = subprocess.run([sys.executable, "-m", "hlo2dace.cli", "compare", "--ranks",
                           str(ranks), str(sharded_exports / f"{name}.bin")],
                          capture_output=True, text=True, timeout=JOB_TIMEOUT, cwd=HERE.parent)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line[:1].isdigit()]
    assert len(rows) == 2 and all(row.endswith(" OK") for row in rows), done.stdout


def test_command_line_runs_a_module_exported_with_shardings(sharded_exports, tmp_path):
    """``run --ranks 2`` of the shard_map exported over make_mesh's Explicit axes takes
    global inputs and returns global results: those of the unsharded computation."""
    rng = np.random.default_rng(1)
    u, w = rng.standard_normal((8, 4), np.float32), rng.standard_normal((4, 4), np.float32)
    np.savez(tmp_path / "in.npz", arg_0=u, arg_1=w)
    done = subprocess.run([sys.executable, "-m", "hlo2dace.cli", "run", "--ranks", "2",
                           str(sharded_exports / "shard_map_explicit_axes.bin"), "--inputs",
                           str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")],
                          capture_output=True, text=True, timeout=JOB_TIMEOUT, cwd=HERE.parent)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_allclose(out["result_0"], np.tanh(u @ w), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out["result_1"], u.sum(), rtol=1e-5)


def test_a_per_device_module_run_on_the_wrong_number_of_ranks(tmp_path):
    """A per-device module whose collectives name two processes, run with ``--ranks 3``:
    one line of error naming the count to give, exit status 2 (not one traceback per
    rank)."""
    module = tmp_path / "sum.mlir"
    module.write_text("""
        func.func @main(%x: tensor<3xi64>) -> tensor<3xi64> {
          %0 = "stablehlo.all_reduce"(%x) <{replica_groups = dense<[[0, 1]]>
              : tensor<1x2xi64>}> ({
          ^bb0(%a: tensor<i64>, %b: tensor<i64>):
            %s = stablehlo.add %a, %b : tensor<i64>
            stablehlo.return %s : tensor<i64>
          }) : (tensor<3xi64>) -> tensor<3xi64>
          return %0 : tensor<3xi64>
        }""")
    done = subprocess.run([sys.executable, "-m", "hlo2dace.cli", "run", "--ranks", "3",
                           str(module)],
                          capture_output=True, text=True, timeout=JOB_TIMEOUT, cwd=HERE.parent)
    assert (done.returncode, done.stderr) == (
        2, f"hlo2dace: error: {module} runs on 2 processes: run it with --ranks 2\n")

