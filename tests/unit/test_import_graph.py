"""ARCHITECTURE rule 11: no import cycle, not even through `TYPE_CHECKING` — a cycle means a
concept has no home yet. Read with grimp (the graph import-linter checks the layers on), so a
cycle anywhere in the three packages (the core, the API, the CLI) fails here with its modules
named."""

from __future__ import annotations

import grimp
import pytest

PACKAGES = ("coordinator_core", "coordinator_api", "coordinatorctl")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    """The import graph of the installed packages (the wheels the session installed)."""
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def _cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """The strongly connected components of more than one module under `package`."""
    modules = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if not (child == package or child.startswith(package + ".")):
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_has_an_import_cycle(graph: grimp.ImportGraph, package: str) -> None:
    assert _cycles(graph, package) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    made = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        made.add_module(module)
    made.add_import(importer="pkg.a", imported="pkg.b")
    made.add_import(importer="pkg.b", imported="pkg.a")
    made.add_import(importer="pkg.c", imported="pkg.a")
    assert _cycles(made, "pkg") == [["pkg.a", "pkg.b"]]
