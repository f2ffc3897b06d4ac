"""The outcome mapping of the remote commands (09 §4): each command's answer shape and follow-up
advice, and one answer (or failed exchange) to the command's outcome, whose exit code comes from
that mapping (02 §3), not from the catalogue's class of a code the service chose.

A problem's `detail` and `suggestedAction` are the service's fixed sentences and are passed
through, but stripped of control and format characters and capped in length.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from coordinator_core.errors import Diagnostic, entry
from coordinatorctl.remote_exchange import Failure, RemoteAnswer
from coordinatorctl.report import RESERVED_MEMBERS, Outcome

__all__ = [
    "BLOCK_REASONS",
    "MAX_PASSED_TEXT_CHARS",
    "SPECS",
    "FollowUp",
    "RemoteOutcome",
    "RemoteProblem",
    "Shape",
    "outcome_of",
    "passed_text",
    "problem_of",
]

MAX_PASSED_TEXT_CHARS: Final = 512

BLOCK_REASONS: Final = frozenset(
    {
        "terminal",
        "not-recoverable",
        "deadline-reached",
        "receipt-expired",
        "binding-changed",
        "snapshot-incompatible",
        "cancelled",
        "payload-erased",
        "evaluation-uncertain",
        "lease-active",
        "no-receipt",
        "not-uncertain",
    }
)

# Which command answers with what (09 §4) and how a failed exchange should be followed up.
Shape = Literal["run", "runs", "inspection", "reconcile", "merged"]
FollowUp = Literal["read", "start", "run", "operator"]


@dataclass(frozen=True, slots=True)
class _Spec:
    shape: Shape
    follow_up: FollowUp


SPECS: Final[Mapping[str, _Spec]] = {
    "workflow": _Spec("merged", "read"),
    "start": _Spec("run", "start"),
    "status": _Spec("run", "read"),
    "list": _Spec("runs", "read"),
    "inspect": _Spec("inspection", "read"),
    "cancel": _Spec("run", "run"),
    "retry-same": _Spec("run", "run"),
    "reconcile": _Spec("reconcile", "run"),
    "doctor": _Spec("merged", "read"),
    "restore-hold": _Spec("merged", "operator"),
    "release-restore-hold": _Spec("merged", "operator"),
    "release-admission-hold": _Spec("merged", "operator"),
    "retain": _Spec("merged", "operator"),
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

    @property
    def exit_code(self) -> int:
        if self.forced_exit is not None:
            return self.forced_exit
        return super().exit_code


# --------------------------------------------------------------------------------------------
# The outcome mapping of 09 §4.

_FAILURE_MESSAGES: Final[Mapping[str, str]] = {
    "unreachable": "The service could not be reached.",
    "timeout": "The service did not answer within the time limit.",
    "oversize": "The service's answer is larger than 1,048,576 bytes.",
    "invalid": "The service's answer is not a valid HTTP answer of the service API.",
    "redirect": "The service answered with a redirect, which is never followed.",
    "json": "The service's answer is not strict JSON.",
    "shape": "The service's answer does not have the documented shape.",
    "status": "The service answered with an undocumented success status.",
    "failed": "The service failed and answered without a valid problem body.",
}
_PROBLEM_CODE: Final = re.compile(
    r"(?:(?:idempotency|admission)\.[a-z][a-z0-9]*(?:-[a-z0-9]+)*"
    r"|coordinator\.[a-z][a-z0-9]*(?:-[a-z0-9]+)*\.[a-z][a-z0-9]*(?:-[a-z0-9]+)*)"
)
_MEMBER_NAME: Final = re.compile(r"[a-z][A-Za-z0-9]*")


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


def problem_of(answer: RemoteAnswer) -> RemoteProblem | None:
    """The problem body of 06 §3, or None unless the answer carries a valid one."""
    from coordinator_core.values import StrictJsonError, parse_strict_json

    if answer.media_type != "application/problem+json":
        return None
    try:
        body = parse_strict_json(answer.body)
    except (StrictJsonError, ValueError):
        return None
    if not isinstance(body, dict):
        return None
    code, detail, action = body.get("code"), body.get("detail"), body.get("suggestedAction")
    status = body.get("status")
    if not (
        isinstance(code, str)
        and len(code) <= 128
        and _PROBLEM_CODE.fullmatch(code)
        and isinstance(status, int)
        and not isinstance(status, bool)
        and status == answer.status
        and isinstance(body.get("type"), str)
        and isinstance(body.get("title"), str)
        and isinstance(detail, str)
        and "suggestedAction" in body
        and (action is None or isinstance(action, str))
    ):
        return None
    reason = body.get("reason")
    return RemoteProblem(
        code=code,
        detail=passed_text(detail),
        suggested_action=passed_text(action) if isinstance(action, str) else None,
        reason=reason if isinstance(reason, str) and reason in BLOCK_REASONS else None,
    )


def _unavailable(command: str, kind: str) -> RemoteOutcome:
    return RemoteOutcome(
        command,
        [
            Diagnostic(
                "coordinator.command.service-unavailable",
                path="",
                message=_FAILURE_MESSAGES[kind],
                hint=_FOLLOW_UP[SPECS[command].follow_up],
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
    outcome = RemoteOutcome(
        command,
        [
            Diagnostic(
                problem.code,
                path="",
                message=message,
                hint=hint,
                severity="error",
            )
        ],
        forced_exit=3 if server_failure else 1,
    )
    if problem.reason is not None:
        # 06 §11.6: the first failing condition of retry-same / reconcile, a closed word.
        outcome.result = {"blockedBy": problem.reason}
    return outcome


def _catalogued() -> Mapping[str, Any]:
    from coordinator_core.errors import catalogue

    return catalogue()


def _merged_members(body: Mapping[str, Any]) -> bool:
    return all(
        isinstance(name, str) and _MEMBER_NAME.fullmatch(name) and name not in RESERVED_MEMBERS
        for name in body
    )


def _shape_result(shape: Shape, body: object) -> dict[str, Any] | None:
    """The envelope members of a success answer (02 §3, 09 §4), or None if malformed."""
    if not isinstance(body, dict):
        return None
    if shape == "run":
        return {"run": body}
    if shape == "runs":
        runs, cursor = body.get("runs"), body.get("nextCursor")
        if not isinstance(runs, list) or not all(isinstance(run, dict) for run in runs):
            return None
        if cursor is not None and not isinstance(cursor, str):
            return None
        return {"runs": runs, "nextCursor": cursor}
    if shape == "reconcile":
        result, inspection = body.get("result"), body.get("inspection")
        if not isinstance(result, str) or not isinstance(inspection, dict):
            return None
        if not isinstance(inspection.get("run"), dict):
            return None
        return {"result": result, "inspection": inspection}
    if shape == "inspection" and not isinstance(body.get("run"), dict):
        return None
    return body if _merged_members(body) else None


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
    result = _shape_result(SPECS[command].shape, body)
    if result is None:
        return _unavailable(command, "shape")
    outcome = RemoteOutcome(command, status=status_word, result=result, forced_exit=0)
    from coordinatorctl.remote_text import render_text

    outcome.text = render_text(
        SPECS[command].shape, command, status_word, result, terminal=stdout_is_terminal
    )
    return outcome
