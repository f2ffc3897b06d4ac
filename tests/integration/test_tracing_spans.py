"""OpenTelemetry spans of a run through the real service and worker (issue 12 item 6): the
admission's store transaction under the request's span, one `coordinator.tick` per tick that
claimed a record, a `coordinator.product-call` per product call (whose `traceparent` the product
receives) and a `coordinator.store.transaction` per transaction of a tick; attributes only from
`tracing.ATTRIBUTES`, and no input value or key anywhere in a span."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from integration_support import APPLICATION_ID, Deployed, run_input
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from coordinator_core.shell.observe import tracing

MESSAGING = "messaging.submit-message/v1"


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield provider, exporter
    finally:
        tracing.uninstall()
        provider.shutdown()


def _named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def _parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def test_a_run_leaves_its_spans_with_fixed_words_only(
    deployed: Deployed, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    _, exporter = provider
    key = f"key-{uuid.uuid4()}"
    # The API's request span (tests/api/test_api_tracing.py opens it from the edge).
    with tracing.request("startRun", "POST", "/v1/runs", None) as request:
        admitted = deployed.admit(run_input(), key=key)
    run_id = admitted.run.run_id
    status, _ = deployed.drive(run_id)
    assert status.status == "finished", status
    spans = exporter.get_finished_spans()

    [started] = _named(spans, "startRun")
    assert started.context.span_id == request.get_span_context().span_id
    assert started.kind is SpanKind.SERVER
    assert started.attributes is not None
    assert started.attributes["coordinator.run.id"] == str(run_id)
    assert started.attributes["coordinator.admission.outcome"] == "accepted"
    transactions = _named(spans, tracing.STORE_TRANSACTION)
    admits = [s for s in transactions if _parent_id(s) == started.context.span_id]
    assert [dict(s.attributes or {}) for s in admits] == [
        {
            "coordinator.store.kind": deployed.store.kind,
            "coordinator.store.purpose": "admit",
            "coordinator.store.mode": "write",
        }
    ]

    ticks = _named(spans, tracing.TICK)
    assert ticks, "no tick span"
    tick_ids = {tick.context.span_id for tick in ticks}
    for tick in ticks:
        attributes = dict(tick.attributes or {})
        assert attributes["coordinator.run.id"] == str(run_id)
        assert attributes["coordinator.workflow"] == deployed.workflow
        assert isinstance(attributes["coordinator.tick.records"], int)
        assert attributes["coordinator.tick.records"] >= 1
        assert tick.parent is None  # a tick starts its own trace
        purposes = [
            (s.attributes or {})["coordinator.store.purpose"]
            for s in transactions
            if _parent_id(s) == tick.context.span_id
        ]
        assert purposes[0] == "claim-due-step", purposes
        assert "complete-step" in purposes
    assert (ticks[-1].attributes or {})["coordinator.run.status"] == "finished"
    assert all(_parent_id(s) in tick_ids | {started.context.span_id} for s in transactions), (
        "a store transaction outside a request or a tick made a span"
    )

    calls = _named(spans, tracing.PRODUCT_CALL)
    [send] = [s for s in calls if (s.attributes or {})["coordinator.operation"] == MESSAGING]
    assert send.kind is SpanKind.CLIENT
    assert _parent_id(send) in tick_ids
    attributes = dict(send.attributes or {})
    status_code = attributes.pop("http.response.status_code")
    assert isinstance(status_code, int) and 200 <= status_code < 300
    assert attributes == {
        "coordinator.call": "dispatch",
        "coordinator.operation": MESSAGING,
        "coordinator.step.id": "notify",
        "coordinator.outcome": "success",
    }
    # The product received the product-call span as its parent.
    [submission] = deployed.products.submissions(deployed.command_key(admitted))
    context = send.get_span_context()
    assert submission["traceparent"] == (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    )

    # Attributes from the allowed set only; no input value or key anywhere in a span.
    for span in spans:
        assert set(span.attributes or {}) <= tracing.ATTRIBUTES, span.name
        exported = span.to_json()
        for secret in (APPLICATION_ID, key):
            assert secret not in exported, span.name


def test_an_idle_worker_makes_no_span(
    sqlite_deployed: Deployed, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    _, exporter = provider
    for _ in range(3):
        assert sqlite_deployed.worker().tick() is False
    assert exporter.get_finished_spans() == ()
