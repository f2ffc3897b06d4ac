"""Right-sized installs (issue 12 item 2): `coordinatorctl` without its `deploy` extra runs every
offline command with no store driver, sealing or HTTP-client library of the service half
installed, and a deployment command refuses with `coordinator.command.extra-required` naming
the extra, never a traceback."""

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

from coordinatorctl import installed
from coordinatorctl.cli import main

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "reviewed-notice"
# The distributions of coordinator-core's `service` extra, which the offline install lacks.
SERVICE_DISTRIBUTIONS = {
    "cryptography",
    "sqlmodel",
    "sqlalchemy",
    "psycopg",
    "alembic",
    "pyjwt",
    "prometheus-client",
}


def _extra_requirements(distribution: str, extra: str) -> list[Requirement]:
    """The requirements that the installed `distribution` adds for `extra`."""
    found = [Requirement(text) for text in metadata.requires(distribution) or []]
    return [r for r in found if r.marker is not None and r.marker.evaluate({"extra": extra})]


def test_the_probed_modules_are_the_import_names_of_the_service_extra() -> None:
    """`installed.SERVICE_MODULES` lists exactly one top-level module of each requirement of
    coordinator-core's `service` extra (as the installed metadata declares it)."""
    owners = metadata.packages_distributions()
    declared = {
        canonicalize_name(requirement.name)
        for requirement in _extra_requirements("coordinator-core", "service")
    }
    assert declared == SERVICE_DISTRIBUTIONS | {"httpx"}
    probed = {
        next(canonicalize_name(d) for d in owners[module] if canonicalize_name(d) in declared)
        for module in installed.SERVICE_MODULES
    }
    assert probed == declared
    deploy = _extra_requirements("coordinatorctl", "deploy")
    assert [(r.name, r.extras) for r in deploy] == [("coordinator-core", {"service"})]


@pytest.mark.parametrize(
    "argv",
    [
        ["--runtime-config", "/srv/coordinator/runtime.yaml", "migrate"],
        ["--runtime-config", "/srv/coordinator/runtime.yaml", "plan"],
        ["--runtime-config", "/srv/coordinator/runtime.yaml", "apply"],
        ["--runtime-config", "/srv/coordinator/runtime.yaml", "deployment-status"],
        [
            "--runtime-config",
            "/srv/coordinator/runtime.yaml",
            "audit",
            "verify",
            "--directory",
            "/x",
        ],
    ],
)
def test_a_deployment_command_without_the_extra_refuses_and_names_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    # One module of the extra that this environment cannot import (found by the same probe).
    monkeypatch.setattr(
        installed, "SERVICE_MODULES", (*installed.SERVICE_MODULES, "coordinator_absent_driver")
    )
    assert installed.missing_service_modules() == ("coordinator_absent_driver",)
    code = main([*argv, "--format", "json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 2
    [diagnostic] = document["diagnostics"]
    assert diagnostic["code"] == "coordinator.command.extra-required"
    assert "coordinatorctl[deploy]" in diagnostic["suggestedAction"]


def test_with_the_extra_nothing_is_missing() -> None:
    assert installed.missing_service_modules() == ()
    assert installed.require_deploy_extra() is None


# Runs each command line of argv[1] in one process, then writes to the file argv[2] the exit
# codes and which top-level modules of the service half that process loaded.
OFFLINE_PROBE = """
import json, sys
from pathlib import Path
from coordinatorctl.cli import main
codes = [main(argv) for argv in json.loads(sys.argv[1])]
# The service half, tracing, pydantic (only the remote commands read the API models) and the
# console's web stack (only `console` serves pages).
service = {"cryptography", "sqlmodel", "sqlalchemy", "psycopg", "alembic", "httpx", "jwt",
           "opentelemetry", "pydantic", "starlette", "uvicorn", "jinja2"}
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
    present = {entry["name"].lower() for entry in json.loads(listed)}
    assert present & SERVICE_DISTRIBUTIONS == set()
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
