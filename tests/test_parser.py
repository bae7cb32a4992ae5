"""Tests of hlo2dace.frontend.parser: MLIR generic op form -> hlo2dace.ir."""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from hlo2dace import ir
from hlo2dace.errors import ParseError
from hlo2dace.frontend.inline import inline_calls
from hlo2dace.frontend.parser import parse_module

CONFORMANCE = Path("/work/shared/conformance/stablehlo-interpret")

# ----------------------------------------------------------------------------- helpers


def _asm(module) -> str:
    return module.operation.get_asm(print_generic_op_form=True, enable_debug_info=True)


def _lowered(f, *args) -> str:
    return _asm(jax.jit(f).lower(*args).compiler_ir("stablehlo"))


def _mlir_module(text: str, unregistered: bool = False):
    from jax._src.interpreters import mlir as jax_mlir
    from jax.extend.mlir import ir as mlir_ir

    ctx = jax_mlir.make_ir_context()
    ctx.allow_unregistered_dialects = unregistered
    return mlir_ir.Module.parse(text, context=ctx)


def _generic(pretty: str, unregistered: bool = False) -> str:
    """Pretty (or any) MLIR text -> generic form, printed by MLIR itself."""
    return _asm(_mlir_module(pretty, unregistered))


def _mlir_ops(text: str) -> list[tuple[str, list[str], list[str]]]:
    """(name, operand types, result types) of every op inside a func.func, pre-order."""
    found = []

    def walk(block):
        for op in block.operations:
            op = op.operation
            found.append((op.name, [str(v.type) for v in op.operands],
                          [str(r.type) for r in op.results]))
            for region in op.regions:
                for inner in region.blocks:
                    walk(inner)

    module = _mlir_module(text, unregistered=True)
    for fn in module.body.operations:
        if fn.operation.name == "func.func":
            for region in fn.operation.regions:
                for block in region.blocks:
                    walk(block)
    return found


def _our_ops(module: ir.Module) -> list[ir.Op]:
    return list(module.walk())


def _check_ssa(function: ir.Function) -> None:
    """Every operand names a visible value of the same type."""

    def region(reg: ir.Region, visible: dict) -> None:
        for block in reg.blocks:
            scope = dict(visible)
            scope.update((a.name, a.type) for a in block.arguments)
            for op in block.ops:
                for operand in op.operands:
                    assert operand.name in scope, (op.name, operand.name)
                    assert scope[operand.name] == operand.type, (op.name, operand)
                for inner in op.regions:
                    region(inner, scope)
                scope.update((r.name, r.type) for r in op.results)

    region(function.body, {})


def _check_against_mlir(text: str) -> ir.Module:
    module = parse_module(text)
    ours = _our_ops(module)
    theirs = _mlir_ops(text)
    assert [op.name for op in ours] == [name for name, _, _ in theirs]
    for op, (_, operand_types, result_types) in zip(ours, theirs):
        assert len(op.operands) == len(operand_types)
        assert len(op.results) == len(result_types)
        for value, printed in zip(op.operands + op.results, operand_types + result_types):
            if not (isinstance(value.type, ir.TensorType) and value.type.encoding):
                assert str(value.type) == printed
    for function in module.functions.values():
        _check_ssa(function)
        assert len(function.argument_attributes) == len(function.arguments)
        assert len(function.result_attributes) == len(function.result_types)
    return module


def _function_module(body: str, attrs: str = "", tail: str = "") -> str:
    """A generic-form module whose @main (no arguments, no results) holds ``body``."""
    return (
        '"builtin.module"() <{sym_name = "m"}> ({\n'
        '  "func.func"() <{function_type = () -> (), sym_name = "main"}> ({\n'
        f"{body}\n"
        '    "func.return"() : () -> ()\n'
        f"  }}) : () -> (){attrs}\n"
        "}) : () -> ()\n"
        f"{tail}"
    )


def _constant(dense: str, type_: str, tail: str = "") -> ir.DenseElements:
    text = _function_module(
        f'    %0 = "stablehlo.constant"() <{{value = {dense} : {type_}}}> : () -> {type_}',
        tail=tail)
    value = parse_module(text).main.ops[0].attr("value")
    assert isinstance(value, ir.DenseElements)
    assert not value.array.flags.writeable
    assert value.array.flags.c_contiguous
    return value


def _attributes(attrs: str) -> dict:
    text = _function_module(f'    "test.op"() {{{attrs}}} : () -> ()')
    return dict(parse_module(text).main.ops[0].attributes)


# ---------------------------------------------------------------------- JAX programs


def _tanh_program(x, w, b):
    return jnp.tanh(x @ w + b)


TANH_LINE = inspect.getsourcelines(_tanh_program)[1] + 1


def _nested(x):
    inner = jax.jit(lambda y: jnp.sin(y) * 2)
    return inner(x) + inner(x + 1)


def _random_normal():
    return _lowered(lambda k: jax.random.normal(k, (3,)), jax.random.key(0))


def _x64():
    with jax.enable_x64(True):
        return _lowered(lambda x: (x * np.uint64(2**40) + np.uint64(2**64 - 1),
                                   x.astype(np.int64) + np.int64(-2**63)),
                        np.ones(3, np.uint64))


def _x64_float():
    with jax.enable_x64(True):
        return _lowered(lambda x: x * 1e300 + np.nan, np.ones(3))


def _exported_symbolic():
    exported = jax.export.export(jax.jit(lambda x: jnp.sin(x).sum(axis=1) * x.shape[0]))(
        jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 4"), _F32))
    return _generic(exported.mlir_module())


_F32 = jnp.float32
_X23, _W34, _B4 = jnp.ones((2, 3), _F32), jnp.ones((3, 4), _F32), jnp.ones((4,), _F32)

PROGRAMS = {
    "mlp": lambda: _lowered(_tanh_program, _X23, _W34, _B4),
    "fori_loop": lambda: _lowered(lambda x: lax.fori_loop(0, 10, lambda i, c: c * 2.0, x), _X23),
    "switch": lambda: _lowered(
        lambda p, x: lax.switch(p, [lambda x: x + 1, lambda x: x * 2, lambda x: x - 3], x),
        1, _X23),
    "sort": lambda: _lowered(lambda x: jnp.sort(x, axis=0), _X23),
    "argmax": lambda: _lowered(lambda x: jnp.argmax(x, axis=1), _X23),
    "reduce": lambda: _lowered(lambda x: (x.sum(0), x.max(1)), _X23),
    "scatter_gather": lambda: _lowered(lambda x, i: x.at[i].add(5.0)[i + 1],
                                       jnp.ones((5, 4), _F32), jnp.array([1, 2], jnp.int32)),
    "solve": lambda: _lowered(jnp.linalg.solve, jnp.ones((3, 3), _F32), jnp.ones((3,), _F32)),
    "random": _random_normal,
    "nested_jit": lambda: _lowered(_nested, _X23),
    "complex": lambda: _lowered(lambda x: x * jnp.array([1 + 2j, 3j]), jnp.ones(2, jnp.complex64)),
    "low_precision": lambda: _lowered(
        lambda x: (x.astype(jnp.bfloat16) * 2).astype(jnp.float16).astype(jnp.int4)
        .astype(jnp.float8_e4m3fn), _X23),
    "conv": lambda: _lowered(
        lambda x, k: lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                              dimension_numbers=("NHWC", "HWIO", "NHWC")),
        jnp.ones((1, 5, 5, 2), _F32), jnp.ones((3, 3, 2, 4), _F32)),
    "large_constant": lambda: _lowered(lambda x: x + np.arange(300, dtype=np.float32),
                                       jnp.ones(300, _F32)),
    "large_bool_constant": lambda: _lowered(lambda x: x & (np.arange(200) % 3 == 0),
                                            jnp.ones(200, bool)),
    "x64": _x64,
    "x64_float": _x64_float,
    "export_symbolic": _exported_symbolic,
}


@pytest.fixture(scope="module")
def programs() -> dict[str, str]:
    return {}


def _program(cache: dict, name: str) -> str:
    if name not in cache:
        cache[name] = PROGRAMS[name]()
    return cache[name]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_jax_programs_match_mlir(programs, name):
    module = _check_against_mlir(_program(programs, name))
    assert module.main.name == "main"
    assert module.main.visibility == "public"


def test_module_and_function_fields(programs):
    module = parse_module(_program(programs, "mlp"))
    assert module.name == "jit__tanh_program"
    assert module.attributes["mhlo.num_partitions"] == 1
    main = module.main
    assert [a.name for a in main.arguments] == ["%arg0", "%arg1", "%arg2"]
    assert main.arguments[0].type == ir.TensorType((2, 3), "f32")
    assert main.result_types == (ir.TensorType((2, 4), "f32"),)
    assert main.result_attributes[0]["jax.result_info"] == "result"
    assert dict(main.argument_attributes[0]) == {}
    dot = main.ops[0]
    assert dot.name == "stablehlo.dot_general"
    numbers = dot.attr("dot_dimension_numbers")
    assert numbers == ir.StructAttr("dot", numbers.fields)
    assert numbers.get("lhs_contracting_dimensions") == (1,)
    assert numbers.get("rhs_contracting_dimensions") == (0,)
    assert dot.attr("precision_config") == (ir.EnumAttr("precision", "DEFAULT"),) * 2
    assert main.ops[-1].name == "func.return"


def test_locations_point_at_user_source(programs):
    module = parse_module(_program(programs, "mlp"))
    tanh = next(op for op in module.walk() if op.name == "stablehlo.tanh")
    assert tanh.location is not None
    assert Path(tanh.location.file).resolve() == Path(__file__).resolve()
    assert tanh.location.line == TANH_LINE
    assert tanh.location.column is not None
    assert tanh.location.name == "jit(_tanh_program)/tanh"
    dot = next(op for op in module.walk() if op.name == "stablehlo.dot_general")
    assert dot.location.line == TANH_LINE
    # `loc(unknown)` (the func.func itself here) gives None
    assert module.main.location is None


def test_private_functions_calls_and_multiple_results(programs):
    module = parse_module(_program(programs, "argmax"))
    assert module.functions["argmax"].visibility == "private"
    call = module.main.ops[0]
    assert call.name == "func.call" and call.attr("callee") == ir.SymbolRef("argmax")
    reduce = next(op for op in module.walk() if op.name == "stablehlo.reduce")
    first, second = reduce.results
    assert first.name.endswith("#0") and second.name.endswith("#1")
    assert second.type.shape == (2,) and ir.is_integer(second.type.element)
    assert len(reduce.operands) == 4 and reduce.attr("dimensions") == (1,)
    body = reduce.regions[0].entry
    assert len(body.arguments) == 4 and body.terminator.name == "stablehlo.return"
    ret = module.functions["argmax"].ops[-1]
    assert ret.operands == (second,)


def test_case_regions_without_block_headers(programs):
    module = parse_module(_program(programs, "switch"))
    case = next(op for op in module.walk() if op.name == "stablehlo.case")
    assert len(case.regions) == 3
    for region in case.regions:
        assert len(region.blocks) == 1
        assert region.entry.arguments == ()
        assert region.entry.terminator.name == "stablehlo.return"


def test_while_and_closed_call(programs):
    module = parse_module(_program(programs, "fori_loop"))
    loop = next(op for op in module.walk() if op.name == "stablehlo.while")
    assert len(loop.regions) == 2 and len(loop.results) == 2
    assert module.functions["closed_call"].visibility == "private"


def test_custom_call_attributes(programs):
    module = parse_module(_program(programs, "solve"))
    calls = [op for op in module.walk() if op.name == "stablehlo.custom_call"]
    lu = next(op for op in calls if "getrf" in op.attr("call_target_name"))
    assert lu.attr("api_version") == 1
    assert lu.attr("has_side_effect") is False
    assert lu.attr("called_computations") == ()
    alias = lu.attr("output_operand_aliases")[0]
    assert alias.name == "output_operand_alias"
    assert dict(alias.fields) == {"output_tuple_indices": (0,), "operand_index": 0,
                                  "operand_tuple_indices": ()}
    layouts = lu.attr("operand_layouts")
    assert layouts[0].type.element == "index" and list(layouts[0].array) == [0, 1]
    assert isinstance(lu.attr("sdy.sharding_rule"), ir.OpaqueAttr)
    assert lu.attr("mhlo.frontend_attributes")["num_batch_dims"] == "0"


def test_random_uses_unsigned_and_private_functions(programs):
    module = parse_module(_program(programs, "random"))
    assert len(module.functions) > 1
    elements = {v.type.element for op in module.walk() for v in op.results
                if isinstance(v.type, ir.TensorType)}
    assert "ui32" in elements


def test_conv_dimension_numbers(programs):
    module = parse_module(_program(programs, "conv"))
    conv = next(op for op in module.walk() if op.name == "stablehlo.convolution")
    numbers = conv.attr("dimension_numbers")
    assert numbers.name == "conv"
    assert dict(numbers.fields) == {
        "input_batch_dimension": 0, "input_feature_dimension": 3,
        "input_spatial_dimensions": (1, 2),
        "kernel_input_feature_dimension": 2, "kernel_output_feature_dimension": 3,
        "kernel_spatial_dimensions": (0, 1),
        "output_batch_dimension": 0, "output_feature_dimension": 3,
        "output_spatial_dimensions": (1, 2),
    }
    assert conv.attr("window_reversal") == (False, False)
    padding = conv.attr("padding")
    assert padding.array.shape == (2, 2) and padding.array.dtype == np.int64


def test_large_constants_are_hex_blobs(programs):
    module = parse_module(_program(programs, "large_constant"))
    value = next(op for op in module.walk() if op.name == "stablehlo.constant").attr("value")
    np.testing.assert_array_equal(value.array, np.arange(300, dtype=np.float32))
    module = parse_module(_program(programs, "large_bool_constant"))
    value = next(op for op in module.walk() if op.name == "stablehlo.constant").attr("value")
    np.testing.assert_array_equal(value.array, np.arange(200) % 3 == 0)


def test_x64_exact_integers(programs):
    module = parse_module(_program(programs, "x64"))
    constants = [op.attr("value").array for op in module.walk()
                 if op.name == "stablehlo.constant"]
    assert any(a.dtype == np.uint64 and int(a) == 2**64 - 1 for a in constants)
    assert any(a.dtype == np.int64 and int(a) == -2**63 for a in constants)
    assert any(int(a) == 2**40 for a in constants)
    x64_float = parse_module(_program(programs, "x64_float"))
    values = [op.attr("value").array for op in x64_float.walk()
              if op.name == "stablehlo.constant"]
    assert all(v.dtype == np.float64 for v in values)
    assert any(np.isnan(v) for v in values) and any(v == 1e300 for v in values)


def test_symbolic_shapes(programs):
    module = parse_module(_program(programs, "export_symbolic"))
    assert module.attributes["jax.uses_shape_polymorphism"] is True
    wrapped = module.functions["_wrapped_jax_export_main"]
    assert wrapped.arguments[1].type == ir.TensorType((None, 4), "f32")
    assert not wrapped.arguments[1].type.is_static
    assert wrapped.argument_attributes[0]["jax.global_constant"] == "b"
    assertion = next(op for op in module.walk() if op.attr("call_target_name") ==
                     "shape_assertion")
    assert assertion.results == () and "polymorphic" in assertion.attr("error_message")


# ------------------------------------------------------------------ pretty form input

PRETTY = r"""
module @pretty attributes {mhlo.flag} {
  func.func @main(%a: tensor<?x3xf32, #stablehlo.bounds<4, ?>>, %s: tensor<i32>)
      -> tensor<?x3xf32, #stablehlo.bounds<4, ?>> {
    %r = stablehlo.set_dimension_size %a, %s, dim = 0
        : (tensor<?x3xf32, #stablehlo.bounds<4, ?>>, tensor<i32>)
        -> tensor<?x3xf32, #stablehlo.bounds<4, ?>>
    %e = stablehlo.exponential %a {result_accuracy = #stablehlo.result_accuracy<atol = 1.0e-5,
        rtol = 0.0, ulps = 1, mode = #stablehlo.result_accuracy_mode<TOLERANCE>>}
        : tensor<?x3xf32, #stablehlo.bounds<4, ?>>
    %c = stablehlo.constant dense<(1.0, 2.0)> : tensor<2xcomplex<f64>>
    %f = stablehlo.constant dense<[0x7FC00000, 1.0]> : tensor<2xf32>
    %g = stablehlo.constant dense<0x7F> : tensor<2xf8E4M3FN>
    %h = stablehlo.constant dense<-1.5> : tensor<2xf4E2M1FN>
    %k = stablehlo.constant dense<3> : tensor<2xui2>
    %t = stablehlo.create_token : !stablehlo.token
    %tup = stablehlo.tuple %s, %t : tuple<tensor<i32>, !stablehlo.token>
    %q = "test.quantized"() : () -> tensor<1x!quant.uniform<i8:f32, 0.1:-128>>
    "test.attrs"() {x = affine_map<(d0, d1) -> (d1, d0)>, y = @a::@b, z = @"<lambda>",
        w = array<i1: true, false>, v = array<f32: 1.0, 2.5>, s = "a\"b\0A\tc",
        d = {a = 1, b}, ty = f32, tt = tensor<3xf32>, i = 0x10 : i64, ft = 1.5 : f64,
        neg = -3 : i32, fl = [1, [2, "x"]], un = unit, big = 18446744073709551615 : ui64,
        fun = (f32, i32) -> (), nan = 0x7FC00000 : f32} : () -> ()
    return %r : tensor<?x3xf32, #stablehlo.bounds<4, ?>>
  }
}
"""


@pytest.fixture(scope="module")
def pretty() -> ir.Module:
    return _check_against_mlir(_generic(PRETTY, unregistered=True))


def test_pretty_bounds_and_result_accuracy(pretty):
    main = pretty.main
    bounded = main.arguments[0].type
    assert bounded.shape == (None, 3)
    assert bounded.encoding == ir.StructAttr("bounds", bounded.encoding.fields)
    assert bounded.encoding.get("bounds") == (4, None)
    assert pretty.attributes["mhlo.flag"] is True  # a unit attribute
    accuracy = main.ops[1].attr("result_accuracy")
    assert accuracy.name == "result_accuracy"
    assert accuracy.get("ulps") == 1 and accuracy.get("atol") == pytest.approx(1e-5)
    assert accuracy.get("mode") == ir.EnumAttr("result_accuracy_mode", "TOLERANCE")


def test_pretty_constants(pretty):
    values = [op.attr("value") for op in pretty.main.ops if op.name == "stablehlo.constant"]
    cplx, nan_and_one, f8, f4, ui2 = values
    np.testing.assert_array_equal(cplx.array, np.array([1 + 2j, 1 + 2j], np.complex128))
    assert np.isnan(nan_and_one.array[0]) and nan_and_one.array[1] == 1.0
    assert nan_and_one.array.view(np.uint32)[0] == 0x7FC00000
    assert f8.array.dtype == ml_dtypes.float8_e4m3fn and np.isnan(f8.array.astype(np.float32)).all()
    assert f4.array.dtype == ml_dtypes.float4_e2m1fn and list(f4.array.astype(float)) == [-1.5] * 2
    assert ui2.array.dtype == ml_dtypes.uint2 and list(ui2.array.astype(int)) == [3, 3]


def test_pretty_types_and_attributes(pretty):
    ops = {op.name: op for op in pretty.main.ops}
    assert ops["stablehlo.create_token"].result.type == ir.TokenType()
    assert ops["stablehlo.tuple"].result.type == ir.TupleType(
        (ir.TensorType((), "i32"), ir.TokenType()))
    quantized = ops["test.quantized"].result.type
    assert quantized.shape == (1,) and quantized.element.startswith("!quant.uniform<i8:f32")
    attrs = ops["test.attrs"].attributes
    assert isinstance(attrs["x"], ir.OpaqueAttr) and attrs["x"].text.startswith("affine_map<")
    assert attrs["y"] == ir.SymbolRef("a::@b")
    assert attrs["z"] == ir.SymbolRef("<lambda>")
    assert attrs["w"] == (True, False) and attrs["v"] == (1.0, 2.5)
    assert attrs["s"] == 'a"b\n\tc'
    assert dict(attrs["d"]) == {"a": 1, "b": True}
    assert attrs["ty"] == ir.OpaqueType("f32")
    assert attrs["tt"] == ir.TensorType((3,), "f32")
    assert attrs["i"] == 16 and attrs["ft"] == 1.5 and attrs["neg"] == -3
    assert attrs["fl"] == (1, (2, "x")) and attrs["un"] is True
    assert attrs["big"] == 2**64 - 1
    assert attrs["fun"] == ir.FunctionType((ir.OpaqueType("f32"), ir.OpaqueType("i32")), ())
    assert np.isnan(attrs["nan"])


CONFORMANCE_FILES = ["add.mlir", "constant.mlir", "while.mlir", "reduce_window.mlir",
                     "convert.mlir", "fft.mlir", "case.mlir", "composite.mlir"]


@pytest.mark.parametrize("name", CONFORMANCE_FILES)
def test_conformance_files(name):
    path = CONFORMANCE / name
    if not path.exists():
        pytest.skip(f"{path} is not available")
    source = "\n".join(line for line in path.read_text().splitlines() if "check." not in line)
    parsed = 0
    for chunk in source.split("// -----"):
        try:
            text = _generic(chunk)
        except Exception:  # a chunk MLIR itself rejects without its check ops
            continue
        _check_against_mlir(text)
        parsed += 1
    assert parsed


# ------------------------------------------------------------------- attribute forms


def test_dense_literal_forms():
    v = _constant("dense<[[1, 2, 3], [4, 5, 6]]>", "tensor<2x3xi32>")
    assert v.array.dtype == np.int32 and v.array.tolist() == [[1, 2, 3], [4, 5, 6]]
    v = _constant("dense<1.000000e+00>", "tensor<2x3xf32>")  # splat
    assert v.array.shape == (2, 3) and (v.array == 1).all() and v.is_splat
    v = _constant("dense<[true, false]>", "tensor<2xi1>")
    assert v.array.dtype == np.bool_ and v.array.tolist() == [True, False]
    v = _constant("dense<true>", "tensor<i1>")
    assert v.array.shape == () and bool(v.array)
    v = _constant("dense<[(1.0,2.0), (0.0,-3.5)]>", "tensor<2xcomplex<f32>>")
    assert v.array.dtype == np.complex64 and v.array.tolist() == [1 + 2j, -3.5j]
    v = _constant("dense<(0x7FF0000000000001,0.000000e+00)>", "tensor<complex<f64>>")
    assert np.isnan(v.array.real) and v.array.real.view(np.uint64) == 0x7FF0000000000001
    v = _constant("dense<[18446744073709551615, 0]>", "tensor<2xui64>")
    assert v.array.dtype == np.uint64 and int(v.array[0]) == 2**64 - 1
    v = _constant("dense<[-9223372036854775808, 9223372036854775807]>", "tensor<2xi64>")
    assert [int(x) for x in v.array] == [-2**63, 2**63 - 1]
    v = _constant("dense<>", "tensor<0x3xf32>")
    assert v.array.shape == (0, 3)
    v = _constant("dense<[1, 2, 3]>", "tensor<3xindex>")
    assert v.array.dtype == np.int64


def test_dense_hex_nan_and_inf():
    v = _constant("dense<0x7FC00000>", "tensor<f32>")
    assert np.isnan(v.array) and v.array.view(np.uint32) == 0x7FC00000
    v = _constant("dense<0xFF80>", "tensor<4xbf16>")
    assert v.array.dtype == ml_dtypes.bfloat16
    assert (v.array.astype(np.float32) == -np.inf).all()
    assert (v.array.view(np.uint16) == 0xFF80).all()
    v = _constant("dense<[0x7FF8000000000001, -1.000000e+00]>", "tensor<2xf64>")
    assert v.array.view(np.uint64)[0] == 0x7FF8000000000001 and v.array[1] == -1.0
    v = _constant("dense<0x7E00>", "tensor<f16>")
    assert np.isnan(v.array) and v.array.view(np.uint16) == 0x7E00


def test_dense_hex_blobs():
    v = _constant('dense<"0x0000803F00000040">', "tensor<2xf32>")
    assert v.array.tolist() == [1.0, 2.0]
    v = _constant('dense<"0x0000803F">', "tensor<3xf32>")  # a splat blob: one element
    assert v.array.tolist() == [1.0, 1.0, 1.0]
    v = _constant('dense<"0x010001">', "tensor<3xi1>")  # one byte per i1
    assert v.array.tolist() == [True, False, True]
    v = _constant('dense<"0x0F0801">', "tensor<3xi4>")  # one byte per i4
    assert v.array.dtype == ml_dtypes.int4 and v.array.astype(int).tolist() == [-1, -8, 1]
    v = _constant('dense<"0x0000803F000000400000404000008040">', "tensor<2xcomplex<f32>>")
    assert v.array.tolist() == [1 + 2j, 3 + 4j]


def test_dense_resource():
    tail = ("{-#\n  dialect_resources: {\n    builtin: {\n"
            '      blob1: "0x040000000000803F0000004000004040"\n    }\n  }\n#-}\n')
    v = _constant("dense_resource<blob1>", "tensor<3xf32>", tail=tail)
    assert v.array.tolist() == [1.0, 2.0, 3.0]


def test_low_precision_dtypes():
    cases = {
        "bf16": ml_dtypes.bfloat16, "f16": np.float16, "f8E4M3FN": ml_dtypes.float8_e4m3fn,
        "f8E5M2": ml_dtypes.float8_e5m2, "i4": ml_dtypes.int4, "ui4": ml_dtypes.uint4,
        "i2": ml_dtypes.int2, "ui2": ml_dtypes.uint2, "ui8": np.uint8, "i16": np.int16,
    }
    for element, dtype in cases.items():
        literal = "[1.000000e+00, 2.000000e+00]" if element.startswith(("f", "bf")) else "[1, 1]"
        v = _constant(f"dense<{literal}>", f"tensor<2x{element}>")
        assert v.array.dtype == np.dtype(dtype), element
        assert v.type.element == element
    v = _constant("dense<[-2, 1]>", "tensor<2xi2>")
    assert v.array.astype(int).tolist() == [-2, 1]


def test_array_and_scalar_attributes():
    attrs = _attributes(
        "a = array<i64: 1, -2>, b = array<i64>, c = array<i1: true, false>, "
        "d = array<f32: 1.500000e+00, 0x7FC00000>, e = 5 : i32, f = -7, g = 0x10 : i64, "
        "h = 2.500000e-01 : f32, i = 0x7FC00000 : f32, j = true, k = false, l = \"x\\\"y\\0A\", "
        "m = [], n = [1, [2]], o = unit")
    assert attrs["a"] == (1, -2) and attrs["b"] == () and attrs["c"] == (True, False)
    assert attrs["d"][0] == 1.5 and np.isnan(attrs["d"][1])
    assert attrs["e"] == 5 and attrs["f"] == -7 and attrs["g"] == 16
    assert attrs["h"] == 0.25 and np.isnan(attrs["i"])
    assert attrs["j"] is True and attrs["k"] is False
    assert attrs["l"] == 'x"y\n'
    assert attrs["m"] == () and attrs["n"] == (1, (2,)) and attrs["o"] is True


def test_unit_attributes_dicts_and_symbols():
    attrs = _attributes('flag, "quoted key" = 1, d = {a = 1 : i64, b}, '
                        's = @main, q = @"<lambda>", n = @outer::@inner, e = {}')
    assert attrs["flag"] is True
    assert attrs["quoted key"] == 1
    assert dict(attrs["d"]) == {"a": 1, "b": True}
    assert attrs["s"] == ir.SymbolRef("main")
    assert attrs["q"] == ir.SymbolRef("<lambda>")
    assert attrs["n"] == ir.SymbolRef("outer::@inner")
    assert dict(attrs["e"]) == {}


def test_stablehlo_enums_and_structs():
    attrs = _attributes(
        "cmp = #stablehlo<comparison_direction LT>, p = [#stablehlo<precision HIGHEST>], "
        "dot = #stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], "
        "lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>, "
        "g = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], "
        "start_index_map = [0], index_vector_dim = 1>, "
        "conv = #stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>, "
        "ext = #stablehlo.type_extensions<bounds = [4, ?]>, "
        "ch = #stablehlo.channel_handle<handle = 1, type = 0>, "
        "sdy = #sdy.sharding<@mesh, [{\"x\"}, {}]>, mh = #mhlo<something odd -> here>")
    assert attrs["cmp"] == ir.EnumAttr("comparison_direction", "LT")
    assert attrs["p"] == (ir.EnumAttr("precision", "HIGHEST"),)
    dot = attrs["dot"]
    assert dot.name == "dot" and dot.get("lhs_batching_dimensions") == (0,)
    assert dot.get("rhs_contracting_dimensions") == (1,)
    assert attrs["g"].get("start_index_map") == (0,) and attrs["g"].get("index_vector_dim") == 1
    conv = attrs["conv"]
    assert conv.get("input_feature_dimension") == 1
    assert conv.get("kernel_output_feature_dimension") == 0
    assert conv.get("kernel_input_feature_dimension") == 1
    assert conv.get("output_spatial_dimensions") == (2, 3)
    assert attrs["ext"] == ir.StructAttr("type_extensions", attrs["ext"].fields)
    assert attrs["ext"].get("bounds") == (4, None)
    assert attrs["ch"].get("handle") == 1
    assert attrs["sdy"] == ir.OpaqueAttr('#sdy.sharding<@mesh, [{"x"}, {}]>')
    assert isinstance(attrs["mh"], ir.OpaqueAttr)


def test_types():
    text = _function_module(
        '    %0:3 = "test.types"() : () -> (tensor<f32>, tensor<2x?x3xbf16>, '
        "tuple<tensor<i1>, !stablehlo.token, tuple<>>)\n"
        '    %1 = "test.types2"(%0#0, %0#2) : (tensor<f32>, tuple<tensor<i1>, !stablehlo.token, '
        "tuple<>>) -> tensor<4xcomplex<f64>>\n"
        '    %2, %3:2 = "test.types3"() : () -> (index, !foo.bar<1, "x">, tensor<8xf8E4M3FNUZ>)')
    ops = parse_module(text).main.ops
    a, b, c = ops[0].results
    assert (a.name, b.name, c.name) == ("%0#0", "%0#1", "%0#2")
    assert a.type == ir.TensorType((), "f32") and a.type.rank == 0
    assert b.type == ir.TensorType((2, None, 3), "bf16")
    assert c.type == ir.TupleType((ir.TensorType((), "i1"), ir.TokenType(), ir.TupleType(())))
    assert ops[1].operands == (a, c)
    assert ops[1].result.type == ir.TensorType((4,), "complex<f64>")
    names = [v.name for v in ops[2].results]
    assert names == ["%2", "%3#0", "%3#1"]
    assert ops[2].results[0].type == ir.OpaqueType("index")
    assert ops[2].results[1].type == ir.OpaqueType('!foo.bar<1, "x">')


def test_location_aliases_and_forms():
    tail = (
        '#loc1 = loc("user.py":10:5 to :20)\n'
        '#loc2 = loc("helper"(#loc1))\n'
        '#loc3 = loc("lib.py":99:1)\n'
        "#loc4 = loc(callsite(#loc2 at #loc3))\n"
        '#loc5 = loc("jit(f)/add"(#loc4))\n'
        '#loc6 = loc(fused["only_name", "z.py":3:4 to 5:6])\n'
        "#loc7 = loc(unknown)\n"
        "#loc8 = loc(#loc9)\n"
        '#loc9 = loc("late.py":7:8)\n'
        '#loc10 = loc(fused<"meta">[#loc7, "only.py":9])\n'
    )
    body = (
        '    "test.a"() : () -> () loc(#loc5)\n'
        '    "test.b"() : () -> () loc(#loc6)\n'
        '    "test.c"() : () -> () loc(#loc7)\n'
        '    "test.d"() : () -> () loc("inline"("f.py":1:2))\n'
        '    "test.e"() : () -> () loc(callsite("callee" at "caller.py":4:5))\n'
        '    "test.f"() : () -> () loc(#loc8)\n'
        '    "test.g"() : () -> () loc("just_a_name")\n'
        '    "test.h"() : () -> () loc(#loc10)')
    ops = parse_module(_function_module(body, tail=tail)).main.ops
    assert ops[0].location == ir.Location("user.py", 10, 5, "jit(f)/add")
    assert ops[1].location == ir.Location("z.py", 3, 4, "only_name")
    assert ops[2].location is None
    assert ops[3].location == ir.Location("f.py", 1, 2, "inline")
    assert ops[4].location == ir.Location("caller.py", 4, 5, "callee")
    assert ops[5].location == ir.Location("late.py", 7, 8)
    assert ops[6].location == ir.Location(name="just_a_name")
    assert ops[7].location == ir.Location("only.py", 9, None)


def test_type_and_attribute_aliases():
    text = ("!pair = tensor<2xi32>\n#high = #stablehlo<precision HIGH>\n"
            "#map = affine_map<(d0) -> (d0)>\n" + _function_module(
                '    %0 = "stablehlo.constant"() <{value = dense<[1, 2]> : !pair}> : () -> !pair\n'
                '    "test.op"(%0) {p = #high, m = #map} : (!pair) -> ()'))
    const, use = parse_module(text).main.ops[:2]
    assert const.result.type == ir.TensorType((2,), "i32")
    assert const.attr("value").array.tolist() == [1, 2]
    assert use.operands == (const.result,)
    assert use.attr("p") == ir.EnumAttr("precision", "HIGH")
    assert use.attr("m") == ir.OpaqueAttr("affine_map<(d0) -> (d0)>")


def test_blocks_and_successors():
    text = _function_module(
        '    "test.region"() ({\n'
        "    ^bb0(%a: tensor<f32> loc(unknown)):\n"
        '      "cf.br"(%a)[^bb1] : (tensor<f32>) -> ()\n'
        "    ^bb1(%b: tensor<f32>, %c: tensor<f32>):  // a comment\n"
        '      "test.ret"(%b, %c) : (tensor<f32>, tensor<f32>) -> ()\n'
        "    }) : () -> ()")
    region = parse_module(text).main.ops[0].regions[0]
    assert len(region.blocks) == 2
    assert region.blocks[0].arguments == (ir.Value("%a", ir.TensorType((), "f32")),)
    assert [a.name for a in region.blocks[1].arguments] == ["%b", "%c"]
    assert region.blocks[1].terminator.operands == region.blocks[1].arguments


def test_module_without_wrapper_and_declarations():
    text = ('"func.func"() <{function_type = (tensor<f32>) -> tensor<f32>, sym_name = "ext", '
            'sym_visibility = "private"}> ({\n}) : () -> ()\n'
            '"func.func"() <{function_type = () -> (), sym_name = "main"}> ({\n'
            '  "func.return"() : () -> ()\n}) : () -> ()\n')
    module = parse_module(text)
    assert module.name is None and list(module.functions) == ["ext", "main"]
    ext = module.functions["ext"]
    assert ext.body.blocks == () and ext.arguments == (ir.Value("%arg0", ir.TensorType((), "f32")),)


def test_other_top_level_ops_are_skipped():
    text = ('"builtin.module"() ({\n'
            '  "sdy.mesh"() <{mesh = #sdy.mesh<["x"=1]>, sym_name = "mesh"}> : () -> ()\n'
            '  "func.func"() <{function_type = () -> (), sym_name = "main"}> ({\n'
            '    "func.return"() : () -> ()\n  }) : () -> ()\n}) : () -> ()\n')
    assert list(parse_module(text).functions) == ["main"]


# ---------------------------------------------------------------------------- errors

GOOD = _function_module(
    '    %0 = "stablehlo.constant"() <{value = dense<[1, 2]> : tensor<2xi32>}> : () -> '
    "tensor<2xi32> loc(#loc1)\n"
    '    %1 = "stablehlo.add"(%0, %0) : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32> '
    "loc(#loc1)",
    tail='#loc1 = loc("f.py":1:2)\n')


def _error(text) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse_module(text)
    return info.value


def test_good_snippet_parses():
    assert len(parse_module(GOOD).main.ops) == 3


@pytest.mark.parametrize("fraction", [0.02, 0.1, 0.3, 0.5, 0.7, 0.9])
def test_truncated_text(fraction):
    error = _error(GOOD[:int(len(GOOD.split("#loc1 =")[0]) * fraction)])
    assert error.line is not None and error.column is not None
    assert "^" in error.context


def test_garbage_character():
    error = _error(GOOD.replace('"stablehlo.add"', '"stablehlo.add" $'))
    assert (error.line, error.column) == (4, 26)
    assert "unexpected character '$'" in str(error)
    assert error.context.splitlines()[1].index("^") == 25


def test_unbalanced_braces():
    error = _error(GOOD.replace('    "func.return"', '    }) "func.return"'))
    assert error.line == 5 and error.column is not None
    error = _error(GOOD.replace("}) : () -> ()\n}", "}) : () -> ()\n"))
    assert error.line is not None


@pytest.mark.parametrize("dense, message", [
    ('dense<"0x010203">', "hex blob"),
    ('dense<"0x0102030">', "odd number"),
    ('dense<"0xZZ">', "hex"),
    ("dense<[1, 2, 3]>", "3 elements"),
    ("dense<[1, 99999999999]>", "does not fit"),
])
def test_bad_dense(dense, message):
    error = _error(GOOD.replace("dense<[1, 2]>", dense))
    assert error.line == 3 and error.column == 43
    assert message in str(error)


def test_semantic_errors():
    assert "operand" in str(_error(GOOD.replace("(%0, %0)", "(%0)")))
    assert "undefined location alias" in str(_error(GOOD.replace("#loc1 =", "#loc2 =")))
    assert "element type" in str(_error(GOOD.replace("tensor<2xi32>}", "tensor<2xq32>}")))
    assert "resource" in str(_error(GOOD.replace("dense<[1, 2]>", "dense_resource<nope>")))
    error = _error('"builtin.module"() ({\n  "builtin.module"() ({\n  }) : () -> ()\n'
                   "}) : () -> ()\n")
    assert "nested" in str(error) and error.line == 2
    error = _error("#loc1 = loc(#loc2)\n#loc2 = loc(#loc1)\n" +
                   GOOD.split("#loc1 =")[0])
    assert "itself" in str(error)


@pytest.mark.parametrize("text", [None, b"bytes", 42, ["x"]])
def test_non_str_input(text):
    assert "str" in str(_error(text))


def test_empty_and_blank():
    for text in ["", "   \n  ", "// only a comment\n"]:
        error = _error(text)
        assert error.line is not None


# ------------------------------------------------------------------------ performance


def _big_module(n: int) -> str:
    lines = ['"builtin.module"() <{sym_name = "big"}> ({',
             '  "func.func"() <{function_type = (tensor<4x4xf32>) -> tensor<4x4xf32>, '
             'sym_name = "main"}> ({',
             '  ^bb0(%arg0: tensor<4x4xf32> loc("x")):']
    prev = "%arg0"
    for i in range(n):
        if i % 5 == 0:
            lines.append(f'    %{i} = "stablehlo.constant"() <{{value = dense<{i}.5> : '
                         f"tensor<4x4xf32>}}> : () -> tensor<4x4xf32> loc(#loc{i % 40 + 1})")
        else:
            lines.append(f'    %{i} = "stablehlo.add"({prev}, %arg0) : (tensor<4x4xf32>, '
                         f"tensor<4x4xf32>) -> tensor<4x4xf32> loc(#loc{i % 40 + 1})")
        prev = f"%{i}"
    lines += [f'    "func.return"({prev}) : (tensor<4x4xf32>) -> () loc(unknown)',
              "  }) : () -> () loc(unknown)", "}) : () -> () loc(unknown)"]
    lines += [f'#loc{i} = loc("jit(f)/op{i}"("big.py":{i}:1))' for i in range(1, 41)]
    return "\n".join(lines) + "\n"


def test_ten_thousand_ops_parse_quickly():
    text = _big_module(10_000)
    parse_module(_big_module(10))  # the grammar is built once, outside the timing
    start = time.perf_counter()
    module = parse_module(text)
    elapsed = time.perf_counter() - start
    assert len(module.main.ops) == 10_001
    assert module.main.ops[7].location == ir.Location("big.py", 8, 1, "jit(f)/op8")
    assert elapsed < 20, f"{elapsed:.1f} s for 10,000 ops"


def test_parser_tables_are_kept_in_the_private_folder(tmp_path, monkeypatch):
    """The parser's tables are computed once per grammar and kept where only the user can
    write (a pickle), and a parser built from them reads programs as a fresh one does."""
    from hlo2dace import folders
    from hlo2dace.frontend import parser

    monkeypatch.setattr(folders, "native_dir", lambda: tmp_path)
    text = _lowered(lambda x: jnp.sin(x) * 2, np.ones(3, np.float32))
    expected = repr(parse_module(text))  # the IR compares by value in its printed form
    monkeypatch.setattr(parser, "_parser", None)  # built again, and its tables kept
    assert repr(parse_module(text)) == expected
    kept, = tmp_path.glob("stablehlo-*.lark")
    stamp = kept.stat().st_mtime_ns
    monkeypatch.setattr(parser, "_parser", None)  # built from the kept tables
    assert repr(parse_module(text)) == expected
    assert kept.stat().st_mtime_ns == stamp  # read, not written again


# ----------------------------------------------------------------------------- calls inlined


def test_calls_are_inlined_with_names_of_their_own():
    """JAX calls a jitted helper for every ``jnp.where``: each call site, in loops and in
    helpers too, becomes the callee's ops under fresh names, and what read a call's result
    reads the callee's."""
    def clipped(x):
        return jnp.where(x > 0, x, 0.0)

    def f(x):
        def body(i, c):
            return clipped(c) * 2 + jnp.where(c < 1, c, 1.0)
        return lax.fori_loop(0, 3, body, x), jnp.where(x > 0, x, -x), jax.jit(clipped)(x)

    x = np.linspace(-1, 1, 8, dtype=np.float32)
    module = parse_module(_lowered(f, x))
    assert any(op.name == "func.call" for op in module.main.ops for op in op.walk())
    inlined = inline_calls(module)
    ops = [inner for op in inlined.main.ops for inner in op.walk()]
    assert not [op for op in ops if op.name in ("func.call", "stablehlo.call")]
    defined = [r.name for op in ops for r in op.results] + [
        a.name for op in ops for region in op.regions for block in region.blocks
        for a in block.arguments]
    assert len(defined) == len(set(defined)), "every inlined value has a name of its own"
    defined = set(defined) | {a.name for a in inlined.main.arguments}
    assert all(v.name in defined for op in ops for v in op.operands), "no dangling reads"
    assert sum(op.name == "stablehlo.select" for op in ops) == 4


def test_calls_and_ops_that_compute_the_same_values_are_inlined_once():
    """Two histograms of one array search it among the same edges: after inlining, the
    second search (a jitted ``searchsorted`` holding a while loop) and the ops between the
    two calls are the first's, as XLA's CSE leaves them; XLA's results."""
    from hlo2dace.frontend.normalize import normalize

    from util import assert_matches_jax

    def f(r, d):
        return jnp.histogram(r, 10)[0] / jnp.histogram(r, 10, weights=d)[0]

    rng = np.random.default_rng(0)
    r, d = rng.random(500), rng.random(500)
    module = parse_module(normalize(_lowered(f, r, d)).text)
    calls = [op for op in module.main.ops if op.name == "func.call"
             and op.attr("callee").name == "searchsorted"]
    assert len(calls) == 2
    ops = [inner for op in inline_calls(module).main.ops for inner in op.walk()]
    assert sum(op.name == "stablehlo.while" for op in ops) == 1
    assert_matches_jax(f, r, d)


def test_calls_with_effects_are_inlined_at_every_call():
    from hlo2dace.frontend.normalize import normalize

    text = """
func.func @main(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %0 = func.call @noisy(%x) : (tensor<3xf32>) -> tensor<3xf32>
  %1 = func.call @noisy(%x) : (tensor<3xf32>) -> tensor<3xf32>
  %2 = func.call @quiet(%x) : (tensor<3xf32>) -> tensor<3xf32>
  %3 = func.call @quiet(%x) : (tensor<3xf32>) -> tensor<3xf32>
  %4 = stablehlo.add %0, %1 : tensor<3xf32>
  %5 = stablehlo.add %2, %3 : tensor<3xf32>
  return %4, %5 : tensor<3xf32>, tensor<3xf32>
}
func.func private @noisy(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @log_it(%x) {has_side_effect = true} : (tensor<3xf32>) -> tensor<3xf32>
  %1 = stablehlo.exponential %0 : tensor<3xf32>
  return %1 : tensor<3xf32>
}
func.func private @quiet(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.exponential %x : tensor<3xf32>
  return %0 : tensor<3xf32>
}
"""
    ops = [inner for op in inline_calls(parse_module(normalize(text).text)).main.ops
           for inner in op.walk()]
    assert sum(op.name == "stablehlo.custom_call" for op in ops) == 2
    assert sum(op.name == "stablehlo.exponential" for op in ops) == 3  # twice noisy's, once


def test_custom_calls_without_side_effects_are_merged():
    """``jnp.linalg.solve(a, b)`` and ``det(a)`` both factorise ``a`` (``lapack_sgetrf_ffi``
    in two helpers): after inlining one factorisation is left, as XLA's CSE leaves one
    (a custom call without ``has_side_effect``, attributes with dictionaries and arrays
    compared by content); XLA's results."""
    from hlo2dace.frontend.normalize import normalize

    from util import assert_matches_jax

    def f(a, b):
        return jnp.linalg.solve(a, b), jnp.linalg.det(a)

    rng = np.random.default_rng(1)
    a = (rng.standard_normal((24, 24)) / 5 + np.eye(24)).astype(np.float32)
    b = rng.standard_normal((24, 3)).astype(np.float32)
    module = inline_calls(parse_module(normalize(_lowered(f, a, b)).text))
    targets = [str(inner.attr("call_target_name")) for op in module.main.ops
               for inner in op.walk() if inner.name == "stablehlo.custom_call"]
    assert targets.count("lapack_sgetrf_ffi") == 1, targets
    assert_matches_jax(f, a, b, rtol=1e-5, atol=1e-5)


def test_ops_with_equal_regions_are_merged():
    """A helper's ``logsumexp`` and the caller's ``log_softmax`` take one row maximum
    after inlining, as XLA's CSE leaves one reduction of equal computations; reductions
    of other bodies, and conditionals whose branches read other outer values, stay apart;
    XLA's results."""
    from hlo2dace.frontend.normalize import normalize

    from util import assert_matches_jax

    def f(x, p):
        picked = jnp.take_along_axis(jax.nn.log_softmax(x, -1), jnp.zeros((8, 1), int), -1)
        branch = lax.cond(p, lambda: x * 2, lambda: x * 3)
        again = lax.cond(p, lambda: x * 2, lambda: x * 3)
        y = x + 1  # read by the branch as an outer value, as x is by the others
        other = lax.cond(p, lambda: y * 2, lambda: x * 3)
        return (jax.scipy.special.logsumexp(x, -1), picked, x.min(-1), branch + again + other)

    x = np.random.default_rng(2).standard_normal((8, 30)).astype(np.float32)
    p = np.array(True)
    ops = [inner for op in inline_calls(parse_module(normalize(_lowered(f, x, p)).text))
           .main.ops for inner in op.walk()]

    def reductions(body):
        return sum(op.name == "stablehlo.reduce" and op.regions[0].blocks[0].ops[0].name
                   == f"stablehlo.{body}" for op in ops)

    assert (reductions("maximum"), reductions("minimum")) == (1, 1)
    assert sum(op.name == "stablehlo.case" for op in ops) == 2
    assert_matches_jax(f, x, p, rtol=1e-6)


def test_a_function_that_calls_itself_is_refused_where_it_calls():
    from hlo2dace.errors import UnsupportedError
    from hlo2dace.frontend.normalize import normalize

    text = """
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = func.call @f(%x) : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func private @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = func.call @f(%x) : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
"""
    with pytest.raises(UnsupportedError, match=r"func\.call.*:7:.*recursive call of @f"):
        inline_calls(parse_module(normalize(text).text))
