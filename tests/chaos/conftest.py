"""The chaos suite (`nox -s chaos`; `nox -s chaos -- --long` for the long profile): collected
only when `--chaos` is given (the nox session gives it), never by the ordinary test run."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator_sandbox.testing import Processes

_E2E = Path(__file__).resolve().parents[1] / "e2e"
if str(_E2E) not in sys.path:
    sys.path.insert(0, str(_E2E))

from chaos_support import Profile  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", help="run the long chaos profile")


@pytest.fixture
def profile(request: pytest.FixtureRequest) -> Profile:
    return Profile.long() if request.config.getoption("--long") else Profile.ci()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    group = Processes(tmp_path)
    try:
        yield group
    finally:
        group.stop_all()
