"""The public API: jit, compile_text, the Lowered/Compiled stages, errors."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlo2dace
from hlo2dace import ArgumentError, ParseError, UnsupportedError, runtime

from util import assert_arrays_match, assert_matches_jax


def seed(x, w, b):
    return jnp.tanh(jnp.dot(x, w) + b)


@pytest.fixture(scope="module")
def seed_args():
    rng = np.random.default_rng(1)
    return (rng.standard_normal((64, 32), dtype=np.float32),
            rng.standard_normal((32, 16), dtype=np.float32),
            rng.standard_normal(16, dtype=np.float32))


def test_seed_example_matches_xla(seed_args):
    assert_matches_jax(seed, *seed_args, ulp=8, rtol=1e-5, atol=1e-5)


def test_pytrees_in_and_out():
    def f(params, x, *, scale):
        h = params["w"] * x + params["b"]
        return {"h": h, "stats": (h[0], scale * x)}

    params = {"w": np.arange(4.0), "b": np.ones(4)}
    x = np.linspace(-1, 1, 4)
    out = assert_matches_jax(f, params, x, scale=2.0)
    assert set(out) == {"h", "stats"} and isinstance(out["stats"], tuple)


def test_scalars_keep_shape_and_python_scalars_are_accepted():
    f = hlo2dace.jit(lambda x, y: x * y + 1)
    out = f(np.float32(3.0), 2.0)
    assert out.shape == () and out.dtype == np.float32 and float(out) == 7.0
    out = f(3, 4)
    assert out.shape == () and int(out) == 13


def test_calls_with_scalars_take_the_short_path(monkeypatch):
    """Arrays, NumPy scalars and Python scalars as positional arguments key the cache as
    they are, with no pytree flattened, and 0-d values reach the compiled code without a
    conversion: per-call work of a scalar loop (a Collatz ``while_loop``). Results and
    weak types are jax.jit's."""
    def fun(n, x, scale):
        return n * 2 + 1, x * scale, scale

    def refuse(*args, **kwargs):
        raise AssertionError("not on a call with a known signature")

    g = hlo2dace.jit(fun)
    g(np.int32(7), np.arange(3, dtype=np.float32), 1.5)
    monkeypatch.setattr(jax.tree_util, "tree_flatten", refuse)
    monkeypatch.setattr(runtime.Program, "_convert", refuse)
    for args in [(np.int32(8), np.ones(3, np.float32), 2.5),
                 (np.array(-3, np.int32), np.full(3, 2, np.float32), -0.0)]:
        actual = g(*args)
        expected = jax.jit(fun)(*args)
        for a, e in zip(actual, expected):
            assert_arrays_match(np.asarray(e), np.asarray(a))
            assert a.weak_type == e.weak_type and a.shape == e.shape


def test_static_arguments_and_signature_cache():
    calls = []

    def f(x, n, *, mode):
        calls.append((n, mode))
        return x * n if mode == "mul" else x + n

    g = hlo2dace.jit(f, static_argnums=(1,), static_argnames=("mode",))
    x = np.arange(3.0)
    np.testing.assert_array_equal(g(x, 3, mode="mul"), x * 3)
    np.testing.assert_array_equal(g(x, 3, mode="add"), x + 3)
    np.testing.assert_array_equal(g(x + 1, 3, mode="mul"), (x + 1) * 3)
    assert len(calls) == 2, "a call with a known signature must not trace again"
    g(x.astype(np.float32), 3, mode="mul")
    assert len(calls) == 3, "a new dtype is a new signature"


def test_x64_mode_is_respected():
    f = hlo2dace.jit(lambda x: x * 2)
    x = np.arange(3, dtype=np.float64)
    assert f(x).dtype == np.float64
    with jax.enable_x64(False):
        y = f(np.arange(3, dtype=np.float32))
        assert y.dtype == np.float32
        assert f(1.5).dtype == np.float32
        # as jax.jit does, 64-bit NumPy arrays are taken as 32-bit ones
        np.testing.assert_array_equal(f(np.arange(3.0)), jax.jit(lambda x: x * 2)(np.arange(3.0)))


def test_results_are_jax_arrays():
    out = hlo2dace.jit(lambda x: (x + 1, x * 2))(np.ones(3))
    assert all(isinstance(o, jax.Array) for o in out)


def test_weak_types_match_jax_jit():
    """Results carry the lowering's avals: a Python-scalar result stays weakly typed."""
    fun = lambda x: (x * 2, 3.0)  # noqa: E731
    expected, actual = jax.jit(fun)(np.float32(1.5)), hlo2dace.jit(fun)(np.float32(1.5))
    assert [a.weak_type for a in actual] == [e.weak_type for e in expected]


def test_prepared_call_path_gives_fresh_results():
    """After the first call the library is called directly (no DaCe marshalling); every
    call returns new arrays, large ones wrapped as jax.Arrays without a copy."""
    fun = hlo2dace.jit(lambda x: (x + 1.0, x[:3] * 2.0))
    x = np.arange(1 << 16, dtype=np.float32)
    first = fun(x)
    program = fun.lower(x).compile().program
    assert program._slots and all(isinstance(s, int) for s in program._slots)
    second = fun(x + 1.0)
    np.testing.assert_array_equal(first[0], x + 1.0)
    np.testing.assert_array_equal(second[0], x + 2.0)
    np.testing.assert_array_equal(first[1], x[:3] * 2.0)
    assert first[0].unsafe_buffer_pointer() != second[0].unsafe_buffer_pointer()
    assert first[0].unsafe_buffer_pointer() % 64 == 0


@pytest.mark.parametrize("native", [True, False], ids=["c-call", "ctypes"])
def test_both_call_paths(native, monkeypatch):
    """The C call path (buffer protocol, jax.Arrays read in place) and the ctypes one it
    falls back to without a C compiler give the same results, with constants, 16-bit and
    0-d arguments, non-contiguous NumPy inputs and jax.Arrays."""
    from hlo2dace import callpath, runtime

    if not native:
        monkeypatch.setattr(callpath, "native", lambda: None)
    else:
        assert callpath.native() is not None, "cc and Python.h are here: it must build"
    monkeypatch.setattr(runtime.cache, "_loaded", {})  # a fresh Program, prepared anew

    def f(x, h, s):
        table = jnp.arange(12.0).reshape(3, 4) ** 2  # a non-splat constant
        return x @ table + s, h * 2

    x = np.arange(6.0).reshape(2, 3)
    h = np.arange(5, dtype=jnp.bfloat16)
    fun = hlo2dace.jit(f)
    for args in [(x, h, 1.5), (np.asfortranarray(x), h, 2.0),
                 (jnp.asarray(x), jnp.asarray(h), jnp.float32(3))]:
        expected = jax.jit(f)(*args)
        actual = fun(*args)
        for e, a in zip(expected, actual):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(e))
    program = fun.lower(x, h, 1.5).compile().program
    assert (program._native is not None) == native


@pytest.mark.parametrize("leaves", [20, 150])
def test_parameter_trees_take_the_c_call_path(leaves):
    """An optimiser step over a parameter tree passes and returns hundreds of arrays: the
    C call path takes any number of them (past 32, every call passes all its slots),
    where ctypes cost 10 us per array."""
    from hlo2dace import callpath

    def step(params, grads):
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)

    rng = np.random.default_rng(leaves)
    params = {f"w{i}": rng.standard_normal(3 + i % 5) for i in range(leaves)}
    grads = {k: rng.standard_normal(v.shape) for k, v in params.items()}
    fun = hlo2dace.jit(step)
    # XLA contracts p - 0.01 * g into a fused multiply-add, hlo2dace never does: the
    # product's own rounding, half an ULP of |0.01 g| < 0.06 (under 4e-18), or 1 ULP
    expected, actual = jax.jit(step)(params, grads), fun(params, grads)
    for k in params:
        assert_arrays_match(expected[k], actual[k], ulp=1, atol=4e-18, where=k)
    program = fun.lower(params, grads).compile().program
    assert callpath.native() is not None and program._native is not None


def test_jax_arrays_still_being_computed_are_read_when_ready():
    """jax.jit dispatches asynchronously; its result's buffer is read only once written."""
    slow = jax.jit(lambda x: jnp.sin(x) @ jnp.cos(x) + 1.0)
    double = hlo2dace.jit(lambda y: y * 2.0)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((600, 600), np.float32))
    double(slow(x))
    for _ in range(3):
        y = slow(x)
        np.testing.assert_array_equal(np.asarray(double(y)), np.asarray(y) * 2.0)


def test_lowered_stages(seed_args):
    lowered = hlo2dace.jit(seed).lower(*seed_args)
    text = lowered.as_text()
    assert '"stablehlo.dot_general"' in text and '"stablehlo.tanh"' in text
    import dace

    sdfg = lowered.as_sdfg()
    assert isinstance(sdfg, dace.SDFG)
    compiled = lowered.compile()
    assert isinstance(compiled, hlo2dace.Compiled)
    result = compiled(*seed_args)
    assert isinstance(result, jax.Array) and result.shape == (64, 16)


def test_compile_text_from_every_source():
    from jax import export
    from jaxlib.mlir.dialects import stablehlo

    def f(x, y):
        return jnp.sin(x) * y, x - y

    x, y = np.linspace(0, 1, 5, dtype=np.float32), np.full(5, 2.0, np.float32)
    lowered = jax.jit(f).lower(x, y)
    exported = export.export(jax.jit(f))(x, y)
    artifact = stablehlo.serialize_portable_artifact_str(lowered.as_text(),
                                                         stablehlo.get_current_version())
    sources = {"lowered": lowered, "pretty": lowered.as_text(),
               "generic": hlo2dace.jit(f).lower(x, y).as_text(),
               "bytecode": exported.mlir_module_serialized, "artifact": artifact,
               "exported": exported, "serialized": exported.serialize()}
    expected = jax.jit(f)(x, y)
    for name, source in sources.items():
        out = hlo2dace.compile_text(source)(x, y)
        assert isinstance(out, tuple) and len(out) == 2, name
        for e, a in zip(expected, out):
            np.testing.assert_allclose(a, e, rtol=1e-6, err_msg=name)


def test_single_result_is_an_array_not_a_tuple():
    text = jax.jit(lambda x: x + 1).lower(np.ones(2)).as_text()
    assert isinstance(hlo2dace.compile_text(text)(np.ones(2)), np.ndarray)


def test_argument_errors():
    compiled = hlo2dace.jit(lambda x, y: x + y).lower(np.ones((2, 3)), np.ones((2, 3))).compile()
    with pytest.raises(ArgumentError, match="expected 2 arguments, got 1"):
        compiled(np.ones((2, 3)))
    with pytest.raises(ArgumentError, match=r"argument 1: expected shape \(2, 3\)"):
        compiled(np.ones((2, 3)), np.ones((3, 2)))
    with pytest.raises(ArgumentError, match="argument 0: expected dtype float64, got int32"):
        compiled(np.ones((2, 3), np.int32), np.ones((2, 3)))
    assert isinstance(ArgumentError("x"), hlo2dace.Hlo2DaceError)


def test_non_contiguous_arguments_are_copied():
    f = hlo2dace.jit(lambda x: x * 2)
    base = np.arange(24.0).reshape(4, 6)
    view = base[:, ::2].T
    np.testing.assert_array_equal(f(view), view * 2)


@pytest.mark.parametrize("form", ["str", "bytes", "path"])
def test_malformed_text_is_parsed_as_text(tmp_path, form):
    """Text in any form (a str, UTF-8 bytes, a file) that is not a module: the MLIR
    parser's line and column, and the line itself; binary forms are not tried."""
    text = "// neither the word for a module nor a function\n  garbage %0 = stablehlo.add\n"
    path = tmp_path / "bad.mlir"
    path.write_text(text)
    source = {"str": text, "bytes": text.encode(), "path": path}[form]
    with pytest.raises(ParseError) as info:
        hlo2dace.compile_text(source)
    assert (info.value.line, info.value.column) == (2, 3)
    assert str(info.value).startswith("invalid StableHLO text: custom op 'garbage' is unknown")
    assert info.value.context == "  garbage %0 = stablehlo.add\n  ^"


def test_a_file_name_is_read_from_a_path_and_hinted_at_in_a_string(tmp_path):
    path = tmp_path / "neg.mlir"
    path.write_text(jax.jit(jnp.negative).lower(np.ones(3)).as_text())
    np.testing.assert_array_equal(hlo2dace.compile_text(path)(np.arange(3.0)), -np.arange(3.0))
    for name in (str(path), "model.mlir", "exports/model.bin"):
        with pytest.raises(ParseError) as info:
            hlo2dace.compile_text(name)
        assert str(info.value) == (f"{name!r} is not StableHLO text; it looks like a file "
                                   f"name: pass pathlib.Path({name!r}) to read the file")
    with pytest.raises(ParseError, match="^invalid StableHLO text: custom op 'hello'"):
        hlo2dace.compile_text("hello world")


def _print_and_double(x):
    jax.debug.print("x = {}", x)
    return x * 2


def _pure_callback(x):
    return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def _io_callback(x):
    from jax.experimental import io_callback

    return io_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


@pytest.mark.parametrize("fun, feature, advice", [
    (_print_and_double, "host callback (jax.debug.print", "outside the compiled function"),
    (_pure_callback, "jax.pure_callback", "outside the compiled function"),
    (_io_callback, "io_callback", "outside the compiled function"),
    (lambda x: jax.lax.approx_max_k(x, 2), "jax.lax.approx_max_k", "use jax.lax.top_k"),
    (lambda x: jax.lax.approx_min_k(x, 2), "approx_min_k", "top_k (of -x for the smallest)"),
])
def test_jax_features_without_a_translation_are_named(fun, feature, advice):
    """A JAX feature that lowers to a custom call hlo2dace does not compile: the message
    names the feature, where it is used and what to do, in a few lines (not the 64
    targets that are supported)."""
    with pytest.raises(UnsupportedError) as info:
        hlo2dace.jit(fun)(np.arange(4.0))
    message = str(info.value)
    assert feature in message and advice in message and "test_api.py:" in message, message
    assert info.value.supported is None and len(message) < 600


def test_approx_max_k_is_top_k_on_a_cpu():
    """What the message about approx_max_k advises gives XLA's answer on a CPU."""
    x = np.random.default_rng(0).standard_normal((3, 100))
    for expected, actual in zip(jax.jit(lambda x: jax.lax.approx_max_k(x, 5))(x),
                                hlo2dace.jit(lambda x: jax.lax.top_k(x, 5))(x)):
        np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("args, message", [
    ((np.ones((3, 15)),), "argument 0 has shape (3, 15); the specification is (b, 16)"),
    ((np.ones(3),), "argument 0 has shape (3,); the specification is (b, 16)"),
    ((np.ones((3, 16)), np.ones(2)), "called with 2 argument(s); polymorphic_shapes gives 1 "
                                     "specification(s)"),
])
def test_polymorphic_function_called_with_a_wrong_shape(args, message):
    f = hlo2dace.jit(lambda x, *rest: x.sum(0), polymorphic_shapes=["(b, 16)"])
    with pytest.raises(ArgumentError) as info:
        f(*args)
    assert str(info.value) == message


def test_parse_error_has_line_and_column():
    text = "module {\n  func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n" \
           "    %0 = stablehlo.add %a, %missing : tensor<2xf32>\n" \
           "    return %0 : tensor<2xf32>\n  }\n}\n"
    with pytest.raises(ParseError) as info:
        hlo2dace.compile_text(text)
    assert info.value.line == 3 and info.value.column is not None
    with pytest.raises(ParseError, match="not text are neither MLIR bytecode"):
        hlo2dace.compile_text(b"\x00\x01 not a module")
    with pytest.raises(ParseError):
        hlo2dace.compile_text(12345)


UNSUPPORTED = textwrap.dedent("""\
    func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
      %0 = stablehlo.custom_call @my_kernel(%a) : (tensor<4xf32>) -> tensor<4xf32> loc(#loc1)
      return %0 : tensor<4xf32>
    }
    #loc1 = loc("model.py":42:7)
    """)


def test_unsupported_op_names_op_location_and_leaves_no_cache_entry(monkeypatch, tmp_path):
    monkeypatch.setenv("HLO2DACE_CACHE_DIR", str(tmp_path))
    with pytest.raises(UnsupportedError) as info:
        hlo2dace.compile_text(UNSUPPORTED)
    message = str(info.value)
    assert "stablehlo.custom_call" in message and "model.py:42" in message
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


QUANTIZED = textwrap.dedent("""\
    func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
      %q = stablehlo.uniform_quantize %x : (tensor<4xf32>) -> tensor<4x!q>
      %y = "stablehlo.uniform_dequantize"(%q) : (tensor<4x!q>) -> tensor<4xf32>
      return %y : tensor<4xf32>
    }
    """).replace("!q", "!quant.uniform<i8:f32, 0.5:3>")


@pytest.mark.parametrize("line", [2, 3])
def test_quantized_types_are_refused_naming_op_and_line(line):
    """jaxlib 0.10.2's MLIR has no quant dialect (no dialect registration it exposes adds
    one), so `!quant.uniform` cannot even be parsed: an UnsupportedError names the op on
    the line where the type first appears, the line and column, and what to do."""
    first = QUANTIZED.splitlines()[1]
    text = QUANTIZED if line == 2 else QUANTIZED.replace(
        first, "  %q = stablehlo.add %x, %x : tensor<4xf32>")
    with pytest.raises(UnsupportedError) as info:
        hlo2dace.compile_text(text)
    message = str(info.value)
    op = "stablehlo.uniform_quantize" if line == 2 else "stablehlo.uniform_dequantize"
    assert info.value.op == op and info.value.location.line == line, message
    assert "quant dialect" in message and "stablehlo-legalize-quant-to-math" in message


def test_failed_build_leaves_no_half_written_entry(monkeypatch, tmp_path):
    from dace.codegen import compiler

    monkeypatch.setenv("HLO2DACE_CACHE_DIR", str(tmp_path))

    def broken(*args, **kwargs):
        raise RuntimeError("simulated compiler crash")

    monkeypatch.setattr(compiler, "configure_and_compile", broken)
    with pytest.raises(hlo2dace.CompilationError, match="simulated compiler crash"):
        hlo2dace.jit(lambda x: x - 1.5)(np.ones(7))
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def test_disk_cache_serves_a_new_process(tmp_path):
    script = textwrap.dedent("""
        import json, sys, time
        import numpy as np, jax.numpy as jnp, hlo2dace
        f = lambda x, y: jnp.cos(x) * y + 3.0
        x = np.linspace(0, 1, 10); y = np.arange(10.0)
        start = time.perf_counter()
        compiled = hlo2dace.jit(f).lower(x, y).compile()
        seconds = time.perf_counter() - start
        out = compiled(x, y)
        print(json.dumps({"built": compiled.program.built, "seconds": seconds,
                          "ok": bool(np.allclose(out, np.cos(x) * y + 3.0))}))
    """)
    env = dict(os.environ, HLO2DACE_CACHE_DIR=str(tmp_path), JAX_ENABLE_X64="1")
    runs = [json.loads(subprocess.run([sys.executable, "-c", script], env=env, check=True,
                                      capture_output=True, text=True).stdout.splitlines()[-1])
            for _ in range(2)]
    assert runs[0]["built"] and not runs[1]["built"]
    assert runs[0]["ok"] and runs[1]["ok"]


def test_calls_from_several_threads():
    """Persistent transients are shared by the calls of one program: calls from several
    threads at once must still each get their own correct result."""
    from concurrent.futures import ThreadPoolExecutor

    f = hlo2dace.jit(lambda x, w: jnp.tanh(x @ w) * 2.0 + x)
    w = np.eye(16) * 0.5
    inputs = [np.full((16, 16), float(i)) for i in range(16)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda x: np.asarray(f(x, w)), inputs))
    for x, result in zip(inputs, results):
        np.testing.assert_allclose(result, np.tanh(x @ w) * 2.0 + x, rtol=1e-12)


# ------------------------------------------------------- stages shaped like jax.stages


def _layer(params, x, n, *, scale):
    h = jnp.tanh(x @ params["w"] + params["b"]) * n
    return {"h": h, "stats": (h.sum() * scale, h.max())}


def _layer_args():
    rng = np.random.default_rng(7)
    return ({"w": rng.standard_normal((6, 4)), "b": rng.standard_normal(4)},
            rng.standard_normal((5, 6)))


def _assert_same_tree(actual, expected):
    assert jax.tree_util.tree_structure(actual) == jax.tree_util.tree_structure(expected)
    for a, e in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected)):
        assert isinstance(a, jax.Array) and a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-12, atol=1e-12)


def test_compiled_is_called_as_the_jitted_function():
    """``lower(...).compile()`` takes the function's pytree, its static arguments (or, as
    ``jax.stages.Compiled``, none of them) and returns jax.Arrays in its structure."""
    params, x = _layer_args()
    options = dict(static_argnums=2, static_argnames="scale")
    expected = jax.jit(_layer, **options)(params, x, 3, scale=0.5)
    lowered = hlo2dace.jit(_layer, **options).lower(params, x, 3, scale=0.5)
    jax_lowered = jax.jit(_layer, **options).lower(params, x, 3, scale=0.5)
    assert lowered.in_tree == jax_lowered.in_tree and lowered.out_tree == jax_lowered.out_tree
    assert lowered.out_info == jax.tree_util.tree_map(
        lambda o: jax.ShapeDtypeStruct(o.shape, o.dtype), jax_lowered.out_info)
    compiled = lowered.compile()
    _assert_same_tree(compiled(params, x), expected)  # as jax.stages.Compiled
    _assert_same_tree(compiled(params, x, 3, scale=0.5), expected)  # as the function
    assert compiled.out_info == lowered.out_info and compiled.in_tree == lowered.in_tree
    with pytest.raises(ArgumentError, match=r"compiled for the static arguments \(2: 3, "
                                            r"scale=0.5\), called with \(2: 4, scale=0.5\)"):
        compiled(params, x, 4, scale=0.5)
    with pytest.raises(ArgumentError, match="do not match those this program was compiled"):
        compiled(x, params)


def test_compile_text_of_a_lowering_or_an_export_keeps_the_functions_structure(tmp_path):
    params, x = _layer_args()
    options = dict(static_argnums=2, static_argnames="scale")
    jitted = jax.jit(_layer, **options)
    expected = jitted(params, x, 3, scale=0.5)
    lowered = jitted.lower(params, x, 3, scale=0.5)
    _assert_same_tree(hlo2dace.compile_text(lowered)(params, x), expected)
    exported = jax.export.export(jitted)(params, x, 3, scale=0.5)
    _assert_same_tree(hlo2dace.compile_text(exported)(params, x), expected)
    # text has no Python signature: one array per argument in, NumPy arrays out
    flat = hlo2dace.compile_text(lowered.as_text())
    outputs = flat(params["b"], params["w"], x)
    assert isinstance(outputs, tuple) and all(isinstance(o, np.ndarray) for o in outputs)
    with pytest.raises(hlo2dace.Hlo2DaceError, match="no Python signature"):
        _ = flat.out_info


@pytest.mark.pipeline
def test_cost_analysis_counts_flops_as_xla_and_bytes_as_the_program_moves_them():
    """Flops and transcendentals as XLA counts them (a product, a convolution, a
    reduction, elementwise ops); the bytes are the fused program's: ``exp(x) * 2 + 1`` reads
    x and writes its result once, where the ops one by one would move them three times."""
    rng = np.random.default_rng(3)
    cases = {
        "layer": (lambda x, w, v: jnp.tanh(x @ w) @ v,
                  (rng.standard_normal((16, 32)), rng.standard_normal((32, 8)),
                   rng.standard_normal((8, 4)))),
        "conv": (lambda a, k: jax.lax.conv_general_dilated(a, k, (1, 1), "VALID"),
                 (rng.standard_normal((1, 2, 6, 6)), rng.standard_normal((3, 2, 3, 3)))),
        "sum": (lambda a: jnp.exp(a).sum(axis=1), (rng.standard_normal((16, 32)),)),
    }
    for name, (fun, args) in cases.items():
        ours = hlo2dace.jit(fun).lower(*args).compile().cost_analysis()
        xla = jax.jit(fun).lower(*args).compile().cost_analysis()
        assert ours["flops"] == xla["flops"] > 0, name
        assert ours["transcendentals"] == xla.get("transcendentals", 0.0), name
    x = rng.standard_normal(1000)
    costs = hlo2dace.jit(lambda x: jnp.exp(x) * 2 + 1).lower(x).compile().cost_analysis()
    assert costs == {"flops": 2000.0, "transcendentals": 1000.0,
                     "bytes accessed": float(2 * x.nbytes)}


def test_memory_analysis_and_the_generated_code():
    """The arguments', results' and transients' bytes: ``tanh(x @ w) @ v`` keeps its
    (16, 8) intermediate product in a transient; ``as_text`` is the C++ DaCe generated."""
    rng = np.random.default_rng(4)
    args = (rng.standard_normal((16, 32)), rng.standard_normal((32, 8)),
            rng.standard_normal((8, 4)))
    compiled = hlo2dace.jit(lambda x, w, v: jnp.tanh(x @ w) @ v).lower(*args).compile()
    memory = compiled.memory_analysis()
    assert memory.argument_size_in_bytes == sum(a.nbytes for a in args)
    assert memory.output_size_in_bytes == 16 * 4 * 8
    assert memory.temp_size_in_bytes >= 16 * 8 * 8 and memory.alias_size_in_bytes == 0
    assert memory.generated_code_size_in_bytes > 0 and memory.constant_size_in_bytes == 0
    text = compiled.as_text()
    assert "DaCe AUTO-GENERATED" in text and "__program_h2d_" in text


def test_eval_shape_trace_and_clear_cache():
    traces = []

    def f(x, n):
        traces.append(1)
        return jnp.sin(x) * n

    x = np.linspace(0, 1, 5)
    ours = hlo2dace.jit(f, static_argnums=1)
    assert ours.eval_shape(x, 2) == jax.jit(f, static_argnums=1).eval_shape(x, 2)
    traced = ours.trace(x, 2)
    assert isinstance(traced, hlo2dace.Traced) and "sin" in str(traced.jaxpr)
    assert traced.out_info == jax.ShapeDtypeStruct((5,), np.float64)
    np.testing.assert_allclose(traced.lower().compile()(x), np.sin(x) * 2, rtol=1e-15)
    ours(x, 2)
    before = len(traces)
    ours(x, 2)
    assert len(traces) == before  # compiled once, then called
    ours.clear_cache()
    ours(x, 2)
    assert len(traces) == before + 1  # traced (and compiled, from the disk cache) again


def test_keep_unused_and_inline_are_jax_jits():
    def f(x, unused):
        return x * 2

    x = np.arange(3.0)
    for options in (dict(keep_unused=False), dict(keep_unused=True, inline=True)):
        ours = hlo2dace.jit(f, **options)
        np.testing.assert_array_equal(ours(x, np.ones(7)), x * 2)
        np.testing.assert_array_equal(jax.jit(lambda x, g=ours: g(x, x) + 1)(x), x * 2 + 1)


def test_shardings_outside_an_mpi_job_give_jax_jits_results():
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((1,), ("x",))
    rows, whole = NamedSharding(mesh, P("x")), NamedSharding(mesh, P())

    def f(x):
        return x * 2, x.sum()

    x = np.arange(12.0).reshape(4, 3)
    for options in (dict(in_shardings=rows), dict(out_shardings=(rows, whole)),
                    dict(in_shardings=rows, out_shardings=(whole, whole))):
        expected = jax.jit(f, **options)(x)
        actual = hlo2dace.jit(f, **options)(x)
        for a, e in zip(actual, expected):
            assert a.sharding == e.sharding, options
            np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


def test_static_arguments_through_compare_and_under_jax_jit():
    """``compare`` takes static arguments (an hlo2dace.jit function brings its own) and
    keeps its own options from the function; a static argument that JAX traces gets one
    message naming it, as jax.jit's does."""
    def scaled(x, n):
        return x * n

    x = np.linspace(-1, 1, 6)
    report = hlo2dace.compare(scaled, x, 3, static_argnums=1, rtol=1e-9, timing_budget=0.01)
    assert report.ok and report.outputs[0].tolerance == 1e-9
    jitted = hlo2dace.jit(scaled, static_argnums=1)
    assert hlo2dace.compare(jitted, x, 3, timing_budget=0.01).ok
    with pytest.raises(ArgumentError, match="static argument 1 of `scaled` must be "
                                            "hashable.*traced by an enclosing JAX"):
        jax.jit(jitted)(x, 3)
