"""OpenTelemetry is imported only when tracing is configured (issue 12 item 6), in a fresh
process each time: the standard OTEL_* variables decide, and a process with nothing configured
never imports opentelemetry at all, neither the SDK nor the API, whatever of the service half it
loads. (The helpers' behaviour in one process is tests/unit/shell/observe/test_tracing.py's.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

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
