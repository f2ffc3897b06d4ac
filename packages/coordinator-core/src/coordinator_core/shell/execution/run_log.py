"""A run's life in the metrics and the service log (06 §14): admissions, outcomes, statuses.

`RunEvents` is made once per deployment (`Runtime.build`) and told what was *committed*:
an admission the service decided, and (as `Store.observe`'s observer) the step outcomes the
worker noted in a transaction and the run status changes it wrote, once it committed. Each
becomes a metric update (`shell.observe.metrics`) and one JSON line in the service log whose only
identifiers are the keyed references of 07 §11 (`runRef`, `stepRef`), never a run id, a key,
an input or any other value. The lines go through `logging` (logger `coordinator.runs`) until
the process hands its `ServiceLog` over (`write_to`): then straight to it, which costs less
than half as much per line on the worker's path.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from coordinator_core.engine.state import TERMINAL_STATUSES
from coordinator_core.shell.audit import AuditReferences
from coordinator_core.shell.observe import metrics, tracing
from coordinator_core.shell.runtime.service_log import ServiceLog
from coordinator_core.shell.store import StatusChange, StepOutcome

__all__ = ["ADMISSION_REFUSED", "ADMITTED", "STATUS_CHANGED", "STEP_OUTCOME", "RunEvents"]

logger = logging.getLogger("coordinator.runs")

ADMITTED: Final = "coordinator.run.admitted"
ADMISSION_REFUSED: Final = "coordinator.run.admission-refused"
STEP_OUTCOME: Final = "coordinator.run.step-outcome"
STATUS_CHANGED: Final = "coordinator.run.status-changed"
_NO_OPERATION: Final = "none"

Line = Callable[[str, str, Mapping[str, object]], None]
"""Writes one info line: code, fixed message, keyed members."""


def _through_logging(code: str, message: str, members: Mapping[str, object]) -> None:
    if logger.isEnabledFor(logging.INFO):
        logger.info(message, extra={"code": code, "keyed": members})


class RunEvents:
    """The metric updates and log lines of one deployment's runs (see the module)."""

    def __init__(
        self,
        references: AuditReferences,
        workflow: str,
        operations: Mapping[str, str] | None = None,
    ) -> None:
        self._references = references
        self.workflow = workflow
        self._operations = dict(operations or {})
        self._line: Line = _through_logging

    def write_to(self, log: ServiceLog) -> None:
        """Write the lines straight to the process's service log (`shell.runtime.process`)."""

        def line(code: str, message: str, members: Mapping[str, object]) -> None:
            log.emit("info", code, message, members)

        self._line = line

    def operation_of(self, step: str) -> str:
        """The operation id a step calls (`none` for a step that calls nothing)."""
        return self._operations.get(step, _NO_OPERATION)

    def admitted(self, origin: str, run_id: uuid.UUID, *, created: bool) -> None:
        outcome = "accepted" if created else "replayed"
        metrics.admission(self.workflow, origin, outcome)
        if tracing.enabled():  # the admission's request span
            tracing.annotate(
                {
                    "coordinator.run.id": str(run_id),
                    "coordinator.workflow": self.workflow,
                    "coordinator.admission.outcome": outcome,
                }
            )
        self._line(
            ADMITTED,
            "Run admitted." if created else "Admission replayed an existing run.",
            {
                "runRef": self._references.run(str(run_id)),
                "workflow": self.workflow,
                "origin": origin,
                "outcome": outcome,
            },
        )

    def refused(self, origin: str, code: str) -> None:
        metrics.admission(self.workflow, origin, "refused", code)
        if tracing.enabled():
            tracing.annotate(
                {
                    "coordinator.workflow": self.workflow,
                    "coordinator.admission.outcome": "refused",
                    "coordinator.problem.code": code,
                }
            )
        self._line(
            ADMISSION_REFUSED,
            "Admission refused.",
            {"workflow": self.workflow, "origin": origin, "outcome": "refused", "refusal": code},
        )

    def committed(self, items: Sequence[StatusChange | StepOutcome]) -> None:
        """`Store.observe`'s observer: what one transaction committed, in order."""
        for item in items:
            if isinstance(item, StepOutcome):
                self._step_outcome(item)
            else:
                self._status_change(item)

    def _step_outcome(self, item: StepOutcome) -> None:
        operation = self.operation_of(item.step)
        metrics.step_outcome(self.workflow, item.step_type, operation, item.outcome)
        run = str(item.run_id)
        self._line(
            STEP_OUTCOME,
            "A step record's attempt ended.",
            {
                "runRef": self._references.run(run),
                "stepRef": self._references.step(run, item.step),
                "workflow": self.workflow,
                "stepType": item.step_type,
                "operation": operation,
                "outcome": item.outcome,
            },
        )

    def _status_change(self, change: StatusChange) -> None:
        metrics.status_changed(change.workflow_id, change.after)
        if change.after in TERMINAL_STATUSES:
            seconds = (change.at - change.admitted_at) / 1000
            metrics.run_finished(change.workflow_id, change.after, seconds)
        self._line(
            STATUS_CHANGED,
            "A run's status changed.",
            {
                "runRef": self._references.run(str(change.run_id)),
                "workflow": change.workflow_id,
                "previous": change.before,
                "status": change.after,
            },
        )
