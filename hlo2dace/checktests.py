"""Runs files of StableHLO functions that state their expected results with the ``check``
dialect: the format of the StableHLO interpreter's per-op tests
(``stablehlo/tests/interpret/*.mlir``).

The ``check`` dialect is not registered in jaxlib's MLIR bindings, so each check op is
rewritten, as text, into extra results of its function: ``check.expect_eq_const %x,
dense<...> : T`` becomes a constant ``%__expected_k`` and the function returns both ``%x``
and it; Python then compares the returned arrays the way the check op says.

What the check ops mean follows the interpreter (``stablehlo/tests/CheckOps.cpp`` and
``areApproximatelyEqual`` in ``stablehlo/reference/Element.cpp``):

* ``expect_eq`` / ``expect_eq_const``: element-wise ``==``; for floats IEEE equality
  (``-0.0 == 0.0`` passes, ``NaN == NaN`` fails), complex numbers part by part.
* ``expect_almost_eq`` / ``expect_almost_eq_const``: each float (each part of a complex)
  compares equal, or both are NaN, or both are finite and ``|actual - expected| <=
  tolerance`` (an ABSOLUTE tolerance, default 1e-4, computed in double precision); an
  infinity matches only the same infinity.
* ``expect_close``: ``min_ulp_difference <= ulp(actual, expected) <= max_ulp_difference``,
  where bitwise-equal values and two NaNs are 0 apart, -0.0 and +0.0 are 0 apart, and a
  non-finite value that is not bitwise equal to the other is infinitely far (complex
  numbers: the larger distance of the two parts).
* ``expect_serialized_eq`` compares with files that ``interpreter.probe`` writes: skipped.

Speed: every function of a file is compiled as ONE program (a synthesised entry function
calls each check function; calls are inlined), because one C++ build costs far more than
the ops it contains. When that program does not translate, the functions that fail alone
get their error and the others are combined again; when it does not build or run, the group
is split in halves. A function that fails inside the combined program is run again alone,
so every result is the function's own. Measured on the 104 interpreter files (cold cache,
one process, 2-core machine): 189 s combined against 424 s one program per function
(e.g. iota.mlir, 25 functions: 9.4 s against 40.6 s).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .compare import ulp_distance

SPLIT_MARKER = re.compile(r"^// -----\s*$", re.MULTILINE)
DEFAULT_TOLERANCE = 1e-4  # CheckOps.td: DefaultValuedOptionalAttr<F64Attr, "1e-4">
DEFAULT_MAX_ULP = 1  # CheckOps.td: DefaultValuedAttr<UI64Attr, "1">
ENTRY = "__hlo2dace_checks"

#: ops that need a runtime hlo2dace does not have, and why a function using them is skipped
INTERPRETER_ONLY = {
    "interpreter.run_parallel": "interpreter.run_parallel: runs as an MPI job "
                                "(hlo2dace.paralleltests; tests/test_mpi.py)",
    "interpreter.probe": "interpreter.probe: writes probe files for expect_serialized_eq, not "
                         "a semantic check",
    "check.expect_serialized_eq": "check.expect_serialized_eq: compares with probe files, not "
                                  "a semantic check",
    "stablehlo.infeed": "stablehlo.infeed: host transfers need a multi-process runtime",
    "stablehlo.outfeed": "stablehlo.outfeed: host transfers need a multi-process runtime",
    "stablehlo.send": "stablehlo.send: host transfers need a multi-process runtime",
    "stablehlo.recv": "stablehlo.recv: host transfers need a multi-process runtime",
}
_INTERPRETER_ONLY = re.compile(
    r"(?<![\w.])\"?(" + "|".join(re.escape(k) for k in INTERPRETER_ONLY) + r")\b")
NO_CHECKS_RESULTS = ("no check ops: the interpreter test compares the results it prints with "
                     "FileCheck, which this runner does not reproduce")
NO_CHECKS_ARGUMENTS = ("takes arguments: the interpreter test passes them with --args and "
                       "compares the printout with FileCheck")
CHECK_KINDS = {"expect_eq": "eq", "expect_eq_const": "eq", "expect_almost_eq": "almost_eq",
               "expect_almost_eq_const": "almost_eq", "expect_close": "close"}

_OPEN, _CLOSE = "([{<", ")]}>"


class CheckSyntaxError(ValueError):
    """A check op or function this runner cannot rewrite."""


@dataclass(frozen=True)
class Check:
    """One check op: ``kind`` is ``eq``, ``almost_eq`` or ``close``."""

    kind: str
    tolerance: float = DEFAULT_TOLERANCE
    max_ulp: int = DEFAULT_MAX_ULP
    min_ulp: int = 0
    source: str = ""  # the check op as written (one line), for messages


@dataclass
class CheckFunction:
    """A test function, rewritten: ``text`` is a module holding it (returning an
    (actual, expected) pair per check after its own ``kept_results`` results) and the
    helpers it calls."""

    name: str  # the function's name in the file
    text: str = ""
    checks: list[Check] = field(default_factory=list)
    skip_reason: str | None = None
    id_name: str = ""  # unique in the file: the name, or ``name#2`` for a repeated name
    line: int = 0  # of the ``func.func`` in the file
    piece: int = 0  # index of the ``// -----`` piece
    kept_results: int = 0  # results of its own, before the (actual, expected) pairs
    result_types: list[str] = field(default_factory=list)  # of all results
    #: the rewritten definitions of the function and of the helpers it calls, by name
    definitions: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        self.id_name = self.id_name or self.name


@dataclass(frozen=True)
class CheckResult:
    file: str
    function: str
    status: str  # "pass", "fail", "error", "skip"
    message: str = ""

    @property
    def id(self) -> str:
        return f"{self.file}::{self.function}"


# ------------------------------------------------------------------------- scanning


def mask(text: str, strings: bool = True) -> str:
    """``text`` with comments (and, if ``strings``, the contents of string literals)
    replaced by spaces, so brackets in them do not count; positions are kept."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
        elif ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if strings:
                out[i + 1:min(j, n)] = [" " if c != "\n" else c for c in text[i + 1:j]]
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _is_arrow(code: str, i: int) -> bool:
    return code[i] == ">" and i > 0 and code[i - 1] == "-"


def _match(code: str, i: int, open_: str = "{", close: str = "}") -> int:
    """Index just after the bracket that closes the one at ``i``."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == open_:
            depth += 1
        elif code[j] == close and not (close == ">" and _is_arrow(code, j)):
            depth -= 1
            if depth == 0:
                return j + 1
    raise CheckSyntaxError(f"unbalanced {open_!r} at offset {i}")


def split_top(text: str, separator: str = ",") -> list[str]:
    """Split ``text`` at ``separator`` characters outside any brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE and not _is_arrow(text, i):
            depth -= 1
        elif ch == separator and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _statements(code: str, start: int, end: int) -> list[tuple[int, int]]:
    """Spans of the top-level statements of a region body ``code[start:end]``: a statement
    ends at a newline outside brackets."""
    spans, depth, first = [], 0, None
    for i in range(start, end):
        ch = code[i]
        if first is None and not ch.isspace():
            first = i
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE and not _is_arrow(code, i):
            depth -= 1
        elif ch == "\n" and depth == 0 and first is not None and not _continues(code, first, i):
            spans.append((first, i))
            first = None
    if first is not None and code[first:end].strip():
        spans.append((first, end))
    return spans


def _continues(code: str, first: int, newline: int) -> bool:
    """Whether the statement begun at ``first`` goes on after the newline at ``newline``
    (a line that ends with ``,``, ``=``, ``:`` or ``->``, or a next line that starts with
    ``:`` or ``->``)."""
    before = code[first:newline].rstrip()
    after = code[newline:].lstrip()
    return (before.endswith((",", "=", ":", "->")) or after.startswith((":", "->"))
            or (after.startswith("{") and not before.endswith("{")))


_FUNC = re.compile(r"(?<![\w.])func\.func\s+(?:(?:public|private|nested)\s+)?@")
_SYMBOL = re.compile(r'@("(?:[^"\\]|\\.)*"|[\w.$-]+)')


def _symbol(text: str, at: int) -> tuple[str, int]:
    """The symbol name starting with the ``@`` at ``at`` (unquoted) and its end."""
    found = _SYMBOL.match(text, at)
    if not found:
        raise CheckSyntaxError(f"no symbol name at offset {at}")
    name = found.group(1)
    return (name[1:-1] if name.startswith('"') else name), found.end()


@dataclass
class _FuncDef:
    name: str
    start: int  # of ``func.func``
    end: int  # after the closing brace
    open_brace: int  # of the body
    header: str  # the original text from ``func.func`` to the body's brace
    refs: set[str]  # symbols the function refers to
    line: int  # in the piece, 1-based


def function_definitions(piece: str, code: str) -> list[_FuncDef]:
    functions = []
    position = 0
    while True:
        found = _FUNC.search(code, position)
        if not found:
            return functions
        name, i = _symbol(piece, found.end() - 1)
        # find the body: the first "{" outside brackets not following ``attributes``
        depth = 0
        while i < len(code):
            ch = code[i]
            if ch == "{" and depth == 0:
                if re.search(r"\battributes\s*$", code[found.start():i]):
                    i = _match(code, i)
                    continue
                break
            if ch in _OPEN:
                depth += 1
            elif ch in _CLOSE and not _is_arrow(code, i):
                depth -= 1
            i += 1
        else:
            raise CheckSyntaxError(f"function @{name} has no body")
        end = _match(code, i)
        refs = {_symbol(piece, m.start())[0] for m in _SYMBOL.finditer(code, i, end)}
        functions.append(_FuncDef(name, found.start(), end, i, piece[found.start():i], refs,
                                  piece.count("\n", 0, found.start()) + 1))
        position = end


# ------------------------------------------------------------------ parsing checks


def _attribute_value(text: str) -> str:
    """``0.1 : f64`` -> ``0.1``."""
    return split_top(text, ":")[0].strip()


def parse_check(statement: str):
    """Parse one check op (comments removed, newlines allowed).

    Returns ``(check, actual, expected, constant, type)``: the operand names, ``expected``
    None and ``constant`` the ``dense<...>`` literal for the ``*_const`` forms, and the
    tensor type of the operands."""
    found = re.match(r"\s*\"?check\.(\w+)\"?\s+(.*)$", statement, re.DOTALL)
    if not found:
        raise CheckSyntaxError(f"not a check op: {statement.strip()[:80]}")
    op, rest = found.group(1), " ".join(found.group(2).split())
    if op not in CHECK_KINDS:
        raise CheckSyntaxError(f"unknown check op check.{op}")
    attributes: dict[str, str] = {}
    # attribute dictionaries (``{tolerance = 0.1 : f64}``) outside brackets
    depth, i, kept = 0, 0, []
    while i < len(rest):
        ch = rest[i]
        if ch == "{" and depth == 0:
            end = _match(rest, i)
            for item in split_top(rest[i + 1:end - 1]):
                if item:
                    key, _, value = item.partition("=")
                    attributes[key.strip()] = _attribute_value(value)
            i = end
            continue
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE and not _is_arrow(rest, i):
            depth -= 1
        kept.append(ch)
        i += 1
    rest = "".join(kept).strip()
    items = split_top(rest)
    positional, keyword_items = [], []
    for item in items:
        head = split_top(item, ":")[0]
        (keyword_items if re.match(r"^[A-Za-z_]\w*\s*=", head) else positional).append(item)
    for item in keyword_items:
        key, _, value = item.partition("=")
        attributes[key.strip()] = _attribute_value(value)
    if len(positional) < 2:
        raise CheckSyntaxError(f"check.{op} needs two operands: {rest}")
    actual = split_top(positional[0], ":")[0]
    if op.endswith("_const"):
        parts = split_top(positional[1], ":")
        if len(parts) < 2:
            raise CheckSyntaxError(f"check.{op}: constant without a type: {positional[1]}")
        constant, type_ = parts[0], parts[1]
        expected = None
    else:
        expected, constant = split_top(positional[1], ":")[0], None
        type_ = split_top(split_top(rest, ":")[-1])[0]
    kind = CHECK_KINDS[op]
    try:
        check = Check(kind, float(attributes.get("tolerance", DEFAULT_TOLERANCE)),
                      int(attributes.get("max_ulp_difference", DEFAULT_MAX_ULP)),
                      int(attributes.get("min_ulp_difference", 0)),
                      f"check.{op} {rest}"[:200])
    except ValueError as exc:
        raise CheckSyntaxError(f"check.{op}: bad attribute ({exc})") from None
    if not re.fullmatch(r"%[\w.$-]+(#\d+)?", actual) or (
            expected is not None and not re.fullmatch(r"%[\w.$-]+(#\d+)?", expected)):
        raise CheckSyntaxError(f"check.{op}: operands must be values: {rest}")
    if not type_.startswith("tensor<"):
        raise CheckSyntaxError(f"check.{op}: no tensor type in {rest}")
    return check, actual, expected, constant, type_


# ---------------------------------------------------------------------- rewriting


def declared_result_types(header: str) -> list[str]:
    """The result types (with their attributes) of a function header."""
    code = mask(header)
    arrow = None
    depth = 0
    for i, ch in enumerate(code):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE and not _is_arrow(code, i):
            depth -= 1
        elif ch == "-" and code.startswith("->", i) and depth == 0:
            arrow = i
            break
    if arrow is None:
        return []
    tail = header[arrow + 2:]
    tail = re.split(r"\battributes\b", tail)[0].strip()
    if tail.startswith("(") and _match(tail, 0, "(", ")") == len(tail):
        tail = tail[1:-1]
    return [t for t in split_top(tail) if t]


def _rewrite_function(piece: str, code: str, definition: _FuncDef, function: CheckFunction,
                      first_line: int) -> str:
    """The function's text with its check ops turned into results."""
    body_start, body_end = definition.open_brace + 1, definition.end - 1
    comment_free = mask(piece, strings=False)
    pieces, returned, types, cursor = [], [], [], body_start
    returns = []
    for start, end in _statements(code, body_start, body_end):
        statement = comment_free[start:end]
        head = statement.lstrip('"')
        if head.startswith("check."):
            line = first_line + piece.count("\n", 0, start)
            try:
                check, actual, expected, constant, type_ = parse_check(statement)
            except CheckSyntaxError as exc:
                raise CheckSyntaxError(f"line {line}: {exc}") from None
            pieces.append(piece[cursor:start])
            if constant is not None:
                expected = f"%__expected_{len(function.checks)}"
                pieces.append(f"{expected} = stablehlo.constant {constant} : {type_}")
            cursor = end
            function.checks.append(check)
            returned += [actual, expected]
            types += [type_, type_]
        elif re.match(r"(func\.)?return\b", head):
            returns.append((start, end))
        elif "check." in statement and re.search(r"(?<![\w.])\"?check\.\w+", statement):
            raise CheckSyntaxError("a check op inside a region cannot become a result")
    if len(returns) != 1:
        raise CheckSyntaxError(f"{len(returns)} top-level returns")
    start, end = returns[0]
    original = " ".join(comment_free[start:end].split())
    operands = re.sub(r"^(func\.)?return\b", "", original).strip()
    kept_values, kept_types = [], []
    if operands:
        values, _, kept = operands.partition(":")
        kept_values, kept_types = split_top(values), split_top(kept)
    function.kept_results = len(kept_values)
    pieces.append(piece[cursor:start])
    pieces.append(_return(kept_values + returned, kept_types + types))
    pieces.append(piece[end:body_end])
    function.result_types = kept_types + types
    header_types = declared_result_types(definition.header)
    if len(header_types) != len(kept_types):
        raise CheckSyntaxError("the header and the return disagree on the results")
    header = _set_results(definition.header, header_types + types)
    return header + "{" + "".join(pieces) + "}"


def _return(values: Sequence[str], types: Sequence[str]) -> str:
    if not values:
        return "func.return"
    return f"func.return {', '.join(values)} : {', '.join(types)}"


def argument_list(header: str) -> str:
    """The argument list of a function header, without its parentheses."""
    code = mask(header)
    name_end = _symbol(header, code.index("@"))[1]
    open_ = code.index("(", name_end)
    return header[open_ + 1:_match(code, open_, "(", ")") - 1].strip()


def _set_results(header: str, types: Sequence[str]) -> str:
    code = mask(header)
    name_end = _symbol(header, code.index("@"))[1]
    arguments_end = _match(code, name_end, "(", ")")
    attributes = re.search(r"\battributes\b", code[arguments_end:])
    suffix = header[arguments_end + attributes.start():] if attributes else " "
    return f"{header[:arguments_end]} -> ({', '.join(types)}) {suffix.strip()} "


def rename_symbols(text: str, names: dict[str, str]) -> str:
    """Replace the symbols ``@old`` of ``names`` by ``@new``."""
    code = mask(text)

    def replace(found):
        if code[found.start()] != "@":
            return found.group(0)
        name = found.group(1)
        name = name[1:-1] if name.startswith('"') else name
        return f"@{names[name]}" if name in names else found.group(0)

    return _SYMBOL.sub(replace, text)


def rewrite_piece(piece: str, piece_index: int = 0, first_line: int = 1) -> list[CheckFunction]:
    """The test functions of one ``// -----`` piece: every function that no other function
    of the piece refers to, rewritten when it has check ops, skipped (with the reason)
    when it needs a runtime hlo2dace lacks or has no check ops."""
    code, comment_free = mask(piece), mask(piece, strings=False)
    try:
        definitions = function_definitions(piece, code)
    except CheckSyntaxError as exc:
        return [CheckFunction(f"piece{piece_index}", line=first_line, piece=piece_index,
                              skip_reason=f"cannot find the functions of this piece: {exc}")]
    by_name = {d.name: d for d in definitions}
    referenced = set().union(*(d.refs - {d.name} for d in definitions)) if definitions else set()

    def reachable(name: str) -> list[str]:
        seen, stack = [], [name]
        while stack:
            current = stack.pop()
            if current in seen or current not in by_name:
                continue
            seen.append(current)
            stack.extend(sorted(by_name[current].refs))
        return seen

    functions = []
    for definition in definitions:
        if definition.name in referenced:
            continue  # a helper: runs as part of the functions that call it
        line = first_line + definition.line - 1
        function = CheckFunction(definition.name, line=line, piece=piece_index)
        functions.append(function)
        names = reachable(definition.name)
        for name in names:
            helper = by_name[name]
            used = _INTERPRETER_ONLY.search(comment_free, helper.open_brace, helper.end)
            if used:
                function.skip_reason = INTERPRETER_ONLY[used.group(1)]
                break
        if function.skip_reason:
            continue
        if argument_list(definition.header):
            function.skip_reason = NO_CHECKS_ARGUMENTS
            continue
        if not re.search(r"(?<![\w.])\"?check\.\w+", code[definition.open_brace:definition.end]):
            if declared_result_types(definition.header):
                function.skip_reason = NO_CHECKS_RESULTS
                continue
            # like the interpreter's test, passes when it runs: nothing to compare
        try:
            rewritten = _rewrite_function(piece, code, definition, function, first_line)
        except CheckSyntaxError as exc:
            function.skip_reason = f"cannot rewrite the check ops: {exc}"
            function.checks.clear()
            continue
        function.definitions = {definition.name: rewritten}
        for name in names[1:]:
            function.definitions[name] = piece[by_name[name].start:by_name[name].end]
        function.text = "module {\n" + "\n\n".join(function.definitions.values()) + "\n}\n"
    return functions


def load_text(text: str) -> list[CheckFunction]:
    """The test functions of a file's text, in order, with unique ``id_name``s."""
    functions: list[CheckFunction] = []
    line, position = 1, 0
    pieces = []
    for separator in SPLIT_MARKER.finditer(text):
        pieces.append((text[position:separator.start()], line))
        line += text.count("\n", position, separator.end())
        position = separator.end()
    pieces.append((text[position:], line))
    for index, (piece, first_line) in enumerate(pieces):
        functions += rewrite_piece(piece, index, first_line)
    counts: dict[str, int] = {}
    for function in functions:
        counts[function.name] = counts.get(function.name, 0) + 1
        if counts[function.name] > 1:
            function.id_name = f"{function.name}#{counts[function.name]}"
    return functions


def load_file(path: Path) -> list[CheckFunction]:
    return load_text(Path(path).read_text())


def combined_module(functions: Sequence[CheckFunction]) -> str:
    """One module in which ``@__hlo2dace_checks`` calls every function (and returns all their
    results); each piece's symbols get a prefix, as pieces may reuse names."""
    definitions: dict[str, str] = {}
    calls, returned, types = [], [], []
    for k, function in enumerate(functions):
        prefix = f"p{function.piece}__"
        renames = {name: prefix + name for name in function.definitions}
        for name, text in function.definitions.items():
            definitions.setdefault(prefix + name, rename_symbols(text, renames))
        result_types = function.result_types
        count = len(result_types)
        value = f"%r{k}"
        assign = f"{value}{f':{count}' if count > 1 else ''} = " if count else ""
        calls.append(f"  {assign}func.call @{renames[function.name]}() : () -> "
                     f"({', '.join(result_types)})")
        returned += [f"{value}#{i}" for i in range(count)] if count > 1 else [value] * count
        types += result_types
    entry = (f"func.func @{ENTRY}() -> ({', '.join(types)}) {{\n" + "\n".join(calls)
             + f"\n  {_return(returned, types)}\n}}")
    return "module {\n" + "\n\n".join(list(definitions.values()) + [entry]) + "\n}\n"


# --------------------------------------------------------------------- comparing


def _is_float(dtype: np.dtype) -> bool:
    if dtype.kind == "f":
        return True
    if dtype.kind == "V":
        try:
            import ml_dtypes

            ml_dtypes.finfo(dtype)
            return True
        except Exception:
            return False
    return False


def ulp_difference(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """ULP distance as the interpreter's ``expect_close`` counts it (float64 array; inf
    for a non-finite value against anything but itself or, for NaN, another NaN)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.dtype.kind == "c":
        return np.maximum(ulp_difference(actual.real, expected.real),
                          ulp_difference(actual.imag, expected.imag))
    distance = np.asarray(ulp_distance(actual, expected), dtype=np.float64)
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    bitwise = (np.ascontiguousarray(actual).view(f"u{actual.dtype.itemsize}")
               == np.ascontiguousarray(expected).view(f"u{expected.dtype.itemsize}"))
    both_nan = np.isnan(a) & np.isnan(e)
    non_finite = ~np.isfinite(a) | ~np.isfinite(e)
    distance = np.where(non_finite, np.inf, distance)
    return np.where(bitwise | both_nan, 0.0, distance)


def _ieee_equal(a: np.ndarray, e: np.ndarray) -> np.ndarray:
    return a == e


def _almost_equal(a: np.ndarray, e: np.ndarray, tolerance: float) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        both_finite = np.isfinite(a) & np.isfinite(e)
        close = both_finite & (np.abs(a - e) <= tolerance)
    return (a == e) | (np.isnan(a) & np.isnan(e)) | close


def check_values(check: Check, actual: np.ndarray, expected: np.ndarray) -> str | None:
    """None when ``actual`` passes ``check`` against ``expected``, else why not (the
    interpreter's semantics, see the module's docstring)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        return f"shape {actual.shape} != expected {expected.shape}"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != expected {expected.dtype}"
    complex_ = actual.dtype.kind == "c"
    floating = complex_ or _is_float(actual.dtype)
    detail = ""
    if floating and check.kind == "close":
        distance = ulp_difference(actual, expected)
        bad = (distance > check.max_ulp) | (distance < check.min_ulp)
        detail = (f" (ULP limits [{check.min_ulp}, {check.max_ulp}], largest distance "
                  f"{np.max(distance, initial=0)})")
    elif floating:
        wide = np.float64
        if complex_:
            parts = [(actual.real.astype(wide), expected.real.astype(wide)),
                     (actual.imag.astype(wide), expected.imag.astype(wide))]
        else:
            parts = [(actual.astype(wide), expected.astype(wide))]
        if check.kind == "eq":
            good = np.logical_and.reduce([_ieee_equal(a, e) for a, e in parts])
        else:
            good = np.logical_and.reduce([_almost_equal(a, e, check.tolerance)
                                          for a, e in parts])
            detail = f" (absolute tolerance {check.tolerance:g})"
        bad = ~good
    else:
        bad = actual != expected
    bad = np.atleast_1d(bad)
    if not np.any(bad):
        return None
    where = np.argwhere(bad)
    first = tuple(where[0])
    got, want = np.atleast_1d(actual)[first], np.atleast_1d(expected)[first]
    return (f"{int(np.sum(bad))} of {actual.size} elements differ{detail}, first at "
            f"{list(map(int, first))}: got {got!r}, expected {want!r}")


# ----------------------------------------------------------------------- running


def _sdfg_name(text: str) -> str:
    name = re.sub(r"\W", "_", text)
    return name if name[:1].isalpha() else f"f_{name}"


def error_text(exc: BaseException) -> str:
    from .errors import Hlo2DaceError

    kind = type(exc).__name__
    if not isinstance(exc, Hlo2DaceError):
        kind = f"internal error: {kind}"
    message = str(exc).strip().splitlines()
    text = message[0] if message else ""
    if len(message) > 1:
        # a compiler's first error line says more than DaCe's summary
        first_error = next((line for line in message[1:] if "error:" in line), None)
        text += f" {first_error.split('error:', 1)[1].strip()}" if first_error else " ..."
    return f"{kind}: {text}"[:500]


def judge(file: str, function: CheckFunction, outputs: Sequence[np.ndarray]) -> CheckResult:
    failures = []
    values = list(outputs)[function.kept_results:]
    if len(values) != 2 * len(function.checks):
        return CheckResult(file, function.id_name, "error",
                           f"{len(values)} results for {len(function.checks)} checks")
    for k, check in enumerate(function.checks):
        problem = check_values(check, values[2 * k], values[2 * k + 1])
        if problem:
            failures.append(f"check {k} ({check.source.split(',')[0]}): {problem}")
    if failures:
        return CheckResult(file, function.id_name, "fail", "; ".join(failures))
    return CheckResult(file, function.id_name, "pass")


def run_function(function: CheckFunction, file: str = "") -> CheckResult:
    """Compile and run one function on its own."""
    from .api import lower_text

    if function.skip_reason:
        return CheckResult(file, function.id_name, "skip", function.skip_reason)
    try:
        compiled = lower_text(function.text, name=_sdfg_name(function.name),
                              entry=function.name).compile()
        outputs = compiled.call_flat([])
    except Exception as exc:
        return CheckResult(file, function.id_name, "error", error_text(exc))
    return judge(file, function, outputs)


def _run_combined(functions: Sequence[CheckFunction], group: Sequence[int], file: str,
                  results: dict[int, CheckResult]) -> None:
    """Run the functions ``group`` (indices into ``functions``) as one program and fill
    ``results``. When that fails: functions that do not translate on their own get their
    error, the rest is run again; a failure to build or run splits the group in halves."""
    from .api import lower_text
    from .errors import CompilationError

    if len(group) == 1:
        results[group[0]] = run_function(functions[group[0]], file)
        return
    try:
        text = combined_module([functions[k] for k in group])
        compiled = lower_text(text, name=_sdfg_name(f"checks_{file}"), entry=ENTRY).compile()
        outputs = compiled.call_flat([])
    except Exception as exc:
        if not isinstance(exc, CompilationError):
            good = []
            for k in group:
                try:
                    lower_text(functions[k].text, name=_sdfg_name(functions[k].name),
                               entry=functions[k].name).as_sdfg()
                    good.append(k)
                except Exception as alone:
                    results[k] = CheckResult(file, functions[k].id_name, "error", error_text(alone))
            if len(good) < len(group):
                if good:
                    _run_combined(functions, good, file, results)
                return
        half = len(group) // 2
        _run_combined(functions, group[:half], file, results)
        _run_combined(functions, group[half:], file, results)
        return
    position = 0
    for k in group:
        count = len(functions[k].result_types)
        result = judge(file, functions[k], outputs[position:position + count])
        position += count
        if result.status != "pass":
            # confirm on its own: a failure must not come from sharing a program
            alone = run_function(functions[k], file)
            if alone.status == "pass":
                alone = CheckResult(file, functions[k].id_name, "pass",
                                    f"passes alone, but failed in the file's combined program: "
                                    f"{result.message}")
            result = alone
        results[k] = result


def run_functions(functions: Sequence[CheckFunction], file: str = "",
                  combine: bool = True) -> list[CheckResult]:
    """Run ``functions`` (one result each, in order). With ``combine``, the runnable ones
    are built as one program (see ``_run_combined``), else each on its own."""
    results: dict[int, CheckResult] = {}
    runnable = []
    for k, function in enumerate(functions):
        if function.skip_reason:
            results[k] = CheckResult(file, function.id_name, "skip", function.skip_reason)
        else:
            runnable.append(k)
    if combine and runnable:
        _run_combined(functions, runnable, file, results)
    for k in runnable:
        if k not in results:
            results[k] = run_function(functions[k], file)
    return [results[k] for k in range(len(functions))]


def run_file(path: Path, combine: bool = True) -> list[CheckResult]:
    """One ``CheckResult`` per test function of the file, in order."""
    return run_functions(load_file(path), Path(path).name, combine)
