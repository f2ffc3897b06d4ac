"""schemathesis hooks of the `contract` nox session (scripts/contract.py loads this module with
`SCHEMATHESIS_HOOKS=contract_hooks`).

Without them no generated admission succeeds (the revision and the input's application are
the deployment's, which a schema cannot know), so the stateful phase has no run to follow its
links from (issue 23: 0 of 11 links). Half of the positive `POST /v1/runs` cases are made
admissible here: the deployed workflow and revision, an input naming an application the
sandbox holds and an instant in the far future (the run waits, so that the links' status,
inspection and cancel have a live run to act on), and a valid idempotency key. The other half
stay as generated, to keep probing the refusals. Which half is decided by the generated body
itself (a digest of it), so a replayed example is mapped the same way. A restore hold the
fuzzer sets is released at once (`after_call`), or every later admission would be held.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import httpx
import schemathesis

_OPERATION = "POST /v1/runs"


def _admissible(body: Any) -> bool:
    text = json.dumps(body, sort_keys=True, default=str).encode()
    return hashlib.sha256(text).digest()[0] % 2 == 0


@schemathesis.hook
def map_case(ctx: Any, case: Any) -> Any:
    """Half of the positive `POST /v1/runs` cases become admissible (negative cases are left
    as generated: they must stay what the schema refuses)."""
    if ctx.operation.label != _OPERATION or not _admissible(case.body):
        return case
    meta = getattr(case, "meta", None)
    if meta is not None and meta.generation.mode.is_negative:
        return case
    case.body = {
        "workflow": os.environ["COORD_WORKFLOW"],
        "revision": os.environ["COORD_REVISION"],
        "input": {
            "applicationId": os.environ["COORD_APPLICATION"],
            "sendAfter": "2099-01-01T00:00:00Z",
        },
    }
    headers = {str(name): str(value) for name, value in dict(case.headers or {}).items()}
    digest = hashlib.sha256(json.dumps(headers, sort_keys=True).encode()).hexdigest()
    headers = {name: value for name, value in headers.items() if name.lower() != "idempotency-key"}
    # Each admissible case its own valid key: a replay of one is the 200 of an earlier
    # admission, which the links follow too.
    case.headers = {**headers, "Idempotency-Key": "contract-" + digest[:32]}
    return case


_HOLDS = ("POST /v1/restore-hold", "POST /v1/release-restore-hold")


@schemathesis.hook
def after_call(ctx: Any, case: Any, response: Any) -> None:
    """A restore hold the fuzzer set is released at once, attestations given: the runs the
    later cases admit (and the stateful phase follows) must not meet a held store."""
    if ctx.operation is None or ctx.operation.label not in _HOLDS:
        return
    if getattr(response, "status_code", None) != 200:
        return
    origin = os.environ["COORD_URL"]
    headers = {"Authorization": "Bearer " + os.environ["COORD_TOKEN"]}
    with httpx.Client(timeout=30) as client:
        client.post(
            origin + "/v1/release-restore-hold", json={"reason": "CONTRACT"}, headers=headers
        )
        client.post(
            origin + "/v1/release-admission-hold",
            json={
                "reason": "CONTRACT",
                "admissionHistoryComplete": True,
                "priorDeploymentFenced": True,
            },
            headers=headers,
        )
