"""What a test needs that a machine may lack (PostgreSQL, its binaries, nginx, Chromium, uv…):
where it is missing the test is skipped with the reason, except under `CI=true`, where it fails,
because CI must run every test. The one place of that rule (docs/testing.md)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

__all__ = ["in_ci", "unavailable"]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def unavailable(message: str, hint: str = "") -> NoReturn:
    """Fail the test under `CI=true`, else skip it: `message` says what is missing, `hint`
    how to provide it. The report names the caller's line, not this one."""
    __tracebackhide__ = True
    if in_ci():
        pytest.fail(f"{message} (CI=true: this test must run)", pytrace=False)
    pytest.skip(f"{message} ({hint + '; ' if hint else ''}CI=true fails)")
