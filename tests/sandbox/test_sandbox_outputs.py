"""Issue 26: every operation's output schema (spec/schemas/outputs.schema.json) accepts the
sandbox's real answers. Each live adapter is driven against the sandbox over real HTTP, with
real client assertions and tokens; every success it returns is held to the output schema of its
operation (and a review result to that of completion `result`), the same schemas C13 holds a
scripted reply to. The adapters validate with them too, so a success here also proves that the
schema did not refuse a real answer."""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sandbox_support import RECORD_ID, RESOURCES, Sandbox

from coordinator_core.engine.commands import Dispatch, LookupReceipt, Observe, Prepare
from coordinator_core.engine.inputs import (
    CallOutcome,
    ObservationOutcome,
    PreparationDone,
    to_canonical,
)
from coordinator_core.operations import CATALOG
from coordinator_core.outputs import completion_output_failure, output_failure
from coordinator_core.shell.adapters import (
    Adapters,
    ClientCredentials,
    EvaluationConnection,
    ExternalConnection,
    PreparedCommand,
    ProductConnection,
)

CLIENT_OF = {
    "breg": "coordinator-applications",
    "casework": "coordinator-reviews",
    "messaging": "coordinator-notices",
    "scheduling": "coordinator-appointments",
}
ALL_SCOPES = {
    "breg": ("breg:records:read", "breg:actions:invoke"),
    "casework": ("casework:reviews:request", "casework:reviews:read"),
    "messaging": ("messaging:messages:submit",),
    "scheduling": ("scheduling:availability:read", "scheduling:appointments:create"),
}
STEP = "step"
SEEN: set[str] = set()


def _connection(sandbox: Sandbox, product: str) -> ProductConnection:
    client = CLIENT_OF[product]
    return ProductConnection(
        name=product,
        product=product,
        base_url=sandbox.endpoints[product],
        profile="coordinator-reader" if product == "breg" else None,
        authorization=ClientCredentials(
            token_endpoint=sandbox.token_endpoint,
            client_id=client,
            signing_key=sandbox.private_jwk(client),
            resource=RESOURCES[product],
            scopes=ALL_SCOPES[product],
        ),
    )


@pytest.fixture
def adapters(sandbox: Sandbox) -> Adapters:
    connections: dict[str, Any] = {product: _connection(sandbox, product) for product in CLIENT_OF}
    connections["external"] = ExternalConnection(
        name="external",
        base_url=sandbox.endpoints["external"],
        paths=frozenset({"v1/holidays", "status"}),
        query_parameters=frozenset({"year"}),
        response_schema=True,
    )
    connections["evaluation"] = EvaluationConnection(
        name="evaluation", base_url=sandbox.endpoints["evaluation"], model="sandbox-model"
    )
    return Adapters(connections)


def _command(
    operation: str, connection: str, value: Any, *, action: str | None = None
) -> PreparedCommand:
    key = f"key-{uuid.uuid4()}" if CATALOG[operation].key_required else None
    return PreparedCommand(
        operation=operation,
        connection=connection,
        input=value,
        idempotency_key=key,
        action=action,
    )


def _sealed(frozen: PreparedCommand) -> str:
    sealed = {"operation": frozen.operation, "connection": frozen.connection, "input": frozen.input}
    if frozen.idempotency_key is not None:
        sealed["idempotencyKey"] = frozen.idempotency_key
    return to_canonical(sealed)


def _deadline() -> float:
    return time.monotonic() + 10


def _call(adapters: Adapters, frozen: PreparedCommand) -> Any:
    """Prepare (when the operation needs it), send, and return the success value, held to
    the output schema of its operation."""
    if CATALOG[frozen.operation].requires_preparation:
        prepare = Prepare(STEP, frozen.operation, frozen.connection, _sealed(frozen))
        prepared = adapters.prepare(prepare, frozen, attempt_deadline=_deadline())
        assert isinstance(prepared, PreparationDone), prepared
        frozen = frozen.with_preparation(prepared.preparation)
    preparation = frozen.preparation
    dispatch = Dispatch(
        STEP,
        frozen.operation,
        frozen.connection,
        _sealed(frozen),
        frozen.idempotency_key,
        None if preparation is None else base64.b64encode(preparation).decode("ascii"),
        1,
        1,
    )
    outcome = adapters.dispatch(dispatch, frozen, attempt_deadline=_deadline())
    assert isinstance(outcome, CallOutcome) and outcome.outcome == "success", outcome
    return _held(frozen.operation, outcome.value)


def _held(operation: str, value: Any) -> Any:
    """The answer (canonical text or a value) once the output schema of `operation` took it."""
    parsed = json.loads(value) if isinstance(value, str) else value
    assert output_failure(CATALOG[operation], parsed) is None, operation
    SEEN.add(operation)
    return parsed


def _breg(adapters: Adapters, sandbox: Sandbox) -> None:
    record = _call(
        adapters,
        _command(
            "breg.read-record/v1", "breg", {"collection": "applications", "recordId": RECORD_ID}
        ),
    )
    assert record["data"]["recordIdentifier"] == RECORD_ID
    applied = _call(
        adapters,
        _command(
            "breg.invoke-action/v1",
            "breg",
            {"input": {"applicationId": RECORD_ID, "decision": "approve"}},
            action="approve-application",
        ),
    )
    assert applied["results"]["application"]["recordId"] == RECORD_ID


def _casework(adapters: Adapters, sandbox: Sandbox) -> None:
    review = {
        "kind": "eligibility",
        "subject": {
            "source": "breg:applications",
            "type": "application",
            "id": RECORD_ID,
            "version": "1",
            "digest": "sha256:" + "1" * 64,
        },
        "requesterReference": "run-1",
        "context": {"strategy": "submitted", "snapshot": {"fee": 1.5}},
    }
    accepted = _call(adapters, _command("casework.submit-review-request/v1", "casework", review))
    request_id = accepted["requestId"]
    read = _command("casework.read-review-result/v1", "casework", {"requestId": request_id})
    assert _call(adapters, read) == {"state": "pending"}
    decided = sandbox.http.post(
        sandbox.url("casework", f"/sandbox/review-requests/{request_id}/decision"),
        json={"status": "approved", "outcome": "eligible", "result": {"score": 3}},
    )
    assert decided.status_code in (200, 201), decided.text
    complete = _call(adapters, read)
    assert complete["state"] == "complete"
    observe = Observe(STEP, "casework.read-review-result/v1", "casework", to_canonical(request_id))
    observed = adapters.observe(observe, attempt_deadline=_deadline())
    assert isinstance(observed, ObservationOutcome) and observed.outcome == "complete"
    result = observed.value if not isinstance(observed.value, str) else json.loads(observed.value)
    completion = CATALOG["casework.submit-review-request/v1"].completions["result"]
    assert completion_output_failure(completion, result) is None
    assert result == complete["result"]
    withdrawn = _call(
        adapters,
        _command(
            "casework.withdraw-review-request/v1",
            "casework",
            {"requestId": request_id, "subject": review["subject"], "reason": "no longer needed"},
        ),
    )
    assert withdrawn["outcome"] == "already_terminal"


def _messaging(adapters: Adapters, sandbox: Sandbox) -> None:
    message = {
        "senderProfile": "notices",
        "to": {"email": "ada@example.org"},
        "content": {"text": "Your application was approved."},
    }
    frozen = _command("messaging.submit-message/v1", "messaging", message)
    receipt = _call(adapters, frozen)
    lookup = LookupReceipt(
        STEP, frozen.operation, frozen.connection, _sealed(frozen), frozen.idempotency_key, 1
    )
    looked_up = adapters.lookup_receipt(lookup, frozen, attempt_deadline=_deadline())
    assert looked_up.answer == "confirmed", looked_up
    assert _held("messaging.submit-message/v1", looked_up.value) == receipt


def _scheduling(adapters: Adapters, sandbox: Sandbox) -> None:
    policy = _call(adapters, _command("scheduling.read-scheduling/v1", "scheduling", {}))
    # Two days ahead: tomorrow's slots are test_sandbox_scheduling's, on the same sandbox
    # (booking tomorrow's first free slot took its 09:00 when this ran first before 09:00).
    start = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    window = {
        "offering": "consultation",
        "start": start.isoformat().replace("+00:00", "Z"),
        "end": (start + timedelta(days=14)).isoformat().replace("+00:00", "Z"),
        "limit": 5,
    }
    free = _call(adapters, _command("scheduling.read-availability/v1", "scheduling", window))
    assert free["items"], "the sandbox offers slots in a two-week window"
    admission = {
        "offering": "consultation",
        "start": free["items"][0]["start"],
        "party": {"reference": "applicant-1"},
        "channel": "video",
        "policyRevision": policy["policyRevision"],
    }
    booked = _call(
        adapters,
        _command("scheduling.create-appointment/v1", "scheduling", {"admission": admission}),
    )
    assert booked["status"] == "booked"


def _external_and_evaluation(adapters: Adapters, sandbox: Sandbox) -> None:
    answer = _call(
        adapters,
        _command(
            "external-http.get/v1", "external", {"path": "v1/holidays", "query": {"year": "2026"}}
        ),
    )
    assert answer["status"] == 200
    questions = {
        "eligible": {"type": "predicate", "instructions": "Is the applicant eligible?"},
        "track": {
            "type": "choice",
            "instructions": "Which track?",
            "criteria": {"fast": "expedite", "slow": "standard"},
        },
        "risk": {"type": "score", "instructions": "How risky?", "criteria": ["low", "mid", "high"]},
    }
    scored = _call(
        adapters,
        _command(
            "evaluation.evaluate/v1", "evaluation", {"state": {"fee": 1.5}, "questions": questions}
        ),
    )
    assert set(scored["answers"]) == set(questions)


def test_every_operation_output_schema_accepts_the_sandbox_answers(
    adapters: Adapters, sandbox: Sandbox
) -> None:
    """BReg, Casework (a review result as a call, as an observation and inside a withdrawal),
    Messaging (and its receipt lookup), Scheduling, the external endpoint and the evaluator:
    every operation a run can call answers once, and its output schema takes the answer."""
    SEEN.clear()
    for drive in (_breg, _casework, _messaging, _scheduling, _external_and_evaluation):
        drive(adapters, sandbox)
    assert set(CATALOG) - SEEN == {"breg.propose-action/v1"}  # check refuses it: it never runs
