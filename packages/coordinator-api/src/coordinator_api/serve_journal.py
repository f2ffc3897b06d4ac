"""The API's audit journal over the process's `AuditWriter` (06 §4, 07 §11).

Turns the raw values of `AuditRequest`/`AuditResponse` into the keyed references of 07 §11
(`actorRef` from the owner commitment of `(iss, sub)`, `runRef`, `reasonRef`, `sourceRef`,
`eventRef`, `connectionRef`, `requestRef`) and appends them. Appending writes and fsyncs, so it
runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio

from coordinator_api.problems import INTERNAL_ERROR
from coordinator_api.service import AuditRequest, AuditResponse, AuditUnavailable
from coordinator_core.audit import (
    AuditEntry,
    AuditReferences,
    AuditWriter,
    api_request,
    event_request,
    new_correlation,
    response,
    review_completion_request,
)
from coordinator_core.errors import CoordinatorError, catalogue
from coordinator_core.sealing import AdmissionKey

__all__ = ["WriterJournal"]


class WriterJournal:
    """`AuditJournal` (coordinator_api.service) backed by an `AuditWriter`."""

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

    def _append(self, entry: AuditEntry) -> None:
        try:
            self._writer.append(entry)
        except CoordinatorError as error:
            raise AuditUnavailable from error

    async def request(self, entry: AuditRequest) -> str:
        correlation = new_correlation()
        await asyncio.to_thread(self._append, self._request_entry(correlation, entry))
        return correlation

    async def response(self, correlation: str, entry: AuditResponse) -> None:
        code = entry.code
        if code is not None and code not in catalogue():
            code = INTERNAL_ERROR
        run_ref = self._references.run(str(entry.run_id)) if entry.run_id is not None else None
        record = response(correlation, entry.action, entry.outcome, code=code, run_ref=run_ref)
        await asyncio.to_thread(self._append, record)
