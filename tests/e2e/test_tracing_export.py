"""End to end (issue 12 item 6): `coordinator serve` as a real process, with
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` pointed at a tiny OTLP/HTTP receiver of this test, exports
the admission's span as a child of the caller's `traceparent`, and the spans of the run's ticks,
product calls and store transactions; no exported byte names the run's input value."""

from __future__ import annotations

import signal
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from e2e_support import Project
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from coordinator_sandbox.testing import wait_for

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"


class _Receiver(ThreadingHTTPServer):
    """Keeps the body of every POST to /v1/traces and answers an empty export response."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.bodies: list[bytes] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        assert isinstance(self.server, _Receiver)
        if self.path == "/v1/traces":
            self.server.bodies.append(body)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_: Any) -> None:
        return


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    server = _Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _spans(bodies: list[bytes]) -> list[tuple[str, Any]]:
    """(service.name, span) for every exported span."""
    found = []
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            names = [
                a.value.string_value
                for a in resource_spans.resource.attributes
                if a.key == "service.name"
            ]
            for scope_spans in resource_spans.scope_spans:
                found.extend((names[0], span) for span in scope_spans.spans)
    return found


def test_serve_exports_the_admission_as_a_child_of_the_callers_span(
    project: Project, receiver: _Receiver
) -> None:
    sandbox = project.start_sandbox()
    project.write_runtime(sandbox)
    application = str(uuid.uuid4())  # the canary input value (the schema wants a UUID)
    sandbox.seed_application(application)
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "E2E-TRACE")["status"] == "applied"
    project.env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = receiver.url
    project.env["OTEL_BSP_SCHEDULE_DELAY"] = "200"
    service = project.start_service()
    project.wait_healthy(service)
    token = project.token_file().read_text().strip()

    key = f"key-{uuid.uuid4()}"
    answer = httpx.post(
        project.origin + "/v1/runs",
        headers={
            "Authorization": "Bearer " + token,
            "Idempotency-Key": key,
            "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
        },
        json={
            "workflow": project.workflow,
            "revision": project.revision,
            "input": {"applicationId": application, "sendAfter": "2020-01-01T00:00:00.000Z"},
        },
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    run_id = answer.json()["runId"]

    def finished() -> bool:
        status = httpx.get(
            f"{project.origin}/v1/runs/{run_id}",
            headers={"Authorization": "Bearer " + token},
            timeout=10,
        ).json()["status"]
        return status == "finished"

    wait_for(finished, 30, "the run to finish", 0.25)
    assert project.processes.stop(service, signal.SIGTERM) == 0  # flushes the batch
    assert "coordinator.service.tracing" in project.processes.log("serve")

    spans = _spans(receiver.bodies)
    assert {name for name, _ in spans} == {"coordinator"}
    [start] = [span for _, span in spans if span.name == "startRun"]
    assert start.trace_id.hex() == TRACE_ID
    assert start.parent_span_id.hex() == PARENT_ID
    attributes = {a.key: a.value for a in start.attributes}
    assert attributes["coordinator.run.id"].string_value == run_id
    assert attributes["http.response.status_code"].int_value == 201
    names = {span.name for _, span in spans}
    assert {"coordinator.tick", "coordinator.product-call", "coordinator.store.transaction"} <= (
        names
    )
    ticks = [span for _, span in spans if span.name == "coordinator.tick"]
    assert all(
        {a.key: a.value for a in tick.attributes}["coordinator.run.id"].string_value == run_id
        for tick in ticks
    )
    for body in receiver.bodies:
        assert application.encode() not in body
        assert key.encode() not in body
        assert token.encode() not in body
