"""Architecture rule 3: the generated models are imported in one adapter module per consumer
package.

`coordinator_models` (generated from spec/ by `nox -s generate`) is the typed boundary of the
service API's bodies. In each consumer package exactly one module imports it — the adapter,
which re-exports what the rest of the package needs — so a change of the generated code meets
one module. Every import counts: at module level, inside functions, under TYPE_CHECKING, and
`importlib.import_module` / `__import__` of a literal name. Reading the package's data with
`importlib.resources.files("coordinator_models")` (describe.py's shipped document) is a resource
read, not an import, and is not counted.

`ADAPTERS` maps each consumer package (its source directory under packages/) to its adapter;
a package joins the rule with one entry.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support.sources import parsed

ROOT = Path(__file__).resolve().parents[2]
MODELS = "coordinator_models"

# Consumer package (the directory under packages/<distribution>/src) → its adapter module,
# relative to that directory.
ADAPTERS = {
    "coordinator_api": (
        ROOT / "packages" / "coordinator-api" / "src",
        "coordinator_api/wire.py",
    ),
    "coordinatorctl": (
        ROOT / "packages" / "coordinatorctl" / "src",
        "coordinatorctl/remote/models.py",
    ),
}


def _is_models(name: str) -> bool:
    return name == MODELS or name.startswith(MODELS + ".")


def model_imports(path: Path) -> list[int]:
    """The lines of `path` that import `coordinator_models` (or a module of it)."""
    lines: list[int] = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            if any(_is_models(alias.name) for alias in node.names):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module is not None and _is_models(node.module):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call):
            function = node.func
            name = (
                function.attr
                if isinstance(function, ast.Attribute)
                else function.id
                if isinstance(function, ast.Name)
                else ""
            )
            if (
                name in ("import_module", "__import__")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and _is_models(node.args[0].value)
            ):
                lines.append(node.lineno)
    return sorted(lines)


def importers(source: Path, package: str) -> dict[str, list[int]]:
    """Each module of `package` (a path relative to `source`) that imports the models."""
    found: dict[str, list[int]] = {}
    for path in sorted((source / package).rglob("*.py")):
        lines = model_imports(path)
        if lines:
            found[path.relative_to(source).as_posix()] = lines
    return found


@pytest.mark.parametrize("package", sorted(ADAPTERS))
def test_only_the_adapter_module_imports_the_generated_models(package: str) -> None:
    source, adapter = ADAPTERS[package]
    found = importers(source, package)
    assert adapter in found, f"{adapter} should import {MODELS}: it is the package's adapter"
    others = {module: lines for module, lines in found.items() if module != adapter}
    assert not others, f"only {adapter} may import {MODELS}; also imported by:\n" + "\n".join(
        f"  {module}: line {', '.join(map(str, lines))}" for module, lines in others.items()
    )


@pytest.mark.parametrize("package", sorted(ADAPTERS))
def test_the_adapter_re_exports_the_generated_classes_themselves(package: str) -> None:
    import importlib

    from pydantic import BaseModel

    from coordinator_models import api

    _, adapter = ADAPTERS[package]
    module = importlib.import_module(adapter.removesuffix(".py").replace("/", "."))
    exported = {name: getattr(module, name) for name in module.__all__}
    classes = {
        name: value
        for name, value in exported.items()
        if isinstance(value, type) and issubclass(value, BaseModel)
    }
    assert classes, f"{adapter} re-exports no model class"
    for name, value in classes.items():
        if value is BaseModel:  # pydantic's base, re-exported for annotations (`wire.Body`)
            continue
        # The generated class itself, under its own name: no copy and no subclass.
        assert getattr(api, name) is value, name


def test_the_scan_finds_every_form_of_import(tmp_path: Path) -> None:
    package = tmp_path / "consumer"
    package.mkdir()
    (package / "adapter.py").write_text("from coordinator_models.api import Problem\n")
    (package / "plain.py").write_text("import coordinator_models.api as api\n")
    (package / "lazy.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from coordinator_models import api\n"
        "def f():\n"
        "    import coordinator_models\n"
    )
    (package / "dynamic.py").write_text(
        "import importlib\nimportlib.import_module('coordinator_models.api')\n"
    )
    (package / "resource.py").write_text(
        "from importlib.resources import files\n"
        "files('coordinator_models').joinpath('openapi.json').read_text()\n"
        "import coordinator_modelsx\n"
        "from . import coordinator_models\n"
    )
    assert importers(tmp_path, "consumer") == {
        "consumer/adapter.py": [1],
        "consumer/dynamic.py": [2],
        "consumer/lazy.py": [3, 5],
        "consumer/plain.py": [1],
    }
