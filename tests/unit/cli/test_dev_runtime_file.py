"""`coordinatorctl dev` without its processes: the dev runtime file it writes (every alias bound,
the author's external and evaluation connections pointed at the sandbox, the deployment block),
which must check clean against the project; the readiness lines it reads; and its refusals
(not a project, an installation without the service and the sandbox, a second session). The
live loop is tests/e2e/test_dev.py."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

import pytest

from coordinator_core.checking.checker import check_project
from coordinator_sandbox import control
from coordinator_sandbox.server import READY_PREFIX
from coordinatorctl import dev
from coordinatorctl.cli import main
from coordinatorctl.dev import session
from coordinatorctl.dev.runtime_file import (
    ACTIONS,
    Pin,
    aliases,
    read_runtime,
    runtime_document,
    write_runtime,
)

REPO = Path(__file__).resolve().parents[3]
ENDPOINTS = {
    "identity": "http://127.0.0.1:41000",
    "breg": "http://127.0.0.1:41001",
    "casework": "http://127.0.0.1:41002",
    "messaging": "http://127.0.0.1:41003",
    "scheduling": "http://127.0.0.1:41004",
    "external": "http://127.0.0.1:41005",
    "evaluation": "http://127.0.0.1:41006",
    "issuer": "http://127.0.0.1:41000",
    "tokenEndpoint": "http://127.0.0.1:41000/oauth/token",
}
DIGEST = "sha256:" + "4" * 64


def bound(connections: dict[str, str], sources: list[str]) -> dict[str, Any]:
    """What `coordinator-sandbox bind` answers, from the sandbox's own table of products."""
    out: dict[str, Any] = {"connections": {}, "eventSources": {}}
    for name, product in connections.items():
        connection: dict[str, Any] = {"product": product, "baseUrl": ENDPOINTS[product]}
        if product == "breg":
            connection["profile"] = control.BREG_PROFILE
        connection["authorization"] = {
            "tokenEndpoint": ENDPOINTS["tokenEndpoint"],
            "clientId": f"coordinator-{name}",
            "signingKeyRef": f"secret:file/{name}-client.jwk",
            "resource": f"urn:registrystack:{product}",
            "scopes": list(control.BOUND_PRODUCTS[product]),
        }
        if product == "casework":
            connection["reviewCompletions"] = {"tokenRef": "secret:file/casework-completions-token"}
        out["connections"][name] = connection
    for source in sources:
        out["eventSources"][source] = {
            "source": "urn:registrystack:registry:example:instance:primary",
            "signingKeyRef": "secret:file/applications-events.key",
        }
    return out


def decoded(example: str) -> dict[str, Any]:
    checked = check_project(REPO / "examples" / example, definition_only=True)
    assert checked.definition is not None and checked.definition.decoded is not None
    return checked.definition.decoded


@pytest.mark.parametrize("example", ["delayed-follow-up", "reviewed-notice", "holiday-routing"])
def test_the_dev_runtime_file_binds_every_alias_and_checks_clean(
    tmp_path: Path, example: str
) -> None:
    project = REPO / "examples" / example
    workflow = decoded(example)
    connections, sources = aliases(workflow)
    sandboxed = {
        n: p for n, p in connections.items() if p in {"breg", "casework", "messaging", "scheduling"}
    }
    document = runtime_document(
        base=read_runtime(project / "runtime.yaml"),
        given=False,
        bound=bound(sandboxed, sources),
        endpoints=ENDPOINTS,
        state=tmp_path / "state",
        secrets=tmp_path / "secrets",
        listener_port=20123,
        pin=Pin(tmp_path / "package", DIGEST, str(workflow["project"]["id"]), DIGEST),
    )
    written = tmp_path / "runtime.yaml"
    write_runtime(written, document)
    checked = check_project(project, runtime_config=written, definition_only=True)
    assert not checked.has_errors, [d.code for d in checked.diagnostics]
    deployment = document["deployment"]
    assert deployment["package"] == {"root": str(tmp_path / "package"), "expectedDigest": DIGEST}
    assert deployment["listener"]["bind"] == "127.0.0.1:20123"
    assert deployment["authentication"]["issuer"] == ENDPOINTS["issuer"]
    [policy] = deployment["authentication"]["policies"]
    assert policy["workflows"] == [workflow["project"]["id"]] and policy["actions"] == list(ACTIONS)
    assert document["database"] == {"sqlite": {"path": str(tmp_path / "state" / "coordinator.db")}}
    # The author's external and evaluation connections, pointed at the sandbox's services.
    for section, service in (
        ("externalHttpConnections", "external"),
        ("evaluationConnections", "evaluation"),
    ):
        for connection in document.get(section, {}).values():
            assert connection["baseUrl"] == ENDPOINTS[service]
    assert oct(written.stat().st_mode & 0o777) == "0o600"


def test_aliases_name_each_connection_with_its_product_and_the_trigger_sources() -> None:
    connections, sources = aliases(decoded("reviewed-notice"))
    assert connections == {"applications": "breg", "reviews": "casework", "notices": "messaging"}
    assert sources == ["applications"]


def test_a_given_runtime_file_is_kept_as_written_and_only_the_deployment_is_dev_s(
    tmp_path: Path,
) -> None:
    given = read_runtime(REPO / "examples" / "reviewed-notice" / "runtime.yaml")
    assert given is not None
    document = runtime_document(
        base=given,
        given=True,
        bound={"connections": {}, "eventSources": {}},
        endpoints=ENDPOINTS,
        state=tmp_path,
        secrets=tmp_path / "secrets",
        listener_port=8108,
        pin=Pin(tmp_path / "package", DIGEST, "reviewed-notice", DIGEST),
    )
    for member in ("connections", "eventSources", "secretProviders", "database", "observation"):
        assert document[member] == given[member]
    assert document["deployment"]["package"]["expectedDigest"] == DIGEST
    assert document["deployment"] != given["deployment"]


def test_the_readiness_lines_dev_reads_are_the_ones_printed() -> None:
    from coordinatorctl.console import READY_PREFIX as CONSOLE

    assert session.SANDBOX_READY == READY_PREFIX
    assert session.CONSOLE_READY_PREFIX == CONSOLE


def report(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main([*argv, "--format", "json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_dev_outside_a_project_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, document = report(capsys, "dev", "--project", str(tmp_path))
    assert code == 3 and document["diagnostics"][0]["code"] == "coordinator.definition.read"
    assert "coordinatorctl init" in document["diagnostics"][0]["suggestedAction"]


def test_dev_without_the_service_and_the_sandbox_names_what_is_missing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "workflow.yaml").write_text("")
    real = dev.importlib.util.find_spec

    def find_spec(name: str) -> Any:
        return None if name in ("coordinator_api", "coordinator_sandbox") else real(name)

    monkeypatch.setattr(dev.importlib.util, "find_spec", find_spec)
    code, document = report(capsys, "dev", "--project", str(tmp_path))
    [diagnostic] = document["diagnostics"]
    assert code == 2 and diagnostic["code"] == "coordinator.dev.extra-required"
    assert "coordinator-api, coordinator-sandbox" in diagnostic["message"]
    assert "coordinatorctl[dev]" in diagnostic["suggestedAction"]


def test_a_second_dev_on_the_same_project_names_the_running_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "workflow.yaml").write_text("")
    state = tmp_path / ".coordinator" / "dev"
    state.mkdir(parents=True)
    (state / "session.json").write_text(
        json.dumps({"pid": 4242, "service": "http://127.0.0.1:20999", "console": None})
    )
    descriptor = os.open(state / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, document = report(capsys, "dev", "--project", str(tmp_path))
    finally:
        os.close(descriptor)
    [diagnostic] = document["diagnostics"]
    assert code == 1 and diagnostic["code"] == "coordinator.dev.already-running"
    assert "(process 4242, service at http://127.0.0.1:20999)" in diagnostic["message"]
