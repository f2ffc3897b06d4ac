"""Sandbox Scheduling (08 §6), the external JSON endpoint (§7) and the evaluation provider (§8)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sandbox_support import Sandbox


def tomorrow_at(hour: int) -> str:
    day = datetime.now(UTC).date() + timedelta(days=1)
    return f"{day.isoformat()}T{hour:02d}:00:00Z"


def create(sandbox: Sandbox, key: str, admission: dict[str, Any]) -> httpx.Response:
    return sandbox.http.post(
        sandbox.url("scheduling", "/v1/appointments"),
        headers=sandbox.headers("scheduling", Idempotency_Key=key),
        json={"admission": admission},
    )


def test_scheduling_policy_and_availability_pages_follow_the_cursor(sandbox: Sandbox) -> None:
    headers = sandbox.headers("scheduling")
    policy = sandbox.http.get(sandbox.url("scheduling", "/v1/scheduling"), headers=headers).json()
    assert set(policy) == {"schedulingId", "policyRevision", "policyDigest"}
    params = {"offering": "consultation", "start": tomorrow_at(0), "end": tomorrow_at(23),
              "limit": "10"}  # fmt: skip
    url = sandbox.url("scheduling", "/v1/availability")
    first = sandbox.http.get(url, params=params, headers=headers).json()
    assert len(first["items"]) == 10 and first["nextCursor"]
    assert first["items"][0] == {
        "kind": "slot", "start": tomorrow_at(9), "end": tomorrow_at(9).replace("09:00", "09:30"),
        "free": 1,
    }  # fmt: skip
    rest = sandbox.http.get(
        url, params={**params, "cursor": first["nextCursor"]}, headers=headers
    ).json()
    assert len(rest["items"]) == 6 and rest["nextCursor"] is None
    too_long = {
        **params,
        "end": (datetime.now(UTC) + timedelta(days=40)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    assert sandbox.http.get(url, params=too_long, headers=headers).status_code == 400


def test_appointment_is_booked_once_per_key_and_found_by_receipt_lookup(
    sandbox: Sandbox, key: str
) -> None:
    headers = sandbox.headers("scheduling")
    revision = sandbox.http.get(
        sandbox.url("scheduling", "/v1/scheduling"), headers=headers
    ).json()["policyRevision"]
    admission = {"offering": "consultation", "start": tomorrow_at(14),
                 "party": {"reference": key}, "channel": "video", "policyRevision": revision}  # fmt: skip
    first = create(sandbox, key, admission)
    assert first.status_code == 201
    booked = first.json()
    assert booked["status"] == "booked" and booked["start"] == tomorrow_at(14)
    assert create(sandbox, key, admission).json() == booked
    found = sandbox.http.post(
        sandbox.url("scheduling", "/v1/appointments/receipt-lookup"),
        headers=sandbox.headers("scheduling", Idempotency_Key=key),
        json={"admission": admission},
    )
    assert found.status_code == 200 and found.json() == booked
    full = create(sandbox, key + "-2", {**admission, "party": {"reference": "someone"}})
    assert full.status_code == 422 and full.json()["code"] == "slot.unavailable"
    stale = create(sandbox, key + "-3", {**admission, "policyRevision": "old"})
    assert stale.status_code == 422


def test_external_endpoint_serves_configured_documents(sandbox: Sandbox) -> None:
    put = sandbox.http.put(
        sandbox.url("external", "/sandbox/documents/v1/rates"),
        json={"status": 200, "body": {"rate": 3}, "echoQuery": True},
    )
    assert put.status_code == 200
    answer = sandbox.http.get(sandbox.url("external", "/v1/rates"), params={"region": "north"})
    assert answer.status_code == 200
    assert answer.json() == {"rate": 3, "query": {"region": "north"}}
    assert sandbox.http.get(sandbox.url("external", "/v1/absent")).status_code == 404


def test_evaluation_answers_are_deterministic_and_well_formed(sandbox: Sandbox) -> None:
    body = {
        "model": "sandbox-model",
        "state": {"applicant": "Ada"},
        "questions": {
            "eligible": {"type": "predicate", "instructions": "Is the applicant eligible?"},
            "route": {"type": "choice", "instructions": "Route?",
                      "criteria": {"fast": "fast track", "full": "full review"}},
            "risk": {"type": "score", "instructions": "Risk?", "criteria": ["low", "mid", "high"]},
        },
    }  # fmt: skip
    url = sandbox.url("evaluation", "/v1/systemone")
    first = sandbox.http.post(url, json=body)
    assert first.status_code == 200
    assert first.headers["content-type"] == "application/json"
    answer = first.json()
    assert answer == sandbox.http.post(url, json=body).json()
    assert answer["model"] == "sandbox-model"
    choice = answer["answers"]["route"]
    assert abs(sum(choice["probabilities"].values()) - 1) < 0.001
    assert choice["probabilities"][choice["choice"]] == max(choice["probabilities"].values())
    score = answer["answers"]["risk"]
    expected = sum(index * p for index, p in enumerate(score["probabilities"]))
    assert abs(score["score"] - expected) < 0.003
    assert 0 <= answer["answers"]["eligible"]["probability"] <= 1
