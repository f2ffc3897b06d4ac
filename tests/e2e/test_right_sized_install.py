"""Right-sized installs (issue 12 item 2), in processes of their own: the offline commands of
`coordinatorctl` load no module of the service half, in the full environment and in a clean
virtual environment with only the coordinator-models, coordinator-core and coordinatorctl wheels
(no extra), where `migrate` refuses with the extra to install, without a traceback. (What the
extra declares and the refusal's form are tests/unit/cli/test_offline_install.py's.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support.wheels import uv_or_skip

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "reviewed-notice"


def service_distributions() -> set[str]:
    """The distributions coordinator-core's `service` extra adds (its installed metadata), but
    httpx, which the remote commands need, and httptools, which the console's listener needs:
    coordinatorctl installs both."""
    found = [Requirement(text) for text in metadata.requires("coordinator-core") or []]
    return {
        canonicalize_name(requirement.name)
        for requirement in found
        if requirement.marker is not None and requirement.marker.evaluate({"extra": "service"})
    } - {"httpx", "httptools"}


# Runs each command line of argv[1] in one process, then writes to the file argv[2] the exit
# codes and which top-level modules of the service half that process loaded.
OFFLINE_PROBE = """
import json, sys
from pathlib import Path
from coordinatorctl.cli import main
codes = [main(argv) for argv in json.loads(sys.argv[1])]
# The service half, tracing, pydantic (only the remote commands read the API models) and the
# console's web stack (only `console` serves pages).
service = {"cryptography", "sqlmodel", "sqlalchemy", "psycopg", "alembic", "httpx", "httptools",
           "jwt", "opentelemetry", "pydantic", "starlette", "uvicorn", "jinja2"}
loaded = sorted({name.split(".")[0] for name in sys.modules} & service)
Path(sys.argv[2]).write_text(json.dumps({"codes": codes, "loaded": loaded}))
"""


def _probe(python: str, work: Path, environment: dict[str, str] | None = None) -> dict[str, Any]:
    answer = work.parent / f"{work.name}-probe.json"
    result = subprocess.run(
        [python, "-c", OFFLINE_PROBE, json.dumps(_offline_commands(work)), str(answer)],
        cwd=work, capture_output=True, text=True, timeout=300, env=environment, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    found: dict[str, Any] = json.loads(answer.read_text(encoding="utf-8"))
    found["stderr"] = result.stderr
    return found


def _offline_commands(work: Path) -> list[list[str]]:
    journal = work / "journal"
    journal.mkdir()
    return [
        ["init", "--directory", str(work / "follow-up")],
        ["check", "--project", str(work / "follow-up")],
        ["explain", "--project", str(EXAMPLE), "--graph", "mermaid"],
        ["test", "--project", str(EXAMPLE)],
        ["package", "--project", str(EXAMPLE), "--output", str(work / "dist" / "pkg")],
        ["schema", "workflow"],
        ["eval", "--functions", str(EXAMPLE / "functions.rhai"), "--function", "read_request",
         "--arguments", '[{"applicationId": "app-1"}]'],
        ["audit", "verify", "--directory", str(journal)],
    ]  # fmt: skip


def test_the_offline_commands_import_nothing_of_the_service_half(tmp_path: Path) -> None:
    """In this (full) environment: the offline commands succeed and load no module of the
    `service` extra, so they can run where it is not installed."""
    work = tmp_path / "work"
    work.mkdir()
    probe = _probe(sys.executable, work)
    assert (probe["codes"], probe["loaded"]) == ([0] * 8, []), probe["stderr"]


# Builds the wheels (outside nox), makes a virtual environment and installs into it.
@pytest.mark.timeout(600)
def test_an_install_without_the_extras_runs_the_offline_commands(
    workspace_wheels: dict[str, Path], tmp_path: Path
) -> None:
    """A clean virtual environment with only the coordinator-models, coordinator-core and
    coordinatorctl wheels (no extra): no store driver is installed, the offline commands
    succeed, and `migrate` refuses with the extra to install, without a traceback."""
    uv = uv_or_skip()
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    python = venv / "bin" / "python"
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    wheels = [str(workspace_wheels[n]) for n in ("coordinator-models", "coordinator-core",
                                                  "coordinatorctl")]  # fmt: skip
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", str(python),
         "-c", str(REPO / "constraints.txt"), *wheels],
        check=True, capture_output=True, timeout=600, env=environment,
    )  # fmt: skip
    listed = subprocess.run(
        [uv, "pip", "list", "--python", str(python), "--format", "json"],
        check=True, capture_output=True, text=True, timeout=120, env=environment,
    ).stdout  # fmt: skip
    present = {canonicalize_name(entry["name"]) for entry in json.loads(listed)}
    assert present & service_distributions() == set()
    assert "psycopg-binary" not in present

    work = tmp_path / "work"
    work.mkdir()
    probe = _probe(str(python), work, environment)
    assert (probe["codes"], probe["loaded"]) == ([0] * 8, []), probe["stderr"]

    refused = subprocess.run(
        [str(venv / "bin" / "coordinatorctl"), "--runtime-config", str(work / "follow-up" /
         "runtime.yaml"), "migrate", "--format", "json"],
        cwd=work, capture_output=True, text=True, timeout=120, env=environment, check=False,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert "Traceback" not in refused.stderr
    [diagnostic] = json.loads(refused.stdout)["diagnostics"]
    assert diagnostic["code"] == "coordinator.command.extra-required"
    assert "coordinatorctl[deploy]" in diagnostic["suggestedAction"]
