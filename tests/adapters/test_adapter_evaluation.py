"""Contract 08 §8 and 05 §5.3: `evaluation.evaluate/v1` over protocol `system-one`."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from adapter_support import (
    CANARY,
    STEP,
    RawServer,
    Reply,
    call,
    command,
    credential_of,
    deadline,
    preparation_bytes,
    prepare_with,
    problem,
    read_request,
    refused,
    reset,
    retryable,
    success,
    uncertain,
)

from coordinator_core.engine.inputs import PreparationDone
from coordinator_core.shell.adapters import AccessToken, EvaluationConnection
from coordinator_core.shell.adapters.evaluation import EvaluationAdapter
from coordinator_core.values import canonical_json
from coordinator_sandbox.testing import free_port

EVALUATE = "evaluation.evaluate/v1"
PATH = "/v1/systemone"
BEARER = "evaluation-secret-" + "x" * 32
QUESTIONS = {
    "eligible": {"type": "predicate", "instructions": "Is the applicant eligible?"},
    "route": {
        "type": "choice",
        "instructions": "Which queue?",
        "criteria": {"expedite": "urgent", "standard": "normal"},
    },
    "risk": {"type": "score", "instructions": "How risky?", "criteria": ["low", "mid", "high"]},
}
REQUEST = {"state": {"applicationId": "a-1", "note": CANARY}, "questions": QUESTIONS}
ANSWERS = {
    "eligible": {"type": "predicate", "probability": 0.8},
    "route": {
        "type": "choice",
        "choice": "expedite",
        "probabilities": {"expedite": 0.7, "standard": 0.3},
        "nativeConfidence": 0.9,
    },
    "risk": {"type": "score", "score": 0.5, "probabilities": [0.6, 0.3, 0.1]},
}
RESPONSE = {
    "model": "router-1.2",
    "answers": ANSWERS,
    "usage": {"inputTokens": 120, "outputTokens": 30},
}


def evaluator(
    base_url: str,
    *,
    token: str | None = None,
    model: str = "router-1",
    timeout_ms: int = 8000,
    maximum_request: int = 65_536,
    maximum_response: int = 65_536,
) -> EvaluationConnection:
    return EvaluationConnection(
        name="router",
        base_url=base_url,
        model=model,
        bearer_token=token,
        attempt_timeout_milliseconds=timeout_ms,
        maximum_request_bytes=maximum_request,
        maximum_response_bytes=maximum_response,
    )


def prepare(bound: EvaluationConnection, value: Any = REQUEST) -> Any:
    return prepare_with(
        EvaluationAdapter(), bound, command(EVALUATE, value), attempt_deadline=deadline()
    )


def evaluate(
    bound: EvaluationConnection, value: Any = REQUEST, preparation: bytes | None = None
) -> Any:
    adapter = EvaluationAdapter()
    if preparation is None:
        frozen = command(EVALUATE, value)
        preparation = preparation_bytes(
            prepare_with(adapter, bound, frozen, attempt_deadline=deadline())
        )
    token = adapter.obtain_credential(bound, credential_of(), attempt_deadline=deadline())
    assert isinstance(token, AccessToken)
    return call(
        adapter,
        bound,
        command(EVALUATE, value, preparation=preparation),
        attempt_deadline=deadline(),
        credential=token,
    )


def json_reply(body: Any, status: int = 200, content_type: str = "application/json") -> Reply:
    return Reply(status, body, headers={"content-type": content_type})


@pytest.fixture
def local(fake, live):
    return evaluator(live.origin)


def test_preparation_freezes_the_canonical_request_with_the_connections_model(fake, local):
    outcome = prepare(local)
    frozen = canonical_json({"model": "router-1", **REQUEST})
    assert outcome == PreparationDone(STEP, frozen)
    assert not fake.requests("/")  # preparing sends nothing


def test_the_send_posts_exactly_the_prepared_bytes_without_authorisation_for_local(fake, local):
    fake.route("POST", PATH, json_reply(RESPONSE), public=True)
    outcome = evaluate(local)
    assert outcome.outcome == "success"
    [seen] = fake.requests(PATH)
    assert seen.body == canonical_json({"model": "router-1", **REQUEST})
    assert seen.headers["content-type"] == "application/json"
    assert "authorization" not in seen.headers and "idempotency-key" not in seen.headers


def test_a_bearer_connection_sends_its_configured_secret(fake, live):
    fake.issued.append(BEARER)
    fake.route("POST", PATH, json_reply(RESPONSE))
    assert evaluate(evaluator(live.origin, token=BEARER)).outcome == "success"
    assert fake.requests(PATH)[0].headers["authorization"] == "Bearer " + BEARER
    assert BEARER not in repr(evaluator(live.origin, token=BEARER))


def test_the_output_names_both_models_and_adds_the_score_legend(fake, local):
    fake.route(
        "POST",
        PATH,
        json_reply(RESPONSE, content_type="application/json; charset=utf-8"),
        public=True,
    )
    outcome = evaluate(local)
    assert outcome == success(
        {
            "protocol": "system-one",
            "requestedModel": "router-1",
            "returnedModel": "router-1.2",
            "answers": {**ANSWERS, "risk": {**ANSWERS["risk"], "legend": ["low", "mid", "high"]}},
            "usage": {"inputTokens": 120, "outputTokens": 30},
        }
    )


def test_a_refusal_answer_is_a_valid_answer(fake, local):
    answers = {**ANSWERS, "route": {"type": "refusal"}}
    fake.route("POST", PATH, json_reply({**RESPONSE, "answers": answers}), public=True)
    outcome = evaluate(local)
    assert outcome.outcome == "success"
    assert json.loads(outcome.value)["answers"]["route"] == {"type": "refusal"}


@pytest.mark.parametrize(
    "value",
    [
        {"state": 3, "questions": QUESTIONS},
        {"state": {}, "questions": {}},
        {"state": {}, "questions": {f"q{i}": QUESTIONS["eligible"] for i in range(33)}},
        {"state": {}, "questions": {"Bad": QUESTIONS["eligible"]}},
        {"state": {}, "questions": {"q": {"type": "predicate", "instructions": ""}}},
        {"state": {}, "questions": {"q": {"type": "predicate", "instructions": "x" * 4097}}},
        {"state": {}, "questions": {"q": {**QUESTIONS["eligible"], "extra": 1}}},
        {"state": {}, "questions": {"q": {**QUESTIONS["route"], "criteria": {"one": "x"}}}},
        {"state": {}, "questions": {"q": {**QUESTIONS["risk"], "criteria": ["only"]}}},
        {"state": {}, "questions": {"q": {**QUESTIONS["risk"], "criteria": ["l"] * 11}}},
        {"state": {}, "questions": {"q": {"type": "essay", "instructions": "x"}}},
        {"questions": QUESTIONS},
        {"state": {}, "questions": QUESTIONS, "model": "other"},
    ],
)
def test_an_input_outside_the_protocol_is_evaluation_invalid_command(fake, local, value):
    assert prepare(local, value) == refused("evaluation-invalid-command")


def test_a_request_larger_than_the_connection_allows_is_refused(fake, live):
    assert prepare(evaluator(live.origin, maximum_request=64)) == refused(
        "evaluation-invalid-command"
    )


def test_a_preparation_for_another_model_is_never_sent(fake, live, local):
    other = canonical_json({"model": "router-2", **REQUEST})
    assert evaluate(local, preparation=other) == refused("prepared-command-mismatch")
    assert evaluate(local, preparation=b"") == refused("prepared-command-mismatch")
    assert not fake.requests("/")


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 413, 415, 422])
def test_definite_refusals_are_evaluation_refused(fake, local, status):
    fake.route("POST", PATH, problem(status, "request.invalid"), public=True)
    assert evaluate(local) == refused("evaluation-refused")


@pytest.mark.parametrize(
    "reply",
    [
        problem(500, "service.internal-error"),
        problem(502, "gateway"),
        problem(429, "rate-limit.exceeded"),
        Reply(503, {"status": 503}),  # no trusted problem code: the provider may have evaluated
        problem(409, "conflict"),
        Reply(302, headers={"location": "/elsewhere"}),
    ],
)
def test_other_answers_after_sending_are_evaluation_uncertain(fake, local, reply):
    fake.route("POST", PATH, reply, public=True)
    assert evaluate(local) == uncertain("evaluation-uncertain")


def test_a_503_service_unavailable_problem_is_a_definite_retryable_answer(fake, local):
    fake.route("POST", PATH, problem(503, "service.unavailable"), public=True)
    assert evaluate(local) == retryable("evaluation-unavailable")


def _answers(**changes: Any) -> dict[str, Any]:
    return {**RESPONSE, "answers": {**ANSWERS, **changes}}


@pytest.mark.parametrize(
    "reply",
    [
        json_reply(RESPONSE, content_type="text/json"),
        json_reply(RESPONSE, content_type="application/problem+json"),
        Reply(200, RESPONSE),  # no content type at all
        json_reply({**RESPONSE, "model": ""}),
        json_reply({k: v for k, v in RESPONSE.items() if k != "usage"}),
        json_reply({**RESPONSE, "usage": {"inputTokens": -1, "outputTokens": 0}}),
        json_reply({**RESPONSE, "answers": {"eligible": ANSWERS["eligible"]}}),
        json_reply(_answers(extra={"type": "refusal"})),
        json_reply(_answers(eligible={"type": "predicate", "probability": 1.2})),
        json_reply(_answers(eligible={"type": "choice", "probability": 0.2})),
        json_reply(
            _answers(
                route={**ANSWERS["route"], "probabilities": {"expedite": 0.6, "standard": 0.3}}
            )
        ),
        json_reply(_answers(route={**ANSWERS["route"], "choice": "standard"})),
        json_reply(_answers(route={**ANSWERS["route"], "choice": "nowhere"})),
        json_reply(_answers(risk={**ANSWERS["risk"], "score": 1.5})),
        json_reply(_answers(risk={**ANSWERS["risk"], "probabilities": [0.5, 0.5]})),
        json_reply(_answers(risk={**ANSWERS["risk"], "nativeConfidence": 2})),
        Reply(
            200, raw=b'{"model": "m", "model": "n"}', headers={"content-type": "application/json"}
        ),
    ],
)
def test_an_invalid_answer_is_uncertain_evaluation_invalid_response(fake, local, reply):
    fake.route("POST", PATH, reply, public=True)
    assert evaluate(local) == uncertain("evaluation-invalid-response")


def test_an_answer_larger_than_the_maximum_is_uncertain(fake, live):
    fake.route("POST", PATH, json_reply(RESPONSE), public=True)
    bound = evaluator(live.origin, maximum_response=64)
    assert evaluate(bound) == uncertain("evaluation-invalid-response")


def test_a_connect_failure_before_sending_is_retryable():
    bound = evaluator(f"http://127.0.0.1:{free_port()}")
    assert evaluate(bound) == retryable("evaluation-unavailable")


def test_a_dropped_connection_after_sending_is_uncertain():
    def behaviour(conn: socket.socket) -> None:
        read_request(conn)
        reset(conn)

    server = RawServer(behaviour)
    try:
        assert evaluate(evaluator(server.origin)) == uncertain("evaluation-uncertain")
        assert len(server.requests) <= 1
    finally:
        server.close()


def test_a_timeout_waiting_for_the_answer_is_uncertain(fake, live):
    fake.route("POST", PATH, Reply(200, RESPONSE, delay=1.0), public=True)
    assert evaluate(evaluator(live.origin, timeout_ms=200)) == uncertain("evaluation-uncertain")
