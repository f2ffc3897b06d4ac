"""The audit bracket around every `/v1` request (06 §4, 07 §11).

A handler opens `Audited(journal, AuditRequest(...))` once the requester is known (after the
access token, the event signature or the completion secret), adds what it learns (`note`), and
calls `begin()` right before the service call: the request entry is then written before anything
can change, with the run and reason references known by then. Leaving the bracket writes the
response entry: `accepted` on success, `refused` with the code on a 4xx problem, `unknown` on a
5xx or an unexpected failure. A refusal raised before `begin()` writes both entries then, so that
every request past authentication is journaled.

A failed request entry answers `503 coordinator.command.audit-unavailable` (nothing changed); a
failed response entry after `begin()` answers `503 coordinator.command.audit-response-unavailable`
(the action may have completed).
"""

from __future__ import annotations

import dataclasses
from types import TracebackType
from typing import Any
from uuid import UUID

from coordinator_api.problems import INTERNAL_ERROR, ApiProblem, status_of
from coordinator_core.shell.service import (
    AuditJournal,
    AuditOutcome,
    AuditRequest,
    AuditResponse,
    AuditUnavailable,
    ServiceRefusal,
)

__all__ = ["Audited"]

_AUDIT_FAILURES = frozenset(
    {"coordinator.command.audit-unavailable", "coordinator.command.audit-response-unavailable"}
)


class Audited:
    """An async context manager bracketing one request with its two audit entries."""

    def __init__(self, journal: AuditJournal, entry: AuditRequest) -> None:
        self._journal = journal
        self._entry = entry
        self._correlation: str | None = None
        self._admitted_run: UUID | None = None

    def note(self, **changes: Any) -> None:
        """Add members of the request entry learnt while checking the request."""
        if self._correlation is not None:
            raise RuntimeError("the request entry is already written")
        self._entry = dataclasses.replace(self._entry, **changes)

    def admitted(self, run_id: UUID) -> None:
        """Events: the run the response entry names."""
        self._admitted_run = run_id

    async def begin(self) -> None:
        """Write the request entry; nothing may change before this returns."""
        try:
            self._correlation = await self._journal.request(self._entry)
        except AuditUnavailable:
            raise ApiProblem("coordinator.command.audit-unavailable") from None

    async def __aenter__(self) -> Audited:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        outcome: AuditOutcome
        code: str | None = None
        if error is None:
            outcome = "accepted"
        elif isinstance(error, ApiProblem | ServiceRefusal):
            code = error.code
            if code in _AUDIT_FAILURES:
                return  # the journal is the thing that failed
            outcome = "refused" if status_of(code) < 500 else "unknown"
        elif isinstance(error, Exception):
            outcome, code = "unknown", INTERNAL_ERROR
        else:
            return  # cancellation and interpreter exits: leave the entry unwritten
        began = self._correlation is not None
        if not began:
            await self.begin()
        assert self._correlation is not None
        response = AuditResponse(
            action=self._entry.action, outcome=outcome, code=code, run_id=self._admitted_run
        )
        try:
            await self._journal.response(self._correlation, response)
        except AuditUnavailable:
            failure = (
                "coordinator.command.audit-response-unavailable"
                if began
                else "coordinator.command.audit-unavailable"
            )
            raise ApiProblem(failure) from None
