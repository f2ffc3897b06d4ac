"""Architecture rule 9: one word per concept.

No public class name (a top-level `class X` whose name does not start with `_`) is defined in
more than one module of the product's packages: a name says one thing wherever it is read. A
module may import and re-export a class defined elsewhere; only definitions count.
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


def public_classes(sources: list[Path]) -> dict[str, list[str]]:
    """Each public top-level class name and the modules (paths under `src`) defining it."""
    defined: dict[str, list[str]] = defaultdict(list)
    for source in sources:
        for path in sorted(source.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    defined[node.name].append(path.relative_to(source).as_posix())
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
            "class Twice:\n    pass\n\nclass _Private:\n    pass\n"
        )
    defined = public_classes([tmp_path])
    assert defined["Twice"] == ["one/model.py", "two/model.py"]
    assert "_Private" not in defined


def test_no_public_class_name_is_defined_twice() -> None:
    twice = {
        name: modules
        for name, modules in sorted(public_classes(SOURCES).items())
        if len(modules) > 1
    }
    assert not twice, "public class names defined in more than one module:\n" + "\n".join(
        f"  {name}: {', '.join(modules)}" for name, modules in twice.items()
    )
