"""docs/ops.md is generated from the registry; it must match what the registry says now."""

from pathlib import Path

from hlo2dace import coverage
from hlo2dace.translate import supported_ops
from hlo2dace.translate.dtypes import SUPPORTED_ELEMENTS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_ops_table_is_generated_from_the_registry():
    text = (DOCS / "ops.md").read_text()
    assert text == coverage.render(), "docs/ops.md is stale: run `make docs`"
    for name in supported_ops():
        assert f"| `{name}` |" in text
    for name in SUPPORTED_ELEMENTS:  # the element types, the small floats among them
        assert f"| `{name}` |" in text


def test_registry_covers_the_foundation_ops():
    foundation = {
        "abs", "add", "subtract", "multiply", "divide", "remainder", "power", "negate", "sign",
        "maximum", "minimum", "sqrt", "rsqrt", "cbrt", "exponential", "exponential_minus_one",
        "log", "log_plus_one", "logistic", "sine", "cosine", "tan", "tanh", "atan2", "floor",
        "ceil", "round_nearest_afz", "round_nearest_even", "is_finite", "not", "and", "or",
        "xor", "shift_left", "shift_right_arithmetic", "shift_right_logical", "popcnt",
        "count_leading_zeros", "compare", "select", "clamp", "convert", "bitcast_convert",
        "real", "imag", "complex", "reduce_precision", "constant", "iota", "broadcast_in_dim",
        "reshape", "transpose", "slice", "concatenate", "pad", "reverse", "dynamic_slice",
        "dynamic_update_slice", "tuple", "get_tuple_element", "optimization_barrier",
        "dot_general"}
    missing = {f"stablehlo.{op}" for op in foundation} - set(supported_ops())
    assert not missing and "func.call" in supported_ops()
