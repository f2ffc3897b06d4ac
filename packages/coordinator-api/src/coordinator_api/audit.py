"""The audit bracket around every `/v1` request (06 §4, 07 §11).

A handler opens `Audited(journal, AuditRequest(...))` once the requester is known (after the
access token, the event signature or the completion secret), adds what it learns (`note`), and
then either calls `begin()` right before its service calls, or hands its one service call to
`act`: the request entry is then written before anything can change, with the run and reason
references known by then (for a command, queued at once and made durable by the barrier of the
command's first commit, in that transaction's fsync: `commits_after`). Leaving the bracket
writes the response entry: `accepted` on success, `refused` with the code on a 4xx problem,
`unknown` on a 5xx or an unexpected failure. A refusal raised before `begin()` writes both
entries then, so that every request past authentication is journaled. `act` runs the request
entry, the service call and its response entry in one worker thread: an append that waits for
its fsync blocks, and one hop off the event loop instead of three keeps a command's answer from
queuing three times behind the worker loops; a command's two entries and its transaction's own
then take two fsyncs, not three.

A failed request entry answers `503 coordinator.command.audit-unavailable` (nothing changed); a
failed response entry after `begin()` answers `503 coordinator.command.audit-response-unavailable`
(the action may have completed).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar
from uuid import UUID

from coordinator_api.problems import INTERNAL_ERROR, ApiProblem, status_of
from coordinator_core.shell.service import (
    AuditJournal,
    AuditOutcome,
    AuditRequest,
    AuditResponse,
    AuditUnavailable,
    ServiceRefusal,
    commits_after,
    durable,
)

__all__ = ["Audited"]

T = TypeVar("T")

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
        self._answered = False  # the response entry is written (`act`)

    def note(self, **changes: Any) -> None:
        """Add members of the request entry learnt while checking the request."""
        if self._correlation is not None:
            raise RuntimeError("the request entry is already written")
        self._entry = dataclasses.replace(self._entry, **changes)

    async def begin(self) -> None:
        """Write the request entry; nothing may change before this returns."""
        entry = self._entry
        if durable(entry.action):
            self._correlation = await asyncio.to_thread(self._request, entry)
        else:
            self._correlation = self._request(entry)

    def _request(self, entry: AuditRequest) -> str:
        try:
            return self._journal.request(entry)
        except AuditUnavailable:
            raise ApiProblem("coordinator.command.audit-unavailable") from None

    async def act(
        self,
        call: Callable[..., T],
        /,
        *arguments: Any,
        names_run: Callable[[T], UUID] | None = None,
    ) -> T:
        """`begin()`, then `call(*arguments)` (the service's action, which blocks) and, when it
        answers or refuses, the response entry: for a command, all three in one worker thread;
        for a read, the request entry is queued here and the call alone runs in the thread.
        `names_run` gives the run the response entry names from what the call answered (an
        event admission's new or replayed run)."""
        entry = self._entry
        if not durable(entry.action):
            await self.begin()
            result = await asyncio.to_thread(call, *arguments)
            if names_run is not None:
                self._admitted_run = names_run(result)
            return result
        return await asyncio.to_thread(self._act, call, arguments, names_run)

    def _act(
        self,
        call: Callable[..., T],
        arguments: tuple[Any, ...],
        names_run: Callable[[T], UUID] | None,
    ) -> T:
        try:
            self._correlation, barrier = self._journal.request_until_commit(self._entry)
        except AuditUnavailable:
            raise ApiProblem("coordinator.command.audit-unavailable") from None
        try:
            with commits_after(barrier):
                result = call(*arguments)
        except ServiceRefusal as refusal:
            if refusal.code not in _AUDIT_FAILURES:
                outcome: AuditOutcome = "refused" if status_of(refusal.code) < 500 else "unknown"
                self._respond(outcome, refusal.code, began=True)
            raise
        if names_run is not None:
            self._admitted_run = names_run(result)
        self._respond("accepted", None, began=True)
        return result

    def _respond(self, outcome: AuditOutcome, code: str | None, *, began: bool) -> None:
        assert self._correlation is not None
        self._answered = True
        response = AuditResponse(
            action=self._entry.action, outcome=outcome, code=code, run_id=self._admitted_run
        )
        try:
            self._journal.response(self._correlation, response)
        except AuditUnavailable:
            failure = (
                "coordinator.command.audit-response-unavailable"
                if began
                else "coordinator.command.audit-unavailable"
            )
            raise ApiProblem(failure) from None

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
        if self._answered:
            return  # `act` wrote it
        began = self._correlation is not None
        if not began:
            await self.begin()
        if durable(self._entry.action):
            await asyncio.to_thread(self._respond, outcome, code, began=began)
        else:
            self._respond(outcome, code, began=began)
