"""Schema version 7: a run carried on to its next record changes no indexed column of its
`runs` row, so that PostgreSQL can write that update heap-only, on the room `fillfactor`
keeps on each page (`migrations/versions/v0007_runs_fillfactor.py`), with no new entry in any
of the table's indexes. Checked on each backend with the integration project's run, whose read's
finish carries it on (choose, then the notice leased) before the notice's finish settles it."""

from __future__ import annotations

import re
from typing import Any

import pytest
from integration_support import Deployed, run_input
from sqlalchemy import UniqueConstraint

from coordinator_core.shell.store.schema import RUNS, run_values


def _indexed_columns() -> set[str]:
    """Every `runs` column an index or a unique key reads: its columns, and the columns its
    partial predicate names (a change to those blocks a heap-only update too)."""
    names = {column.name for column in RUNS.primary_key.columns}
    for index in RUNS.indexes:
        names |= {column.name for column in index.columns}
        predicate = index.dialect_options["postgresql"].get("where")
        if predicate is not None:
            words = set(re.findall(r"[a-z_]+", str(predicate)))
            names |= {column.name for column in RUNS.columns if column.name in words}
    for constraint in RUNS.constraints:
        if isinstance(constraint, UniqueConstraint):
            names |= {column.name for column in constraint.columns}
    return names


def test_the_indexed_columns_are_found() -> None:
    found = _indexed_columns()
    assert {"run_id", "start_identity", "status", "admitted_at", "completed_at"} <= found
    assert "deadline_at" in found and "current_step" not in found


def test_a_run_carried_on_changes_no_indexed_column_of_its_row(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = deployed.store.writes
    real = writes.complete_step
    updates: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def traced(claim: Any, *arguments: Any, **options: Any) -> Any:
        before = deployed.store.reads.get_run_snapshot(claim.run_id)
        written = real(claim, *arguments, **options)
        assert before is not None
        updates.append((run_values(before.run), run_values(written.snapshot.run)))
        return written

    monkeypatch.setattr(writes, "complete_step", traced)
    admitted = deployed.admit(run_input())
    status, _ = deployed.drive(admitted.run.run_id)
    assert status.status == "finished"

    indexed = _indexed_columns()
    carried = [(before, after) for before, after in updates if after["status"] == "running"]
    assert len(carried) == 1, [after["status"] for _, after in updates]
    for before, after in carried:  # the read's finish
        changed = {name for name in before if before[name] != after[name]}
        assert "current_step" in changed and not changed & indexed, sorted(changed)
    settled = [after for _, after in updates if after["status"] != "running"]
    assert len(settled) == 1  # the one update that must touch the indexes: the status
