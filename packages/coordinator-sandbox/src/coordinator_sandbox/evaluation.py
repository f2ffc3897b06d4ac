"""Sandbox evaluation provider, protocol `system-one` (file 08 §8, §11.6): deterministic answers.

Each answer is a function of the question id and the question only, so repeated runs agree:
a predicate's probability, a choice's chosen criterion and a score's level come from the
SHA-256 of the canonical `[id, question]`. Answers can be pinned per question id through
`PUT /sandbox/answers/{question}`. Authorisation is a configured bearer secret, or none.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from coordinator_sandbox.canonical import canonical_json
from coordinator_sandbox.service import Call, Operation, Service
from coordinator_sandbox.tokens import Principal
from coordinator_sandbox.web import ProblemError, json_response, problems, read_json_body

__all__ = ["EvaluationService", "deterministic_answer"]

EVALUATE = "evaluation.evaluate/v1"
_LEADING = 0.7


def _spread(count: int, chosen: int) -> list[float]:
    if count == 1:
        return [1.0]
    rest = (1 - _LEADING) / (count - 1)
    return [_LEADING if index == chosen else rest for index in range(count)]


def deterministic_answer(question_id: str, question: dict[str, Any]) -> dict[str, Any]:
    """The sandbox's fixed answer to one question (valid under the checks of file 08 §8)."""
    seed = int.from_bytes(hashlib.sha256(canonical_json([question_id, question])).digest()[:8])
    kind = question.get("type")
    if kind == "predicate":
        return {"type": "predicate", "probability": (seed % 1001) / 1000}
    if kind == "choice":
        names = sorted(question["criteria"])
        chosen = seed % len(names)
        spread = _spread(len(names), chosen)
        return {
            "type": "choice",
            "choice": names[chosen],
            "probabilities": dict(zip(names, spread, strict=True)),
        }
    levels = len(question["criteria"])
    chosen = seed % levels
    spread = _spread(levels, chosen)
    return {
        "type": "score",
        "score": sum(index * p for index, p in enumerate(spread)),
        "probabilities": spread,
    }


def _valid_question(question: Any) -> bool:
    if not isinstance(question, dict) or not isinstance(question.get("instructions"), str):
        return False
    kind = question.get("type")
    if kind == "predicate":
        return set(question) == {"type", "instructions"}
    criteria = question.get("criteria")
    if kind == "choice":
        return isinstance(criteria, dict) and 2 <= len(criteria) <= 32
    if kind == "score":
        return isinstance(criteria, list) and 2 <= len(criteria) <= 10
    return False


class EvaluationService(Service):
    """The evaluation provider on its own port."""

    def __init__(self, bearer_token: str | None = None) -> None:
        super().__init__("evaluation", None, None, [EVALUATE])
        self.bearer_token = bearer_token
        self.pinned: dict[str, dict[str, Any]] = {}

    def authenticate(self, request: Request, operation: Operation) -> Principal:
        if self.bearer_token is None:
            return Principal("local", "local", frozenset())
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), self.bearer_token.encode()
        ):
            raise ProblemError(
                401, "authentication.refused", headers={"WWW-Authenticate": "Bearer"}
            )
        return Principal("bearer", "bearer", frozenset())

    def product_routes(self) -> list[BaseRoute]:
        return [Route("/v1/systemone", self._evaluate, methods=["POST"])]

    async def _evaluate(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            body = call.body
            if (
                not isinstance(body, dict)
                or set(body) != {"model", "state", "questions"}
                or not isinstance(body["model"], str)
                or not body["model"]
                or not isinstance(body["questions"], dict)
                or not 1 <= len(body["questions"]) <= 32
                or not all(_valid_question(q) for q in body["questions"].values())
            ):
                raise ProblemError(400, "request.invalid", "The body is {model, state, questions}.")
            answers = {
                name: self.pinned.get(name) or deterministic_answer(name, question)
                for name, question in body["questions"].items()
            }
            call.committed = True
            size = len(canonical_json(body))
            return json_response(
                {
                    "model": body["model"],
                    "answers": answers,
                    "usage": {"inputTokens": size // 4, "outputTokens": 16 * len(answers)},
                }
            )

        return await self.run(request, Operation(EVALUATE, (), reads_body=True), effect)

    def control_routes(self) -> list[BaseRoute]:
        return [
            Route("/sandbox/answers/{question}", problems(self._pin), methods=["PUT"]),
            Route("/sandbox/answers", problems(self._unpin), methods=["DELETE"]),
            *super().control_routes(),
        ]

    async def _pin(self, request: Request) -> Response:
        body = await read_json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("type"), str):
            raise ProblemError(400, "request.invalid", "An answer is an object with a `type`.")
        self.pinned[request.path_params["question"]] = body
        return json_response(body)

    async def _unpin(self, request: Request) -> Response:
        self.pinned.clear()
        return Response(status_code=204)
