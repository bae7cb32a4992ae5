"""Collectives, process ids and sharding annotations: a program that runs as one process of
an MPI job, communicating through DaCe's communication library (``dace.libraries.comm``).

**The process grid.** A module runs on ``mhlo.num_replicas`` x ``mhlo.num_partitions``
processes (else on as many as its collectives name); process ``(replica, partition)`` is
MPI rank ``replica * num_partitions + partition`` of the job, so rank ``r`` plays device
``r`` of a JAX mesh. Each collective's process groups follow the spec
(``cross_replica``, ``cross_partition``, ``cross_replica_and_partition``,
``flattened_ids``) as lists of ranks.

**Communicators and ranks are arguments.** One binary serves every rank, so what differs
between ranks is a hidden 64-bit argument that each process supplies when it loads the
program (``Emitter.add_process_value``, bound by ``runtime`` through ``mpi.py``): an MPI
communicator per distinct set of groups, made once per program by ``MPI_Comm_split``
(colour: the group, key: the position in it, so a communicator's ranks are the group's
order), and rank-indexed tables (partition and replica ids, the peers of a permutation,
group membership). DaCe's nodes take a communicator on their ``_comm`` connector, as
``dace.libraries.comm.communicators`` describes; the ``CommSplit`` node would split at
every call instead.

**DaCe's nodes, by target.** ``Allgather``, ``Alltoall``, ``Allreduce``,
``ReduceScatter``, ``Bcast``, ``Isend``/``Irecv``/``Waitall``; their implementation comes
from the target (``IMPLEMENTATIONS``: MPI on the CPU; a GPU target names NCCL and keeps
these translators). Reductions use ``Allreduce``/``ReduceScatter`` where an MPI operator
gives XLA's bits whatever the order of the partial results: integer and boolean bodies
of one op. Floating-point and multi-op bodies (NaN-propagating max, f16 sums rounded per
step, argmax pairs) gather every process's operand (``Allgather``, or ``Alltoall`` for a
scatter) and fold it in the group's order with the body's own C++, so that every rank
computes the same bits (MPI's reduction order is its own, and may differ per rank).

On a grid of one process every collective is the identity (groups of one), as before."""

from __future__ import annotations

import re
from typing import Sequence

import dace
import numpy as np
from dace.libraries import comm

from .. import ir
from . import dtypes
from .bindings import Array, Binding, Literal, flat_index, map_params
from .builder import Builder
from .cpp import Loop, Writer
from .custom_call import CustomCall, register_target
from .emitter import Element, Value, Whole
from .registry import register

#: the implementation of DaCe's communication nodes on each target
IMPLEMENTATIONS = {"cpu": "MPI"}

#: one-op reducer bodies that an MPI operator computes exactly on integers and booleans
_MPI_OPERATORS = {"stablehlo.add": "MPI_SUM", "stablehlo.multiply": "MPI_PROD",
                  "stablehlo.maximum": "MPI_MAX", "stablehlo.minimum": "MPI_MIN",
                  "stablehlo.and": "MPI_BAND", "stablehlo.or": "MPI_BOR",
                  "stablehlo.xor": "MPI_BXOR"}
_MPI_BOOLEAN_OPERATORS = {"stablehlo.and": "MPI_LAND", "stablehlo.or": "MPI_LOR",
                          "stablehlo.xor": "MPI_LXOR", "stablehlo.maximum": "MPI_LOR",
                          "stablehlo.minimum": "MPI_LAND"}

#: collectives whose process groups are replicas or partitions, as their channel says
_PAIRWISE = ("stablehlo.all_to_all", "stablehlo.collective_broadcast",
             "stablehlo.collective_permute")

# ---------------------------------------------------------------------------- annotations


@register("sdy.sharding_constraint", "sdy.reshard", "sdy.propagation_barrier")
def sharding_annotation(b: Builder, op: ir.Op) -> list[Binding]:
    """Shardy's annotations of a one-device program (a sharded one is partitioned by XLA
    first, ``sharded.py``, which consumes them)."""
    return [b.binding(op.operands[0])]


@register_target("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape")
def sharding_custom_call(b: Builder, call: CustomCall) -> list[Binding]:
    """GSPMD's annotations (what JAX emits when Shardy is switched off)."""
    op = call.op
    if op.operands[0].type != op.result.type:
        raise b.unsupported(f"{call.target} from {op.operands[0].type} to {op.result.type}: "
                            "a sharded module is partitioned by XLA first (hlo2dace.jit, "
                            "compile_text and the command line do it)")
    return [b.binding(op.operands[0])]


@register("sdy.manual_computation")
def manual_computation(b: Builder, op: ir.Op) -> list[Binding]:
    """A ``shard_map`` body. Its operands are per-device already only when every manual
    axis has one device; any other mesh is partitioned by XLA first."""
    if any(operand.type != argument.type
           for operand, argument in zip(op.operands, op.regions[0].entry.arguments)):
        raise b.unsupported("a shard_map body over a mesh of several devices: the module "
                            "is partitioned by XLA first (hlo2dace.jit, compile_text and "
                            "the command line do it)")
    return _inline_region(b, op, "manual_computation")


@register("mhlo.fusion")
def xla_fusion(b: Builder, op: ir.Op) -> list[Binding]:
    """A fusion in the module XLA's partitioner returns: a call of its region."""
    return _inline_region(b, op, "fusion")


@register("mhlo.copy")
def xla_copy(b: Builder, op: ir.Op) -> list[Binding]:
    """A copy in the module XLA's partitioner returns (between buffers of one layout:
    hlo2dace's arrays are row-major, as XLA's CPU layouts are): the value itself."""
    return [b.binding(op.operands[0])]


@register("mhlo.bitcast")
def xla_bitcast(b: Builder, op: ir.Op) -> list[Binding]:
    """XLA's bitcast (in partitioned modules): the operand's bytes, in its
    ``source_layout``, read as the result in its ``result_layout`` (minor-to-major
    dimension lists; row-major where absent). hlo2dace's arrays are row-major, so each
    result element reads the operand element at the same physical position."""
    source, result = op.operands[0].type, op.result.type
    source_major = _major_to_minor(op.attr("source_layout"), source.rank)
    result_major = _major_to_minor(op.attr("result_layout"), result.rank)
    params = map_params(result.rank)
    flat, stride = [], 1
    for d in reversed(result_major):
        flat.append(f"{params[d]} * {stride}")
        stride *= result.shape[d]
    position = " + ".join(flat) or "0"
    at = [""] * source.rank
    stride = 1
    for d in reversed(source_major):
        at[d] = f"(({position}) // {stride}) % {source.shape[d]}"
        stride *= source.shape[d]
    target = b.allocate_result(op.result)
    b.emit.map("bitcast", result.shape, "__out = __in;",
               {"__in": Element(b.array(op.operands[0]), at)}, {"__out": Element(target)})
    return [target]


def _major_to_minor(layout, rank: int) -> list[int]:
    if layout is None:
        return list(range(rank))
    return [int(d) for d in reversed(np.asarray(layout.array).reshape(-1))]


def _inline_region(b: Builder, op: ir.Op, name: str) -> list[Binding]:
    block = op.regions[0].entry
    function = ir.Function(name, block.arguments, tuple(r.type for r in op.results),
                           op.regions[0], "private")
    return [b.resolve(binding) for binding in
            b.call_function(function, [b.binding(v) for v in op.operands])]


# ---------------------------------------------------------------------------- process grid


def grid(b: Builder) -> tuple[int, int]:
    """(replicas, partitions) of the module: its attributes, else as many as the largest
    ids its collectives name (a module written for the interpreter's grid)."""
    attributes = b.module.attributes
    replicas = attributes.get("mhlo.num_replicas")
    partitions = attributes.get("mhlo.num_partitions")
    if replicas is not None or partitions is not None:
        return int(replicas or 1), int(partitions or 1)
    largest = {"replicas": 0, "partitions": 0}
    for op in b.module.walk():
        for key in ("replica_groups", "source_target_pairs"):
            ids = op.attr(key)
            if isinstance(ids, ir.DenseElements) and ids.array.size:
                kind = "partitions" if _pairwise_mode(op) == "cross_partition" and \
                    op.name in _PAIRWISE else "replicas"
                largest[kind] = max(largest[kind], int(ids.array.max()))
    return largest["replicas"] + 1, largest["partitions"] + 1


def _channel(op: ir.Op) -> int:
    handle = op.attr("channel_handle")
    if isinstance(handle, ir.OpaqueAttr):  # mhlo's spelling, in partitioned modules
        found = re.search(r"handle = (-?\d+)", handle.text)
        return int(found.group(1)) if found else 0
    return int(handle.fields["handle"]) if handle is not None else 0


def _id_groups(b: Builder, op: ir.Op) -> list[list[int]]:
    """``replica_groups`` without the -1 padding; empty: one group of all."""
    groups = op.attr("replica_groups")
    if groups is None:
        return []
    if not isinstance(groups, ir.DenseElements):
        raise b.unsupported(f"replica_groups {groups} (the frontend turns mesh axes into "
                            "dense groups when the module holds its sdy.mesh)")
    return [[int(i) for i in row if i >= 0] for row in np.atleast_2d(groups.array)]


def process_groups(b: Builder, op: ir.Op, mode: str) -> list[list[int]]:
    """The op's process groups as lists of ranks, in each group's order. ``mode`` is the
    spec's ``cross_replica``, ``cross_partition``, ``cross_replica_and_partition`` or
    ``flattened_ids``."""
    replicas, partitions = grid(b)
    ids = _id_groups(b, op)
    if not ids:
        count = {"cross_partition": partitions, "flattened_ids": replicas * partitions}
        ids = [list(range(count.get(mode, replicas)))]
    if mode == "cross_replica":
        return [[r * partitions + p for r in g] for p in range(partitions) for g in ids]
    if mode == "cross_partition":
        return [[r * partitions + p for p in g] for r in range(replicas) for g in ids]
    if mode == "cross_replica_and_partition":
        return [[r * partitions + p for p in range(partitions) for r in g] for g in ids]
    return ids


def _reduction_mode(op: ir.Op) -> str:
    """all_gather, all_reduce, reduce_scatter: the spec's choice of process groups."""
    if _channel(op) <= 0:
        return "cross_replica"
    return "flattened_ids" if op.attr("use_global_device_ids") else \
        "cross_replica_and_partition"


def _pairwise_mode(op: ir.Op) -> str:
    """all_to_all, collective_broadcast, collective_permute."""
    return "cross_partition" if _channel(op) > 0 else "cross_replica"


def _single(groups: Sequence[Sequence[int]]) -> bool:
    return all(len(g) <= 1 for g in groups)


def _group_size(b: Builder, groups: list[list[int]]) -> int:
    sizes = {len(g) for g in groups}
    if len(sizes) != 1:
        raise b.unsupported(f"process groups of different sizes {sorted(sizes)} (supported "
                            "for all_reduce with an integer or boolean body of one op, "
                            "which an MPI operator computes)")
    return sizes.pop()


def _communicator(b: Builder, groups: list[list[int]]) -> Value:
    replicas, partitions = grid(b)
    return Value(b.emit.add_process_value("comm", {"communicator": groups,
                                                   "processes": replicas * partitions}))


def _table(b: Builder, hint: str, values: Sequence[int | None]) -> Value:
    """A value per rank (None: MPI's null process), read by each rank as its own."""
    return Value(b.emit.add_process_value(hint, {"table": list(values)}))


def _node(b: Builder, cls, label: str, **properties) -> dace.nodes.LibraryNode:
    node = cls(b.emit.fresh(label), **properties)
    node.implementation = IMPLEMENTATIONS[b.target]
    return node


def _communicate(b: Builder, node, inputs: dict, outputs: dict) -> None:
    """``node`` in a state of its own: every rank runs its collectives in program order."""
    b.new_state("communicate")
    b.emit.library_node(node, inputs, outputs)
    b.new_state("communicated")


def _whole(b: Builder, array: Array) -> dace.Memlet:
    """All of ``array``'s memory, whatever shape the communication sees it in."""
    return dace.Memlet.from_array(array.name, b.emit.sdfg.arrays[array.name])


def _blocks(b: Builder, source: Array, dimension: int, count: int, hint: str) -> Array:
    """``source`` cut along ``dimension`` into ``count`` blocks laid out one after another
    (shape ``(count, *block)``): ``source`` itself where its blocks are contiguous."""
    shape = source.type.shape
    block = _block_shape(shape, dimension, count)
    t = ir.TensorType((count, *block), source.type.element)
    if _contiguous_blocks(shape, dimension):
        return Array(source.name, t)
    packed = b.emit.add_array(hint, t)
    params = map_params(len(shape))
    at = list(params)
    at[dimension] = f"{params[dimension]} % {block[dimension]}"
    at.insert(0, f"{params[dimension]} // {block[dimension]}")
    b.emit.map(hint, shape, "__out = __in;", {"__in": Element(source)},
               {"__out": Element(packed, at)})
    return packed


def _unblocked(b: Builder, blocks: Array, dimension: int, target: Array) -> None:
    """Write ``blocks`` (``(count, *block)``) into ``target``, concatenated along
    ``dimension``."""
    shape = target.type.shape
    params = map_params(len(shape))
    size = blocks.type.shape[1 + dimension]
    at = [params[d] if d != dimension else f"{params[d]} % {size}" for d in range(len(shape))]
    at.insert(0, f"{params[dimension]} // {size}")
    b.emit.map("concatenate", shape, "__out = __in;", {"__in": Element(blocks, at)},
               {"__out": Element(target)})


def _contiguous_blocks(shape: Sequence[int], dimension: int) -> bool:
    return all(n == 1 for n in shape[:dimension])


# ---------------------------------------------------------------------------- gathers


@register("stablehlo.all_gather")
def all_gather(b: Builder, op: ir.Op) -> list[Binding]:
    groups = process_groups(b, op, _reduction_mode(op))
    if _single(groups):
        return _identity(b, op)
    communicator = _communicator(b, groups)
    dimension = int(op.attr("all_gather_dim"))
    results = []
    for operand, result in zip(op.operands, op.results):
        target = b.allocate_result(result)
        count = _group_size(b, groups)
        t = ir.TensorType((count, *operand.type.shape), operand.type.element)
        direct = _contiguous_blocks(result.type.shape, dimension)
        gathered = Array(target.name, t) if direct else b.emit.add_array("gathered", t)
        _communicate(b, _node(b, comm.Allgather, "all_gather"),
                     {"_inbuffer": _whole(b, b.array(operand)), "_comm": communicator},
                     {"_outbuffer": _whole(b, gathered)})
        if not direct:
            _unblocked(b, gathered, dimension, target)
        results.append(target)
    return results


def _identity(b: Builder, op: ir.Op) -> list[Binding]:
    for operand, result in zip(op.operands, op.results):
        if operand.type != result.type:
            raise b.unsupported(f"{operand.type} -> {result.type} over groups of one process")
    return [b.binding(operand) for operand in op.operands]


@register("stablehlo.all_to_all")
def all_to_all(b: Builder, op: ir.Op) -> list[Binding]:
    groups = process_groups(b, op, _pairwise_mode(op))
    if _single(groups):
        return _identity(b, op)
    communicator = _communicator(b, groups)
    count = int(op.attr("split_count"))
    if count != _group_size(b, groups):
        raise b.unsupported(f"split_count {count} over groups of {len(groups[0])} processes")
    split, concat = int(op.attr("split_dimension")), int(op.attr("concat_dimension"))
    results = []
    for operand, result in zip(op.operands, op.results):
        blocks = _blocks(b, b.array(operand), split, count, "to_send")
        target = b.allocate_result(result)
        direct = _contiguous_blocks(result.type.shape, concat) and \
            blocks.type.shape[1:] == _block_shape(result.type.shape, concat, count)
        received = Array(target.name, blocks.type) if direct else \
            b.emit.add_array("received", ir.TensorType(
                (count, *_block_shape(result.type.shape, concat, count)),
                result.type.element))
        _communicate(b, _node(b, comm.Alltoall, "all_to_all"),
                     {"_inbuffer": _whole(b, blocks), "_comm": communicator},
                     {"_outbuffer": _whole(b, received)})
        if not direct:
            _unblocked(b, received, concat, target)
        results.append(target)
    return results


@register("mhlo.all_to_all")
def xla_all_to_all(b: Builder, op: ir.Op) -> list[Binding]:
    """XLA's tuple all-to-all (in partitioned modules): operand ``k`` goes to the group's
    ``k``-th process, result ``k`` comes from it."""
    if op.attr("split_dimension") is not None:
        return all_to_all(b, op)
    groups = process_groups(b, op, _pairwise_mode(op))
    if _single(groups):
        return _identity(b, op)
    count = len(op.operands)
    if count != _group_size(b, groups):
        raise b.unsupported(f"{count} operands over groups of {len(groups[0])} processes")
    block = op.operands[0].type
    rank = block.rank
    t = ir.TensorType((count, *block.shape), block.element)
    send, received = b.emit.add_array("to_send", t), b.emit.add_array("received", t)
    for k, operand in enumerate(op.operands):
        b.emit.map("pack", block.shape, "__out = __in;", {"__in": Element(b.array(operand))},
                   {"__out": Element(send, [str(k), *map_params(rank)])})
    _communicate(b, _node(b, comm.Alltoall, "all_to_all"),
                 {"_inbuffer": _whole(b, send), "_comm": _communicator(b, groups)},
                 {"_outbuffer": _whole(b, received)})
    results = []
    for k, result in enumerate(op.results):
        target = b.allocate_result(result)
        b.emit.map("unpack", block.shape, "__out = __in;",
                   {"__in": Element(received, [str(k), *map_params(rank)])},
                   {"__out": Element(target)})
        results.append(target)
    return results


def _block_shape(shape: Sequence[int], dimension: int, count: int) -> tuple[int, ...]:
    block = list(shape)
    block[dimension] //= count
    return tuple(block)


# ---------------------------------------------------------------------------- reductions


def _mpi_operator(op: ir.Op, element: dtypes.ElementType) -> str | None:
    """The MPI operator that computes the reducer body exactly for ``element`` in any
    order, or None: one op of the two arguments, on integers or booleans."""
    block = op.regions[0].entry
    if len(block.arguments) != 2 or len(block.ops) != 2:
        return None
    body = block.ops[0]
    if {v.name for v in body.operands} != {v.name for v in block.arguments} or \
            block.terminator.operands[0].name != body.result.name:
        return None
    if element.element == "i1":
        return _MPI_BOOLEAN_OPERATORS.get(body.name)
    if element.numpy.kind in "iu" and element.narrow_bits is None:  # 2- and 4-bit
        return _MPI_OPERATORS.get(body.name)                      # wrap at their width
    return None


def _fold(b: Builder, op: ir.Op, gathered: Sequence[Array], count: int,
          targets: Sequence[Array]) -> None:
    """``targets[j] = body(...body(gathered[j][0], gathered[j][1])..., gathered[j][n-1])``
    elementwise: the group's values folded in the group's order with the reducer body."""
    n = len(targets)
    shape = targets[0].type.shape
    elements = [dtypes.of(t.type, op.name, op.location) for t in targets]
    body, returned = b.scalar_region(
        op.regions[0].entry, [f"__acc{j}" for j in range(n)] + [f"__x{j}" for j in range(n)],
        "__v")
    here = flat_index(shape, map_params(len(shape)))
    size = int(np.prod(shape, dtype=np.int64))
    code = Writer()
    for j, element in enumerate(elements):
        code.line(f"{element.compute} __acc{j} = {element.read(f'__g{j}', here)};")
    with code.loops(Loop("__k", "1", str(count))):
        for j, element in enumerate(elements):
            code.line(f"const {element.compute} __x{j} = "
                      f"{element.read(f'__g{j}', f'__k * {size} + {here}')};")
        code.lines(body)
        code.lines([f"__acc{j} = {expression};" for j, expression in enumerate(returned)])
    code.lines([f"__out{j} = {element.store(f'__acc{j}')};"
                for j, element in enumerate(elements)])
    b.emit.map("fold", shape, code.text(),
               {f"__g{j}": Whole(g) for j, g in enumerate(gathered)},
               {f"__out{j}": Element(t) for j, t in enumerate(targets)}, count)


@register("stablehlo.all_reduce")
def all_reduce(b: Builder, op: ir.Op) -> list[Binding]:
    """A body of two arguments reduces each operand on its own (XLA's combined
    all-reduces); one of two per operand reduces them together."""
    groups = process_groups(b, op, _reduction_mode(op))
    if _single(groups):
        return _identity(b, op)
    communicator = _communicator(b, groups)
    targets = [b.allocate_result(r) for r in op.results]
    together = len(op.regions[0].entry.arguments) == 2 * len(op.operands)
    gathered = []
    for operand, target in zip(op.operands, targets):
        element = dtypes.of(operand.type, op.name, op.location)
        operator = _mpi_operator(op, element)
        if operator is not None and not (together and len(op.operands) > 1):
            _communicate(b, _node(b, comm.Allreduce, "all_reduce", op=operator),
                         {"_inbuffer": _whole(b, b.array(operand)), "_comm": communicator},
                         {"_outbuffer": _whole(b, target)})
            continue
        count = _group_size(b, groups)  # groups of several sizes: MPI operators only
        t = ir.TensorType((count, *operand.type.shape), operand.type.element)
        gathered.append((b.emit.add_array("gathered", t), target))
        _communicate(b, _node(b, comm.Allgather, "all_reduce_gather"),
                     {"_inbuffer": _whole(b, b.array(operand)), "_comm": communicator},
                     {"_outbuffer": _whole(b, gathered[-1][0])})
    count = len(groups[0])
    if together:
        if gathered:
            _fold(b, op, [g for g, _ in gathered], count, [t for _, t in gathered])
    else:
        for array, target in gathered:
            _fold(b, op, [array], count, [target])
    return targets


@register("stablehlo.reduce_scatter")
def reduce_scatter(b: Builder, op: ir.Op) -> list[Binding]:
    groups = process_groups(b, op, _reduction_mode(op))
    if _single(groups):
        return _identity(b, op)
    communicator = _communicator(b, groups)
    count = _group_size(b, groups)
    dimension = int(op.attr("scatter_dimension"))
    operand = op.operands[0]
    blocks = _blocks(b, b.array(operand), dimension, count, "to_scatter")
    target = b.allocate_result(op.result)
    element = dtypes.of(operand.type, op.name, op.location)
    operator = _mpi_operator(op, element)
    if operator is not None:
        _communicate(b, _node(b, comm.ReduceScatter, "reduce_scatter", op=operator),
                     {"_inbuffer": _whole(b, blocks), "_comm": communicator},
                     {"_outbuffer": _whole(b, target)})
        return [target]
    received = b.emit.add_array("received", blocks.type)
    _communicate(b, _node(b, comm.Alltoall, "reduce_scatter_exchange"),
                 {"_inbuffer": _whole(b, blocks), "_comm": communicator},
                 {"_outbuffer": _whole(b, received)})
    _fold(b, op, [received], count, [target])
    return [target]


# ---------------------------------------------------------------------------- one to many


def _membership(b: Builder, groups: list[list[int]]) -> Value:
    """1 on the ranks that belong to a group, 0 on the others."""
    processes = grid(b)[0] * grid(b)[1]
    members = {rank for g in groups for rank in g}
    return _table(b, "member", [int(rank in members) for rank in range(processes)])


@register("stablehlo.collective_broadcast")
def collective_broadcast(b: Builder, op: ir.Op) -> list[Binding]:
    """The first process of each group sends its operand to the group; a process in no
    group gets zeros."""
    groups = process_groups(b, op, _pairwise_mode(op))
    if _single(groups) and all(groups):
        return _identity(b, op)
    target = b.allocate_result(op.result)
    element = dtypes.of(op.result.type, op.name, op.location)
    b.emit.map("broadcast_source", target.type.shape,
               f"__out = __member ? __in : {element.store('0')};",
               {"__in": Element(b.array(op.operands[0])),
                "__member": _membership(b, groups)}, {"__out": Element(target)})
    root = b.emit.add_constant(np.zeros((), np.int32), ir.TensorType((), "i32"))
    _communicate(b, _node(b, comm.Bcast, "collective_broadcast"),
                 {"_inbuffer": _whole(b, target), "_root": Value(root),
                  "_comm": _communicator(b, groups)},
                 {"_outbuffer": _whole(b, target)})
    return [target]


@register("stablehlo.collective_permute")
def collective_permute(b: Builder, op: ir.Op) -> list[Binding]:
    """Each process sends its operand to its target and receives its source's; one without
    a source gets zeros (the spec)."""
    replicas, partitions = grid(b)
    pairs = [(int(s), int(t)) for s, t in op.attr("source_target_pairs").array.reshape(-1, 2)]
    cross_partition = _pairwise_mode(op) == "cross_partition"
    outer, inner = (replicas, partitions) if cross_partition else (partitions, replicas)
    processes = replicas * partitions
    destination: list[int | None] = [None] * processes
    source: list[int | None] = [None] * processes

    def rank(fixed: int, varying: int) -> int:
        return fixed * partitions + varying if cross_partition else varying * partitions + fixed

    for fixed in range(outer):
        for s, t in pairs:
            if not (0 <= s < inner and 0 <= t < inner):
                raise b.unsupported(f"source_target_pairs {pairs} on a grid of {replicas} "
                                    f"replicas x {partitions} partitions")
            destination[rank(fixed, s)] = rank(fixed, t)
            source[rank(fixed, t)] = rank(fixed, s)
    element = dtypes.of(op.result.type, op.name, op.location)
    zero = Literal(element.numpy.type(0), op.result.type)
    if processes == 1:  # only the pair (0, 0) can exist
        return [b.binding(op.operands[0]) if pairs else zero]
    target = b.allocate_result(op.result)
    b.emit.copy(zero, target)
    world = [list(range(processes))]
    communicator = _communicator(b, world)
    requests = b.emit.fresh("requests")
    b.emit.sdfg.add_array(requests, [2], dace.opaque("MPI_Request"), transient=True)
    tag = b.emit.add_constant(np.array(_channel(op), np.int32), ir.TensorType((), "i32"))
    b.new_state("communicate")
    b.emit.library_node(_node(b, comm.Irecv, "permute_receive"),
                        {"_src": _table(b, "source", source), "_tag": Value(tag),
                         "_comm": communicator},
                        {"_buffer": _whole(b, target), "_request": dace.Memlet(f"{requests}[0]")})
    b.emit.library_node(_node(b, comm.Isend, "permute_send"),
                        {"_buffer": _whole(b, b.array(op.operands[0])),
                         "_dest": _table(b, "destination", destination), "_tag": Value(tag),
                         "_comm": communicator},
                        {"_request": dace.Memlet(f"{requests}[1]")})
    b.new_state("wait")
    b.emit.library_node(_node(b, comm.Waitall, "permute_wait"),
                        {"_request": dace.Memlet(f"{requests}[0:2]")}, {})
    b.new_state("communicated")
    return [target]


# ---------------------------------------------------------------------------- process ids


@register("stablehlo.replica_id", "stablehlo.partition_id")
def process_id(b: Builder, op: ir.Op) -> list[Binding]:
    replicas, partitions = grid(b)
    element = dtypes.of(op.result.type, op.name, op.location)
    if replicas * partitions == 1:
        return [Literal(element.numpy.type(0), op.result.type)]
    ranks = range(replicas * partitions)
    ids = [r % partitions for r in ranks] if op.name == "stablehlo.partition_id" \
        else [r // partitions for r in ranks]
    target = b.allocate_result(op.result)
    b.emit.map(op.name.rsplit(".", 1)[-1], (), f"__out = ({element.compute})__id;",
               {"__id": _table(b, "id", ids)}, {"__out": Element(target)})
    return [target]
