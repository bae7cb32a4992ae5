"""What the passes' tests share: a StableHLO module planned by the passes named, printed as
its decisions (``printer.decisions_text``); a program's generated code with a pass and
without it, and its results against jax.jit both ways."""

from __future__ import annotations

import textwrap
from typing import Callable, Sequence

import jax
import numpy as np

import hlo2dace
from hlo2dace import pipeline
from hlo2dace.optimize import level
from hlo2dace.pipeline import Options
from hlo2dace.printer import decisions_text

from util import assert_arrays_match


def all_passes(stage: str | None = None) -> list[str]:
    """The names of the CPU pipeline's passes at the default level (of one stage)."""
    return [p.name for p in pipeline.cpu_passes(level("default"))
            if stage is None or p.stage == stage]


def planned(source: str, *passes: str, machine=None, optimize: str = "default",
            tidy: bool = True) -> str:
    """The decisions that ``passes`` (and, ``tidy``, ``remove_dead_ops``) make on the
    StableHLO ``source`` (text, dedented), with every other pass switched off."""
    keep = {*passes, *(["remove_dead_ops"] if tidy else [])}
    options = Options(optimize, tuple(p for p in all_passes() if p not in keep), machine)
    lowered = hlo2dace.lower_text(textwrap.dedent(source), optimize=options)
    module, _ = lowered.planned()
    return decisions_text(module.main)


def expect(text: str) -> str:
    """An expected ``planned`` text, written indented in a test."""
    return textwrap.dedent(text).lstrip("\n")


def code_of(fun: Callable, *args, disable: Sequence[str] = ()) -> str:
    """The generated code of ``fun`` (its SDFG's tasklets and library calls, in order)."""
    sdfg = hlo2dace.jit(fun, disable_passes=tuple(disable)).lower(*args).as_sdfg()
    return sdfg.generate_code()[0].clean_code


def built_code(fun: Callable, *args, disable: Sequence[str] = ()) -> str:
    """The C++ files of ``fun``'s compiled program (after the code stage's passes)."""
    from pathlib import Path

    compiled = hlo2dace.jit(fun, disable_passes=tuple(disable)).lower(*args).compile()
    return "\n".join(p.read_text() for p in sorted(Path(compiled.folder).rglob("*.cpp")))


def check_pass(name: str, fun: Callable, *args, rtol: float = 0.0, atol: float = 0.0,
               ulp: float = 0, without: dict | None = None) -> None:
    """``fun`` with the pass ``name`` and without: different generated code, and results
    that match jax.jit's either way (``without``: other tolerances for the results without
    the pass, where XLA computes as the pass does)."""
    with_pass, plain = code_of(fun, *args), code_of(fun, *args, disable=[name])
    assert with_pass != plain, f"{name} changes nothing in this program"
    expected = jax.tree_util.tree_leaves(jax.jit(fun)(*args))
    tolerances = {"rtol": rtol, "atol": atol, "ulp": ulp}
    for disable, tolerance in (((), tolerances), ((name,), without or tolerances)):
        actual = jax.tree_util.tree_leaves(hlo2dace.jit(fun, disable_passes=disable)(*args))
        assert len(actual) == len(expected)
        for e, a in zip(expected, actual):
            assert_arrays_match(e, a, **tolerance)


def operands(*shapes, dtype=np.float32, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for shape in shapes]
