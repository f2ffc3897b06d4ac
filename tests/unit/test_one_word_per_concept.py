"""Architecture rule 9: one word per concept.

No public type name is defined in more than one module of the product's packages: a name says
one thing wherever it is read. A type name is a top-level `class X`, or a top-level type alias —
`X = Literal[...]` / `Callable[...]` / `tuple[...]` / `A | B` / another type's name, `X: TypeAlias
= ...`, `type X = ...` — whose name is capitalised (not an ALL_CAPS constant) and does not start
with `_`. A module may import and re-export a type defined elsewhere (`X = module.X` included);
only definitions count.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    ROOT / "packages" / "coordinator-core" / "src",
    ROOT / "packages" / "coordinator-api" / "src",
    ROOT / "packages" / "coordinatorctl" / "src",
]


def _type_name(name: str) -> bool:
    return name[:1].isupper() and not name.isupper() and not name.startswith("_")


def _is_type_expression(value: ast.expr) -> bool:
    """`Literal[...]`, `Callable[...]`, `tuple[...]` and other subscripted generics, `A | B`,
    or a bare capitalised name (an alias of another type)."""
    if isinstance(value, ast.Subscript):
        return True
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.BitOr):
        return _is_type_expression(value.left) and _is_type_expression(value.right)
    if isinstance(value, ast.Name):
        return _type_name(value.id)
    if isinstance(value, ast.Attribute):
        return _type_name(value.attr)
    return isinstance(value, ast.Constant) and value.value is None


def type_names(tree: ast.Module) -> list[str]:
    """The public type names a module defines at its top level: classes and type aliases."""
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            names.append(node.name)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and _type_name(target.id):
                value = node.value
                reexport = isinstance(value, ast.Attribute) and value.attr == target.id
                if _is_type_expression(value) and not reexport:
                    names.append(target.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            annotation = ast.unparse(node.annotation)
            if _type_name(node.target.id) and annotation.endswith("TypeAlias"):
                names.append(node.target.id)
        elif type(node).__name__ == "TypeAlias":  # `type X = ...` (Python 3.12+)
            name = getattr(node, "name", None)
            if isinstance(name, ast.Name) and _type_name(name.id):
                names.append(name.id)
    return names


def public_classes(sources: list[Path]) -> dict[str, list[str]]:
    """Each public top-level type name and the modules (paths under `src`) defining it."""
    defined: dict[str, list[str]] = defaultdict(list)
    for source in sources:
        for path in sorted(source.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for name in type_names(tree):
                defined[name].append(path.relative_to(source).as_posix())
    return defined


def test_the_scan_sees_the_three_packages() -> None:
    defined = public_classes(SOURCES)
    assert "CoordinatorError" in defined  # core
    assert "ApiSettings" in defined  # coordinator-api
    assert any(
        module.startswith("coordinatorctl/") for found in defined.values() for module in found
    )


def test_the_scan_finds_a_duplicate(tmp_path: Path) -> None:
    for package in ("one", "two"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "model.py").write_text(
            "from typing import Literal\n"
            "class Twice:\n    pass\n\nclass _Private:\n    pass\n"
            "Word = Literal['a', 'b']\nLIMIT = 3\nAlias = Twice | None\n"
        )
    defined = public_classes([tmp_path])
    assert defined["Twice"] == ["one/model.py", "two/model.py"]
    assert defined["Word"] == ["one/model.py", "two/model.py"]
    assert defined["Alias"] == ["one/model.py", "two/model.py"]
    assert "_Private" not in defined and "LIMIT" not in defined


def test_no_public_type_name_is_defined_twice() -> None:
    twice = {
        name: modules
        for name, modules in sorted(public_classes(SOURCES).items())
        if len(modules) > 1
    }
    assert not twice, "public type names defined in more than one module:\n" + "\n".join(
        f"  {name}: {', '.join(modules)}" for name, modules in twice.items()
    )
