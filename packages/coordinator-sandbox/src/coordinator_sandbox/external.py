"""Sandbox external JSON endpoint (file 08 §7, §11): fixed documents served by `GET /{path}`.

Each document is `{status, body, echoQuery?}`; with `echoQuery` the query parameters are added
to an object body under `query`. A bearer token is required only when the service is given a
resource (then it is checked like any product's, with no scope needed).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from coordinator_sandbox.service import Call, Operation, Service
from coordinator_sandbox.tokens import Issuer
from coordinator_sandbox.web import ProblemError, json_response, problems, read_json_body

__all__ = ["ExternalService"]

EXTERNAL_GET = "external-http.get/v1"
DEFAULT_DOCUMENTS: dict[str, dict[str, Any]] = {
    "status": {"status": 200, "body": {"ok": True}},
    "v1/holidays": {"status": 200, "body": {"holidays": ["2026-01-01", "2026-12-25"]}},
}


def _document(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or "body" not in value:
        raise ValueError("a document is {status?, body, echoQuery?}")
    status = value.get("status", 200)
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        raise ValueError("`status` is an HTTP status")
    return {"status": status, "body": value["body"], "echoQuery": bool(value.get("echoQuery"))}


class ExternalService(Service):
    """The external JSON endpoint on its own port."""

    def __init__(self, issuer: Issuer | None, resource: str | None) -> None:
        super().__init__("external", issuer, resource, [EXTERNAL_GET])
        self.documents = {path: _document(doc) for path, doc in DEFAULT_DOCUMENTS.items()}

    def load(self, config: dict[str, Any]) -> None:
        for path, document in config.get("documents", {}).items():
            self.documents[path.strip("/")] = _document(document)

    def product_routes(self) -> list[BaseRoute]:
        return [Route("/{path:path}", self._get, methods=["GET"])]

    async def _get(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            document = self.documents.get(request.path_params["path"].strip("/"))
            if document is None:
                raise ProblemError(404, "document.not-found")
            body = document["body"]
            if document["echoQuery"] and isinstance(body, dict):
                body = {**body, "query": dict(request.query_params)}
            if body is None:
                return Response(b"", document["status"])
            return json_response(body, document["status"])

        return await self.run(request, Operation(EXTERNAL_GET, ()), effect)

    def control_routes(self) -> list[BaseRoute]:
        return [
            Route("/sandbox/documents/{path:path}", problems(self._put), methods=["PUT"]),
            *super().control_routes(),
        ]

    async def _put(self, request: Request) -> Response:
        body = await read_json_body(request)
        try:
            document = _document(body)
        except ValueError as exc:
            raise ProblemError(400, "request.invalid", str(exc)) from exc
        self.documents[request.path_params["path"].strip("/")] = document
        return json_response(document)
