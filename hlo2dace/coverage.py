"""Generates ``docs/ops.md``, the op coverage table, from the translator registry (never
edit that file by hand: ``make docs`` or ``python -m hlo2dace.coverage docs/ops.md``)."""

from __future__ import annotations

import sys
from pathlib import Path

#: where the ops that are not translated yet are planned (the project's issues)
PLANNED = {
    "indexing, sorting, random numbers, FFT, convolution (issue 5)": (
        "rng", "dynamic_gather", "map", "batch_norm_inference", "batch_norm_training",
        "batch_norm_grad"),
    "dynamic shapes and exported models (issue 7)": (
        "dynamic_broadcast_in_dim", "dynamic_iota", "dynamic_reshape", "real_dynamic_slice",
        "dynamic_pad", "set_dimension_size", "after_all", "create_token", "infeed",
        "outfeed"),
    "collectives (sharded programs, MPI)": (
        "all_gather", "all_reduce", "all_to_all", "collective_broadcast", "collective_permute",
        "reduce_scatter", "partition_id", "replica_id", "send", "recv"),
}


#: ops the frontend's MLIR passes rewrite before translation (see frontend/normalize.py)
LEGALISED = {"stablehlo.composite": "a call of its decomposition "
                                    "(stablehlo-legalize-composite-to-call)"}


def render() -> str:
    from .frontend.normalize import stablehlo_op_names
    from .translate import supported_ops
    from .translate.custom_call import supported_targets

    supported = supported_ops()
    planned = {f"stablehlo.{op}": where for where, ops in PLANNED.items() for op in ops}
    lines = [
        "# Op coverage",
        "",
        "Generated from the translator registry by `python -m hlo2dace.coverage docs/ops.md`;",
        "do not edit by hand. An op that is not listed as supported raises `UnsupportedError`",
        "naming the op and its source location.",
        "",
        f"Supported: {len(supported)} ops.",
        "",
        "| op | translator family |",
        "|---|---|",
    ]
    lines += [f"| `{name}` | {family} |" for name, family in supported.items()]
    lines += ["", "Rewritten by the frontend before translation (so supported too):", "",
              "| op | becomes |", "|---|---|"]
    lines += [f"| `{name}` | {becomes} |" for name, becomes in LEGALISED.items()]
    lines += ["", "CHLO ops are legalised to StableHLO by `chlo-legalize-to-stablehlo` first."]
    targets = supported_targets()
    lines += ["", f"`stablehlo.custom_call` targets ({len(targets)}; any other raises "
              "`UnsupportedError` listing these): " + ", ".join(f"`{t}`" for t in targets) + "."]
    missing = [n for n in stablehlo_op_names() if n not in supported and n not in LEGALISED]
    lines += ["", f"Not supported yet: {len(missing)} StableHLO ops.", "",
              "| op | planned in |", "|---|---|"]
    lines += [f"| `{name}` | {planned.get(name, 'not planned yet')} |" for name in missing]
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
