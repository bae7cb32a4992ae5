"""Generates ``docs/ops.md``, the op coverage table, from the translator registry (never
edit that file by hand: ``make docs`` or ``python -m hlo2dace.coverage docs/ops.md``)."""

from __future__ import annotations

import sys
from pathlib import Path

_LEGACY = ("a legacy op that StableHLO keeps for compatibility and JAX does not emit; "
           "write `stablehlo.dot_general` (what `jnp.dot`, `jnp.einsum` and `@` lower to)")
_QUANTIZED = ("quantized types: jaxlib 0.10.2's MLIR has no quant dialect to read them; "
              "compute in floats or integers")
_NORMALISATION = ("JAX does not emit it (its normalisations lower to elementwise ops and "
                  "reductions, which are supported)")
#: the StableHLO ops hlo2dace does not translate: why, and what to use instead
NOT_SUPPORTED = {
    "stablehlo.async_start": "XLA's asynchronous operations, which JAX does not emit",
    "stablehlo.async_done": "XLA's asynchronous operations, which JAX does not emit",
    "stablehlo.batch_norm_grad": _NORMALISATION,
    "stablehlo.batch_norm_inference": _NORMALISATION,
    "stablehlo.batch_norm_training": _NORMALISATION,
    "stablehlo.cross-replica-sum": "a legacy spelling of `stablehlo.all_reduce`, which is "
                                   "supported",
    "stablehlo.dot": _LEGACY,
    "stablehlo.einsum": _LEGACY,
    "stablehlo.unary_einsum": _LEGACY,
    "stablehlo.torch_index_select": "a legacy op JAX does not emit; `stablehlo.gather` (what "
                                    "JAX's indexing lowers to) is supported",
    "stablehlo.infeed": "a device's input stream: pass the data as arguments",
    "stablehlo.outfeed": "a device's output stream: return the data as results",
    "stablehlo.send": "point-to-point transfers between hosts: sharded programs communicate "
                      "through the collectives, which are supported (docs/distributed.md)",
    "stablehlo.recv": "point-to-point transfers between hosts: sharded programs communicate "
                      "through the collectives, which are supported (docs/distributed.md)",
    "stablehlo.set_dimension_size": "XLA's padded dynamic dimensions, which JAX does not "
                                    "emit; shape-polymorphic modules (symbolic dimensions) "
                                    "are supported",
    "stablehlo.uniform_quantize": _QUANTIZED,
    "stablehlo.uniform_dequantize": _QUANTIZED,
}
#: ops that end a region or a function: part of the op that holds them, not translated
#: on their own
TERMINATORS = ("func.return", "stablehlo.return")

_STATIC_FORM = ("its static form, once its shape operand is a constant "
                "(stablehlo-canonicalize-dynamism) or known from the argument shapes "
                "(symbolic.py)")
_REFINED = ("its static form, once shape refinement makes its operands constants (a module "
            "with dynamic shapes compiles per argument shape for it)")

#: ops the frontend's MLIR passes rewrite before translation (see frontend/normalize.py)
LEGALISED = {"stablehlo.composite": "a call of its decomposition "
                                    "(stablehlo-legalize-composite-to-call)",
             "stablehlo.dynamic_broadcast_in_dim": _STATIC_FORM,
             "stablehlo.dynamic_iota": _STATIC_FORM,
             "stablehlo.dynamic_reshape": _STATIC_FORM,
             "stablehlo.dynamic_pad": _REFINED,
             "stablehlo.dynamic_gather": _REFINED}


_TASKLET = "a tasklet of C++ DaCe does not look into"
#: what each family's ops are in the SDFG, as DaCe's transformations see them
#: (``bench/library_nodes.py`` counts them per program; ``translate/library.py``)
DACE_FORM = {
    "elementwise": "maps (a fused cluster: one map)",
    "shape": "copy maps, or no node (a view of its operand)",
    "indexing": "maps; a scatter whose updates may collide: " + _TASKLET + " (XLA's order)",
    "reduction": "maps whose tasklets loop over the reduced elements in XLA's order "
                 "(C++ loops)",
    "linalg": "DaCe BLAS library nodes (Gemm, Gemv, Dot, BatchedMatMul: f32/f64 matrices "
              "as they lie); otherwise " + _TASKLET + " (a BLAS call, a loop nest)",
    "matvec": _TASKLET + " (gemv over blocks of rows)",
    "convolution": "a copy map and " + _TASKLET + " (BLAS), or a loop nest in one",
    "fft": _TASKLET + " (hlo2dace's FFT)",
    "lapack": _TASKLET + " (LAPACK)",
    "custom_call": "LAPACK: an unbatched real Cholesky factorisation (potrf) is a DaCe Potrf "
                   "library node (expanded into jaxlib's kernel), any other call "
                   + _TASKLET + "; sharding marks: no node",
    "sorting": "a map over rows, each row sorted in C++",
    "rng": "maps",
    "control": "DaCe control-flow regions (loops, conditionals)",
    "collectives": "DaCe comm library nodes (MPI)",
}
#: ops whose form is not their family's
DACE_FORM_OF_OP = {
    "stablehlo.reduce": "a DaCe Reduce library node (one array by add, multiply, max, min, "
                        "and, or or xor from a constant; expanded into hlo2dace's code, "
                        "XLA's order); a reduction computing its operand in its loop: maps "
                        "whose tasklets loop over the reduced elements (C++ loops)",
    "stablehlo.fft": "DaCe FFT and IFFT library nodes (complex transforms of a whole array; "
                     "expanded into FFTW calls); batched and real transforms: " + _TASKLET
                     + " (FFTW)",
    "h2d.outer_product": "maps",
    "h2d.scaled_dot": _TASKLET + " (a BLAS call with the scale as alpha)",
}


def render() -> str:
    """docs/ops.md from the registry (every op, its family, whether it keeps symbolic
    sizes), the element types, the custom-call targets and the StableHLO ops not supported
    yet: written from the code so that it cannot go stale."""
    from .frontend.normalize import stablehlo_op_names
    from .translate import supported_ops
    from .translate.custom_call import supported_targets
    from .translate.dtypes import SUPPORTED_ELEMENTS, element_type
    from .translate.registry import symbolic_ops

    supported = supported_ops()
    symbolic = set(symbolic_ops())
    lines = [
        "# Op coverage",
        "",
        "Generated from the translator registry by `python -m hlo2dace.coverage docs/ops.md`;",
        "do not edit by hand. An op that is not listed as supported raises `UnsupportedError`",
        "naming the op and its source location.",
        "",
        f"Supported: {len(supported)} ops.",
        "",
        "Sizes: *symbolic* ops keep the symbolic dimensions of a shape-polymorphic module",
        "(one binary for every size); with any other op on a dynamic shape, the module",
        "compiles once per argument shape (StableHLO's shape refinement), as XLA does.",
        "",
        "DaCe sees: what the op is in the SDFG, which DaCe's transformations and library",
        "expansions work on (library nodes and maps) or cannot look into (C++ in a tasklet).",
        "",
        "| op | translator family | sizes | DaCe sees |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{name}` | {family} | {'symbolic' if name in symbolic else 'per shape'} | "
              f"{DACE_FORM_OF_OP.get(name, DACE_FORM[family])} |"
              for name, family in supported.items()]
    lines += ["", "Rewritten by the frontend before translation (so supported too):", "",
              "| op | becomes |", "|---|---|"]
    lines += [f"| `{name}` | {becomes} |" for name, becomes in LEGALISED.items()]
    lines += ["", "CHLO ops are legalised to StableHLO by `chlo-legalize-to-stablehlo` first.",
              "", "Terminators end a region or a function and are part of the op that holds "
              "them: " + ", ".join(f"`{name}`" for name in TERMINATORS) + "."]
    lines += ["", f"Element types ({len(SUPPORTED_ELEMENTS)}; `!quant.uniform<...>` types do not "
              "parse in jaxlib 0.10.2's MLIR, which has no quant dialect):", "",
              "| type | NumPy dtype | stored as | computed in |", "|---|---|---|---|"]
    for name in SUPPORTED_ELEMENTS:
        element = element_type(name)
        computed = element.compute
        if element.is_small_float:
            computed += (f", each op rounded to {element.via} and then to the type"
                         if element.via else ", each op rounded to the type")
        elif element.is_stored_as_bits:
            computed += ", each op rounded to the type"
        elif element.narrow_bits:
            computed += f", wrapped to {element.narrow_bits} bits after each op"
        lines.append(f"| `{name}` | {element.numpy.name} | {element.storage_numpy.name} | "
                     f"{computed} |")
    targets = supported_targets()
    lines += ["", f"`stablehlo.custom_call` targets ({len(targets)}; any other raises "
              "`UnsupportedError` pointing here, or naming the JAX feature it comes from and "
              "what to use instead: host callbacks such as `jax.debug.print`, "
              "`jax.lax.approx_max_k`): " + ", ".join(f"`{t}`" for t in targets) + "."]
    missing = [n for n in stablehlo_op_names()
               if n not in supported and n not in LEGALISED and n not in TERMINATORS]
    lines += ["", f"Not supported: {len(missing)} StableHLO ops.", "",
              "| op | why, and what to use |", "|---|---|"]
    lines += [f"| `{name}` | {NOT_SUPPORTED[name]} |" for name in missing]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if argv:
        Path(argv[0]).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
