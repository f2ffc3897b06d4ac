"""The one mapping between the store's rows and its values (`schema`: `run_of`/`run_values`,
`step_of`/`step_values`): every column of `runs` holds exactly one field of `StoredRun` or of its
`RunState`, every column of `steps` exactly one field of `StoredStep`, of its `StepRecord` or of
its `Lease`, and back; a value read from its row is the value written; and an instant column
(`UTCDateTime`) reads back exactly the milliseconds it was given, on both backends."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import fields, replace
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, insert, literal_column, select
from sqlalchemy.dialects import postgresql, sqlite
from store_support import (
    BINDING,
    DEFINITION,
    REVISION,
    SECOND,
    T0,
    admission,
    changed,
    changed_run,
    claim,
    deliver_and_finish,
    start_step,
)
from support.instants import instant

from coordinator_core.engine import RunState, StepRecord, StepRoute, TimingPolicy
from coordinator_core.engine.serial import FormatError
from coordinator_core.shell.store import (
    Claim,
    ControlRow,
    Lease,
    RunSnapshot,
    RunWrite,
    Store,
    StoredRun,
    StoredStep,
)
from coordinator_core.shell.store.dialect import Prepared, PreparedShapes, UTCDateTime
from coordinator_core.shell.store.schema import (
    RUN_IMMUTABLE,
    RUN_OWN,
    RUN_STATE_COLUMNS,
    RUNS,
    STEP_IMMUTABLE,
    STEP_LEASE,
    STEP_OWN,
    STEP_RECORD_COLUMNS,
    STEPS,
    run_of,
    run_values,
    step_of,
    step_values,
)

PG = postgresql.dialect()  # type: ignore[no-untyped-call]
LITE = sqlite.dialect()  # type: ignore[no-untyped-call]

RUN_COLUMNS = frozenset(column.name for column in RUNS.c)
STEP_COLUMNS = frozenset(column.name for column in STEPS.c)

# The engine's payload fields: the store keeps them sealed beside the engine's value (a run's
# `input`/`terminal_output`, a record's `command`/`output`), so in a stored value they are None
# and no column holds them; a run's records are the `steps` rows.
STATE_NOT_STORED = frozenset({"input", "output", "records"})
RECORD_NOT_STORED = frozenset({"command", "preparation", "output"})


def _column_of_run_field(path: str) -> str:
    """The `runs` column of a field of a stored run: the same name, its state's included."""
    return path.removeprefix("state.")


def _column_of_step_field(path: str) -> str:
    """The `steps` column of a field of a stored step (the three spelled differently, 07 §14.1:
    `effect_kind` is the record's `effect`, `route_kind`/`route_label` its `route`; the lease's
    fields are `lease_*`)."""
    renamed = {
        "record.effect": "effect_kind",
        "record.route.kind": "route_kind",
        "record.route.label": "route_label",
    }
    if path in renamed:
        return renamed[path]
    if path.startswith("lease."):
        return "lease_" + path.removeprefix("lease.")
    return path.removeprefix("record.")


# -- flattening a value into its fields ------------------------------------------------------------


def _run_fields(run: StoredRun) -> dict[str, Any]:
    """Every field a `runs` row holds, by path (`state.` for the engine's): the policy is one
    field (its document is one column)."""
    found = {field.name: getattr(run, field.name) for field in fields(run) if field.name != "state"}
    for field in fields(run.state):
        if field.name not in STATE_NOT_STORED:
            found["state." + field.name] = getattr(run.state, field.name)
    return found


def _step_fields(stored: StoredStep) -> dict[str, Any]:
    """Every field a `steps` row holds, by path (`record.`, `record.route.`, `lease.`)."""
    found = {
        field.name: getattr(stored, field.name)
        for field in fields(stored)
        if field.name not in ("record", "lease")
    }
    record = stored.record
    for field in fields(record):
        if field.name in RECORD_NOT_STORED:
            continue
        value = getattr(record, field.name)
        if field.name == "route":
            found["record.route.kind"] = None if value is None else value.kind
            found["record.route.label"] = None if value is None else value.label
        else:
            found["record." + field.name] = value
    for field in fields(Lease):
        lease = stored.lease
        found["lease." + field.name] = None if lease is None else getattr(lease, field.name)
    return found


def _put(value: Any, path: str, new: Any) -> Any:
    """`value` with the field at `path` (dotted) replaced by `new`."""
    head, _, rest = path.partition(".")
    if not rest:
        return replace(value, **{head: new})
    return replace(value, **{head: _put(getattr(value, head), rest, new)})


# -- a stored run and a stored step with every field set, and others with every field changed -----


def _stored_run(run_id: uuid.UUID) -> StoredRun:
    return StoredRun(
        run_id=run_id,
        start_identity="1" * 64,
        input_digest="2" * 64,
        owner="3" * 64,
        origin="event",
        trigger="trigger-1",
        workflow_id="wf-1",
        workflow_version="1",
        revision=REVISION,
        definition_digest=DEFINITION,
        binding_digest=BINDING,
        state=RunState(
            status="cancel-requested",
            current_step="step-1",
            admitted_at=T0 + 1,
            deadline_at=T0 + 2,
            input=None,
            policy=TimingPolicy(retry_delays_ms=(100, 500), observation_floor_seconds=30),
            cancel_mode="stopping",
            cancel_requested=True,
            restore_review=False,
            completed_at=T0 + 3,
            outcome="outcome-1",
            failure_code="code-1",
        ),
        snapshot=b"snapshot-1",
        input=b"input-1",
        terminal_output=b"output-1",
        payload_erased_at=T0 + 4,
        updated_at=T0 + 5,
        operator_action="cancel",
        operator_action_at=T0 + 6,
        operator_reason_ref="hmac-sha256:" + "a" * 64,
    )


def _other_run(run: StoredRun) -> StoredRun:
    """`run` with every field a `runs` row holds changed."""
    state = run.state
    return replace(
        run,
        run_id=uuid.uuid4(),
        start_identity="4" * 64,
        input_digest="5" * 64,
        owner="6" * 64,
        origin="api",
        trigger="trigger-2",
        workflow_id="wf-2",
        workflow_version="2",
        revision="sha256:" + "7" * 64,
        definition_digest="sha256:" + "8" * 64,
        binding_digest="sha256:" + "9" * 64,
        state=replace(
            state,
            status="attention",
            current_step="step-2",
            admitted_at=T0 + 11,
            deadline_at=T0 + 12,
            policy=TimingPolicy(retry_delays_ms=(1,), observation_floor_seconds=5),
            cancel_mode="on-cancel-path",
            cancel_requested=False,
            restore_review=True,
            completed_at=T0 + 13,
            outcome="outcome-2",
            failure_code="code-2",
        ),
        snapshot=b"snapshot-2",
        input=b"input-2",
        terminal_output=b"output-2",
        payload_erased_at=T0 + 14,
        updated_at=T0 + 15,
        operator_action="retry-same",
        operator_action_at=T0 + 16,
        operator_reason_ref="hmac-sha256:" + "b" * 64,
    )


def _stored_step(run_id: uuid.UUID) -> StoredStep:
    record = StepRecord(
        step="step-1",
        type="call",
        state="leased",
        entered_at=T0 + 1,
        pure=False,
        generation=2,
        attempt=3,
        claims=4,
        due_at=T0 + 2,
        attempt_started_at=T0 + 3,
        finished_at=T0 + 4,
        awaiting="work",
        route=StepRoute("case", "label-1"),
        failure_code="code-1",
        detail="detail-1",
        operation="op/v1",
        effect="mutation",
        command_prepared=False,
        dispatched=False,
        sent=True,
        uncertain=False,
        receipt_expired=True,
        settled_by="response",
        wait_until=T0 + 5,
        wait_started_at=T0 + 6,
        timeout_at=T0 + 7,
        interval_seconds=60,
        observations=5,
        last_observed_at=T0 + 8,
        completion_ref="c" * 64,
    )
    return StoredStep(
        run_id=run_id,
        record=record,
        command=b"command-1",
        preparation_frozen=False,
        output=b"output-1",
        lease=Lease("worker-1", "token-1", T0 + 9),
        updated_at=T0 + 10,
    )


def _other_step(stored: StoredStep) -> StoredStep:
    """`stored` with every field a `steps` row holds changed."""
    record = stored.record
    return replace(
        stored,
        run_id=uuid.uuid4(),
        record=replace(
            record,
            step="step-2",
            type="wait-for",
            state="pending",
            entered_at=T0 + 11,
            pure=True,
            generation=12,
            attempt=13,
            claims=14,
            due_at=T0 + 12,
            attempt_started_at=T0 + 13,
            finished_at=T0 + 14,
            awaiting="observation",
            route=StepRoute("refusal", "label-2"),
            failure_code="code-2",
            detail="detail-2",
            operation="op/v2",
            effect="read",
            command_prepared=True,
            dispatched=True,
            sent=False,
            uncertain=True,
            receipt_expired=False,
            settled_by="reconcile",
            wait_until=T0 + 15,
            wait_started_at=T0 + 16,
            timeout_at=T0 + 17,
            interval_seconds=120,
            observations=15,
            last_observed_at=T0 + 18,
            completion_ref="d" * 64,
        ),
        command=b"command-2",
        preparation_frozen=True,
        output=b"output-2",
        lease=Lease("worker-2", "token-2", T0 + 19),
        updated_at=T0 + 20,
    )


# -- the partition of the columns ------------------------------------------------------------------


def test_every_runs_column_is_one_field_of_the_stored_run_or_its_state_and_back() -> None:
    paths = _run_fields(_stored_run(uuid.uuid4()))
    columns = [_column_of_run_field(path) for path in paths]
    assert len(columns) == len(set(columns))  # no two fields share a column
    assert set(columns) == RUN_COLUMNS  # every field has one, and every column is one
    # The schema's own partition says the same: the store's own fields, the state's, and the
    # state's timing policy as one document.
    assert set(RUN_OWN) == {path for path in paths if not path.startswith("state.")}
    assert set(RUN_STATE_COLUMNS) | {"policy"} == {
        path.removeprefix("state.") for path in paths if path.startswith("state.")
    }
    assert not set(RUN_OWN) & set(RUN_STATE_COLUMNS)
    assert set(RUN_IMMUTABLE) <= RUN_COLUMNS
    # What a row does not hold is the engine's payload, kept sealed beside it.
    assert {field.name for field in fields(RunState)} - {
        path.removeprefix("state.") for path in paths if path.startswith("state.")
    } == STATE_NOT_STORED


def test_every_steps_column_is_one_field_of_the_stored_step_its_record_or_lease_and_back() -> None:
    paths = _step_fields(_stored_step(uuid.uuid4()))
    columns = [_column_of_step_field(path) for path in paths]
    assert len(columns) == len(set(columns))
    assert set(columns) == STEP_COLUMNS
    assert set(STEP_OWN) == {path for path in paths if "." not in path}
    assert set(STEP_LEASE) == {_column_of_step_field(p) for p in paths if p.startswith("lease.")}
    renamed = {"record.effect", "record.route.kind", "record.route.label"}
    assert set(STEP_RECORD_COLUMNS) == {
        path.removeprefix("record.") for path in set(paths) - renamed if path.startswith("record.")
    }
    assert len(STEP_OWN) + len(STEP_LEASE) + len(STEP_RECORD_COLUMNS) + 3 == len(STEP_COLUMNS)
    assert set(STEP_IMMUTABLE) <= STEP_COLUMNS
    assert {field.name for field in fields(StepRecord)} - {
        path.split(".")[1] for path in paths if path.startswith("record.")
    } == RECORD_NOT_STORED


# -- the mapping, field by field and column by column ----------------------------------------------


@pytest.mark.parametrize("path", sorted(_run_fields(_stored_run(uuid.uuid4()))))
def test_a_run_field_is_written_to_its_column_alone_and_read_back(path: str) -> None:
    base = _stored_run(uuid.uuid4())
    other = _other_run(base)
    variant = _put(base, path, _run_fields(other)[path])
    before, after = run_values(base), run_values(variant)
    assert {name for name in before if before[name] != after[name]} == {_column_of_run_field(path)}
    assert run_of(after) == variant


@pytest.mark.parametrize("column", sorted(RUN_COLUMNS))
def test_a_runs_column_is_read_into_its_field_alone(column: str) -> None:
    base = _stored_run(uuid.uuid4())
    row = run_values(base) | {column: run_values(_other_run(base))[column]}
    before, after = _run_fields(base), _run_fields(run_of(row))
    assert [path for path in before if before[path] != after[path]] == [
        path for path in before if _column_of_run_field(path) == column
    ]


@pytest.mark.parametrize("path", sorted(_step_fields(_stored_step(uuid.uuid4()))))
def test_a_step_field_is_written_to_its_column_alone_and_read_back(path: str) -> None:
    base = _stored_step(uuid.uuid4())
    variant = _put(base, path, _step_fields(_other_step(base))[path])
    before, after = step_values(base), step_values(variant)
    assert {name for name in before if before[name] != after[name]} == {_column_of_step_field(path)}
    assert step_of(after) == variant


@pytest.mark.parametrize("column", sorted(STEP_COLUMNS))
def test_a_steps_column_is_read_into_its_field_alone(column: str) -> None:
    base = _stored_step(uuid.uuid4())
    row = step_values(base) | {column: step_values(_other_step(base))[column]}
    before, after = _step_fields(base), _step_fields(step_of(row))
    assert [path for path in before if before[path] != after[path]] == [
        path for path in before if _column_of_step_field(path) == column
    ]


def test_a_value_without_its_optional_fields_round_trips_and_no_payload_is_read() -> None:
    """No route, no lease, nothing sealed: the absent parts come back absent, and a value read
    from a row never carries the engine's payload (it is sealed beside it)."""
    bare = start_step(uuid.uuid4(), T0, type="wait-until")
    assert (bare.record.route, bare.lease, bare.command, bare.output) == (None, None, None, None)
    assert step_of(step_values(bare)) == bare
    read = step_of(step_values(_stored_step(uuid.uuid4())))
    assert (read.record.command, read.record.preparation, read.record.output) == (None,) * 3
    run = admission("bare", trigger=None, snapshot=None, input=None, updated_at=T0).run
    assert run_of(run_values(run)) == run
    stored = run_of(run_values(_stored_run(uuid.uuid4())))
    assert (stored.state.input, stored.state.output, stored.state.records) == (None, None, ())


def test_a_policy_is_decoded_by_its_document_and_a_wrong_one_is_refused_every_time() -> None:
    """Runs share decoded policies; a document equal to a good one under `==` but of another
    type (`true` for `1`, `30.0` for `30`) is still refused, however often the good one was
    read. PostgreSQL's rows carry the policy's stored text (`dialect.CompactJson`), SQLite's
    the document: both read the same."""
    base = _stored_run(uuid.uuid4())
    good = run_values(base)
    assert run_of(good).state.policy == run_of(dict(good)).state.policy == base.state.policy
    odd = TimingPolicy(retry_delays_ms=(1, 1), observation_floor_seconds=1)
    assert run_of(good | {"policy": odd.to_json()}).state.policy == odd
    stored_text = json.dumps(odd.to_json(), sort_keys=True, separators=(",", ":"))
    assert run_of(good | {"policy": stored_text}).state.policy == odd
    for floor in (True, 1.0):
        document = odd.to_json() | {"observationFloorSeconds": floor}
        for _ in range(2):
            with pytest.raises(FormatError):
                run_of(good | {"policy": document})
            with pytest.raises(FormatError):
                run_of(good | {"policy": json.dumps(document)})


def test_a_value_with_its_engine_payload_is_written_without_it() -> None:
    """`run_values`/`step_values` write no plaintext: a record's `command`, `preparation` and
    `output` and a run's `input` and `output` have no column (the sealed bytes do)."""
    stored = _stored_step(uuid.uuid4())
    opened = replace(
        stored,
        record=replace(stored.record, command='{"a":1}', preparation=b"prep", output='{"b":2}'),
    )
    assert step_values(opened) == step_values(stored)
    run = _stored_run(uuid.uuid4())
    assert run_values(replace(run, state=replace(run.state, input="{}", output="{}"))) == (
        run_values(run)
    )


def test_a_claim_holds_a_leased_record_and_names_it() -> None:
    """A claim is the record as the store leased it: its run, step and fence are the held
    record's, and a record without a lease is no claim."""
    held = _stored_step(uuid.uuid4())
    assert held.lease is not None
    snapshot = RunSnapshot(
        _control(), changed_run(_stored_run(held.run_id), current_step=held.step), (held,)
    )
    leased = Claim(held, snapshot)
    assert (leased.run_id, leased.step, leased.lease) == (held.run_id, "step-1", held.lease)
    with pytest.raises(ValueError):
        Claim(replace(held, lease=None), snapshot)


def _control() -> ControlRow:
    return ControlRow(
        database_id="store-suite",
        schema_version=1,
        restore_hold=False,
        admissions_hold=False,
        restore_evidence_ref=None,
        admission_recovery_ref=None,
        active_package_digest=None,
        active_revision=None,
        admission_key_commitment="a" * 64,
        state_key_commitments={1: "b" * 64},
        created_at=T0,
    )


# -- the same values through the database, on both backends ----------------------------------------


def test_every_field_a_write_sets_is_read_back_as_written(store: Store) -> None:
    """What the store answers for a write (computed, not read back) is what a read finds, for
    a run and a record with every field the rows hold set."""
    policy = TimingPolicy(retry_delays_ms=(1, 2, 3), observation_floor_seconds=45)
    request = admission("every-field", origin="event", trigger="trigger-1", policy=policy)
    admitted = store.writes.admit(request, T0)
    assert store.reads.get_run(request.run.run_id) == admitted.run
    assert store.reads.find_run(request.run.start_identity) == admitted.run
    assert admitted.run.state.policy == policy and admitted.run.origin == "event"
    now = T0 + SECOND

    def every(snapshot: RunSnapshot) -> RunWrite:
        record = changed(
            snapshot.current,
            generation=2,
            attempt=3,
            claims=4,
            due_at=T0 + 5,
            attempt_started_at=T0 + 6,
            finished_at=T0 + 7,
            awaiting="observation",
            route_kind="case",
            route_label="label",
            failure_code="code",
            detail="detail",
            command=b"command",
            command_prepared=True,
            preparation_frozen=True,
            dispatched=True,
            sent=True,
            uncertain=True,
            receipt_expired=True,
            settled_by="retry-same",
            output=b"output",
            wait_until=T0 + 8,
            wait_started_at=T0 + 9,
            timeout_at=T0 + 10,
            interval_seconds=11,
            observations=12,
            last_observed_at=T0 + 13,
            completion_ref="e" * 64,
        )
        run = changed_run(
            snapshot.run,
            status="attention",
            cancel_mode="on-cancel-path",
            cancel_requested=True,
            restore_review=True,
            completed_at=T0 + 14,
            outcome="outcome",
            failure_code="code",
            terminal_output=b"terminal",
        )
        return RunWrite(run, (record,))

    written = store.writes.update_run(request.run.run_id, now, every)
    assert written is not None
    read = store.reads.get_run_snapshot(request.run.run_id)
    assert read == written
    assert read.current.record.route == StepRoute("case", "label")
    assert (read.current.updated_at, read.run.updated_at) == (now, now)


def test_a_write_sends_the_columns_it_changes_alone(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record's row is updated with the columns the write changes (and its `updated_at`):
    its sealed command and output, and the columns no transition changes, are not sent again;
    a run the write leaves as it was is not updated at all."""
    request = admission("narrow")
    store.writes.admit(request, T0)
    sent: list[str] = []
    real = Prepared.run

    def run(self: Prepared, conn: Any, params: Any = ()) -> None:
        sent.append(str(self.statement))
        real(self, conn, params)

    monkeypatch.setattr(Prepared, "run", run)

    def detail(snapshot: RunSnapshot) -> RunWrite:
        return RunWrite(snapshot.run, (changed(snapshot.current, detail="detail"),))

    written = store.writes.update_run(request.run.run_id, T0 + SECOND, detail)
    assert written is not None and written.current.record.detail == "detail"
    updates = [statement for statement in sent if statement.startswith("UPDATE")]
    assert len(updates) == 1 and updates[0].startswith("UPDATE steps SET"), updates
    assert set(re.findall(r"(\w+)=:v_", updates[0])) == {"detail", "updated_at"}
    assert store.reads.get_run_snapshot(request.run.run_id) == written


def test_a_write_never_sets_a_lease(store: Store) -> None:
    """The store alone sets a lease (07 §7.2): a record a write leaves leased keeps the
    claim's; a record a write leaves in any other state has none, whatever the write says."""
    run = store.writes.admit(admission("lease"), T0).run
    held = claim(store, T0)
    assert held is not None
    forged = Lease("thief", "forged", T0 + 3600 * SECOND)
    kept = store.writes.record_step_progress(
        held, T0, lambda s: RunWrite(s.run, (changed(s.current, lease=forged, detail="x"),))
    )
    snapshot = store.reads.get_run_snapshot(run.run_id)
    assert snapshot is not None
    assert snapshot.current.lease == held.lease == kept.snapshot.current.lease
    assert snapshot.current.record.detail == "x"
    finish = deliver_and_finish(T0)

    def finish_forged(snapshot: RunSnapshot) -> RunWrite:
        write = finish(snapshot)
        return replace(write, steps=tuple(changed(step, lease=forged) for step in write.steps))

    done = store.writes.complete_step(held, T0, finish_forged)
    snapshot = store.reads.get_run_snapshot(run.run_id)
    assert snapshot is not None and snapshot.current.lease is None
    assert snapshot == done.snapshot


# -- instants ----------------------------------------------------------------------------------------

INSTANTS = (
    0,
    1,
    -1,
    999,
    T0,
    T0 + 1,
    T0 + 999,
    T0 - 1,
    instant(1970, 1, 1) - 86_400_000 * 365 - 7,
    instant(1, 1, 1),
    instant(9999, 12, 31, 23, 59) + 59_999,
)


def test_an_instant_column_reads_back_exactly_the_milliseconds_it_was_given(
    store: Store,
) -> None:
    """`UTCDateTime` on each backend: the integer itself on SQLite, the instant as a
    `timestamptz` on PostgreSQL (so the database's own time arithmetic sees the instant), read
    back as the same integer."""
    table = Table(
        "instants_probe",
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("at", UTCDateTime),
        prefixes=["TEMPORARY"],
    )
    with store.transactor.engine.connect() as connection:
        table.create(connection)
        connection.execute(insert(table), [{"id": n, "at": at} for n, at in enumerate(INSTANTS)])
        connection.execute(insert(table).values(id=len(INSTANTS), at=None))
        read = connection.execute(select(table.c.at).order_by(table.c.id)).scalars().all()
        if store.kind == "postgresql":
            stored = connection.exec_driver_sql(
                "SELECT (EXTRACT(EPOCH FROM at) * 1000)::bigint FROM instants_probe"
                " WHERE at IS NOT NULL ORDER BY id"
            ).scalars()
        else:
            stored = connection.exec_driver_sql(
                "SELECT at FROM instants_probe WHERE at IS NOT NULL ORDER BY id"
            ).scalars()
        raw = list(stored)
        connection.rollback()
    assert read == [*INSTANTS, None]
    assert all(type(at) is int for at in read[:-1])
    assert raw == list(INSTANTS)


@pytest.mark.parametrize("dialect", [PG, LITE], ids=["postgresql", "sqlite"])
@pytest.mark.parametrize(
    "other",
    [1.5, float(T0), "1893499200000", datetime(2030, 1, 1, tzinfo=UTC), True],
    ids=["float", "whole-float", "text", "datetime", "bool"],
)
def test_an_instant_column_takes_only_integer_milliseconds(dialect: Any, other: object) -> None:
    """Both backends refuse what is not an instant as they bind it: none is stored that would
    not read back as the value given (SQLite would keep a float or a text as it is)."""
    with pytest.raises(TypeError):
        UTCDateTime().process_bind_param(other, dialect)  # type: ignore[arg-type]
    assert UTCDateTime().process_bind_param(None, dialect) is None


def test_a_statement_family_builds_each_shape_once_and_keeps_a_bounded_number() -> None:
    """`PreparedShapes`: a shape met again answers the statement built the first time; past
    `kept` shapes, the kept ones are let go and built again as they come."""
    built: list[int] = []

    def build(count: int) -> Any:
        built.append(count)
        return select(literal_column(str(count)))

    shapes = PreparedShapes(build, kept=2)
    first = shapes(1)
    assert shapes(1) is first and shapes(2) is shapes(2)
    assert built == [1, 2]
    shapes(3)  # a third shape: the two kept are let go
    assert shapes(1) is not first and built == [1, 2, 3, 1]
