"""Readiness (06 §10) across a store outage (09 §5 step 7): a live-binding check that the
unreachable store did not let run is "not ready" now and is not kept, while a check that ran
and failed is kept for `READY_CACHE_SECONDS` as before."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.service.holds import Readiness


class _Bindings:
    def __init__(self, answers: list[object]) -> None:
        self.answers = answers
        self.checks = 0

    def unsettled_match(self, _now: datetime) -> bool:
        self.checks += 1
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return bool(answer)


def _context(bindings: _Bindings) -> Any:
    control = SimpleNamespace(restore_hold=False, admissions_hold=False)
    return SimpleNamespace(
        store=SimpleNamespace(verify=lambda: control),
        audit=None,
        bindings=bindings,
        now=lambda: datetime.now(UTC),
    )


def _unavailable() -> CoordinatorError:
    return CoordinatorError(Diagnostic("coordinator.command.store-unavailable"))


def test_a_binding_check_the_store_did_not_let_run_is_not_kept() -> None:
    bindings = _Bindings([_unavailable(), True])
    readiness = Readiness(_context(bindings))
    assert readiness() == "coordinator.command.store-unavailable"
    assert readiness() is None  # checked again at once, not 30 s later
    assert readiness() is None  # and that verdict is kept
    assert bindings.checks == 2


def test_a_binding_check_that_ran_and_failed_is_kept() -> None:
    refused = CoordinatorError(Diagnostic("coordinator.command.live-binding-conflict"))
    bindings = _Bindings([refused, True])
    readiness = Readiness(_context(bindings))
    assert readiness() == "coordinator.command.live-binding-conflict"
    assert readiness() == "coordinator.command.live-binding-conflict"
    assert bindings.checks == 1
