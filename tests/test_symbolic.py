"""Symbolic shapes (hlo2dace/symbolic.py): exported shape-polymorphic modules and
``jit(polymorphic_shapes=...)`` compile once and run at every size, checked against XLA;
ops that need static shapes specialise per shape; shape assertions fail with JAX's text."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlo2dace
from hlo2dace import cli, runtime
from hlo2dace.api import SpecialisingProgram
from hlo2dace.errors import ArgumentError, UnsupportedError

SIZES = (1, 7, 33)


def _assert_close(got, want, rtol=2e-5, atol=2e-5):
    got, want = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w)
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def _mlp(x, w1, b1, w2):
    return jnp.tanh(x @ w1 + b1) @ w2


def _mlp_weights(rng):
    return (rng.standard_normal((16, 32), dtype=np.float32),
            rng.standard_normal(32, dtype=np.float32),
            rng.standard_normal((32, 4), dtype=np.float32))


def test_exported_mlp_runs_every_batch_size_from_one_build(tmp_path, monkeypatch):
    monkeypatch.setenv("HLO2DACE_CACHE_DIR", str(tmp_path))
    builds = []
    build = runtime.build
    monkeypatch.setattr(runtime, "build", lambda *a, **k: builds.append(a[1]) or build(*a, **k))
    (b,) = jax.export.symbolic_shape("b")
    args = [jax.ShapeDtypeStruct((b, 16), jnp.float32),
            *(jax.ShapeDtypeStruct(w.shape, w.dtype)
              for w in _mlp_weights(np.random.default_rng(0)))]
    serialized = jax.export.export(jax.jit(_mlp))(*args).serialize()
    compiled = hlo2dace.compile_text(bytes(serialized))
    assert isinstance(compiled.program, runtime.SymbolicProgram)
    assert [s["name"] for s in compiled.program.symbols.symbols] == ["b"]
    rng = np.random.default_rng(1)
    weights = _mlp_weights(rng)
    for n in (1, 7, 1000):
        x = rng.standard_normal((n, 16), dtype=np.float32)
        _assert_close(compiled(x, *weights), jax.jit(_mlp)(x, *weights), rtol=1e-4, atol=1e-4)
    assert len(builds) == 1


def _fori(x):
    def body(i, carry):
        return carry * 0.5 + x[0] * i.astype(x.dtype)
    return jax.lax.fori_loop(0, x.shape[0], body, jnp.zeros_like(x[0]))


POLYMORPHIC = {
    "reduction": (lambda x: (x.sum(axis=0), x.max(axis=1), x.sum()), "(b, 5)"),
    "concatenation": (lambda x: jnp.concatenate([x, 2 * x, jnp.ones((x.shape[0], 2))],
                                                axis=1) + 1.0, "(b, 5)"),
    "concatenation_along_b": (lambda x: jnp.concatenate([x, x + 1], axis=0), "(b, 5)"),
    "reshape": (lambda x: (x.reshape(-1) * 3, x.reshape(x.shape[0], 5, 1).sum(axis=2)),
                "(b, 5)"),
    "broadcast": (lambda x: x + x.mean(axis=1, keepdims=True) * jnp.arange(5.0), "(b, 5)"),
    "iota": (lambda x: x * jnp.arange(x.shape[0], dtype=x.dtype)[:, None], "(b, 5)"),
    "fori_loop_to_b": (_fori, "(b, 5)"),
    "two_symbols": (lambda x: jnp.tanh(x).T @ x, "(b, n)"),
    "gram_matrix": (lambda x: x @ x.T, "(b, 5)"),
    "reverse": (lambda x: jnp.flip(x, axis=(0, 1)) * jnp.exp(x), "(b, 5)"),
    "batched_products": (lambda x: jnp.einsum("bi,bj->bij", x, x) @ jnp.arange(10.0)
                         .reshape(5, 2), "(b, 5)"),
}
#: products BLAS has no routine for specialise per shape
SPECIALISED = {
    "integer_products": (lambda x: (x > 0).astype(jnp.int32) @ jnp.arange(10, dtype=jnp.int32)
                         .reshape(5, 2), "(b, 5)"),
}


@pytest.mark.parametrize("name", sorted(POLYMORPHIC) + sorted(SPECIALISED))
def test_polymorphic_jit_matches_xla_at_every_size(name):
    fun, spec = POLYMORPHIC.get(name) or SPECIALISED[name]
    compiled = hlo2dace.jit(fun, polymorphic_shapes=[spec])
    rng = np.random.default_rng(2)
    for n in SIZES:
        x = rng.standard_normal((n, 5 if "n" not in spec else n + 2))
        _assert_close(compiled(x), jax.jit(fun)(x), rtol=1e-12, atol=1e-12)
    programs = {id(entry.program) for entry in compiled._polymorphic.values()}
    assert len(programs) == 1  # one program served every size
    (entry,) = compiled._polymorphic.values()
    expected = runtime.SymbolicProgram if name in POLYMORPHIC else SpecialisingProgram
    assert isinstance(entry.program, expected)


def _head(x, w1, w2):
    """Layer norm, GELU and a log-softmax classifier: reductions and broadcasts over b."""
    h = x @ w1
    h = (h - h.mean(axis=-1, keepdims=True)) / jnp.sqrt(h.var(axis=-1, keepdims=True) + 1e-5)
    logits = jax.nn.gelu(h) @ w2
    return jax.nn.log_softmax(logits, axis=-1), jnp.argmax(logits, axis=-1)


def test_polymorphic_classifier_head_stays_symbolic():
    compiled = hlo2dace.jit(_head, polymorphic_shapes=["(b, 8)", None, None])
    rng = np.random.default_rng(4)
    w1, w2 = rng.standard_normal((8, 16)), rng.standard_normal((16, 5))
    for n in SIZES:
        x = rng.standard_normal((n, 8))
        _assert_close(compiled(x, w1, w2), jax.jit(_head)(x, w1, w2), rtol=1e-10, atol=1e-10)
    (entry,) = compiled._polymorphic.values()
    assert isinstance(entry.program, runtime.SymbolicProgram)


def test_equal_dimensions_are_checked_at_call_time():
    fun = hlo2dace.jit(lambda x, y: x * y, polymorphic_shapes=["(b, 3)", "(b, 3)"])
    ones = np.ones((4, 3))
    _assert_close(fun(ones, ones), ones)
    with pytest.raises(ArgumentError, match="Found inconsistency between dimension size"):
        fun(ones, np.ones((5, 3)))


def test_ops_that_need_static_shapes_compile_per_shape():
    (b,) = jax.export.symbolic_shape("b")

    def fun(x):
        return jnp.sort(x, axis=0), x[:, :2]

    exported = jax.export.export(jax.jit(fun))(jax.ShapeDtypeStruct((b, 3), jnp.float64))
    compiled = hlo2dace.compile_text(exported)
    assert isinstance(compiled.program, SpecialisingProgram)
    assert compiled.program.arguments[0].shape == ("b", 3)
    rng = np.random.default_rng(3)
    for n in (2, 9, 2):
        x = rng.standard_normal((n, 3))
        _assert_close(compiled(x), jax.jit(fun)(x), rtol=0, atol=0)
    assert len(compiled.program._programs) == 2


@pytest.mark.parametrize("symbolic", [True, False], ids=["symbolic", "specialised"])
def test_failed_shape_assertion_gives_jaxs_message(symbolic):
    (b,) = jax.export.symbolic_shape("b")

    def fun(x):
        return x.sum(axis=0) * 2 if symbolic else x[0]

    exported = jax.export.export(jax.jit(fun))(jax.ShapeDtypeStruct((b, b), jnp.float32))
    compiled = hlo2dace.compile_text(exported.serialize())
    assert isinstance(compiled.program, SpecialisingProgram) != symbolic
    bad = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError) as expected:
        exported.call(bad)
    with pytest.raises(ArgumentError) as got:
        compiled(bad)
    assert str(got.value) == str(expected.value)
    _assert_close(compiled(np.ones((3, 3), np.float32)), fun(np.ones((3, 3), np.float32)))


def test_a_window_larger_than_its_symbolic_dimension_is_refused():
    text = """
    func.func @main(%x: tensor<?xf32>, %i: tensor<i32>) -> tensor<4xf32> {
      %0 = stablehlo.dynamic_slice %x, %i, sizes = [4] : (tensor<?xf32>, tensor<i32>)
          -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }"""
    compiled = hlo2dace.compile_text(text)
    assert isinstance(compiled.program, runtime.SymbolicProgram)
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(compiled(x, np.int32(5)), x[2:])  # start clamped
    with pytest.raises(ArgumentError, match="needs dimension 2 to hold a window of 4"):
        compiled(x[:2], np.int32(0))


def test_callees_refined_twice_keep_apart_from_other_functions():
    """``f`` called at two shapes gets a second copy, which must not replace ``f_2``."""
    text = """
    func.func @main(%x: tensor<?xf32>) -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
      %y = stablehlo.concatenate %x, %x, dim = 0 : (tensor<?xf32>, tensor<?xf32>)
          -> tensor<?xf32>
      %a = func.call @f_2(%y) : (tensor<?xf32>) -> tensor<?xf32>
      %b = func.call @f(%x) : (tensor<?xf32>) -> tensor<?xf32>
      %c = func.call @f(%y) : (tensor<?xf32>) -> tensor<?xf32>
      return %a, %b, %c : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
    }
    func.func private @f(%x: tensor<?xf32>) -> tensor<?xf32> {
      %0 = stablehlo.multiply %x, %x : tensor<?xf32>
      return %0 : tensor<?xf32>
    }
    func.func private @f_2(%x: tensor<?xf32>) -> tensor<?xf32> {
      %0 = stablehlo.add %x, %x : tensor<?xf32>
      return %0 : tensor<?xf32>
    }"""
    x = np.array([1, 2, 3], np.float32)
    y = np.concatenate([x, x])
    a, b, c = hlo2dace.compile_text(text)(x)
    np.testing.assert_array_equal(a, y + y)
    np.testing.assert_array_equal(b, x * x)
    np.testing.assert_array_equal(c, y * y)


def test_symbolic_program_through_ctypes(monkeypatch):
    """Without the C call path, symbols go to the entry point through ctypes."""
    monkeypatch.setattr(runtime.program.callpath, "native", lambda: None)
    compiled = hlo2dace.jit(lambda x: jnp.cos(x) * 3 - 1, polymorphic_shapes=["(b, 2)"])
    for n in (3, 8):
        x = np.linspace(-1, 1, 2 * n).reshape(n, 2)
        _assert_close(compiled(x), np.cos(x) * 3 - 1, rtol=1e-14, atol=1e-14)
    (entry,) = compiled._polymorphic.values()
    assert entry.program._native is None and entry.program._slots


def test_multi_platform_export_runs_its_cpu_variant():
    def fun(x):
        return jnp.sin(x) * 2

    exported = jax.export.export(jax.jit(fun), platforms=("cuda", "cpu"))(
        jax.ShapeDtypeStruct((5,), jnp.float32))
    x = np.linspace(-3, 3, 5, dtype=np.float32)
    _assert_close(hlo2dace.compile_text(exported.serialize())(x), jax.jit(fun)(x))


def test_tokens_are_threaded_and_not_passed():
    text = """
    func.func @main(%t: !stablehlo.token, %x: tensor<4xf32>) -> (!stablehlo.token,
                                                                  tensor<4xf32>) {
      %t2 = stablehlo.after_all %t : !stablehlo.token
      %t3 = stablehlo.create_token : !stablehlo.token
      %t4 = stablehlo.after_all %t2, %t3 : !stablehlo.token
      %y = stablehlo.add %x, %x : tensor<4xf32>
      return %t4, %y : !stablehlo.token, tensor<4xf32>
    }"""
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(hlo2dace.compile_text(text)(x), 2 * x)


def test_unsupported_op_is_reported_at_the_python_line():
    def fun(x):
        return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)  # HERE

    line = next(i for i, text in enumerate(open(__file__), 1) if text.rstrip().endswith("# HERE"))
    with pytest.raises(UnsupportedError, match=rf"test_symbolic\.py:{line}"):
        hlo2dace.jit(fun)(np.ones(3))


def test_sdfg_tasklets_carry_the_python_lines():
    def fun(x):  # (y returned too: else the sort computes it, in its own tasklet)
        y = jnp.tanh(x)  # LINE-A
        return jnp.sort(y), y  # LINE-B

    lines = {text.rstrip()[-6:]: i for i, text in enumerate(open(__file__), 1)
             if text.rstrip().endswith(("# LINE-A", "# LINE-B"))}
    sdfg = hlo2dace.jit(fun).lower(np.ones(4)).as_sdfg()
    found = {(node.debuginfo.filename, node.debuginfo.start_line)
             for node, _ in sdfg.all_nodes_recursive()
             if getattr(node, "debuginfo", None) is not None}
    for line in lines.values():
        assert (__file__, line) in found


def test_cli_runs_and_compares_an_exported_file_at_given_sizes(tmp_path, capsys):
    (b,) = jax.export.symbolic_shape("b")
    weights = _mlp_weights(np.random.default_rng(0))
    exported = jax.export.export(jax.jit(_mlp))(
        jax.ShapeDtypeStruct((b, 16), jnp.float32),
        *(jax.ShapeDtypeStruct(w.shape, w.dtype) for w in weights))
    model = tmp_path / "model.bin"
    model.write_bytes(exported.serialize())
    assert cli.main(["compare", str(model), "--shape", "b=9", "--rtol", "1e-4",
                     "--atol", "1e-4"]) == 0
    assert "(9, 4)" in capsys.readouterr().out
    assert cli.main(["run", str(model), "--shape", "b=2"]) == 0
    assert "float32[2, 4]" in capsys.readouterr().out
    assert cli.main(["run", str(model)]) == 2  # sizes needed for random inputs
    assert "--shape b=" in capsys.readouterr().err
    assert cli.main(["convert", str(model), "--shape", "b=3", "-o",
                     str(tmp_path / "m.sdfgz")]) == 0
    assert (tmp_path / "m.sdfgz").is_file()
