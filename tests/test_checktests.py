"""The check-dialect runner: rewriting check ops into results (every form the StableHLO
interpreter's tests use) and comparing values with the interpreter's semantics. Needs no
compiler, except the last test, which runs one small file end to end."""

from __future__ import annotations

import textwrap

import ml_dtypes
import numpy as np
import pytest

from hlo2dace.checktests import (
    DEFAULT_TOLERANCE,
    ENTRY,
    INTERPRETER_ONLY,
    NO_CHECKS_ARGUMENTS,
    NO_CHECKS_RESULTS,
    Check,
    CheckSyntaxError,
    check_values,
    combined_module,
    load_text,
    parse_check,
    run_file,
    ulp_difference,
)
from hlo2dace.frontend.normalize import normalize

# ------------------------------------------------------------------ parse_check


def test_expect_eq():
    check, actual, expected, constant, type_ = parse_check(
        "check.expect_eq %operand, %result : tensor<3xi64>")
    assert check.kind == "eq"
    assert (actual, expected, constant, type_) == ("%operand", "%result", None,
                                                   "tensor<3xi64>")


def test_expect_eq_const_of_a_multi_result_value():
    check, actual, expected, constant, type_ = parse_check(
        "check.expect_eq_const %results#1, dense<[[1, 2], [3, 4]]> : tensor<2x2xi64>")
    assert check.kind == "eq"
    assert actual == "%results#1" and expected is None
    assert constant == "dense<[[1, 2], [3, 4]]>" and type_ == "tensor<2x2xi64>"


def test_expect_almost_eq_const_default_tolerance():
    check, _, _, constant, type_ = parse_check(
        "check.expect_almost_eq_const %x, dense<[(1.0, 2.0), (3.0, -4.5)]> "
        ": tensor<2xcomplex<f32>>")
    assert check.kind == "almost_eq" and check.tolerance == DEFAULT_TOLERANCE == 1e-4
    assert constant == "dense<[(1.0, 2.0), (3.0, -4.5)]>"
    assert type_ == "tensor<2xcomplex<f32>>"


@pytest.mark.parametrize("text", [
    "check.expect_almost_eq_const %x, dense<5.1> : tensor<f64> {tolerance = 0.1 : f64}",
    "check.expect_almost_eq_const %x, dense<5.1> : tensor<f64>, tolerance = 0.1",
    "check.expect_almost_eq_const %x, dense<5.1> : tensor<f64>, tolerance = 0.1 : f64",
], ids=["attr-dict", "keyword", "keyword-typed"])
def test_expect_almost_eq_const_tolerance_forms(text):
    check, actual, _, constant, type_ = parse_check(text)
    assert check.kind == "almost_eq" and check.tolerance == pytest.approx(0.1)
    assert (actual, constant, type_) == ("%x", "dense<5.1>", "tensor<f64>")


@pytest.mark.parametrize("text", [
    "check.expect_almost_eq %a, %b, tolerance = 0.1 : tensor<2xf32>",
    "check.expect_almost_eq %a, %b, tolerance = 0.1 : f64 : tensor<2xf32>",
    "check.expect_almost_eq %a, %b {tolerance = 0.1 : f64} : tensor<2xf32>",
], ids=["keyword", "keyword-typed", "attr-dict"])
def test_expect_almost_eq_tolerance_forms(text):
    check, actual, expected, constant, type_ = parse_check(text)
    assert check.kind == "almost_eq" and check.tolerance == pytest.approx(0.1)
    assert (actual, expected, constant, type_) == ("%a", "%b", None, "tensor<2xf32>")


def test_expect_close_ulp_limits():
    check, actual, expected, _, type_ = parse_check(
        "check.expect_close %a, %b, max_ulp_difference = 3 : tensor<f16>, tensor<f16>")
    assert (check.kind, check.max_ulp, check.min_ulp) == ("close", 3, 0)
    assert (actual, expected, type_) == ("%a", "%b", "tensor<f16>")
    check, *_ = parse_check("check.expect_close %a, %b, max_ulp_difference = 5, "
                            "min_ulp_difference = 2 : tensor<2xf32>, tensor<2xf32>")
    assert (check.max_ulp, check.min_ulp) == (5, 2)


def test_check_op_over_several_lines():
    check, actual, _, constant, type_ = parse_check(
        "check.expect_almost_eq_const %result,\n      dense<[[0.73, 0.88],\n"
        "             [0.95, 0.98]]> : tensor<2x2xf64>")
    assert check.kind == "almost_eq" and actual == "%result"
    assert constant == "dense<[[0.73, 0.88], [0.95, 0.98]]>" and type_ == "tensor<2x2xf64>"


@pytest.mark.parametrize("text", [
    "check.expect_true %a : tensor<i1>",
    "check.expect_eq_const %a, dense<1>",
    "check.expect_eq %a : tensor<i1>",
    "check.expect_close %a, %b, max_ulp_difference = many : tensor<f32>, tensor<f32>",
])
def test_malformed_check_ops(text):
    with pytest.raises(CheckSyntaxError):
        parse_check(text)


# ------------------------------------------------------------------- rewriting


def _one(text: str):
    functions = load_text(textwrap.dedent(text))
    assert len(functions) == 1
    return functions[0]


def test_rewrite_into_results_and_parse_with_mlir():
    function = _one("""
        // RUN: stablehlo-translate --interpret -split-input-file %s

        func.func @add_op_test_si64() {
          %lhs = stablehlo.constant dense<[1, 2]> : tensor<2xi64>  // a {comment} [
          %result = stablehlo.add %lhs, %lhs : tensor<2xi64>
          check.expect_eq_const %result, dense<[2, 4]> : tensor<2xi64>
          check.expect_eq %result, %result : tensor<2xi64>
          func.return
        }
        """)
    assert function.name == function.id_name == "add_op_test_si64"
    assert function.skip_reason is None and function.line == 4
    assert [c.kind for c in function.checks] == ["eq", "eq"]
    assert "%__expected_0 = stablehlo.constant dense<[2, 4]> : tensor<2xi64>" in function.text
    assert "func.return %result, %__expected_0, %result, %result" in function.text
    assert "check." not in function.text
    assert function.result_types == ["tensor<2xi64>"] * 4 and function.kept_results == 0
    assert "stablehlo.add" in normalize(function.text).text


def test_several_pieces_duplicate_names_and_lines():
    functions = load_text(textwrap.dedent("""\
        func.func @f() {
          %x = stablehlo.constant dense<1> : tensor<i32>
          check.expect_eq_const %x, dense<1> : tensor<i32>
          func.return
        }

        // -----

        func.func public @f() {
          %x = stablehlo.constant dense<2> : tensor<i32>
          check.expect_eq_const %x, dense<2> : tensor<i32>
          return
        }
        """))
    assert [(f.name, f.id_name, f.piece, f.line) for f in functions] == [
        ("f", "f", 0, 1), ("f", "f#2", 1, 9)]
    for function in functions:
        normalize(function.text)


def test_module_wrapper_and_helpers_called_with_func_call():
    function = _one("""
        module @wrapped attributes {mhlo.num_replicas = 1 : i32} {
          func.func private @add_2(%arg0: tensor<i64>) -> tensor<i64> {
            %0 = stablehlo.constant dense<2> : tensor<i64>
            %1 = stablehlo.add %arg0, %0 : tensor<i64>
            func.return %1 : tensor<i64>
          }
          func.func @main() {
            %0 = stablehlo.constant dense<1> : tensor<i64>
            %1 = func.call @add_2(%0) : (tensor<i64>) -> tensor<i64>
            check.expect_eq_const %1, dense<3> : tensor<i64>
            func.return
          }
        }
        """)
    assert function.name == "main"
    assert list(function.definitions) == ["main", "add_2"]
    assert "callee = @add_2" in normalize(function.text).text


def test_multi_result_values_and_kept_results():
    function = _one("""
        func.func @two() -> tensor<i32> {
          %a = stablehlo.constant dense<1> : tensor<i32>
          %r:2 = stablehlo.optimization_barrier %a, %a : tensor<i32>, tensor<i32>
          check.expect_eq_const %r#1, dense<1> : tensor<i32>
          func.return %r#0 : tensor<i32>
        }
        """)
    assert function.kept_results == 1
    assert "func.return %r#0, %r#1, %__expected_0 : tensor<i32>, tensor<i32>, tensor<i32>" \
        in function.text
    assert "-> (tensor<i32>, tensor<i32>, tensor<i32>)" in function.text
    normalize(function.text)


@pytest.mark.parametrize("body, marker", [
    ('%r:2 = "interpreter.run_parallel"() {programs = [[@helper], [@helper]]} '
     ': () -> (tensor<i32>, tensor<i32>)', "interpreter.run_parallel"),
    ('%p = interpreter.probe %x, probe_id = "p" : tensor<i32>', "interpreter.probe"),
    ('check.expect_serialized_eq %x, probe_id = "p" : tensor<i32>',
     "check.expect_serialized_eq"),
    ("%t = stablehlo.after_all : !stablehlo.token\n"
     "  %r, %t2 = stablehlo.infeed %t : (!stablehlo.token) -> (tensor<i32>, !stablehlo.token)",
     "stablehlo.infeed"),
    ('%t2 = "stablehlo.send"(%x, %t) {channel_handle = #stablehlo.channel_handle<handle = 1, '
     'type = 2>} : (tensor<i32>, !stablehlo.token) -> !stablehlo.token', "stablehlo.send"),
])
def test_interpreter_only_ops_are_skipped(body, marker):
    functions = load_text(textwrap.dedent(f"""
        func.func @helper() -> tensor<i32> {{
          %x = stablehlo.constant dense<1> : tensor<i32>
          func.return %x : tensor<i32>
        }}
        func.func @main() {{
          %x = stablehlo.constant dense<1> : tensor<i32>
          {body}
          check.expect_eq_const %x, dense<1> : tensor<i32>
          func.return
        }}
        """))
    main = functions[-1]
    assert main.name == "main" and main.skip_reason == INTERPRETER_ONLY[marker]


def test_functions_without_check_ops():
    functions = load_text(textwrap.dedent("""
        func.func @printed() -> tensor<2xi8> {
          %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi8>
          func.return %0 : tensor<2xi8>
        }

        // -----

        func.func @main(%arg0: tensor<2xi32>) -> tensor<2xi32> {
          return %arg0 : tensor<2xi32>
        }

        // -----

        func.func @only_runs() {
          %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi8>
          func.return
        }
        """))
    assert [f.skip_reason for f in functions] == [NO_CHECKS_RESULTS, NO_CHECKS_ARGUMENTS, None]
    assert functions[2].checks == [] and functions[2].result_types == []
    normalize(functions[2].text)


def test_check_inside_a_region_is_skipped():
    function = _one("""
        func.func @nested() {
          %p = stablehlo.constant dense<true> : tensor<i1>
          %r = "stablehlo.if"(%p) ({
            %x = stablehlo.constant dense<1> : tensor<i32>
            check.expect_eq_const %x, dense<1> : tensor<i32>
            stablehlo.return %x : tensor<i32>
          }, {
            %y = stablehlo.constant dense<2> : tensor<i32>
            stablehlo.return %y : tensor<i32>
          }) : (tensor<i1>) -> tensor<i32>
          func.return
        }
        """)
    assert function.skip_reason.startswith("cannot rewrite the check ops")


def test_unbalanced_piece_is_reported_not_raised():
    functions = load_text("func.func @f() {\n  %x = stablehlo.constant dense<1> : tensor<i32>\n"
                          "// -----\nfunc.func @g() {\n  func.return\n}\n")
    assert functions[0].skip_reason.startswith("cannot find the functions of this piece")
    assert functions[1].name == "g" and functions[1].skip_reason is None


def test_combined_module_renames_pieces_and_parses():
    functions = load_text(textwrap.dedent("""
        func.func @helper() -> tensor<i32> {
          %x = stablehlo.constant dense<1> : tensor<i32>
          func.return %x : tensor<i32>
        }
        func.func @main() {
          %x = func.call @helper() : () -> tensor<i32>
          check.expect_eq_const %x, dense<1> : tensor<i32>
          func.return
        }

        // -----

        func.func @helper() -> tensor<f32> {
          %x = stablehlo.constant dense<2.0> : tensor<f32>
          func.return %x : tensor<f32>
        }
        func.func @main() {
          %x = func.call @helper() : () -> tensor<f32>
          check.expect_almost_eq_const %x, dense<2.0> : tensor<f32>
          func.return
        }

        // -----

        func.func @nothing() {
          func.return
        }
        """))
    assert [f.id_name for f in functions] == ["main", "main#2", "nothing"]
    text = combined_module(functions)
    for name in ("p0__main", "p0__helper", "p1__main", "p1__helper", "p2__nothing", ENTRY):
        assert f"@{name}(" in text
    assert "func.call @p1__helper()" in text
    assert "func.call @p2__nothing() : () -> ()" in text
    normalize(text)


# ---------------------------------------------------------------- check_values


def test_integers_exact():
    eq = Check("eq")
    assert check_values(eq, np.array([1, 2, 3]), np.array([1, 2, 3])) is None
    message = check_values(eq, np.array([1, 5, 3]), np.array([1, 2, 3]))
    assert "1 of 3 elements differ" in message and "[1]" in message and "5" in message
    assert "shape" in check_values(eq, np.zeros(3), np.zeros(4))
    assert "dtype" in check_values(eq, np.zeros(3, np.int32), np.zeros(3, np.int64))
    assert check_values(eq, np.array([True, False]), np.array([True, False])) is None
    assert check_values(eq, np.zeros((2, 0)), np.zeros((2, 0))) is None


def test_exact_float_equality_is_ieee():
    """``expect_eq`` compares with ``APFloat ==``: -0.0 equals 0.0 and NaN equals
    nothing (the interpreter's tests state NaN results with ``expect_almost_eq``)."""
    eq = Check("eq")
    assert check_values(eq, np.array([-0.0, 1.5]), np.array([0.0, 1.5])) is None
    assert check_values(eq, np.array([np.nan]), np.array([np.nan])) is not None
    assert check_values(eq, np.array([np.inf]), np.array([np.inf])) is None
    assert check_values(eq, np.array([1.0], np.float32),
                        np.array([np.nextafter(np.float32(1), np.float32(2))])) is not None
    assert check_values(eq, np.array([1 + 2j]), np.array([1 - 2j])) is not None
    assert check_values(eq, np.array([-0.0 + 0j]), np.array([0.0 - 0j])) is None


def test_almost_equal_absolute_tolerance():
    almost = Check("almost_eq")
    assert check_values(almost, np.array([5.0]), np.array([5.0001])) is None
    assert "absolute tolerance" in check_values(almost, np.array([5.0]), np.array([5.0002]))
    # absolute, not relative: tiny values always pass, large ones need the same closeness
    assert check_values(almost, np.array([1e-6]), np.array([2e-6])) is None
    assert check_values(almost, np.array([1e10]), np.array([1e10 + 1e-5])) is None
    assert check_values(almost, np.array([1e10]), np.array([1e10 * (1 + 1e-12)])) is not None
    assert check_values(Check("almost_eq", 0.1), np.array([5.0]), np.array([5.1])) is None
    assert check_values(almost, np.array([5.0], np.float32), np.array([5.0004], np.float32))


def test_almost_equal_special_values():
    almost = Check("almost_eq")
    assert check_values(almost, np.array([np.nan, np.inf, -np.inf, -0.0]),
                        np.array([np.nan, np.inf, -np.inf, 0.0])) is None
    for got, want in [(np.nan, 1.0), (np.inf, -np.inf), (np.inf, 1e308), (1.0, np.nan)]:
        assert check_values(almost, np.array([got]), np.array([want])) is not None
    complex_ = np.array([complex(np.nan, 1.0)])
    assert check_values(almost, complex_, complex_.copy()) is None
    assert check_values(almost, np.array([1 + 1j]), np.array([1 + 1.001j])) is not None
    bf16 = np.array([1.0, np.nan], ml_dtypes.bfloat16)
    assert check_values(almost, bf16, bf16.copy()) is None


def test_ulp_limits():
    a, b = np.array([5.0], np.float16), np.array([5.01], np.float16)
    assert ulp_difference(a, b)[0] == 3
    assert check_values(Check("close", max_ulp=3), a, b) is None
    assert "ULP" in check_values(Check("close", max_ulp=2), a, b)
    assert check_values(Check("close", max_ulp=5, min_ulp=4), a, b) is not None
    assert ulp_difference(np.array([-0.0]), np.array([0.0]))[0] == 0
    assert ulp_difference(np.array([np.nan]), np.array([-np.nan]))[0] == 0
    smallest = np.array([np.nextafter(0, 1)])
    assert ulp_difference(-smallest, smallest)[0] == 2
    finite_max = np.array([np.finfo(np.float32).max], np.float32)
    assert ulp_difference(finite_max, np.array([np.inf], np.float32))[0] == np.inf
    assert check_values(Check("close", max_ulp=10**9), finite_max,
                        np.array([np.inf], np.float32)) is not None
    c = np.array([1 + 1j], np.complex64)
    d = np.array([1 + np.nextafter(np.float32(1), np.float32(2)) * 1j], np.complex64)
    assert ulp_difference(c, d)[0] == 1


# ------------------------------------------------------------------- end to end


def test_run_file_end_to_end(tmp_path):
    path = tmp_path / "mixed.mlir"
    path.write_text(textwrap.dedent("""
        func.func @good() {
          %x = stablehlo.constant dense<[1.0, -2.0]> : tensor<2xf32>
          %y = stablehlo.negate %x : tensor<2xf32>
          %r:2 = stablehlo.optimization_barrier %x, %y : tensor<2xf32>, tensor<2xf32>
          check.expect_almost_eq_const %y, dense<[-1.0, 2.0]> : tensor<2xf32>
          check.expect_eq %r#1, %y : tensor<2xf32>
          check.expect_close %r#0, %x, max_ulp_difference = 0 : tensor<2xf32>, tensor<2xf32>
          func.return
        }

        // -----

        func.func @add_one(%a: tensor<i32>) -> tensor<i32> {
          %one = stablehlo.constant dense<1> : tensor<i32>
          %b = stablehlo.add %a, %one : tensor<i32>
          func.return %b : tensor<i32>
        }
        func.func @main() {
          %x = stablehlo.constant dense<41> : tensor<i32>
          %y = func.call @add_one(%x) : (tensor<i32>) -> tensor<i32>
          check.expect_eq_const %y, dense<42> : tensor<i32>
          func.return
        }

        // -----

        func.func @bad() {
          %x = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
          check.expect_eq_const %x, dense<[1, 3]> : tensor<2xi32>
          func.return
        }

        // -----

        func.func @skipped() {
          %x = stablehlo.constant dense<1> : tensor<i32>
          %p = interpreter.probe %x, probe_id = "x" : tensor<i32>
          func.return
        }
        """))
    results = run_file(path)
    expected = [("mixed.mlir::good", "pass"), ("mixed.mlir::main", "pass"),
                ("mixed.mlir::bad", "fail"), ("mixed.mlir::skipped", "skip")]
    assert [(r.id, r.status) for r in results] == expected
    assert "expected np.int32(3)" in results[2].message
    assert "interpreter.probe" in results[3].message
    separate = run_file(path, combine=False)
    assert [(r.id, r.status) for r in separate] == expected
