"""Hand-written requests through every route; each response validates against the 3.1 bundle
with openapi-core (stricter than Connexion's Draft 4: `format: uuid`, `const`, patterns)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from api_fakes import (
    ALL_ACTIONS,
    ISSUER,
    REVISION,
    RUN_ACTIONS,
    WORKFLOW,
    FakeJournal,
    FakeRunService,
    SigningKeys,
    bearer,
    claims,
)
from connexion.decorators import parameter as connexion_parameters
from connexion.lifecycle import ConnexionRequest

from coordinator_api import app as app_module
from coordinator_core.jsonschema.violations import Violation
from coordinator_core.shell.service import Caller, ServiceRefusal

pytestmark = pytest.mark.anyio

START = {"workflow": WORKFLOW, "revision": REVISION, "input": {"applicationId": "app-1"}}


async def start(
    client: httpx.AsyncClient, keys: SigningKeys, key: str = "key-1", **kw: Any
) -> httpx.Response:
    headers = {**bearer(keys, **kw), "Idempotency-Key": key}
    return await client.post("/v1/runs", json=START, headers=headers)


async def test_health_and_ready_conform(client: httpx.AsyncClient, conforms: Any) -> None:
    assert conforms(await client.get("/health")).json() == {"live": True}
    assert conforms(await client.get("/ready")).json() == {"ready": True}


async def test_metrics_answer_the_text_exposition_without_a_token_or_an_audit_entry(
    client: httpx.AsyncClient, journal: FakeJournal, conforms: Any
) -> None:
    before = len(journal.entries)
    response = conforms(await client.get("/metrics"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert "# TYPE coordinator_admissions_total counter" in response.text
    assert "# TYPE coordinator_worker_loops gauge" in response.text
    assert len(journal.entries) == before


async def test_ready_is_503_when_the_service_is_not_ready(
    client: httpx.AsyncClient, service: FakeRunService, conforms: Any
) -> None:
    service.is_ready = False
    response = conforms(await client.get("/ready"))
    assert (response.status_code, response.json()) == (
        503,
        {"ready": False, "code": "coordinator.command.store-unavailable"},
    )


async def test_workflow_info_sorts_ids_and_conforms(
    client: httpx.AsyncClient, keys: SigningKeys, conforms: Any
) -> None:
    response = conforms(await client.get("/v1/workflow", headers=bearer(keys)))
    body = response.json()
    assert response.status_code == 200
    assert body["outcomes"] == ["decided-after-timeout", "notice-sent"]
    assert body["workflowId"] == WORKFLOW and body["title"] == "Reviewed notice"


async def test_admission_is_201_with_location_then_200_on_replay(
    client: httpx.AsyncClient, keys: SigningKeys, conforms: Any
) -> None:
    created = conforms(await start(client, keys))
    assert created.status_code == 201
    run_id = created.json()["runId"]
    assert created.headers["location"] == f"/v1/runs/{run_id}"
    replayed = conforms(await start(client, keys))
    assert replayed.status_code == 200 and replayed.json()["runId"] == run_id
    assert "location" not in replayed.headers


async def test_admission_refusals_conform(
    client: httpx.AsyncClient, keys: SigningKeys, conforms: Any
) -> None:
    await start(client, keys)
    headers = {**bearer(keys), "Idempotency-Key": "key-1"}
    other = {**START, "input": {"applicationId": "app-2"}}
    reused = conforms(await client.post("/v1/runs", json=other, headers=headers))
    assert (reused.status_code, reused.json()["code"]) == (409, "idempotency.key-reused")
    stale = {**START, "revision": "sha256:" + "0" * 64}
    headers["Idempotency-Key"] = "key-2"
    mismatch = conforms(await client.post("/v1/runs", json=stale, headers=headers))
    assert mismatch.json()["code"] == "admission.revision-mismatch"
    wrong_input = {**START, "input": [1, 2]}
    headers["Idempotency-Key"] = "key-3"
    invalid = conforms(await client.post("/v1/runs", json=wrong_input, headers=headers))
    assert (invalid.status_code, invalid.json()["code"]) == (400, "coordinator.definition.input")


async def test_refusals_name_the_failing_places_in_violations(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService, conforms: Any
) -> None:
    headers = {**bearer(keys), "Idempotency-Key": "key-v"}
    body = {**START, "revision": "v2", "workflowId": "x"}
    refused = conforms(await client.post("/v1/runs", json=body, headers=headers))
    assert refused.json()["code"] == "coordinator.request.invalid"
    assert refused.json()["violations"] == [
        {"path": "", "keyword": "additionalProperties", "members": ["workflowId"]},
        {"path": "/revision", "keyword": "pattern"},
    ]
    places = (
        Violation("", "required", ("sendAfter",)),
        Violation("/applicationId", "format"),
    )
    service.refusal = ServiceRefusal("coordinator.definition.input", violations=places)
    invalid = conforms(await client.post("/v1/runs", json=START, headers=headers))
    assert (invalid.status_code, invalid.json()["code"]) == (400, "coordinator.definition.input")
    assert invalid.json()["violations"] == [place.to_json() for place in places]
    # Other problems have no `violations` member at all.
    absent = conforms(await client.get(f"/v1/runs/{uuid.uuid4()}", headers=bearer(keys)))
    assert "violations" not in absent.json()


async def test_run_routes_conform(
    client: httpx.AsyncClient, keys: SigningKeys, conforms: Any
) -> None:
    run_id = (await start(client, keys)).json()["runId"]
    auth = bearer(keys)
    status = conforms(await client.get(f"/v1/runs/{run_id}", headers=auth))
    assert status.json()["status"] == "running"
    inspection = conforms(await client.get(f"/v1/runs/{run_id}/inspect", headers=auth)).json()
    assert [step["type"] for step in inspection["steps"]] == ["call", "wait-for", "wait-until"]
    assert inspection["recovery"]["operation"]["id"] == "casework.submit-review-request/v1"
    reconciled = conforms(
        await client.post(f"/v1/runs/{run_id}/reconcile", json={"reason": "T-1"}, headers=auth)
    )
    assert reconciled.json()["result"] == "unresolved"
    refused = conforms(
        await client.post(f"/v1/runs/{run_id}/retry-same", json={"reason": "T-1"}, headers=auth)
    )
    assert refused.status_code == 409
    assert refused.json()["code"] == "coordinator.command.retry-refused"
    assert refused.json()["reason"] == "not-recoverable"
    cancelled = conforms(
        await client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "T-1"}, headers=auth)
    )
    assert cancelled.json()["status"] == "cancelled" and cancelled.json()["cancelRequested"]


async def test_the_inspection_shows_each_steps_latest_attempts(
    client: httpx.AsyncClient, keys: SigningKeys, conforms: Any
) -> None:
    run_id = (await start(client, keys)).json()["runId"]
    inspection = conforms(await client.get(f"/v1/runs/{run_id}/inspect", headers=bearer(keys)))
    steps = {step["step"]: step for step in inspection.json()["steps"]}
    review = steps["request-review"]
    assert review["attemptCount"] == 2
    assert [(a["attempt"], a["outcome"], a["failureCode"]) for a in review["attempts"]] == [
        (2, "delivered", None),
        (1, "retry", "transport-unavailable"),
    ]
    assert set(review["attempts"][0]) == {
        "generation",
        "attempt",
        "startedAt",
        "endedAt",
        "outcome",
        "failureCode",
    }
    observations = steps["await-review"]
    assert (observations["attemptCount"], len(observations["attempts"])) == (3, 2)
    assert observations["attempts"][0]["startedAt"] is None
    assert (steps["pause"]["attempts"], steps["pause"]["attemptCount"]) == ([], 0)


async def test_a_steps_attempts_are_paged_with_the_cursor_of_the_previous_page(
    client: httpx.AsyncClient, keys: SigningKeys, journal: FakeJournal, conforms: Any
) -> None:
    run_id = (await start(client, keys)).json()["runId"]
    route = f"/v1/runs/{run_id}/steps/await-review/attempts"
    first = conforms(await client.get(route, params={"limit": 2}, headers=bearer(keys))).json()
    assert (first["runId"], first["step"]) == (run_id, "await-review")
    assert [a["attempt"] for a in first["attempts"]] == [3, 2]
    assert first["nextCursor"]
    params = {"limit": 2, "cursor": first["nextCursor"]}
    second = conforms(await client.get(route, params=params, headers=bearer(keys))).json()
    assert ([a["attempt"] for a in second["attempts"]], second["nextCursor"]) == ([1], None)
    whole = conforms(await client.get(route, headers=bearer(keys))).json()  # limit 20
    assert (len(whole["attempts"]), whole["nextCursor"]) == (3, None)
    entered = conforms(
        await client.get(route.replace("await-review", "pause"), headers=bearer(keys))
    )
    assert entered.json()["attempts"] == []
    # Journaled as the read action `attempts`, with the run.
    reads = [e for kind, _, e in journal.entries if kind == "request" and e.action == "attempts"]
    assert len(reads) == 4 and {str(e.run_id) for e in reads} == {run_id}


async def test_a_steps_attempts_refuse_with_stable_codes(
    client: httpx.AsyncClient, keys: SigningKeys, conforms: Any
) -> None:
    # Another owner's run answering like an absent one is held on the wire, against the real
    # service (tests/e2e/test_run_ownership.py): the fake service carries no visibility rule.
    alice = claims(client="starter", scopes="coordinator:start", subject="alice")
    run_id = (await start(client, keys, payload=alice)).json()["runId"]
    route = f"/v1/runs/{run_id}/steps/await-review/attempts"
    absent: list[bytes] = []
    for path, who in (
        (f"/v1/runs/{uuid.uuid4()}/steps/await-review/attempts", alice),
        ("/v1/runs/not-a-uuid/steps/await-review/attempts", alice),
    ):
        response = conforms(await client.get(path, headers=bearer(keys, who)))
        assert (response.status_code, response.json()["code"]) == (
            404,
            "coordinator.command.run-absent",
        )
        absent.append(response.content)
    assert len(set(absent)) == 1
    for step in ("no-such-step", "Not_A_Step"):
        missing = conforms(
            await client.get(
                f"/v1/runs/{run_id}/steps/{step}/attempts", headers=bearer(keys, alice)
            )
        )
        assert (missing.status_code, missing.json()["code"]) == (
            404,
            "coordinator.command.step-absent",
        )
        assert step not in missing.text
    for limit in ("0", "101", "x"):
        bounded = conforms(
            await client.get(route, params={"limit": limit}, headers=bearer(keys, alice))
        )
        assert (bounded.status_code, bounded.json()["code"]) == (400, "coordinator.request.invalid")
    other_step = conforms(
        await client.get(
            route.replace("await-review", "request-review"),
            params={"limit": 1},
            headers=bearer(keys, alice),
        )
    ).json()["nextCursor"]
    wrong = conforms(
        await client.get(route, params={"cursor": other_step}, headers=bearer(keys, alice))
    )
    assert (wrong.status_code, wrong.json()["code"]) == (400, "coordinator.request.cursor-invalid")
    unknown = conforms(await client.get(route, params={"extra": "1"}, headers=bearer(keys, alice)))
    assert (unknown.status_code, unknown.json()["code"]) == (400, "coordinator.request.invalid")


async def test_run_ids_are_accepted_in_any_uuid_form_and_returned_lowercase(
    client: httpx.AsyncClient, keys: SigningKeys, conforms: Any
) -> None:
    run_id = (await start(client, keys)).json()["runId"]
    for form in (run_id.upper(), run_id.replace("-", ""), "{" + run_id + "}", "urn:uuid:" + run_id):
        response = conforms(await client.get(f"/v1/runs/{form}", headers=bearer(keys)))
        assert response.status_code == 200 and response.json()["runId"] == run_id


async def test_absent_and_malformed_run_ids_answer_alike(
    client: httpx.AsyncClient, keys: SigningKeys, conforms: Any
) -> None:
    bodies = []
    for run in (str(uuid.uuid4()), "not-a-uuid", "1" * 70):
        response = conforms(await client.get(f"/v1/runs/{run}", headers=bearer(keys)))
        assert response.status_code == 404
        bodies.append(response.content)
    assert len(set(bodies)) == 1
    assert b"coordinator.command.run-absent" in bodies[0]


async def test_the_service_is_asked_for_the_verified_caller_of_the_token(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService
) -> None:
    """Who may see a run is the service's rule (06 §2; held on the wire by
    tests/e2e/test_run_ownership.py): the API's part is to hand it, on every run route, the
    caller the token proves, with the one policy that applies: ownership `(iss, sub)`, the
    client, the operator flag, the policy's workflows and actions."""
    alice = claims(client="starter", scopes="coordinator:start", subject="alice")
    run_id = (await start(client, keys, payload=alice)).json()["runId"]
    starter = Caller(
        issuer=ISSUER,
        subject="alice",
        client_id="starter",
        operator=False,
        workflows=frozenset({WORKFLOW}),
        actions=RUN_ACTIONS,
    )
    operator = Caller(
        issuer=ISSUER,
        subject="operator-1",
        client_id="ops-console",
        operator=True,
        workflows=frozenset({WORKFLOW, "retired-flow"}),
        actions=ALL_ACTIONS,
    )
    for payload, caller in ((alice, starter), (None, operator)):
        headers = bearer(keys) if payload is None else bearer(keys, payload)
        service.callers.clear()
        for method, path, body in (
            ("GET", f"/v1/runs/{run_id}", None),
            ("GET", f"/v1/runs/{run_id}/inspect", None),
            ("GET", "/v1/runs", None),
            ("POST", f"/v1/runs/{run_id}/cancel", {"reason": "x"}),
        ):
            answer = await client.request(method, path, json=body, headers=headers)
            assert answer.status_code == 200, (path, answer.text)
        assert service.callers and set(service.callers) == {caller}


async def test_a_run_the_service_does_not_find_is_absent_on_every_run_route(
    client: httpx.AsyncClient, keys: SigningKeys, conforms: Any
) -> None:
    absent = uuid.uuid4()
    for method, path in (
        ("GET", f"/v1/runs/{absent}"),
        ("GET", f"/v1/runs/{absent}/inspect"),
        ("POST", f"/v1/runs/{absent}/cancel"),
    ):
        body = {"reason": "x"} if method == "POST" else None
        answer = conforms(await client.request(method, path, json=body, headers=bearer(keys)))
        assert (answer.status_code, answer.json()["code"]) == (
            404,
            "coordinator.command.run-absent",
        )


async def test_list_paginates_with_a_cursor_bound_to_the_filters(
    client: httpx.AsyncClient, keys: SigningKeys, conforms: Any
) -> None:
    ids = [(await start(client, keys, key=f"key-{n}")).json()["runId"] for n in range(3)]
    first = conforms(await client.get("/v1/runs", params={"limit": 2}, headers=bearer(keys)))
    page = first.json()
    assert [run["runId"] for run in page["runs"]] == ids[::-1][:2]
    second = conforms(
        await client.get(
            "/v1/runs", params={"limit": 2, "cursor": page["nextCursor"]}, headers=bearer(keys)
        )
    ).json()
    assert [run["runId"] for run in second["runs"]] == ids[:1] and second["nextCursor"] is None
    mixed = conforms(
        await client.get(
            "/v1/runs",
            params={"cursor": page["nextCursor"], "status": "running"},
            headers=bearer(keys),
        )
    )
    assert (mixed.status_code, mixed.json()["code"]) == (400, "coordinator.request.cursor-invalid")


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": 101},
        {"limit": "ten"},
        {"status": "sleeping"},
        {"workflow": "Bad"},
        {"extra": "1"},
    ],
)
async def test_list_query_parameters_are_validated_strictly(
    client: httpx.AsyncClient, keys: SigningKeys, conforms: Any, params: dict[str, Any]
) -> None:
    response = conforms(await client.get("/v1/runs", params=params, headers=bearer(keys)))
    assert (response.status_code, response.json()["code"]) == (400, "coordinator.request.invalid")


async def test_query_parameters_are_compiled_once_for_the_app_not_per_request(
    client: httpx.AsyncClient, keys: SigningKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connexion makes the parameter validator anew for every request; the Draft 4
    validator of each parameter's schema is compiled once all the same."""
    compiled: list[object] = []
    real = app_module.Draft4Validator

    def counting(*arguments: Any, **options: Any) -> Any:
        compiled.append(arguments[0])
        return real(*arguments, **options)

    monkeypatch.setattr(app_module, "Draft4Validator", counting)

    async def reads() -> None:
        listed = await client.get("/v1/runs", params={"limit": 5}, headers=bearer(keys))
        assert listed.status_code == 200
        absent = await client.get(f"/v1/runs/{uuid.uuid4()}?wait=1", headers=bearer(keys))
        assert absent.status_code == 404

    await reads()  # each route's parameters compiled by now, if they were not before
    before = len(compiled)
    for _ in range(3):
        await reads()
    assert len(compiled) == before


async def test_each_handler_is_decorated_once_for_the_app_not_per_request(
    client: httpx.AsyncClient, keys: SigningKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connexion wraps an operation's handler anew for every request (its parameter and
    response wrappers, the handler's signature inspected each time); the app wraps each once,
    and the request's arguments are still read per request."""
    inspected: list[object] = []
    real = connexion_parameters.inspect_function_arguments

    def counting(function: Any) -> Any:
        inspected.append(function)
        return real(function)

    monkeypatch.setattr(connexion_parameters, "inspect_function_arguments", counting)

    async def reads(limit: int) -> None:
        listed = await client.get("/v1/runs", params={"limit": limit}, headers=bearer(keys))
        assert listed.status_code == 200
        absent = await client.get(f"/v1/runs/{uuid.uuid4()}?wait=1", headers=bearer(keys))
        assert absent.status_code == 404

    await reads(5)  # each route's handler wrapped by now, if it was not before
    before = len(inspected)
    for limit in (1, 2, 3):
        await reads(limit)
    assert len(inspected) == before


async def test_a_handler_without_a_body_gets_its_arguments_without_connexion_reading_the_body(
    client: httpx.AsyncClient,
    keys: SigningKeys,
    service: FakeRunService,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No handler takes a body from Connexion (each reads the body the edge captured), so the
    app's parameter layer never asks Connexion's request for its body or its form files; the
    path, the query (its default included), the token's claims and the request context still
    reach the handler."""
    asked: list[str] = []
    for name in ("get_body", "files", "form"):
        real = getattr(ConnexionRequest, name)

        def counting(self: Any, *args: Any, _name: str = name, _real: Any = real) -> Any:
            asked.append(_name)
            return _real(self, *args)

        monkeypatch.setattr(ConnexionRequest, name, counting)
    auth = bearer(keys)
    created = await start(client, keys)
    assert created.status_code == 201 and (await start(client, keys, "key-2")).status_code == 201
    run_id = created.json()["runId"]
    status = await client.get(f"/v1/runs/{run_id}", headers=auth)  # a path argument
    assert status.status_code == 200 and status.json()["runId"] == run_id
    for query, expected in (({}, 2), ({"limit": 1}, 1)):  # no limit given, then one
        listed = await client.get("/v1/runs", params=query, headers=auth)
        assert listed.status_code == 200 and len(listed.json()["runs"]) == expected
    assert all(caller.subject for caller in service.callers)  # the token's claims reached it
    cancelled = await client.post(
        f"/v1/runs/{run_id}/cancel", json={"reason": "INC-1"}, headers=auth
    )
    assert cancelled.status_code == 200
    assert asked == []


async def test_operator_routes_conform(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService, conforms: Any
) -> None:
    auth = bearer(keys)
    await start(client, keys)
    doctor = conforms(await client.get("/v1/doctor", headers=auth)).json()
    assert doctor["state"]["statuses"]["running"] == 1 and len(doctor["state"]["statuses"]) == 8
    held = conforms(await client.post("/v1/restore-hold", json={"reason": "INC-1"}, headers=auth))
    assert held.json() == {"restoreHold": True, "admissionsHold": True, "restoreReview": 0}
    blocked = conforms(
        await client.post(
            "/v1/release-admission-hold",
            json={
                "reason": "INC-1",
                "admissionHistoryComplete": True,
                "priorDeploymentFenced": True,
            },
            headers=auth,
        )
    )
    assert blocked.json()["code"] == "coordinator.command.restore-hold"
    released = conforms(
        await client.post("/v1/release-restore-hold", json={"reason": "FENCE-1"}, headers=auth)
    )
    assert released.json()["restoreHold"] is False
    unattested = conforms(
        await client.post(
            "/v1/release-admission-hold",
            json={
                "reason": "INC-1",
                "admissionHistoryComplete": True,
                "priorDeploymentFenced": False,
            },
            headers=auth,
        )
    )
    assert unattested.json()["code"] == "coordinator.command.attestation-required"
    assert service.calls.count("release-admission-hold") == 1  # refused before the service
    done = conforms(
        await client.post(
            "/v1/release-admission-hold",
            json={
                "reason": "INC-1",
                "admissionHistoryComplete": True,
                "priorDeploymentFenced": True,
            },
            headers=auth,
        )
    )
    assert done.json()["admissionsHold"] is False
    erased = conforms(
        await client.post(
            "/v1/retention", json={"before": "2026-01-01T00:00:00Z", "limit": 10}, headers=auth
        )
    )
    assert erased.json() == {"erased": 0}


@pytest.mark.parametrize(
    "body",
    [
        {"before": "2027-01-01T00:00:00Z", "limit": 10},  # in the future
        {"before": "yesterday", "limit": 10},
        {"before": "2026-01-01T00:00:00Z", "limit": 0},
        {"before": "2026-01-01T00:00:00Z", "limit": 101},
        {"before": "2026-01-01T00:00:00Z"},
    ],
)
async def test_retention_bounds_are_retention_invalid(
    client: httpx.AsyncClient, keys: SigningKeys, conforms: Any, body: dict[str, Any]
) -> None:
    response = conforms(await client.post("/v1/retention", json=body, headers=bearer(keys)))
    assert response.json()["code"] == "coordinator.command.retention-invalid"


async def test_holds_refuse_admission(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService, conforms: Any
) -> None:
    await client.post("/v1/restore-hold", json={"reason": "INC-1"}, headers=bearer(keys))
    response = conforms(await start(client, keys))
    assert response.json()["code"] == "coordinator.command.restore-hold"
    assert (await client.get("/ready")).status_code == 503


def test_the_response_validator_is_compiled_once_per_schema_and_still_refuses() -> None:
    """The cached response validator (Connexion compiles one per response otherwise) keeps
    one compiled validator per schema object and still refuses a non-conforming body."""
    from connexion.exceptions import NonConformingResponseBody

    from coordinator_api.app import _ResponseBodyValidator

    schema = {"type": "object", "required": ["live"], "properties": {"live": {"type": "boolean"}}}
    other = {"type": "object", "required": ["ready"]}

    def validator(of: dict[str, Any]) -> Any:
        return _ResponseBodyValidator({"type": "http"}, schema=of, nullable=False, encoding="utf-8")

    first, second = validator(schema), validator(schema)
    assert first.validator is second.validator
    assert validator(other).validator is not first.validator
    first._validate({"live": True})
    with pytest.raises(NonConformingResponseBody):
        second._validate({"live": "yes"})
    with pytest.raises(NonConformingResponseBody):
        validator(other)._validate({"live": True})
