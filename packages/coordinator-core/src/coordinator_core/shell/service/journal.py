"""The audit journal around every service action (06 §4, 07 §11): the entries' raw values,
the `AuditJournal` protocol, and `WriterJournal` over the process's `AuditWriter`.

`WriterJournal` turns the raw values of `AuditRequest`/`AuditResponse` into the keyed
references of 07 §11 (`actorRef` from the owner commitment of `(iss, sub)`, `runRef`,
`reasonRef`, `sourceRef`, `eventRef`, `connectionRef`, `requestRef`) and appends them.
An append that waits for stable storage blocks on the fsync, so the API calls it off the event
loop (`durable`: every action but the reads of 07 §7.7 item 5, whose lines are queued).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable
from uuid import UUID

from coordinator_core.errors import CoordinatorError, catalogue
from coordinator_core.shell.audit import (
    READ_ACTIONS,
    ApiAction,
    AuditEntry,
    AuditReferences,
    AuditWriter,
    ResponseOutcome,
    api_request,
    event_request,
    new_correlation,
    response,
    review_completion_request,
)
from coordinator_core.shell.sealing import AdmissionKey
from coordinator_core.shell.service.model import INTERNAL_ERROR, Caller

__all__ = [
    "AuditAction",
    "AuditJournal",
    "AuditOutcome",
    "AuditRequest",
    "AuditResponse",
    "AuditUnavailable",
    "WriterJournal",
    "durable",
]


AuditAction = ApiAction | Literal["event-admit", "review-completion"]
"""What the service journals: the API actions of 07 §11, event admissions and review
completions."""
AuditOutcome = ResponseOutcome


@dataclass(frozen=True, slots=True)
class AuditRequest:
    """The raw values of a request entry; the journal turns them into keyed references.

    API actions: `caller` (always; → actorRef from the owner commitment of `(iss, sub)`),
    `run_id` (→ runRef) and `reason` (→ reasonRef) when the request has them.
    `event-admit`: `source` (event source name → sourceRef) and `event_id` (ce-id → eventRef),
    always. `review-completion`: `connection` (→ connectionRef) and `request_id`
    (→ requestRef), always.
    """

    action: AuditAction
    caller: Caller | None = None
    run_id: UUID | None = None
    reason: str | None = None
    source: str | None = None
    event_id: str | None = None
    connection: str | None = None
    request_id: UUID | None = None


@dataclass(frozen=True, slots=True)
class AuditResponse:
    action: AuditAction
    outcome: AuditOutcome
    code: str | None = None
    run_id: UUID | None = None  # events: the admitted run


class AuditUnavailable(Exception):
    """The journal could not append (07 §11: the writer then refuses every later append)."""


def durable(action: AuditAction) -> bool:
    """Whether the entries of `action` are on stable storage when their append returns (every
    action but an API read, 07 §7.7 item 5): such an append blocks on the fsync."""
    return action not in READ_ACTIONS


@runtime_checkable
class AuditJournal(Protocol):
    """Request and response entries around every `/v1` request (06 §4, 07 §11). An append
    returns once its line is on stable storage when its action is `durable` (it blocks: call
    it off the event loop), at once otherwise."""

    def request(self, entry: AuditRequest) -> str:
        """Append a request entry and return its correlation id; raise AuditUnavailable."""
        ...

    def request_until_commit(self, entry: AuditRequest) -> tuple[str, Callable[[], None]]:
        """Queue the request entry of a `durable` action without waiting for it: its
        correlation id and the barrier that returns once the entry is on stable storage (or
        raises `coordinator.command.audit-unavailable`, which rolls back the transaction it
        guards). The action runs inside `commits_after(barrier)`, so that its first commit
        makes the entry durable first, in the same fsync as its own entries; the response
        entry, appended after, covers an action that committed nothing."""
        ...

    def response(self, correlation: str, entry: AuditResponse) -> None:
        """Append the response entry paired with `correlation`; raise AuditUnavailable."""
        ...


class WriterJournal:
    """`AuditJournal` backed by an `AuditWriter`."""

    def __init__(
        self,
        writer: AuditWriter,
        references: AuditReferences,
        admission_key: AdmissionKey,
        database_id: str,
    ) -> None:
        self._writer = writer
        self._references = references
        self._admission_key = admission_key
        self._database_id = database_id

    @property
    def ready(self) -> bool:
        return self._writer.ready

    def _request_entry(self, correlation: str, entry: AuditRequest) -> AuditEntry:
        refs = self._references
        if entry.action == "event-admit":
            assert entry.source is not None and entry.event_id is not None
            return event_request(correlation, refs.source(entry.source), refs.event(entry.event_id))
        if entry.action == "review-completion":
            assert entry.connection is not None and entry.request_id is not None
            return review_completion_request(
                correlation, refs.connection(entry.connection), refs.request(str(entry.request_id))
            )
        assert entry.caller is not None
        owner = self._admission_key.owner_api(
            self._database_id, entry.caller.issuer, entry.caller.subject
        )
        return api_request(
            correlation,
            entry.action,
            refs.actor(owner),
            run_ref=refs.run(str(entry.run_id)) if entry.run_id is not None else None,
            reason_ref=refs.reason(entry.reason) if entry.reason is not None else None,
        )

    def _append(self, action: AuditAction, entry: AuditEntry) -> None:
        try:
            self._writer.append(entry, wait=durable(action))
        except CoordinatorError as error:
            raise AuditUnavailable from error

    def request(self, entry: AuditRequest) -> str:
        correlation = new_correlation()
        self._append(entry.action, self._request_entry(correlation, entry))
        return correlation

    def request_until_commit(self, entry: AuditRequest) -> tuple[str, Callable[[], None]]:
        correlation = new_correlation()
        try:
            sequence = self._writer.queue_all((self._request_entry(correlation, entry),))
        except CoordinatorError as error:
            raise AuditUnavailable from error
        assert sequence is not None
        return correlation, functools.partial(self._writer.durable, sequence)

    def response(self, correlation: str, entry: AuditResponse) -> None:
        code = entry.code
        if code is not None and code not in catalogue():
            code = INTERNAL_ERROR
        run_ref = self._references.run(str(entry.run_id)) if entry.run_id is not None else None
        record = response(correlation, entry.action, entry.outcome, code=code, run_ref=run_ref)
        self._append(entry.action, record)
