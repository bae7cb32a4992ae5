"""Fuzzing the frontend: every input ends in a value or an ``Hlo2DaceError``, never another
exception, a hang or a crash of the process.

The inputs are real modules, mutated. The corpus: a dozen JAX functions (products, loops,
sorting, gathers, scatters, conditionals, 16-bit floats, complex numbers, random numbers)
lowered by ``jax.jit``, each as pretty text, as the generic text that the parser reads,
as MLIR bytecode, as a portable artifact and as ``jax.export`` ``serialize()`` bytes. The
mutations (``mutate``): truncation, deleted, duplicated and swapped spans and tokens,
stray characters, element types replaced (once, or everywhere so that the module still
verifies), dimensions replaced by huge, negative, zero and 2^31-boundary values, invalid
UTF-8, flipped bytes of bytecode, and bytecode's magic number followed by garbage.

Two targets: ``run_source`` (``normalize``, ``parse_module`` and the translation to an SDFG)
and ``run_text`` (the LALR parser alone, on mutated generic text: MLIR's parser rejects
most mutations before ours sees them). An ``Hlo2DaceError`` whose message says "internal
error" is a bug caught by a last-resort guard: it counts as a finding too.

Engines:

* ``random``: the mutations drawn from a seeded generator, input ``i`` from seed
  ``(seed, i)``, so any input can be replayed (``--replay I``);
* ``atheris``: libFuzzer (``pip install atheris``), coverage-guided over hlo2dace's and
  lark's Python code; its inputs are either raw bytes, seeded with the corpus, or the
  choices of the same mutations.

Workers run in child processes watched by this one: an input that kills its worker (an
abort in native code, the kernel's OOM killer) or runs past ``--timeout`` seconds is saved
under ``--out`` and the run goes on. ``tests/test_fuzz.py`` draws the same mutations with
hypothesis, with a bounded number of examples. Figures: docs/reliability.md.

    python bench/fuzz.py --engine random --inputs 20000
    python bench/fuzz.py --engine atheris --inputs 20000
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve()

# ----------------------------------------------------------------------------- corpus


def _functions() -> list[tuple[Callable, tuple]]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    f32, f64 = np.float32, np.float64

    def loop(x, n):
        return lax.fori_loop(0, n, lambda i, c: c * 2 + i, x)

    def while_(x):
        return lax.while_loop(lambda c: c[0] < 100.0, lambda c: (c[0] * 3.0, c[1] + 1), (x, 0))

    return [
        (lambda x, w, b: jnp.tanh(x @ w + b), (np.ones((4, 3), f32), np.ones((3, 2), f32),
                                               np.ones(2, f32))),
        (lambda x: jnp.cumsum(x, axis=0).sum(1), (np.ones((5, 3), f64),)),
        (loop, (np.ones(3, np.int32), 4)),
        (while_, (np.float32(1.5),)),
        (lambda x: jnp.sort(x)[::-1].reshape(2, 2).T, (np.arange(4.0),)),
        (lambda x: jnp.where(x > 0, x, 0).astype(jnp.float16), (np.arange(6.0) - 3,)),
        (lambda x, i: (x[i], x.at[i].add(1.0)), (np.arange(6.0, dtype=f32),
                                                np.array([0, 5, 2], np.int32))),
        (lambda p, x: lax.cond(p, lambda v: v * 1j, lambda v: v + 0j, x),
         (True, np.ones(3, np.complex64))),
        (lambda x: jnp.max(x.astype(jnp.bfloat16), axis=0), (np.ones((3, 4), f32),)),
        (lambda x: jnp.convolve(x, jnp.array([1.0, -2.0, 1.0], f32)),
         (np.arange(8, dtype=f32),)),
        (lambda k: jax.random.uniform(jax.random.key(k), (3,)), (np.uint32(7),)),
        (lambda x: (jnp.argmax(x, axis=1), x.astype(np.int8) >> 2), (np.ones((2, 5), f32),)),
    ]


@functools.lru_cache(maxsize=1)
def corpus() -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """(modules in every form ``normalize`` reads, generic texts that ``parse_module``
    reads), from the functions above."""
    import jax
    from jax import export

    from hlo2dace.frontend.normalize import normalize

    jax.config.update("jax_enable_x64", True)
    sources: list[Any] = []
    generic: list[str] = []
    for fun, args in _functions():
        lowered = jax.jit(fun).lower(*args)
        bytecode = io.BytesIO()
        lowered.compiler_ir("stablehlo").operation.write_bytecode(bytecode)
        exported = export.export(jax.jit(fun))(*args)
        text = normalize(lowered).text
        sources += [lowered.as_text(), text, bytecode.getvalue(),
                    bytes(exported.mlir_module_serialized), bytes(exported.serialize())]
        generic.append(text)
    return tuple(sources), tuple(generic)


# -------------------------------------------------------------------------- mutations

#: ``choose(n)``: an integer in [0, n), from whatever drives the fuzzing
Choose = Callable[[int], int]

_TYPES = ("f32", "f64", "f16", "bf16", "i1", "i8", "i32", "i64", "ui32", "complex<f32>",
          "index", "f8E4M3FN", "i4", "q32", "tuple<>")
_NUMBERS = ("0", "1", "-1", "-2", "2147483647", "2147483648", "4294967296", "65536",
            "9223372036854775807", "9223372036854775808", "-9223372036854775808",
            "99999999999999999999999", "1000000000000", "3000000000", "?")
_TEXT_INSERTS = ("{", "}", "(", ")", "<", ">", "[", "]", "%", "@", "#", "!", '"', "\\", ",",
                 ":", "=", "^", "x", "?", "\x00", "\u00e9", "\U0001f600", "\ud800", "loc(",
                 "%arg0", "tensor<", "dense<", "0x", "\n")
_BAD_UTF8 = (b"\xff", b"\xfe", b"\xc0\x80", b"\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
             b"\xe2\x82")
_MAGIC = b"ML\xefR"
_DIMENSION = re.compile(r"(?<=[<x])\d+(?=x)")
_NUMBER = re.compile(r"-?\b\d+\b")
_TOKEN = re.compile(r"(\s+|[(){}<>\[\],:=])")


def _span(length: int, choose: Choose) -> tuple[int, int]:
    i, j = choose(length + 1), choose(length + 1)
    return min(i, j), max(i, j)


def _mutate_text(text: str, choose: Choose) -> str | bytes:
    kind = choose(10)
    if kind == 0:  # truncated
        return text[:choose(len(text) + 1)]
    if kind == 1:  # a span deleted
        i, j = _span(len(text), choose)
        return text[:i] + text[j:]
    if kind == 2:  # a span duplicated
        i, j = _span(len(text), choose)
        return text[:j] + text[i:j] + text[j:]
    if kind == 3:  # a stray character or token
        i = choose(len(text) + 1)
        return text[:i] + _TEXT_INSERTS[choose(len(_TEXT_INSERTS))] + text[i:]
    if kind == 4:  # two tokens swapped
        tokens = _TOKEN.split(text)
        i, j = choose(len(tokens)), choose(len(tokens))
        tokens[i], tokens[j] = tokens[j], tokens[i]
        return "".join(tokens)
    if kind in (5, 6):  # an element type replaced, once or everywhere (still verifies)
        present = [t for t in _TYPES if re.search(rf"\b{re.escape(t)}\b", text)]
        if not present:
            return text
        old, new = present[choose(len(present))], _TYPES[choose(len(_TYPES))]
        return re.sub(rf"\b{re.escape(old)}\b", new, text, count=1 if kind == 5 else 0)
    if kind == 7:  # a dimension replaced everywhere: huge, negative, zero, 2^31
        dims = sorted(set(_DIMENSION.findall(text)))
        if not dims:
            return text
        old, new = dims[choose(len(dims))], _NUMBERS[choose(len(_NUMBERS))]
        return re.sub(rf"(?<=[<x]){old}(?=x)", new, text)
    if kind == 8:  # any number replaced once
        numbers = list(_NUMBER.finditer(text))
        if not numbers:
            return text
        found = numbers[choose(len(numbers))]
        return text[:found.start()] + _NUMBERS[choose(len(_NUMBERS))] + text[found.end():]
    data = text.encode("utf-8", "surrogatepass")  # invalid UTF-8 in otherwise good text
    i = choose(len(data) + 1)
    return data[:i] + _BAD_UTF8[choose(len(_BAD_UTF8))] + data[i:]


def _mutate_bytes(data: bytes, choose: Choose) -> bytes:
    kind = choose(6)
    if kind == 0:  # truncated
        return data[:choose(len(data) + 1)]
    if kind == 1:  # bytes flipped
        out = bytearray(data)
        for _ in range(1 + choose(8)):
            if out:
                out[choose(len(out))] = choose(256)
        return bytes(out)
    if kind == 2:  # a span deleted
        i, j = _span(len(data), choose)
        return data[:i] + data[j:]
    if kind == 3:  # almost bytecode: the magic number, then the tail of a real file
        return _MAGIC + data[choose(len(data) + 1):]
    if kind == 4:  # invalid UTF-8
        i = choose(len(data) + 1)
        return data[:i] + _BAD_UTF8[choose(len(_BAD_UTF8))] + data[i:]
    i, j = _span(len(data), choose)  # a span duplicated
    return data[:j] + data[i:j] + data[j:]


def mutate(source: str | bytes, choose: Choose) -> str | bytes:
    """One to three mutations of ``source``."""
    for _ in range(1 + choose(3)):
        source = (_mutate_text(source, choose) if isinstance(source, str)
                  else _mutate_bytes(source, choose))
    return source


def draw(choose: Choose) -> tuple[str, str | bytes]:
    """A target (``"source"`` or ``"text"``) and its mutated input."""
    sources, generic = corpus()
    if choose(4) == 0:
        return "text", _as_text(mutate(generic[choose(len(generic))], choose))
    return "source", mutate(sources[choose(len(sources))], choose)


def _as_text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


# ---------------------------------------------------------------------------- targets


#: what a target returns: the outcome's name, and the exception if there was one
Outcome = tuple[str, Exception | None]


def _outcome(stage: str, error: Exception) -> Outcome:
    from hlo2dace.errors import Hlo2DaceError

    name = type(error).__name__
    if not isinstance(error, Hlo2DaceError):
        name = f"BUG {name}"
    elif "internal error" in str(error):
        name = f"BUG internal {name}"
    return f"{stage}: {name}", error


def run_source(source: Any) -> Outcome:
    """Normalise, parse and translate ``source``: the stage reached, or the error."""
    from hlo2dace.api import Lowered
    from hlo2dace.frontend.normalize import normalize

    stage = "normalize"
    try:
        lowered = Lowered(normalize(source))
        stage = "parse"
        lowered.module  # noqa: B018
        stage = "translate"
        lowered.as_sdfg()
    except Exception as error:
        return _outcome(stage, error)
    return "translated", None


def run_text(text: str) -> Outcome:
    """The LALR parser alone on ``text``."""
    from hlo2dace.frontend.parser import parse_module

    try:
        parse_module(text)
    except Exception as error:
        return _outcome("parser", error)
    return "parsed", None


def run(target: str, value: Any) -> Outcome:
    return run_text(value) if target == "text" else run_source(value)


def is_bug(outcome: str) -> bool:
    return "BUG" in outcome


def signature(outcome: str, error: Exception) -> str:
    """A bug's outcome and the place it was raised, to report each bug once."""
    cause = error.__cause__ or error.__context__ or error
    frames = traceback.extract_tb(cause.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{outcome} ({type(cause).__name__}{where})"


# ---------------------------------------------------------------------------- workers


def _save(out: Path, name: str, target: str, value: Any, detail: str) -> str:
    out.mkdir(parents=True, exist_ok=True)
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
    path = out / f"{name}.{target}.{'txt' if isinstance(value, str) else 'bin'}"
    path.write_bytes(data)
    (out / f"{name}.log").write_text(detail)
    return str(path)


def random_worker(seed: int, start: int, stop: int, progress: Path, out: Path) -> None:
    """Inputs ``start`` to ``stop - 1``. Before each, its index and the outcomes so far
    go into ``progress``: if the input kills this process, the parent knows which."""
    corpus()
    counts: Counter = Counter()
    bugs: dict[str, str] = {}
    for index in range(start, stop + 1):
        _write(progress, {"next": index, "counts": counts, "bugs": bugs})
        if index == stop:
            return
        target, value = draw(random.Random(f"{seed}:{index}").randrange)
        outcome, error = run(target, value)
        counts[outcome] += 1
        if is_bug(outcome):
            _record(bugs, out, f"bug-{seed}-{index}", target, value, outcome, error)


def _write(path: Path, state: dict) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(state))
    partial.replace(path)


def _record(bugs: dict, out: Path, name: str, target: str, value: Any, outcome: str,
            error: Exception) -> None:
    key = signature(outcome, error)
    if key not in bugs:
        bugs[key] = _save(out, name, target, value, "".join(
            traceback.format_exception(error.__cause__ or error)))


def replay(seed: int, index: int) -> tuple[str, Any, Outcome]:
    target, value = draw(random.Random(f"{seed}:{index}").randrange)
    return target, value, run(target, value)


def run_random(inputs: int, seed: int, timeout: float, out: Path) -> dict:
    """Run ``inputs`` inputs in worker processes, restarting a worker after a crash or a
    hang; returns the summary."""
    counts: Counter = Counter()
    bugs: dict[str, str] = {}
    crashes: list[dict] = []
    folder = Path(tempfile.mkdtemp(prefix="h2d-fuzz-"))
    progress = folder / "progress.json"
    start, began = 0, time.perf_counter()
    while start < inputs:
        stop = min(inputs, start + 2000)
        _write(progress, {"next": start, "counts": {}, "bugs": {}})
        worker = subprocess.Popen(
            [sys.executable, str(HERE), "--worker", str(seed), str(start), str(stop),
             str(progress), str(out)])
        last, seen, hung = time.monotonic(), "", False
        while worker.poll() is None:
            time.sleep(0.5)
            text = progress.read_text()
            if text != seen:
                last, seen = time.monotonic(), text
            elif time.monotonic() - last > timeout:
                hung = True
                worker.kill()
                worker.wait()
        state = json.loads(progress.read_text())
        counts.update(state["counts"])
        bugs.update(state["bugs"])
        if state["next"] == stop:
            start = stop
            continue
        index = state["next"]
        target, value = draw(random.Random(f"{seed}:{index}").randrange)
        what = "hang" if hung else f"exit status {worker.returncode}"
        crashes.append({"input": index, "what": what,
                        "saved": _save(out, f"crash-{seed}-{index}", target, value, what)})
        counts[f"CRASH ({what})"] += 1
        start = index + 1
    shutil.rmtree(folder)
    return {"engine": "random", "inputs": inputs, "seed": seed,
            "seconds": round(time.perf_counter() - began, 1), "counts": dict(counts),
            "bugs": bugs, "crashes": crashes}


# ---------------------------------------------------------------------------- atheris


def atheris_worker(argv: list[str], out: Path) -> None:
    """libFuzzer over ``_atheris_input``; the findings and counts go into ``out``."""
    import atheris

    with atheris.instrument_imports(include=["hlo2dace", "lark"]):
        import lark  # noqa: F401

        import hlo2dace  # noqa: F401
        import hlo2dace.api  # noqa: F401
        import hlo2dace.frontend.parser  # noqa: F401
        import hlo2dace.translate  # noqa: F401
    corpus()
    counts: Counter = Counter()
    bugs: dict[str, str] = {}

    def one_input(data: bytes) -> None:
        target, value = _atheris_input(data, atheris.FuzzedDataProvider)
        outcome, error = run(target, value)
        counts[outcome] += 1
        if is_bug(outcome):
            _record(bugs, out, f"bug-atheris-{len(bugs)}", target, value, outcome, error)
        # after every input: libFuzzer ends the process without running Python's cleanup
        _write(out / "atheris-counts.json", {"counts": counts, "bugs": bugs})

    atheris.Setup(argv, one_input)
    atheris.Fuzz()


def _atheris_input(data: bytes, provider: Any) -> tuple[str, Any]:
    """First byte 0: the rest is a module's bytes (libFuzzer mutates the corpus); 1: the rest
    is generic text for the parser; else the rest chooses mutations of the corpus."""
    if data[:1] == b"\x00":
        return "source", data[1:]
    if data[:1] == b"\x01":
        return "text", data[1:].decode("utf-8", "replace")
    fdp = provider(data[1:])
    return draw(lambda n: fdp.ConsumeIntInRange(0, n - 1))


def run_atheris(inputs: int, timeout: float, out: Path) -> dict:
    """libFuzzer runs of ``inputs`` inputs in all, restarted after a crash."""
    seeds = Path(tempfile.mkdtemp(prefix="h2d-fuzz-corpus-"))
    sources, generic = corpus()
    for i, source in enumerate(sources):
        data = source.encode() if isinstance(source, str) else source
        (seeds / f"source-{i}").write_bytes(b"\x00" + data)
    for i, text in enumerate(generic):
        (seeds / f"text-{i}").write_bytes(b"\x01" + text.encode())
    out.mkdir(parents=True, exist_ok=True)
    counts: Counter = Counter()
    bugs: dict[str, str] = {}
    crashes: list[str] = []
    done, began = 0, time.perf_counter()
    while done < inputs:
        (out / "atheris-counts.json").unlink(missing_ok=True)
        log = subprocess.run(
            [sys.executable, str(HERE), "--atheris-worker", str(out), f"-runs={inputs - done}",
             f"-timeout={int(timeout)}", "-rss_limit_mb=8192", "-max_len=200000", "-seed=1",
             f"-artifact_prefix={out}/", str(seeds)], capture_output=True, text=True)
        counted = out / "atheris-counts.json"
        result = json.loads(counted.read_text()) if counted.exists() else {"counts": {},
                                                                           "bugs": {}}
        counts.update(result["counts"])
        bugs.update(result["bugs"])
        done += max(sum(result["counts"].values()), 1)
        if log.returncode != 0:
            crashes.append(log.stderr[-3000:])
            counts["CRASH"] += 1
    shutil.rmtree(seeds)
    return {"engine": "atheris", "inputs": done, "seconds": round(time.perf_counter() - began, 1),
            "counts": dict(counts), "bugs": bugs, "crashes": crashes}


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        seed, start, stop, progress, out = sys.argv[2:7]
        random_worker(int(seed), int(start), int(stop), Path(progress), Path(out))
        return
    if sys.argv[1:2] == ["--atheris-worker"]:
        atheris_worker([sys.argv[0], *sys.argv[3:]], Path(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=["random", "atheris"], default="random")
    parser.add_argument("--inputs", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds one input may take before it counts as a hang")
    parser.add_argument("--out", type=Path, default=Path("fuzz-findings"),
                        help="where inputs that crash, hang or find a bug are saved")
    parser.add_argument("--replay", type=int, metavar="I",
                        help="run input I of --seed in this process and print its outcome")
    args = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if args.replay is not None:
        target, value, (outcome, error) = replay(args.seed, args.replay)
        print(target, repr(value)[:2000], outcome, sep="\n")
        if error is not None:
            traceback.print_exception(error)
        return
    summary = (run_atheris(args.inputs, args.timeout, args.out) if args.engine == "atheris"
               else run_random(args.inputs, args.seed, args.timeout, args.out))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
