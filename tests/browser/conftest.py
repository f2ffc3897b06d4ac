"""Fixtures of the browser suite: headless Chromium driven by Playwright (the system's
/usr/bin/chromium, never a browser Playwright downloads) against a live `coordinator serve`
with the sandbox products and a `coordinatorctl console` in front of it.

A missing browser (or Playwright) **fails** the suite when `CI=true` (CI must run it) and skips
it with a message everywhere else, as tests/conftest.py does for PostgreSQL. `nox -s browser`
installs Debian's chromium when it is missing and it runs as root.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from support.needs import unavailable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

CHROMIUM_VARIABLE = "COORDINATOR_TEST_CHROMIUM"
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def browser_unavailable(reason: str) -> NoReturn:
    __tracebackhide__ = True
    unavailable(
        f"The browser tests cannot run: {reason}",
        f"run `nox -s browser`, or set {CHROMIUM_VARIABLE}",
    )


def chromium_path() -> str | None:
    named = os.environ.get(CHROMIUM_VARIABLE)
    if named:
        return named if os.access(named, os.X_OK) else None
    for candidate in CHROMIUM_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("chromium")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        browser_unavailable("the playwright package is not installed")
    executable = chromium_path()
    if executable is None:
        browser_unavailable("no Chromium at /usr/bin/chromium")
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(
                executable_path=executable, headless=True, args=["--no-sandbox"]
            )
        except Error as error:
            browser_unavailable(f"Chromium did not start ({type(error).__name__})")
        try:
            yield launched
        finally:
            launched.close()
