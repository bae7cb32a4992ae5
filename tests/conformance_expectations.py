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
NARROW_FLOAT = ("sub-byte and 8-bit float types (f4E2M1FN, f6E2M3FN, f6E3M2FN, f8E3M4, "
                "f8E4M3*, f8E5M2*, f8E8M0FNU): not supported by the translator's dtypes")
QUANT = ("quantized types: `!quant.uniform<...>` does not parse (jaxlib's MLIR context "
         "registers no quant dialect); uniform_quantize/uniform_dequantize not translated")

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
        NARROW_FLOAT,
        "constant.mlir::constant_op_test_f4_e2m1fn",
        "constant.mlir::constant_op_test_f6_e2m3fn",
        "constant.mlir::constant_op_test_f6_e3m2fn",
        "constant.mlir::constant_op_test_f8_e3m4",
        "constant.mlir::constant_op_test_f8_e4m3b11_fnuz",
        "constant.mlir::constant_op_test_f8_e4m3",
        "constant.mlir::constant_op_test_f8_e4m3_fn",
        "constant.mlir::constant_op_test_f8_e4m3_fnuz",
        "constant.mlir::constant_op_test_f8_e5m2",
        "constant.mlir::constant_op_test_f8_e5m2_fnuz",
        "constant.mlir::constant_op_test_f8_e5m2_fnuz#2",
        "constant.mlir::constant_op_test_f8_e8m0fnu",
        "dot_general.mlir::add_op_test_f8E3M4",
        "dot_general.mlir::add_op_test_f8E4M3",
    ),
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
