"""The plan's fusion decisions, as XLA's fusion passes make them: elementwise ops of one
shape computed in one map (``fuse_elementwise``), a producer computed by the readers that
read it (``fuse_into_readers``) or by the one op that consumes it
(``fuse_into_consumers``), and a product contracted into its add (``contract_multiply_
adds``). The builder's lazy bindings (``translate/bindings.py``) are how the lowering
carries them out."""

from __future__ import annotations

from .. import ir, symbolic
from ..translate import dtypes
from ..translate.registry import elementwise_rule, record
from .analysis import BlockUses, over_rows
from .annotations import (
    ComputedByReaders,
    Contraction,
    FusedOperands,
    Fusion,
    FusionOptions,
    OwnMap,
    annotated,
    annotation,
    module_annotated,
)
from .passes import PassContext, rewrite_blocks

#: how deep ``reads_elementwise`` follows views
VIEW_DEPTH = 3


def fuse_elementwise(module: ir.Module, context: PassContext) -> ir.Module:
    """Elementwise ops of one shape fuse into one map of one tasklet, each op a C++ local
    (``Fusion``: the map of its shape); slices, transposes and broadcasts of their values
    are recomputed by the elementwise ops that read them, up to the level's number of ops
    (``FusionOptions``), as XLA fuses cheap producers into their consumers."""
    level = context.level
    module = module_annotated(module, FusionOptions(level.recomputed_ops,
                                                    level.recompute_broadcasts))

    def rewrite(block: ir.Block, uses: BlockUses, context: PassContext) -> list[ir.Op]:
        if uses.owner is not None and not record(uses.owner.name).code_regions:
            return list(block.ops)  # a scalar body (a reducer's): compiled, not mapped
        shapes: dict[tuple, int] = {}
        ops = []
        for op in block.ops:
            if elementwise_rule(op) is not None and op.results:
                group = shapes.setdefault(tuple(op.results[0].type.shape), len(shapes))
                op = annotated(op, Fusion(group))
            ops.append(op)
        return ops

    return rewrite_blocks(module, context, rewrite)


def expensive_ops_alone(block: ir.Block, uses: BlockUses, context: PassContext
                        ) -> list[ir.Op]:
    """An expensive op (``tanh``, ``exp``...) of a fused map whose innermost rows are
    short and which reads slices runs in a map of its own over its operand's array
    (``OwnMap``), as XLA's fusions have it. The fused map reads the slices with gathers,
    in rows too short to vectorise whole, and computed the function at a third of its
    speed over contiguous arrays: pyhpc's isoneutral at 4,096 points (rows of 3 of 4)
    spent 13 us per taper, against 6 us with the ``tanh`` in a contiguous loop of its
    own. Broadcasts do not count: a broadcast row is read contiguously, again and again
    (pyhpc's equation of state, one map of 300 ops, lost 6x when split). Only where the
    value fits in the core's L2 cache: written to memory and read back, it costs more than
    the gathers (``tanh`` of a sum of two slices of 3000 x 51 x 7 doubles: 2.78 ms split,
    2.41 fused; 400 x 51 x 7: 0.24 split, 0.32 fused)."""
    short = context.machine.short_row
    groups = [fused.group if (fused := annotation(op, Fusion)) is not None else None
              for op in block.ops]
    strided = {group for op, group in zip(block.ops, groups) if group is not None
               and any(_is_slice(uses, value) for value in op.operands)}
    ops = []
    for k, (op, group) in enumerate(zip(block.ops, groups)):
        t = op.results[0].type if group is not None else None
        if (group in strided and record(op.name).expensive and t.rank >= 2 and t.is_static
                and t.shape[-1] < short <= t.size
                and t.size * dtypes.of(t).storage_numpy.itemsize <= context.machine.l2_bytes
                and _crossing(block.ops, groups, k) <= CROSSING_ARRAYS):
            op = annotated(op, OwnMap(t.shape[-1]))
        ops.append(op)
    return ops


#: the most values of a map that ``expensive_ops_alone`` lets its split write and read
#: again, its operand included: each costs a store and a load per element (about 0.3 ns
#: in cache, 1.6 ns from memory at 10 GB/s) against about 3 ns per element won on a
#: ``tanh``. Counted over the whole fusion group, which the builder may split anyway,
#: so an overestimate: pyhpc's isoneutral counts up to 9 and gains at every size.
CROSSING_ARRAYS = 10


def _crossing(ops, groups: list, k: int) -> int:
    """How many values of op ``k``'s fusion group computed before it are read after it,
    by it or by the group's later ops: the arrays that splitting the map there writes."""
    group = groups[k]
    before = {r.name for op, g in zip(ops[:k], groups) if g == group for r in op.results}
    after = {v.name for op, g in zip(ops[k:], groups[k:]) if g == group for v in op.operands}
    return len(before & after)


def _is_slice(uses: BlockUses, value: ir.Value) -> bool:
    """Whether ``value`` is a slice of a larger array (whose rows are not contiguous with
    each other)."""
    producer = uses.producer(value)
    return producer is not None and producer.name == "stablehlo.slice"


def reads_elementwise(uses: BlockUses, value: ir.Value, depth: int = VIEW_DEPTH) -> bool:
    """Whether every op of the block that reads ``value`` is elementwise, or a view whose
    result only such ops read (``depth`` views deep): then its readers' maps may compute
    it where they read it."""
    readers = uses.readers(value)
    return bool(readers) and all(
        elementwise_rule(user) is not None
        or record(user.name).view and depth and len(user.results) == 1
        and reads_elementwise(uses, user.results[0], depth - 1) for user in readers)


def fuse_into_readers(block: ir.Block, uses: BlockUses, context: PassContext) -> list[ir.Op]:
    """A reshape that moves elements across dimensions, a gather, a one-element-wide
    dynamic slice (a loop's ``u[:, :, k]``) or a reduction of rows whose readers are all
    elementwise is computed by their maps where they read it, never written whole
    (``ComputedByReaders``), as XLA fuses it into its consumers; a reshape of a whole
    array that only products read is read by BLAS where the array lies; a concatenation
    is read by each reader from the part an element falls in."""
    ops = []
    for op in block.ops:
        readers = _computed_by(op, uses, context)
        ops.append(op if readers is None else annotated(op, ComputedByReaders(readers)))
    return ops


def _computed_by(op: ir.Op, uses: BlockUses, context: PassContext) -> str | None:
    t = op.results[0].type if op.results else None
    if not isinstance(t, ir.TensorType) or not t.is_static and not symbolic.is_symbolic(t):
        return None
    if op.name == "stablehlo.concatenate":
        return "any" if t.size else None
    if any(symbolic.is_symbolic(v.type) for v in (*op.operands, *op.results)) or not t.size:
        return None
    if op.name == "stablehlo.reshape":
        if reads_elementwise(uses, op.result):
            return "elementwise"
        readers = uses.readers(op.result)
        return "products" if readers and all(r.name == "stablehlo.dot_general"
                                             for r in readers) else None
    if op.name == "stablehlo.gather" and t.rank and reads_elementwise(uses, op.result):
        return "elementwise"
    if op.name == "stablehlo.dynamic_slice" and t.rank and t.size > 1 \
            and op.attr("slice_sizes")[-1] == 1 and reads_elementwise(uses, op.result):
        return "elementwise"
    if op.name == "stablehlo.reduce" and over_rows(op, context.machine) \
            and all(reads_elementwise(uses, r) for r in op.results):
        return "elementwise"
    return None


def fuse_into_consumers(block: ir.Block, uses: BlockUses, context: PassContext
                        ) -> list[ir.Op]:
    """An elementwise value that only a reduction, a scatter as its updates or a sort reads
    is computed by that op's own loops where it reads it (``FusedOperands``), never
    written: XLA fuses a reduction's and a scatter's producers into them, and a sort's
    positions (``top_k`` of 512 rows of 10,000 floats wrote 20 MB of them). So is the
    operand of a gather that its readers compute, where the gather reads no more elements
    than it has: a cross-entropy computes the log-softmax at each row's label only, as XLA
    fuses it (the whole of it, written, took a fifth of the loss's time)."""
    ops = []
    for op in block.ops:
        candidates = _consumed_operands(op)
        fused = tuple(k for k in candidates
                      if _fusible_producer(uses, op.operands[k], op))
        if fused and annotation(op, FusedOperands) is None:
            op = annotated(op, FusedOperands(fused))
        ops.append(op)
    return ops


def _consumed_operands(op: ir.Op) -> range:
    """The operands of ``op`` whose producers its lowering can compute in its own loops."""
    if op.name == "stablehlo.reduce":
        return range(len(op.operands) // 2)
    if op.name == "stablehlo.scatter":
        n = (len(op.operands) - 1) // 2
        return range(n + 1, len(op.operands))
    if op.name == "stablehlo.sort":
        return range(len(op.operands))
    if (op.name == "stablehlo.gather" and annotation(op, ComputedByReaders) is not None
            and op.result.type.is_static and op.operands[0].type.is_static
            and op.result.type.size <= op.operands[0].type.size):
        return range(1)
    return range(0)


def _fusible_producer(uses: BlockUses, value: ir.Value, op: ir.Op) -> bool:
    producer = uses.producer(value)
    return (producer is not None and annotation(producer, Fusion) is not None
            and uses.only_reader(value, op))


#: the float types whose products XLA's CPU code contracts with an add or a subtract into
#: one fused multiply-add (a single rounding) where the machine has FMA: LLVM's ``contract``
#: on XLA's elemental code. XLA copies a product into every fusion that reads it; LLVM
#: contracts an add (or subtract) with an operand that is a product (or, for an add, a
#: negated product) of no other use in that fusion, the first such operand when both are.
#: Measured against jax.jit: ``a*b+c``, ``c-a*b``, ``a*b-c*d`` (``fma(a, b, -(c*d))``),
#: ``-(a*b)+c``, broadcasts between; no contraction for ``(a*b+c) * (a*b)``. f16 products
#: contract only where the CPU computes in f16 (AVX512-FP16), which the C++ decides
#: (``h2d::mul_add_f16``: elsewhere the product rounds first, as uncontracted).
CONTRACTED_FLOATS = ("f16", "f32", "f64")
#: the ops that are products for XLA's contraction: an outer product (a dot_general that
#: contracts nothing) is a multiply of broadcasts to XLA's simplifier, contracted too
#: (``jnp.einsum("i,j->ij", u, v) + b``: 29% of the results a rounding apart otherwise)
PRODUCTS = ("stablehlo.multiply", "h2d.outer_product")


def contract_multiply_adds(block: ir.Block, uses: BlockUses, context: PassContext
                           ) -> list[ir.Op]:
    """An add or subtract of a fused product (or, for an add, a negated product) is one
    fused multiply-add, as XLA's CPU code contracts it (``Contraction``; the lowering
    contracts it where the product is computed in the same map and not written, and no
    other op of that map reads it)."""
    ops = []
    for op in block.ops:
        found = _contraction(op, uses)
        ops.append(op if found is None else annotated(op, found))
    return ops


def _contraction(op: ir.Op, uses: BlockUses) -> Contraction | None:
    if op.name not in ("stablehlo.add", "stablehlo.subtract") or \
            op.result.type.element not in CONTRACTED_FLOATS or annotation(op, Fusion) is None:
        return None
    subtract = op.name == "stablehlo.subtract"

    def operand_of(value: ir.Value, user: ir.Op, *names: str) -> ir.Op | None:
        producer = uses.producer(value)
        if (producer is None or producer.name not in names
                or annotation(producer, Fusion) is None
                or sum(v.name == value.name for v in user.operands) != 1):
            return None
        return producer

    def shared(*values: ir.Value) -> bool:
        return any(len(uses.readers(v)) > 1 for v in values)

    candidates = [(k, False, shared(value)) for k, value in enumerate(op.operands)
                  if operand_of(value, op, *PRODUCTS) is not None]
    if not subtract:
        for k, value in enumerate(op.operands):
            negation = operand_of(value, op, "stablehlo.negate")
            if negation is not None and operand_of(negation.operands[0], negation,
                                                   *PRODUCTS) is not None:
                candidates.append((k, True, shared(value, negation.operands[0])))
    return Contraction(tuple(candidates), subtract) if candidates else None
