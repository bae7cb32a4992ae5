"""The ``hlo2dace`` command line: convert, run, compare and test, on every input format the
frontend accepts (MLIR text from JAX, ``Exported.serialize()`` bytes, a StableHLO portable
artifact), and its error exits. Runs ``hlo2dace.cli.main`` in-process, plus one run of the
installed console script."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import export
from jaxlib.mlir.dialects import stablehlo

from hlo2dace import cli

from util import needs


def _f(x, y):
    return jnp.sin(x) * y + 1.0, (x > 0).astype(jnp.int32)


ARGS = (np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4),
        np.arange(12, dtype=np.float32).reshape(3, 4))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The same function as JAX text, serialized Exported, and portable artifact; its
    inputs; a malformed file; a module with an op hlo2dace does not translate."""
    folder = tmp_path_factory.mktemp("cli")
    text = jax.jit(_f).lower(*ARGS).as_text()
    (folder / "f.mlir").write_text(text)
    (folder / "f.exported").write_bytes(export.export(jax.jit(_f))(*ARGS).serialize())
    (folder / "f.vhlo").write_bytes(
        stablehlo.serialize_portable_artifact_str(text, stablehlo.get_current_version()))
    np.savez(folder / "inputs.npz", arg_0=ARGS[0], arg_1=ARGS[1])
    (folder / "malformed.mlir").write_text("func.func @main( {\n  return\n}\n")
    (folder / "unsupported.mlir").write_text(textwrap.dedent("""\
        func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
          %0 = stablehlo.custom_call @no_such_target(%x) : (tensor<2xf32>) -> tensor<2xf32>
          return %0 : tensor<2xf32>
        }
        """))
    return folder


FORMATS = ("f.mlir", "f.exported", "f.vhlo")


def _expected():
    return [np.asarray(r) for r in jax.jit(_f)(*ARGS)]


def test_inputs_are_the_formats_they_claim(files):
    assert (files / "f.mlir").read_text().lstrip().startswith("module @jit__f")
    assert (files / "f.vhlo").read_bytes().startswith(b"ML\xefR")
    assert not (files / "f.exported").read_bytes().startswith(b"ML\xefR")


@pytest.mark.parametrize("output", ["out.sdfgz", "out.sdfg"])
def test_convert_writes_a_loadable_sdfg(files, tmp_path, capsys, output):
    import dace

    target = tmp_path / output
    assert cli.main(["convert", str(files / "f.mlir"), "-o", str(target)]) == 0
    assert f"wrote {target}" in capsys.readouterr().out
    sdfg = dace.SDFG.from_file(str(target))
    assert isinstance(sdfg, dace.SDFG) and len(sdfg.arrays) >= 4


def test_convert_default_output_name(files, tmp_path):
    source = tmp_path / "g.vhlo"
    shutil.copy(files / "f.vhlo", source)
    assert cli.main(["convert", str(source)]) == 0
    assert (tmp_path / "g.sdfgz").is_file()


@pytest.mark.parametrize("name", FORMATS)
def test_run_prints_results(files, capsys, name):
    assert cli.main(["run", str(files / name), "--inputs", str(files / "inputs.npz")]) == 0
    out = capsys.readouterr().out
    assert "result 0: float32[3, 4]" in out and "result 1: int32[3, 4]" in out
    assert "[[0 0 0 0]" in out  # x > 0 of the first row


@pytest.mark.parametrize("name", FORMATS)
def test_run_saves_results(files, tmp_path, capsys, name):
    target = tmp_path / "results.npz"
    assert cli.main(["run", str(files / name), "--inputs", str(files / "inputs.npz"),
                     "-o", str(target)]) == 0
    assert f"wrote 2 results to {target}" in capsys.readouterr().out
    with np.load(target) as saved:
        assert saved.files == ["result_0", "result_1"]
        expected = _expected()
        # sin within libmvec's bounds (a loop's vector width picks the variant), before
        # 1 + sin(x) * y cancels
        np.testing.assert_allclose(saved["result_0"], expected[0], rtol=1e-6, atol=4e-6)
        np.testing.assert_array_equal(saved["result_1"], expected[1])
        assert saved["result_0"].dtype == np.float32 and saved["result_1"].dtype == np.int32


def test_run_takes_positional_npz_arrays(files, tmp_path, capsys):
    np.savez(tmp_path / "positional.npz", *ARGS)  # arr_0, arr_1
    assert cli.main(["run", str(files / "f.mlir"), "--inputs",
                     str(tmp_path / "positional.npz")]) == 0
    assert "result 1: int32[3, 4]" in capsys.readouterr().out


def test_compare_agrees_on_random_inputs_of_every_dtype(tmp_path, capsys):
    def g(a, b, c, d, e, h):
        return a & (c > 0), b + 1, c * 2, d * 3, e + e, h * 2

    args = (np.ones(5, bool), np.ones(5, np.uint32), np.ones(5, np.int8),
            np.ones(5, np.complex64), np.ones(5, ml_dtypes.bfloat16), np.ones(5, np.float64))
    path = tmp_path / "g.mlir"
    path.write_text(jax.jit(g).lower(*args).as_text())
    assert cli.main(["compare", str(path)]) == 0
    out = capsys.readouterr().out
    rows = out.splitlines()[2:8]
    for dtype, row in zip(("bool", "uint32", "int8", "complex64", "bfloat16", "float64"), rows):
        assert dtype in row and row.endswith(" OK"), out
    assert "median call" in out


def test_compare_exit_status_on_disagreement(files, capsys, monkeypatch):
    """One element of one output changed: that output DIFFERS (exit status 1), the other
    is OK."""
    from hlo2dace import xla

    def one_element_changed(results):
        changed = np.array(results[0])
        changed[1, 2] += 0.01
        return [changed, *results[1:]]

    call = xla.XlaModule.__call__
    monkeypatch.setattr(xla.XlaModule, "__call__",
                        lambda self, *a: one_element_changed(call(self, *a)))
    assert cli.main(["compare", str(files / "f.vhlo")]) == 1
    out = capsys.readouterr().out
    rows = out.splitlines()
    assert rows[2].endswith(" DIFFERS") and rows[3].endswith(" OK"), out
    assert "1 of 12 elements differ beyond the tolerance" in out and "at [1, 2]" in out


def test_random_inputs_by_dtype():
    dtypes = (np.bool_, np.uint16, np.int32, np.float32, np.complex128, ml_dtypes.bfloat16)
    specs = [type("Spec", (), {"dtype": np.dtype(d).name, "shape": (4, 50)})() for d in dtypes]
    arrays = cli.random_inputs(specs, seed=1)
    assert [a.dtype for a in arrays] == [np.dtype(d) for d in dtypes]
    assert all(a.shape == (4, 50) for a in arrays)
    assert arrays[0].any() and not arrays[0].all()
    assert arrays[1].min() >= 0 and arrays[2].min() < 0
    assert np.all(arrays[4].imag != 0) and np.isfinite(arrays[5].astype(np.float32)).all()
    again = cli.random_inputs(specs, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(arrays, again))


CHECK_FILE = """\
// RUN: stablehlo-translate --interpret -split-input-file %s

func.func @good() {
  %x = stablehlo.constant dense<[1.0, -2.0, 0.5]> : tensor<3xf32>
  %y = stablehlo.multiply %x, %x : tensor<3xf32>
  check.expect_almost_eq_const %y, dense<[1.0, 4.0, 0.25]> : tensor<3xf32>
  func.return
}

// -----

func.func @bad() {
  %x = stablehlo.constant dense<[1, 2, 3]> : tensor<3xi32>
  %y = stablehlo.add %x, %x : tensor<3xi32>
  check.expect_eq_const %y, dense<[2, 4, 7]> : tensor<3xi32>
  func.return
}
"""


def test_test_command_pass_and_fail(tmp_path, capsys):
    path = tmp_path / "checks.mlir"
    path.write_text(CHECK_FILE)
    assert cli.main(["test", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "PASS  checks.mlir::good"
    assert lines[1].startswith("FAIL  checks.mlir::bad  (check 0")
    assert "got np.int32(6), expected np.int32(7)" in lines[1]
    assert lines[-1] == "1 passed, 1 failed, 0 skipped"


def test_test_command_all_passing(tmp_path, capsys):
    path = tmp_path / "good.mlir"
    path.write_text(CHECK_FILE.split("// -----")[0])
    assert cli.main(["test", "--separate", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == ["PASS  good.mlir::good",
                                                    "1 passed, 0 failed, 0 skipped"]


@pytest.mark.parametrize("command", ["convert", "run"])
def test_malformed_file(files, capsys, command):
    path = files / "malformed.mlir"
    assert cli.main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hlo2dace: error: {path}: invalid StableHLO text") and "line 1" in err


def test_malformed_text_is_read_as_text(tmp_path, capsys):
    """Text that is not a module gets the text parser's position, not a guess that it is
    bytecode or a serialized Exported."""
    path = tmp_path / "bad.mlir"
    path.write_text("garbage %0 = stablehlo.add\n")
    assert cli.main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hlo2dace: error: {path}: invalid StableHLO text: custom op "
                          "'garbage' is unknown"), err
    assert "at line 1, column 1\ngarbage %0 = stablehlo.add\n^" in err
    assert "Exported" not in err and "bytecode" not in err


@pytest.mark.parametrize("command", ["convert", "run"])
def test_unsupported_op(files, capsys, command):
    """The error names the op and where it is: the file, not MLIR's ``-``."""
    assert cli.main([command, str(files / "unsupported.mlir")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hlo2dace: error: `stablehlo.custom_call` at "
                          f"{files / 'unsupported.mlir'}:2:8: custom call target"), err


def test_console_script(files, tmp_path):
    script = shutil.which("hlo2dace", path=str(Path(sys.executable).parent)) \
        or shutil.which("hlo2dace")
    needs(script is not None, "the hlo2dace console script (pip install -e .)")
    target = tmp_path / "saved.npz"
    done = subprocess.run([script, "run", str(files / "f.exported"), "--inputs",
                           str(files / "inputs.npz"), "-o", str(target)],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    with np.load(target) as saved:
        np.testing.assert_allclose(saved["result_0"], _expected()[0], rtol=1e-6, atol=4e-6)
    bad = subprocess.run([script, "convert", str(files / "malformed.mlir")],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert bad.returncode == 2 and "hlo2dace: error:" in bad.stderr


@pytest.fixture(scope="module")
def bad(files, tmp_path_factory):
    """Files a user can mistake for the right ones: a module exported for two devices and
    a shape-polymorphic one; inputs of one array (.npy), of text, of Python objects, of one
    array too few, of the wrong shape and the wrong dtype, and one with an extra array."""
    from jax.sharding import AbstractMesh, AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    folder = tmp_path_factory.mktemp("bad")
    mesh = AbstractMesh((2,), ("x",), axis_types=(AxisType.Explicit,))
    sharded = jax.jit(jax.shard_map(lambda u: jax.lax.psum(u, "x"), mesh=mesh,
                                    in_specs=P("x"), out_specs=P()))
    (folder / "sharded.bin").write_bytes(export.export(sharded, platforms=["cpu"])(
        jax.ShapeDtypeStruct((8,), np.float32, sharding=NamedSharding(mesh, P("x"))))
        .serialize())
    specs = export.symbolic_args_specs(ARGS, "(b, 4)")
    (folder / "poly.bin").write_bytes(export.export(jax.jit(_f))(*specs).serialize())
    np.save(folder / "single.npy", ARGS[0])
    (folder / "text.npz").write_text("not arrays\n")
    np.save(folder / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(folder / "one.npz", arg_0=ARGS[0])
    np.savez(folder / "shape.npz", arg_0=ARGS[0][:2], arg_1=ARGS[1])
    np.savez(folder / "dtype.npz", arg_0=ARGS[0].astype(np.int64), arg_1=ARGS[1])
    np.savez(folder / "sharded_shape.npz", arg_0=np.ones(6, np.float32))
    (folder / "binary.bin").write_bytes(b"\0\1\2 not a module")
    return folder


#: (command line, what the one line of error says); {f} is tests' module, {b} the folder
#: of ``bad``, {m} a folder that does not exist
USER_ERRORS = [
    ([], "the following arguments are required: command"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["convert", "{b}/absent.mlir"], "no such file: "),
    (["convert", "{b}"], "is a folder"),
    (["convert", "{b}/binary.bin"], "bytes that are not text are neither MLIR bytecode"),
    (["convert", "{f}/malformed.mlir"], "invalid StableHLO text"),
    (["convert", "{f}/unsupported.mlir"], "custom call target 'no_such_target'"),
    (["convert", "{f}/f.mlir", "-o", "{m}/x.sdfgz"], "there is no folder"),
    (["convert", "{f}/f.mlir", "-o", "{b}"], "is a folder; give a file name"),
    (["convert", "{f}/f.mlir", "-O", "fast"], "invalid choice: 'fast'"),
    (["convert", "{f}/f.mlir", "--shape", "b=3"], "no dimension 'b'; its shapes are all fixed"),
    (["convert", "{b}/poly.bin", "--shape", "n=3"],
     "no dimension 'n'; its symbolic dimensions are b"),
    (["convert", "{b}/poly.bin", "--shape", "b"], "--shape b: expected NAME=SIZE"),
    (["run", "{f}/f.mlir"], "the module takes 2 argument(s): give them with --inputs"),
    (["run", "{b}/poly.bin"], "dimension(s) b have no size: give them with --shape"),
    (["run", "{f}/f.mlir", "--inputs", "{b}/single.npy"],
     "a .npy file holds one array and the module takes 2 argument(s)"),
    (["run", "{f}/f.mlir", "--inputs", "{b}/text.npz"], "not a NumPy .npz or .npy file"),
    (["run", "{f}/f.mlir", "--inputs", "{f}/f.mlir"], "not a NumPy .npz or .npy file"),
    (["run", "{f}/f.mlir", "--inputs", "{b}/objects.npy"], "an array of Python objects"),
    (["run", "{f}/f.mlir", "--inputs", "{b}/absent.npz"], "No such file or directory"),
    (["run", "{f}/f.mlir", "--inputs", "{b}/one.npz"], "holds 1 array(s) and the module takes 2"),
    (["run", "{f}/f.mlir", "--inputs", "{b}/shape.npz"],
     "arg_0 is float32[2, 4]; argument 0 of the module is float32[3, 4]"),
    (["run", "{f}/f.mlir", "--inputs", "{b}/dtype.npz"],
     "arg_0 is int64[3, 4]; argument 0 of the module is float32[3, 4]"),
    (["run", "{f}/f.mlir", "--inputs", "{f}/inputs.npz", "-o", "{m}/x.npz"], "there is no folder"),
    (["run", "{f}/f.mlir", "--seed", "-1"], "argument --seed: -1 is not at least 0"),
    (["run", "{f}/f.mlir", "--ranks", "0"], "argument --ranks: 0 is not at least 1"),
    (["run", "{f}/f.mlir", "--ranks", "two"], "'two' is not a whole number"),
    (["run", "{f}/f.mlir", "--ranks", "2"], "is not sharded (not exported for several devices"),
    (["run", "{b}/sharded.bin", "--ranks", "3"],
     "is exported for 2 devices: run it with --ranks 2"),
    (["run", "{b}/sharded.bin", "--ranks", "2", "--inputs", "{b}/sharded_shape.npz"],
     "arg_0 is float32[6]; argument 0 of the module is float32[8]"),
    (["compare", "{f}/absent.mlir"], "no such file"),
    (["compare", "{f}/f.mlir", "--rtol", "-1"], "argument --rtol: -1 is not at least 0"),
    (["compare", "{f}/f.mlir", "--atol", "nan"], "argument --atol: nan is not at least 0"),
    (["compare", "{b}/poly.bin", "--shape", "n=3"], "its symbolic dimensions are b"),
    (["compare", "{f}/f.mlir", "--ranks", "2"], "compare --ranks 2 takes a module that jax.export"),
    (["compare", "{b}/sharded.bin", "--ranks", "4"],
     "is exported for 2 devices: compare it with --ranks 2"),
    (["profile", "{f}/f.mlir", "--budget", "-1"], "argument --budget: -1 is not more than 0"),
    (["profile", "{f}/f.mlir", "--budget", "0"], "argument --budget: 0 is not more than 0"),
    (["profile", "{f}/f.mlir", "--top", "0"], "argument --top: 0 is not at least 1"),
    (["profile", "{f}/f.mlir", "--html", "{m}/report.html"], "there is no folder"),
    (["profile", "{f}/f.mlir", "--inputs", "{b}/single.npy"], "a .npy file holds one array"),
    (["profile", "{b}/poly.bin"], "dimension(s) b have no size"),
    (["test", "{b}/absent.mlir"], "no such file"),
    (["test", "{b}"], "is a folder"),
]


@pytest.mark.parametrize("argv, message", USER_ERRORS,
                         ids=[" ".join(argv) or "(none)" for argv, _ in USER_ERRORS])
def test_user_errors_are_one_line(files, bad, tmp_path, capsys, argv, message):
    """Every command, given what a user can get wrong: exit status 2 and one line on
    stderr that says what is wrong (text that does not parse: followed by the line it is
    on and a caret under the column), no traceback, and no folder made for an output."""
    missing = tmp_path / "no" / "such" / "folder"
    argv = [a.format(f=files, b=bad, m=missing) for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "error: " in lines[0] and message in lines[0], err
    if "invalid StableHLO text" in message:
        assert len(lines) == 3 and lines[2].strip() == "^", err
    else:
        assert len(lines) == 1, err
    assert not (tmp_path / "no").exists()


def test_mpirun_missing_is_one_line(bad, capsys, monkeypatch):
    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    assert cli.main(["run", str(bad / "sharded.bin"), "--ranks", "2"]) == 2
    assert capsys.readouterr().err == ("hlo2dace: error: --ranks needs mpirun (Debian: "
                                       "openmpi-bin libopenmpi-dev)\n")


def test_extra_input_arrays_are_named(files, tmp_path, capsys):
    """Arrays of an .npz that no argument takes are ignored, with a warning naming them."""
    np.savez(tmp_path / "extra.npz", arg_0=ARGS[0], arg_1=ARGS[1], bias=ARGS[0])
    assert cli.main(["run", str(files / "f.mlir"), "--inputs", str(tmp_path / "extra.npz")]) == 0
    captured = capsys.readouterr()
    assert captured.err == (f"hlo2dace: warning: --inputs {tmp_path / 'extra.npz'}: bias "
                            "ignored (the module takes arg_0, arg_1)\n")
    assert "result 1: int32[3, 4]" in captured.out


def test_a_one_argument_module_takes_a_npy_file(tmp_path, capsys):
    path = tmp_path / "neg.mlir"
    path.write_text(jax.jit(jnp.negative).lower(ARGS[0]).as_text())
    np.save(tmp_path / "x.npy", ARGS[0])
    assert cli.main(["run", str(path), "--inputs", str(tmp_path / "x.npy"), "-o",
                     str(tmp_path / "y")]) == 0
    assert f"wrote 1 results to {tmp_path / 'y.npz'}" in capsys.readouterr().out
    with np.load(tmp_path / "y.npz") as saved:
        np.testing.assert_array_equal(saved["result_0"], -ARGS[0])


def test_shape_of_one_dimension_sizes_the_ones_it_equals(bad, capsys):
    """The exported module's arguments have dimensions b and arg1_dim0 that its shape checks
    make equal: ``--shape b=5`` sizes both."""
    assert cli.main(["run", str(bad / "poly.bin"), "--shape", "b=5"]) == 0
    out = capsys.readouterr().out
    assert "result 0: float32[5, 4]" in out


def test_version_and_help_import_neither_jax_nor_dace():
    """``hlo2dace --version`` and ``--help`` answer without importing JAX or DaCe (the
    package's public names load on first use): 0.15 s instead of 2.5 s."""
    code = ("import sys; from hlo2dace import cli\n"
            "status = [cli.main(['--version']), cli.main(['--help']), cli.main(['run', '-h'])]\n"
            "print(status, sorted(m for m in ('jax', 'dace', 'hlo2dace.api') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("hlo2dace 0.1.0 (jax 0.10.2, jaxlib 0.10.2, dace 2.0.0b1)")
    assert "usage: hlo2dace run" in done.stdout
    assert done.stdout.splitlines()[-1] == "[0, 0, 0] []"

