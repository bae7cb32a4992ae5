"""The cuda target without a GPU: programs of the test suite's families translated for the
cuda target and compiled by nvcc for sm_90 and sm_80 (``hlo2dace.cuda_check``), and the
ops that cannot run on the device refused with an ``UnsupportedError`` that names them.

Compiling dominates: every program's CUDA code is compiled in one nvcc call (a unity
file), once per test session (``checked``)."""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from test_elementwise import BINARY, DTYPES, SHIFTS, UNARY, category

import hlo2dace
from hlo2dace import cuda_check, cuda_toolchain
from hlo2dace.errors import UnsupportedError
from hlo2dace.pipeline import pipeline

from util import needs

jax.config.update("jax_enable_x64", True)


def _array(dtype, shape=(8, 16), seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if dtype.kind in "iu" or dtype in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)):
        return rng.integers(0, 7, shape).astype(dtype)
    return (rng.standard_normal(shape) + 2).astype(dtype)


def _elementwise(dtype):
    """Every unary and binary op of test_elementwise's tables that ``dtype`` has, and
    conversions to and from f32, in one program."""
    kind = category(dtype)
    unary = [fn for fn, kinds in UNARY.values() if kind in kinds]
    binary = [fn for fn, kinds in BINARY.values() if kind in kinds]
    shifts = list(SHIFTS.values()) if kind in "iun" else []

    def program(x, y):
        out = [fn(x) for fn in unary] + [fn(x, y) for fn in binary + shifts]
        out.append(lax.convert_element_type(x, np.float32))
        if kind != "c":
            out.append(lax.convert_element_type(y.astype(np.float32), dtype))
        return out

    return program, (_array(dtype), _array(dtype, seed=1))


f32, f64, i32 = np.float32, np.float64, np.int32
x32, x64 = _array(f32, (32, 48)), _array(f64, (32, 48))


def _shapes(x):
    return (jnp.broadcast_to(x[:, :1], (32, 48)) + x, x.reshape(48, 32), x.T,
            x[2:30:3, ::-1], jnp.concatenate([x, x * 2], axis=0), jnp.pad(x, ((1, 2), (0, 3))),
            lax.dynamic_slice(x, (3, 4), (8, 8)),
            lax.dynamic_update_slice(x, jnp.ones((4, 4), x.dtype), (5, 6)),
            jnp.expand_dims(x, 0).sum(0), jnp.flip(x, 1))


def _reductions(x):
    return (x.sum(), x.sum(axis=0), x.max(axis=1), x.min(), jnp.prod(x[:4], axis=1),
            jnp.argmax(x, axis=1), x.mean(axis=0),
            jnp.any(x > 3, axis=0))


def _products(a, b, v):
    return a @ b.T, a @ v, jnp.dot(v, v), a.T @ a


def _int_products(a, b):
    return a @ b.T, jnp.einsum("ij,ij->i", a, b)


def _cases(x, n):
    switched = lax.switch(n % 3, [lambda: x + 1, lambda: x * 2, lambda: -x])
    chosen = lax.cond(n > 2, lambda: x.sum(), lambda: x.max())
    return switched, chosen


def _loops(x, n):
    looped = lax.fori_loop(0, 5, lambda i, c: c * 0.5 + jnp.roll(c, 1, axis=0), x)
    counted = lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.5),
                             (0, x))[1]
    return looped, counted


def _random(key, state):
    return (jax.random.uniform(key, (64,)), jax.random.bits(key, (16,), np.uint32),
            lax.rng_bit_generator(state, (16,), np.uint32))


def _convolution(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME")


def _indexing(x, idx):
    return x[idx], x.at[idx].add(1.0), x.at[idx, 2].set(0.0), jnp.take(x, idx, axis=1)


def _int_reductions(x, b):
    return (x.sum(axis=0), x.max(axis=1), x.min(), jnp.prod(x[:3], axis=0), jnp.argmin(x, 0),
            b.all(axis=1), b.any(), jnp.count_nonzero(b, axis=0))


def _scatters(x, idx, segments):
    return (jax.ops.segment_sum(x, segments, num_segments=4), x.at[idx].max(0.5),
            x.at[idx].min(-0.5), x.at[idx].multiply(2.0), x.at[-1].set(3.0),
            x.at[idx, idx].add(1.0))


def _gathers(x, idx):
    return (jnp.take_along_axis(x, jnp.broadcast_to(idx, (32, 4)), axis=1),
            x[:, idx], x[idx[:, None], idx[None, :]], x[jnp.array([1, -1])])


def _scans(x):
    def step(carry, row):
        carry = carry * 0.9 + row
        return carry, carry.sum()

    last, sums = lax.scan(step, jnp.zeros(x.shape[1], x.dtype), x)
    written = lax.fori_loop(0, 8, lambda i, a: lax.dynamic_update_slice(
        a, jnp.full((1, 48), i, a.dtype), (i, 0)), x)
    return last, sums, written


def _nested(x, n):
    def body(i, c):
        return lax.cond(i % 2 == 0, lambda: c + 1, lambda: c * 0.5)

    return lax.fori_loop(0, n, body, x), lax.switch(n % 2, [jnp.sin, jnp.cos], x)


def _softmax(x):
    return (jax.nn.softmax(x, axis=1), jax.nn.logsumexp(x, axis=0), jnp.where(x > 2, x, 0.0),
            jnp.clip(x, 1, 3), jnp.arange(48) * x, jax.nn.relu(x) @ x.T)


def _equation_of_state(t, s, p):
    """pyhpc's equation_of_state flavour: a long f64 expression over three fields."""
    r = jnp.sqrt(s + 35.0) * t / (p + 1.0)
    return (r ** 3 - 2 * r * jnp.exp(-t / 40) + jnp.log1p(s) * jnp.tanh(p / 1e3),
            (t * s).sum(axis=-1))


#: name -> (function, arguments): the programs compiled, by family
PROGRAMS = {
    **{f"elementwise_{np.dtype(d).name}": _elementwise(d) for d in DTYPES
       if category(d) != "c"},
    "shapes_f32": (_shapes, (x32,)),
    "shapes_f64": (_shapes, (x64,)),
    "reductions_f32": (_reductions, (x32,)),
    "reductions_f64": (_reductions, (x64,)),
    "products_f32": (_products, (x32, x32, x32[0])),
    "products_f64": (_products, (x64, x64, x64[0])),
    "products_i32": (_int_products, (_array(i32, (16, 8)), _array(i32, (16, 8)))),
    "cases": (_cases, (x32, np.int32(4))),
    "loops": (_loops, (x32, np.int32(4))),
    "random": (_random, (jax.random.PRNGKey(0), np.arange(4, dtype=np.uint32))),
    "convolution_i32": (_convolution, (_array(i32, (2, 3, 8, 8)), _array(i32, (4, 3, 3, 3)))),
    "indexing": (_indexing, (x32, np.array([3, 1, 7], np.int32))),
    "reductions_i32": (_int_reductions, (_array(i32, (32, 48)), _array(np.bool_, (32, 48)))),
    "scatters": (_scatters, (x32, np.array([3, 1, 7, 3], np.int32),
                             np.arange(32, dtype=np.int32) % 4)),
    "gathers": (_gathers, (x32, np.array([3, 1, 7, 0], np.int32))),
    "scans": (_scans, (x32,)),
    "nested_control": (_nested, (x32, np.int32(5))),
    "softmax": (_softmax, (x32,)),
    "equation_of_state": (_equation_of_state, (x64, x64 + 1, x64 * 100)),
}


def _sdfg(name: str):
    fn, args = PROGRAMS[name]
    sdfg = hlo2dace.jit(fn, target="cuda").lower(*args).as_sdfg()
    sdfg.name = name
    return sdfg


@functools.cache
def checked() -> dict[str, cuda_check.CheckResult]:
    """Every program's check, made once: one nvcc call compiles them all."""
    results = cuda_check.check([_sdfg(name) for name in PROGRAMS])
    return {r.name: r for r in results}


def test_every_program_compiles_with_nvcc():
    """Every program's CUDA and host code compiles for sm_90 and sm_80, with no warning
    in hlo2dace's code (one test, so that the programs share one nvcc call even when
    pytest runs on several workers)."""
    needs(cuda_toolchain.available(), "the CUDA toolchain (pip install '.[cuda]')")
    results = checked()
    assert set(results) == set(PROGRAMS)
    no_kernel = [n for n, r in results.items() if not any(f.endswith(".cu") for f in r.files)]
    assert not no_kernel, f"no CUDA file (nothing on the GPU): {no_kernel}"
    failed = {n: r for n, r in results.items() if not r.ok}
    assert not failed, "\n".join(f"{n}: " + "\n  ".join(r.errors + r.warnings)
                                  for n, r in failed.items())


def test_kernels_and_cublas():
    """Maps become GPU kernels and f32/f64 products cuBLAS calls (not C++ loops)."""
    import dace

    sdfg = _sdfg("products_f32")
    kinds = {(type(n).__name__, n.implementation) for n, _ in sdfg.all_nodes_recursive()
             if isinstance(n, dace.nodes.LibraryNode)}
    assert kinds and all(impl == "cuBLAS" for _, impl in kinds), kinds
    schedules = {n.map.schedule for n, _ in _sdfg("shapes_f32").all_nodes_recursive()
                 if isinstance(n, dace.nodes.MapEntry)}
    assert dace.ScheduleType.GPU_Device in schedules


@pytest.mark.parametrize("fn, args, op", [
    (jnp.fft.fft, (x32.astype(np.complex64),), "stablehlo.fft"),
    (jnp.linalg.cholesky, (x64 @ x64.T + 48 * np.eye(32),), "stablehlo.custom_call"),
    (jnp.sort, (x32,), "stablehlo.sort"),
    (lambda x: jnp.cumsum(x, axis=1), (x32,), "stablehlo.reduce_window"),
    (lambda x: jnp.exp(x * 1j), (x32,), "stablehlo.convert"),
    (lambda x: lax.rng_uniform(x.min(), x.max(), (4,)), (x32,), "stablehlo.rng"),
    (_convolution, (_array(f32, (2, 3, 8, 8)), _array(f32, (4, 3, 3, 3))),
     "stablehlo.convolution"),
], ids=["fft", "cholesky", "sort", "cumsum", "complex", "rng", "convolution_f32"])
def test_host_only_ops_are_refused(fn, args, op):
    """An op that runs on the host only is an UnsupportedError naming it and what the cuda
    target supports, not a compiler error."""
    with pytest.raises(UnsupportedError, match="cuda target") as error:
        hlo2dace.jit(fn, target="cuda").lower(*args).as_sdfg()
    assert error.value.op == op
    assert error.value.supported


def test_cpu_pipeline_has_no_device_pass():
    assert "to_device" not in pipeline("cpu").key
    assert pipeline("cuda").key.startswith("cuda[sm_90,")


def test_cuda_home_is_found_first(tmp_path, monkeypatch):
    """$CUDA_HOME names the root when it holds nvcc and the runtime's headers."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "include").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    (tmp_path / "include" / "cuda_runtime.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    cuda_toolchain.cuda_root.cache_clear()
    try:
        assert cuda_toolchain.cuda_root() == tmp_path.resolve()
    finally:
        cuda_toolchain.cuda_root.cache_clear()


def test_build_root_has_unversioned_libraries():
    """CMake finds libcudart.so in the root DaCe is pointed at (the wheels ship
    libcudart.so.13 only)."""
    needs(cuda_toolchain.available(), "the CUDA toolchain (pip install '.[cuda]')")
    root = cuda_toolchain.build_root()
    assert (root / "lib" / "libcudart.so").exists()
    assert (root / "bin" / "nvcc").exists()
    assert (root / "include" / "cuda_runtime.h").exists()


def test_build_environment_is_restored(monkeypatch):
    """CMake is given nvcc while a cuda program builds, and the CPU's builds after it run
    with the environment they had."""
    import os

    needs(cuda_toolchain.available(), "the CUDA toolchain (pip install '.[cuda]')")
    monkeypatch.delenv("CUDACXX", raising=False)
    path = os.environ["PATH"]
    with pipeline("cuda").build_environment() as root:
        assert os.environ["CUDACXX"] == str(root / "bin" / "nvcc")
        assert Path(os.environ["CUDACXX"]).is_file()
    assert "CUDACXX" not in os.environ
    assert os.environ["PATH"] == path


def test_a_compiler_error_fails_the_check():
    """A kernel that calls what the device does not have fails its program's check."""
    import dace

    needs(cuda_toolchain.available(), "the CUDA toolchain (pip install '.[cuda]')")
    sdfg = dace.SDFG("broken_kernel")
    sdfg.add_array("A", [8], dace.float32)
    sdfg.add_state().add_mapped_tasklet(
        "calls_host", {"i": "0:8"}, {}, "__out = h2d::no_such_helper(1.0f);",
        {"__out": dace.Memlet("A[i]")}, language=dace.Language.CPP, external_edges=True)
    sdfg.apply_gpu_transformations(simplify=False)
    result, = cuda_check.check([sdfg], archs=("sm_90",))
    assert not result.ok
    assert any("broken_kernel_cuda.cu" in e and "error" in e for e in result.errors), \
        result.output[-2000:]


def test_command_line_target(capsys):
    """``hlo2dace passes --target cuda`` lists the cuda pipeline."""
    from hlo2dace import cli

    assert cli.main(["passes", "--target", "cuda"]) == 0
    listing = capsys.readouterr().out
    assert "target cuda" in listing and "to_device" in listing
    assert "choose_product_kernels" not in listing


def test_cmake_builds_a_cuda_program(tmp_path, monkeypatch):
    """DaCe's CMake build of a cuda program configures, compiles and links against the
    extra's toolchain (25 s); without a GPU, loading it is a clear error, with one, it runs."""
    import shutil

    needs(cuda_toolchain.available() and cuda_toolchain.cmake_bin_dir() is not None,
          "the CUDA toolchain (pip install '.[cuda]') and PyPI's CMake (DaCe's dependency)")
    monkeypatch.setenv("HLO2DACE_CACHE_DIR", str(tmp_path))
    x = _array(f32, (16, 16))
    lowered = hlo2dace.jit(lambda a: jnp.sin(a) @ a, target="cuda").lower(x)
    compiled = lowered.compile()
    assert list(tmp_path.rglob("*.so")), "no library was built"
    if shutil.which("nvidia-smi") is None:
        with pytest.raises(hlo2dace.errors.CompilationError, match="initialisation failed"):
            compiled(x)
    else:
        np.testing.assert_allclose(compiled(x), np.sin(x) @ x, rtol=1e-5)


def test_the_architecture_is_in_the_cache_key():
    """A binary built for one GPU architecture is not reused for another."""
    import dace

    before = pipeline("cuda").key
    old = dace.Config.get("compiler", "cuda", "cuda_arch")
    dace.Config.set("compiler", "cuda", "cuda_arch", value="80")
    try:
        assert pipeline("cuda").key.startswith("cuda[sm_80,") and pipeline("cuda").key != before
    finally:
        dace.Config.set("compiler", "cuda", "cuda_arch", value=old)


def test_every_family_has_a_cuda_rule():
    """Every op family that translates for the CPU says whether it runs on the device
    (translate/cuda.py): a new family needs a rule."""
    from hlo2dace.translate import cuda, registry

    families = {registry.record(name).family for name in registry.supported_ops("cpu")
                if registry.record(name).translator("cpu") is not None}
    missing = families - set(cuda.DEVICE_FAMILIES) - set(cuda.HOST_FAMILIES)
    assert not missing, f"no cuda rule for the families {sorted(missing)}"
    assert not [name for name in registry.supported_ops("cpu")
                if registry.record(name).translator("cpu") is not None
                and registry.record(name).translator("cuda") is None]
