"""The runtime file of the dev deployment: every alias of the workflow bound to the sandbox, the
development keys, a SQLite store and the audit journal under `.coordinator/dev/`, the listener
on loopback and caller authentication against the sandbox's issuer.

It is written to `.coordinator/dev/runtime.yaml` (JSON, which is YAML) and never into the
project's own `runtime.yaml`. What it holds, by source:

* `connections` of the products the sandbox stands in for (BReg, Casework, Messaging,
  Scheduling) and the `eventSources` of the workflow's triggers: from `coordinator-sandbox bind`
  (the sandbox knows its origins, resources and scopes);
* `externalHttpConnections`, `evaluationConnections` and `observation`: copied from the
  project's `runtime.yaml` (the author's response schemas and paths), with each `baseUrl`
  pointed at the sandbox's external JSON or evaluation service;
* with `--runtime-config FILE`: that file's members as written, to which only the `deployment`
  block (and a `database` and a `file` secret provider when it has none) is added;
* `deployment`: the package pinned at this activation, the listener, the caller policy (client
  `ops-console`, scope `coordinator:operate`, every action, operator), the keys.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from coordinator_core import limits

__all__ = [
    "ACTIONS",
    "CALLER_CLIENT",
    "CALLER_SCOPE",
    "DATABASE_ID",
    "SANDBOX_PRODUCTS",
    "Pin",
    "aliases",
    "read_runtime",
    "runtime_document",
    "write_runtime",
]

DATABASE_ID: Final = "coordinator-dev"
CALLER_CLIENT: Final = "ops-console"
CALLER_SCOPE: Final = "coordinator:operate"
AUDIENCE: Final = "coordinator"
ACTIONS: Final = (
    "start", "status", "inspect", "cancel", "retry-same", "reconcile", "doctor",
    "restore-hold", "release-restore-hold", "release-admission-hold", "retain",
)  # fmt: skip
SANDBOX_PRODUCTS: Final = frozenset({"breg", "casework", "messaging", "scheduling"})
# Which copied section a product's connections live in, and the sandbox service behind it.
_COPIED: Final = {
    "externalHttpConnections": "external",
    "evaluationConnections": "evaluation",
}
_HEADER: Final = (
    "# Written by `coordinatorctl dev` at every activation; edits here are overwritten.\n"
    "# The project's own runtime.yaml is never written (docs/running-locally.md).\n"
)


@dataclass(frozen=True, slots=True)
class Pin:
    """The package an activation pins, and where the dev deployment keeps its state."""

    package_root: Path
    package_digest: str
    workflow_id: str
    revision: str


def aliases(decoded: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The connections the workflow's aliases name, with their product (the operation id's
    first segment), and the event sources its triggers name."""
    connections: dict[str, str] = {}
    for alias in (decoded.get("operations") or {}).values():
        if isinstance(alias, dict):
            operation, connection = alias.get("operation"), alias.get("connection")
            if isinstance(operation, str) and isinstance(connection, str):
                connections[connection] = operation.split(".", 1)[0]
    sources = sorted(
        {
            str(trigger["source"])
            for trigger in (decoded.get("triggers") or {}).values()
            if isinstance(trigger, dict) and isinstance(trigger.get("source"), str)
        }
    )
    return connections, sources


def read_runtime(path: Path) -> dict[str, Any] | None:
    """A runtime file's members as written (`${…}` kept), or None when it cannot be read as
    one; the check reports why."""
    from coordinator_core.authoring.decode import read_authored_file

    try:
        data = path.read_bytes()
    except OSError:
        return None
    authored = read_authored_file(data, file=path.name, expected_kind=limits.KIND_RUNTIME)
    return authored.decoded


def runtime_document(
    *,
    base: Mapping[str, Any] | None,
    given: bool,
    bound: Mapping[str, Any],
    endpoints: Mapping[str, str],
    state: Path,
    secrets: Path,
    listener_port: int,
    pin: Pin,
) -> dict[str, Any]:
    """The dev runtime document. `base` is the runtime file given with `--runtime-config`
    (`given`), or else the project's own runtime.yaml (or None); `bound` is `bind`'s answer."""
    document: dict[str, Any] = {
        "apiVersion": limits.RUNTIME_API_VERSION,
        "kind": limits.KIND_RUNTIME,
    }
    base = dict(base or {})
    if given:
        document.update({k: v for k, v in base.items() if k != "deployment"})
    else:
        for member in ("observation",):
            if member in base:
                document[member] = base[member]
        if bound.get("connections"):
            document["connections"] = dict(bound["connections"])
        for section, service in _COPIED.items():
            copied = _pointed(base.get(section), endpoints.get(service))
            if copied:
                document[section] = copied
        if bound.get("eventSources"):
            document["eventSources"] = dict(bound["eventSources"])
    providers = dict(document.get("secretProviders") or {})
    providers.setdefault("file", {"root": str(secrets)})
    document["secretProviders"] = providers
    document.setdefault("database", {"sqlite": {"path": str(state / "coordinator.db")}})
    document["deployment"] = {
        "databaseId": DATABASE_ID,
        "package": {"root": str(pin.package_root), "expectedDigest": pin.package_digest},
        "listener": {
            "bind": f"127.0.0.1:{listener_port}",
            "tlsTermination": "development-loopback",
        },
        "authentication": {
            "issuer": endpoints["issuer"],
            "audience": AUDIENCE,
            "jwksSource": {"type": "static", "documentRef": "secret:file/caller-jwks.json"},
            "allowedClients": [CALLER_CLIENT],
            "policies": [
                {
                    "clientId": CALLER_CLIENT,
                    "requiredScopes": [CALLER_SCOPE],
                    "workflows": [pin.workflow_id],
                    "actions": list(ACTIONS),
                    "operator": True,
                }
            ],
        },
        "auditDirectory": str(state / "audit"),
        "auditKeyRef": "secret:file/audit.key",
        "activeStateKey": 1,
        "stateKeys": {"1": {"keyRef": "secret:file/state-1.key"}},
        "admissionKeyRef": "secret:file/admission.key",
    }
    return document


def _pointed(section: object, origin: str | None) -> dict[str, Any]:
    """The connections of a copied section, each `baseUrl` pointed at the sandbox service."""
    if not isinstance(section, dict):
        return {}
    copied: dict[str, Any] = {}
    for name, written in section.items():
        if isinstance(written, dict):
            connection = dict(written)
            if origin is not None:
                connection["baseUrl"] = origin
            copied[name] = connection
    return copied


def write_runtime(path: Path, document: Mapping[str, Any]) -> None:
    """Replace the dev runtime file atomically (mode 0600: it names the secrets' directory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
        stream.write(_HEADER)
        stream.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    os.replace(temporary, path)
