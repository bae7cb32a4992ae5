"""Nothing that another user can write decides what code hlo2dace runs (hlo2dace/folders.py,
docs/reliability.md, "Shared machines").

Each test plants, where hlo2dace or DaCe would look, what an attacker would plant there: a
library whose constructor runs a command, a recorded build command, a precompiled header,
a CMake configure cache, a DaCe configuration naming another compiler. First it shows the
plant is live: a new process whose folder is the user's own runs it. Then it hands the
folder to another user (owned by an unused uid, which needs root; or writable by others)
and checks that a new process runs none of it, still compiles and computes the right
result, and warns (CacheWarning) naming the folder.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import pwd
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: a uid nobody on the machine has, to own what "another user" planted
ATTACKER = next(uid for uid in range(54321, 60000)
                if uid not in {user.pw_uid for user in pwd.getpwall()})
AS_ROOT = os.geteuid() == 0

#: how a folder becomes another user's in the end-to-end tests: owned by them (needs
#: root, as in CI), else open to all; test_folder_checks covers every other way
TAKEOVER = "another_owner" if AS_ROOT else "writable_by_others"

CHILD = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import hlo2dace
        from dace.codegen import compiler
        roots, original = [], compiler.build_cache_root
        compiler.build_cache_root = lambda: roots.append(original()) or roots[-1]
        seed = float(sys.argv[1])
        x = np.arange(5.0)
        try:
            compiled = hlo2dace.jit(lambda x: x * seed + 1).lower(x).compile()
            ok = bool((np.asarray(compiled(x)) == x * seed + 1).all())
            folder = str(compiled.folder)
        except Exception as exc:
            ok, folder = False, repr(exc)
    print(json.dumps({"ok": ok, "folder": folder, "roots": sorted(set(roots)),
                      "warnings": [str(w.message) for w in caught
                                   if w.category.__name__ == "CacheWarning"]}))
""")


def _compile_in_child(env: dict[str, str], seed: float, cwd: Path | None = None) -> dict:
    """A new process compiles and calls ``x * seed + 1`` with ``env`` added."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(seed)], cwd=cwd,
                          env={**os.environ, "JAX_PLATFORMS": "cpu", "JAX_ENABLE_X64": "1", **env},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _planted_library(path: Path, marker: Path) -> None:
    """A shared library that runs ``touch marker`` when it is loaded."""
    source = path.with_suffix(".planted.c")
    source.write_text(f'#include <stdlib.h>\n__attribute__((constructor)) static void '
                      f'planted(void) {{ system("touch {marker}"); }}\n')
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(path)], check=True)
    source.unlink()


def _take_over(folder: Path, how: str) -> None:
    """Give ``folder`` and what it holds to another user, or open it to all."""
    if how == "another_owner":
        for path in (folder, *folder.rglob("*")):
            os.lchown(path, ATTACKER, ATTACKER)
    else:
        folder.chmod(0o777)


def _warned_about(result: dict, folder: Path) -> bool:
    return any(str(folder) in message for message in result["warnings"])


@pytest.fixture(scope="module")
def own_native_folder(tmp_path_factory):
    """A private XDG cache folder whose native helpers and DaCe build caches are built
    once, for the tests that plant elsewhere."""
    return {"XDG_CACHE_HOME": str(tmp_path_factory.mktemp("xdg"))}


def test_planted_dace_build_caches_and_native_helpers(tmp_path):
    """DaCe's build caches (recorded commands it runs again, precompiled headers it
    includes, CMake configure caches) and the native helper folder, with the commands,
    headers (DaCe's and hlo2dace's precompiled prelude) and call-path extension
    poisoned; also DaCe's own choice of cache folder ($DACE_BUILD_CACHE_DIR) pointed at the
    poisoned caches."""
    xdg = tmp_path / "xdg"
    env = {"XDG_CACHE_HOME": str(xdg), "HLO2DACE_CACHE_DIR": str(tmp_path / "cache1")}
    first = _compile_in_child(env, 2.0)
    native = xdg / "hlo2dace-native"
    caches = native / "dace" / f"dace_build_cache_{getpass.getuser()}"
    assert first["ok"] and first["roots"] == [str(caches)], first
    markers = {name: tmp_path / f"ran-{name}" for name in ("command", "header", "extension")}
    for path in caches.glob("commands/*.json"):
        entries = json.loads(path.read_text())
        for entry in entries:
            entry["command"] = f"touch {markers['command']}; {entry['command']}"
        path.write_text(json.dumps(entries))
    for header in (*caches.glob("pch/*/dace_prewarm.h"), *native.glob("pch/*/h2d_prelude.h")):
        header.write_text(f'#include <stdlib.h>\n__attribute__((constructor)) static void '
                          f'planted(void) {{ system("touch {markers["header"]}"); }}\n'
                          + header.read_text())
        Path(f"{header}.gch").write_bytes(b"not a precompiled header")  # newer: kept
    compiler = tmp_path / "planted-c++"
    compiler.write_text(f"#!/bin/sh\ntouch {markers['command']}\nexec c++ \"$@\"\n")
    compiler.chmod(0o755)
    for configured in caches.glob("configure/*/CMakeCache.txt"):
        text = configured.read_text().replace("CMAKE_CXX_COMPILER:", "PLANTED_WAS:")
        configured.write_text(f"CMAKE_CXX_COMPILER:FILEPATH={compiler}\n{text}")
    for extension in native.glob("h2d_call-*/h2d_call*.so"):
        _planted_library(extension, markers["extension"])

    control = _compile_in_child({**env, "HLO2DACE_CACHE_DIR": str(tmp_path / "cache2")}, 3.0)
    live = {name for name, marker in markers.items() if marker.exists()}
    assert live == set(markers), (live, control)  # the plants run from the user's folder
    for marker in markers.values():
        marker.unlink()

    _take_over(native, TAKEOVER)
    victim = _compile_in_child({**env, "HLO2DACE_CACHE_DIR": str(tmp_path / "cache3"),
                                "DACE_BUILD_CACHE_DIR": str(native / "dace")}, 4.0)
    assert victim["ok"], victim
    assert not [m for m in markers.values() if m.exists()], victim
    assert _warned_about(victim, native), victim
    assert victim["roots"] and not any(root.startswith(str(native)) for root in victim["roots"])


def _planted_entry(tmp_path: Path, env: dict, seed: float, where: Path, marker: Path) -> None:
    """A cache entry for ``x * seed + 1`` in the folder ``where``, as the user's own run
    would leave it, but with a library that runs ``touch marker`` when loaded, and with
    checksums that match (whoever can write the folder can compute them). Planting it
    again replaces the entry that a run rebuilt after loading the plant."""
    made = Path(_compile_in_child({**env, "HLO2DACE_CACHE_DIR": str(tmp_path / "good")},
                                  seed)["folder"])
    entry = where / made.name
    subprocess.run(["rm", "-rf", str(entry)], check=True)
    subprocess.run(["cp", "-a", str(made), str(entry)], check=True)
    library = next(entry.glob("build/build/libh2d_*.so"))
    _planted_library(library, marker)
    meta = json.loads((entry / "meta.json").read_text())
    meta["files"] = {name: hashlib.sha256((entry / name).read_bytes()).hexdigest()
                     for name in meta["files"]}
    body = {k: v for k, v in meta.items() if k != "checksum"}
    meta["checksum"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    (entry / "meta.json").write_text(json.dumps(meta))


def test_planted_program_cache(tmp_path, own_native_folder):
    """The program cache ($HLO2DACE_CACHE_DIR) holding an entry with a planted library;
    with $HLO2DACE_SHARED_CACHE=1 it is trusted on purpose, and loaded."""
    cache, marker = tmp_path / "cache", tmp_path / "ran"
    cache.mkdir()
    _planted_entry(tmp_path, own_native_folder, 5.0, cache, marker)
    env = {**own_native_folder, "HLO2DACE_CACHE_DIR": str(cache)}
    _compile_in_child(env, 5.0)
    assert marker.exists()  # the user's own cache: its entry is loaded
    marker.unlink()

    _planted_entry(tmp_path, own_native_folder, 5.0, cache, marker)
    _take_over(cache, TAKEOVER)
    victim = _compile_in_child(env, 5.0)
    assert victim["ok"] and not marker.exists(), victim
    assert _warned_about(victim, cache) and not victim["folder"].startswith(str(cache))

    shared = _compile_in_child({**env, "HLO2DACE_SHARED_CACHE": "1"}, 5.0)
    assert marker.exists(), shared  # trusted on purpose (then rebuilt: it does not load)
    assert not any("not using" in message for message in shared["warnings"]), shared


def test_planted_temporary_fallback(tmp_path, own_native_folder):
    """A cache folder that cannot be written falls back to <tmp>/hlo2dace-<uid>: planted
    there first, with an entry, by another user."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    temporary, marker = tmp_path / "tmp", tmp_path / "ran"
    fallback = temporary / f"hlo2dace-{os.getuid()}"
    fallback.mkdir(parents=True)
    _planted_entry(tmp_path, own_native_folder, 6.0, fallback, marker)
    env = {**own_native_folder, "HLO2DACE_CACHE_DIR": str(blocked / "cache"),
           "TMPDIR": str(temporary)}
    _compile_in_child(env, 6.0)
    assert marker.exists()  # the user's own fallback folder: its entry is loaded
    marker.unlink()
    _planted_entry(tmp_path, own_native_folder, 6.0, fallback, marker)

    _take_over(fallback, TAKEOVER)
    victim = _compile_in_child(env, 6.0)
    assert victim["ok"] and not marker.exists(), victim
    assert _warned_about(victim, fallback) and not victim["folder"].startswith(str(fallback))


def test_symbolic_link_in_a_parent(tmp_path, own_native_folder):
    """$HLO2DACE_CACHE_DIR reached through a symbolic link to another user's folder."""
    elsewhere, marker = tmp_path / "elsewhere", tmp_path / "ran"
    (elsewhere / "cache").mkdir(parents=True)
    _planted_entry(tmp_path, own_native_folder, 7.0, elsewhere / "cache", marker)
    (tmp_path / "link").symlink_to(elsewhere)
    cache = tmp_path / "link" / "cache"
    env = {**own_native_folder, "HLO2DACE_CACHE_DIR": str(cache)}
    _compile_in_child(env, 7.0)
    assert marker.exists()  # a link to the user's own folder is followed
    marker.unlink()
    _planted_entry(tmp_path, own_native_folder, 7.0, elsewhere / "cache", marker)

    _take_over(elsewhere, TAKEOVER)
    victim = _compile_in_child(env, 7.0)
    assert victim["ok"] and not marker.exists(), victim
    assert _warned_about(victim, cache) and str(elsewhere) in " ".join(victim["warnings"])


def test_dace_configuration_in_the_working_folder(tmp_path, own_native_folder):
    """DaCe reads .dace.conf from the working folder before any other: one naming another
    compiler, written by another user, is not read."""
    marker, compiler = tmp_path / "ran", tmp_path / "planted-c++"
    compiler.write_text(f"#!/bin/sh\ntouch {marker}\nexec c++ \"$@\"\n")
    compiler.chmod(0o755)
    working = tmp_path / "working"
    working.mkdir()
    config = working / ".dace.conf"
    config.write_text(f"compiler:\n  cpu:\n    executable: {compiler}\n")
    env = {**own_native_folder, "HLO2DACE_CACHE_DIR": str(tmp_path / "cache1")}
    _compile_in_child(env, 8.0, cwd=working)
    assert marker.exists()  # the user's own configuration names the compiler
    marker.unlink()

    if AS_ROOT:
        os.chown(config, ATTACKER, ATTACKER)
    else:
        config.chmod(0o666)
    victim = _compile_in_child({**env, "HLO2DACE_CACHE_DIR": str(tmp_path / "cache2")}, 8.0,
                               cwd=working)
    assert victim["ok"] and not marker.exists(), victim
    assert _warned_about(victim, config)


def _case(tmp_path: Path, name: str) -> Path:
    """A folder that another user could change in the way ``name`` says, or may not."""
    base = tmp_path / name
    base.mkdir(mode=0o700)
    folder = base / "cache"
    if name == "private":
        folder.mkdir(mode=0o700)
    elif name == "group_writable":
        folder.mkdir()
        folder.chmod(0o770)
    elif name == "writable_by_others":
        folder.mkdir()
        folder.chmod(0o757)
    elif name == "another_owner":
        folder.mkdir(mode=0o700)
        os.chown(folder, ATTACKER, ATTACKER)
    elif name == "symbolic_link":
        (base / "real").mkdir(mode=0o700)
        folder.symlink_to(base / "real")
    elif name == "not_a_folder":
        folder.write_text("")
    elif name in ("parent_writable", "sticky_parent"):
        base.chmod(0o1777 if name == "sticky_parent" else 0o777)
        folder.mkdir(mode=0o700)
    elif name == "parent_of_another_owner":
        (base / "theirs").mkdir(mode=0o755)
        (base / "theirs" / "mine").mkdir(mode=0o700)
        os.chown(base / "theirs", ATTACKER, ATTACKER)
        folder = base / "theirs" / "mine"
    elif name == "link_to_another_owners_parent":
        (base / "theirs" / "mine").mkdir(parents=True, mode=0o700)
        os.chown(base / "theirs", ATTACKER, ATTACKER)
        (base / "link").symlink_to(base / "theirs")
        folder = base / "link" / "mine"
    return folder


#: case -> what the reason must say (None: the folder is trusted)
FOLDER_CASES = {
    "private": None,
    "group_writable": "writable by its group",
    "writable_by_others": "writable by others",
    "another_owner": f"owned by uid {ATTACKER}",
    "symbolic_link": "is a symbolic link",
    "not_a_folder": "not a folder",
    "parent_writable": "is writable by",
    # a sticky parent open to all is safe only where root owns it (as /tmp)
    "sticky_parent": None if AS_ROOT else "is writable by",
    "parent_of_another_owner": f"is owned by uid {ATTACKER}",
    "link_to_another_owners_parent": "through symbolic links",
}


@pytest.mark.parametrize("name", FOLDER_CASES)
def test_folder_checks(tmp_path, name):
    """``folders.problem`` on each way another user could change a folder: the folder
    itself (mode, owner, a link, a file), a parent that others may write (allowed only
    where root owns it and it is sticky, as /tmp), a parent another user owns, the same
    reached through a symbolic link."""
    from hlo2dace import folders

    if "owner" in name and not AS_ROOT:
        pytest.skip("giving a folder to another uid needs root")
    reason = folders.problem(_case(tmp_path, name))
    expected = FOLDER_CASES[name]
    assert (reason is None) == (expected is None), reason
    assert expected is None or expected in reason, reason


def test_replaced_folders_warn_once_and_stay_private(tmp_path, monkeypatch):
    """A folder that fails is replaced by a new private one for the rest of the process,
    with one CacheWarning naming it and why; one that is missing is made private."""
    from hlo2dace import folders

    monkeypatch.setattr(folders, "_replacements", {})
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    with pytest.warns(folders.CacheWarning, match=f"not using {open_folder} .*writable"):
        replacement = folders.private_folder(open_folder, "a test")
    assert replacement != open_folder and folders.problem(replacement) is None
    assert folders.private_folder(open_folder, "a test") == replacement  # no second warning
    made = folders.private_folder(tmp_path / "new" / "deeper", "a test")
    assert made == tmp_path / "new" / "deeper"
    assert (made.stat().st_mode & 0o777, made.parent.stat().st_mode & 0o777) == (0o700, 0o700)
