"""Matrix-vector products that read one large matrix, computed in one pass over it."""

from __future__ import annotations

from .. import ir
from ..translate.products import Matvec
from .analysis import BlockUses
from .passes import PassContext


def pair_matvecs(block: ir.Block, uses: BlockUses, context: PassContext) -> list[ir.Op]:
    """Two matrix-vector products of one block that read the same large matrix (NPBench's
    mvt: ``A @ y1`` and ``y2 @ A``; bicg; atax's ``(A @ x) @ A``) become one
    ``h2d.paired_matvecs`` where the first stands, whose lowering reads each block of the
    matrix's rows for both while it is in L2: XLA reads the matrix twice. The second's
    vector must be known before the first runs, or be the first's result when the first
    takes row dots and the second combines rows (each row's weight is then ready when the
    row is read)."""
    ops = list(block.ops)
    paired: dict[int, ir.Op] = {}  # id of the first product -> the pair
    second_of: set[int] = set()
    for k, op in enumerate(ops):
        first = Matvec.of(op)
        if first is None or id(op) in second_of or id(op) not in uses.position \
                or not first.passes_over_matrix(context.machine):
            continue
        for later in ops[k + 1:]:
            candidate = Matvec.of(later)
            if candidate is None or id(later) in second_of or id(later) not in uses.position \
                    or candidate.matrix.name != first.matrix.name:
                continue
            chained = candidate.vector.name == op.result.name
            if (chained and first.rows and not candidate.rows) or (
                    not chained and uses.defined_before(candidate.vector, op)):
                paired[id(op)] = _pair(first, candidate)
                second_of.add(id(later))
                break
    return [paired.get(id(op), op) for op in ops if id(op) not in second_of]


def _pair(first: Matvec, second: Matvec) -> ir.Op:
    """The two products as one op: its operands the matrix and the vectors (not the
    first's result), its region the two products of its block's arguments."""
    outer = [first.matrix, first.vector]
    if second.vector.name != first.op.result.name:
        outer.append(second.vector)
    arguments = tuple(ir.Value(f"{v.name}_in_pair", v.type) for v in outer)
    inner = dict(zip((v.name for v in outer), arguments))
    results = []

    def rebuilt(op: ir.Op) -> ir.Op:
        result = ir.Value(f"{op.result.name}_in_pair", op.result.type)
        inner[op.result.name] = result
        results.append(result)
        return ir.Op(op.name, tuple(inner[v.name] for v in op.operands), (result,),
                     op.attributes, location=op.location)

    products = [rebuilt(first.op), rebuilt(second.op)]
    terminator = ir.Op("stablehlo.return", tuple(results), ())
    region = ir.Region((ir.Block(arguments, (*products, terminator)),))
    return ir.Op("h2d.paired_matvecs", tuple(outer), (first.op.result, second.op.result),
                 regions=(region,), location=first.op.location)
