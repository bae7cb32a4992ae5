"""The error types of hlo2dace: every failure a user can cause is one of these."""

from __future__ import annotations

from typing import Iterable


class Hlo2DaceError(Exception):
    """Base class of every error hlo2dace raises on purpose."""


class ParseError(Hlo2DaceError):
    """Text or bytes that are not a StableHLO module hlo2dace can read."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None,
                 context: str = ""):
        self.line, self.column, self.context = line, column, context
        where = f" at line {line}, column {column}" if line is not None else ""
        text = f"{message}{where}"
        if context:
            text += f"\n{context}"
        super().__init__(text)


def pointed_line(text: str, line: int | None, column: int | None) -> str:
    """The offending line with a caret under the column (long lines are cut around it)."""
    if line is None or line < 1:
        return ""
    lines = text.split("\n")
    if line > len(lines):
        return ""
    source = lines[line - 1].rstrip("\r")
    col = max(1, column or 1)
    start = 0
    if len(source) > 100:
        start = max(0, col - 50)
        source = source[start:start + 100]
    return f"{source}\n{' ' * (col - 1 - start)}^"


class UnsupportedError(Hlo2DaceError):
    """An op, attribute or type that hlo2dace does not translate (yet).

    The message names the op, where it came from, why, and what is supported instead.
    """

    def __init__(self, op: str, reason: str, location: object = None,
                 supported: Iterable[str] | None = None):
        self.op, self.reason, self.location = op, reason, location
        self.supported = tuple(supported) if supported is not None else None
        text = f"`{op}`"
        if location is not None and str(location) != "unknown location":
            text += f" at {location}"
        text += f": {reason}"
        if self.supported:
            text += "; supported: " + ", ".join(self.supported)
        super().__init__(text)


class ArgumentError(Hlo2DaceError, TypeError):
    """Arguments at call time that do not match the compiled signature."""


class TransformationError(Hlo2DaceError):
    """A user's transformation of a program's SDFG raised, or left an SDFG that DaCe finds
    invalid or hlo2dace cannot build (``user_sdfg.py``)."""


class CompilationError(Hlo2DaceError):
    """DaCe or the C++ compiler failed on a translated program (a bug of hlo2dace)."""


class JobSizeError(Hlo2DaceError):
    """A program made for a number of processes, run in an MPI job of another size (or in
    no job): the message names the command to launch."""

    def __init__(self, message: str, processes: int):
        super().__init__(message)
        #: the number of processes the program runs on
        self.processes = processes
