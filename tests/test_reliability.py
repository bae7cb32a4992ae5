"""What a pipeline can rely on (docs/reliability.md): call-time checks that either work or
raise ArgumentError, a disk cache that two processes share, that detects damage and that
falls back when its folder cannot be written, calls and compiles from several threads,
memory that does not grow over 10,000 calls, and index arithmetic past 2^31 elements."""

import ctypes
import errno
import gc
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlo2dace
from hlo2dace import ArgumentError, optimize, runtime
from hlo2dace.runtime import CacheWarning


def _script(code: str, env: dict | None = None, cwd=None, prefix=(), timeout=600):
    """Run ``code`` in a new Python process (x64 on, as in these tests); its last line of
    output, as JSON."""
    environment = dict(os.environ, JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu", **(env or {}))
    done = subprocess.run([*prefix, sys.executable, "-c", textwrap.dedent(code)],
                          env=environment, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------- call-time checks

X = np.arange(12.0).reshape(3, 4)
Y = np.linspace(-1, 1, 12).reshape(3, 4)


@pytest.fixture(scope="module")
def compiled():
    return hlo2dace.jit(lambda x, y: x * 2 + y).lower(X, Y).compile()


def _misaligned(array: np.ndarray) -> np.ndarray:
    raw = np.zeros(array.nbytes + 1, np.uint8)
    view = np.frombuffer(raw.data, array.dtype, array.size, offset=1).reshape(array.shape)
    view[...] = array
    return view


def _read_only(array: np.ndarray) -> np.ndarray:
    array = array.copy()
    array.flags.writeable = False
    return array


#: first arguments that work, in layouts and types other than the compiled one
WORKING = [
    ("strided view", lambda: np.repeat(X, 2, axis=1)[:, ::2]),
    ("Fortran order", lambda: np.asfortranarray(X)),
    ("negative strides", lambda: np.flipud(np.flipud(X).copy())),
    ("zero strides", lambda: np.broadcast_to(np.arange(4.0), (3, 4))),
    ("misaligned", lambda: _misaligned(X)),
    ("read-only", lambda: _read_only(X)),
    ("big-endian", lambda: X.astype(">f8")),
    ("nested list", lambda: X.tolist()),
    ("jax.Array", lambda: jnp.asarray(X)),
    ("np.matrix", lambda: np.matrix(X)),
]


@pytest.mark.filterwarnings("ignore:the matrix subclass")
@pytest.mark.parametrize("name, make", WORKING, ids=[w[0] for w in WORKING])
def test_arguments_in_any_layout_work(compiled, name, make):
    argument = make()
    before = np.array(argument, dtype=np.float64)
    np.testing.assert_array_equal(compiled(argument, Y), before * 2 + Y)
    np.testing.assert_array_equal(np.asarray(argument, np.float64), before)  # not written


class _Unreadable:
    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("no array here")


def _deleted():
    array = jnp.asarray(X)
    array.delete()
    return array


#: arguments that fail: (name, arguments, what the message says)
FAILING = [
    ("no arguments", lambda: (), "expected 2 arguments, got 0"),
    ("one argument", lambda: (X,), "expected 2 arguments, got 1"),
    ("three arguments", lambda: (X, Y, Y), "expected 2 arguments, got 3"),
    ("transposed", lambda: (X.T, Y), r"argument 0: expected shape \(3, 4\), got \(4, 3\)"),
    ("extra dimension", lambda: (X, Y[None]), r"argument 1: expected shape \(3, 4\)"),
    ("Python scalar", lambda: (2.0, Y), r"argument 0: expected shape \(3, 4\), got \(\)"),
    ("float32", lambda: (X.astype(np.float32), Y), "expected dtype float64, got float32"),
    ("int64", lambda: (X, Y.astype(np.int64)), "argument 1: expected dtype float64, got int64"),
    ("complex", lambda: (X + 0j, Y), "expected dtype float64, got complex128"),
    ("object", lambda: (X.astype(object), Y), "expected dtype float64, got object"),
    ("jax float32", lambda: (jnp.asarray(X, jnp.float32), Y), "expected dtype float64"),
    ("None", lambda: (None, Y), r"expected shape \(3, 4\), got \(\)"),
    ("ragged list", lambda: ([[1.0, 2.0], [3.0]], Y), "cannot read as one"),
    ("failing __array__", lambda: (_Unreadable(), Y), "no array here"),
    ("deleted jax.Array", lambda: (_deleted(), Y), "deleted"),
]


@pytest.mark.parametrize("name, make, message", FAILING, ids=[f[0] for f in FAILING])
def test_wrong_arguments_raise_argument_error(compiled, name, make, message):
    with pytest.raises(ArgumentError, match=message):
        compiled(*make())


def test_scalars_through_jit_work_as_in_jax():
    f = hlo2dace.jit(lambda s, x: s * x + 1)
    for scalar in (2, 2.5, np.float32(2.5)):  # weak int, weak float, strong float32
        expected = jax.jit(lambda s, x: s * x + 1)(scalar, Y)
        actual = f(scalar, Y)
        assert actual.dtype == expected.dtype
        np.testing.assert_allclose(actual, expected)
    g = hlo2dace.jit(lambda s: s * 2).lower(np.float32(1)).compile()
    np.testing.assert_array_equal(g(np.float32(3)), np.float32(6))
    with pytest.raises(ArgumentError, match="expected dtype float32, got float64"):
        g(3.0)


# ------------------------------------------------------------------------------ cache


def test_two_processes_compiling_at_once_build_once(tmp_path):
    """Both processes lower and translate, wait for each other, then compile the same
    module: the file lock lets one build while the other waits and loads its entry."""
    code = f"""
        import json, sys, time
        from pathlib import Path
        import numpy as np, jax.numpy as jnp, hlo2dace
        me, ready = sys.argv[1], Path({str(tmp_path)!r})
        x = np.linspace(0, 1, 64)
        lowered = hlo2dace.jit(lambda x: jnp.sinh(x) * 3 - x).lower(x)
        lowered.as_sdfg()
        (ready / f"ready-{{me}}").touch()
        deadline = time.monotonic() + 300
        while len(list(ready.glob("ready-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        compiled = lowered.compile()
        print(json.dumps({{"built": compiled.program.built,
                          "ok": bool(np.allclose(compiled(x), np.sinh(x) * 3 - x))}}))
    """
    cache = tmp_path / "cache"
    env = dict(os.environ, JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu",
               HLO2DACE_CACHE_DIR=str(cache))
    runs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(i)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i in range(2)]
    results = []
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err[-4000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] for r in results)
    assert sorted(r["built"] for r in results) == [False, True]
    entries = [p for p in cache.iterdir() if p.is_dir()]
    assert len(entries) == 1 and not list(cache.glob("*.tmp"))


def _flip(path, offset=None):
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0x40
    path.write_bytes(bytes(data))


def _truncate(path):
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 3])


def _edit_meta(path):
    """A change that is still valid JSON: a wrong shape would mean wrong answers."""
    path.write_text(path.read_text().replace('"shape": [5]', '"shape": [6]', 1))


def _constant_value(folder):
    """Flip a bit inside the constant's data in constants.npz (a silently wrong answer if
    it were loaded)."""
    path = folder / "constants.npz"
    data = path.read_bytes()
    _flip(path, data.index(np.array([11.0, 22.0]).tobytes()) + 3)


DAMAGE = {
    "library flipped": lambda f: _flip(next(f.glob("build/build/libh2d_*.so"))),
    "library truncated": lambda f: _truncate(next(f.glob("build/build/libh2d_*.so"))),
    "stub library deleted": lambda f: next(f.glob("build/build/libdacestub_*.so")).unlink(),
    "constant changed": _constant_value,
    "constants truncated": lambda f: _truncate(f / "constants.npz"),
    "SDFG deleted": lambda f: (f / "build" / "program.sdfgz").unlink(),
    "meta.json edited": lambda f: _edit_meta(f / "meta.json"),
    "meta.json truncated": lambda f: _truncate(f / "meta.json"),
}


def test_damaged_cache_entries_are_detected_and_rebuilt(private_cache, monkeypatch):
    """Each kind of damage on a copy of a good entry: lookup refuses it with a
    CacheWarning (as a new process would see it); then one is rebuilt."""
    x = np.arange(5.0)

    def f(x):
        return x * jnp.array([11.0, 22.0, 33.0, 44.0, 55.0]) + 1

    lowered = hlo2dace.jit(f).lower(x)
    compiled = lowered.compile()
    np.testing.assert_array_equal(compiled(x), f(x))
    folder, pristine = compiled.folder, private_cache.parent / "pristine"
    shutil.copytree(folder, pristine)
    for name, damage in DAMAGE.items():
        monkeypatch.setattr(runtime.cache, "_loaded", {})
        shutil.rmtree(folder)
        shutil.copytree(pristine, folder)
        damage(folder)
        with pytest.warns(CacheWarning, match="is damaged"):
            assert runtime.lookup(lowered.key) is None, name
    monkeypatch.setattr(runtime.cache, "_loaded", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DaCe: "library already loaded, renaming file"
        rebuilt = hlo2dace.jit(f).lower(x).compile()
    assert rebuilt.program.built and rebuilt.folder == folder
    np.testing.assert_array_equal(rebuilt(x), f(x))
    monkeypatch.setattr(runtime.cache, "_loaded", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # DaCe: "library already loaded"
        warnings.simplefilter("error", CacheWarning)
        assert runtime.lookup(lowered.key) is not None  # the new entry passes its checks


def test_an_intact_entry_loads_without_warning(private_cache, monkeypatch):
    x = np.arange(3.0)
    hlo2dace.jit(lambda x: x - 7).lower(x).compile()
    monkeypatch.setattr(runtime.cache, "_loaded", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # DaCe: "library already loaded"
        warnings.simplefilter("error", CacheWarning)
        again = hlo2dace.jit(lambda x: x - 7).lower(x).compile()
    assert not again.program.built


def test_a_cache_folder_that_is_a_file_falls_back_with_a_warning(monkeypatch, tmp_path):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("HLO2DACE_CACHE_DIR", str(blocked / "cache"))
    monkeypatch.setattr(runtime.cache, "_fallbacks", {})
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    x = np.arange(4.0)
    with pytest.warns(CacheWarning, match="cannot write the cache folder"):
        compiled = hlo2dace.jit(lambda x: x * 5 + 0.25).lower(x).compile()
    np.testing.assert_array_equal(compiled(x), x * 5 + 0.25)
    assert compiled.folder.parent == tmp_path / f"hlo2dace-{os.getuid()}"
    with warnings.catch_warnings():  # the rest of the process uses the fallback quietly
        warnings.simplefilter("error", CacheWarning)
        again = hlo2dace.jit(lambda x: x * 5 + 0.25).lower(x).compile()
    assert again.folder == compiled.folder


def test_a_disk_that_fills_up_during_the_build_falls_back(monkeypatch, tmp_path):
    """The compiler's own failure for want of space (simulated: a real full disk is
    tested with a small file system by the next test)."""
    from hlo2dace import sdfg_build

    monkeypatch.setenv("HLO2DACE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(runtime.cache, "_fallbacks", {})
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    build, calls = sdfg_build.build, []

    def full_once(sdfg, folder, *args, **kwargs):
        calls.append(str(folder))
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return build(sdfg, folder, *args, **kwargs)

    monkeypatch.setattr(sdfg_build, "build", full_once)
    x = np.arange(4.0)
    with pytest.warns(CacheWarning, match="No space left on device"):
        compiled = hlo2dace.jit(lambda x: x * 6 - 0.5).lower(x).compile()
    np.testing.assert_array_equal(compiled(x), x * 6 - 0.5)
    assert str(tmp_path / "cache") in calls[0] and str(tmp_path / "hlo2dace-") in calls[1]
    assert [p for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []


def _unshare() -> list[str] | None:
    """A prefix that runs a command in its own mount namespace (as root there), or None
    where the system allows none."""
    for prefix in (["unshare", "--mount"], ["unshare", "--user", "--map-root-user",
                                            "--mount"]):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
                return prefix
        except OSError:
            return None
    return None


def test_read_only_and_full_file_systems_fall_back_to_a_temporary_folder(tmp_path):
    """Real file systems, mounted in a namespace of the child process only: a read-only
    one, and a full one (a 1 MB tmpfs filled up)."""
    prefix = _unshare()
    if prefix is None:
        pytest.skip("no mount namespace (unshare) allowed here")
    read_only, full, temporary = tmp_path / "ro", tmp_path / "full", tmp_path / "tmp"
    for folder in (read_only, full, temporary):
        folder.mkdir()
    code = f"""
        import json, os, subprocess, warnings
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", {str(read_only)!r}],
                       check=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", {str(full)!r}],
                       check=True)
        with open({str(full / "filler")!r}, "wb", buffering=0) as filler:
            try:
                while True:
                    filler.write(b"x" * 4096)
            except OSError:
                pass
        import numpy as np, hlo2dace
        results = []
        for root in ({str(read_only)!r}, {str(full)!r}):
            os.environ["HLO2DACE_CACHE_DIR"] = os.path.join(root, "cache")
            x = np.arange(6.0)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                compiled = hlo2dace.jit(lambda x: x / 4 + 2).lower(x).compile()
            results.append({{"ok": bool(np.array_equal(compiled(x), x / 4 + 2)),
                            "folder": str(compiled.folder),
                            "warnings": [str(w.message) for w in caught
                                         if "cache folder" in str(w.message)]}})
        print(json.dumps(results))
    """
    results = _script(code, env={"TMPDIR": str(temporary)}, prefix=prefix)
    for result, reason in zip(results, ["Read-only file system", "bytes free"]):
        assert result["ok"] and result["folder"].startswith(str(temporary / "hlo2dace-"))
        assert len(result["warnings"]) == 1 and reason in result["warnings"][0]


def test_cache_keys_cover_what_changes_the_binary(monkeypatch):
    import dace
    from dace.codegen import compiler

    x = np.arange(4.0)
    lowered = hlo2dace.jit(lambda x: x + 1).lower(x)
    key = lowered.key
    assert hlo2dace.jit(lambda x: x + 1).lower(x).key == key  # deterministic
    assert hlo2dace.jit(lambda x: x + 2).lower(x).key != key  # the module
    assert hlo2dace.jit(lambda x: x + 1).lower(x.astype(np.float32)).key != key
    other = "aggressive" if optimize.level().name == "none" else "none"
    assert hlo2dace.jit(lambda x: x + 1, optimize=other).lower(x).key != key  # options
    changes = [
        lambda: monkeypatch.setattr(dace, "__version__", "0.0.0"),  # DaCe
        lambda: monkeypatch.setattr(compiler, "host_isa_id", lambda: "another-cpu"),  # CPU
        lambda: monkeypatch.setenv("CXX", shutil.which("gcc") or "/bin/false"),  # compiler
        lambda: dace.Config.set("compiler", "cpu", "libs", value="-lm"),  # DaCe's settings
    ]
    libs = dace.Config.get("compiler", "cpu", "libs")
    try:
        for change in changes:
            runtime.toolchain.cache_clear()
            change()
            runtime.toolchain.cache_clear()
            assert lowered.key != key
            monkeypatch.undo()
            dace.Config.set("compiler", "cpu", "libs", value=libs)
            runtime.toolchain.cache_clear()
            assert lowered.key == key
    finally:
        dace.Config.set("compiler", "cpu", "libs", value=libs)
        runtime.toolchain.cache_clear()
    flags = runtime.cache_key("module", "-O3")
    assert runtime.cache_key("module", "-O3 -march=x86-64") != flags  # compiler flags


# ---------------------------------------------------------------------------- threads



def _in_threads(work, count: int = 8) -> None:
    """``work(k)`` in ``count`` threads that start together; fails on any exception."""
    start, errors = threading.Barrier(count), []

    def run(k):
        try:
            start.wait()
            work(k)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_a_compiled_function_called_from_eight_threads_at_once():
    f = hlo2dace.jit(lambda x, w: jnp.tanh(x @ w) + x.sum(axis=1, keepdims=True))
    compiled = f.lower(X, X.T).compile()
    results = {}

    def work(k):
        for i in range(25):
            x = X + 100 * k + i
            results[k, i] = (np.asarray(f(x, X.T)), compiled(x, X.T), x)

    _in_threads(work)
    assert len(results) == 200
    for through_jit, direct, x in results.values():
        expected = np.tanh(x @ X.T) + x.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(through_jit, expected, rtol=1e-13)
        np.testing.assert_array_equal(direct, through_jit)


def test_compiling_from_several_threads(private_cache, monkeypatch):
    """Eight threads compile four modules (each twice, through separate jit objects):
    every result is right, and each module is compiled once (counting the builds)."""
    from hlo2dace import sdfg_build

    build, builds = sdfg_build.build, []

    def counted(sdfg, *args, **kwargs):
        builds.append(sdfg.name)
        return build(sdfg, *args, **kwargs)

    monkeypatch.setattr(sdfg_build, "build", counted)
    compiled = {}

    def work(k):
        fun = hlo2dace.jit(lambda x: jnp.cos(x) * (k % 4) + k % 4)
        compiled[k] = fun.lower(X).compile()

    _in_threads(work)
    for k, program in compiled.items():
        # one rounding where XLA (and hlo2dace) contract the product and the sum, two in NumPy
        np.testing.assert_allclose(program(X), np.cos(X) * (k % 4) + k % 4, rtol=1e-13)
    assert len(builds) == len(set(builds)) == 4
    for module in range(4):  # the second thread got the program the first one built
        assert compiled[module].program is compiled[module + 4].program
    assert len([p for p in private_cache.iterdir() if p.is_dir()]) == 4


# ----------------------------------------------------------------------------- memory


def _rss() -> int:
    """Resident memory after collecting garbage and giving free heap pages back to the
    system, so memory freed by an earlier test cannot hide a leak by being reused."""
    gc.collect()
    ctypes.CDLL(None).malloc_trim(0)
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("path", ["jit", "compiled"])
def test_ten_thousand_calls_do_not_grow_memory(path):
    """Resident memory and Python objects over three windows of 5,000 calls after a
    warm-up of 1,000. A leak grows every window (a result of 8 KB kept per call adds 40 MB
    per window, 400 bytes per call still 2 MB); one-off growth, such as an allocator arena
    made for a new thread, does not repeat, so the quietest window is what is judged."""
    f = hlo2dace.jit(lambda x, y: jnp.sin(x) * y + 1.0)
    x, y = np.linspace(0, 1, 1000), np.linspace(1, 2, 1000)
    call = f if path == "jit" else f.lower(x, y).compile()
    for _ in range(1000):
        call(x, y)
    windows = []
    for _ in range(3):
        rss, objects = _rss(), len(gc.get_objects())
        for _ in range(5000):
            call(x, y)
        windows.append((_rss() - rss, len(gc.get_objects()) - objects))
    print(f"{path}: growth per window of 5,000 calls (bytes, objects): {windows}")
    assert min(grown for grown, _ in windows) < 2 * 2 ** 20
    assert min(new_objects for _, new_objects in windows) < 500
    np.testing.assert_allclose(np.asarray(call(x, y)), np.sin(x) * y + 1.0, rtol=1e-15)


def test_builds_leave_no_files_behind_and_other_devices_work(tmp_path):
    """A new process with its own temporary folder and working directory compiles and
    calls a program: nothing is left in either folder, and the cache entry holds no object
    files (test_api checks that a failed build leaves no staging folder). The process has
    two CPU devices: a jax.Array on the second one, and one sharded over both, are read
    like any array."""
    work, temporary, cache = tmp_path / "work", tmp_path / "tmp", tmp_path / "cache"
    work.mkdir()
    temporary.mkdir()
    code = """
        import json
        import jax, jax.numpy as jnp, numpy as np, hlo2dace
        from jax.sharding import NamedSharding, PartitionSpec
        x = np.arange(8.0)
        f = hlo2dace.jit(lambda x: jnp.exp(x) - 1)
        compiled = f.lower(x).compile()
        second = jax.device_put(x, jax.devices()[1])
        mesh = jax.make_mesh((2,), ("i",))
        sharded = jax.device_put(x, NamedSharding(mesh, PartitionSpec("i")))
        ok = [bool(np.allclose(np.asarray(r), np.expm1(x), rtol=1e-14))
              for r in (f(x), f(second), f(sharded), compiled(second), compiled(sharded))]
        print(json.dumps({"ok": ok, "devices": len(jax.devices()),
                          "folder": str(compiled.folder)}))
    """
    result = _script(code, cwd=work, env={
        "TMPDIR": str(temporary), "HLO2DACE_CACHE_DIR": str(cache),
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"})
    assert result["devices"] == 2 and all(result["ok"])
    assert list(work.iterdir()) == [] and list(temporary.iterdir()) == []
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [result["folder"].rsplit("/", 1)[1], result["folder"].rsplit("/", 1)[1] + ".lock"])
    assert not list(cache.rglob("CMakeFiles")) and not list(cache.rglob("*.o"))


# ---------------------------------------------------------------- past 2^31 elements


def _available_memory() -> int:
    with open("/proc/meminfo") as meminfo:
        return next(int(line.split()[1]) * 1024 for line in meminfo
                    if line.startswith("MemAvailable:"))


def test_arrays_of_more_than_two_to_the_31_elements():
    """Index arithmetic is 64-bit: a reduction, an elementwise map and a slice of a uint8
    array of 2^31 + 7 elements see its last elements (32-bit indices would wrap and miss
    them, or crash). About 4.5 GB of memory; skipped where less is available. A sum into
    uint64 and an argmax compute their converted operand and index inside the reduction:
    written out first, they would take 17 GB each."""
    n = 2 ** 31 + 7
    if _available_memory() < 3 * n:
        pytest.skip(f"needs {3 * n / 2**30:.1f} GiB of available memory")
    x = np.zeros(n, np.uint8)
    x[5], x[2 ** 31 + 1], x[-1] = 1, 3, 5
    f = hlo2dace.jit(lambda x: (jax.lax.reduce(x, np.uint8(0), jax.lax.add, (0,)),
                                jnp.max(x), x[-3:], x * 2))
    total, largest, tail, doubled = f(x)
    assert int(total) == 9 and int(largest) == 5
    np.testing.assert_array_equal(tail, [0, 0, 5])
    doubled = np.asarray(doubled)
    assert doubled.shape == (n,) and np.count_nonzero(doubled) == 3
    assert (doubled[5], doubled[2 ** 31 + 1], doubled[-1]) == (2, 6, 10)
    del doubled
    # the default level computes the converted operand inside the reduction (``none``
    # writes it out: 17 GB)
    wide, index = hlo2dace.jit(lambda x: (jnp.sum(x, dtype=jnp.uint64), jnp.argmax(x)),
                               optimize="default")(x)
    assert (int(wide), int(index)) == (9, n - 1)


def test_an_unknown_dace_call_interface_is_reported():
    """The runtime calls DaCe's entry point directly through what ``CompiledSDFG`` keeps
    in private attributes (hlo2dace/compiled_sdfg.py): a DaCe without them is named in a
    CompilationError, not worked around."""
    from hlo2dace import compiled_sdfg

    class Renamed:
        def initialize(self, **arguments):
            pass

    with pytest.raises(hlo2dace.CompilationError, match="CompiledSDFG has no _sig"):
        compiled_sdfg.entry_point(Renamed(), {})
