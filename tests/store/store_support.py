"""Builders shared by the store conformance suite: the deployment identity, a store location
that knows how to migrate/apply/open/tamper, admissions, and small stand-in transitions.

The transitions here are deliberately tiny stand-ins for the engine (the suite tests the store's
rules, not step semantics): they change exactly the columns a real transition would.
"""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from coordinator_core.shell.store import (
    ActivationRequest,
    ActivationRow,
    Claim,
    Decide,
    DeploymentIdentity,
    MigrationResult,
    NewRun,
    Recover,
    Recovery,
    RunRow,
    RunSnapshot,
    RunWrite,
    StepRow,
    Store,
    apply_activation,
    migrate,
)

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
DATABASE_ID = "store-suite"
PACKAGE = "sha256:" + "1" * 64
REVISION = "sha256:" + "2" * 64
DEFINITION = "sha256:" + "3" * 64
BINDING = "sha256:" + "4" * 64
OWNER = "0" * 64
IDENTITY = DeploymentIdentity(
    database_id=DATABASE_ID,
    admission_key_commitment="a" * 64,
    state_key_commitments={1: "b" * 64},
    active_state_key=1,
    package_digest=PACKAGE,
)
ACTIVATION = ActivationRequest(PACKAGE, "wf", REVISION, DEFINITION)


def commitment(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


@dataclass
class Backend:
    """A store location under test and the deployment commands against it."""

    kind: str
    url: str
    namespace: str | None
    path: Path | None

    def migrate(
        self, identity: DeploymentIdentity = IDENTITY, now: datetime = T0
    ) -> MigrationResult:
        return migrate(self.url, identity, namespace=self.namespace, now=now)

    def apply(
        self,
        activation: ActivationRequest = ACTIVATION,
        identity: DeploymentIdentity = IDENTITY,
        bindings_ok: Callable[[frozenset[tuple[str, str]]], bool] = lambda _pairs: True,
    ) -> ActivationRow:
        return apply_activation(
            self.url, identity, activation, bindings_ok=bindings_ok, namespace=self.namespace
        )

    def open(self, identity: DeploymentIdentity = IDENTITY, **options: Any) -> Store:
        return Store.open(self.url, identity, namespace=self.namespace, **options)

    def execute(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Raw SQL on the store, outside the store's code (to tamper or to look)."""
        if self.kind == "sqlite":
            assert self.path is not None
            with sqlite3.connect(self.path) as lite:
                rows = lite.execute(sql.replace("%s", "?"), params).fetchall()
            lite.close()
            return rows
        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute(f'SET search_path TO "{self.namespace}"')
            cursor = connection.execute(sql.encode(), params)
            return cursor.fetchall() if cursor.description else []


def with_user(url: str, user: str) -> str:
    """`url` connecting as `user` (trust authentication in the test cluster)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, f"{user}@{host}", parts.path, parts.query, parts.fragment))


def start_step(
    run_id: uuid.UUID,
    now: datetime = T0,
    *,
    step: str = "start",
    type: str = "call",
    pure: bool = False,
) -> StepRow:
    if type == "call":
        return StepRow.new(
            run_id,
            step,
            "call",
            entered_at=now,
            due_at=now,
            operation="op/v1",
            effect_kind="mutation",
        )
    return StepRow.new(run_id, step, type, entered_at=now, due_at=now, pure=pure)  # type: ignore[arg-type]


def admission(
    key: object,
    now: datetime = T0,
    *,
    input_digest: str | None = None,
    owner: str = OWNER,
    step_type: str = "call",
    deadline_seconds: int = 3600,
    expected_revision: str | None = REVISION,
    **changes: Any,
) -> NewRun:
    run_id = uuid.uuid4()
    values: dict[str, Any] = {
        "run_id": run_id,
        "start_identity": commitment("start", owner, key),
        "input_digest": input_digest or commitment("input", key),
        "owner": owner,
        "origin": "api",
        "trigger": None,
        "workflow_id": "wf",
        "workflow_version": "1",
        "revision": REVISION,
        "definition_digest": DEFINITION,
        "binding_digest": BINDING,
        "snapshot": b"sealed-snapshot",
        "input": b"sealed-input",
        "policy": {"retryDelaysMs": [100, 500], "observationFloorSeconds": 30},
        "deadline_seconds": deadline_seconds,
        "first_step": start_step(
            run_id, now, type=step_type, pure=step_type in ("choose", "finish")
        ),
        "bindings_ok": lambda _pairs: True,
        "expected_revision": expected_revision,
    }
    first_step = changes.pop("first_step", None)
    if callable(first_step):
        values["first_step"] = first_step(run_id)
    return NewRun(**(values | changes))


def admit(store: Store, key: object, now: datetime = T0, **options: Any) -> RunRow:
    return store.admit(admission(key, now, **options), now).run


def no_recovery(_snapshot: RunSnapshot, _kind: Recovery) -> RunWrite | None:
    return None


def lease_record(now: datetime) -> Decide:
    """The engine's T2 in its simplest form: the claimed record is leased for `Work`."""

    def decide(snapshot: RunSnapshot) -> RunWrite:
        record = snapshot.current
        leased = replace(
            record,
            state="leased",
            attempt=record.attempt + 1,
            claims=record.claims + 1,
            attempt_started_at=now,
            due_at=None,
            dispatched=False,
            awaiting="work",
        )
        return RunWrite(snapshot.run, (leased,))

    return decide


def claim(
    store: Store,
    now: datetime = T0,
    worker: str = "worker-1",
    *,
    recover: Recover | None = None,
    decide: Decide | None = None,
    **options: Any,
) -> Claim | None:
    """A worker's tick in its store part: the sweep (`recover`, by default one that recovers
    nothing), then one claim whose decision is `decide` (by default `lease_record`)."""
    store.sweep(worker, now, recover or no_recovery, **options)
    written = store.claim_due_step(worker, now, decide=decide or lease_record(now), **options)
    return None if written is None else written.claim


def deliver_and_finish(now: datetime) -> Decide:
    """The current record is delivered and the run finished (T14-like)."""

    def decide(snapshot: RunSnapshot) -> RunWrite:
        record = replace(
            snapshot.current, state="delivered", route_kind="next", finished_at=now, awaiting=None
        )
        run = replace(snapshot.run, status="finished", outcome="done", completed_at=now)
        return RunWrite(run, (record,))

    return decide


def fail_run(now: datetime, code: str = "product-refused") -> Decide:
    """The current record is dead-lettered and the run failed (T6/T10-like)."""

    def decide(snapshot: RunSnapshot) -> RunWrite:
        record = replace(
            snapshot.current, state="dead-lettered", failure_code=code, finished_at=now
        )
        run = replace(snapshot.run, status="failed", failure_code=code, completed_at=now)
        return RunWrite(run, (record,))

    return decide


def stand_in_recover(now: datetime) -> Callable[[RunSnapshot, Recovery], RunWrite | None]:
    """T28/T29 and T26 in their simplest form."""

    def recover(snapshot: RunSnapshot, kind: Recovery) -> RunWrite | None:
        record = snapshot.current
        if kind == "deadline-passed":
            expired = replace(
                record, state="expired", failure_code="deadline-reached", finished_at=now
            )
            run = replace(
                snapshot.run, status="expired", failure_code="deadline-reached", completed_at=now
            )
            return RunWrite(run, (expired,))
        if record.dispatched or record.uncertain:
            unknown = replace(
                record, state="unknown", uncertain=True, failure_code="transport-uncertain"
            )
            return RunWrite(replace(snapshot.run, status="attention"), (unknown,))
        return RunWrite(
            snapshot.run, (replace(record, state="pending", due_at=now, awaiting=None),)
        )

    return recover


def claim_all_in_process(url: str, namespace: str, worker: str, barrier: Any, results: Any) -> None:
    """A worker process: open the store, wait for the other, claim until idle, report."""
    try:
        store = Store.open(url, IDENTITY, namespace=namespace, pool_size=1)
        claimed: list[tuple[str, str]] = []
        try:
            barrier.wait(timeout=30)
            while (leased := claim(store, T0 + SECOND, worker=worker)) is not None:
                claimed.append((str(leased.run_id), leased.step))
        finally:
            store.close()
        results.put(claimed)
    except BaseException as error:  # reported to the parent test, never swallowed
        results.put(repr(error))
        raise
