"""The test tree collects in one pytest run: test modules are imported by their base name
(rootdir-relative, no packages), so two test files with the same name in different tiers make
the whole collection fail with an import-file mismatch."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_a_base_name_of_its_own() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    repeated = {name: sorted(paths) for name, paths in seen.items() if len(paths) > 1}
    assert repeated == {}, f"rename one of each: {repeated}"
