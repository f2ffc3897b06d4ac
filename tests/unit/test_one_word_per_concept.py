"""Architecture rule 9: one word per concept.

No public type name is defined in more than one module of the product's packages: a name says
one thing wherever it is read. A type name is a top-level `class X`, or a top-level type alias —
`X = Literal[...]` / `Callable[...]` / `tuple[...]` / `A | B` / another type's name, `X: TypeAlias
= ...`, `type X = ...` — whose name is capitalised (not an ALL_CAPS constant) and does not start
with `_`. A module may import and re-export a type defined elsewhere (`X = module.X` included);
only definitions count.

Module names too: two modules (or packages) share a name only when they hold the same concept.
Each shared name is listed in `SAME_CONCEPT` with the exact modules that share it and the concept
they hold, so a new module of an existing name is a decision, not an accident; a module named as
the package that holds it (`store/store.py`) is that package's main concept and needs no entry.
`LEFT_FOR_LATER` holds a shared name whose rename waits on other work, with why.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from support.sources import parsed

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
            tree = parsed(path)
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


# -- module names ------------------------------------------------------------------------------

SAME_CONCEPT: dict[str, tuple[frozenset[str], str]] = {
    "audit": (
        frozenset({"coordinator_api/audit", "coordinator_core/shell/audit"}),
        "the audit journal of 07 §11: its entries and writer, and the API's bracket that writes"
        " a request's entries",
    ),
    "deploy": (
        frozenset({"coordinator_core/shell/store/deploy", "coordinatorctl/deploy"}),
        "deploying a store (09 §3): migrate, plan, apply, status, and the commands that run them",
    ),
    "dialect": (
        frozenset({"coordinator_core/jsonschema/dialect", "coordinator_core/shell/store/dialect"}),
        "the variant of a standard language the package speaks: JSON Schema as 01 §12 restricts"
        " it, SQL as each store backend differs (the released migrations import the store's by"
        " name, so it cannot move)",
    ),
    "errors": (
        frozenset({"coordinator_core/errors", "coordinator_core/functions/errors"}),
        "a package's error type and its codes",
    ),
    "events": (
        frozenset({"coordinator_api/events", "coordinator_api/handlers/events"}),
        "the signed product events of 06 §8 at the HTTP edge: their signature and their route",
    ),
    "limits": (
        frozenset({"coordinator_api/limits", "coordinator_core/limits"}),
        "the named bounds of the contract",
    ),
    "model": (
        frozenset(
            {
                "coordinator_core/authoring/model",
                "coordinator_core/config/model",
                "coordinator_core/shell/service/model",
            }
        ),
        "the typed values of what its package reads or serves (workflow.yaml, runtime.yaml, the"
        " run service)",
    ),
    "operator": (
        frozenset({"coordinator_api/handlers/operator", "coordinator_core/shell/store/operator"}),
        "the operator's actions of 06 §7: holds and retention",
    ),
    "rules": (
        frozenset(
            {
                "coordinator_core/config/rules",
                "coordinator_core/definition/rules",
                "coordinator_core/scenarios/rules",
            }
        ),
        "the check rules of one authored format (runtime.yaml, workflow.yaml, scenarios)",
    ),
    "runtime": (
        frozenset({"coordinator_core/shell/runtime", "coordinator_core/shell/service/runtime"}),
        "the service process at run time: its start and loops, and the dependencies it shares",
    ),
}

LEFT_FOR_LATER: dict[str, tuple[frozenset[str], str]] = {
    "commands": (
        frozenset({"coordinator_core/engine/commands", "coordinatorctl/commands"}),
        "the engine's commands and the command line's offline subcommands: coordinatorctl's"
        " subcommands are being put in a table (issue 27 item 4); its module is renamed with it",
    ),
}


def module_names(sources: list[Path]) -> dict[str, list[str]]:
    """Each module or package name and the modules (paths under `src`, no suffix) bearing it;
    `__main__` is an entry point, not a name."""
    named: dict[str, list[str]] = defaultdict(list)
    for source in sources:
        for path in sorted(source.rglob("*.py")):
            module = path.relative_to(source).with_suffix("")
            if module.name == "__main__":
                continue
            if module.name == "__init__":
                module = module.parent
            named[module.name].append(module.as_posix())
    return named


def shared_module_names(sources: list[Path]) -> dict[str, frozenset[str]]:
    """The names more than one module bears, a module named as its package counted once."""
    shared: dict[str, frozenset[str]] = {}
    for name, modules in module_names(sources).items():
        distinct = {m for m in modules if m.rpartition("/")[0] not in modules}
        if len(distinct) > 1:
            shared[name] = frozenset(distinct)
    return shared


def test_the_module_scan_finds_a_shared_name(tmp_path: Path) -> None:
    for module in ("one/events.py", "two/events/__init__.py", "two/store/store.py", "one/x.py"):
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text("")
    (tmp_path / "two" / "store" / "__init__.py").write_text("")
    (tmp_path / "two" / "__main__.py").write_text("")
    assert shared_module_names([tmp_path]) == {"events": frozenset({"one/events", "two/events"})}


def test_two_modules_share_a_name_only_when_they_hold_one_concept() -> None:
    shared = shared_module_names(SOURCES)
    explained = {**SAME_CONCEPT, **LEFT_FOR_LATER}
    unexplained = {
        name: sorted(modules)
        for name, modules in sorted(shared.items())
        if name not in explained or explained[name][0] != modules
    }
    assert not unexplained, (
        "module names shared by modules that are not listed as holding one concept (rename"
        " one, or list them in SAME_CONCEPT with the concept they share):\n"
        + "\n".join(f"  {name}: {', '.join(modules)}" for name, modules in unexplained.items())
    )


def test_every_listed_name_is_still_shared() -> None:
    """A name freed by a rename leaves the lists."""
    shared = shared_module_names(SOURCES)
    stale = sorted((set(SAME_CONCEPT) | set(LEFT_FOR_LATER)) - set(shared))
    assert not stale, f"listed but no longer shared: {stale}"
