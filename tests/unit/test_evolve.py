"""`evolve` is `dataclasses.replace` without re-running the constructor of plain frozen rows."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator_core.engine import StepRecord
from coordinator_core.evolve import evolve


@dataclasses.dataclass(frozen=True, slots=True)
class _Checked:
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("negative")


def _row() -> StepRecord:
    return StepRecord("read", "call", "pending", entered_at=1_700_000_000_000)


def test_evolve_equals_replace_for_every_field_changed_or_kept() -> None:
    row = _row()
    for field in dataclasses.fields(StepRecord):
        changed = {field.name: f"changed-{field.name}"}
        assert evolve(row, **changed) == dataclasses.replace(row, **changed)
    assert evolve(row) == row and evolve(row) is not row


def test_evolve_refuses_a_name_that_is_not_a_field() -> None:
    with pytest.raises(TypeError):
        evolve(_row(), no_such_field=1)


def test_a_class_with_post_init_still_runs_it() -> None:
    assert evolve(_Checked(1), value=2) == _Checked(2)
    with pytest.raises(ValueError, match="negative"):
        evolve(_Checked(1), value=-1)


@dataclasses.dataclass(frozen=True)
class _Plain:
    name: str
    count: int = 0


def test_a_frozen_class_without_slots_is_copied_alike() -> None:
    plain = _Plain("a", 1)
    assert evolve(plain, count=2) == dataclasses.replace(plain, count=2) == _Plain("a", 2)
    assert evolve(plain) == plain and evolve(plain) is not plain
    with pytest.raises(dataclasses.FrozenInstanceError):
        evolve(plain, count=3).count = 4  # type: ignore[misc]
