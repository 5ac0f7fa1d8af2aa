"""One name per thing: no two classes or Protocols share a name anywhere in voicecli, no
two modules share a file name, and a constant name means one thing wherever it is
assigned (the same value), so that ``FRAME_SECONDS`` cannot be 12.5 ms here and 32 ms there."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "voicecli"
MODULES = sorted(PACKAGE.rglob("*.py"))


def trees() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in MODULES]


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(PACKAGE.parent)}:{line}"


def test_no_two_classes_share_a_name():
    places: dict[str, list[str]] = defaultdict(list)
    for path, tree in trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                places[node.name].append(where(path, node.lineno))
    shared = {name: found for name, found in places.items() if len(found) > 1}
    assert not shared, shared


def test_no_two_modules_share_a_file_name():
    names: dict[str, list[str]] = defaultdict(list)
    for path in MODULES:
        if path.name != "__init__.py":
            names[path.name].append(str(path.relative_to(PACKAGE.parent)))
    assert not {name: found for name, found in names.items() if len(found) > 1}
    # The names that once meant several things are gone altogether.
    assert not {"engine.py", "resident.py", "sink.py"} & set(names)


def test_a_constant_means_one_thing_wherever_it_is_assigned():
    values: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path, tree in trees():
        for node in tree.body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            for target in targets:
                if isinstance(value, ast.Attribute) and value.attr == getattr(target, "id", ""):
                    continue  # ERROR = p.ERROR: the same thing, under its own name
                if isinstance(target, ast.Name) and target.id.isupper():
                    values[target.id][ast.unparse(value)].append(where(path, node.lineno))
    meanings = {name: dict(found) for name, found in values.items() if len(found) > 1}
    assert not meanings, meanings
