"""Evaluation: `evaluation.evaluate/v1` over protocol `system-one` (contract 08 §8, 05 §5.3).

Preparation freezes the request body (`{model, state, questions}` in canonical JSON, the model
named by the connection) next to the command; the send recomputes it from the frozen command
and the connection and refuses `prepared-command-mismatch` if they differ. An evaluation has no
idempotency key, so its recovery is `hold-after-dispatch`: once the request may have been sent
and no definite answer came back, the outcome is uncertain and the engine never sends it again.

Definite answers before anything was evaluated are retryable `evaluation-unavailable`: a failure
before a byte left, and a `503` whose trusted problem code is `service.unavailable` (the
provider's statement that it took no request, as 08 §9 reads it for every product). Any other
`5xx`, a `429`, a timeout or a broken connection after sending is uncertain.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

from coordinator_core.engine.inputs import CallOutcome
from coordinator_core.shell.adapters.base import (
    EVALUATION,
    AccessToken,
    Connection,
    EvaluationConnection,
    PreparedCommand,
)
from coordinator_core.shell.adapters.http import ProductAnswer, problem_of
from coordinator_core.shell.adapters.product import Attempt, AttemptEffect, ProductAdapter, Stop
from coordinator_core.shell.adapters.transport import TransportFailure
from coordinator_core.shell.adapters.validation import (
    ShapeError,
    closed_object,
    json_object,
    output_shape,
    text,
)
from coordinator_core.values import (
    JsonBoundsError,
    StrictJsonError,
    canonical_json,
    check_json_value,
    parse_strict_json,
)

__all__ = ["EVALUATE", "EvaluationAdapter", "evaluation_body", "evaluation_output"]

EVALUATE: Final = "evaluation.evaluate/v1"
PROTOCOL: Final = "system-one"

_LOCAL_ID: Final = re.compile(r"[a-z][a-z0-9_-]{0,63}")
_REFUSED_STATUSES: Final = frozenset({400, 401, 403, 404, 405, 413, 415, 422})
_CONTENT_TYPE: Final = re.compile(r"application/json\s*(;\s*charset=\"?utf-8\"?\s*)?", re.I)
_PROBABILITY_SUM_SLACK: Final = 0.001
_MAX_QUESTIONS: Final = 32
_MAX_INSTRUCTIONS: Final = 4096


class EvaluationAdapter(ProductAdapter):
    """The evaluation adapter (08 §8)."""

    product = EVALUATION
    call_operations = frozenset({EVALUATE})
    invalid_command_code = "evaluation-invalid-command"

    def credential_for(
        self, connection: Connection, step: str, attempt_deadline: float
    ) -> AccessToken | CallOutcome:
        """The configured bearer secret, or no authorisation for `local` (05 §5.3)."""
        assert isinstance(connection, EvaluationConnection)
        return AccessToken(connection.bearer_token)

    def transport_outcome(
        self, attempt: Attempt, failure: TransportFailure, effect: AttemptEffect
    ) -> CallOutcome:
        """Nothing sent yet (DNS, connect, a timeout before the first byte): retryable.
        Anything after sending began, the attempt budget included: uncertain."""
        if failure.sent:
            return attempt.uncertain("evaluation-uncertain")
        return attempt.retryable("evaluation-unavailable")

    def handle_prepare(self, attempt: Attempt, command: PreparedCommand) -> bytes:
        connection = _connection(attempt)
        body = evaluation_body(connection.model, command.input)
        if len(body) > connection.maximum_request_bytes:
            raise ShapeError()
        return body

    def handle_call(self, attempt: Attempt, command: PreparedCommand) -> CallOutcome:
        connection = _connection(attempt)
        try:
            body = evaluation_body(connection.model, command.input)
        except ShapeError:
            return attempt.refused("prepared-command-mismatch")
        if command.preparation is None or body != command.preparation:
            return attempt.refused("prepared-command-mismatch")
        answer = attempt.send("POST", "/v1/systemone", effect="mutation", body=body)
        if answer.status == 200:
            return _answered(attempt, connection, command.input, answer)
        if answer.status in _REFUSED_STATUSES:
            return attempt.refused("evaluation-refused")
        if answer.status == 503:
            problem = problem_of(answer)
            if problem is not None and problem.code == "service.unavailable":
                return attempt.retryable("evaluation-unavailable")
        return attempt.uncertain("evaluation-uncertain")


def _connection(attempt: Attempt) -> EvaluationConnection:
    connection = attempt.connection
    if not isinstance(connection, EvaluationConnection):
        raise Stop(attempt.refused("operation-unbound"))
    return connection


# -- the request (08 §8) ----------------------------------------------------------------------------


def evaluation_body(model: str, request: Any) -> bytes:
    """The request body for a command input: canonical `{model, state, questions}`; raises
    ShapeError (refused `evaluation-invalid-command`) for an input outside 08 §8."""
    found = closed_object(request, {"state", "questions"})
    if not isinstance(found["state"], dict | str | list):
        raise ShapeError()
    questions = json_object(found["questions"])
    if not 1 <= len(questions) <= _MAX_QUESTIONS:
        raise ShapeError()
    for name, question in questions.items():
        if _LOCAL_ID.fullmatch(name) is None:
            raise ShapeError()
        _question(question)
    return canonical_json({"model": model, "state": found["state"], "questions": questions})


def _question(value: Any) -> None:
    kind = json_object(value).get("type")
    if kind == "predicate":
        question = closed_object(value, {"type", "instructions"})
    elif kind == "choice":
        question = closed_object(value, {"type", "instructions", "criteria"})
        criteria = json_object(question["criteria"])
        if not 2 <= len(criteria) <= 32:
            raise ShapeError()
        for name, description in criteria.items():
            if _LOCAL_ID.fullmatch(name) is None:
                raise ShapeError()
            text(description)
    elif kind == "score":
        question = closed_object(value, {"type", "instructions", "criteria"})
        levels = question["criteria"]
        if not isinstance(levels, list) or not 2 <= len(levels) <= 10:
            raise ShapeError()
        for level in levels:
            text(level)
    else:
        raise ShapeError()
    text(question["instructions"], 1, _MAX_INSTRUCTIONS)


# -- the answer (08 §8) -----------------------------------------------------------------------------


def _answered(
    attempt: Attempt, connection: EvaluationConnection, request: Any, answer: ProductAnswer
) -> CallOutcome:
    """A `200`: the content type, a strict bounded JSON body, and answers that pass every
    check of 08 §8; anything else is uncertain `evaluation-invalid-response` (the provider did
    evaluate, so the evaluation is never sent again)."""
    if answer.content_type is None or _CONTENT_TYPE.fullmatch(answer.content_type.strip()) is None:
        return attempt.uncertain("evaluation-invalid-response")
    if answer.body is None or answer.body_problem is not None:
        return attempt.uncertain("evaluation-invalid-response")
    try:
        value = parse_strict_json(answer.body)
        check_json_value(value)
        output = evaluation_output(connection.model, request["questions"], value)
    except (StrictJsonError, JsonBoundsError, ShapeError):
        return attempt.uncertain("evaluation-invalid-response")
    return attempt.success(output)


def evaluation_output(model: str, questions: dict[str, Any], value: Any) -> dict[str, Any]:
    """The step output for a provider answer; raises ShapeError when the answer fails 08 §8."""
    found = closed_object(value, {"model", "answers", "usage"})
    returned = text(found["model"])
    usage = closed_object(found["usage"], {"inputTokens", "outputTokens"})
    for name in ("inputTokens", "outputTokens"):
        count = usage[name]
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ShapeError()
    answers = json_object(found["answers"])
    if set(answers) != set(questions):
        raise ShapeError()  # every question answered exactly once
    published: dict[str, Any] = {}
    for name, question in questions.items():
        published[name] = _answer(question, answers[name])
    # The checks above are the ones JSON Schema cannot state (every question answered once,
    # distributions over the criteria summing to 1, the choice the most probable, the score
    # the expectation); the output's shape is the spec's.
    return output_shape(
        EVALUATE,
        {
            "protocol": PROTOCOL,
            "requestedModel": model,
            "returnedModel": returned,
            "answers": published,
            "usage": usage,
        },
    )


def _answer(question: dict[str, Any], value: Any) -> dict[str, Any]:
    kind = json_object(value).get("type")
    if kind == "refusal":
        return closed_object(value, {"type"})
    if kind != question["type"]:
        raise ShapeError()
    if kind == "predicate":
        answer = closed_object(value, {"type", "probability"})
        _probability(answer["probability"])
        return answer
    if kind == "choice":
        answer = closed_object(value, {"type", "choice", "probabilities"}, {"nativeConfidence"})
        probabilities = json_object(answer["probabilities"])
        if set(probabilities) != set(question["criteria"]):
            raise ShapeError()
        spread = {name: _probability(p) for name, p in probabilities.items()}
        _sums_to_one(spread.values())
        chosen = answer["choice"]
        if not isinstance(chosen, str) or chosen not in spread:
            raise ShapeError()
        if spread[chosen] < max(spread.values()):
            raise ShapeError()  # the choice has the highest probability
        if "nativeConfidence" in answer:
            _probability(answer["nativeConfidence"])
        return answer
    answer = closed_object(value, {"type", "score", "probabilities"}, {"nativeConfidence"})
    levels = question["criteria"]
    spread_list = answer["probabilities"]
    if not isinstance(spread_list, list) or len(spread_list) != len(levels):
        raise ShapeError()
    weights = [_probability(p) for p in spread_list]
    _sums_to_one(weights)
    score = _number(answer["score"])
    expected = sum(index * p for index, p in enumerate(weights))
    if abs(score - expected) > _PROBABILITY_SUM_SLACK * len(levels):
        raise ShapeError()
    if "nativeConfidence" in answer:
        _probability(answer["nativeConfidence"])
    return {**answer, "legend": list(levels)}


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ShapeError()
    return float(value)


def _probability(value: Any) -> float:
    number = _number(value)
    if not 0 <= number <= 1:
        raise ShapeError()
    return number


def _sums_to_one(values: Any) -> None:
    if abs(math.fsum(values) - 1) > _PROBABILITY_SUM_SLACK:
        raise ShapeError()
