"""Generated C++ written through one small writer: statements, blocks and loops, indented
as they nest. Translators whose tasklets run loops of their own (reductions, scatters,
convolutions, sorts, products) open blocks and loops with ``with``, so the nesting of the
Python is the nesting of the C++ and no closing brace is counted by hand."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterable, Iterator


@dataclass(frozen=True)
class Loop:
    """``for (int64_t variable = first; variable < end; variable += step)`` (``>`` for a
    negative step): C++ expressions, 64-bit so that arrays past 2^31 elements are indexed
    right."""

    variable: str
    first: str
    end: str
    step: int = 1

    def header(self) -> str:
        v = self.variable
        advance = {1: f"++{v}", -1: f"--{v}"}.get(self.step, f"{v} += {self.step}")
        test = "<" if self.step > 0 else ">"
        return f"for (int64_t {v} = {self.first}; {v} {test} {self.end}; {advance})"


def on_grid(position: str, count: int | str, step: int = 1) -> str:
    """C++: whether the 64-bit ``position`` is one of ``0, step, ..., (count - 1) * step``
    (an element of an array of ``count``, not padding, not a dilation hole), its range as
    one unsigned comparison: with two signed ones GCC vectorised a padding map over
    64 x 64 floats into a loop 12 times slower (3.6 against 0.3 us)."""
    if count == 0:
        return "false"
    last = (count - 1) * step if isinstance(count, int) else f"(({count}) - 1) * {step}"
    test = f"(uint64_t)({position}) <= (uint64_t)({last})"
    return test if step == 1 else f"{test} && ({position}) % {step} == 0"


class Writer:
    """C++ statements for one tasklet or helper."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._depth = 0

    def line(self, *statements: str) -> None:
        """Append statements (each may span lines) at the current depth."""
        for statement in statements:
            for text in statement.splitlines():
                self._lines.append("    " * self._depth + text)

    def lines(self, statements: Iterable[str]) -> None:
        self.line(*statements)

    @contextlib.contextmanager
    def block(self, header: str, end: str = "}") -> Iterator[None]:
        """``header { ... }``: ``if (...)``, ``for (...)``, ``""`` for a bare scope; ``end``
        closes it (``"};"`` after a lambda's body)."""
        self.line(f"{header} {{" if header else "{")
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            self.line(end)

    @contextlib.contextmanager
    def loops(self, *loops: Loop, scalar: bool = False) -> Iterator[None]:
        """Nested loops, outermost first. ``scalar``: the innermost body begins with
        ``h2d::scalar_loop()``, which keeps GCC from vectorising the map's loop across
        the nest (see include/h2d/core.h)."""
        with contextlib.ExitStack() as stack:
            for loop in loops:
                stack.enter_context(self.block(loop.header()))
            if scalar:
                self.line("h2d::scalar_loop();")
            yield

    def text(self) -> str:
        return "\n".join(self._lines)
