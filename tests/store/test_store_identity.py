"""The store's identity and the restore detection built on it (07 §12.1 items 2, 5), on both
backends with a real journal: every head names the database it was saved in, a store found in
another database (a copy into a new file, a `pg_dump` into a new database) is refused as
restored until a restore hold adopts it, a journal written against another database refuses,
a connection that reaches another database than the one the process opened is refused, and a
proof of commit at a later generation or attempt than the store shows refuses."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from store_support import T0, Backend, admit, changed, claim
from support.needs import unavailable

from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.audit import AuditReferences, AuditWriter, worker_record
from coordinator_core.shell.audit.entries import store_identity_record
from coordinator_core.shell.audit.heads import journal_ends
from coordinator_core.shell.audit.witness import RestoreWitness
from coordinator_core.shell.restore_detection import check_journal, journal_identity
from coordinator_core.shell.store import RunSnapshot, RunWrite, Store
from coordinator_core.shell.store.identity import StoreIdentity

REFS = AuditReferences(b"\x07" * 32, "store-identity-test")
CORRELATION = "5d0c6f7e-3b1a-4c2d-9e8f-0a1b2c3d4e5f"


@pytest.fixture
def audit(tmp_path: Path) -> Path:
    directory = tmp_path / "audit"
    directory.mkdir(mode=0o700)
    return directory


def proof(
    writer: AuditWriter, run_id: uuid.UUID, generation: int, attempt: int, step: str = "start"
) -> None:
    step_ref = REFS.step(str(run_id), step)
    writer.append(
        worker_record(
            f"{CORRELATION}:dispatch:{step_ref}",
            "dispatch",
            REFS.run(str(run_id)),
            step_ref,
            generation,
            attempt,
            "committed",
        )
    )


def mark_dispatched(snapshot: RunSnapshot) -> RunWrite:
    marked = changed(
        snapshot.current, command=b"c", command_prepared=True, dispatched=True, sent=True
    )
    return RunWrite(snapshot.run, (marked,))


def refusal(store: Store, audit: Path, witness: RestoreWitness | None = None) -> str:
    with pytest.raises(CoordinatorError) as caught:
        check_journal(store, audit, REFS, witness=witness)
    return caught.value.diagnostic.code


def pg_tool(name: str) -> str:
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        unavailable(
            f"the PostgreSQL client tool {name} is missing", "apt-get install postgresql-client"
        )
    return found


@pytest.fixture
def elsewhere(
    request: pytest.FixtureRequest, migrated: Backend, tmp_path: Path
) -> Iterator[Backend]:
    """The migrated store put back into another database: a copy of the SQLite file in a new
    file, or a `pg_dump` of the namespace restored into a new database of the server."""
    if migrated.kind == "sqlite":
        assert migrated.path is not None
        copy = tmp_path / "restored.db"
        yield Backend("sqlite", f"sqlite:///{copy}", None, copy)
        return
    admin: str = request.getfixturevalue("postgres_admin_url")
    name = f"coordinator_restored_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    target = migrated.url.rsplit("/", 1)[0] + "/" + name
    try:
        yield Backend("postgresql", target, migrated.namespace, None)
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def put_back(source: Backend, target: Backend) -> None:
    """Copy the store of `source` into `target` as a restore from a backup would."""
    if source.kind == "sqlite":
        assert source.path is not None and target.path is not None
        shutil.copyfile(source.path, target.path)
        return
    dump = subprocess.run(
        [pg_tool("pg_dump"), "--no-owner", "--schema", str(source.namespace), source.url],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    subprocess.run(
        [pg_tool("psql"), "-q", "-v", "ON_ERROR_STOP=1", target.url],
        input=dump,
        capture_output=True,
        check=True,
        timeout=60,
    )


def test_the_identity_names_the_database_the_store_lives_in(store: Store) -> None:
    identity = store.store_identity
    names = [name for name, _ in identity.parts]
    if store.kind == "sqlite":
        assert names == ["device", "inode", "instance"]
    else:
        assert names == ["system", "timeline", "database", "instance"]
    assert StoreIdentity.parse(identity.text) == identity
    assert identity.digest.startswith("sha256:")


def test_every_head_is_saved_with_the_identity_of_its_database(store: Store, audit: Path) -> None:
    with AuditWriter.open(audit, "worker") as writer:
        store.follow_journal(lambda: writer.position)
        journal_identity(writer, store)
        store.save_journal_head(T0)
        assert store.reads.head_identities() == {writer.prefix: store.store_identity}
    check_journal(store, audit, REFS)


def test_a_store_put_back_in_another_database_is_refused_until_a_restore_hold_adopts_it(
    migrated: Backend, elsewhere: Backend, audit: Path
) -> None:
    with migrated.open() as store, AuditWriter.open(audit, "serve") as writer:
        store.follow_journal(lambda: writer.position)
        journal_identity(writer, store)
        run = admit(store, "put-back")
        store.save_journal_head(T0)
    put_back(migrated, elsewhere)
    with elsewhere.open() as restored:
        assert restored.reads.get_run_snapshot(run.run_id) is not None  # everything came back
        assert refusal(restored, audit) == "coordinator.deployment.store-restored"
        restored.operator.set_restore_hold(T0, lambda _snapshot: None, journal_ends(audit))
        assert set(restored.reads.head_identities().values()) == {restored.store_identity}
        check_journal(restored, audit, REFS)  # the reviewed store goes on from here


def test_a_journal_written_against_another_database_refuses(store: Store, audit: Path) -> None:
    with AuditWriter.open(audit, "worker") as writer:  # a group the store has no head for
        writer.append(store_identity_record(CORRELATION, "sha256:" + "5" * 64))
    assert refusal(store, audit) == "coordinator.deployment.store-restored"


def test_a_connection_to_a_file_put_back_under_the_process_is_refused(
    sqlite_backend: Backend, tmp_path: Path
) -> None:
    sqlite_backend.migrate()
    sqlite_backend.apply()
    assert sqlite_backend.path is not None
    store = sqlite_backend.open()
    copy = tmp_path / "copy.db"
    shutil.copyfile(sqlite_backend.path, copy)
    os.replace(copy, sqlite_backend.path)  # a restore by rename: a new inode under the path
    store.close()  # its connections go; the next one is opened on the path
    with pytest.raises(CoordinatorError) as caught:
        store.verify()
    assert caught.value.diagnostic.code == "coordinator.deployment.store-restored"
    assert "inode" in caught.value.diagnostic.effective_message


@pytest.mark.parametrize(
    ("generation", "attempt"),
    [(1, 2), (2, 1)],
    ids=["later-attempt", "later-generation"],
)
def test_a_proof_of_commit_later_than_the_dispatched_record_refuses(
    store: Store, audit: Path, generation: int, attempt: int
) -> None:
    run = admit(store, f"later-{generation}-{attempt}")
    held = claim(store, T0)
    assert held is not None
    store.writes.record_step_progress(held, T0, mark_dispatched)  # the store: attempt 1, marked
    with AuditWriter.open(audit, "worker") as writer:
        proof(writer, run.run_id, 1, 1)
        check_journal(store, audit, REFS)  # the store shows this one
        proof(writer, run.run_id, generation, attempt)  # the journal went further
    assert refusal(store, audit) == "coordinator.deployment.store-behind-journal"


def test_a_proof_of_commit_earlier_than_the_record_passes(store: Store, audit: Path) -> None:
    run = admit(store, "earlier")
    first = claim(store, T0)
    assert first is not None
    store.writes.record_step_progress(first, T0, mark_dispatched)
    with AuditWriter.open(audit, "worker") as writer:
        proof(writer, run.run_id, 1, 1)
        proof(writer, run.run_id, 0, 9)  # an earlier generation, whatever its attempt
    check_journal(store, audit, REFS)


def test_the_witness_sees_a_journal_put_back_with_its_store(
    store: Store, audit: Path, tmp_path: Path
) -> None:
    witness = RestoreWitness(tmp_path / "elsewhere" / "witness")
    witness.path.parent.mkdir()
    run = admit(store, "witnessed")
    with AuditWriter.open(audit, "worker", proofs=witness.append) as writer:
        store.follow_journal(lambda: writer.position)
        journal_identity(writer, store)
        store.save_journal_head(T0)
        backup = {path.name: path.read_bytes() for path in audit.iterdir()}
        proof(writer, run.run_id, 1, 1)  # sent after the backup
    assert set(witness.positions()) == {writer.prefix}
    for path in audit.iterdir():  # the journal goes back with the store (which never
        path.write_bytes(backup[path.name])  # held that dispatch: it is from the backup)
    check_journal(store, audit, REFS)  # the journal and the store agree: unseen without it
    assert refusal(store, audit, witness) == "coordinator.deployment.store-restored"
    witness.replace(journal_ends(audit))  # what a restore hold does
    check_journal(store, audit, REFS, witness=witness)


def test_the_migrated_store_has_one_random_instance_id(backend: Backend) -> None:
    backend.migrate()
    rows = backend.execute("SELECT instance_id FROM store_identity")
    assert len(rows) == 1 and len(rows[0][0]) == 32
    int(rows[0][0], 16)  # hex
