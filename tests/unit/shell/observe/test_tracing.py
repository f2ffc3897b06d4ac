"""OpenTelemetry spans are exported only when configured (issue 12 item 6): the standard OTEL_*
variables decide, and a process with nothing configured never imports opentelemetry at all,
neither the SDK nor the API, whatever of the service half it loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from coordinator_core.shell.observe import tracing

# Loads the service half as `coordinator serve` does, configures tracing from the environment
# and reports whether it is on and which opentelemetry modules the process holds.
PROBE = """
import json, os, sys
import coordinator_api.app, coordinator_api.edge
import coordinator_core.shell.runtime.process, coordinator_core.shell.execution.worker
import coordinator_core.shell.adapters.registry, coordinator_core.shell.store
from coordinator_core.shell.observe import tracing
stop = tracing.configure(os.environ, process="serve")
loaded = sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry")
print(json.dumps({"enabled": tracing.enabled(), "loaded": loaded}))
if stop is not None:
    stop()
"""


def _probe(**variables: str) -> dict[str, object]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environment.update(variables)
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
        env=environment, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    found: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return found


@pytest.mark.parametrize(
    "variables",
    [
        {},
        {"OTEL_SERVICE_NAME": "coordinator-test"},
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
        {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"},
    ],
)
def test_with_nothing_configured_no_opentelemetry_module_is_imported(
    variables: dict[str, str],
) -> None:
    assert _probe(**variables) == {"enabled": False, "loaded": []}


def test_an_endpoint_switches_tracing_on_with_the_sdk_and_the_http_exporter() -> None:
    found = _probe(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://127.0.0.1:9/v1/traces")
    assert found["enabled"] is True
    loaded = found["loaded"]
    assert isinstance(loaded, list)
    assert "opentelemetry.sdk.trace" in loaded
    assert "opentelemetry.exporter.otlp.proto.http.trace_exporter" in loaded


def test_an_unsupported_exporter_leaves_tracing_off() -> None:
    assert _probe(OTEL_TRACES_EXPORTER="zipkin")["enabled"] is False
    found = _probe(
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_EXPORTER_OTLP_PROTOCOL="grpc"
    )
    assert found == {"enabled": False, "loaded": []}


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
