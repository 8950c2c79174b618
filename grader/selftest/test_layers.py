"""grader/'s folders are floors (grader/README.md): a module imports only
from its own floor and the floors below, so the grader has no import cycle
between its parts and a folder's name says what it may use."""

import ast
from pathlib import Path

GRADER = Path(__file__).resolve().parent.parent
FLOORS = ["core", "evidence", "session", "run", "classroom"]


def _floor(module):
    """The floor of a dotted module name under grader, or None."""
    parts = module.split(".")
    if parts[0] != "grader" or len(parts) < 2 or parts[1] not in FLOORS:
        return None
    return FLOORS.index(parts[1])


def _imports(path, root):
    """The grader modules `path` imports, with their line numbers."""
    pkg = ".".join(path.relative_to(root.parent).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            yield node.lineno, mod
            for a in node.names:
                yield node.lineno, f"{mod}.{a.name}"


def violations(root=GRADER):
    bad, seen = [], set()
    for floor, name in enumerate(FLOORS):
        for path in sorted((root / name).rglob("*.py")):
            for line, mod in _imports(path, root):
                up = _floor(mod)
                if up is not None and up > floor and (path, line) not in seen:
                    seen.add((path, line))
                    bad.append(f"{path.relative_to(root.parent)}:{line} "
                               f"({name}) imports {mod} ({FLOORS[up]}, a "
                               f"floor above)")
    return bad


def test_no_floor_imports_from_above():
    assert violations() == []


def test_an_upward_import_is_found(tmp_path):
    for name in FLOORS:
        (tmp_path / "grader" / name).mkdir(parents=True)
    (tmp_path / "grader" / "core" / "x.py").write_text(
        "from grader.session import plugin\n")
    (tmp_path / "grader" / "session" / "y.py").write_text(
        "from ..core import x\nfrom . import z\n")
    found = violations(tmp_path / "grader")
    assert len(found) == 1 and "core/x.py:1" in found[0], found
