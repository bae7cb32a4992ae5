"""The MPI job a process belongs to: its rank and size, the values a compiled program asks
of each process (its communicators, rank-indexed tables), loud failures, and builds done
once per machine.

A process is part of a job when ``mpirun`` (or ``srun``) started it: the launcher's
environment says so (``LAUNCH_SIZE_VARIABLES``), and only then is mpi4py imported (importing
it initialises MPI). Rank ``r`` of the job plays process ``r`` of a program's grid, so a
program made for ``n`` processes refuses to run in a job of another size, naming the
command to launch instead.

A rank that raises an uncaught exception would leave the others waiting forever in their
next collective; once the job is joined, such an exception prints the rank and the error
and aborts the whole job (``MPI_Abort``), so a failure is loud, never a hang.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import traceback
from typing import Any, Callable

from .errors import Hlo2DaceError, JobSizeError

#: what launchers (Open MPI's mpirun, MPICH/Hydra and Slurm's PMI) set in each rank
LAUNCH_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE")


def launched_size() -> int:
    """The number of ranks the launcher started, from its environment (1 outside a job)."""
    for variable in LAUNCH_SIZE_VARIABLES:
        value = os.environ.get(variable)
        if value and value.isdigit():
            return int(value)
    return 1


def configure_devices() -> None:
    """In an MPI job of ``n`` ranks, let JAX see ``n`` CPU devices (before its backend
    starts), so meshes and shardings of ``n`` devices trace as they would in one process
    of ``n`` devices. Does nothing outside a job or once JAX's backend runs."""
    ranks = launched_size()
    if ranks <= 1:
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = \
            f"{flags} --xla_force_host_platform_device_count={ranks}".strip()


@functools.lru_cache(maxsize=1)
def world() -> Any:
    """mpi4py's ``COMM_WORLD`` of this job (MPI initialised, failures abort the job), or
    None for a process that no launcher started."""
    if launched_size() <= 1:
        return None
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise Hlo2DaceError("this process runs in an MPI job, which needs mpi4py "
                            "(pip install mpi4py; make test installs it)") from exc
    _abort_on_uncaught_exceptions(MPI.COMM_WORLD)
    return MPI.COMM_WORLD


def rank() -> int:
    comm = world()
    return comm.Get_rank() if comm is not None else 0


def size() -> int:
    comm = world()
    return comm.Get_size() if comm is not None else 1


def launch_command(processes: int, what: str = "python your_script.py") -> str:
    return f"mpirun -n {processes} {what}"


def check_size(processes: int, what: str = "a program") -> None:
    """Refuse to run ``what``, made for ``processes`` processes, in a job of another size."""
    if processes == size():
        return
    if size() == 1:
        raise JobSizeError(f"{what} runs on {processes} processes (one per device of its "
                           f"mesh) and this process is not part of an MPI job: launch it "
                           f"with `{launch_command(processes)}`, or `hlo2dace run --ranks "
                           f"{processes}` for a module", processes)
    raise JobSizeError(f"{what} runs on {processes} processes (one per device of its mesh), "
                       f"but this MPI job has {size()} ranks: launch it with "
                       f"`{launch_command(processes)}`", processes)


def process_value(spec: dict) -> int:
    """The value this process supplies for a program's hidden per-process argument:
    ``{"communicator": groups, "processes": n}``: the handle of the MPI communicator of
    this rank's group (``communicator``); ``{"table": values}``: ``values[rank]``, None
    being MPI's null process (no peer)."""
    if "communicator" in spec:
        check_size(spec["processes"])
        return communicator(tuple(tuple(g) for g in spec["communicator"]))
    table = spec["table"]
    check_size(len(table))
    value = table[rank()]
    if value is None:
        from mpi4py import MPI

        return MPI.PROC_NULL
    return int(value)


@functools.cache
def communicator(groups: tuple[tuple[int, ...], ...]) -> int:
    """The handle of this rank's communicator among ``groups`` (lists of ranks; a rank in
    no group gets one of its own), made once per process by ``MPI_Comm_split`` with the
    group as colour and the position in it as key, so its ranks follow the group's order.
    Collective: every rank makes the communicators of a program in the same order, as
    every rank loads the same programs in the same order."""
    from dace.libraries.comm.communicators import mpi_handle
    from mpi4py import MPI

    me = rank()
    colour, key = next(((k, group.index(me)) for k, group in enumerate(groups)
                        if me in group), (len(groups) + me, 0))
    split = world().Split(colour, key)
    _communicators.append(split)  # kept alive: the program holds its handle
    return mpi_handle(split) if split != MPI.COMM_NULL else mpi_handle(MPI.COMM_SELF)


_communicators: list[Any] = []


def once_per_machine(build: Callable[[], Any]) -> Any:
    """Run ``build`` (a compilation into the disk cache shared by the ranks of one
    machine) on the first rank of each machine first, then on the others, which then find
    its result in the cache: one C++ build per machine, not one per rank. Collective."""
    if world() is None:
        return build()
    machine = _machine_communicator()
    if machine.Get_rank() == 0:
        try:
            return build()
        finally:  # also when it fails: the others then fail the same way, not wait
            machine.Barrier()
    machine.Barrier()
    return build()


@functools.lru_cache(maxsize=1)
def _machine_communicator() -> Any:
    """The ranks of this job on this machine (they share its disk cache)."""
    from mpi4py import MPI

    return world().Split_type(MPI.COMM_TYPE_SHARED)


def gather_everywhere(value: Any) -> list[Any]:
    """``value`` of every rank, in rank order, on every rank (a Python object)."""
    comm = world()
    return [value] if comm is None else comm.allgather(value)


def agree(what: str, value: Any) -> None:
    """Raise on every rank, naming the ranks that differ, unless all ranks give the same
    ``value`` (a program's signature: shapes that disagree would hang a collective)."""
    values = gather_everywhere(value)
    if any(v != values[0] for v in values):
        detail = "; ".join(f"rank {r}: {v}" for r, v in enumerate(values))
        raise Hlo2DaceError(f"the ranks disagree on {what}: {detail}")


_installed = threading.Lock()


def _abort_on_uncaught_exceptions(comm: Any) -> None:
    """An uncaught exception in any thread of a rank prints the rank and the error, then
    aborts every rank of the job."""
    previous = sys.excepthook

    def abort(kind, error, trace):
        message = "".join(traceback.format_exception(kind, error, trace))
        sys.stderr.write(f"hlo2dace: rank {comm.Get_rank()} of {comm.Get_size()} failed; "
                         f"aborting the MPI job:\n{message}")
        sys.stderr.flush()
        comm.Abort(1)
        previous(kind, error, trace)

    def abort_thread(arguments):
        abort(arguments.exc_type, arguments.exc_value, arguments.exc_traceback)

    with _installed:
        sys.excepthook = abort
        threading.excepthook = abort_thread
