"""Right-sized installs (issue 12 item 2): `coordinatorctl` without its `deploy` extra runs every
offline command with no store driver, sealing or HTTP-client library of the service half
installed, and a deployment command refuses with `coordinator.command.extra-required` naming
the extra, never a traceback. The offline commands in a process of their own, and in a clean
environment without the extras, are tests/e2e/test_right_sized_install.py's."""

from __future__ import annotations

import json
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from coordinatorctl import installed
from coordinatorctl.cli import main

# The distributions of coordinator-core's `service` extra, which the offline install lacks.
SERVICE_DISTRIBUTIONS = {
    "cryptography",
    "sqlmodel",
    "sqlalchemy",
    "psycopg",
    "alembic",
    "pyjwt",
    "httptools",
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
