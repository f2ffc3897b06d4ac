"""The request's span (issue 12 item 6): every documented request, with tracing on, makes one
SERVER span named by its operationId, a child of the caller's W3C `traceparent` (keeping its
`tracestate`), with the method, route template, status and refusal code as attributes and no
input value, token or header value in it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from api_fakes import REVISION, WORKFLOW, SigningKeys, bearer
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from coordinator_core.shell.observe import tracing

pytestmark = pytest.mark.anyio

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
CANARY = "canary-input-3f1d"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.uninstall()
        provider.shutdown()


async def _start(
    client: httpx.AsyncClient, keys: SigningKeys, headers: dict[str, str], value: Any = CANARY
) -> httpx.Response:
    body = {"workflow": WORKFLOW, "revision": REVISION, "input": {"applicationId": value}}
    return await client.post(
        "/v1/runs",
        json=body,
        headers={**bearer(keys), "Idempotency-Key": "key-trace-1", **headers},
    )


async def test_an_admission_span_continues_the_callers_trace(
    client: httpx.AsyncClient, keys: SigningKeys, spans: InMemorySpanExporter
) -> None:
    response = await _start(
        client,
        keys,
        {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "tracestate": "vendor=opaque"},
    )
    assert response.status_code == 201, response.text
    [span] = spans.get_finished_spans()
    assert span.name == "startRun"
    assert span.kind is SpanKind.SERVER
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT_ID
    # The caller's tracestate is not taken (issue 23): it would be copied into every span.
    assert span.context.trace_state.get("vendor") is None
    assert "opaque" not in span.to_json()
    assert dict(span.attributes or {}) == {
        "http.request.method": "POST",
        "http.route": "/v1/runs",
        "http.response.status_code": 201,
    }
    assert CANARY not in span.to_json()
    assert "key-trace-1" not in span.to_json()


async def test_without_a_valid_traceparent_the_request_starts_a_trace(
    client: httpx.AsyncClient, keys: SigningKeys, spans: InMemorySpanExporter
) -> None:
    await client.get("/health")
    await client.get("/health", headers={"traceparent": f"00-{'0' * 32}-{PARENT_ID}-01"})
    await client.get("/health", headers={"traceparent": "garbage"})
    found = spans.get_finished_spans()
    assert [(span.name, span.parent) for span in found] == [("getHealth", None)] * 3


async def test_a_refusal_names_its_code_and_never_the_value(
    client: httpx.AsyncClient, keys: SigningKeys, spans: InMemorySpanExporter
) -> None:
    response = await client.post(
        "/v1/runs",
        json={"workflow": WORKFLOW, "revision": REVISION, "input": {}, CANARY: 1},
        headers={**bearer(keys), "Idempotency-Key": "key-trace-2"},
    )
    assert response.status_code == 400
    await client.get("/v1/runs/" + CANARY, headers=bearer(keys))
    refused, absent = spans.get_finished_spans()
    assert refused.name == "startRun"
    assert (refused.attributes or {})["coordinator.problem.code"] == response.json()["code"]
    assert (refused.attributes or {})["http.response.status_code"] == 400
    assert refused.status.status_code is StatusCode.UNSET  # a 4xx is the caller's
    assert absent.name == "getRun"
    assert (absent.attributes or {})["http.route"] == "/v1/runs/{run}"
    for span in (refused, absent):
        assert set(span.attributes or {}) <= tracing.ATTRIBUTES
        assert CANARY not in span.to_json()
        assert "Bearer" not in span.to_json()
