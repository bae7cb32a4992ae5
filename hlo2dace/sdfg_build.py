"""From an SDFG to a shared library: DaCe's code generation, the program's C++ split into
translation units (``cpp_split``) that DaCe's build compiles in parallel, and the small
SDFG a cache entry keeps to load the library.

This replaces ``SDFG.compile``, which measured on a 12-layer transformer's training step
(2,900 ops) spent more time around the C++ compiler than in it:

* it validates the SDFG, a pass whose checks of a state grow with the square of its
  nodes. Validation finds bugs of the translator, not of the user's program, so it runs
  where those are looked for: in the test suite (``$HLO2DACE_VALIDATE=1``) and when the
  ``hlo2dace`` logger shows DEBUG records;
* it saves the whole SDFG as ``program.sdfgz`` beside the library (serialising every node,
  seconds for thousands), and a process that loads the library from the cache reads it
  back, only for the library's signature. The entry keeps an SDFG with the program's
  arguments alone instead (``signature_sdfg``), checked against the C signature DaCe
  generated;
* it compiles the program as one file, on one core.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import Any, Sequence

from . import cpp_split, sdfg_repeats
from .errors import CompilationError
from .progress import stage
from .sdfg_passes import liveness

#: ``1`` validates every SDFG before its code is generated (the test suite sets it)
VALIDATE_OPTION = "HLO2DACE_VALIDATE"
#: the SDFG a cache entry keeps: the program's arguments, enough to load the library
SIGNATURE_FILE = "program.sdfgz"


def validating() -> bool:
    """Whether SDFGs are validated before code generation: in tests
    (``$HLO2DACE_VALIDATE=1``) and in debug mode (the ``hlo2dace`` logger at DEBUG)."""
    return (os.environ.get(VALIDATE_OPTION, "") not in ("", "0")
            or logging.getLogger("hlo2dace").isEnabledFor(logging.DEBUG))


def outline_repeated_maps(sdfg: Any) -> list[str]:
    """Map scopes that repeat (a model's layers, unrolled) are generated once, as functions
    that each occurrence calls (``sdfg_repeats``): the C++ compiler sees each once."""
    return _outline_repeats(sdfg)


def transient_arena(sdfg: Any) -> liveness.Arena | None:
    """The program's arrays that are never live at once placed in one allocation, where
    they share bytes (``liveness.arena_layout``), with the compiler barriers that order
    each reuse (``liveness.order_reuses``); the C++ is rewritten by
    ``cpp_split.place_in_arena``. Run on the SDFG as it is compiled, after every
    transformation, so that no transformation sees arrays that share memory, and with
    its library nodes expanded first, as code generation expands them (steps in DaCe's
    order, ``codegen.generate_code``): a barrier is ordered by edges, and a library
    node's expansion takes no edge it does not expect."""
    from dace.sdfg import infer_types
    from dace.transformation.passes.insert_explicit_copies import InsertExplicitCopies

    infer_types.infer_connector_types(sdfg)
    infer_types.set_default_schedule_and_storage_types(sdfg, None)
    InsertExplicitCopies().apply_pass(sdfg, {})
    infer_types.infer_connector_types(sdfg)
    sdfg.expand_library_nodes()
    arena = liveness.arena_layout(sdfg)
    if arena is not None:
        liveness.order_reuses(sdfg, arena)
    return arena


#: the code stage's passes (``pipeline.py``), by name: what each does to the C++
CODE_PASSES = {
    "outline_repeated_maps": outline_repeated_maps,
    "transient_arena": transient_arena,
    "independent_loops": cpp_split.independent_loops,
    "restrict_state_pointers": cpp_split.restrict_state_pointers,
}


def build(sdfg: Any, folder: Path, parts: int | None = None,
          passes: frozenset[str] | None = None, first_line: str = "") -> Any:
    """Generate ``sdfg``'s code into ``folder`` (its build folder), split into ``parts``
    translation units (None: by size, ``cpp_split``) and compile it into a library;
    returns the SDFG that loads it (``signature_sdfg``). ``passes``: the code stage's
    passes to run (``CODE_PASSES``; None: all); ``first_line``: the line each C++ file
    begins with (the precompiled prelude's include, ``prelude.py``). Code generation
    changes ``sdfg`` (DaCe fills in types, schedules and storage): the caller gives it
    up. DaCe's settings (flags, build caches) are the caller's."""
    from dace.codegen import codegen, compiler

    if validating():
        with stage("validate"):
            sdfg.validate()
    with stage("code generation") as generation:
        sdfg.build_folder = str(folder)
        sdfg.fill_scope_connectors()
        passes = frozenset(CODE_PASSES) if passes is None else passes
        functions = _outline_repeats(sdfg) if "outline_repeated_maps" in passes else []
        arena = transient_arena(sdfg) if "transient_arena" in passes else None
        objects = codegen.generate_code(sdfg, validate=False)
        frame = next(o for o in objects if o.title == "Frame")
        code = frame.clean_code
        if arena is not None:
            code = cpp_split.place_in_arena(
                code, {f"__{sdfg.cfg_id}_{name}": at for name, at in arena.offsets.items()},
                arena.size)
        signature = signature_sdfg(sdfg, code)
        split = cpp_split.program_files(
            code, sdfg.name, parts, functions,
            independent="independent_loops" in passes,
            restrict="restrict_state_pointers" in passes)
        frame.code = first_line + split.main
        for k, code in enumerate(split.parts):
            part = copy.copy(frame)
            part.name, part.code, part.title = f"{sdfg.name}_part{k}", first_line + code, "Part"
            objects.append(part)
        files = 1 + len(split.parts)
        generation.note = f"{files} C++ file{'s' if files > 1 else ''}"
        compiler.generate_program_folder(None, objects, str(folder))
        # the frame includes the hash of the SDFG it came from; the folder's name serves
        (folder / "include" / "hash.h").write_text(
            f'#define __HASH_{sdfg.name} "{folder.parent.name}"\n')
        signature.save(str(folder / SIGNATURE_FILE), compress=True)
    configured = Path(compiler.build_cache_root()) / "configure"
    known = set(configured.glob("*"))
    with stage("C++ compile") as compile_stage:
        compiler.configure_and_compile(str(folder), sdfg.name)
        if set(configured.glob("*")) - known:
            compile_stage.note = "CMake's configure included: once per kind of program"
    return signature


def _outline_repeats(sdfg: Any) -> list[str]:
    """The map scopes of ``sdfg`` that repeat replaced by calls of functions generated
    once (``sdfg_repeats``); returns the functions' definitions."""
    from dace.codegen import codegen

    outlined = sdfg_repeats.outline(sdfg)
    if outlined is None:
        return []
    code = next(o for o in codegen.generate_code(outlined.library, validate=False)
                if o.title == "Frame").clean_code
    names = [sdfg_repeats.FUNCTION.format(k=k, program=sdfg.name)
             for k in range(len(outlined.groups))]
    functions = cpp_split.outlined_functions(code, outlined.library.name,
                                             list(zip(names, outlined.arguments())))
    if functions is None:
        return []  # not the code expected: the scopes stay where they are
    outlined.replace(sdfg, sdfg.name)
    if validating():
        sdfg.validate()
    return functions


def signature_sdfg(sdfg: Any, code: str) -> Any:
    """An SDFG of ``sdfg``'s name with its arguments and symbols and no code: what
    DaCe's ``CompiledSDFG`` reads to call the library. Checked against the C signature in
    ``code``, the program's generated C++."""
    import dace

    signature = dace.SDFG(sdfg.name)
    # symbols first, with their types: an array added first declares its shape's symbols
    for name, symbol_type in sdfg.symbols.items():
        signature.add_symbol(name, symbol_type)
    for name, descriptor in sdfg.arrays.items():
        if not descriptor.transient:
            signature.add_datadesc(name, copy.deepcopy(descriptor))
    start = signature.add_state("arguments", is_start_block=True)
    # the symbols the program's code reads are its scalar arguments: a condition that
    # reads them makes them read here too
    used = sorted(sdfg.used_symbols(all_symbols=False) & set(sdfg.symbols)) \
        if sdfg.symbols else []
    if used:
        signature.add_edge(start, signature.add_state("end"), dace.InterstateEdge(
            " and ".join(f"({name} == {name})" for name in used)))
    parameters = signature.signature(arglist=signature.arglist(scalars_only=False))
    expected = f"void __program_{sdfg.name}({sdfg.name}_state_t *__state" \
               f"{', ' if parameters else ''}{parameters})"
    if expected not in code:
        raise CompilationError(f"internal error: the arguments of {sdfg.name} are not "
                               f"those of its generated code (expected {expected})")
    return signature



def written_in_place(sdfg: Any, candidates: Sequence[tuple[str, str]]
                     ) -> list[tuple[str, str]]:
    """The (argument, result) pairs of ``candidates`` where the result can take the
    argument's buffer: both are accessed in one map of one top-level state only, the
    argument read and the result written element by element at the map's own index
    (``x[__i0, __i1]``), and every tasklet that reads the argument precedes (feeds) the
    tasklets that write the result, so each element is read before it is overwritten and
    never read again. Computed while the whole SDFG is at hand: the cache keeps only its
    signature."""
    from dace.sdfg import nodes

    places: dict[str, list] = {}
    for node, parent in sdfg.all_nodes_recursive():
        if isinstance(node, nodes.NestedSDFG):
            return []
        if isinstance(node, nodes.AccessNode):
            places.setdefault(node.data, []).append((node, parent))
    return [(argument, result) for argument, result in candidates
            if _writes_in_place(sdfg, places.get(argument, []), places.get(result, []))]


def _writes_in_place(sdfg: Any, readers: list, writers: list) -> bool:
    from dace.sdfg import nodes

    if not readers or not writers or len({id(parent) for _, parent in readers + writers}) != 1:
        return False
    state = readers[0][1]
    readers, writers = [node for node, _ in readers], [node for node, _ in writers]
    if state.parent_graph is not sdfg or any(state.in_degree(n) for n in readers) or \
            any(state.out_degree(n) for n in writers):
        return False
    entries = {e.dst for n in readers for e in state.out_edges(n)}
    exits = {e.src for n in writers for e in state.in_edges(n)}
    if len(entries) != 1 or len(exits) != 1:
        return False
    entry, exit_ = entries.pop(), exits.pop()
    if not isinstance(entry, nodes.MapEntry) or state.exit_node(entry) is not exit_:
        return False
    argument, result = readers[0].data, writers[0].data
    reads = [e for e in state.out_edges(entry) if e.data.data == argument]
    writes = [e for e in state.in_edges(exit_) if e.data.data == result]
    if any(not isinstance(e.dst, nodes.Tasklet) or not _own_element(sdfg, e.data, entry.map)
           or e.data.dynamic for e in reads) or \
            any(not isinstance(e.src, nodes.Tasklet) or not _own_element(sdfg, e.data, entry.map)
                or e.data.wcr is not None or e.data.dynamic for e in writes):
        return False
    for write in writes:
        before = _ancestors(state, write.src)
        if any(read.dst is not write.src and read.dst not in before for read in reads):
            return False
    return True


def _own_element(sdfg: Any, memlet: Any, the_map: Any) -> bool:
    """Whether ``memlet`` accesses, at each point of ``the_map``, the element of its array
    at that point's row-major position in the map (``x[__i0, __i1]``, or the same element
    of a map whose loops the ``collapse_short_rows`` pass made one)."""
    import sympy

    array = sdfg.arrays[memlet.data]
    if any(begin != end for begin, end, _ in memlet.subset.ranges) or any(
            (begin, step) != (0, 1) for begin, _, step in the_map.range):
        return False
    sizes = list(the_map.range.size())
    position = sum(sympy.Symbol(p) * sympy.prod(sizes[k + 1:])
                   for k, p in enumerate(the_map.params))
    element = sum(begin * stride for (begin, _, _), stride in
                  zip(memlet.subset.ranges, array.strides))
    return sympy.expand(element.subs({s: sympy.Symbol(str(s)) for s in element.free_symbols})
                        - position) == 0


def _ancestors(state: Any, node: Any) -> set:
    seen, todo = set(), [node]
    while todo:
        for edge in state.in_edges(todo.pop()):
            if edge.src not in seen:
                seen.add(edge.src)
                todo.append(edge.src)
    return seen
