"""The workspace's built wheels, for tests that inspect or install them: the ones the nox session
built and installed (`COORDINATOR_TEST_WHEELS`, noxfile.py), else built here with uv."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.needs import unavailable

ROOT = Path(__file__).resolve().parents[2]
WHEELS_VARIABLE = "COORDINATOR_TEST_WHEELS"
# Each distribution and its project directory (as noxfile.py's DISTRIBUTIONS).
DISTRIBUTIONS = {
    "coordinator-models": ROOT / "generated",
    "coordinator-core": ROOT / "packages" / "coordinator-core",
    "coordinatorctl": ROOT / "packages" / "coordinatorctl",
    "coordinator-api": ROOT / "packages" / "coordinator-api",
    "coordinator-sandbox": ROOT / "packages" / "coordinator-sandbox",
}


def uv_or_skip() -> str:
    """The uv executable; without it the test fails under CI=true and is skipped elsewhere."""
    uv = shutil.which("uv")
    if uv is None:
        unavailable("uv is not on PATH: the wheels cannot be built here", "nox installs it")
    return uv


def wheel_of(directory: Path, name: str) -> Path:
    found = sorted(directory.glob(name.replace("-", "_") + "-*.whl"))
    assert len(found) == 1, f"expected one wheel of {name} in {directory}, found {found}"
    return found[0]


def workspace_wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Distribution name → its wheel."""
    given = os.environ.get(WHEELS_VARIABLE)
    if given:
        directory = Path(given)
    else:
        uv = uv_or_skip()
        directory = tmp_path_factory.mktemp("wheels")
        for project in DISTRIBUTIONS.values():
            subprocess.run(
                [uv, "build", "--quiet", "--wheel", "--build-constraints",
                 str(ROOT / "constraints.txt"), "--out-dir", str(directory), str(project)],
                check=True, capture_output=True, timeout=300,
            )  # fmt: skip
    return {name: wheel_of(directory, name) for name in DISTRIBUTIONS}
