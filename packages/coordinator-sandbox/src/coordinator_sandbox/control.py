"""Driving a running sandbox from the command line: the control routes of file 08 §11 behind
`coordinator-sandbox seed | reviews | decide | fault | faults | received | bind`.

Every command finds the sandbox through the `endpoints.json` its `serve` wrote into the state
directory at readiness (default `.coordinator/sandbox` under the current directory, which is
where `coordinatorctl dev` keeps it), sends one or a few requests to the control routes on
loopback and prints a short text answer (or the JSON body with `--json`). A sandbox that does
not answer, or a refusal, is one line on stderr and exit 1; a usage mistake exit 2.

`bind` is what `coordinatorctl dev` asks to connect a project's aliases to the sandbox: for each
`NAME=PRODUCT` it makes sure a client signing key `NAME-client.jwk` exists in the secrets
directory (client id `coordinator-NAME`), registers its public half with the running identity
provider and in `clients.json` (so a restarted sandbox knows it too), and prints the runtime
file's `connections` entry for it: the product's origin, the token endpoint, the resource and
the scopes the sandbox product accepts for every operation of that product.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

from coordinator_sandbox.breg import ACTION_SCOPES, DEFAULT_REGISTRY, RECORD_SCOPES
from coordinator_sandbox.casework import READ_SCOPES as CASEWORK_READ_SCOPES
from coordinator_sandbox.casework import REQUEST_SCOPES as CASEWORK_REQUEST_SCOPES
from coordinator_sandbox.casework import STATUSES as REVIEW_STATUSES
from coordinator_sandbox.defaults import DEFAULT_RESOURCES
from coordinator_sandbox.keys import (
    SigningKey,
    generate_private_jwk,
    read_json_file,
    write_secret_json,
)
from coordinator_sandbox.messaging import SCOPES as MESSAGING_SCOPES
from coordinator_sandbox.scheduling import CREATE_SCOPES as SCHEDULING_CREATE_SCOPES
from coordinator_sandbox.scheduling import READ_SCOPES as SCHEDULING_READ_SCOPES
from coordinator_sandbox.service import FAULT_KINDS

__all__ = [
    "BOUND_PRODUCTS",
    "DECISIONS",
    "DEFAULT_STATE_DIR",
    "ControlError",
    "bind",
    "decide",
    "endpoints",
    "fault",
    "faults",
    "received",
    "reviews",
    "seed",
]

DEFAULT_STATE_DIR: Final = Path(".coordinator") / "sandbox"
LATEST: Final = "latest"  # `decide latest`: the review request received last still pending
TIMEOUT_SECONDS: Final = 5.0
COMPLETION_TOKEN_FILE: Final = "casework-completions-token"
EVENT_KEY_FILE: Final = "applications-events.key"

# What `decide` accepts: the Casework statuses of file 08 §4, and three words an author thinks
# in. A workflow routes `approved` and `rejected` and treats anything else as inconclusive.
DECISIONS: Final[Mapping[str, str]] = {
    "approve": "approved",
    "reject": "rejected",
    "inconclusive": "changes_requested",
    **{status: status for status in REVIEW_STATUSES},
}

# The products `bind` connects, with the scopes the sandbox accepts for all their operations
# and, for BReg, the access profile the connection sends.
BOUND_PRODUCTS: Final[Mapping[str, tuple[str, ...]]] = {
    "breg": tuple(sorted({*RECORD_SCOPES, *ACTION_SCOPES})),
    "casework": tuple(sorted({*CASEWORK_REQUEST_SCOPES, *CASEWORK_READ_SCOPES})),
    "messaging": tuple(sorted(MESSAGING_SCOPES)),
    "scheduling": tuple(sorted({*SCHEDULING_CREATE_SCOPES, *SCHEDULING_READ_SCOPES})),
}
BREG_PROFILE: Final = "coordinator-reader"
# The product of an operation id's first segment, as the sandbox serves it.
_SERVICE_OF: Final = {"external-http": "external", "identity": "identity"}
PRODUCTS: Final = (
    "identity",
    "breg",
    "casework",
    "messaging",
    "scheduling",
    "external",
    "evaluation",
)


class ControlError(Exception):
    """A control command could not do what it was asked; the message says why and what next."""


@dataclass(frozen=True)
class Answer:
    """A control command's result: one text for people, one JSON value for `--json`."""

    text: str
    value: Any

    def write(self, as_json: bool) -> None:
        if as_json:
            sys.stdout.write(json.dumps(self.value, indent=2, ensure_ascii=False) + "\n")
        else:
            sys.stdout.write(self.text)


# -- finding the sandbox -------------------------------------------------------------------------


def endpoints(state_dir: Path) -> dict[str, str]:
    """The origins `serve` announced in `<state_dir>/endpoints.json`."""
    path = state_dir / "endpoints.json"
    try:
        value = read_json_file(path)
    except (OSError, ValueError):
        raise ControlError(
            f"No running sandbox found: {path} cannot be read. Start one with"
            " `coordinator-sandbox serve --state-dir DIR` or `coordinatorctl dev`, or name its"
            " state directory with --state-dir."
        ) from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ControlError(f"{path} is not the endpoints file of a sandbox.")
    return value


def _origin(state_dir: Path, service: str) -> str:
    found = endpoints(state_dir).get(service)
    if found is None:
        raise ControlError(
            f"The running sandbox does not serve {service}; start it with that service"
            " (`--services`)."
        )
    return found


def _service_of(operation: str) -> str:
    product = operation.split(".", 1)[0]
    return _SERVICE_OF.get(product, product)


def _request(method: str, url: str, body: Any = None) -> Any:
    """One control request; the JSON answer, or ControlError with the sandbox's problem."""
    try:
        answer = httpx.request(method, url, json=body, timeout=TIMEOUT_SECONDS, trust_env=False)
    except httpx.HTTPError:
        raise ControlError(
            "The sandbox does not answer: is it still running? (`coordinatorctl dev` or"
            " `coordinator-sandbox serve` must be running for this state directory.)"
        ) from None
    if answer.status_code >= 400:
        detail = ""
        try:
            problem = answer.json()
            if isinstance(problem, dict):
                detail = f" {problem.get('code', '')}: {problem.get('detail', '')}".rstrip(": ")
        except ValueError:
            pass
        raise ControlError(f"The sandbox refused the request ({answer.status_code}).{detail}")
    if not answer.content:
        return None
    return answer.json()


def _read_json(source: str) -> Any:
    """The JSON of a file, or of stdin for `-`."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise ControlError(f"{source} cannot be read as a UTF-8 text file.") from None
    try:
        return json.loads(text)
    except ValueError:
        raise ControlError(f"{source} does not hold one JSON value.") from None


# -- the commands --------------------------------------------------------------------------------


def seed(state_dir: Path, collection: str, record_id: str, source: str) -> Answer:
    """PUT a BReg record: the file holds `{domainData, revisionIdentifier?, …}` (08 §11)."""
    record = _read_json(source)
    if not isinstance(record, dict) or not isinstance(record.get("domainData"), dict):
        raise ControlError(
            'A record file holds a JSON object with a `domainData` object: {"domainData": {…}}.'
        )
    url = f"{_origin(state_dir, 'breg')}/sandbox/records/{collection}/{record_id}"
    found = _request("PUT", url, record)
    revision = found.get("data", {}).get("revisionIdentifier") if isinstance(found, dict) else None
    text = f"Seeded BReg record {collection}/{record_id}"
    return Answer(text + (f" (revision {revision})\n" if revision else "\n"), found)


def reviews(state_dir: Path) -> Answer:
    """The review requests Casework received, pending or decided."""
    found = _request("GET", f"{_origin(state_dir, 'casework')}/sandbox/review-requests")
    items = found.get("reviewRequests", []) if isinstance(found, dict) else []
    if not items:
        return Answer("No review requests.\n", found)
    rows = [["REQUEST", "STATE", "POLICY"]]
    for review in items:
        result = review.get("result")
        state = result.get("status", "decided") if isinstance(result, dict) else "pending"
        policy = review.get("policy") or {}
        rows.append(
            [
                str(review.get("requestId")),
                str(state),
                f"{policy.get('id', '-')} {policy.get('version', '')}".strip(),
            ]
        )
    return Answer(_table(rows), found)


def decide(
    state_dir: Path,
    request_id: str,
    decision: str,
    *,
    outcome: str | None = None,
    result_file: str | None = None,
) -> Answer:
    """Decide a pending review; Casework then sends its completion to the coordinator."""
    status = DECISIONS.get(decision)
    if status is None:
        raise ControlError(f"A decision is one of {', '.join(DECISIONS)}.")
    body: dict[str, Any] = {"status": status}
    if outcome is not None:
        body["outcome"] = outcome
    if result_file is not None:
        details = _read_json(result_file)
        if not isinstance(details, dict):
            raise ControlError("A --result file holds one JSON object.")
        body["result"] = details
    origin = _origin(state_dir, "casework")
    if request_id == LATEST:
        request_id = _latest_pending(origin)
    found = _request("POST", f"{origin}/sandbox/review-requests/{request_id}/decision", body)
    return Answer(
        f"Decided review request {request_id}: {status}; Casework sends its completion now\n",
        found,
    )


def _latest_pending(origin: str) -> str:
    """The id of the review request received last among those still pending."""
    found = _request("GET", f"{origin}/sandbox/review-requests")
    items = found.get("reviewRequests", []) if isinstance(found, dict) else []
    pending = [str(item["requestId"]) for item in items if item.get("result") is None]
    if not pending:
        raise ControlError("No review request is pending; `reviews` lists them all.")
    return pending[-1]


def fault(
    state_dir: Path,
    operation: str,
    kind: str,
    *,
    count: int = 1,
    status: int | None = None,
    code: str | None = None,
    delay_seconds: float | None = None,
    refusal_code: str | None = None,
) -> Answer:
    """Inject a fault for the next `count` calls of `operation` (08 §11.7)."""
    if kind not in FAULT_KINDS:
        raise ControlError(f"A fault kind is one of {', '.join(FAULT_KINDS)}.")
    spec: dict[str, Any] = {"operation": operation, "kind": kind, "count": count}
    for name, value in (
        ("status", status),
        ("code", code),
        ("delaySeconds", delay_seconds),
        ("refusalCode", refusal_code),
    ):
        if value is not None:
            spec[name] = value
    service = _service_of(operation)
    found = _request("POST", f"{_origin(state_dir, service)}/sandbox/faults", spec)
    calls = "call" if count == 1 else f"{count} calls"
    return Answer(f"Fault {kind} set for the next {calls} of {operation}\n", found)


def faults(state_dir: Path, *, clear: bool = False) -> Answer:
    """The pending faults of every product (or, with `clear`, none any more)."""
    found: dict[str, Any] = {}
    lines: list[list[str]] = [["PRODUCT", "OPERATION", "KIND", "REMAINING"]]
    for service, origin in _products(state_dir):
        if clear:
            _request("DELETE", f"{origin}/sandbox/faults")
            continue
        answer = _request("GET", f"{origin}/sandbox/faults")
        pending = answer.get("faults", []) if isinstance(answer, dict) else []
        found[service] = pending
        lines.extend(
            [service, str(item.get("operation")), str(item.get("kind")), str(item.get("remaining"))]
            for item in pending
        )
    if clear:
        return Answer("Cleared every pending fault\n", {"cleared": True})
    return Answer(_table(lines) if len(lines) > 1 else "No pending faults.\n", found)


def received(state_dir: Path, *, product: str | None = None) -> Answer:
    """What each product received, in order: operation, method and path, answer, fault."""
    if product is not None and product not in PRODUCTS:
        raise ControlError(f"A product is one of {', '.join(PRODUCTS)}.")
    found: dict[str, Any] = {}
    rows: list[list[str]] = [["PRODUCT", "#", "OPERATION", "REQUEST", "ANSWER", "FAULT"]]
    for service, origin in _products(state_dir):
        if product is not None and service != product:
            continue
        answer = _request("GET", f"{origin}/sandbox/requests")
        entries = answer.get("requests", []) if isinstance(answer, dict) else []
        found[service] = entries
        for entry in entries:
            outcome = entry.get("outcome")
            rows.append(
                [
                    service,
                    str(entry.get("sequence")),
                    str(entry.get("operation")),
                    f"{entry.get('method')} {entry.get('path')}",
                    str(entry.get("status")) if outcome == "answered" else str(outcome),
                    str(entry.get("fault") or "-"),
                ]
            )
    if len(rows) == 1:
        return Answer("No product has received a request yet.\n", found)
    return Answer(_table(rows), found)


def _products(state_dir: Path) -> list[tuple[str, str]]:
    known = endpoints(state_dir)
    return [(service, known[service]) for service in PRODUCTS if service in known]


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() + "\n"
        for row in rows
    )


# -- bind ----------------------------------------------------------------------------------------


def bind(
    state_dir: Path,
    secrets_dir: Path,
    connections: Mapping[str, str],
    event_sources: Sequence[str] = (),
) -> Answer:
    """The runtime file's `connections` (and `eventSources`) entries for the running sandbox;
    each connection's client key is made and registered first (module docstring)."""
    found = endpoints(state_dir)
    token_endpoint = found.get("tokenEndpoint")
    if token_endpoint is None:
        raise ControlError("The running sandbox has no identity provider (`--services`).")
    bound: dict[str, Any] = {}
    for name, product in connections.items():
        if product not in BOUND_PRODUCTS:
            raise ControlError(
                f"`bind` connects {', '.join(BOUND_PRODUCTS)}; `{product}` connections are"
                " written in the project's runtime.yaml."
            )
        client_id = f"coordinator-{name}"
        key_file = f"{name}-client.jwk"
        key = _client_key(secrets_dir / key_file)
        registration = {"clientId": client_id, "jwks": {"keys": [key.public]}}
        _request("POST", f"{found['identity']}/sandbox/clients", registration)
        _remember_client(state_dir, registration)
        connection: dict[str, Any] = {"product": product, "baseUrl": _origin(state_dir, product)}
        if product == "breg":
            connection["profile"] = BREG_PROFILE
        connection["authorization"] = {
            "tokenEndpoint": token_endpoint,
            "clientId": client_id,
            "signingKeyRef": f"secret:file/{key_file}",
            "resource": DEFAULT_RESOURCES[product],
            "scopes": list(BOUND_PRODUCTS[product]),
        }
        if product == "casework":
            connection["reviewCompletions"] = {"tokenRef": f"secret:file/{COMPLETION_TOKEN_FILE}"}
        bound[name] = connection
    sources = {
        name: {"source": DEFAULT_REGISTRY, "signingKeyRef": f"secret:file/{EVENT_KEY_FILE}"}
        for name in event_sources
    }
    value = {"connections": bound, "eventSources": sources}
    return Answer(json.dumps(value, indent=2) + "\n", value)


def _client_key(path: Path) -> SigningKey:
    if path.exists():
        return SigningKey(read_json_file(path))
    key = SigningKey(generate_private_jwk("EC"))
    write_secret_json(path, key.jwk)
    return key


def _remember_client(state_dir: Path, registration: Mapping[str, Any]) -> None:
    path = state_dir / "clients.json"
    existing = read_json_file(path).get("clients", []) if path.exists() else []
    kept = [entry for entry in existing if entry.get("clientId") != registration["clientId"]]
    path.write_text(json.dumps({"clients": [*kept, dict(registration)]}, indent=2) + "\n")
