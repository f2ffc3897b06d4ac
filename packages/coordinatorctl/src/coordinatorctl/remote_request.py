"""The one service API call (file 06) of each remote command (09 §4), built from its parsed
options once its local inputs hold."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from coordinator_core.errors import Diagnostic
from coordinatorctl.remote_inputs import (
    check_date_time,
    check_reason,
    check_text_argument,
    parse_run_id,
    read_input,
    read_key,
)

__all__ = ["ApiRequest", "build_request"]


@dataclass(frozen=True, slots=True)
class ApiRequest:
    """One API call: method, path (already safe), query, JSON body and extra headers."""

    method: Literal["GET", "POST"]
    path: str
    query: tuple[tuple[str, str], ...] = ()
    body: Mapping[str, Any] | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)


def build_request(options: argparse.Namespace) -> ApiRequest | list[Diagnostic]:
    """The API call of `options.command` (09 §4), or the diagnostics of its inputs."""
    name = options.command
    problems: list[Diagnostic] = []

    def note(found: Diagnostic | None) -> None:
        if found is not None:
            problems.append(found)

    run_path = ""
    if hasattr(options, "run"):
        run_id = parse_run_id(options.run)
        if isinstance(run_id, Diagnostic):
            problems.append(run_id)
        else:
            run_path = f"/v1/runs/{run_id}"
    reason: str = getattr(options, "reason", "")
    if hasattr(options, "reason"):
        note(check_reason(reason))

    request: ApiRequest | None = None
    if name == "workflow":
        request = ApiRequest("GET", "/v1/workflow")
    elif name == "start":
        note(check_text_argument("--workflow", options.workflow))
        note(check_text_argument("--revision", options.revision))
        value = read_input(options.input)
        key = read_key(options.key_file)
        if isinstance(value, Diagnostic):
            problems.append(value)
        if isinstance(key, Diagnostic):
            problems.append(key)
        else:
            request = ApiRequest(
                "POST",
                "/v1/runs",
                body={"workflow": options.workflow, "revision": options.revision, "input": value},
                headers=(("Idempotency-Key", key),),
            )
    elif name == "status":
        request = ApiRequest("GET", run_path)
    elif name == "list":
        note(check_text_argument("--cursor", options.cursor))
        note(check_text_argument("--workflow", options.workflow))
        query = [("limit", str(options.limit))]
        for key_name in ("cursor", "status", "workflow"):
            given = getattr(options, key_name)
            if given is not None:
                query.append((key_name, given))
        request = ApiRequest("GET", "/v1/runs", query=tuple(query))
    elif name == "inspect":
        request = ApiRequest("GET", f"{run_path}/inspect")
    elif name in ("cancel", "retry-same", "reconcile"):
        request = ApiRequest("POST", f"{run_path}/{name}", body={"reason": reason})
    elif name == "doctor":
        request = ApiRequest("GET", "/v1/doctor")
    elif name in ("restore-hold", "release-restore-hold"):
        request = ApiRequest("POST", f"/v1/{name}", body={"reason": reason})
    elif name == "release-admission-hold":
        request = ApiRequest(
            "POST",
            "/v1/release-admission-hold",
            body={
                "reason": reason,
                "admissionHistoryComplete": bool(options.admission_history_complete),
                "priorDeploymentFenced": bool(options.prior_deployment_fenced),
            },
        )
    elif name == "retain":
        note(check_date_time(options.before))
        request = ApiRequest(
            "POST", "/v1/retention", body={"before": options.before, "limit": options.limit}
        )
    if problems or request is None:
        return problems or [Diagnostic("coordinator.command.usage", path="")]
    return request
