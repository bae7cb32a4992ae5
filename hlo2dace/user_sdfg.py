"""A user's SDFG in place of hlo2dace's: a transformation applied to the translated SDFG
(``hlo2dace.jit(f, transform=fn)``) or an SDFG given whole (``Lowered.compile(sdfg=...)``,
``hlo2dace.load``). Such an SDFG is checked against the module (the same argument and
result arrays, no new free symbol) and keyed by its content, so that a changed
transformation builds again and the same one finds its binary in the cache."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable

from .errors import ArgumentError, Hlo2DaceError, TransformationError

#: keys of an SDFG's JSON that do not change the code generated from it (DaCe's
#: ``hash_sdfg`` drops these and also ``instrument`` and ``name``, which do)
_NOT_CODE = frozenset({"guid", "hash", "transformation_hist", "orig_sdfg", "cfg_list_id"})


def _without(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without(v) for k, v in value.items()
                if k not in _NOT_CODE and not str(k).startswith("_meta_")}
    if isinstance(value, list):
        return [_without(v) for v in value]
    return value


def content_key(sdfg: Any) -> str:
    """A digest of everything in ``sdfg`` that decides its generated code."""
    text = json.dumps(_without(sdfg.to_json()), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def describe(transform: Callable) -> str:
    return getattr(transform, "__qualname__", None) or repr(transform)


def apply(transform: Callable[[Any], Any], sdfg: Any, program: str) -> Any:
    """``transform`` applied to ``sdfg`` (it may change it in place and return None, or
    return another SDFG), the result validated by DaCe."""
    import dace

    try:
        returned = transform(sdfg)
    except Hlo2DaceError:
        raise
    except Exception as exc:
        raise TransformationError(f"the transformation {describe(transform)} raised on the "
                                  f"SDFG of `{program}`: {type(exc).__name__}: {exc}") from exc
    if returned is not None:
        if not isinstance(returned, dace.SDFG):
            raise TransformationError(
                f"the transformation {describe(transform)} returned a "
                f"{type(returned).__name__}; it changes the SDFG it is given and returns "
                "None, or returns a dace.SDFG")
        sdfg = returned
    return validated(sdfg, f"the transformation {describe(transform)}")


def validated(sdfg: Any, source: str) -> Any:
    """``sdfg`` if DaCe finds it valid and hlo2dace can build it, else a
    TransformationError saying why not."""
    from dace.sdfg.validation import InvalidSDFGError

    try:
        sdfg.validate()
    except InvalidSDFGError as exc:
        raise TransformationError(f"{source} left an invalid SDFG: {exc}") from exc
    retyped = _vector_typed_cpp_tasklets(sdfg)
    if retyped:
        raise TransformationError(
            f"{source} gave vector types to connectors of C++ tasklets ({', '.join(retyped)}"
            "), whose code reads and writes scalars: DaCe's Vectorization retypes the "
            "connectors but leaves C++ code as written (GCC vectorises hlo2dace's maps "
            "itself)")
    return sdfg


def _vector_typed_cpp_tasklets(sdfg: Any) -> list[str]:
    """Labels of C++ tasklets with a connector of a vector type (at most five)."""
    import dace

    found = []
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, dace.nodes.Tasklet) and node.language == dace.Language.CPP and any(
                isinstance(t, dace.vector) for t in
                (*node.in_connectors.values(), *node.out_connectors.values())):
            found.append(node.label)
    return found[:5]


def _type(desc: Any) -> str:
    return f"{desc.dtype.to_string()}[{', '.join(str(s) for s in desc.shape)}]"


def signature(sdfg: Any) -> tuple[dict[str, str], frozenset[str]]:
    """What of ``sdfg`` a program's callers rely on: the type of each array it is called
    with (every array not transient), and its free symbols (read from the arguments)."""
    return ({name: _type(desc) for name, desc in sdfg.arrays.items() if not desc.transient},
            frozenset(str(s) for s in sdfg.free_symbols))


def check_signature(sdfg: Any, expected: tuple[dict[str, str], frozenset[str]],
                    program: str) -> None:
    """``sdfg`` is called as the module's SDFG of signature ``expected`` is: the same
    arrays (name, element type, shape), none of them transient, no other argument array,
    no free symbol the module does not give; else an ArgumentError names each
    difference."""
    types, symbols = expected
    problems = []
    for name, wanted in types.items():
        desc = sdfg.arrays.get(name)
        if desc is None:
            problems.append(f"array `{name}` ({wanted}) is missing")
        elif desc.transient:
            problems.append(f"array `{name}` is transient: it must stay an argument")
        elif _type(desc) != wanted:
            problems.append(f"array `{name}` is {_type(desc)}, the module's is {wanted}")
    problems += [f"array `{n}` is an argument the module does not have"
                 for n, d in sorted(sdfg.arrays.items()) if not d.transient and n not in types]
    new = sorted({str(s) for s in sdfg.free_symbols} - symbols)
    if new:
        problems.append(f"free symbol(s) {', '.join(new)} that the module does not give")
    if problems:
        raise ArgumentError(f"the SDFG does not match the module of `{program}`: "
                            + "; ".join(problems))

