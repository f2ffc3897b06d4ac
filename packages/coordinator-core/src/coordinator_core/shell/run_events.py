"""A run's life in the metrics and the service log (06 §14): admissions, outcomes, statuses.

`RunEvents` is made once per run service (`build_service`) and told what was *committed*:
an admission the service decided, and (as `Store.observe`'s observer) the step outcomes the
worker noted in a transaction and the run status changes it wrote, once it committed. Each
becomes a metric update (`shell.metrics`) and one JSON line in the service log whose only
identifiers are the keyed references of 07 §11 (`runRef`, `stepRef`), never a run id, a key,
an input or any other value.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Final

from coordinator_core.engine.state import TERMINAL_STATUSES
from coordinator_core.shell import metrics
from coordinator_core.shell.audit import AuditReferences
from coordinator_core.shell.store import StatusChange, StepOutcome

__all__ = ["ADMISSION_REFUSED", "ADMITTED", "STATUS_CHANGED", "STEP_OUTCOME", "RunEvents"]

logger = logging.getLogger("coordinator.runs")

ADMITTED: Final = "coordinator.run.admitted"
ADMISSION_REFUSED: Final = "coordinator.run.admission-refused"
STEP_OUTCOME: Final = "coordinator.run.step-outcome"
STATUS_CHANGED: Final = "coordinator.run.status-changed"
_NO_OPERATION: Final = "none"


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

    def operation_of(self, step: str) -> str:
        """The operation id a step calls (`none` for a step that calls nothing)."""
        return self._operations.get(step, _NO_OPERATION)

    def admitted(self, origin: str, run_id: uuid.UUID, *, created: bool) -> None:
        outcome = "accepted" if created else "replayed"
        metrics.admission(self.workflow, origin, outcome)
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "Run admitted." if created else "Admission replayed an existing run.",
                extra={
                    "code": ADMITTED,
                    "keyed": {
                        "runRef": self._references.run(str(run_id)),
                        "workflow": self.workflow,
                        "origin": origin,
                        "outcome": outcome,
                    },
                },
            )

    def refused(self, origin: str, code: str) -> None:
        metrics.admission(self.workflow, origin, "refused", code)
        logger.info(
            "Admission refused.",
            extra={
                "code": ADMISSION_REFUSED,
                "keyed": {
                    "workflow": self.workflow,
                    "origin": origin,
                    "outcome": "refused",
                    "refusal": code,
                },
            },
        )

    def committed(self, items: Sequence[StatusChange | StepOutcome]) -> None:
        """`Store.observe`'s observer: what one transaction committed, in order."""
        log = logger.isEnabledFor(logging.INFO)
        for item in items:
            if isinstance(item, StepOutcome):
                self._step_outcome(item, log=log)
            else:
                self._status_change(item, log=log)

    def _step_outcome(self, item: StepOutcome, *, log: bool) -> None:
        operation = self.operation_of(item.step)
        metrics.step_outcome(self.workflow, item.step_type, operation, item.outcome)
        if log:
            run = str(item.run_id)
            logger.info(
                "A step record's attempt ended.",
                extra={
                    "code": STEP_OUTCOME,
                    "keyed": {
                        "runRef": self._references.run(run),
                        "stepRef": self._references.step(run, item.step),
                        "workflow": self.workflow,
                        "stepType": item.step_type,
                        "operation": operation,
                        "outcome": item.outcome,
                    },
                },
            )

    def _status_change(self, change: StatusChange, *, log: bool) -> None:
        metrics.status_changed(change.workflow_id, change.after)
        if change.after in TERMINAL_STATUSES:
            seconds = (change.at - change.admitted_at).total_seconds()
            metrics.run_finished(change.workflow_id, change.after, seconds)
        if log:
            logger.info(
                "A run's status changed.",
                extra={
                    "code": STATUS_CHANGED,
                    "keyed": {
                        "runRef": self._references.run(str(change.run_id)),
                        "workflow": change.workflow_id,
                        "previous": change.before,
                        "status": change.after,
                    },
                },
            )
