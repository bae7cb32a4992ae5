"""Sharded JAX programs as MPI jobs: XLA's partitioner makes the per-device program, each
rank runs it on its own shard, and the shardings say which part of each array a rank holds.

**Partitioning.** A program whose module runs on several devices (``shard_map`` over a mesh,
``jax.jit`` of arrays with ``NamedSharding``s or with ``in_shardings``/``out_shardings``,
an exported module with ``nr_devices > 1``) is compiled by XLA for the process's devices;
the executable's per-device HLO module (``main.0_spmd``: XLA's SPMD partitioner has
inserted the collectives, ``shard_map`` bodies and sharding annotations are gone) becomes
StableHLO again (jaxlib's ``hlo_to_stablehlo``) and is what hlo2dace compiles. XLA's own
optimisations stay in it (fusions are calls, ``mhlo.fusion``), so hlo2dace follows XLA's
order of operations. In an MPI job JAX sees one CPU device per rank
(``mpi.configure_devices``), so the script that makes a mesh of 4 devices runs unchanged
under ``mpirun -n 4``; partition ``r`` (device ``r`` of the executable's assignment) is
rank ``r``.

**Arrays.** A call takes global arrays (each rank keeps its own shard, cut out by the
input shardings) or ``ProcessLocalArray``s (each rank's shard only, as
``jax.make_array_from_process_local_data`` makes them). With global arguments the results
are global arrays on every rank (the shards gathered); with process-local ones, the
results stay process-local, and ``gather`` assembles one when needed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import mpi
from .errors import ArgumentError
from .frontend.normalize import NormalizedModule, normalize
from .progress import stage

_PROCESSES = re.compile(r"mhlo\.num_(replicas|partitions) = (\d+)")
_PER_DEVICE_CODE = re.compile(
    r"\b(sdy\.manual_computation|stablehlo\.(all_reduce|all_gather|reduce_scatter|all_to_all"
    r"|collective_permute|collective_broadcast|partition_id|replica_id))\b")


def processes(text: str) -> tuple[int, int]:
    """(replicas, partitions) that a JAX lowering's module text says it runs on."""
    found = dict(_PROCESSES.findall(text[:4000]))  # module attributes come first
    return int(found.get("replicas", 1)), int(found.get("partitions", 1))


def has_per_device_code(text: str) -> bool:
    """Whether a module holds code per device: ``shard_map`` bodies or collectives."""
    return _PER_DEVICE_CODE.search(text) is not None


def runs_as_ranks(text: str) -> bool:
    """Whether a JAX lowering's module for several devices runs as an MPI job. In a job it
    always does. In a single process, only a module with code per device (``shard_map``
    bodies, explicit collectives) needs ranks: a program whose arrays are merely sharded
    computes the same global values in one process, as before it met a mesh."""
    return mpi.launched_size() > 1 or has_per_device_code(text)


@dataclass
class Partitioned:
    """The per-device module of a sharded program and how its arrays are cut."""

    normalized: NormalizedModule
    #: (replicas, partitions)
    grid: tuple[int, int]
    #: the device that each rank plays, in rank order
    devices: Sequence[Any]
    #: per flat argument and result: its sharding and global shape
    inputs: Sequence[tuple[Any, tuple[int, ...]]]
    outputs: Sequence[tuple[Any, tuple[int, ...]]]

    @property
    def size(self) -> int:
        return self.grid[0] * self.grid[1]

    def index(self, sharding: Any, shape: tuple[int, ...], rank: int) -> tuple:
        """The part of a global array of ``shape`` that ``rank`` holds."""
        return sharding.devices_indices_map(shape)[self.devices[rank]]


def partition(lowered: Any, grid: tuple[int, int]) -> Partitioned:
    """``lowered`` (a ``jax.stages.Lowered`` for several devices) through XLA's
    partitioner: its per-device module, normalised, and its shardings."""
    import jax
    from jax._src.lib import _jax

    with stage("XLA partitioning"):
        compiled = lowered.compile()
        executable = compiled.runtime_executable()
        module = executable.hlo_modules()[0]
        bytecode = _jax.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    normalized = normalize(bytecode, grid)
    flat_in = jax.tree_util.tree_leaves(compiled.input_shardings[0])
    flat_out = jax.tree_util.tree_leaves(compiled.output_shardings)
    in_avals = jax.tree_util.tree_leaves(lowered.in_avals)
    out_avals = jax.tree_util.tree_leaves(lowered.out_info)
    return Partitioned(normalized, grid, list(executable.local_devices()),
                       [(s, tuple(a.shape)) for s, a in zip(flat_in, in_avals)],
                       [(s, tuple(a.shape)) for s, a in zip(flat_out, out_avals)])


def exported_for_devices(source: Any) -> Any:
    """``source`` as a ``jax.export.Exported`` if it is one (or its serialized bytes, or a
    file of them) exported for several devices, else None."""
    from jax import export

    if isinstance(source, (str, bytes, bytearray, os.PathLike)) and not isinstance(
            source, export.Exported):
        data = source
        if isinstance(source, os.PathLike):
            data = Path(source).read_bytes() if Path(source).is_file() else b""
        if not isinstance(data, (bytes, bytearray)) or b"\0" not in data \
                or data.startswith(b"ML\xefR"):
            return None  # text, MLIR bytecode, a portable artifact
        try:
            source = export.deserialize(bytearray(data))
        except Exception:
            return None  # the frontend reports what it is not
    if isinstance(source, export.Exported) and source.nr_devices > 1:
        return source
    return None


def partition_exported(exported: Any) -> Partitioned:
    """A module exported for ``nr_devices`` devices, partitioned by XLA on as many of this
    process's devices: arguments without a sharding of their own are global arrays that
    every rank receives whole (XLA slices each rank's part)."""
    reference, arguments = exported_reference(exported)
    with stage("JAX lowering"):
        lowered = reference.lower(*arguments)
    return partition(lowered, processes(lowered.as_text()))


def exported_reference(exported: Any) -> tuple[Any, list[Any]]:
    """``exported`` as a ``jax.jit`` function on ``nr_devices`` of this process's devices,
    and its arguments' shapes, dtypes and shardings (those without one: whole on every
    device). Each exported mesh is rebuilt on this process's devices with its own axis
    names, sizes and types: ``Exported.call`` accepts shardings on no other."""
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    count = exported.nr_devices
    if len(jax.devices()) < count:
        mpi.check_size(count, f"the module {exported.fun_name} (exported for {count} "
                       "devices)")
    devices = np.array(jax.devices()[:count])
    # with a mesh argument of None, the exported NamedShardings on their abstract meshes
    exported_ins = exported.in_shardings_jax(None)
    exported_outs = exported.out_shardings_jax(None)
    meshes = {}
    for sharding in (*exported_ins, *exported_outs):
        mesh = getattr(sharding, "mesh", None)
        if mesh is None or mesh.empty or mesh in meshes:
            continue
        if int(np.prod(mesh.axis_sizes)) != count:
            raise ArgumentError(f"the module {exported.fun_name} is exported for {count} "
                                f"devices but shards over a mesh of {mesh.axis_sizes}")
        meshes[mesh] = Mesh(devices.reshape(mesh.axis_sizes), mesh.axis_names,
                            axis_types=mesh.axis_types)
    whole = NamedSharding(next(iter(meshes.values()), None) or Mesh(devices, ("devices",)),
                          P())

    def concrete(sharding: Any) -> Any:
        """An exported sharding on this process's devices (none: whole on every device)."""
        mesh = getattr(sharding, "mesh", None)
        if mesh is None or mesh.empty:
            return whole
        return NamedSharding(meshes[mesh], sharding.spec, memory_kind=sharding.memory_kind)

    arguments = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=concrete(s))
                 for a, s in zip(exported.in_avals, exported_ins)]
    outs = [concrete(s) for s in exported_outs]
    return jax.jit(exported.call, out_shardings=jax.tree_util.tree_unflatten(
        exported.out_tree, outs)), arguments


class ProcessLocalArray:
    """One rank's shard of a global array: ``local`` (a NumPy array), with the global
    ``shape`` and the ``sharding`` that says where the other shards are. Calls of an
    ``hlo2dace.jit`` function that receive one pass the shard as it is and return their
    results as ``ProcessLocalArray``s."""

    def __init__(self, local: np.ndarray, shape: tuple[int, ...], sharding: Any):
        self.local = local
        self.shape = tuple(shape)
        self.sharding = sharding
        self.dtype = local.dtype

    def __repr__(self) -> str:
        return (f"ProcessLocalArray(rank {mpi.rank()}: {self.local.shape} of "
                f"{self.shape}, {self.dtype})")


def make_array_from_process_local_data(sharding: Any, local_data: Any,
                                       global_shape: Sequence[int]) -> ProcessLocalArray:
    """This rank's shard of an array of ``global_shape`` cut by ``sharding`` (a
    ``NamedSharding`` over a mesh of one device per rank), as JAX's function of that name
    takes it; the shard's shape is checked against the sharding."""
    local = np.asarray(local_data)
    import jax

    device = jax.devices()[mpi.rank()]
    index = sharding.devices_indices_map(tuple(global_shape))[device]
    expected = tuple(len(range(*s.indices(n))) for s, n in zip(index, global_shape))
    if local.shape != expected:
        raise ArgumentError(f"rank {mpi.rank()} holds {expected} of the array of shape "
                            f"{tuple(global_shape)} under {sharding}, got local data of "
                            f"shape {local.shape}")
    return ProcessLocalArray(local, tuple(global_shape), sharding)


def gather(array: ProcessLocalArray) -> np.ndarray:
    """The global array, assembled on every rank from the ranks' shards (a collective)."""
    import jax

    shards = mpi.gather_everywhere(array.local)
    out = np.empty(array.shape, array.dtype)
    indices = array.sharding.devices_indices_map(array.shape)
    for rank, shard in enumerate(shards):
        out[indices[jax.devices()[rank]]] = shard
    return out


def traceable(tree: Any) -> Any:
    """``tree`` with each ``ProcessLocalArray`` as the global array JAX traces."""
    import jax

    return jax.tree_util.tree_map(
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding)
        if isinstance(leaf, ProcessLocalArray) else leaf, tree)


def local_arguments(partitioned: Partitioned, leaves: Sequence[Any]) -> tuple[list, bool]:
    """This rank's shard of each argument, and whether any came process-local (then the
    results stay process-local)."""
    rank = mpi.rank()
    local, any_local = [], False
    for k, (leaf, (sharding, shape)) in enumerate(zip(leaves, partitioned.inputs)):
        if isinstance(leaf, ProcessLocalArray):
            if leaf.shape != shape:
                raise ArgumentError(f"argument {k}: a process-local array of global shape "
                                    f"{leaf.shape}, the program takes {shape}")
            local.append(leaf.local)
            any_local = True
            continue
        index = partitioned.index(sharding, shape, rank)
        shards = getattr(leaf, "addressable_shards", None)
        device = partitioned.devices[rank]
        mine = next((s for s in shards if s.device == device and s.index == index), None) \
            if shards else None
        local.append(np.asarray(mine.data) if mine is not None
                     else np.asarray(leaf)[index])
    return local, any_local


def results(partitioned: Partitioned, outputs: Sequence[np.ndarray], local: bool
            ) -> list[Any]:
    """The program's per-rank ``outputs`` as process-local arrays, or gathered into global
    ones on every rank."""
    if local:
        return [ProcessLocalArray(out, shape, sharding)
                for out, (sharding, shape) in zip(outputs, partitioned.outputs)]
    cut = [k for k, (sharding, _) in enumerate(partitioned.outputs)
           if not sharding.is_fully_replicated]
    everyone = mpi.gather_everywhere([outputs[k] for k in cut])
    gathered = list(outputs)
    for position, k in enumerate(cut):
        sharding, shape = partitioned.outputs[k]
        indices = sharding.devices_indices_map(shape)
        gathered[k] = np.empty(shape, outputs[k].dtype)
        for rank in range(partitioned.size):
            gathered[k][indices[partitioned.devices[rank]]] = everyone[rank][position]
    return gathered
