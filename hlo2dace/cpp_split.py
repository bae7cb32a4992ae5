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

A body is split only when every statement at its top level is a brace block, or a loop or
conditional of the program's control flow whose bodies are blocks, and where each local
declared at the top level without a value (a loop's counter) is used by one statement,
whose part then declares it: a symbol set between states, or an array sized at run time,
would be needed by more than one part, and a ``goto`` cannot leave a function. Anything
else stays one file. A block that repeats, on other arrays, the code of one before
it (Python unrolls a model's layers, so a 12-layer transformer's step holds each of its 73
distinct loops a dozen times) becomes a function compiled once, which each occurrence
calls (``_Sharing``). The prelude is header-only C++ (inline functions and
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

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

#: a part of the body is at least this many characters of C++ (smaller programs are one
#: file: each further file costs its compiler a parse of the prelude)
MIN_PART_CHARS = 60_000
#: where cores would otherwise idle, a part is at least this many: each file's parse of the
#: prelude costs about as much as compiling 15,000 characters of body (NPBench's resnet, 91,000
#: characters: one file 1.46 s, two parts and the main file on two cores 1.00 s)
MIN_PARALLEL_PART_CHARS = 40_000
#: at most this many parts: the compiler's jobs are few, and each part parses the prelude
MAX_PARTS = 8


@dataclass(frozen=True)
class Split:
    """The program's main file and the files of its parts."""

    main: str
    parts: tuple[str, ...]


def _cores() -> int:
    """The cores this process may use: the compiler's parallel jobs."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


def program_files(code: str, program: str, parts: int | None = None,
                  functions: Sequence[str] = (), independent: bool = True,
                  restrict: bool = True) -> Split:
    """``code`` (DaCe's file for the program named ``program``) split as ``split`` does
    where it can, with the definitions ``functions`` (the scopes it calls:
    ``outlined_functions``); with ``independent``, loops marked so made ``ivdep``
    (``independent_loops``); with ``restrict``, each function's state pointers restricted
    (``restrict_state_pointers``)."""
    if independent:
        code = independent_loops(code)
        functions = [independent_loops(function) for function in functions]

    def restricted(text: str, function: str) -> str:
        return restrict_state_pointers(text, [function]) if restrict else text

    cut = split(code, program, parts, functions)
    if cut is None or not cut.parts:
        whole = code if cut is None else cut.main
        if cut is None and functions:
            at = whole.find(f"void __program_{program}_internal(")
            whole = whole[:at] + _declarations(functions) + "".join(functions) + whole[at:]
        return Split(restricted(whole, f"__program_{program}_internal"), ())
    return Split(cut.main, tuple(restricted(part, f"__h2d_part{k}_{program}")
                                 for k, part in enumerate(cut.parts)))


#: the comment in a tasklet whose map's innermost loop ``independent_loops`` marks with
#: ``#pragma GCC ivdep`` (its iterations write distinct elements of arrays they do not read)
INDEPENDENT_ITERATIONS = "// h2d: independent iterations"


def independent_loops(code: str) -> str:
    """``code`` with ``#pragma GCC ivdep`` before the loop around each tasklet that says
    its iterations are independent (``INDEPENDENT_ITERATIONS``, written where a map's
    loops run as one and read some array through gathers, which GCC cannot check for
    overlaps at run time as it does for contiguous reads); an OpenMP loop, which its
    pragma must precede directly, becomes ``parallel for simd``, which says the same."""
    lines = code.split("\n")
    for at in [k for k, line in enumerate(lines) if line.strip() == INDEPENDENT_ITERATIONS]:
        depth = len(lines[at]) - len(lines[at].lstrip())
        loop = next((k for k in range(at - 1, -1, -1) if lines[k].lstrip().startswith("for (")
                     and len(lines[k]) - len(lines[k].lstrip()) < depth), None)
        above = lines[loop - 1].strip() if loop else ""
        if loop is None or above == "#pragma GCC ivdep":
            continue
        if above.startswith("#pragma omp parallel for"):  # nothing may stand between them
            if " simd" not in above:
                lines[loop - 1] = lines[loop - 1].replace("parallel for", "parallel for simd",
                                                          1)
        else:
            lines[loop] = "#pragma GCC ivdep\n" + lines[loop]
    return "\n".join(lines)


def outlined_functions(code: str, library: str, functions: Sequence[tuple[str, list[str]]]
                       ) -> list[str] | None:
    """The definitions of ``functions`` (name, parameters) made from the blocks of the
    function of ``code`` (DaCe's file for the SDFG ``library``, of one map per state:
    ``sdfg_repeats``), one block each, in order; None where the code is not that."""
    found = _internal_function(code, library)
    if found is None:
        return None
    _, tokens, close_paren, body_close = found
    blocks = tokens.units(close_paren + 2, body_close)
    declared = _parameters(code[tokens.positions[0] + 1:tokens.positions[close_paren]])
    if blocks is None or declared is None or len(blocks) != len(functions):
        return None
    definitions = []
    for (begin, end), (name, parameters) in zip(blocks, functions):
        body = code[begin:end]
        if _UNSHAREABLE_WORD.search(body) or any(p not in declared for p in parameters):
            return None
        # an array of bool that the block only indexes is read as bytes, as the program's
        # own function reads it (``_local``): a loop that selects by a mask vectorises
        names = {p: f"{p}_bools" for p in _indexed_bools({p: declared[p] for p in parameters},
                                                         body)}
        locals_ = [_local(p, "bool *", local, True) for p, local in names.items()]
        signature = (f'__attribute__((visibility("hidden"), noinline)) void {name}('
                     + ", ".join(f"{declared[p]} {names.get(p, p)}" for p in parameters) + ")")
        if locals_:
            body = "{" + "".join(locals_) + "\n" + body + "\n}"
        definitions.append(f"{signature}\n{body}\n")
    return definitions


def _internal_function(code: str, program: str) -> tuple[int, _Tokens, int, int] | None:
    """Where DaCe's function ``__program_<program>_internal`` begins in ``code``, the
    tokens from its name on, and the indices of the parenthesis closing its parameters and
    of the brace closing its body; None where it is not there whole."""
    function = f"void __program_{program}_internal"
    start = code.find(f"{function}(")
    if start < 0:
        return None
    tokens = _Tokens(code, start + len(function))
    close_paren = tokens.closing(0)
    if close_paren < 0 or close_paren + 1 >= len(tokens.kinds) \
            or tokens.kinds[close_paren + 1] != "{":
        return None
    body_close = tokens.closing(close_paren + 1)
    return None if body_close < 0 else (start, tokens, close_paren, body_close)


def _declarations(definitions: Sequence[str]) -> str:
    """The declarations of the functions whose ``definitions`` are given."""
    return "".join(d[:d.index("\n")] + ";\n" for d in definitions)


def split(code: str, program: str, parts: int | None = None,
          functions: Sequence[str] = ()) -> Split | None:
    """``code`` (DaCe's file for the program named ``program``) as a main file and
    ``parts`` part files (default: by size, ``MIN_PART_CHARS`` each, or one per core of
    ``MIN_PARALLEL_PART_CHARS`` each where that makes more, at most ``MAX_PARTS``),
    its repeated blocks compiled once (``_Sharing``); None where it stays one file as
    DaCe wrote it."""
    function = f"__program_{program}_internal"
    found = _internal_function(code, program)
    if found is None:
        return None
    start, tokens, close_paren, body_close = found
    if "goto" in tokens.kinds[close_paren + 1:body_close]:
        return None
    found_statements = tokens.statements(code, close_paren + 2, body_close)
    if found_statements is None:
        return None
    blocks, locals_ = found_statements
    parameters = code[tokens.positions[0] + 1:tokens.positions[close_paren]]
    declared = _parameters(parameters)
    if declared is None:
        return None
    names = list(declared)
    sharing = _Sharing(code, blocks, _state_fields(code), declared, program)
    statements = list(sharing.statements)
    for name, declaration in locals_:  # each into the one statement that uses it
        # (as DaCe wrote them: a block compiled once uses the local in every occurrence)
        users = [k for k, (begin, end) in enumerate(blocks)
                 if re.search(rf"\b{name}\b", code[begin:end])]
        if len(users) > 1:
            return None  # a value that passes between statements
        if users:
            statements[users[0]] = f"    {declaration}\n{statements[users[0]]}"
    # (definitions, statement) pieces: the functions given, then the body's statements
    pieces = [(f, "") for f in functions] + [
        (sharing.defined.get(k, ""), statement) for k, statement in enumerate(statements)]
    sizes = [len(definition) + len(statement) for definition, statement in pieces]
    total = sum(sizes)
    count = parts or min(MAX_PARTS, max(total // MIN_PART_CHARS,
                                        min(_cores(), total // MIN_PARALLEL_PART_CHARS)))
    count = min(count, len(blocks))
    prelude, epilogue = code[:start], code[tokens.positions[body_close] + 1:]
    declarations = _declarations([*functions, *sharing.defined.values()])
    if count < 2:
        if not (functions or sharing.functions):
            return None
        return Split(f"{prelude}{declarations}" + "".join(d for d, _ in pieces)
                     + f"void {function}({parameters})\n{{\n"
                     + "\n".join(s for _, s in pieces if s) + "\n}" + epilogue, ())
    part_declarations, calls, files = [], [], []
    for k, group in enumerate(_groups(sizes, count)):
        name = f"__h2d_part{k}_{program}"
        signature = f'__attribute__((visibility("hidden"))) void {name}({parameters})'
        part_declarations.append(f"{signature};")
        calls.append(f"    {name}({', '.join(names)});")
        definitions = "".join(pieces[b][0] for b in group)
        statements = "\n".join(pieces[b][1] for b in group if pieces[b][1])
        files.append(f"{prelude}{declarations}{definitions}{signature}\n{{\n"
                     f"{statements}\n}}\n")
    main = (f"{prelude}" + "\n".join(part_declarations)
            + f"\n\nvoid {function}({parameters})\n"
            "{\n" + "\n".join(calls) + "\n}" + epilogue)
    return Split(main, tuple(files))


def _groups(sizes: list[int], count: int) -> list[list[int]]:
    """The indices of ``sizes`` in ``count`` consecutive groups of about equal sums."""
    total = sum(sizes)
    groups: list[list[int]] = [[]]
    done = 0
    for index, size in enumerate(sizes):
        if groups[-1] and len(groups) < count and done >= total * len(groups) / count:
            groups.append([])
        groups[-1].append(index)
        done += size
    return groups


#: a block of at least this many characters that occurs more than once is compiled once
MIN_SHARED_CHARS = 400


class _Sharing:
    """The program's blocks, each one that occurs more than once (a layer of a model that
    Python unrolled repeats the code of the one before, on other arrays) compiled once as a
    function that every occurrence calls with its arrays.

    Two blocks are the same code when their texts are equal after the state's fields and
    the program's parameters they reach are named by the order they first appear in, with
    the same types, and the locals they declare likewise (comments aside). A block that
    reaches the state otherwise, or returns, jumps or keeps a static local, stays as it is.
    The function's parameters are restricted pointers, which is what the fields and the
    program's parameters already promise; a ``bool`` array it only indexes it reads as
    bytes, as ``restrict_state_pointers`` does for the state's fields. The function is never
    inlined: its code is compiled once. Its statements are the block's, but GCC inlines and
    vectorises more in small functions than in one large one: a loop of a transcendental
    function it vectorises calls libmvec, whose results differ from libm's within its ULP
    bounds."""

    def __init__(self, code: str, blocks: list[tuple[int, int]], fields: dict[str, str],
                 parameters: dict[str, str], program: str):
        self.statements = [code[begin:end] for begin, end in blocks]
        #: the definition of each function, by the index of the block it is placed before
        self.defined: dict[int, str] = {}
        self.functions: list[str] = []
        seen: dict[tuple, list] = {}
        for index, text in enumerate(self.statements):
            if len(text) < MIN_SHARED_CHARS or not text.startswith("{"):
                continue  # small, or a loop or a conditional
            found = _canonical(text, fields, parameters)
            if found is None:
                continue
            key, free = found
            seen.setdefault(key, []).append((index, free))
        for occurrences in seen.values():
            if len(occurrences) < 2:
                continue
            name = f"__h2d_shared{len(self.functions)}_{program}"
            first, free = occurrences[0]
            signature, body = _shared_function(name, self.statements[first], free, fields,
                                               parameters)
            self.defined[first] = f"{signature}\n{body}\n"
            self.functions.append(name)
            for index, names in occurrences:
                arguments = ", ".join(f"__state->{n}" if kind == "field" else n
                                      for kind, n in names)
                self.statements[index] = f"    {name}({arguments});"


def _canonical(text: str, fields: dict[str, str], parameters: dict[str, str]
               ) -> tuple[tuple, list[tuple[str, str]]] | None:
    """``text`` (a block) with the state's fields, the program's parameters and its own
    locals named by the order they first appear in, and the types of the first two; with
    the fields and parameters it reaches in that order. None where it cannot be shared."""
    declared = set(_DECLARED.findall(text))
    names: dict[tuple[str, str], str] = {}
    pieces, done = [], 0
    for word in _WORD.finditer(text):
        kind = word.lastgroup
        if kind == "comment":
            pieces.append(text[done:word.start()])
            done = word.end()
            continue
        if kind == "kept":
            continue
        if kind == "field":
            key = ("field", word.group("field"))
            if key[1] not in fields:
                return None
        elif word.group("name") in _UNSHAREABLE:
            return None
        elif word.group("name") in parameters:
            key = ("parameter", word.group("name"))
        elif word.group("name") in declared:
            key = ("local", word.group("name"))
        else:
            continue
        pieces += [text[done:word.start()], names.setdefault(key, f"@{len(names)}@")]
        done = word.end()
    pieces.append(text[done:])
    free = [key for key in names if key[0] != "local"]
    types = tuple(_pointee(fields[n] if kind == "field" else parameters[n]) for kind, n in free)
    return ("".join(pieces), types), free


def _pointee(declared: str) -> str:
    """A parameter's or field's type as a shared function takes it: restricted or not,
    an array is the same."""
    return " ".join(declared.replace("__restrict__", " ").replace("*", " * ").split())


def _shared_function(name: str, text: str, free: list[tuple[str, str]],
                     fields: dict[str, str], parameters: dict[str, str]) -> tuple[str, str]:
    """The signature and body of the function ``name`` that runs the block ``text`` on
    the arrays and values ``free`` (its fields and parameters, in order) it is given."""
    renamed = {key: f"__h2d_p{k}" for k, key in enumerate(free)}

    def rename(word):
        kind = word.lastgroup
        key = (("field", word.group("field")) if kind == "field"
               else ("parameter", word.group("name")) if kind == "name" else None)
        return renamed.get(key, word.group(0))

    body = _WORD.sub(rename, text)
    declarations, locals_ = [], []
    for (kind, original), local in renamed.items():
        declared = _pointee(fields[original] if kind == "field" else parameters[original])
        if not declared.endswith("*"):
            declarations.append(f"{declared} {local}")  # a symbol's value
            continue
        declarations.append(f"{declared} {local}_field")
        locals_.append(_local(local, declared, f"{local}_field",
                              _indexed_only(body, list(re.finditer(rf"\b{local}\b", body)))))
    signature = (f'__attribute__((visibility("hidden"), noinline)) void {name}('
                 + ", ".join(declarations) + ")")
    return signature, "{" + "".join(locals_) + "\n" + body + "\n}"


#: what a block's text is read as when looking for its names: comments (left out of its
#: key), literals and members (kept as they are), the state's fields, and other names
_WORD = re.compile(r"(?P<comment>//[^\n]*|/\*.*?\*/)"
                   r"""|(?P<kept>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'"""
                   r"|(?:\.|->|::)\s*[A-Za-z_]\w*)"
                   r"|__state->(?P<field>\w+)\b|(?<![\w.])(?P<name>[A-Za-z_]\w*)", re.S)
#: a local's declaration as DaCe writes it, a statement of its own: a type, the name
_DECLARED = re.compile(r"^\s*(?!(?:else|return|delete|throw|case|goto|do|new)\b)"
                      r"(?:const\s+)?[\w:<>]+(?:\s*\*)?\s+(?:__restrict__\s+)?"
                      r"(?:const\s+)?(\w+)\s*(?:[;=\[])", re.M)
#: what a block that moves into a function of its own may not hold
_UNSHAREABLE = frozenset({"__state", "return", "goto", "static"})
_UNSHAREABLE_WORD = re.compile(rf"\b({'|'.join(sorted(_UNSHAREABLE))})\b")


def restrict_state_pointers(code: str, functions: list[str]) -> str:
    """``code`` with the state's array pointers that ``functions`` (names defined in
    ``code``) use read through ``const __restrict__`` locals of each function, and their
    parameters that are arrays of ``bool`` they only index read as bytes (``_local``)."""
    code = _bool_parameters_as_bytes(code, functions)
    fields = _state_fields(code)
    if not fields:
        return code
    spans = _bodies(code, functions)
    bodies = sorted(spans[f] for f in functions if f in spans)
    # DaCe's allocation and release of the arrays
    allocation = [span for name, span in spans.items() if name.startswith("__dace_")]
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
        uses: dict[str, list] = {}
        for access in _STATE_ACCESS.finditer(body):
            uses.setdefault(access.group(1), []).append(access)
        used = [name for name in fields if name in restricted and name in uses]
        if used:
            declarations = "".join(_local(f"__h2d_{name}", fields[name], f"__state->{name}",
                                          _indexed_only(body, uses[name])) for name in used)
            body = re.sub(r"__state->(\w+)\b", lambda m: f"__h2d_{m.group(1)}"
                          if m.group(1) in restricted else m.group(0), body)
            body = declarations + body
        rewritten += [code[done:begin], body]
        done = end
    return "".join(rewritten) + code[done:]


def _bool_parameters_as_bytes(code: str, functions: list[str]) -> str:
    """``code`` with each of ``functions``' parameters that is an array of ``bool`` it only
    indexes read through a local pointer to its bytes (``_local``): the program's own
    arguments (a ``jnp.where`` by a mask passed in ran scalar at 1.9x XLA's time)."""
    for name in functions:
        header = re.search(rf"\b{re.escape(name)}\s*\(([^()]*)\)\s*\{{", code)
        declared = _parameters(header.group(1)) if header else None
        span = _bodies(code, [name]).get(name) if declared else None
        if span is None:
            continue
        begin, end = span
        body = code[begin:end]
        renamed = _indexed_bools(declared, body)
        if not renamed:
            continue
        body = re.sub(rf"\b({'|'.join(renamed)})\b", lambda m: f"{m.group(1)}_bools", body)
        locals_ = "".join(_local(f"{p}_bools", "bool *", p, True) for p in renamed)
        code = code[:begin] + locals_ + body + code[end:]
    return code


def _indexed_bools(declared: dict[str, str], body: str) -> list[str]:
    """The parameters of ``declared`` (name -> type) that are arrays of ``bool`` which
    ``body`` only indexes: those ``_local`` may read as bytes."""
    return [p for p, kind in declared.items()
            if _BOOL_POINTER.match(kind.replace("__restrict__", "").strip())
            and _indexed_only(body, list(re.finditer(rf"\b{p}\b", body)))]


#: the state's field for the one allocation that ``place_in_arena`` places arrays in
ARENA_FIELD = "h2d_arena"


def place_in_arena(code: str, offsets: dict[str, int], size: int) -> str:
    """``code`` with the state's array fields ``offsets`` names pointed at those byte
    offsets of one allocation of ``size`` bytes (``ARENA_FIELD``), made and freed where
    DaCe makes and frees each of them (``__dace_init``, ``__dace_exit``). A field whose
    allocation or release is not DaCe's usual line keeps its own array; ``code`` stays as
    it is where fewer than two fields are found."""
    placed = {}
    for field, offset in offsets.items():
        made = re.compile(rf"__state->{field} = dace::aligned_new_array<([\w:<> ]+)>"
                          rf"\(\d+, {_ALIGNMENT}\);")
        freed = f"dace::aligned_delete_array(__state->{field}, {_ALIGNMENT});"
        if len(made.findall(code)) == 1 and code.count(freed) == 1:
            placed[field] = (made, freed, offset)
    struct = _STATE_STRUCT.search(code)
    if len(placed) < 2 or struct is None:
        return code
    field_at = struct.start(1)
    code = f"{code[:field_at]}\n    char * {ARENA_FIELD};{code[field_at:]}"
    earliest = min(placed, key=lambda field: placed[field][0].search(code).start())
    for field, (made, freed, offset) in placed.items():
        first = field == earliest
        arena = (f"__state->{ARENA_FIELD} = dace::aligned_new_array<char>({size}, "
                 f"{_ALIGNMENT});\n    ") if first else ""
        at = made.search(code)
        code = (f"{code[:at.start()]}{arena}__state->{field} = reinterpret_cast<{at.group(1)} *>"
                f"(__state->{ARENA_FIELD} + {offset});{code[at.end():]}")
        code = code.replace(freed, f"dace::aligned_delete_array(__state->{ARENA_FIELD}, "
                            f"{_ALIGNMENT});" if first else "")
    return code


#: the alignment DaCe allocates the program's arrays with
_ALIGNMENT = 64


def _local(local: str, pointer: str, source: str, indexed_only: bool) -> str:
    """The restricted local ``local`` through which a function reaches the array
    ``source``: of the array's type, or for an array of ``bool`` that the function only
    indexes (``indexed_only``), a pointer to its bytes. GCC 12 vectorises no loop that
    reads a ``bool`` array into a mask beside wider elements (a select of doubles or
    complex numbers by a carried mask), and does when the bytes are read (``uint8_t``; a
    ``bool`` holds 0 or 1, and a byte may alias anything)."""
    if _BOOL_POINTER.match(pointer) and indexed_only:
        return (f"\n    uint8_t * __restrict__ const {local} = "
                f"reinterpret_cast<uint8_t *>({source});")
    return f"\n    {pointer} __restrict__ const {local} = {source};"


def _indexed_only(body: str, uses: list) -> bool:
    """Whether each of ``uses`` (matches in ``body``) indexes its array, never takes its
    address or passes it on."""
    return all(body.startswith("[", use.end()) and body[use.start() - 1] != "&"
               for use in uses)


def _state_fields(code: str) -> dict[str, str]:
    """The array fields of the state struct in ``code``: name -> pointer type."""
    struct = _STATE_STRUCT.search(code)
    if struct is None:
        return {}
    return {name: pointer for pointer, name in _STATE_FIELD.findall(struct.group(1))}


#: DaCe's state struct, its array fields, the accesses to them, and the functions that
#: allocate and free them
_STATE_STRUCT = re.compile(r"^struct \w+_state_t \{(.*?)^\};", re.S | re.M)
_STATE_FIELD = re.compile(r"^\s*([\w:<>, ]+?\s*\*)\s*__restrict__\s+(\w+);", re.M)
_STATE_ACCESS = re.compile(r"__state->(\w+)\b")
_ASSIGNED = re.compile(r"\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)")
_BOOL_POINTER = re.compile(r"bool\s*\*$")


def _bodies(code: str, functions: list[str]) -> dict[str, tuple[int, int]]:
    """The functions ``functions`` and DaCe's allocating ones defined in ``code``, each
    with the text positions just inside its body's braces."""
    names = "|".join(map(re.escape, functions))
    found: dict[str, tuple[int, int]] = {}
    for name in re.finditer(rf"\b({names}|__dace_(?:init|exit)_\w+)\s*\(", code):
        if name.group(1) in found:
            continue
        tokens = _Tokens(code, name.end() - 1, groups=2)  # the parameters, the body
        close = tokens.closing(0)
        if close < 0 or close + 1 >= len(tokens.kinds) or tokens.kinds[close + 1] != "{":
            continue  # a declaration or a call
        body_close = tokens.closing(close + 1)
        if body_close > 0:
            found[name.group(1)] = (tokens.positions[close + 1] + 1,
                                    tokens.positions[body_close])
    return found


_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def _parameters(parameters: str) -> dict[str, str] | None:
    """A parameter list's parameters, name -> type (the last identifier of each, and the
    text before it), or None where it is not a plain list (templates, function
    pointers)."""
    if any(c in parameters for c in "<>()[]"):
        return None
    found = {}
    for parameter in parameters.split(","):
        names = list(_IDENTIFIER.finditer(parameter))
        if not names:
            return None
        found[names[-1].group(0)] = parameter[:names[-1].start()].strip()
    return found


#: comments, string and character literals (skipped), brackets, ``goto``, and runs of
#: anything else
_TOKEN = re.compile(r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'"""
                    r"|(?P<bracket>[{}()])|(?P<goto>\bgoto\b)|(?P<other>[^\s{}()/\"']+|/)",
                    re.S)


#: a local declared without a value, as DaCe declares a loop's counter; the keywords of
#: loops and conditionals
_PLAIN_DECLARATION = re.compile(
    r"(?!(?:return|goto|else|delete|throw|case|break|continue)\b)[\w:]+\s+(\w+)\s*;")
_KEYWORD = re.compile(r"(for|while|if)\b")
#: a called function's name, and the semicolon alone that ends a statement
_CALLED = re.compile(r"[A-Za-z_]\w*\s*")
_STATEMENT_END = re.compile(r";(?=\s)")


class _Tokens:
    """The brackets, ``goto``s and other statements' text of ``code`` from ``start``
    (comments and literals skipped), with the matching of the brackets; the first
    ``groups`` bracketed groups only, if given."""

    def __init__(self, code: str, start: int, groups: int | None = None):
        self.code = code
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
            if groups is not None and not stack and text in "})":
                groups -= 1
                if not groups:
                    break

    def closing(self, index: int) -> int:
        """The index of the bracket closing the one at ``index``, -1 if none."""
        return self.match.get(index, -1)

    def statements(self, code: str, begin: int, end: int
                   ) -> tuple[list[tuple[int, int]], list[tuple[str, str]]] | None:
        """The statements between tokens ``begin`` and ``end`` of ``code``: brace blocks
        (as ``units`` reads them), and loops and conditionals whose bodies are blocks, as
        text positions; and the plain declarations among them (``int64_t i;``: a loop's
        counter) as (name, text). None where anything else is there."""
        found, declarations = [], []
        index = begin
        while index < end:
            if self.kinds[index] == "{":
                block = self._block(index, end)
                if block is None:
                    return None
                found += block[0]
                index = block[1]
                continue
            start = self.positions[index]
            declaration = _PLAIN_DECLARATION.match(code, start)
            if declaration is not None:
                declarations.append((declaration.group(1), declaration.group(0)))
                while index < end and self.positions[index] < declaration.end():
                    index += 1
                continue
            index = self._compound(code, index, end)
            if index is None:
                return None
            found.append((start, self.positions[index - 1] + 1))
        return found, declarations

    def _compound(self, code: str, index: int, end: int) -> int | None:
        """The token after the loop or conditional at ``index`` (``for``, ``while``,
        ``if`` with its ``else`` branches), each body a block; None if it is not one."""
        keyword = _KEYWORD.match(code, self.positions[index])
        if keyword is None:
            return None
        index += 1
        while True:  # a header in parentheses, then a block
            if index >= end or self.kinds[index] != "(" or self.closing(index) < 0:
                return None
            index = self._after_block(self.closing(index) + 1, end)
            if index is None or keyword.group(1) != "if" or index >= end \
                    or not code.startswith("else", self.positions[index]):
                return index
            index += 1  # else: a block, or another if
            if index < end and self.kinds[index] == "{":
                return self._after_block(index, end)
            keyword = _KEYWORD.match(code, self.positions[index]) if index < end else None
            if keyword is None or keyword.group(1) != "if":
                return None
            index += 1

    def _after_block(self, index: int, end: int) -> int | None:
        """The token after the brace block at ``index``; None if there is none."""
        if index >= end or self.kinds[index] != "{":
            return None
        close = self.closing(index)
        return close + 1 if 0 <= close < end else None

    def units(self, begin: int, end: int) -> list[tuple[int, int]] | None:
        """The statements between tokens ``begin`` and ``end`` as text positions (start,
        end) if each is a brace block, else None; a block that holds only brace blocks (a
        state: one block per map) is replaced by those: ``{ {a} {b} }`` runs as
        ``{a} {b}``."""
        units = []
        index = begin
        while index < end:
            block = self._block(index, end) if self.kinds[index] == "{" else self._call(index, end)
            if block is None:
                return None
            units += block[0]
            index = block[1]
        return units

    def _call(self, index: int, end: int) -> tuple[list[tuple[int, int]], int] | None:
        """The call statement ``f(...);`` at ``index`` (DaCe's call of a nested SDFG's
        function, which the prelude defines inline) as text positions, and the token after
        it; None where there is none."""
        if index + 2 >= end or self.kinds[index] != "other" or self.kinds[index + 1] != "(" \
                or not _CALLED.fullmatch(self.code, self.positions[index],
                                         self.positions[index + 1]):
            return None
        close = self.closing(index + 1)
        if close < 0 or close + 1 >= end or self.kinds[close + 1] != "other" \
                or not _STATEMENT_END.match(self.code, self.positions[close + 1]):
            return None
        return [(self.positions[index], self.positions[close + 1] + 1)], close + 2

    def _block(self, index: int, end: int) -> tuple[list[tuple[int, int]], int] | None:
        """The brace block at ``index`` as text positions (its inner blocks where it holds
        only blocks), and the token after it; None where it does not close before
        ``end``."""
        close = self.closing(index)
        if close < 0 or close >= end:
            return None
        inner = self.units(index + 1, close)
        return inner or [(self.positions[index], self.positions[close] + 1)], close + 1
