"""Shared support for the sandbox tests (fixtures are re-exported by conftest.py).

One sandbox process per test session, started exactly as the demo starts it: `keys` writes the
client keys into a secrets directory, `serve` runs every service on ephemeral loopback ports,
and tests talk to it over real HTTP with httpx.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from coordinator_sandbox import testing

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
PROFILE = "coordinator-reader"
RECORD_ID = "a8d12546-b2ca-46ac-b12b-06c199041bb2"
RESOURCES = {
    "breg": "urn:registrystack:breg:applications",
    "casework": "urn:registrystack:casework",
    "messaging": "urn:registrystack:messaging",
    "scheduling": "urn:registrystack:scheduling",
}
CLIENTS = {
    "breg": "coordinator-applications",
    "casework": "coordinator-reviews",
    "messaging": "coordinator-notices",
    "scheduling": "coordinator-appointments",
}
KEY_FILES = {
    "coordinator-applications": "applications-client.jwk",
    "coordinator-reviews": "reviews-client.jwk",
    "coordinator-notices": "notices-client.jwk",
    "coordinator-appointments": "appointments-client.jwk",
}
SCOPES = {
    "breg": ["breg:records:read", "breg:actions:invoke"],
    "casework": ["casework:reviews:request"],
    "messaging": ["messaging:messages:submit"],
    "scheduling": ["scheduling:appointments:create"],
}
SEED: dict[str, Any] = {
    "delivery": {"initialSeconds": 0.05, "maximumSeconds": 0.2, "maximumAttempts": 20},
    "breg": {
        "records": [
            {
                "collection": "applications",
                "recordId": RECORD_ID,
                "entityTypeIdentifier": "application",
                "domainData": {"applicant": {"name": "Ada"}, "status": "submitted", "fee": 1.5},
            }
        ],
        "actions": {
            "approve-application": {
                "kind": "immediate",
                "registryRevision": "2026.1",
                "inputSchema": {
                    "type": "object",
                    "required": ["applicationId", "decision"],
                    "properties": {
                        "applicationId": {"type": "string"},
                        "decision": {"enum": ["approve", "reopen"]},
                    },
                    "additionalProperties": False,
                },
                "conditionInputs": ["applicationId"],
                "targets": {
                    "application": {
                        "collection": "applications",
                        "recordIdMember": "applicationId",
                        "entity": "application",
                    }
                },
                "refusals": [
                    {"refusalCode": "application.closed", "whenInput": {"decision": "reopen"}}
                ],
            },
            "propose-change": {"kind": "proposal"},
        },
    },
}


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A stand-in coordinator that records what the sandbox delivers to it."""

    url: str
    received: list[Received] = field(default_factory=list)
    answers: queue.Queue[int] = field(default_factory=queue.Queue)

    def wait_for(self, count: int, path_prefix: str, timeout: float = 5.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            matching = [item for item in self.received if item.path.startswith(path_prefix)]
            if len(matching) >= count:
                return matching
            time.sleep(0.02)
        raise AssertionError(f"expected {count} deliveries to {path_prefix}")


@pytest.fixture(scope="session")
def receiver() -> Iterator[Receiver]:
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            state.received.append(Received(self.path, dict(self.headers.items()), body))
            try:
                status = state.answers.get_nowait()
            except queue.Empty:
                status = 204
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator_sandbox", *argv],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


class Sandbox(testing.Sandbox):
    """The running sandbox, beside the secrets directory `keys` wrote, and what a client of its
    identity provider does (file 08 §2.2)."""

    @property
    def secrets_dir(self) -> Path:
        return self.state_dir.parent / "secrets"

    @property
    def token_endpoint(self) -> str:
        return self.endpoints["tokenEndpoint"]

    def private_jwk(self, client_id: str) -> dict[str, Any]:
        jwk: dict[str, Any] = json.loads((self.secrets_dir / KEY_FILES[client_id]).read_text())
        return jwk

    def assertion(
        self,
        client_id: str,
        *,
        key: Any = None,
        kid: str | None = None,
        audience: Any = None,
        issued_at: int | None = None,
        lifetime: int = 60,
        jti: str | None = None,
    ) -> str:
        """A client assertion built exactly as file 08 §2.2 step 1 describes."""
        jwk = self.private_jwk(client_id)
        signing_key = key if key is not None else jwt.PyJWK(jwk).key
        now = int(time.time()) if issued_at is None else issued_at
        claims = {
            "iss": client_id,
            "sub": client_id,
            "aud": self.token_endpoint if audience is None else audience,
            "jti": jti or str(uuid.uuid4()),
            "iat": now,
            "exp": now + lifetime,
        }
        header = {"kid": kid or jwk["kid"], "typ": "JWT"}
        return jwt.encode(claims, signing_key, algorithm="ES256", headers=header)

    def token_request(self, assertion: str, resource: str, scopes: list[str]) -> httpx.Response:
        return self.http.post(
            self.token_endpoint,
            data={
                "grant_type": "client_credentials",
                "client_assertion_type": ASSERTION_TYPE,
                "client_assertion": assertion,
                "scope": " ".join(scopes),
                "resource": resource,
            },
        )

    def token(self, service: str, scopes: list[str] | None = None) -> str:
        client_id = CLIENTS[service]
        answer = self.token_request(
            self.assertion(client_id), RESOURCES[service], scopes or SCOPES[service]
        )
        assert answer.status_code == 200, answer.text
        return str(answer.json()["access_token"])

    def headers(self, service: str, **extra: str) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.token(service)}", "Accept": "application/json"}
        if service == "breg":
            headers["Registry-Access-Profile"] = PROFILE
        headers.update({name.replace("_", "-"): value for name, value in extra.items()})
        return headers


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[Sandbox]:
    root = tmp_path_factory.mktemp("demo") / ".coordinator"
    processes = testing.Processes(root.parent)
    try:
        testing.write_keys(root / "secrets")
        started = Sandbox.start(
            processes, root / "sandbox", coordinator_url=receiver.url, seed=SEED, timeout=20
        )
        yield started
        started.close()
        assert processes.stop(started.process) == 0, processes.log("sandbox")
    finally:
        processes.stop_all()


@pytest.fixture
def key() -> str:
    """A fresh idempotency key."""
    return f"key-{uuid.uuid4()}"
