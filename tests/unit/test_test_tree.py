"""The test tree collects in one pytest run: test modules are imported by their base name
(rootdir-relative, no packages), so two test files with the same name in different tiers make
the whole collection fail with an import-file mismatch. Every tier has a default timeout
(tests/conftest.py) and, but for the suites with sessions of their own, a nox session of its
name (noxfile.py's TIERS). A missing tool skips a test, and fails it under CI=true."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest
from support.needs import unavailable

TESTS = Path(__file__).resolve().parents[1]
# The suites with nox sessions of their own, outside `nox -s tests`.
OWN_SESSIONS = {"chaos", "browser"}


def test_every_test_module_has_a_base_name_of_its_own() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    repeated = {name: sorted(paths) for name, paths in seen.items() if len(paths) > 1}
    assert repeated == {}, f"rename one of each: {repeated}"


def tier_folders() -> set[str]:
    return {path.name for path in TESTS.iterdir() if path.is_dir() and any(path.rglob("test_*.py"))}


def noxfile_tiers() -> set[str]:
    tree = ast.parse((TESTS.parent / "noxfile.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["TIERS"]:
            return set(ast.literal_eval(node.value))
    raise AssertionError("noxfile.py has no TIERS")


def test_every_tier_has_a_nox_session() -> None:
    assert noxfile_tiers() == tier_folders() - OWN_SESSIONS


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


@pytest.mark.parametrize(
    ("ci", "outcome"), [("", pytest.skip.Exception), ("true", pytest.fail.Exception)]
)
def test_a_missing_tool_skips_but_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]
) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="pg_dump is not installed"):
        unavailable("pg_dump is not installed", "apt-get install postgresql-client")


def test_no_test_sets_an_alarm_of_its_own() -> None:
    """pytest-timeout times a test with SIGALRM: a test's own alarm would replace its handler
    and cancel its timer. A test that needs a shorter bound says so with the timeout marker."""
    armed = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("*.py")
        if path != Path(__file__).resolve()
        and any(word in path.read_text(encoding="utf-8") for word in ("SIGALRM", "setitimer"))
    ]
    assert armed == []
