"""The metric families' own rules (06 §14): keyed log members only, loop states that add up, the
worker's `--metrics-bind` address, and the worker's listener serving the exposition."""

from __future__ import annotations

import argparse
import io
import json
import logging

import httpx
import pytest

from coordinator_core.shell.observe import metrics
from coordinator_core.shell.runtime import process
from coordinator_core.shell.runtime.service_log import JsonLineHandler, ServiceLog, install, keyed

REF = "hmac-sha256:" + "ab" * 32


def test_keyed_members_keep_references_and_fixed_words_and_drop_everything_else() -> None:
    kept = keyed(
        {
            "runRef": REF,
            "stepRef": "a8d12546-b2ca-46ac-b12b-06c199041bb2",  # not in the keyed form
            "workflow": "delayed-follow-up",
            "status": "finished",
            "outcome": "a8d12546b2ca46acb12b06c199041bb2",  # a run id without dashes
            "refusal": "coordinator.definition.input",
            "operation": "value with spaces",
            "input": "delayed-follow-up",  # not a member a line may carry
            "message": "overridden",
        }
    )
    assert kept == {
        "runRef": REF,
        "workflow": "delayed-follow-up",
        "status": "finished",
        "refusal": "coordinator.definition.input",
    }


def test_a_record_with_keyed_members_is_one_line_with_them() -> None:
    stream = io.StringIO()
    handler = JsonLineHandler(ServiceLog(stream))
    record = logging.LogRecord(
        "coordinator.runs", logging.INFO, __file__, 1, "A run's status changed.", (), None
    )
    record.code = "coordinator.run.status-changed"
    record.keyed = {"runRef": REF, "status": "finished", "previous": "canary value"}
    handler.emit(record)
    line = json.loads(stream.getvalue())
    assert set(line) == {"time", "level", "code", "message", "runRef", "status"}
    assert (line["code"], line["runRef"], line["status"]) == (
        "coordinator.run.status-changed", REF, "finished"
    )  # fmt: skip


def _loops(state: str) -> float:
    return metrics.REGISTRY.get_sample_value("coordinator_worker_loops", {"state": state}) or 0.0


def test_a_loop_is_counted_in_exactly_one_state_until_it_leaves() -> None:
    base = {state: _loops(state) for state in ("working", "idle", "backoff")}
    loop = metrics.LoopState()
    loop.enter("working")
    loop.enter("working")
    assert _loops("working") == base["working"] + 1
    loop.enter("idle")
    assert (_loops("working"), _loops("idle")) == (base["working"], base["idle"] + 1)
    loop.enter("backoff")
    assert _loops("idle") == base["idle"]
    assert _loops("backoff") == base["backoff"] + 1
    loop.leave()
    assert {state: _loops(state) for state in base} == base


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:9464", ("::1", 9464))],
)
def test_the_metrics_bind_takes_an_address_and_a_port(text: str, parsed: tuple[str, int]) -> None:
    assert process._metrics_bind(text) == parsed


@pytest.mark.parametrize(
    "text",
    ["localhost:9464", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", "::1:9464", "[127.0.0.1]:1"],
)
def test_the_metrics_bind_refuses_what_is_not_an_address_and_a_port(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        process._metrics_bind(text)


def test_the_worker_listener_serves_the_exposition_and_refuses_a_taken_port() -> None:
    server, _ = metrics.serve("127.0.0.1", 0)
    try:
        port = server.server_port
        answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert answer.status_code == 200
        assert answer.headers["content-type"] == metrics.CONTENT_TYPE
        assert "coordinator_worker_loops" in answer.text
        with pytest.raises(OSError):
            metrics.serve("127.0.0.1", port)
    finally:
        server.shutdown()
        server.server_close()


def test_a_bad_metrics_bind_is_a_usage_error_that_does_not_echo_it() -> None:
    stream = io.StringIO()
    log = ServiceLog(stream)
    code = process._run_command(
        log,
        process.build_parser(),
        {"worker": process.run_worker},
        ["worker", "--runtime-config", "/nowhere", "--metrics-bind", "canary:1"],
    )
    assert code == process.EXIT_USAGE
    assert "canary" not in stream.getvalue()
    assert "coordinator.cli.usage" in stream.getvalue()


def test_installed_log_makes_no_record_of_a_library_below_warning_and_keeps_our_own() -> None:
    root = logging.getLogger()
    kept_handlers, kept_level = list(root.handlers), root.level
    own = logging.getLogger("coordinator_api")
    kept_own = own.level
    stream = io.StringIO()
    try:
        install(ServiceLog(stream))
        library = logging.getLogger("connexion.middleware.request_validation")
        assert not library.isEnabledFor(logging.INFO)  # the record is never made
        library.info("Skipping validation.")
        library.warning("A library's warning.")
        logging.getLogger("coordinator_api.access").info("access token refused")
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in kept_handlers:
            root.addHandler(handler)
        root.setLevel(kept_level)
        own.setLevel(kept_own)
        logging.getLogger("coordinator").setLevel(logging.NOTSET)
        logging.getLogger("coordinator_core").setLevel(logging.NOTSET)
        logging.getLogger("uvicorn.access").disabled = False
        logging.captureWarnings(False)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["level"], line["message"]) for line in lines] == [
        ("warning", "A library's warning."),
        ("info", "access token refused"),
    ]
