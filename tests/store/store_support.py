"""Builders shared by the store conformance suite: the deployment identity, a store location
that knows how to migrate/apply/open/tamper, admissions, and small stand-in transitions.

The transitions here are deliberately tiny stand-ins for the engine (the suite tests the store's
rules, not step semantics): they change exactly the fields a real transition would. `changed`
and `changed_run` change a stored step or run by the names of their columns (a record field, or
`command`/`output`/`preparation_frozen` for the sealed payload; a run's state field or one of
its own), so a stand-in reads like the columns it writes. Instants are epoch milliseconds.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from support.instants import instant

from coordinator_core.engine import RunState, StepRecord, StepRoute, TimingPolicy
from coordinator_core.shell.store import (
    ActivationRequest,
    ActivationRow,
    Claim,
    Decide,
    DeploymentIdentity,
    MigrationResult,
    NewRun,
    Recover,
    RunSnapshot,
    RunWrite,
    Store,
    StoredRun,
    StoredStep,
    SweepKind,
    apply_activation,
    migrate,
)

T0 = instant(2030, 1, 1, 12, 0)
SECOND = 1000
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

    def migrate(self, identity: DeploymentIdentity = IDENTITY, now: int = T0) -> MigrationResult:
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
    now: int = T0,
    *,
    step: str = "start",
    type: str = "call",
    pure: bool = False,
) -> StoredStep:
    """A fresh `pending` start record (07 §5.1), due at `now`."""
    calls = type == "call"
    record = StepRecord(
        step=step,
        type=type,  # type: ignore[arg-type]
        state="pending",
        entered_at=now,
        pure=pure,
        due_at=now,
        operation="op/v1" if calls else None,
        effect="mutation" if calls else None,
    )
    return StoredStep(run_id, record, updated_at=now)


def admission(
    key: object,
    now: int = T0,
    *,
    input_digest: str | None = None,
    owner: str = OWNER,
    step_type: str = "call",
    deadline_seconds: int = 3600,
    expected_revision: str | None = REVISION,
    first_step: Callable[[uuid.UUID], StoredStep] | None = None,
    **changes: Any,
) -> NewRun:
    """An admission at `now` whose run starts at `first_step` (by default a due `start` record
    of `step_type`); `changes` change the run by its column names (`changed_run`)."""
    run_id = uuid.uuid4()
    first = (
        first_step(run_id)
        if first_step is not None
        else start_step(run_id, now, type=step_type, pure=step_type in ("choose", "finish"))
    )
    state = RunState(
        status="running",
        current_step=first.record.step,
        admitted_at=now,
        deadline_at=now + deadline_seconds * SECOND,
        input=None,
        policy=TimingPolicy(retry_delays_ms=(100, 500), observation_floor_seconds=30),
    )
    run = StoredRun(
        run_id=run_id,
        start_identity=commitment("start", owner, key),
        input_digest=input_digest or commitment("input", key),
        owner=owner,
        origin="api",
        trigger=None,
        workflow_id="wf",
        workflow_version="1",
        revision=REVISION,
        definition_digest=DEFINITION,
        binding_digest=BINDING,
        state=state,
        snapshot=b"sealed-snapshot",
        input=b"sealed-input",
        updated_at=now,
    )
    bindings_ok = changes.pop("bindings_ok", lambda _pairs: True)
    input_problem = changes.pop("input_problem", None)
    return NewRun(
        run=changed_run(run, **changes),
        steps=(first,),
        bindings_ok=bindings_ok,
        expected_revision=expected_revision,
        input_problem=input_problem,
    )


_RECORD_FIELDS = frozenset(field.name for field in fields(StepRecord))
_STEP_OWN = frozenset(("command", "output", "preparation_frozen", "lease", "updated_at", "run_id"))
_RUN_OWN = frozenset(field.name for field in fields(StoredRun)) - {"state"}


def changed(stored: StoredStep, **columns: Any) -> StoredStep:
    """`stored` with fields changed by the names of the `steps` columns: a record field, or the
    sealed `command`/`output`/`preparation_frozen`; `effect_kind` is the record's `effect`,
    `route_kind`/`route_label` its `route`."""
    own = {name: value for name, value in columns.items() if name in _STEP_OWN}
    record: dict[str, Any] = {}
    route = stored.record.route
    for name, value in columns.items():
        if name in _STEP_OWN:
            continue
        if name == "effect_kind":
            record["effect"] = value
        elif name == "route_kind":
            route = None if value is None else StepRoute(value, columns.get("route_label"))
            record["route"] = route
        elif name == "route_label":
            continue
        elif name in _RECORD_FIELDS:
            record[name] = value
        else:
            raise TypeError(f"no step column {name}")
    return replace(stored, record=replace(stored.record, **record), **own)


def changed_run(run: StoredRun, **columns: Any) -> StoredRun:
    """`run` with fields changed by the names of the `runs` columns: one of the run's own, or a
    field of its state."""
    own = {name: value for name, value in columns.items() if name in _RUN_OWN}
    state = {name: value for name, value in columns.items() if name not in _RUN_OWN}
    return replace(run, state=replace(run.state, **state), **own) if state else replace(run, **own)


def admit(store: Store, key: object, now: int = T0, **options: Any) -> StoredRun:
    return store.writes.admit(admission(key, now, **options), now).run


def no_recovery(_snapshot: RunSnapshot, _kind: SweepKind) -> RunWrite | None:
    return None


def lease_record(now: int) -> Decide:
    """The engine's T2 in its simplest form: the claimed record is leased for `Work`."""

    def decide(snapshot: RunSnapshot) -> RunWrite:
        record = snapshot.current.record
        leased = changed(
            snapshot.current,
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
    now: int = T0,
    worker: str = "worker-1",
    *,
    recover: Recover | None = None,
    decide: Decide | None = None,
    **options: Any,
) -> Claim | None:
    """A worker's tick in its store part: the sweep (`recover`, by default one that recovers
    nothing), then one claim whose decision is `decide` (by default `lease_record`)."""
    store.writes.sweep(worker, now, recover or no_recovery, **options)
    written = store.writes.claim_due_step(
        worker, now, decide=decide or lease_record(now), **options
    )
    return None if written is None else written.claim


def deliver_and_finish(now: int) -> Decide:
    """The current record is delivered and the run finished (T14-like)."""

    def decide(snapshot: RunSnapshot) -> RunWrite:
        record = changed(
            snapshot.current, state="delivered", route_kind="next", finished_at=now, awaiting=None
        )
        run = changed_run(snapshot.run, status="finished", outcome="done", completed_at=now)
        return RunWrite(run, (record,))

    return decide


def fail_run(now: int, code: str = "product-refused") -> Decide:
    """The current record is dead-lettered and the run failed (T6/T10-like)."""

    def decide(snapshot: RunSnapshot) -> RunWrite:
        record = changed(
            snapshot.current, state="dead-lettered", failure_code=code, finished_at=now
        )
        run = changed_run(snapshot.run, status="failed", failure_code=code, completed_at=now)
        return RunWrite(run, (record,))

    return decide


def stand_in_recover(now: int) -> Callable[[RunSnapshot, SweepKind], RunWrite | None]:
    """T28/T29 and T26 in their simplest form."""

    def recover(snapshot: RunSnapshot, kind: SweepKind) -> RunWrite | None:
        stored = snapshot.current
        if kind == "deadline-passed":
            expired = changed(
                stored, state="expired", failure_code="deadline-reached", finished_at=now
            )
            run = changed_run(
                snapshot.run, status="expired", failure_code="deadline-reached", completed_at=now
            )
            return RunWrite(run, (expired,))
        if stored.record.dispatched or stored.record.uncertain:
            unknown = changed(
                stored, state="unknown", uncertain=True, failure_code="transport-uncertain"
            )
            return RunWrite(changed_run(snapshot.run, status="attention"), (unknown,))
        return RunWrite(
            snapshot.run, (changed(stored, state="pending", due_at=now, awaiting=None),)
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


def client_sent(pgconn: Any, action: Callable[[], object]) -> list[list[str]]:
    """PostgreSQL: libpq's protocol trace of `pgconn` while `action` runs, the fields of each
    message the client sent (the fourth is the message's type)."""
    with tempfile.TemporaryFile() as trace:
        pgconn.trace(trace.fileno())
        try:
            action()
        finally:
            pgconn.untrace()
        os.fsync(trace.fileno())
        trace.seek(0)
        sent = [line.split("\t") for line in trace.read().decode().splitlines()]
    return [fields for fields in sent if len(fields) > 3 and fields[1] == "F"]


def frontend_messages(store: Store, action: Callable[[], object]) -> list[str]:
    """PostgreSQL: the message types the client sent while `action` ran on the connection the
    pool lends next."""
    with store.transactor.engine.connect() as conn:
        pgconn: Any = conn.connection.driver_connection.pgconn  # type: ignore[union-attr]

        def back_to_the_pool_then_act() -> None:
            conn.close()  # `action` takes this connection
            action()

        return [fields[3] for fields in client_sent(pgconn, back_to_the_pool_then_act)]
