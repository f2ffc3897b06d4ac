"""`external-http.get/v1` and `evaluation.evaluate/v1` live (08 §7, §8; 07 §7.4 step 1, §9):
`examples/holiday-routing` admitted through the `RunService`, ticked by the worker against the
sandbox's external endpoint and evaluation provider, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from integration_support import (
    EVALUATE,
    EXTERNAL_GET,
    Deployed,
    Products,
    _caller_for,
)

from coordinator_core.shell.service import Runtime, ServiceRefusal, StoreRunService
from coordinator_core.shell.store import Store

APPLICATION = "5c8b1e7a-2f3d-4b6a-9e1c-7d2a4f6b8c90"
MODEL = "sandbox-router-1"
HOLIDAYS = {"holidays": ["2026-01-01", "2026-04-06", "2026-12-25"]}


def _put(products: Products, service: str, path: str, body: Any) -> None:
    answer = products.http.put(products.url(service, path), json=body)
    assert answer.status_code == 200, answer.text


def _choice(choice: str) -> dict[str, Any]:
    other = "standard" if choice == "expedite" else "expedite"
    return {"type": "choice", "choice": choice, "probabilities": {choice: 0.8, other: 0.2}}


@pytest.fixture
def holidays(holiday_deployed: Deployed) -> Iterator[Deployed]:
    """The deployment, with the sandbox's calendar document, answers, faults and request logs
    reset before and after each test (the sandbox lives for the session)."""
    products = holiday_deployed.products

    def reset() -> None:
        _put(
            products,
            "external",
            "/sandbox/documents/v1/holidays",
            {"status": 200, "body": HOLIDAYS},
        )
        products.http.delete(products.url("evaluation", "/sandbox/answers"))
        for service in ("external", "evaluation"):
            products.clear_faults(service)
            products.http.delete(products.url(service, "/sandbox/requests"))

    reset()
    yield holiday_deployed
    reset()


def _admit(deployed: Deployed, year: str = "2026") -> uuid.UUID:
    admitted = deployed.admit({"applicationId": APPLICATION, "year": year})
    assert admitted.created
    return admitted.run.run_id


def _evaluations(deployed: Deployed) -> list[dict[str, Any]]:
    return deployed.products.requests("evaluation", operation=EVALUATE)


def test_a_run_reads_the_calendar_asks_the_evaluator_and_finishes_on_its_choice(
    holidays: Deployed,
) -> None:
    _put(holidays.products, "evaluation", "/sandbox/answers/route", _choice("expedite"))
    run_id = _admit(holidays)
    status, _ = holidays.drive(run_id)
    assert (status.status, status.run.state.outcome) == ("finished", "expedited"), status
    assert status.output == {"route": "expedite", "returnedModel": MODEL}
    [read] = holidays.products.requests("external", operation=EXTERNAL_GET)
    assert (read["method"], read["path"], read["query"]) == ("GET", "/v1/holidays", "year=2026")
    [evaluation] = _evaluations(holidays)
    assert evaluation["body"]["model"] == MODEL
    assert evaluation["body"]["state"]["holidays"] == HOLIDAYS["holidays"]
    inspection = holidays.inspect(run_id)
    assert inspection is not None
    # The read is no effect; the evaluation is, accepted by its answer.
    assert [(e.step, e.state) for e in inspection.effects] == [("decide", "accepted")]


def test_a_refusal_answer_takes_the_manual_review_route(holidays: Deployed) -> None:
    _put(holidays.products, "evaluation", "/sandbox/answers/route", {"type": "refusal"})
    status, _ = holidays.drive(_admit(holidays))
    assert (status.status, status.run.state.outcome) == ("finished", "manual-review")
    assert status.output == {"reason": "evaluator-declined", "returnedModel": MODEL}


def test_a_calendar_answer_outside_the_response_schema_fails_the_run(holidays: Deployed) -> None:
    _put(
        holidays.products,
        "external",
        "/sandbox/documents/v1/holidays",
        {"status": 200, "body": {"days": 3}},
    )
    status, _ = holidays.drive(_admit(holidays))
    assert (status.status, status.run.state.failure_code) == ("failed", "external-invalid-response")
    assert _evaluations(holidays) == []  # nothing was evaluated


def test_a_503_service_unavailable_is_resent_within_the_attempt_budget(holidays: Deployed) -> None:
    holidays.products.inject("evaluation", operation=EVALUATE, kind="fail", status=503)
    status, _ = holidays.drive(_admit(holidays))
    assert status.status == "finished", status
    sent = _evaluations(holidays)
    assert [entry["status"] for entry in sent] == [503, 200]
    assert sent[0]["body"] == sent[1]["body"]  # the same prepared request


@pytest.mark.parametrize(
    "fault",
    [{"kind": "fail", "status": 500}, {"kind": "commit-then-drop"}],
    ids=["500", "dropped-after-sending"],
)
def test_an_uncertain_evaluation_is_held_and_never_sent_again(
    holidays: Deployed, fault: dict[str, Any]
) -> None:
    holidays.products.inject("evaluation", operation=EVALUATE, **fault)
    run_id = _admit(holidays)
    status, _ = holidays.drive(run_id)
    assert (status.status, status.run.state.failure_code, status.uncertain) == (
        "attention",
        "evaluation-uncertain",
        True,
    )
    inspection = holidays.inspect(run_id)
    assert inspection is not None
    assert [(e.step, e.state) for e in inspection.effects] == [("decide", "unknown")]
    recovery = inspection.recovery
    assert (recovery.retry_allowed, recovery.retry_blocked_by) == (False, "evaluation-uncertain")
    assert not recovery.reconcile_allowed
    caller = _caller_for(holidays.workflow)

    with pytest.raises(ServiceRefusal) as retried:
        holidays.service.retry_same(caller, run_id, "case-41")
    assert (retried.value.code, retried.value.reason) == (
        "coordinator.command.retry-refused",
        "evaluation-uncertain",
    )
    with pytest.raises(ServiceRefusal) as reconciled:
        holidays.service.reconcile(caller, run_id, "case-41")
    assert reconciled.value.code.startswith("coordinator.command.reconcil")
    assert not any(holidays.worker().tick() for _ in range(3))

    # A restart: a new store connection, service and worker over the same store.
    store = Store.open(holidays.runtime_url, holidays.identity, namespace=holidays.namespace)
    try:
        runtime = Runtime.build(holidays.deployment, holidays.secrets, store, holidays.package)
        service = StoreRunService(runtime)
        worker = runtime.worker("worker-after-restart")
        assert not any(worker.tick() for _ in range(3))
        after = service.get_run(caller, run_id)
        assert after is not None and after.status == "attention"
    finally:
        store.close()
    assert len(_evaluations(holidays)) == 1  # exactly one request ever reached the provider
