"""A user's SDFG run as the JAX function: ``hlo2dace.jit(f, transform=fn)``,
``Lowered.compile(sdfg=...)`` and ``hlo2dace.load``, with everything a compiled function
has (pytrees, jax.Array results, jax.jit, grad, the disk cache, compare, profile), and
clear errors for an SDFG that no longer matches its module (``hlo2dace/user_sdfg.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import dace
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dace.transformation.dataflow import MapTiling

import hlo2dace
from hlo2dace import TransformationError

from util import assert_arrays_match

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


def _match(expected, actual, **tolerance) -> None:
    """Every leaf of the pytree ``actual`` as the same leaf of ``expected``."""
    assert jax.tree_util.tree_structure(expected) == jax.tree_util.tree_structure(actual)
    for e, a in zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(actual)):
        assert_arrays_match(np.asarray(e), np.asarray(a), **tolerance)


def _maps(sdfg) -> int:
    return sum(isinstance(n, dace.nodes.MapEntry) for n, _ in sdfg.all_nodes_recursive())


def _tiler(size: int, seen: list | None = None):
    """A transformation: the first map that MapTiling matches, tiled by ``size``."""

    def tile(sdfg):
        before = _maps(sdfg)
        applied = sdfg.apply_transformations(MapTiling, options={"tile_sizes": (size,)})
        if seen is not None:
            seen.append((before, applied))

    return tile


def _model(params, x):
    return {"y": jnp.tanh(x @ params["w"] + params["b"]), "total": jnp.sum(x * 2.0)}


@pytest.fixture
def inputs():
    rng = np.random.default_rng(0)
    return ({"w": rng.standard_normal((24, 16)), "b": rng.standard_normal(16)},
            rng.standard_normal((8, 24)))


def test_a_transformed_pytree_function_runs_as_the_jax_function(inputs):
    seen = []
    model = hlo2dace.jit(_model, transform=_tiler(8, seen))
    out = model(*inputs)
    assert seen and seen[0][1] == 1, seen  # one map tiled
    assert isinstance(out["y"], jax.Array) and isinstance(out["total"], jax.Array)
    _match(jax.jit(_model)(*inputs), out, rtol=1e-12, atol=1e-14)
    sdfg = model.lower(*inputs).as_sdfg()
    assert _maps(sdfg) == seen[0][0] + 1  # the tile loop around the map it tiled


def test_inside_jax_jit_and_under_grad_every_program_is_transformed(inputs):
    seen = []
    model = hlo2dace.jit(_model, transform=_tiler(4, seen))
    params, x = inputs

    def loss(params, x):
        return model(params, x)["y"].sum() + model(params, x)["total"]

    def reference(params, x):
        out = _model(params, x)
        return out["y"].sum() + out["total"]

    _match(jax.jit(reference)(params, x), jax.jit(loss)(params, x), rtol=1e-13)
    grads = jax.jit(jax.grad(loss))(params, x)
    _match(jax.grad(reference)(params, x), grads, rtol=1e-12)
    assert len(seen) >= 2  # the function and its derivative's programs


def test_the_cache_is_keyed_by_the_transformed_sdfg(inputs):
    def fresh(params, x):  # a module of its own: nothing of the suite's cache matches it
        return jnp.sin(x * 0.123456789) @ params["w"]

    first = hlo2dace.jit(fresh, transform=_tiler(8)).lower(*inputs).compile()
    again = hlo2dace.jit(fresh, transform=_tiler(8)).lower(*inputs).compile()
    other = hlo2dace.jit(fresh, transform=_tiler(2)).lower(*inputs).compile()
    plain = hlo2dace.jit(fresh).lower(*inputs).compile()
    assert again.built is False and again.folder == first.folder
    assert len({first.folder, other.folder, plain.folder}) == 3
    for compiled in (first, other, plain):
        _match(fresh(*inputs), compiled(*inputs), rtol=1e-12, atol=1e-14)


def test_an_edited_sdfg_file_loads_back_as_the_function(inputs, tmp_path):
    lowered = hlo2dace.jit(_model).lower(*inputs)
    sdfg = lowered.as_sdfg()
    assert sdfg.apply_transformations(MapTiling, options={"tile_sizes": (3,)}) == 1
    sdfg.save(str(tmp_path / "edited.sdfgz"), compress=True)
    loaded = hlo2dace.load(tmp_path / "edited.sdfgz", like=lowered)
    _match(jax.jit(_model)(*inputs), loaded(*inputs), rtol=1e-12, atol=1e-14)
    assert _maps(loaded.lowered.as_sdfg()) == _maps(sdfg)
    direct = lowered.compile(sdfg=sdfg)
    assert direct.folder == loaded.folder  # the same content: the same binary
    assert _maps(sdfg) == _maps(lowered.compile(sdfg=sdfg).lowered.as_sdfg())  # not changed


def test_the_plain_lowering_is_what_a_transformation_at_none_receives():
    def chain(x):
        return jnp.exp(jnp.sin(x) * 2.0 + 1.0)

    maps = {}
    for level in ("none", "default"):
        def count(sdfg, level=level):
            maps[level] = _maps(sdfg)

        hlo2dace.jit(chain, optimize=level, transform=count).lower(np.ones(64)).as_sdfg()
    assert maps["none"] >= 4 > maps["default"] == 1, maps  # one map per op, and fused


def _renamed(sdfg):
    name = next(n for n, d in sdfg.arrays.items() if not d.transient)
    sdfg.replace(name, name + "_renamed")
    return name


def test_an_sdfg_that_no_longer_matches_its_module_is_refused(inputs):
    lowered = hlo2dace.jit(_model).lower(*inputs)
    renamed = lowered.as_sdfg()
    name = _renamed(renamed)
    with pytest.raises(hlo2dace.ArgumentError, match=(
            rf"does not match the module of `_model`: array `{name}` \(float64\[.*\]\) is "
            rf"missing; array `{name}_renamed` is an argument the module does not have")):
        lowered.compile(sdfg=renamed)
    retyped = lowered.as_sdfg()
    argument = next(n for n, d in retyped.arrays.items() if not d.transient)
    retyped.arrays[argument].dtype = dace.float32
    with pytest.raises(hlo2dace.ArgumentError, match=(
            rf"array `{argument}` is float32\[.*\], the module's is float64\[")):
        lowered.compile(sdfg=retyped)
    hidden = lowered.as_sdfg()
    hidden.arrays[argument].transient = True
    with pytest.raises(hlo2dace.ArgumentError, match="is transient: it must stay an argument"):
        lowered.compile(sdfg=hidden)
    with pytest.raises(hlo2dace.ArgumentError, match="sdfg must be a dace.SDFG, not a str"):
        lowered.compile(sdfg="program.sdfg")
    renaming = hlo2dace.jit(_model, transform=lambda sdfg: _renamed(sdfg) and None)
    with pytest.raises(hlo2dace.ArgumentError, match="is an argument the module does not have"):
        renaming(*inputs)


def test_a_failing_transformation_or_file_says_what_failed(inputs, tmp_path):
    def broken(sdfg):
        raise ValueError("no such map")

    with pytest.raises(TransformationError, match=(
            "the transformation .*broken raised on the SDFG of `_model`: ValueError: no such "
            "map")):
        hlo2dace.jit(_model, transform=broken)(*inputs)
    with pytest.raises(TransformationError, match="returned a int; it changes the SDFG"):
        hlo2dace.jit(_model, transform=lambda sdfg: 3)(*inputs)

    def invalid(sdfg):
        state = sdfg.start_state
        state.add_edge(state.add_access("nowhere"), None, state.add_access("nowhere"), None,
                       dace.Memlet())

    with pytest.raises(TransformationError, match=".*invalid left an invalid SDFG"):
        hlo2dace.jit(_model, transform=invalid)(*inputs)
    with pytest.raises(hlo2dace.ArgumentError, match="transform must be a function of a "
                       "dace.SDFG, not a int"):
        hlo2dace.jit(_model, transform=5)
    lowered = hlo2dace.jit(_model).lower(*inputs)
    with pytest.raises(hlo2dace.ArgumentError, match="cannot load an SDFG from .*missing"):
        hlo2dace.load(tmp_path / "missing.sdfgz", like=lowered)
    with pytest.raises(hlo2dace.ArgumentError, match="like must be a Lowered"):
        hlo2dace.load(tmp_path / "missing.sdfgz", like=_model)


def test_compare_and_profile_run_the_transformed_program(inputs):
    seen = []
    model = hlo2dace.jit(_model, transform=_tiler(8, seen))
    report = hlo2dace.compare(model, *inputs, timing_budget=0.05)
    assert report.ok, report
    assert seen
    count = len(seen)
    profile = hlo2dace.profile(model, *inputs, budget=0.05)
    assert len(seen) > count and "profile of _model" in str(profile)


def _sampled_programs():
    """A few programs of different kinds: products, a fused chain, a counted loop with a
    stencil, a reduction, a sort."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((48, 40))
    yield "layer", lambda x, w: jnp.tanh(x @ w + 1.0), (x, rng.standard_normal((40, 24)))
    yield "chain", lambda x: jnp.exp(-x * x) * jnp.cos(x) + jnp.sqrt(jnp.abs(x)), (x,)
    yield "stencil loop", lambda u: jax.lax.fori_loop(
        0, 5, lambda _, u: u.at[1:-1, 1:-1].set(0.25 * (u[:-2, 1:-1] + u[2:, 1:-1]
                                                         + u[1:-1, :-2] + u[1:-1, 2:])),
        u), (x,)
    yield "softmax", lambda x: jax.nn.softmax(x, axis=-1), (x,)
    yield "sort", lambda x: jnp.sort(x, axis=0), (x,)


@pytest.mark.parametrize("level", ["none", "default"])
def test_dace_transformations_give_the_right_answer_or_refuse(level):
    """A sample of ``bench/transformations.py``'s table (docs/transformations.md): each
    of DaCe's standard transformations on a few programs gives jax.jit's answer, or
    changes nothing, or refuses cleanly; none builds into a wrong answer or fails to
    build."""
    import transformations

    rows = []
    for name, function, args in _sampled_programs():
        expected = jax.jit(function)(*args)
        for transformation in ("simplify", "MapTiling", "MapInterchange", "MapCollapse",
                               "MapExpansion", "StateFusion", "LoopToMap", "Vectorization"):
            row = transformations.attempt(function, args, {}, expected, level,
                                          transformation)
            rows.append((name, transformation, row["outcome"], row.get("reason")))
    bad = [r for r in rows if r[2] not in ("applied", "no match", "refused")]
    assert not bad, bad
    assert sum(r[2] == "applied" for r in rows) >= len(rows) // 3, rows


def test_vectorized_cpp_tasklets_are_refused_before_the_build(inputs):
    """DaCe's Vectorization gives vector types to the connectors of hlo2dace's C++
    tasklets and leaves their scalar code: refused with that reason, not a compiler
    error."""
    import transformations

    with pytest.raises(TransformationError, match=(
            r"gave vector types to connectors of C\+\+ tasklets \(.*\), whose code reads "
            "and writes scalars")):
        hlo2dace.jit(_model, transform=transformations.TRANSFORMATIONS["Vectorization"])(
            *inputs)


def test_a_later_process_finds_the_transformed_binary(tmp_path):
    """The cache key of a transformed SDFG is its content, the same in every process: a
    second process with the same transformation loads the binary the first one built."""
    import os
    import subprocess

    script = tmp_path / "tiled.py"
    script.write_text("""if True:
        import numpy as np, jax.numpy as jnp, hlo2dace
        from dace.transformation.dataflow import MapTiling

        def tile(sdfg):
            sdfg.apply_transformations(MapTiling, options={"tile_sizes": (4,)})

        x = np.arange(96.0).reshape(8, 12)
        compiled = hlo2dace.jit(lambda x: jnp.cos(x) * 0.987654321, transform=tile
                                ).lower(x).compile()
        assert np.allclose(compiled(x), np.cos(x) * 0.987654321)
        print("built" if compiled.built else "found")
    """)
    env = dict(os.environ, HLO2DACE_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           env=env, timeout=600) for _ in range(2)]
    assert [r.stdout.split()[-1:] for r in runs] == [["built"], ["found"]], \
        [r.stderr[-2000:] for r in runs]


def test_vmap_of_a_transformed_function_runs_the_transformed_batch():
    seen = []
    scaled = hlo2dace.jit(lambda x: jnp.sin(x) * 2.0 + x, transform=_tiler(4, seen))
    xs = np.random.default_rng(5).standard_normal((3, 40))
    _match(jax.vmap(lambda x: jnp.sin(x) * 2.0 + x)(xs), jax.vmap(scaled)(xs), ulp=2)
    assert seen  # the batched program was built from a transformed SDFG too
