"""Architecture rule 9: a `_private` name is never imported from another module.

A leading underscore says "this module's own": a helper another module needs is made public in
the module that owns it, or moved where it belongs. The scan reads the three packages of the
product with `ast` and finds, in every module:

* `from m import _name` where `m` is a module of the packages (relative imports resolved) other
  than the importing one;
* `alias._name` where `alias` is bound to such a module (`import a.b as alias`,
  `from a import b`, or the dotted path of `import a.b`);
* a `_private` module (`pkg/_shared.py`) imported from outside the package that holds it.

Dunder names (`__version__`) are not private.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.sources import parsed

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    ROOT / "packages" / "coordinator-core" / "src",
    ROOT / "packages" / "coordinator-api" / "src",
    ROOT / "packages" / "coordinatorctl" / "src",
]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def modules(sources: list[Path]) -> dict[str, tuple[Path, bool]]:
    """Every module of `sources` by dotted name, with its path and whether it is a package."""
    found: dict[str, tuple[Path, bool]] = {}
    for source in sources:
        for path in sorted(source.rglob("*.py")):
            parts = list(path.relative_to(source).with_suffix("").parts)
            package = parts[-1] == "__init__"
            if package:
                parts = parts[:-1]
            found[".".join(parts)] = (path, package)
    return found


def _parent(name: str) -> str:
    return name.rpartition(".")[0]


def _private_module_outside(target: str, importer: str) -> bool:
    """`target` has a `_private` segment whose package does not hold `importer`."""
    parts = target.split(".")
    for index, part in enumerate(parts):
        if _private(part):
            holder = ".".join(parts[:index])
            if not (importer == holder or importer.startswith(holder + ".")):
                return True
    return False


def private_imports(sources: list[Path]) -> list[str]:
    """Each import of another module's `_private` name, as `importer: what`."""
    known = modules(sources)
    found: list[str] = []
    for name, (path, package) in sorted(known.items()):
        tree = parsed(path)
        here = name if package else _parent(name)
        bound: dict[str, str] = {}  # a local name -> the module of the packages it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name not in known:
                        continue
                    if _private_module_outside(alias.name, name):
                        found.append(f"{name}: {alias.name}")
                    if alias.asname is not None:
                        bound[alias.asname] = alias.name
                    else:
                        head = alias.name.split(".")[0]
                        bound.setdefault(head, head)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target not in known:
                    continue
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    if full in known:  # a module of the package
                        if _private_module_outside(full, name):
                            found.append(f"{name}: {full}")
                        bound[alias.asname or alias.name] = full
                    else:
                        if _private_module_outside(target, name):
                            found.append(f"{name}: {target}")
                        if _private(alias.name) and target != name:
                            found.append(f"{name}: {target}.{alias.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                dotted = _dotted(node.value, bound)
                if dotted is not None and dotted in known and dotted != name:
                    found.append(f"{name}: {dotted}.{node.attr}")
    return sorted(set(found))


def _dotted(node: ast.expr, bound: dict[str, str]) -> str | None:
    """The module an expression names through the bound names (`alias`, `a.b.c`), or None."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, bound)
        return None if base is None else f"{base}.{node.attr}"
    return None


def test_the_scan_finds_each_kind_of_private_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("")
    (package / "owner.py").write_text("_helper = 1\npublic = 2\n__version__ = '1'\n")
    (package / "inner" / "_shared.py").write_text("value = 1\n")
    (package / "inner" / "user.py").write_text("from pkg.inner._shared import value\n")
    (package / "user.py").write_text(
        "from pkg.owner import _helper, public, __version__\n"
        "from . import owner\n"
        "import pkg.owner as aliased\n"
        "import pkg.owner\n"
        "from pkg.inner._shared import value\n"
        "print(owner._helper, aliased._helper, pkg.owner._helper, public._x)\n"
    )
    (package / "self.py").write_text("_mine = 1\nfrom pkg.self import _mine\n")
    assert private_imports([tmp_path]) == [
        "pkg.user: pkg.inner._shared",
        "pkg.user: pkg.owner._helper",
    ]


def test_no_private_name_is_imported_from_another_module() -> None:
    found = private_imports(SOURCES)
    assert not found, "`_private` names imported from another module:\n" + "\n".join(
        f"  {line}" for line in found
    )
