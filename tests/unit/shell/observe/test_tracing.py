"""OpenTelemetry spans are exported only when configured (issue 12 item 6): the standard OTEL_*
variables decide, every helper is a no-op while tracing is off, and a span never carries an
error's message. (That a process with nothing configured never imports opentelemetry is checked
in fresh processes: tests/e2e/test_tracing_imports.py.)"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from coordinator_core.shell.observe import tracing


@pytest.mark.parametrize(
    ("variables", "wanted"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, False),
        ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_only_a_named_exporter_or_an_endpoint_asks_for_spans(
    variables: dict[str, str], wanted: bool
) -> None:
    assert tracing.wanted(variables) is wanted


def test_while_off_every_helper_is_a_no_op() -> None:
    assert not tracing.enabled()
    with tracing.store_transaction("sqlite", "admit", read_only=False) as span:
        assert span is None
    with tracing.product_call("dispatch", "messaging.submit-message/v1", "notify") as call:
        assert call is None
    with tracing.request("startRun", "POST", "/v1/runs", None) as span:
        assert span is None
    tracing.annotate({"not.an.allowed.name": "x"})  # not even checked while off
    assert tracing.traceparent_of_current() is None


def test_a_failing_span_names_the_error_type_and_never_its_message() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        with (
            pytest.raises(ValueError, match="canary"),
            tracing.request("startRun", "POST", "/v1/runs", None),
            tracing.store_transaction("sqlite", "admit", read_only=False),
        ):
            raise ValueError("canary-secret-value")
        with pytest.raises(ValueError, match="outside the allowed set"):
            tracing.annotate({"coordinator.input": "x"})  # no current span: not even reached
            with tracing.request("getRun", "GET", "/v1/runs/{run}", None):
                tracing.annotate({"coordinator.input": "x"})
    finally:
        tracing.uninstall()
        provider.shutdown()
    transaction, request, _ = exporter.get_finished_spans()
    for span in (transaction, request):
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description is None
        assert span.events == ()
        assert (span.attributes or {})["error.type"] == "ValueError"
        assert "canary" not in span.to_json()
