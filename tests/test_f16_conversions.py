"""f16 conversions in generated code: the CPU's bits, in loops that vectorise.

Without AVX512-FP16, GCC converts ``_Float16`` one element at a time and leaves any loop
with such a conversion scalar: f16 arithmetic ran at 35 times XLA's time. ``h2d/floats.h``
converts with F16C's instructions in vector functions that the vectoriser calls (NaN lanes,
and CPUs without F16C, in integer and float operations). This builds
``tests/data/f16_conversions/harness.cc`` with the generated code's flags, checks that GCC
vectorises its conversion loops, and runs it: every f16 and every float (every 7th
block of them for the other instruction sets) against F16C's conversions, and bf16's
rounding of every float against its rule, with and without FTZ/DAZ.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from hlo2dace.blas_core import cpu_features
from hlo2dace.optimize import BASE_FLAGS

HARNESS = Path(__file__).parent / "data" / "f16_conversions" / "harness.cc"
HEADERS = Path(__file__).parents[1] / "hlo2dace" / "include"

pytestmark = pytest.mark.skipif(
    shutil.which("g++") is None or os.uname().machine != "x86_64",
    reason="needs g++ and an x86-64 CPU")


#: -march -> (the CPU flags it needs, every how many blocks of floats to check): with
#: -mf16c, each calls other variants of the vector functions (x86-64-v2 with F16C: AVX's)
TARGETS = {"native": (set(), 1), "x86-64-v3": ({"avx2", "fma", "f16c"}, 7),
           "x86-64-v2": ({"avx", "f16c"}, 7)}


@pytest.mark.parametrize("march", TARGETS)
def test_conversions_vectorise_and_give_the_cpus_bits(march, tmp_path):
    needed, stride = TARGETS[march]
    flags = cpu_features()
    if "f16c" not in flags or not needed <= flags:
        pytest.skip(f"the CPU lacks {sorted((needed | {'f16c'}) - flags)}")
    if "avx512fp16" in flags and march == "native":
        pytest.skip("AVX512-FP16: h2d/floats.h uses _Float16's own conversions")
    binary = tmp_path / "harness"
    build = subprocess.run(
        ["g++", "-std=c++20", "-O3", "-fopenmp", *shlex.split(BASE_FLAGS), f"-march={march}",
         "-mf16c", f"-I{HEADERS}", str(HARNESS), "-o", str(binary), "-fopt-info-vec-optimized"],
        capture_output=True, text=True, check=True)
    source = HARNESS.read_text().splitlines()
    loops = {number for number, line in enumerate(source, 1) if "// loop:" in line}
    vectorised = {int(m) for m in re.findall(rf"{HARNESS.name}:(\d+):\d+: optimized: loop "
                                             "vectorized", build.stderr)}
    assert loops and loops <= vectorised, build.stderr
    run = subprocess.run([str(binary), str(stride)], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.endswith("0 differences\n"), run.stdout
