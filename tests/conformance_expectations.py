"""The StableHLO interpreter tests (tests/test_conformance.py) that hlo2dace cannot pass
yet, each with the reason. Every entry is a strict xfail: when a function starts to pass,
its test fails until the entry is removed here, so this list only shrinks.

Keys are ``file::function`` (``function#2`` for the second function of that name in a
file); reasons are grouped by cause. Regenerate the failing set with
``hlo2dace test ../shared/conformance/stablehlo-interpret/*.mlir``.
"""

from __future__ import annotations


def _each(reason: str, *ids: str) -> dict[str, str]:
    return dict.fromkeys(ids, reason)


# ---------------------------------------------------------------- ops not translated yet
SCAN_REVERSE = ("chlo.scan with is_reverse = true: jaxlib 0.10.2's chlo-legalize-to-stablehlo "
                "ignores the attribute and computes the forward scan, so hlo2dace refuses it "
                "(UnsupportedError) rather than answer wrongly")

# ------------------------------------------------------------------ types not supported
QUANT = ("quantized types: jaxlib 0.10.2's MLIR has no quant dialect (none of the dialect "
         "registrations it exposes adds one), so `!quant.uniform<...>` does not parse; "
         "hlo2dace raises UnsupportedError naming the op and its line")

# ------------------------------------- semantic differences (owners: elementwise translators)
CEIL_DENORMAL = ("denormals flushed to zero (FTZ/DAZ, as XLA's CPU backend does; the "
                 "interpreter keeps them): ceil of the smallest positive subnormal (bf16 0x0001,"
                 " f32 0x00000001, f64 0x0000000000000001) gives 0.0, expected 1.0")
FLOOR_DENORMAL = ("denormals flushed to zero (FTZ/DAZ, as XLA's CPU backend does; the "
                  "interpreter keeps them): floor of the smallest negative subnormal (bf16 "
                  "0x8001, f32 0x80000001, f64 0x8000000000000001) gives -0.0, expected -1.0")
MINMAX_COMPLEX = ("complex maximum/minimum: hlo2dace follows XLA, which compares the real "
                  "parts only (ties keep the left operand); the spec and the interpreter order "
                  "(real, imag) lexicographically: minimum((1.5, 7.5), (1.5, 2.5)) gives "
                  "(1.5, 7.5), expected (1.5, 2.5); maximum((0.0, 1.5), (-0.0, 2.5)) gives "
                  "(0.0, 1.5), expected (-0.0, 2.5)")
REDUCE_PRECISION_NAN = ("reduce_precision to zero mantissa bits: hlo2dace follows XLA, which "
                        "keeps NaN; the interpreter turns NaN (0x7FFFFFFFFFFFFFFF, format e5m0) "
                        "into +inf")

EXPECTED_FAILURES: dict[str, str] = {
    **_each(SCAN_REVERSE, "chlo/scan.mlir::scan_cumsum_reverse"),
    **_each(
        QUANT,
        "quantized_ops.mlir::uniform_quantize",
        "quantized_ops.mlir::uniform_quantize#2",
        "quantized_ops.mlir::uniform_dequantize",
        "quantized_ops.mlir::uniform_qdq",
        "quantized_ops.mlir::quantized_add",
    ),
    **_each(
        CEIL_DENORMAL,
        "ceil.mlir::ceil_op_test_bf16",
        "ceil.mlir::ceil_op_test_f32",
        "ceil.mlir::ceil_op_test_f64",
    ),
    **_each(
        FLOOR_DENORMAL,
        "floor.mlir::floor_op_test_bf16",
        "floor.mlir::floor_op_test_f32",
        "floor.mlir::floor_op_test_f64",
    ),
    **_each(
        MINMAX_COMPLEX,
        "maximum.mlir::max_op_test_c64",
        "maximum.mlir::max_op_test_c128",
        "minimum.mlir::min_op_test_c64",
        "minimum.mlir::min_op_test_c128",
    ),
    **_each(
        REDUCE_PRECISION_NAN,
        "reduce_precision.mlir::reduce_precision_op_test_f64_zero_mantissa_bits",
    ),
}
