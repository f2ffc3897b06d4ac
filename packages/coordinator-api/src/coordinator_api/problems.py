"""problem+json (06 §3): the one rendering of every refusal, whoever raises it.

`detail` and `suggestedAction` are the catalogue's fixed title and hint (spec/errors.yaml), the
status is the catalogue's `http`, `title` is a fixed short title per code below. Nothing from the
request ever reaches a problem body or a log line: only the code.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

from starlette.responses import Response

from coordinator_api.limits import RETRY_AFTER_SECONDS
from coordinator_api.wire import Problem, encode, problem
from coordinator_core.errors import catalogue
from coordinator_core.jsonschema.violations import Violation
from coordinator_core.shell.service import INTERNAL_ERROR, BlockReason, ServiceRefusal

__all__ = [
    "INTERNAL_ERROR",
    "PROBLEM_MEDIA_TYPE",
    "ApiProblem",
    "problem_body",
    "problem_codes",
    "problem_headers",
    "problem_response",
    "status_of",
]

logger = logging.getLogger("coordinator_api")

PROBLEM_MEDIA_TYPE: Final = "application/problem+json"
PROBLEM_TYPE_BASE: Final = "https://id.registrystack.org/problems/registry-coordinator/"


_INTERNAL_DETAIL: Final = "The service failed unexpectedly while handling the request."
_INTERNAL_HINT: Final = (
    "Inspect the run or the state before repeating a command, and report the failure to the "
    "operator."
)

# A fixed short title per code (06 §3 `title`).
_TITLES: Final[Mapping[str, str]] = {
    "coordinator.request.invalid": "Invalid request",
    "coordinator.request.cursor-invalid": "Invalid cursor",
    "coordinator.request.wait-invalid": "Invalid wait",
    "coordinator.request.too-large": "Request too large",
    "coordinator.request.content-type-invalid": "Unsupported media type",
    "coordinator.request.not-found": "Not found",
    "coordinator.request.method-not-allowed": "Method not allowed",
    "coordinator.request.headers-too-large": "Request headers too large",
    "coordinator.request.connections-exhausted": "Too many connections",
    "coordinator.request.peer-connections-exhausted": "Too many connections from this client",
    "coordinator.access.unauthenticated": "Unauthenticated",
    "coordinator.access.denied": "Access denied",
    "coordinator.access.unavailable": "Access verification unavailable",
    "coordinator.command.start-key-invalid": "Invalid idempotency key",
    "coordinator.command.input-invalid": "Invalid input",
    "coordinator.definition.input": "Input does not match the schema",
    "coordinator.command.reason-invalid": "Invalid reason",
    "coordinator.command.retention-invalid": "Invalid retention request",
    "coordinator.command.run-absent": "Run not found",
    "coordinator.command.step-absent": "Step not found",
    "coordinator.command.workflow-absent": "Workflow not found",
    "coordinator.command.recovery-only": "Recovery-only mode",
    "coordinator.command.restore-hold": "Restore hold in place",
    "coordinator.command.restore-admissions-held": "Admissions held",
    "coordinator.command.live-binding-conflict": "Live binding conflict",
    "coordinator.command.activation-changed": "Activation changed",
    "coordinator.command.retry-refused": "Retry refused",
    "coordinator.command.reconcile-refused": "Reconcile refused",
    "coordinator.command.reconciliation-unavailable": "Reconciliation unavailable",
    "coordinator.command.reconcile-raced": "Reconcile raced",
    "coordinator.command.attestation-required": "Attestation required",
    "coordinator.command.store-unavailable": "Store unavailable",
    "coordinator.command.audit-unavailable": "Audit journal unavailable",
    "coordinator.command.audit-response-unavailable": "Audit response unavailable",
    "coordinator.event.headers-invalid": "Invalid event headers",
    "coordinator.event.body-invalid": "Invalid event body",
    "coordinator.event.signature-invalid": "Invalid event signature",
    "coordinator.event.stale": "Stale event",
    "coordinator.event.trigger-unknown": "Unknown trigger",
    "coordinator.event.type-mismatch": "Event type mismatch",
    "coordinator.event.mapping-invalid": "Event mapping failed",
    "coordinator.event.input-invalid": "Invalid event input",
    "coordinator.event.admissions-held": "Admissions held",
    "coordinator.completion.unauthenticated": "Unauthenticated completion",
    "idempotency.key-reused": "Idempotency key reused",
    "admission.revision-mismatch": "Revision mismatch",
    INTERNAL_ERROR: "Internal error",
}

_REASON_CODES: Final = frozenset(
    {"coordinator.command.retry-refused", "coordinator.command.reconcile-refused"}
)
_BEARER_CHALLENGE_CODES: Final = frozenset(
    {"coordinator.access.unauthenticated", "coordinator.completion.unauthenticated"}
)


def problem_codes() -> frozenset[str]:
    """Every code this API may answer with."""
    return frozenset(_TITLES)


def status_of(code: str) -> int:
    """The HTTP status of `code` (06 §3.1, from the catalogue); unknown codes are 500."""
    entry = catalogue().get(code)
    if entry is None or entry.http is None or code not in _TITLES:
        return 500
    return entry.http


class ApiProblem(ServiceRefusal):
    """Raised anywhere in the app to answer with the problem of `code`: a `ServiceRefusal` (so
    a `CoordinatorError`) found by the HTTP half, with the headers of its answer.

    `status_code` lets Connexion's security layer pick the most specific failure.
    """

    def __init__(
        self,
        code: str,
        *,
        reason: BlockReason | None = None,
        headers: Mapping[str, str] | None = None,
        detail: str | None = None,
        hint: str | None = None,
        violations: tuple[Violation, ...] = (),
    ) -> None:
        super().__init__(code, reason, violations=violations)
        self.headers = dict(headers or {})
        self.status_code = status_of(code)
        # A fixed sentence of a refusal class (access.REFUSAL_CLASSES) instead of the code's.
        self.detail = detail
        self.hint = hint


def problem_body(
    code: str,
    reason: BlockReason | None = None,
    *,
    detail: str | None = None,
    hint: str | None = None,
    violations: tuple[Violation, ...] = (),
) -> Problem:
    """The 06 §3 problem object of `code`; `detail` and `hint` replace the catalogue's fixed
    sentences with other fixed ones (a token refusal's class), `violations` are where a body
    or an input fails its schema."""
    status = status_of(code)
    if status == 500:
        code, detail, hint, violations = INTERNAL_ERROR, _INTERNAL_DETAIL, _INTERNAL_HINT, ()
    else:
        entry = catalogue()[code]
        detail, hint = detail or entry.title, hint or entry.hint
    remainder = code.removeprefix("coordinator.").replace(".", "/")
    return problem(
        type_uri=PROBLEM_TYPE_BASE + remainder,
        title=_TITLES[code],
        status=status,
        detail=detail,
        code=code,
        suggested_action=hint or None,
        reason=reason if code in _REASON_CODES else None,
        violations=violations,
    )


def problem_headers(code: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    headers = {"Content-Type": PROBLEM_MEDIA_TYPE}
    if code in _BEARER_CHALLENGE_CODES:
        headers["WWW-Authenticate"] = "Bearer"
    if code == "coordinator.event.admissions-held":
        headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    headers.update(extra or {})
    return headers


def problem_response(
    code: str,
    *,
    reason: BlockReason | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """A complete problem+json response (explicit Content-Type: STACK.md P1)."""
    body = problem_body(code, reason)
    if body.status >= 500:
        logger.warning("answered %s", body.code)
    return Response(
        content=encode(body),
        status_code=body.status,
        headers=problem_headers(body.code, headers),
    )
