"""Rewrites of the C++ file DaCe generates for a program: split into translation units
that the compiler builds in parallel, and the program's arrays reached through restricted
local pointers so that GCC vectorises the loops over them.

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

DaCe keeps the program's arrays (transients that live as long as the program) as fields of
its state struct, and the code reaches them as ``__state->__0_x[i]``. GCC does not take
the fields' ``__restrict__`` into account, least of all in the functions OpenMP outlines:
there it reloads each pointer in every iteration and leaves a loop over several arrays
scalar (``no vectype for stmt``). ``restrict_state_pointers`` copies each field a function
uses into a ``const __restrict__`` local at the function's start. That is what the fields
already promise: DaCe allocates each array once (``__dace_init``), apart from the others,
and never reassigns it while the program runs. A field that the file assigns or reaches
anywhere else is left as it is. A field of ``bool`` elements that a function only indexes
is read and written as bytes there (``_local``): GCC does not vectorise a loop that selects
by a mask read from a ``bool`` array.
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


def program_files(code: str, program: str, parts: int | None = None) -> Split:
    """``code`` (DaCe's file for the program named ``program``) split as ``split`` does
    where it can, each function's state pointers restricted (``restrict_state_pointers``)."""
    cut = split(code, program, parts)
    if cut is None:
        return Split(restrict_state_pointers(code, [f"__program_{program}_internal"]), ())
    return Split(cut.main, tuple(restrict_state_pointers(part, [f"__h2d_part{k}_{program}"])
                                 for k, part in enumerate(cut.parts)))


def split(code: str, program: str, parts: int | None = None) -> Split | None:
    """``code`` (DaCe's file for the program named ``program``) as a main file and
    ``parts`` part files (default: by size, ``MIN_PART_CHARS`` each, at most ``MAX_PARTS``);
    None where it stays one file."""
    function = f"__program_{program}_internal"
    start = code.find(f"void {function}(")
    if start < 0:
        return None
    tokens = _Tokens(code, start + len(f"void {function}"))
    close_paren = tokens.closing(0)
    body_open = close_paren + 1
    if close_paren < 0 or body_open >= len(tokens.kinds) or tokens.kinds[body_open] != "{":
        return None
    body_close = tokens.closing(body_open)
    if body_close < 0 or "goto" in tokens.kinds[body_open:body_close]:
        return None
    blocks = tokens.units(body_open + 1, body_close)
    if blocks is None:
        return None
    size = sum(end - begin for begin, end in blocks)
    count = parts or min(MAX_PARTS, size // MIN_PART_CHARS)
    count = min(count, len(blocks))
    if count < 2:
        return None
    parameters = code[tokens.positions[0] + 1:tokens.positions[close_paren]]
    names = _parameter_names(parameters)
    if names is None:
        return None
    prelude, epilogue = code[:start], code[tokens.positions[body_close] + 1:]
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


def restrict_state_pointers(code: str, functions: list[str]) -> str:
    """``code`` with the state's array pointers that ``functions`` (names defined in
    ``code``) use read through ``const __restrict__`` locals of each function."""
    struct = _STATE_STRUCT.search(code)
    if struct is None:
        return code
    fields = {name: pointer for pointer, name in _STATE_FIELD.findall(struct.group(1))}
    spans = _bodies(code)
    bodies = sorted(spans[f] for f in functions if f in spans)
    # DaCe's allocation and release of the arrays
    allocation = [span for name, span in spans.items() if _ALLOCATING.match(name)]
    elsewhere = set()  # fields assigned, or reached outside the bodies and the allocation
    for access in _STATE_ACCESS.finditer(code):
        at = access.start()
        inside = any(begin <= at < end for begin, end in bodies)
        field_address = code[at - 1] == "&" and not code.startswith("[", access.end())
        if (inside and (field_address or _ASSIGNED.match(code, access.end()))) or not (
                inside or any(begin <= at < end for begin, end in allocation)):
            elsewhere.add(access.group(1))
    restricted = set(fields) - elsewhere
    rewritten, done = [], 0
    for begin, end in bodies:
        body = code[begin:end]
        used = [name for name in fields if name in restricted and f"__state->{name}" in body]
        if used:
            declarations = "".join(_local(name, fields[name], body) for name in used)
            body = re.sub(r"__state->(\w+)\b", lambda m: f"__h2d_{m.group(1)}"
                          if m.group(1) in restricted else m.group(0), body)
            body = declarations + body
        rewritten += [code[done:begin], body]
        done = end
    return "".join(rewritten) + code[done:]


def _local(name: str, pointer: str, body: str) -> str:
    """The restricted local through which ``body`` reaches the state's field ``name``: of
    the field's type, or for an array of ``bool`` that ``body`` only indexes, a pointer to
    its bytes. GCC 12 vectorises no loop that reads a ``bool`` array into a mask beside
    wider elements (a select of doubles or complex numbers by a carried mask), and does
    when the bytes are read (``uint8_t``; a ``bool`` holds 0 or 1, and a byte may alias
    anything)."""
    uses = list(re.finditer(rf"__state->{name}\b", body))
    if _BOOL_POINTER.match(pointer) and all(
            body.startswith("[", use.end()) and body[use.start() - 1] != "&" for use in uses):
        return (f"\n    uint8_t * __restrict__ const __h2d_{name} = "
                f"reinterpret_cast<uint8_t *>(__state->{name});")
    return f"\n    {pointer} __restrict__ const __h2d_{name} = __state->{name};"


#: DaCe's state struct, its array fields, the accesses to them, and the functions that
#: allocate and free them
_STATE_STRUCT = re.compile(r"^struct \w+_state_t \{(.*?)^\};", re.S | re.M)
_STATE_FIELD = re.compile(r"^\s*([\w:<>, ]+?\s*\*)\s*__restrict__\s+(\w+);", re.M)
_STATE_ACCESS = re.compile(r"__state->(\w+)\b")
_ASSIGNED = re.compile(r"\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)")
_ALLOCATING = re.compile(r"__dace_(?:init|exit)_")
_DEFINITION = re.compile(r"\b(\w+)\s*\($")
_BOOL_POINTER = re.compile(r"bool\s*\*$")


def _bodies(code: str) -> dict[str, tuple[int, int]]:
    """The functions defined at the top level of ``code``, each with the text positions
    just inside its body's braces."""
    tokens = _Tokens(code, 0)
    found, index = {}, 0
    while index < len(tokens.kinds):
        if tokens.kinds[index] not in ("{", "("):
            index += 1
            continue
        close = tokens.closing(index)
        if close < 0:
            break  # unbalanced: the rest is not read
        if tokens.kinds[index] == "(" and close + 1 < len(tokens.kinds) \
                and tokens.kinds[close + 1] == "{":
            at = tokens.positions[index] + 1
            name = _DEFINITION.search(code, max(0, at - 256), at)
            body_close = tokens.closing(close + 1)
            if name is not None and body_close > 0:
                found[name.group(1)] = (tokens.positions[close + 1] + 1,
                                        tokens.positions[body_close])
                close = body_close
        index = close + 1
    return found


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


#: comments, string and character literals (skipped), brackets, ``goto``, and runs of
#: anything else
_TOKEN = re.compile(r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'"""
                    r"|(?P<bracket>[{}()])|(?P<goto>\bgoto\b)|(?P<other>[^\s{}()/\"']+|/)",
                    re.S)


class _Tokens:
    """The brackets, ``goto``s and other statements' text of ``code`` from ``start``
    (comments and literals skipped), with the matching of the brackets."""

    def __init__(self, code: str, start: int):
        self.kinds: list[str] = []
        self.positions: list[int] = []
        self.match: dict[int, int] = {}
        stack: list[int] = []
        for token in _TOKEN.finditer(code, start):
            kind = token.lastgroup
            if kind is None:
                continue  # a comment or a literal
            text = token.group(kind) if kind == "bracket" else kind
            if text in "{(":
                stack.append(len(self.kinds))
            elif text in "})":
                if not stack:
                    break
                self.match[stack.pop()] = len(self.kinds)
            self.kinds.append(text)
            self.positions.append(token.start())

    def closing(self, index: int) -> int:
        """The index of the bracket closing the one at ``index``, -1 if none."""
        return self.match.get(index, -1)

    def units(self, begin: int, end: int) -> list[tuple[int, int]] | None:
        """The statements between tokens ``begin`` and ``end`` as text positions (start,
        end) if each is a brace block, else None; a block that holds only brace blocks (a
        state: one block per map) is replaced by those: ``{ {a} {b} }`` runs as
        ``{a} {b}``."""
        units = []
        index = begin
        while index < end:
            if self.kinds[index] != "{":
                return None
            close = self.closing(index)
            if close < 0 or close >= end:
                return None
            inner = self.units(index + 1, close)
            units.extend(inner if inner else
                         [(self.positions[index], self.positions[close] + 1)])
            index = close + 1
        return units
