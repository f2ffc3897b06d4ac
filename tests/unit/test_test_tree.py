"""The test tree collects in one pytest run: test modules are imported by their base name
(rootdir-relative, no packages), so two test files with the same name in different tiers make
the whole collection fail with an import-file mismatch. Every tier has a default timeout
(tests/conftest.py)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_a_base_name_of_its_own() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    repeated = {name: sorted(paths) for name, paths in seen.items() if len(paths) > 1}
    assert repeated == {}, f"rename one of each: {repeated}"


def root_conftest(config: pytest.Config) -> ModuleType:
    plugin = config.pluginmanager.get_plugin(str(TESTS / "conftest.py"))
    assert isinstance(plugin, ModuleType), "tests/conftest.py is not a registered plugin"
    return plugin


def test_every_tier_has_a_default_timeout(request: pytest.FixtureRequest) -> None:
    tiers = {
        path.name for path in TESTS.iterdir() if path.is_dir() and any(path.rglob("test_*.py"))
    }
    assert tiers == set(root_conftest(request.config).TIER_TIMEOUTS)


def test_a_test_without_its_own_timeout_gets_its_tiers(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None
    assert marker.args == (root_conftest(request.config).TIER_TIMEOUTS["unit"],)


@pytest.mark.timeout(7)
def test_a_test_with_its_own_timeout_keeps_it(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None
    assert marker.args == (7,)
