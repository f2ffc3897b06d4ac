"""Text mode of the remote commands (09 §4, RECOMMENDED): a readable summary of a run
(`start`, `status`, `cancel`, `retry-same`) and of an inspection (`inspect`, `reconcile`:
status, current step, effects with `accepted`/`unknown`, wait timing, observation count), and
a table for `list` (rich on a terminal, plain aligned text otherwise)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from coordinatorctl.report import sanitize

__all__ = ["render_text"]


def _show(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return sanitize(value)
    return sanitize(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _lines_of_run(run: Mapping[str, Any]) -> list[str]:
    rows: list[tuple[str, object]] = [
        ("Run", run.get("runId")),
        (
            "Workflow",
            f"{_show(run.get('workflowId'))} version {_show(run.get('workflowVersion'))}",
        ),
        ("Revision", run.get("revision")),
        ("Status", run.get("status")),
        ("Step", run.get("step")),
        ("Admitted", run.get("admittedAt")),
        ("Deadline", run.get("deadlineAt")),
    ]
    optional = (
        ("Next due", "nextDueAt"),
        ("Completed", "completedAt"),
        ("Outcome", "outcome"),
        ("Failure", "failureCode"),
    )
    rows.extend((label, run[key]) for label, key in optional if run.get(key) is not None)
    if run.get("origin") == "event":
        rows.append(("Trigger", run.get("trigger")))
    flags = [
        word
        for word, key in (
            ("cancel requested", "cancelRequested"),
            ("restore review", "restoreReview"),
            ("uncertain effect", "uncertain"),
            ("payload erased", "payloadErased"),
        )
        if run.get(key) is True
    ]
    if flags:
        rows.append(("Flags", ", ".join(flags)))
    if run.get("output") is not None:
        rows.append(("Output", run.get("output")))
    lines = [f"{label + ':':<11} {_show(value)}" for label, value in rows]
    if run.get("restoreReview") is True:
        lines.append(f"{'Next:':<11} {REVIEW_NEXT}")
    return lines


REVIEW_NEXT: Final = (
    "under restore review (07 §12): `retry-same` continues the run as recorded, `cancel` stops"
    " it; a settled `reconcile` leaves the review mark for `retry-same`"
)
"""What an operator does next with a run under restore review: the one action that clears the
mark is `retry-same`, also after a `reconcile` settled the run's effect."""


def _objects(value: object) -> list[dict[str, Any]]:
    """The objects of a list member; anything else (absent, malformed) reads as none."""
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


def _wait_lines(inspection: Mapping[str, Any]) -> list[str]:
    run = inspection.get("run")
    if not isinstance(run, dict):
        return []
    steps = _objects(inspection.get("steps"))
    current = [s for s in steps if s.get("step") == run.get("step") and "wait" in s]
    if not current:
        return []
    step = current[-1]
    wait = step.get("wait")
    if not isinstance(wait, dict):
        return []
    name = _show(step.get("step"))
    if "until" in wait:
        return [f"{'Wait:':<11} {name} until {_show(wait.get('until'))}"]
    lines = [
        f"{'Wait:':<11} {name} {_show(wait.get('result'))}, started {_show(wait.get('startedAt'))},"
        f" times out {_show(wait.get('timeoutAt'))}",
        f"{'':<11} every {_show(wait.get('intervalSeconds'))} s;"
        f" {_show(wait.get('observations'))} observations,"
        f" last {_show(wait.get('lastObservedAt'))}, next {_show(wait.get('nextObservationAt'))}",
    ]
    return lines


def _inspection_lines(inspection: Mapping[str, Any]) -> list[str]:
    run = inspection.get("run")
    lines = _lines_of_run(run if isinstance(run, dict) else {})
    effects = _objects(inspection.get("effects"))
    counts = {
        state: sum(1 for e in effects if e.get("state") == state)
        for state in ("accepted", "unknown")
    }
    lines.append(
        f"{'Effects:':<11} {counts['accepted']} accepted, {counts['unknown']} unknown"
        f" ({len(effects)} in all)"
    )
    for effect in effects:
        settled = effect.get("settledBy")
        lines.append(
            f"{'':<11} {_show(effect.get('step'))} {_show(effect.get('operation'))}"
            f" {_show(effect.get('state'))}" + (f" (by {_show(settled)})" if settled else "")
        )
    lines.extend(_wait_lines(inspection))
    recovery = inspection.get("recovery")
    if isinstance(recovery, dict):
        retry = (
            "allowed"
            if recovery.get("retryAllowed") is True
            else f"blocked ({_show(recovery.get('retryBlockedBy'))})"
        )
        reconcile = (
            "allowed"
            if recovery.get("reconcileAllowed") is True
            else f"blocked ({_show(recovery.get('reconcileBlockedBy'))})"
        )
        lines.append(f"{'Recovery:':<11} retry-same {retry}; reconcile {reconcile}")
    steps = _objects(inspection.get("steps"))
    if steps:
        lines.append("Steps:")
        table = [
            [
                _show(s.get("step")),
                _show(s.get("type")),
                _show(s.get("state")),
                f"gen {_show(s.get('generation'))} attempt {_show(s.get('attempt'))}",
                _show(s.get("enteredAt")),
                _show(s.get("failureCode")) if s.get("failureCode") is not None else "",
            ]
            for s in steps
        ]
        lines.extend("  " + row for row in _aligned(table))
    return lines


def _aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


_LIST_COLUMNS: Final = ("RUN", "WORKFLOW", "STATUS", "STEP", "ADMITTED", "OUTCOME")


def _list_rows(runs: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for run in runs:
        finish = run.get("outcome") or run.get("failureCode")
        rows.append(
            [
                _show(run.get("runId")),
                _show(run.get("workflowId")),
                _show(run.get("status")) + (" (uncertain)" if run.get("uncertain") is True else ""),
                _show(run.get("step")),
                _show(run.get("admittedAt")),
                _show(finish) if finish is not None else "-",
            ]
        )
    return rows


def _list_text(result: Mapping[str, Any], terminal: bool) -> str:
    runs = result["runs"]
    cursor = result["nextCursor"]
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
        for column in _LIST_COLUMNS:
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
    return "\n".join(_aligned([list(_LIST_COLUMNS), *rows])) + "\n" + footer


def render_text(
    shape: str, command: str, status_word: str, result: Mapping[str, Any], *, terminal: bool
) -> str | None:
    """The text-mode stdout of a success; None prints the result as indented JSON.

    `shape` is the answer's kind (`run`, `runs`, `inspection`, `reconcile`, `merged`); the
    result was already checked to have it. Every string from the service is rendered through
    `sanitize`, so a value cannot break a line or steer the terminal.
    """
    if shape == "run":
        lines = _lines_of_run(result["run"])
        if command == "start":
            lines.insert(0, f"{status_word.capitalize()} run {_show(result['run'].get('runId'))}")
        return "\n".join(lines) + "\n"
    if shape == "runs":
        return _list_text(result, terminal)
    if shape == "inspection":
        return "\n".join(_inspection_lines(result)) + "\n"
    if shape == "reconcile":
        lines = [f"{'Result:':<11} {_show(result['result'])}"]
        lines.extend(_inspection_lines(result["inspection"]))
        return "\n".join(lines) + "\n"
    return None
