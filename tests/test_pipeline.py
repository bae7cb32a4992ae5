"""The pipeline of passes (pipeline.py) and the machine model (machine.py): the listing per
level, every pass switchable and tested, translators that read nothing around their op,
and decisions that move with the machine."""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import dace
import numpy as np
import pytest

import hlo2dace
from hlo2dace import pipeline
from hlo2dace.errors import ArgumentError
from hlo2dace.machine import Machine, assumed, current_machine
from hlo2dace.optimize import level

from pass_util import all_passes, planned

ROOT = Path(__file__).resolve().parents[1]


def test_none_is_the_plain_lowering_and_the_levels_share_the_passes():
    assert pipeline.cpu_passes(level("none")) == []
    default = [p.name for p in pipeline.cpu_passes(level("default"))]
    assert default == [p.name for p in pipeline.cpu_passes(level("aggressive"))]
    assert len(default) == len(set(default))
    stages = [p.stage for p in pipeline.cpu_passes(level("default"))]
    assert stages == sorted(stages, key=["plan", "sdfg", "code"].index)


def test_every_pass_has_its_test_file():
    """One test file per pass (``tests/test_pass_<name>.py``), as one per op family."""
    missing = [name for name in all_passes()
               if not (ROOT / "tests" / f"test_pass_{name}.py").is_file()]
    assert not missing, missing
    extra = sorted(p.stem.removeprefix("test_pass_") for p in (ROOT / "tests").glob(
        "test_pass_*.py") if p.stem.removeprefix("test_pass_") not in all_passes())
    assert not extra, extra


def test_unknown_pass_names_are_an_argument_error():
    with pytest.raises(ArgumentError, match="no pass named fuse_everything; the passes of "
                       "the cpu target are"):
        hlo2dace.jit(lambda x: x, disable_passes=["fuse_everything"])


@pytest.mark.pipeline
def test_the_listing_and_a_planned_module_on_the_command_line(tmp_path):
    module = tmp_path / "m.mlir"
    module.write_text("""
        func.func @main(%x: tensor<300x200xf32>) -> tensor<300x200xf32> {
          %0 = stablehlo.exponential %x : tensor<300x200xf32>
          %1 = stablehlo.add %0, %x : tensor<300x200xf32>
          return %1 : tensor<300x200xf32>
        }""")
    listing = subprocess.run([sys.executable, "-m", "hlo2dace.cli", "passes", "-O", "none"],
                             capture_output=True, text=True, check=True).stdout
    assert "plan:\n    (none)\n  sdfg:\n    (none)\n  code:\n    (none)" in listing
    done = subprocess.run([sys.executable, "-m", "hlo2dace.cli", "passes", str(module),
                           "--disable", "result_destinations"], capture_output=True,
                          text=True, check=True).stdout
    for name in all_passes():
        state = " (disabled)" if name == "result_destinations" else ""
        assert f"    {name}{state}: " in done
    assert "machine: " in done and "-bit vectors" in done
    assert '"stablehlo.add"(%0, %arg0) {h2d.fusion = #h2d.fusion<group = 0 : i64>}' in done
    assert "h2d.destinations = " not in done


@pytest.mark.pipeline
def test_disabling_a_pass_on_the_command_line(tmp_path):
    """``run --disable``: the same results, another binary (the pipeline is part of the
    cache key)."""
    module = tmp_path / "m.mlir"
    module.write_text("""
        func.func @main(%x: tensor<64x26xf64>) -> tensor<64x26xf64> {
          %0 = stablehlo.multiply %x, %x : tensor<64x26xf64>
          return %0 : tensor<64x26xf64>
        }""")
    x = np.random.default_rng(0).standard_normal((64, 26))
    np.savez(tmp_path / "x.npz", arg_0=x)
    outputs = []
    for extra in ([], ["--disable", "collapse_short_rows"]):
        out = tmp_path / f"out{len(outputs)}.npz"
        subprocess.run([sys.executable, "-m", "hlo2dace.cli", "run", str(module), "--inputs",
                        str(tmp_path / "x.npz"), "-o", str(out), *extra], check=True)
        with np.load(out) as data:
            outputs.append(data["result_0"])
    np.testing.assert_array_equal(outputs[0], x * x)
    np.testing.assert_array_equal(outputs[1], x * x)
    keys = {hlo2dace.lower_text(module.read_text(), optimize=pipeline.Options(
        None, disabled)).key for disabled in ((), ("collapse_short_rows",))}
    assert len(keys) == 2


#: what a translator must not read: the scope's ops, uses, destinations or bindings, the
#: producers of values (decisions about an op's surroundings belong in plan passes)
SURROUNDINGS = re.compile(r"scope\.(uses|ops|destinations|env|producers|last_use|now)\b"
                          r"|\.producers\b|read_elementwise\(")


def test_no_translator_reads_around_its_op():
    """Translator modules (those that register ops) read their op, its operands'
    bindings and its annotations: 0 reads of the scope's ops, uses, destinations or
    bindings, or of producers."""
    found = []
    for path in sorted((ROOT / "hlo2dace" / "translate").glob("*.py")):
        text = path.read_text()
        if path.name == "registry.py" or not re.search(r"@register\b|register_elementwise\(",
                                                       text):
            continue
        tree = ast.parse(text)
        docstrings = {n.body[0].value.lineno for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Module))
                      and n.body and isinstance(n.body[0], ast.Expr)
                      and isinstance(n.body[0].value, ast.Constant)}
        for number, line in enumerate(text.splitlines(), 1):
            code = line.split("#")[0]
            if SURROUNDINGS.search(code) and number not in docstrings:
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def _kernel(shape_a, shape_b, machine: Machine) -> str:
    m, k = shape_a
    n = shape_b[1]
    return planned(f"""
        func.func @main(%a: tensor<{m}x{k}xf64>, %b: tensor<{k}x{n}xf64>)
            -> tensor<{m}x{n}xf64> {{
          %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]
            : (tensor<{m}x{k}xf64>, tensor<{k}x{n}xf64>) -> tensor<{m}x{n}xf64>
          return %0 : tensor<{m}x{n}xf64>
        }}""", "choose_product_kernels", machine=machine)


@pytest.mark.pipeline
def test_decisions_move_with_the_machine():
    """Two machine models (a small 2-core AVX2 desktop, a large 32-core AVX-512 server),
    one program each way: the product kernels, the transposition tiles, the merged rows
    and the pairing of matrix-vector products follow each model."""
    here = current_machine()
    small = dataclasses.replace(here, threads=2, l1_bytes=32 << 10, l2_bytes=256 << 10,
                                vector_bytes=32)
    large = dataclasses.replace(here, threads=32, l1_bytes=48 << 10, l2_bytes=2 << 20,
                                vector_bytes=64)
    # a skinny product: gemms over blocks of its long side, one per thread
    assert '"skinny_gemm", parts = 2' in _kernel((8, 600), (600, 1100), small)
    assert '"skinny_gemm", parts = 8' in _kernel((8, 600), (600, 4400), large)
    # two products of one 200x150 f64 matrix (240 KB): one pass over it where it outgrows
    # twice the L2 (64 KiB), two where it stays in cache (2 MiB)
    mvt = """
        func.func @main(%a: tensor<200x150xf64>, %x: tensor<150xf64>, %y: tensor<200xf64>)
            -> (tensor<200xf64>, tensor<150xf64>) {
          %0 = stablehlo.dot_general %a, %x, contracting_dims = [1] x [0]
            : (tensor<200x150xf64>, tensor<150xf64>) -> tensor<200xf64>
          %1 = stablehlo.dot_general %y, %a, contracting_dims = [0] x [0]
            : (tensor<200xf64>, tensor<200x150xf64>) -> tensor<150xf64>
          return %0, %1 : tensor<200xf64>, tensor<150xf64>
        }"""
    tiny_l2 = dataclasses.replace(small, l2_bytes=64 << 10)
    assert "paired" in planned(mvt, "pair_matvecs", machine=tiny_l2)
    assert "paired" not in planned(mvt, "pair_matvecs", machine=large)
    # the maps of a program: short rows (AVX2: rows shorter than 32 merge, AVX-512: 64)
    x = np.ones((64, 48))
    shapes = {}
    for name, model in (("small", small), ("large", large)):
        sdfg = hlo2dace.jit(lambda x: x * 3.0, machine=model).lower(x).as_sdfg()
        shapes[name] = [int(n) for node, _ in sdfg.all_nodes_recursive()
                        if isinstance(node, dace.nodes.MapEntry)
                        for n in node.map.range.size()]
    assert shapes == {"small": [64, 48], "large": [64 * 48]}
    assert small.key() != large.key() and small.transpose_bytes != large.transpose_bytes
    with assumed(large):
        assert hlo2dace.jit(lambda x: x * 3.0).lower(x).options.machine == large


def test_the_model_reads_this_machine():
    model = current_machine()
    assert model.threads >= 1 and model.vector_bytes in (16, 32, 64)
    assert 8 << 10 <= model.l1_bytes <= model.l2_bytes <= model.l3_bytes
    assert model.eigen_depth("complex<f32>") % 8 == 0
