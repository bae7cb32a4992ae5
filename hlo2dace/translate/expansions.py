"""hlo2dace's own implementations of DaCe's library nodes (``library.OWN``), registered
with DaCe's node classes when ``hlo2dace.translate`` is imported, so that DaCe expands an
hlo2dace SDFG's nodes (``sdfg.compile()``, ``expand_library_nodes``, a loaded file) as
hlo2dace's build does.

A node expands into the SDFG hlo2dace makes of a module of that one op: for a Reduce
node, the code ``reduction.py`` writes (XLA's order of summation, NaN-propagating
maximum, chunks and rows as the machine model says); for an FFT or IFFT node, FFTW's
(``fft.py``). The module is planned and its maps transformed by the CPU pipeline's passes
at the default level, as that code was when it was written into the program itself. Its
arrays (a chunked sum's partial results) live for one call: the program allocates its
persistent arrays before DaCe expands its nodes. It is built from the node alone (its
properties and the arrays it reads and writes), so an edited or reloaded SDFG expands as
a fresh one does.
"""

from __future__ import annotations

import math
from typing import Sequence

import dace
import dace.library
import numpy as np
from dace.libraries.fft import FFT, IFFT
from dace.libraries.standard import Reduce
from dace.transformation.transformation import ExpandTransformation

from .. import ir
from ..machine import current_machine
from . import dtypes, library
from .builder import Builder


def _identity(value: object, element: str) -> np.ndarray:
    """A Reduce node's identity as a number of ``element``'s type (a string where the
    SDFG was loaded from a file)."""
    if isinstance(value, str):
        value = {"True": 1, "False": 0}.get(value, value)
        value = float(value) if element.startswith("f") else int(float(value))
    return np.asarray(value).astype(dtypes.element_type(element).numpy)


def _one_op(op: ir.Op, argument: ir.Value, constants: tuple[ir.Op, ...] = ()) -> ir.Module:
    """The module ``main(argument) = op``, after ``constants``."""
    result = op.result
    main = ir.Function("main", (argument,), (result.type,), ir.Region((ir.Block(
        (argument,), (*constants, op, ir.Op("func.return", (result,), ()))),)))
    return ir.Module({"main": main})


def reduction_module(shape: tuple[int, ...], element: str, axes: Sequence[int], reducer: str,
                     init: object, location: ir.Location | None = None) -> ir.Module:
    """The module of one reduction: ``main(x) = reduce(x, init)`` over ``axes`` by the op
    ``reducer``."""
    scalar = ir.TensorType((), element)
    x = ir.Value("%arg0", ir.TensorType(shape, element))
    start = ir.Value("%init", scalar)
    result = ir.Value("%result", ir.TensorType(
        tuple(n for d, n in enumerate(shape) if d not in axes), element))
    a, b, c = (ir.Value(name, scalar) for name in ("%a", "%b", "%c"))
    body = ir.Block((a, b), (ir.Op(reducer, (a, b), (c,)),
                             ir.Op("stablehlo.return", (c,), ())))
    constant = ir.Op("stablehlo.constant", (), (start,),
                     ir.freeze({"value": ir.DenseElements(_identity(init, element), scalar)}))
    return _one_op(ir.Op("stablehlo.reduce", (x, start), (result,),
                         ir.freeze({"dimensions": tuple(axes)}), (ir.Region((body,)),),
                         location), x, (constant,))


def fft_module(shape: tuple[int, ...], element: str, kind: str,
               location: ir.Location | None = None) -> ir.Module:
    """The module of one complex Fourier transform over every dimension."""
    t = ir.TensorType(shape, element)
    x = ir.Value("%arg0", t)
    return _one_op(ir.Op("stablehlo.fft", (x,), (ir.Value("%result", t),), ir.freeze(
        {"fft_type": ir.EnumAttr("fft_type", kind), "fft_length": shape}), (), location), x)


def _location(node: dace.nodes.LibraryNode) -> ir.Location | None:
    info = node.debuginfo
    return ir.Location(info.filename, info.start_line) if info and info.filename else None


def _sdfg(module: ir.Module, node: dace.nodes.LibraryNode, state: dace.SDFGState
          ) -> dace.SDFG:
    """The SDFG of ``module``, its argument and result named as ``node``'s connectors."""
    # imported here: the pipeline's plan passes import this package (its registry), whose
    # __init__ imports this module
    from ..optimize import level
    from ..pipeline import pipeline
    from ..plan.passes import PassContext

    (read,), (written,) = state.in_edges(node), state.out_edges(node)
    target = pipeline("cpu", level("default"))
    context = PassContext(current_machine(), "cpu", target.level)
    sdfg = Builder(target.plan(module, context), node.label, machine=context.machine,
                   expansion=True).build()
    sdfg.replace("arg0", read.dst_conn)
    sdfg.replace("__return0", written.src_conn)
    for desc in sdfg.arrays.values():
        if desc.transient:
            desc.lifetime = dace.AllocationLifetime.Scope
    target.transform(sdfg, context)
    return sdfg


def _operand(node: dace.nodes.LibraryNode, state: dace.SDFGState, sdfg: dace.SDFG,
             elements: Sequence[str]) -> tuple[tuple[int, ...], str]:
    """The shape and element type of the array ``node`` reads."""
    (read,) = state.in_edges(node)
    desc = sdfg.arrays[read.data.data]
    element = dtypes.element_of_numpy(desc.dtype.as_numpy_dtype())
    if element not in elements:
        raise ValueError(f"a {type(node).__name__} node of {element} elements (hlo2dace's "
                         f"implementation takes {', '.join(elements)})")
    return tuple(int(n) for n in desc.shape), element


@dace.library.expansion
class ExpandReduceInXLAOrder(ExpandTransformation):
    """A Reduce node as the code hlo2dace writes for ``stablehlo.reduce``."""

    environments = []

    @staticmethod
    def expansion(node: Reduce, parent_state: dace.SDFGState, parent_sdfg: dace.SDFG
                  ) -> dace.SDFG:
        shape, element = _operand(node, parent_state, parent_sdfg, library.REDUCE_ELEMENTS)
        axes = range(len(shape)) if node.axes is None else sorted(node.axes)
        return _sdfg(reduction_module(shape, element, list(axes), library.reducer_of(node),
                                      node.identity, _location(node)), node, parent_state)


def _fft_expansion(kind: str, scale: int) -> type:
    @dace.library.expansion
    class ExpandWithFFTW(ExpandTransformation):
        __doc__ = f"An {kind} node as the FFTW call hlo2dace makes for ``stablehlo.fft``."
        environments = []

        @staticmethod
        def expansion(node, parent_state: dace.SDFGState, parent_sdfg: dace.SDFG
                      ) -> dace.SDFG:
            shape, element = _operand(node, parent_state, parent_sdfg,
                                      ("complex<f32>", "complex<f64>"))
            wanted = float(math.prod(shape)) ** scale
            if abs(float(node.factor) / wanted - 1) > 1e-12:
                raise ValueError(f"hlo2dace's {kind} implementation scales by {wanted} "
                                 f"(StableHLO's {kind}), not by {node.factor}")
            return _sdfg(fft_module(shape, element, kind, _location(node)), node,
                         parent_state)

    ExpandWithFFTW.__name__ = ExpandWithFFTW.__qualname__ = f"Expand{kind}WithFFTW"
    return ExpandWithFFTW


Reduce.register_implementation(library.OWN, ExpandReduceInXLAOrder)
FFT.register_implementation(library.OWN, _fft_expansion("FFT", 0))
IFFT.register_implementation(library.OWN, _fft_expansion("IFFT", -1))
