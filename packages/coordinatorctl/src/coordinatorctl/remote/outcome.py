"""The outcome mapping of the remote commands (09 §4): each command's answer shape, model and
follow-up advice, and one answer (or failed exchange) to the command's outcome, whose exit code
comes from that mapping (02 §3), not from the catalogue's class of a code the service chose.

Answers are read through the generated models (remote/models.py): a success body through the
schema its route answers (spec/openapi.yaml), a problem body through Problem. A body the model
refuses is the `shape` failure (exit 3), or for a problem no problem at all. The result members
of the report keep the service's body as received; text mode reads the typed model.

A problem's `detail` and `suggestedAction` are the service's fixed sentences and are passed
through, but stripped of control and format characters and capped in length.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Literal

from coordinator_core.errors import Diagnostic, entry
from coordinatorctl.remote.exchange import Failure, RemoteAnswer
from coordinatorctl.remote.models import (
    AttemptPage,
    Doctor,
    HoldState,
    Problem,
    ReconcileResult,
    RetentionResult,
    RunInspection,
    RunList,
    RunStatus,
    Violation,
    WorkflowInfo,
    answer_of,
)
from coordinatorctl.report import Outcome

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "MAX_PASSED_TEXT_CHARS",
    "MAX_PROBLEM_CODE_CHARS",
    "SPECS",
    "FollowUp",
    "RemoteOutcome",
    "RemoteProblem",
    "Shape",
    "list_lines",
    "outcome_of",
    "passed_text",
    "problem_of",
    "report_line",
]

MAX_PASSED_TEXT_CHARS: Final = 512
MAX_PROBLEM_CODE_CHARS: Final = 128

# Which command answers with what (09 §4): the shape says where the body goes in the report (a
# run is nested under `run`; every other body's members are the result members), the model is
# the schema its route answers (spec/openapi.yaml); and how a failed exchange is followed up.
Shape = Literal["run", "runs", "inspection", "reconcile", "merged"]
FollowUp = Literal["read", "start", "run", "operator"]


@dataclass(frozen=True, slots=True)
class _Spec:
    shape: Shape
    model: type[BaseModel]
    follow_up: FollowUp


SPECS: Final[Mapping[str, _Spec]] = {
    "workflow": _Spec("merged", WorkflowInfo, "read"),
    "start": _Spec("run", RunStatus, "start"),
    "status": _Spec("run", RunStatus, "read"),
    "list": _Spec("runs", RunList, "read"),
    "inspect": _Spec("inspection", RunInspection, "read"),
    "attempts": _Spec("merged", AttemptPage, "read"),
    "cancel": _Spec("run", RunStatus, "run"),
    "retry-same": _Spec("run", RunStatus, "run"),
    "reconcile": _Spec("reconcile", ReconcileResult, "run"),
    "doctor": _Spec("merged", Doctor, "read"),
    "restore-hold": _Spec("merged", HoldState, "operator"),
    "release-restore-hold": _Spec("merged", HoldState, "operator"),
    "release-admission-hold": _Spec("merged", HoldState, "operator"),
    "retain": _Spec("merged", RetentionResult, "operator"),
}

# The advice that follows a failed exchange (09 §4: inspect before retrying what changes state).
_FOLLOW_UP: Final[Mapping[FollowUp, str]] = {
    "read": "Check that the service is running and reachable at `--url`, then repeat the command.",
    "start": (
        "Repeat the command with the same `--key-file` and the same input: the same key never "
        "admits a second run."
    ),
    "run": (
        "Inspect the run with `coordinatorctl inspect --run` before repeating the command: it "
        "may already have taken effect."
    ),
    "operator": (
        "Check the state with `coordinatorctl doctor` before repeating the command: it may "
        "already have taken effect."
    ),
}
_PROBLEM_DEFAULT_HINT: Final = (
    "Read the message, correct the request or the state it names, and try again."
)

# --------------------------------------------------------------------------------------------
# The outcome: the exit class comes from the HTTP answer (02 §3), not from the catalogue.


@dataclass
class RemoteOutcome(Outcome):
    """An Outcome whose exit code is fixed by the outcome mapping of 09 §4 when set."""

    forced_exit: int | None = None
    # The process's exit code when it is none of the report's classes (130 for an interrupted
    # watch, remote/watch.py); the report itself follows `forced_exit`.
    process_exit: int | None = None

    @property
    def exit_code(self) -> int:
        if self.process_exit is not None:
            return self.process_exit
        if self.forced_exit is not None:
            return self.forced_exit
        return super().exit_code

    def envelope(self) -> dict[str, Any]:
        if self.process_exit is not None:
            return replace(self, process_exit=None).envelope()
        return super().envelope()


def report_line(command: str, status: str, result: Mapping[str, Any]) -> str:
    """One successful report as one JSON line (`--format jsonl`)."""
    envelope = RemoteOutcome(command, status=status, result=result, forced_exit=0).envelope()
    return json.dumps(envelope, ensure_ascii=False, separators=(",", ":")) + "\n"


def list_lines(outcome: Outcome) -> str:
    """`list --format jsonl`: one report line per run of the page (`run`, and the page's
    `nextCursor`); a page without runs is the one report of `--format json`."""
    result = outcome.result
    assert result is not None
    runs = result["runs"]
    if not runs:
        return report_line(outcome.command, outcome.status, result)
    cursor = result["nextCursor"]
    return "".join(
        report_line(outcome.command, outcome.status, {"run": run, "nextCursor": cursor})
        for run in runs
    )


# --------------------------------------------------------------------------------------------
# The outcome mapping of 09 §4.

_FAILURE_MESSAGES: Final[Mapping[str, str]] = {
    "unreachable": "The service could not be reached.",
    "tls": (
        "The service's TLS certificate could not be verified: it is not signed by an authority"
        " this machine trusts, or it does not name the host of --url."
    ),
    "timeout": "The service did not answer within the time limit.",
    "oversize": "The service's answer is larger than 1,048,576 bytes.",
    "invalid": "The service's answer is not a valid HTTP answer of the service API.",
    "redirect": "The service answered with a redirect, which is never followed.",
    "json": "The service's answer is not strict JSON.",
    "shape": "The service's answer does not have the documented shape.",
    "status": "The service answered with an undocumented success status.",
    "failed": "The service failed and answered without a valid problem body.",
}


def passed_text(text: str) -> str:
    """Remote text shown to the user: control, format and separator characters removed,
    whitespace collapsed, at most 512 characters."""
    kept = "".join(
        " " if ch.isspace() else ch
        for ch in text
        if unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")
        or ch in "\t\n\r"
    )
    collapsed = " ".join(kept.split())
    if len(collapsed) > MAX_PASSED_TEXT_CHARS:
        collapsed = collapsed[: MAX_PASSED_TEXT_CHARS - 1].rstrip() + "…"
    return collapsed


@dataclass(frozen=True, slots=True)
class RemoteProblem:
    code: str
    detail: str
    suggested_action: str | None
    reason: str | None
    violations: tuple[Violation, ...] = ()


def problem_of(answer: RemoteAnswer) -> RemoteProblem | None:
    """The problem body of 06 §3, or None unless the answer carries a valid one: strict JSON that
    the Problem model accepts, whose `status` is the answer's and whose code is at most 128
    characters. A `reason` that is not a word of BlockReason (one this build does not know)
    drops the reason, not the problem."""
    from coordinator_core.values import StrictJsonError, parse_strict_json

    if answer.media_type != "application/problem+json":
        return None
    try:
        body = parse_strict_json(answer.body)
    except (StrictJsonError, ValueError):
        return None
    if not isinstance(body, dict):
        return None
    problem = answer_of(Problem, answer.body)
    if problem is None and "reason" in body:
        without = {name: value for name, value in body.items() if name != "reason"}
        problem = answer_of(Problem, json.dumps(without).encode())
    if (
        problem is None
        or problem.status != answer.status
        or len(problem.code) > MAX_PROBLEM_CODE_CHARS
    ):
        return None
    action = problem.suggested_action
    return RemoteProblem(
        code=problem.code,
        detail=passed_text(problem.detail),
        suggested_action=passed_text(action) if action is not None else None,
        reason=problem.reason.value if problem.reason is not None else None,
        violations=tuple(problem.violations or ()),
    )


TLS_TRUST_HINT: Final = (
    "Trust the authority that signed the service's certificate: add it to the system trust"
    " store, or point SSL_CERT_FILE (a PEM file) or SSL_CERT_DIR at it; and give --url the"
    " host name the certificate names. Nothing was sent."
)


def _unavailable(command: str, kind: str) -> RemoteOutcome:
    hint = TLS_TRUST_HINT if kind == "tls" else _FOLLOW_UP[SPECS[command].follow_up]
    return RemoteOutcome(
        command,
        [
            Diagnostic(
                "coordinator.command.service-unavailable",
                path="",
                message=_FAILURE_MESSAGES[kind],
                hint=hint,
            )
        ],
        forced_exit=3,
    )


def _refusal(command: str, answer: RemoteAnswer) -> RemoteOutcome:
    server_failure = answer.status >= 500
    problem = problem_of(answer)
    if problem is None:
        if server_failure:
            return _unavailable(command, "failed")
        return RemoteOutcome(
            command, [Diagnostic("coordinator.command.service-refused", path="")], forced_exit=1
        )
    if problem.suggested_action:
        hint = problem.suggested_action
    elif server_failure:
        hint = _FOLLOW_UP[SPECS[command].follow_up]
    elif problem.code in _catalogued():
        hint = entry(problem.code).hint
    else:
        hint = _PROBLEM_DEFAULT_HINT
    message = problem.detail or None
    if message is None and problem.code in _catalogued():
        message = entry(problem.code).title
    message = message or "The service refused the request."
    if problem.reason is not None:
        message += f" Blocked by: {problem.reason}."
    diagnostics = [Diagnostic(problem.code, path="", message=message, hint=hint, severity="error")]
    diagnostics += _violation_diagnostics(problem, hint)
    outcome = RemoteOutcome(command, diagnostics, forced_exit=3 if server_failure else 1)
    if problem.reason is not None:
        # 06 §11.6: the first failing condition of retry-same / reconcile, a closed word.
        outcome.result = {"blockedBy": problem.reason}
    if problem.violations:
        outcome.result = {
            **(outcome.result or {}),
            "violations": [
                item.model_dump(mode="json", by_alias=True, exclude_none=True)
                for item in problem.violations
            ],
        }
    return outcome


# What fails, by the code of a problem whose `violations` say where.
_SUBJECTS: Final[Mapping[str, str]] = {"coordinator.definition.input": "The run input"}


def _violation_diagnostics(problem: RemoteProblem, hint: str) -> list[Diagnostic]:
    """One diagnostic per place a problem's `violations` name, at that place (its `path` is
    the pointer into the input or the body): the keyword and member names, never a value."""
    from coordinator_core.jsonschema.violations import Violation as Place

    subject = _SUBJECTS.get(problem.code, "The request body")
    found = []
    for item in problem.violations:
        place = Place(
            passed_text(item.path),
            passed_text(item.keyword),
            tuple(passed_text(member.root) for member in item.members or ()),
        )
        message = place.sentence(subject)
        found.append(
            Diagnostic(
                problem.code,
                path=place.path,
                message=message,
                hint=hint,
                severity="error",
            )
        )
    return found


def _catalogued() -> Mapping[str, Any]:
    from coordinator_core.errors import catalogue

    return catalogue()


def _shape_result(
    spec: _Spec, body: object, data: bytes
) -> tuple[dict[str, Any], BaseModel] | None:
    """The envelope members of a success answer (02 §3, 09 §4) and the answer read as the
    command's model, or None if the body is not one. The members are the body as received (a
    timestamp keeps the service's text); the model's aliases are camelCase and none is an
    envelope member, so a merged body cannot replace one."""
    if not isinstance(body, dict):
        return None
    typed = answer_of(spec.model, data)
    if typed is None:
        return None
    return ({"run": body} if spec.shape == "run" else body), typed


def outcome_of(
    command: str, answer: RemoteAnswer | Failure, *, stdout_is_terminal: bool
) -> Outcome:
    """09 §4's mapping of one answer to the command's outcome."""
    from coordinator_core.values import StrictJsonError, parse_strict_json

    if isinstance(answer, str):
        return _unavailable(command, answer)
    if answer.status >= 400:
        return _refusal(command, answer)
    if not 200 <= answer.status < 300:
        return _unavailable(command, "invalid")
    status_word = "completed"
    if command == "start":
        if answer.status not in (200, 201):
            return _unavailable(command, "status")
        status_word = "admitted" if answer.status == 201 else "replayed"
    if answer.media_type != "application/json" and not (
        answer.media_type.startswith("application/") and answer.media_type.endswith("+json")
    ):
        return _unavailable(command, "invalid")
    try:
        body = parse_strict_json(answer.body)
    except (StrictJsonError, ValueError):
        return _unavailable(command, "json")
    shaped = _shape_result(SPECS[command], body, answer.body)
    if shaped is None:
        return _unavailable(command, "shape")
    result, typed = shaped
    outcome = RemoteOutcome(command, status=status_word, result=result, forced_exit=0)
    from coordinatorctl.remote.text import render_text

    outcome.text = render_text(command, status_word, typed, terminal=stdout_is_terminal)
    return outcome
