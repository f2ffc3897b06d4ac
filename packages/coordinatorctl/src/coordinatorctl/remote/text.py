"""Text mode of the remote commands (09 §4, RECOMMENDED): a readable summary of a run
(`start`, `status`, `cancel`, `retry-same`) and of an inspection (`inspect`, `reconcile`:
status, current step, effects with `accepted`/`unknown`, wait timing, observation count, and
each step's latest attempts), a table for `list` (rich on a terminal, plain aligned text
otherwise) and one for `attempts` (a page of a step's attempts).

It reads the answer as its generated model (remote/models.py), already validated by
remote/outcome.py; instants are shown in the service's form, `YYYY-MM-DDTHH:MM:SS.mmmZ` in UTC.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from coordinator_core.engine.detail import FailureDetail
from coordinatorctl.remote.models import (
    AttemptPage,
    ReconcileResult,
    RunInspection,
    RunList,
    RunStatus,
    StepAttempt,
    WaitUntil,
)
from coordinatorctl.report import sanitize

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["ATTEMPT_COLUMNS", "INSPECT_ATTEMPTS_SHOWN", "LIST_COLUMNS", "render_text"]

INSPECT_ATTEMPTS_SHOWN: Final = 3
"""The attempts `inspect` shows per step in text mode (the newest; `attempts` pages them all)."""


def _show(value: object) -> str:
    """A value of the answer as one line: `-` for none, an instant in the service's form, text
    (an id, an enum word) sanitised, anything else as compact JSON."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return _instant(value)
    if isinstance(value, str):
        return sanitize(value)
    return sanitize(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _instant(value: datetime) -> str:
    """An instant as the service writes it (06 §1): `YYYY-MM-DDTHH:MM:SS.mmmZ`, in UTC."""
    try:
        utc = value.astimezone(UTC)
    except OverflowError:  # at the edge of the calendar: shown with its own offset
        return value.isoformat(timespec="milliseconds")
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:"
        f"{utc.second:02d}.{utc.microsecond // 1000:03d}Z"
    )


def _lines_of_run(run: RunStatus) -> list[str]:
    rows: list[tuple[str, object]] = [
        ("Run", str(run.run_id)),
        ("Workflow", f"{_show(run.workflow_id)} version {_show(run.workflow_version)}"),
        ("Revision", run.revision),
        ("Status", run.status),
        ("Step", run.step),
        ("Admitted", run.admitted_at),
        ("Deadline", run.deadline_at),
    ]
    optional: tuple[tuple[str, object], ...] = (
        ("Next due", run.next_due_at),
        ("Completed", run.completed_at),
        ("Outcome", run.outcome.root if run.outcome is not None else None),
        ("Failure", run.failure_code),
    )
    rows.extend((label, value) for label, value in optional if value is not None)
    if run.origin == "event":
        rows.append(("Trigger", run.trigger.root if run.trigger is not None else None))
    flags = [
        word
        for word, flag in (
            ("cancel requested", run.cancel_requested),
            ("restore review", run.restore_review),
            ("uncertain effect", run.uncertain),
            ("payload erased", run.payload_erased),
        )
        if flag
    ]
    if flags:
        rows.append(("Flags", ", ".join(flags)))
    if run.output is not None:
        rows.append(("Output", run.output))
    lines = [f"{label + ':':<11} {_show(value)}" for label, value in rows]
    if run.restore_review:
        lines.append(f"{'Next:':<11} {REVIEW_NEXT}")
    return lines


REVIEW_NEXT: Final = (
    "under restore review (07 §12): `retry-same` continues the run as recorded, `cancel` stops"
    " it; a settled `reconcile` leaves the review mark for `retry-same`"
)
"""What an operator does next with a run under restore review: the one action that clears the
mark is `retry-same`, also after a `reconcile` settled the run's effect."""


def _wait_lines(inspection: RunInspection) -> list[str]:
    current = [
        (step.step, step.wait)
        for step in inspection.steps
        if step.step == inspection.run.step and step.wait is not None
    ]
    if not current:
        return []
    step_id, wait = current[-1]
    name = _show(step_id)
    if isinstance(wait, WaitUntil):
        return [f"{'Wait:':<11} {name} until {_show(wait.until)}"]
    return [
        f"{'Wait:':<11} {name} {_show(wait.result)}, started {_show(wait.started_at)},"
        f" times out {_show(wait.timeout_at)}",
        f"{'':<11} every {_show(wait.interval_seconds)} s;"
        f" {_show(wait.observations)} observations,"
        f" last {_show(wait.last_observed_at)}, next {_show(wait.next_observation_at)}",
    ]


def _inspection_lines(inspection: RunInspection) -> list[str]:
    lines = _lines_of_run(inspection.run)
    effects = inspection.effects
    counts = {
        state: sum(1 for effect in effects if effect.state == state)
        for state in ("accepted", "unknown")
    }
    lines.append(
        f"{'Effects:':<11} {counts['accepted']} accepted, {counts['unknown']} unknown"
        f" ({len(effects)} in all)"
    )
    for effect in effects:
        settled = effect.settled_by
        lines.append(
            f"{'':<11} {_show(effect.step)} {_show(effect.operation)}"
            f" {_show(effect.state)}" + (f" (by {_show(settled)})" if settled else "")
        )
    lines.extend(_wait_lines(inspection))
    recovery = inspection.recovery
    retry = "allowed" if recovery.retry_allowed else f"blocked ({_show(recovery.retry_blocked_by)})"
    reconcile = (
        "allowed"
        if recovery.reconcile_allowed
        else f"blocked ({_show(recovery.reconcile_blocked_by)})"
    )
    lines.append(f"{'Recovery:':<11} retry-same {retry}; reconcile {reconcile}")
    if inspection.steps:
        lines.append("Steps:")
        table = [
            [
                _show(s.step),
                _show(s.type),
                _show(s.state),
                f"gen {_show(s.generation)} attempt {_show(s.attempt)}",
                _show(s.entered_at),
                _show(s.failure_code) if s.failure_code is not None else "",
            ]
            for s in inspection.steps
        ]
        lines.extend("  " + row for row in _aligned(table))
        for s in inspection.steps:
            if s.mapping_failure is not None:  # why a mapping stopped the step (no value)
                found = s.mapping_failure
                why = FailureDetail(
                    found.code,
                    found.cause,
                    found.function,
                    found.line,
                    found.column,
                    found.label,
                    tuple(found.labels or ()),
                )
                lines.append(f"  {_show(s.step)}: {_show(why.sentence())}")
        lines.extend(_attempt_lines(inspection))
    return lines


def _attempt_cells(attempt: StepAttempt) -> list[str]:
    """One attempt as cells: its number, outcome, start, end and failure code (no value)."""
    return [
        f"gen {_show(attempt.generation)} #{_show(attempt.attempt)}",
        _show(attempt.outcome),
        f"started {_show(attempt.started_at)}",
        f"ended {_show(attempt.ended_at)}",
        _show(attempt.failure_code) if attempt.failure_code is not None else "",
    ]


def _attempt_lines(inspection: RunInspection) -> list[str]:
    """The timeline of each step with ended attempts: the newest few, newest first, and how to
    page the rest (`attempts --run … --step …`)."""
    run_id = _show(str(inspection.run.run_id))
    lines: list[str] = []
    for s in inspection.steps:
        attempts = s.attempts or []
        total = s.attempt_count if s.attempt_count is not None else len(attempts)
        if not attempts:
            continue
        lines.append(f"  {_show(s.step)}: {_show(total)} ended")
        shown = attempts[:INSPECT_ATTEMPTS_SHOWN]
        lines.extend("    " + row for row in _aligned([_attempt_cells(a) for a in shown]))
        if total > len(shown):
            lines.append(
                f"    … {total - len(shown)} more:"
                f" coordinatorctl attempts --run {run_id} --step {_show(s.step)}"
            )
    return ["Attempts (newest first):", *lines] if lines else []


# What each column of `attempts` holds: the generation (raised by `retry-same`) and the attempt's
# number in it, how it ended (06 `AttemptOutcome`), when it was claimed and when it ended (for a
# wait, the observation's time), and the failure code it left. `-` where an attempt has none.
ATTEMPT_COLUMNS: Final = ("GEN", "ATTEMPT", "OUTCOME", "STARTED", "ENDED", "FAILURE")


def _attempts_text(page: AttemptPage) -> str:
    head = f"{'Run:':<11} {_show(str(page.run_id))}\n{'Step:':<11} {_show(page.step)}\n"
    cursor = page.next_cursor
    footer = f"Next cursor: {_show(cursor)}\n" if cursor is not None else ""
    if not page.attempts:
        return head + "No ended attempts.\n" + footer
    rows = [
        [
            _show(a.generation),
            _show(a.attempt),
            _show(a.outcome),
            _show(a.started_at),
            _show(a.ended_at),
            _show(a.failure_code),
        ]
        for a in page.attempts
    ]
    return head + "\n".join(_aligned([list(ATTEMPT_COLUMNS), *rows])) + "\n" + footer


def _aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


# What each column holds: the run id, its workflow, its status (06 §11.5; `(uncertain)` when an
# effect is unknown), its current step, the finish it reached (an outcome id), its failure code
# (06 §11.7) and when it was admitted. `-` where a run has none.
LIST_COLUMNS: Final = ("RUN", "WORKFLOW", "STATUS", "STEP", "OUTCOME", "FAILURE", "ADMITTED")


def _list_rows(runs: Sequence[RunStatus]) -> list[list[str]]:
    rows = []
    for run in runs:
        rows.append(
            [
                _show(str(run.run_id)),
                _show(run.workflow_id),
                _show(run.status) + (" (uncertain)" if run.uncertain else ""),
                _show(run.step),
                _show(run.outcome.root if run.outcome is not None else None),
                _show(run.failure_code),
                _show(run.admitted_at),
            ]
        )
    return rows


def _list_text(page: RunList, terminal: bool) -> str:
    runs = page.runs
    cursor = page.next_cursor
    footer = f"Next cursor: {_show(cursor)}\n" if cursor is not None else ""
    if not runs:
        return "No runs.\n" + footer
    rows = _list_rows(runs)
    if terminal:
        import io
        import shutil

        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, header_style="bold", pad_edge=False)
        for column in LIST_COLUMNS:
            table.add_column(column, no_wrap=column in ("RUN", "ADMITTED"))
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        buffer = io.StringIO()
        console = Console(
            file=buffer,
            force_terminal=True,
            width=shutil.get_terminal_size().columns,
            highlight=False,
        )
        console.print(table)
        return buffer.getvalue() + footer
    return "\n".join(_aligned([list(LIST_COLUMNS), *rows])) + "\n" + footer


def render_text(command: str, status_word: str, answer: BaseModel, *, terminal: bool) -> str | None:
    """The text-mode stdout of a success; None prints the result as indented JSON.

    `answer` is the success body read as the command's model (remote_outcome.SPECS): a run,
    a page of runs, an inspection, a reconcile result or a page of attempts have a text form; the other bodies are
    printed as JSON. Every string from the service is rendered through `sanitize`, so a value
    cannot break a line or steer the terminal; every instant is shown in the service's form.
    """
    if isinstance(answer, RunStatus):
        lines = _lines_of_run(answer)
        if command == "start":
            lines.insert(0, f"{status_word.capitalize()} run {_show(str(answer.run_id))}")
        return "\n".join(lines) + "\n"
    if isinstance(answer, RunList):
        return _list_text(answer, terminal)
    if isinstance(answer, AttemptPage):
        return _attempts_text(answer)
    if isinstance(answer, RunInspection):
        return "\n".join(_inspection_lines(answer)) + "\n"
    if isinstance(answer, ReconcileResult):
        lines = [f"{'Result:':<11} {_show(answer.result)}"]
        lines.extend(_inspection_lines(answer.inspection))
        return "\n".join(lines) + "\n"
    return None
