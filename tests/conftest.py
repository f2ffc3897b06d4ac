"""PostgreSQL for every suite that needs it, and the workspace's built wheels, in one place.

The server is the one named by `COORDINATOR_TEST_POSTGRES_URL` (default
`postgresql://root@127.0.0.1:5432/root`); each test session creates its own database and drops
it afterwards. An unreachable server **fails** the PostgreSQL tests when `CI=true` (CI must run
them) and skips them with a message everywhere else.

Every test has a timeout (pytest-timeout, a required plugin): its tier's default from
`TIER_TIMEOUTS` unless the test, its class or its module carries its own
`@pytest.mark.timeout(seconds)`. A hung test fails with its stacks instead of hanging the suite.

Property tests (hypothesis) draw as many examples as the loaded profile says (`HYPOTHESIS_PROFILES`),
never a number of their own unless their examples are unusually dear: `default` everywhere,
`ci` under `CI=true` (CI runs three times as many, a different draw each run), and `thorough`
when asked for (`pytest --hypothesis-profile=thorough`). No profile has a per-example deadline: a
loaded 2-core machine makes any such bound flaky, and every test has its timeout.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import psycopg
import pytest
from hypothesis import settings
from support.needs import in_ci, unavailable

from coordinator_sandbox.testing import ScratchPostgres

TESTS = Path(__file__).resolve().parent
# The timeout of a test in each tier (the folder under tests/), in seconds, fixtures included:
# several times what the slowest test of the tier takes on a loaded 2-core machine, so that
# only a hang reaches it. A test outside these folders gets the longest.
TIER_TIMEOUTS = {
    "unit": 60,
    "sandbox": 120,
    "store": 120,
    "adapters": 120,
    "api": 120,
    "integration": 300,
    "acceptance": 600,
    "e2e": 600,
    "browser": 600,
    "chaos": 1800,
}
# The chaos suite's long profile (`nox -s chaos -- --long`) runs for hours.
CHAOS_LONG_TIMEOUT = 4 * 3600

# The examples each property test draws, by hypothesis profile.
HYPOTHESIS_PROFILES = {"default": 100, "ci": 300, "thorough": 2000}
for _name, _examples in HYPOTHESIS_PROFILES.items():
    settings.register_profile(_name, max_examples=_examples, deadline=None, print_blob=True)
# `--hypothesis-profile NAME` (hypothesis's pytest plugin) replaces this choice.
settings.load_profile("ci" if in_ci() else "default")

ADMIN_URL_VARIABLE = "COORDINATOR_TEST_POSTGRES_URL"
DEFAULT_ADMIN_URL = "postgresql://root@127.0.0.1:5432/root"


def postgres_unavailable(reason: str) -> NoReturn:
    __tracebackhide__ = True
    unavailable(
        f"PostgreSQL is unavailable: {reason}", f"set {ADMIN_URL_VARIABLE} or start PostgreSQL"
    )


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    return os.environ.get(ADMIN_URL_VARIABLE, DEFAULT_ADMIN_URL)


@pytest.fixture(scope="session")
def postgres_scratch(postgres_admin_url: str) -> Iterator[ScratchPostgres]:
    """This test session's databases and login roles on the server, dropped afterwards."""
    with ScratchPostgres(postgres_admin_url, "coordinator_test") as scratch:
        yield scratch


@pytest.fixture(scope="session")
def postgres_url(postgres_scratch: ScratchPostgres) -> str:
    """A fresh database for this test session (dropped afterwards)."""
    try:
        return postgres_scratch.database()
    except psycopg.Error as error:
        postgres_unavailable(type(error).__name__)


@pytest.fixture(scope="session")
def postgres_role(postgres_url: str, postgres_scratch: ScratchPostgres) -> Callable[[], str]:
    """Login roles for `runtimeRole` (dropped after the session, with the database)."""
    return postgres_scratch.role


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--chaos", action="store_true", help="collect tests/chaos (what `nox -s chaos` runs)"
    )
    parser.addoption(
        "--browser",
        action="store_true",
        help="collect tests/browser (what `nox -s browser` runs, with Playwright installed)",
    )


def pytest_ignore_collect(collection_path: object, config: pytest.Config) -> bool | None:
    """tests/chaos is the chaos suite's (`nox -s chaos`) and tests/browser the browser suite's
    (`nox -s browser`), not the ordinary run's."""
    name = getattr(collection_path, "name", "")
    parent = getattr(getattr(collection_path, "parent", None), "name", "")
    if name == "chaos" and parent == "tests" and not config.getoption("--chaos"):
        return True
    if name == "browser" and parent == "tests" and not config.getoption("--browser"):
        return True
    return None


def tier_of(path: Path) -> str | None:
    """The tier of a test file: the folder under tests/ it lies in."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 else None


def tier_timeout(tier: str | None, config: pytest.Config) -> int:
    if tier == "chaos" and config.getoption("--long", default=False):
        return CHAOS_LONG_TIMEOUT
    return TIER_TIMEOUTS.get(tier or "", max(TIER_TIMEOUTS.values()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tier's timeout on every test that does not carry its own."""
    for item in items:
        if item.get_closest_marker("timeout") is None:
            seconds = tier_timeout(tier_of(item.path), config)
            item.add_marker(pytest.mark.timeout(seconds))


@pytest.fixture(scope="session")
def workspace_wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Distribution name → the wheel the session installed, or one built here with uv
    (tests/support/wheels.py)."""
    from support.wheels import workspace_wheels as built

    return built(tmp_path_factory)
