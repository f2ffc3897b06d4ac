"""A prepared BReg action after an observed Casework review (examples/recorded-decision):
the preparation is frozen next to the request before anything is sent, the wait is a record
observed by claims, and a completion event brings its next observation forward (07 §7.3,
§7.4 step 3, §7.6)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from integration_support import APPLICATION_ID, Deployed

from coordinator_core.shell.adapters import PreparedCommand


def test_a_decided_review_is_observed_then_recorded_and_notified(
    recorded_deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed = recorded_deployed
    parsed: list[str] = []
    from_frozen = PreparedCommand.from_frozen.__func__  # type: ignore[attr-defined]

    def counted(cls: type[PreparedCommand], command: str, **options: Any) -> PreparedCommand:
        parsed.append(json.loads(command)["operation"])
        return from_frozen(cls, command, **options)  # type: ignore[no-any-return]

    monkeypatch.setattr(PreparedCommand, "from_frozen", classmethod(counted))
    products = deployed.products
    admitted = deployed.admit({"applicationId": APPLICATION_ID})
    run_id = admitted.run.run_id
    assert deployed.tick_until_step(run_id, "await-review") == 1  # carried on from the request
    waiting = deployed.status(run_id)
    assert waiting is not None and waiting.next_due_at is not None
    assert (waiting.next_due_at - waiting.run.state.admitted_at) / 1000 >= 30
    assert not deployed.worker().tick()  # the wait is a record, not a sleeping worker
    reference = f"recorded-decision:{APPLICATION_ID}"
    reviews = products.http.get(products.url("casework", "/sandbox/review-requests")).json()
    request_id = next(
        review["requestId"]
        for review in reversed(reviews["reviewRequests"])
        if review["request"]["requesterReference"] == reference and review["result"] is None
    )
    decided = products.http.post(
        products.url("casework", f"/sandbox/review-requests/{request_id}/decision"),
        json={"status": "approved"},
    )
    assert decided.status_code == 200, decided.text
    deployed.service.complete_review("reviews", uuid.UUID(request_id))
    parsed.clear()
    status, ticks = deployed.drive(run_id)
    # The prepared action's frozen command is parsed once for its `Prepare` and its
    # `Dispatch` (one attempt), as is the notice's for its `Dispatch`.
    assert sorted(parsed) == ["breg.invoke-action/v1", "messaging.submit-message/v1"], parsed
    assert status.status == "finished", status
    assert ticks == 1  # the observation's finish carries the run on to its end (07 §7.7)
    assert isinstance(status.output, dict) and status.output["decision"] == "approved"
    inspection = deployed.inspect(run_id)
    assert inspection is not None
    assert [(e.step, e.state) for e in inspection.effects] == [
        ("request-review", "accepted"),
        ("record-decision", "accepted"),
        ("send-notice", "accepted"),
    ]
    wait = next(step for step in inspection.steps if step.record.step == "await-review")
    assert (wait.record.observations, wait.wait_result) == (1, "completed")
    snapshot = deployed.store.reads.get_run_snapshot(run_id)
    assert snapshot is not None
    recorded = snapshot.step("record-decision")
    assert recorded is not None and recorded.preparation_frozen and recorded.record.sent
    key = deployed.secrets.admission_key.command_key(
        "delayed-follow-up-it", snapshot.run.start_identity, "record-decision"
    )
    invocations = products.requests("breg", idempotencyKey=key)
    assert [entry["operation"] for entry in invocations] == ["breg.invoke-action/v1"]
