"""The package's layering is what docs/architecture.md says it is: every module is in its
floors table, every import (at the top of a module or inside a function) points to a lower
floor, so there is no cycle, and no module uses another's private names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hlo2dace"


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _floors() -> dict[str, int]:
    """Module -> floor, from the floors table of docs/architecture.md: a row is
    ``| floor | `module.py`, `folder/{a,b}.py` ... | role |``."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("## Floors and walls"):]
    floors = {}
    for row in re.finditer(r"^\| (\d+) \| (.*?) \|", table, re.M):
        floor = int(row.group(1))
        for cell in re.findall(r"`([^`]+)`", row.group(2)):
            if "{" in cell:  # translate/{a,b}.py
                head, names, tail = re.match(r"(.*)\{(.*)\}(.*)", cell).groups()
                paths = [f"{head}{n.strip()}{tail}" for n in names.split(",")]
            else:
                paths = [cell]
            for path in paths:
                if path.endswith(".py"):
                    name = "hlo2dace." + path.removesuffix(".py").replace("/", ".")
                    floors[name.removesuffix(".__init__")] = floor
    return floors


FLOORS = _floors()


def _imports(module: str) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every hlo2dace import of
    ``module``, wherever it stands in the file."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names
                      if a.name.startswith("hlo2dace")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("hlo2dace"):
                continue
            for alias in node.names:
                if f"{target}.{alias.name}" in MODULES:
                    found.append((f"{target}.{alias.name}", None, node.lineno))
                else:
                    found.append((target, alias.name, node.lineno))
    return found


def test_every_module_is_in_the_floors_table():
    missing = sorted(m for m in MODULES if m not in FLOORS)
    assert not missing, f"modules missing from docs/architecture.md's floors table: {missing}"
    stale = sorted(m for m in FLOORS if m not in MODULES)
    assert not stale, f"the floors table names modules that do not exist: {stale}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    """Each hlo2dace import of ``module`` names a module on a lower floor (a package's
    ``__init__`` may import its own modules), and no private name of another module."""
    wrong = []
    for target, name, line in sorted(set(_imports(module)), key=lambda i: (i[2], i[0])):
        inside_package = module != "hlo2dace" and target.startswith(module + ".")
        if target in FLOORS and module in FLOORS and not inside_package \
                and FLOORS[target] >= FLOORS[module]:
            wrong.append(f"line {line}: imports {target} (floor {FLOORS[target]}) on floor "
                         f"{FLOORS[module]}")
        if name is not None and name.startswith("_") and not name.startswith("__"):
            wrong.append(f"line {line}: imports the private {name} of {target}")
    assert not wrong, f"{module}:\n" + "\n".join(dict.fromkeys(wrong))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_names_of_other_modules(module):
    """``other._name`` through an imported module object is as private as importing it."""
    tree = ast.parse(MODULES[module].read_text())
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for target, name, _ in _imports(module):
                if name is None:
                    aliases[target.rpartition(".")[2]] = target
    used = sorted({f"{aliases[node.value.id]}.{node.attr}" for node in ast.walk(tree)
                   if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                   and node.value.id in aliases and aliases[node.value.id] != module
                   and node.attr.startswith("_") and not node.attr.startswith("__")})
    assert not used, f"{module} uses private names: {used}"


def test_the_checks_see_a_cycle_and_a_private_import(tmp_path, monkeypatch):
    """The checks above fail on what they guard against: an import of a higher floor (as
    any cycle has) and a private name imported from, or used through, another module."""
    monkeypatch.setitem(MODULES, "hlo2dace.errors", tmp_path / "errors.py")
    (tmp_path / "errors.py").write_text("from .api import jit\n")
    with pytest.raises(AssertionError, match="imports hlo2dace.api .floor 11. on floor 1"):
        test_imports_point_down("hlo2dace.errors")
    monkeypatch.setitem(MODULES, "hlo2dace.api", tmp_path / "api.py")
    (tmp_path / "api.py").write_text("from . import runtime\nfrom .ir import _private\n"
                                     "runtime._fallbacks.clear()\n")
    with pytest.raises(AssertionError, match="private _private of hlo2dace.ir"):
        test_imports_point_down("hlo2dace.api")
    with pytest.raises(AssertionError, match="hlo2dace.runtime._fallbacks"):
        test_no_private_names_of_other_modules("hlo2dace.api")
