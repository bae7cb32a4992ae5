"""Results that do not depend on the CPU's vector instruction set.

Generated code is built with ``-march=native``, so a loop that calls a transcendental
function gets the libmvec variant of the machine it is built on: SSE4 (``_ZGVb``), AVX2
(``_ZGVd``) or AVX-512 (``_ZGVe``). The variants are separate implementations: on
ordinary arguments they differ from each other and from libm by a few ULP (the bound
below), but on special values (denormals, zeros, infinities, NaN) they may differ outright
(AVX-512's cbrtf reads denormal inputs as zero, AVX2's does not). ``h2d/ops.h`` must give
XLA's special values whichever variant runs.

These tests build ``tests/data/vector_isa/harness.cc`` (``h2d/ops.h``'s functions in a
vectorised loop and in a scalar one, the path of short arrays) for each of
``-march=x86-64-v2``, ``-v3`` and ``-v4``, run every build this CPU can execute, and run
them again with ``daz_shim.c`` preloaded: a stand-in for every libmvec function that
flushes denormal inputs and results to zero, the worst a variant may do, so that a
machine without AVX-512 still catches the next cbrt-like difference. Builds this CPU
cannot run are checked for the libmvec symbols they would call.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_elementwise import (
    VECTOR_FUNCTIONS,
    VECTOR_ULP,
    assert_close,
    atan2_of_flushed,
    unary_values,
)

import hlo2dace
from hlo2dace.blas_core import cpu_features
from hlo2dace.compare import ulp_distance
from hlo2dace.optimize import BASE_FLAGS

HERE = Path(__file__).parent / "data" / "vector_isa"
HEADERS = Path(__file__).parents[1] / "hlo2dace" / "include"

#: -march level -> (the libmvec ISA letter its loops call, extra flags, CPU flags it needs)
ISA_LEVELS = {
    "x86-64-v2": ("b", [], {"sse4_2", "ssse3", "popcnt"}),
    "x86-64-v3": ("d", [], {"avx2", "fma", "bmi2", "f16c", "movbe"}),
    # GCC prefers 256-bit vectors even where AVX-512 is available; ask for 512-bit ones,
    # the widths whose variants differ most (_ZGVeN16v_cbrtf)
    "x86-64-v4": ("e", ["-mprefer-vector-width=512"],
                  {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
}

#: h2d/ops.h's functions, as the elementwise templates call them, by arity
UNARY = ["exp_", "expm1_", "log_", "log1p_", "sin_", "cos_", "tan_", "tanh_", "cbrt_", "rsqrt"]
BINARY = ["pow_", "atan2_"]

#: ULP between a libmvec variant's result and libm's on ordinary arguments: the sum of
#: their errors against correctly rounded results (libmvec's up to 4, docs/vector-math.md;
#: libm's up to 1), and f64 log1p, whose libmvec version is up to 2 ULP off
VARIANT_ULP = 5

pytestmark = pytest.mark.skipif(
    shutil.which("g++") is None or shutil.which("nm") is None
    or os.uname().machine != "x86_64", reason="needs g++, nm and an x86-64 CPU")


def _compile_flags(level: str) -> list[str]:
    """The generated code's flags (``optimize.py``) for ``level`` instead of the host."""
    flags = shlex.split(BASE_FLAGS) + [f"-march={level}"]
    return ["-std=c++20", "-O3", "-fopenmp", *flags, *ISA_LEVELS[level][1]]


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """-march level -> its harness binary; and the shim library under key "shim"."""
    folder = tmp_path_factory.mktemp("vector_isa")
    out = {}
    for level in ISA_LEVELS:
        binary = folder / f"harness-{level}"
        subprocess.run(["g++", *_compile_flags(level), f"-I{HEADERS}",
                        str(HERE / "harness.cc"), "-o", str(binary), "-lm"],
                       check=True, capture_output=True)
        out[level] = binary
    out["shim"] = folder / "daz_shim.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", str(HERE / "daz_shim.c"), "-o",
                    str(out["shim"]), "-ldl"], check=True, capture_output=True)
    return out


def _inputs(dtype) -> np.ndarray:
    """Ordinary arguments over many scales, with the special values spread through them at
    every position of a 16-lane vector (so that they pass through the vectorised body, not
    only the scalar remainder)."""
    info = np.finfo(dtype)
    one_ulp = np.spacing(info.tiny)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, info.smallest_subnormal,
                        -info.smallest_subnormal, info.tiny / 3, -info.tiny / 7,
                        info.tiny - one_ulp, -(info.tiny - one_ulp), info.tiny, -info.tiny,
                        info.tiny * 2, -info.tiny * 4, info.max, -info.max], dtype)
    rng = np.random.default_rng(7)
    ordinary = np.concatenate([rng.standard_normal(512) * scale for scale in
                               (1e-30, 1e-6, 1e-2, 1.0, 10.0, 100.0, 1e4, 1e30)])
    x = ordinary.astype(dtype)
    positions = np.arange(3, 3 + 17 * len(special) * 4, 17)
    x[positions] = np.tile(special, 4)
    return x


def _special(x: np.ndarray, margin: int = 1) -> np.ndarray:
    """Infinities, NaN, zeros and denormals (with ``margin``, the smallest normals too)."""
    return ~np.isfinite(x) | (np.abs(x) < np.finfo(x.dtype).tiny * margin)


def _run(binary: Path, name: str, arguments: list[np.ndarray], path: str,
         shim: Path | None = None) -> np.ndarray:
    dtype = arguments[0].dtype
    env = dict(os.environ, LD_PRELOAD=str(shim)) if shim else None
    done = subprocess.run([str(binary), name, "f" if dtype == np.float32 else "d", path,
                           str(arguments[0].size)],
                          input=b"".join(a.tobytes() for a in arguments), env=env,
                          capture_output=True, check=True)
    return np.frombuffer(done.stdout, dtype)


def _same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    width = f"u{a.dtype.itemsize}"
    return (a.view(width) == b.view(width)) | (np.isnan(a) & np.isnan(b))


#: glibc's pow reads a denormal base as 2^-1075 (f64) or 2^-150 (f32) under DAZ, whatever
#: its value, and XLA gives those results (libm's pow); h2d::pow_ relies on libmvec's pow
#: sending such lanes to libm's, as all three variants of glibc 2.36 do (the runs without
#: the stand-in check it), and cannot reproduce libm's value itself: 2^-1075 is below the
#: smallest denormal
POW_OF_DENORMALS = pytest.mark.xfail(strict=True, reason=(
    "pow of a denormal base relies on libmvec's pow handing such lanes to libm's"))


def _cases():
    for dtype in (np.float32, np.float64):
        for name in UNARY + BINARY:
            for stand_in in (False, True):
                marks = POW_OF_DENORMALS if stand_in and name == "pow_" else ()
                yield pytest.param(name, dtype, stand_in, marks=marks, id=(
                    f"{name}-{np.dtype(dtype).name}" + ("-flushing" if stand_in else "")))


@pytest.mark.parametrize("name, dtype, stand_in", _cases())
def test_every_variant_gives_the_scalar_special_values(builds, name, dtype, stand_in):
    """Each build this CPU runs, with its own libmvec variant (or with the stand-in that
    flushes denormals, if ``stand_in``), gives bit for bit the special values of the scalar
    path (which gives XLA's: test_elementwise.py), and ordinary values within VARIANT_ULP
    of it."""
    x = _inputs(dtype)
    arguments = [x, np.roll(x, 5)] if name in BINARY else [x]
    special_input = np.logical_or.reduce([_special(a) for a in arguments])
    cpu = cpu_features()
    reference = None
    runnable = [level for level, (_, _, needs) in ISA_LEVELS.items() if needs <= cpu]
    assert runnable, "this CPU runs none of the -march levels"
    for level in runnable:
        scalar = _run(builds[level], name, arguments, "scalar")
        if reference is None:
            reference = scalar
        # the scalar path is libm's at every level
        assert _same_bits(scalar, reference).all(), f"{name} scalar path at {level}"
        vector = _run(builds[level], name, arguments, "vector",
                      builds["shim"] if stand_in else None)
        where = f"{name} {np.dtype(dtype).name} at {level}" + (" (flushing)" if stand_in else "")
        # special arguments, and special results (tan of the smallest normals, which
        # libmvec flushes to zero)
        special = special_input | _special(scalar) | _special(vector)
        wrong = np.flatnonzero(special & ~_same_bits(vector, scalar))
        assert wrong.size == 0, (
            f"{where}: {wrong.size} special values differ from the scalar path, e.g. "
            f"f{tuple(a[wrong[0]] for a in arguments)} = {vector[wrong[0]]!r}, scalar "
            f"{scalar[wrong[0]]!r}")
        finite = np.isfinite(scalar) & np.isfinite(vector)
        distance = np.where(finite, ulp_distance(scalar, vector), 0)
        assert distance.max() <= VARIANT_ULP, (
            f"{where}: {distance.max()} ULP from the scalar path at "
            f"{tuple(a[np.argmax(distance)] for a in arguments)}")
        assert (np.isnan(vector) == np.isnan(scalar)).all(), f"{where}: NaNs differ"


def _vector_math_functions() -> set[str]:
    """The libm functions h2d/ops.h declares for libmvec (``H2D_VECTOR_MATH_1(exp)``...)."""
    header = (HEADERS / "h2d" / "core.h").read_text()
    return set(re.findall(r"^H2D_VECTOR_MATH_[12]\((\w+)\)", header, re.M))


def test_the_harness_covers_every_vector_math_function():
    """A function added to h2d/ops.h's libmvec declarations must be added to the harness
    (and to these tests), or its variants go unchecked."""
    harness = (HERE / "harness.cc").read_text()
    shim = (HERE / "daz_shim.c").read_text()
    for function in _vector_math_functions():
        assert function in " ".join(UNARY + BINARY), f"{function} is not in UNARY/BINARY"
        assert re.search(rf"\b{function}_?\b", harness), f"{function} is not in harness.cc"
        assert f", {function})" in shim, f"{function} is not in daz_shim.c"


@pytest.mark.parametrize("level", ISA_LEVELS)
def test_each_level_calls_its_own_variants(builds, level):
    """Each build's vectorised loops call the variants of its instruction set, so the runs
    above (and, on a CPU that cannot run a build, these symbols) cover every variant."""
    letter = ISA_LEVELS[level][0]
    listing = subprocess.run(["nm", "-u", str(builds[level])], capture_output=True,
                             text=True, check=True).stdout
    called = set(re.findall(rf"_ZGV{letter}N\d+v+_(\w+?)f?(?:@|\s|$)", listing))
    assert called == _vector_math_functions(), listing


@pytest.mark.parametrize("level", ISA_LEVELS)
def test_each_level_matches_xla(level, monkeypatch):
    """The whole pipeline built for each -march level this CPU runs
    (``$HLO2DACE_MARCH``): every vectorised function within VECTOR_ULP of XLA, special
    values exactly as XLA gives them (atan2: as ``atan2_of_flushed``), and the library calls
    that level's variants."""
    if not ISA_LEVELS[level][2] <= cpu_features():
        pytest.skip(f"this CPU cannot run {level} code")
    monkeypatch.setenv("HLO2DACE_MARCH", level)
    rng = np.random.default_rng(3)
    inputs = {}
    for dtype in (np.float32, np.float64):
        x = np.concatenate([rng.uniform(-30, 30, 1000), np.exp(rng.uniform(-60, 60, 500))])
        x = x.astype(dtype)
        specials = unary_values(dtype)
        x[7:7 + 3 * len(specials):3] = specials
        inputs[np.dtype(dtype).name] = x

    def f(inputs, functions=VECTOR_FUNCTIONS):
        return {dtype: {name: fn(x, jnp.roll(x, 1)) if name in ("pow", "atan2") else fn(x)
                        for name, fn in functions.items()}
                for dtype, x in inputs.items()}

    expected = jax.jit(lambda inputs: f(inputs, {**VECTOR_FUNCTIONS,
                                                 "atan2": atan2_of_flushed}))(inputs)
    jitted = hlo2dace.jit(f, optimize="none")  # one loop per function, each vectorised
    actual = jitted(inputs)
    for dtype in inputs:
        for name in VECTOR_FUNCTIONS:
            assert_close(expected[dtype][name], actual[dtype][name], VECTOR_ULP[dtype][name],
                         f"{name} {dtype} at {level}")
    library = next(jitted.lower(inputs).compile().folder.rglob("libh2d_*.so")).read_bytes()
    letter = ISA_LEVELS[level][0]
    called = set(re.findall(rf"_ZGV{letter}N\d+v+_(\w+?)f?\b".encode(), library))
    # (less h2d's own vector functions, which every library defines: h2d/floats.h's F16C)
    called = {name for name in called if not name.startswith(b"h2d_")}
    assert called == {name.encode() for name in _vector_math_functions()}, called


#: the tests of f16 arithmetic and conversions that depend on the CPU's f16 instructions
F16_TESTS = ("tests/test_elementwise.py::test_products_are_contracted_where_xla_contracts_them",
             "tests/test_elementwise.py::test_convert")


def test_f16_rounds_as_xla_with_and_without_f16_instructions():
    """Where the CPU has AVX512-FP16, XLA computes f16 in half precision (a contracted
    product rounds once with its add, f64 converts to f16 in one rounding), elsewhere in
    float (``h2d::mul_add_f16``, ``h2d::f64_to_f16``). The suite checks this CPU's way;
    this checks the other too, on a CPU that has both: XLA held to AVX2
    (``--xla_cpu_max_isa``) against hlo2dace's code built for x86-64-v3."""
    if "avx512_fp16" not in cpu_features():
        pytest.skip("this CPU has no f16 instructions: the suite checks the float way")
    env = dict(os.environ, HLO2DACE_MARCH="x86-64-v3",
               XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_cpu_max_isa=AVX2".strip())
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *F16_TESTS], cwd=Path(__file__).parents[1], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:]


#: h2d/ops.h's elementwise functions by the kinds of element they take, and their arity
FLOAT_UNARY = ["neg", "abs_", "sign", "round_afz", "round_even", "rsqrt", "sqrt_", "exp_",
               "expm1_", "tanh_", "tan_", "sin_", "cos_", "log_", "log1p_", "cbrt_",
               "exp_logistic"]
INT_UNARY = ["neg", "abs_", "sign", "popcnt", "clz", "not_"]
SHARED_BINARY = ["add", "sub", "mul", "div", "rem", "max_", "min_", "pow_"]
FLOAT_FUNCTIONS = [*FLOAT_UNARY, *SHARED_BINARY, "atan2_", "mul_add", "clamp", "select"]
INT_FUNCTIONS = [*INT_UNARY, *SHARED_BINARY, "shl", "shr_logical", "shr_arithmetic", "clamp",
                 "select"]
#: the ones that stay scalar, and why: no SIMD instruction divides integers; fmod has none
#: either (XLA calls libm's scalar fmod too); a vector popcount needs AVX-512 VPOPCNTDQ, beyond
#: x86-64-v4, and a vector count of leading zeros AVX-512CD
SCALAR = {("float", "rem"), ("double", "rem")} | {
    (t, f) for t in ("int8_t", "int32_t", "int64_t", "uint32_t") for f in ("div", "rem", "popcnt")}
SCALAR_BELOW_AVX512 = {(t, "clz") for t in ("int8_t", "int32_t", "int64_t", "uint32_t")}


@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4"])
def test_elementwise_functions_vectorise(level, tmp_path):
    """Each elementwise function of h2d/ops.h, alone in a loop over its element type,
    vectorises at AVX2 and at AVX-512, except where the ISA has no instruction for it
    (SCALAR): a select written as `?:`, a conversion between double and int64 (AVX-512
    only) or a gather indexed by 32-bit integers among 64-bit lanes keeps a loop scalar on
    one ISA and not on the other (f64 exp and sign were scalar on AVX2)."""
    lines = ['#include "h2d/ops.h"']
    names = {}
    for element in ("float", "double", "int8_t", "int32_t", "int64_t", "uint32_t"):
        functions = FLOAT_FUNCTIONS if element in ("float", "double") else INT_FUNCTIONS
        for function in functions:
            if element.startswith("u") and function in ("neg", "abs_", "sign"):
                continue  # StableHLO has none of these for unsigned integers
            arguments = ("x[i] > y[i], x[i], z[i]" if function == "select"
                         else "x[i], y[i], z[i]" if function in ("mul_add", "clamp")
                         else "x[i]" if function in FLOAT_UNARY + INT_UNARY
                         else "x[i], y[i]")
            lines.append(f"void f_{element}_{function}({element}* __restrict a, const {element}*"
                         f" __restrict x, const {element}* __restrict y, const {element}*"
                         f" __restrict z, int n) {{")
            lines.append(f"    for (int i = 0; i < n; i++) a[i] = h2d::{function}({arguments});"
                         " }")
            names[len(lines)] = (element, function)  # the loop's line
    source = tmp_path / "loops.cc"
    source.write_text("\n".join(lines) + "\n")
    done = subprocess.run(["g++", *_compile_flags(level), "-fno-ipa-icf", f"-I{HEADERS}",
                           "-fopt-info-vec-optimized", "-c", str(source), "-o",
                           str(tmp_path / "loops.o")], capture_output=True, text=True,
                          check=True)
    vectorised = {int(line) for line in re.findall(r"loops\.cc:(\d+):\d+: optimized: loop "
                                                   r"vectorized", done.stderr)}
    scalar = {names[line] for line in names if line not in vectorised}
    expected = SCALAR | (SCALAR_BELOW_AVX512 if level == "x86-64-v3" else set())
    assert scalar == expected, f"scalar: {sorted(scalar - expected)}, " \
                               f"vectorised: {sorted(expected - scalar)}"



@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4"])
def test_parity_tests_vectorise(level, tmp_path):
    """The Collatz step ``jnp.where(x % 2 == 0, x // 2, 3 * x + 1)`` as jnp lowers its floor
    ``%`` and ``//`` vectorises for every signed integer type: GCC 12 folds ``a % 2 != 0``
    into a conversion to bool that its vectoriser cannot mix with the other comparisons'
    masks, so ``h2d::rem`` computes a remainder by a constant power of two with masks."""
    lines = ['#include "h2d/ops.h"']
    loops = {}
    for element in ("int8_t", "int16_t", "int32_t", "int64_t"):
        lines += [
            f"void step_{element}({element}* __restrict a, const {element}* __restrict x, "
            "int n) {",
            f"    using T = {element};",
            "    for (int i = 0; i < n; i++) {",
            "        const T r = h2d::rem(x[i], (T)2), q = h2d::div(x[i], (T)2);",
            "        const T mod = h2d::select(r < 0 && r != 0, h2d::add(r, (T)2), r);",
            "        const T floor = h2d::select(h2d::sign(x[i]) != 1 && r != 0, "
            "h2d::sub(q, (T)1), q);",
            "        a[i] = h2d::select(mod == 0, floor, h2d::add(h2d::mul((T)3, x[i]), (T)1));",
            "    }", "}"]
        loops[len(lines) - 6] = element
    source = tmp_path / "parity.cc"
    source.write_text("\n".join(lines) + "\n")
    done = subprocess.run(["g++", *_compile_flags(level), f"-I{HEADERS}",
                           "-fopt-info-vec-optimized", "-c", str(source), "-o",
                           str(tmp_path / "parity.o")], capture_output=True, text=True,
                          check=True)
    vectorised = {int(line) for line in re.findall(r"parity\.cc:(\d+):\d+: optimized: loop "
                                                   r"vectorized", done.stderr)}
    assert [loops[line] for line in loops if line not in vectorised] == []


@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4"])
def test_bool_arrays_read_through_pointers_vectorise(level, tmp_path):
    """A row loop that reads a bool mask through a pointer, as a masked softmax's rows do
    (``dtypes.ElementType.read``), vectorises: GCC 12 loads no ``bool`` into a vector."""
    from hlo2dace.translate import dtypes

    mask = dtypes.element_type("i1").read("m", "i")
    report = _vectoriser_report(level, tmp_path, "mask", [
        "void masked(const bool* m, const float* __restrict x, float* __restrict o, int n) {",
        f"    for (int i = 0; i < n; i++) o[i] = h2d::exp_(h2d::select({mask}, x[i], -1.0f));",
        "}"])
    assert re.search(r"mask\.cc:3:\d+: optimized: loop vectorized", report), report


def _vectoriser_report(level: str, tmp_path, name: str, lines: list[str]) -> str:
    """GCC's report of the loops it vectorised in ``lines`` (after ops.h's include, which
    is line 1) compiled for ``level``."""
    source = tmp_path / f"{name}.cc"
    source.write_text("\n".join(['#include "h2d/ops.h"', *lines]) + "\n")
    done = subprocess.run(["g++", *_compile_flags(level), f"-I{HEADERS}",
                           "-fopt-info-vec-optimized", "-c", str(source), "-o",
                           str(tmp_path / f"{name}.o")], capture_output=True, text=True,
                          check=True)
    return done.stderr


@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4"])
def test_comparisons_converted_to_floats_vectorise(level, tmp_path):
    """``k(x, x) + 0.1 * jnp.eye(n)``: a row loop that converts a comparison of indices to
    float beside an exponential of floats vectorises (GCC 12 vectorised no ``(float)bool``
    there: a Gaussian process's kernel matrix took 7.8 ms for 0.55)."""
    report = _vectoriser_report(level, tmp_path, "eye", [
        "void eye(const float* __restrict x, float* __restrict o, int i, int n) {",
        "    for (int j = 0; j < n; j++) o[j] = h2d::mul_add(0.1f, "
        "h2d::convert<float>(h2d::convert<int32_t>((int64_t)i) == j), "
        "h2d::exp_(h2d::mul(x[i] - x[j], x[i] - x[j])));",
        "}"])
    assert re.search(r"eye\.cc:3:\d+: optimized: loop vectorized", report), report


def test_a_causal_softmax_matches_xla():
    """The masked rows (-inf past the diagonal) through the row loops that read the mask
    as bytes, and the exponential of -inf and of arguments below ln(FLT_MIN) as zeros."""
    x = np.random.default_rng(0).standard_normal((2, 3, 40, 40)).astype(np.float32) * 60

    def causal(x):
        mask = jnp.tril(jnp.ones((40, 40), dtype=bool))
        return jax.nn.softmax(jnp.where(mask, x, -jnp.inf), axis=-1), jnp.exp(x - 50.0)

    for expected, actual in zip(jax.jit(causal)(x), hlo2dace.jit(causal)(x)):
        expected, actual = np.asarray(expected), np.asarray(actual)
        assert ((expected == 0) == (actual == 0)).all()  # masked, and below ln(FLT_MIN)
        # the exponentials are XLA's bits; the softmax's sums and division round otherwise
        assert np.max(ulp_distance(expected, actual)) <= 4
