"""Splits the C++ file DaCe generates for a program into translation units that the
compiler builds in parallel.

DaCe writes a program as one file: includes, the state struct and the global code (the
prelude), then one function, ``__program_<name>_internal``, whose body holds the code of
every state in order, one brace block per state, then the exported entry points. GCC's
time on one function grows faster than its size, and one file keeps one core busy. So the
body's blocks are cut into parts of about equal size; each part becomes a function of the
same parameters in a file of its own (the prelude, then the function), and the body calls
the parts in order. The parts run the same statements in the same order on the same
pointers: results are the same bits.

A body is split only when every statement at its top level is a brace block: a local
variable declared outside a block (a symbol set between states, an array sized at run
time) would be needed by more than one part, and a ``goto`` cannot leave a function.
Anything else stays one file. The prelude is header-only C++ (inline functions and
variables, templates), so it may be compiled into every part; the parts are hidden symbols
of the library, so two programs loaded in one process never call each other's parts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: a part of the body is at least this many characters of C++ (smaller programs are one
#: file: each further file costs its compiler a parse of the prelude)
MIN_PART_CHARS = 60_000
#: at most this many parts: the compiler's jobs are few, and each part parses the prelude
MAX_PARTS = 8


@dataclass(frozen=True)
class Split:
    """The program's main file and the files of its parts."""

    main: str
    parts: tuple[str, ...]


def split(code: str, program: str, parts: int | None = None) -> Split | None:
    """``code`` (DaCe's file for the program named ``program``) as a main file and
    ``parts`` part files (default: by size, ``MIN_PART_CHARS`` each, at most ``MAX_PARTS``);
    None where it stays one file."""
    function = f"__program_{program}_internal"
    start = code.find(f"void {function}(")
    if start < 0:
        return None
    open_paren = start + len(f"void {function}")
    close_paren = _matching(code, open_paren)
    body_open = code.find("{", close_paren)
    if close_paren < 0 or body_open < 0 or code[close_paren + 1:body_open].strip():
        return None
    body_close = _matching(code, body_open)
    if body_close < 0:
        return None
    blocks = _units(code, body_open + 1, body_close)
    if blocks is None:
        return None
    size = sum(end - begin for begin, end in blocks)
    count = parts or min(MAX_PARTS, size // MIN_PART_CHARS)
    count = min(count, len(blocks))
    if count < 2:
        return None
    parameters = code[open_paren + 1:close_paren]
    names = _parameter_names(parameters)
    if names is None:
        return None
    prelude, epilogue = code[:start], code[body_close + 1:]
    groups = _groups(blocks, size, count)
    declarations, calls, files = [], [], []
    for k, group in enumerate(groups):
        name = f"__h2d_part{k}_{program}"
        signature = f'__attribute__((visibility("hidden"))) void {name}({parameters})'
        declarations.append(f"{signature};")
        calls.append(f"    {name}({', '.join(names)});")
        statements = "\n".join(code[begin:end] for begin, end in group)
        files.append(f"{prelude}{signature}\n{{\n{statements}\n}}\n")
    main = (f"{prelude}" + "\n".join(declarations) + f"\n\nvoid {function}({parameters})\n"
            "{\n" + "\n".join(calls) + "\n}" + epilogue)
    return Split(main, tuple(files))


def _groups(blocks: list[tuple[int, int]], size: int, count: int
            ) -> list[list[tuple[int, int]]]:
    """``blocks`` in ``count`` consecutive groups of about ``size / count`` characters."""
    groups: list[list[tuple[int, int]]] = [[]]
    done = 0
    for begin, end in blocks:
        if groups[-1] and len(groups) < count and done >= size * len(groups) / count:
            groups.append([])
        groups[-1].append((begin, end))
        done += end - begin
    return groups


_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def _parameter_names(parameters: str) -> list[str] | None:
    """The names of a parameter list's parameters (the last identifier of each), or None
    where it is not a plain list (templates, function pointers)."""
    if any(c in parameters for c in "<>()[]"):
        return None
    names = []
    for parameter in parameters.split(","):
        found = _IDENTIFIER.findall(parameter)
        if not found:
            return None
        names.append(found[-1])
    return names


def _units(code: str, begin: int, end: int) -> list[tuple[int, int]] | None:
    """The brace blocks of ``code[begin:end]`` (``_blocks``), a block that holds only brace
    blocks (a state: one block per map) replaced by those: ``{ {a} {b} }`` runs as
    ``{a} {b}``."""
    blocks = _blocks(code, begin, end)
    if blocks is None:
        return None
    units = []
    for start, stop in blocks:
        inner = _units(code, start + 1, stop - 1)
        units.extend(inner if inner else [(start, stop)])
    return units


def _blocks(code: str, begin: int, end: int) -> list[tuple[int, int]] | None:
    """The top-level statements of ``code[begin:end]`` as (start, end) positions if each
    is a brace block, else None (or where the code holds a ``goto``)."""
    blocks = []
    position = begin
    while True:
        position = _skip_blank(code, position, end)
        if position >= end:
            return blocks
        if code[position] != "{":
            return None
        close = _matching(code, position)
        if close < 0 or close >= end:
            return None
        if re.search(r"\bgoto\b", _code_only(code[position:close])):
            return None
        blocks.append((position, close + 1))
        position = close + 1


def _skip_blank(code: str, position: int, end: int) -> int:
    """The first position from ``position`` that is neither white space nor a comment."""
    while position < end:
        if code[position].isspace():
            position += 1
        elif code.startswith("//", position):
            newline = code.find("\n", position)
            position = end if newline < 0 else newline + 1
        elif code.startswith("/*", position):
            close = code.find("*/", position + 2)
            position = end if close < 0 else close + 2
        else:
            break
    return position


def _matching(code: str, position: int) -> int:
    """The position of the bracket closing the one at ``position`` (braces or
    parentheses), skipping comments, strings and character literals; -1 if none."""
    opening = code[position]
    closing = {"{": "}", "(": ")"}[opening]
    depth = 0
    i, n = position, len(code)
    while i < n:
        c = code[i]
        if c == "/" and code.startswith("//", i):
            newline = code.find("\n", i)
            i = n if newline < 0 else newline + 1
            continue
        if c == "/" and code.startswith("/*", i):
            close = code.find("*/", i + 2)
            i = n if close < 0 else close + 2
            continue
        if c in "\"'":
            i = _end_of_literal(code, i)
            continue
        if c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _end_of_literal(code: str, i: int) -> int:
    """The position after the string or character literal that begins at ``i``."""
    quote = code[i]
    if quote == "'" and i > 0 and (code[i - 1].isalnum()):
        return i + 1  # a digit separator (1'000), not a character literal
    i += 1
    while i < len(code) and code[i] != quote:
        i += 2 if code[i] == "\\" else 1
    return i + 1


def _code_only(text: str) -> str:
    """``text`` without comments and literals (for searching keywords)."""
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"', " ", text, flags=re.S)
