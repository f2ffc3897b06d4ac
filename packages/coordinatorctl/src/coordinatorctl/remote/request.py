"""The one service API call (file 06) of each remote command (09 §4), built from its parsed
options once its local inputs hold.

A request body is built through its generated model (remote/models.py): `start` through
StartRunRequest, the commands that carry only a reason through ReasonRequest,
`release-admission-hold` through ReleaseAdmissionHoldRequest and `retain` through
RetentionRequest. What is sent is the model's JSON dump by alias, except that `before` keeps the
caller's RFC 3339 text once the model has read it as an instant (the dump would re-render it,
e.g. `.5` as `.500000`, and cut a fraction past microseconds). A value the model refuses is the
command's `input-invalid` diagnostic, not a request the service would refuse.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from coordinator_core.errors import Diagnostic
from coordinatorctl.remote.checks import (
    check_date_time,
    check_reason,
    check_step_id,
    check_text_argument,
    parse_run_id,
    refused_member,
    start_input,
    start_key,
)
from coordinatorctl.remote.models import (
    ReasonRequest,
    ReleaseAdmissionHoldRequest,
    RetentionRequest,
    StartRunRequest,
    request_body,
)

__all__ = ["ACTIVE", "ApiRequest", "StartInputs", "build_request", "start_inputs"]

ACTIVE = "active"  # `--revision active`: the revision the service serves (its default)
_ANY_WORKFLOW = "w"
_ANY_REVISION = "sha256:" + "0" * 64


@dataclass(frozen=True, slots=True)
class ApiRequest:
    """One API call: method, path (already safe), query, JSON body and extra headers."""

    method: Literal["GET", "POST"]
    path: str
    query: tuple[tuple[str, str], ...] = ()
    body: Mapping[str, Any] | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class StartInputs:
    """`start`'s local inputs once they hold: the run input, the Idempotency-Key and whether
    the key was generated here; and whether the workflow or revision is the service's."""

    value: object = field(repr=False)
    key: str = field(repr=False)
    generated: bool
    needs_workflow: bool


def start_inputs(options: argparse.Namespace) -> StartInputs | list[Diagnostic]:
    """Every local input of `start`, read once (standard input can be read only once) and
    checked before anything is sent."""
    problems: list[Diagnostic] = []
    checked: set[str] = set()
    for member, given in (("workflow", options.workflow), ("revision", options.revision)):
        found = check_text_argument(f"--{member}", given)
        if found is not None:
            problems.append(found)
            checked.add(member)
    value = start_input(options.input, options.input_json)
    key = start_key(options.key, options.key_file)
    if isinstance(value, Diagnostic):
        problems.append(value)
    if isinstance(key, Diagnostic):
        problems.append(key)
    # A given id the request's model refuses is reported with the rest, before anything is
    # sent (a default is the service's own, which the model is not asked about here).
    refused = request_body(
        StartRunRequest,
        workflow=options.workflow if options.workflow is not None else _ANY_WORKFLOW,
        revision=options.revision if options.revision not in (None, ACTIVE) else _ANY_REVISION,
        input=None,
    )
    if isinstance(refused, frozenset):
        problems.extend(refused_member(m) for m in sorted(refused - checked - {"input"}))
    if problems or isinstance(value, Diagnostic) or isinstance(key, Diagnostic):
        return problems
    needs = options.workflow is None or options.revision in (None, ACTIVE)
    return StartInputs(value, key[0], key[1], needs)


def build_request(
    options: argparse.Namespace,
    *,
    start: StartInputs | None = None,
    served: tuple[str, str] | None = None,
) -> ApiRequest | list[Diagnostic]:
    """The API call of `options.command` (09 §4), or the diagnostics of its inputs. For
    `start`, `start` are its inputs read already and `served` the service's workflow id and
    active revision, which fill in a workflow or revision not given (or `active`)."""
    name = options.command
    problems: list[Diagnostic] = []
    checked: set[str] = set()  # the wire names of the members a local check already refused

    def note(member: str, found: Diagnostic | None) -> None:
        if found is not None:
            problems.append(found)
            checked.add(member)

    def body(built: dict[str, Any] | frozenset[str]) -> dict[str, Any] | None:
        """The built body; a member its model refuses is one `input-invalid` diagnostic (the
        local check's, when that check already refused it)."""
        if isinstance(built, dict):
            return built
        problems.extend(refused_member(member) for member in sorted(built - checked))
        return None

    run_path = ""
    if hasattr(options, "run"):
        run_id = parse_run_id(options.run)
        if isinstance(run_id, Diagnostic):
            problems.append(run_id)
        else:
            run_path = f"/v1/runs/{run_id}"
    reason: str = getattr(options, "reason", "")
    if hasattr(options, "reason"):
        note("reason", check_reason(reason))

    request: ApiRequest | None = None
    if name == "workflow":
        request = ApiRequest("GET", "/v1/workflow")
    elif name == "start":
        if start is None:
            found = start_inputs(options)
            if isinstance(found, list):
                return found
            start = found
        workflow, revision = options.workflow, options.revision
        if served is not None:
            workflow = workflow if workflow is not None else served[0]
            revision = served[1] if revision in (None, ACTIVE) else revision
        built = body(
            request_body(StartRunRequest, workflow=workflow, revision=revision, input=start.value)
        )
        if built is not None:
            request = ApiRequest(
                "POST", "/v1/runs", body=built, headers=(("Idempotency-Key", start.key),)
            )
    elif name == "status":
        request = ApiRequest("GET", run_path)
    elif name == "list":
        note("cursor", check_text_argument("--cursor", options.cursor))
        note("workflow", check_text_argument("--workflow", options.workflow))
        query = [("limit", str(options.limit))]
        for key_name in ("cursor", "status", "workflow"):
            given = getattr(options, key_name)
            if given is not None:
                query.append((key_name, given))
        request = ApiRequest("GET", "/v1/runs", query=tuple(query))
    elif name == "inspect":
        request = ApiRequest("GET", f"{run_path}/inspect")
    elif name == "attempts":
        note("step", check_step_id(options.step))
        note("cursor", check_text_argument("--cursor", options.cursor))
        query = [("limit", str(options.limit))]
        if options.cursor is not None:
            query.append(("cursor", options.cursor))
        request = ApiRequest("GET", f"{run_path}/steps/{options.step}/attempts", tuple(query))
    elif name in ("cancel", "retry-same", "reconcile"):
        reasoned = body(request_body(ReasonRequest, reason=reason))
        if reasoned is not None:
            request = ApiRequest("POST", f"{run_path}/{name}", body=reasoned)
    elif name == "doctor":
        request = ApiRequest("GET", "/v1/doctor")
    elif name in ("restore-hold", "release-restore-hold"):
        reasoned = body(request_body(ReasonRequest, reason=reason))
        if reasoned is not None:
            request = ApiRequest("POST", f"/v1/{name}", body=reasoned)
    elif name == "release-admission-hold":
        release = body(
            request_body(
                ReleaseAdmissionHoldRequest,
                reason=reason,
                admission_history_complete=bool(options.admission_history_complete),
                prior_deployment_fenced=bool(options.prior_deployment_fenced),
            )
        )
        if release is not None:
            request = ApiRequest("POST", "/v1/release-admission-hold", body=release)
    elif name == "retain":
        note("before", check_date_time(options.before))
        retention = body(request_body(RetentionRequest, before=options.before, limit=options.limit))
        if retention is not None:
            # The model read `before` as an instant; the wire keeps the caller's RFC 3339 text.
            request = ApiRequest(
                "POST", "/v1/retention", body={**retention, "before": options.before}
            )
    if problems or request is None:
        return problems or [Diagnostic("coordinator.command.usage", path="")]
    return request
