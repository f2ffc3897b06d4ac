"""Operator routes (06 §7): doctor, holds and retention; `operator: true` policies only."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from coordinator_api.audit import Audited
from coordinator_api.bodies import read_body
from coordinator_api.edge import RequestContext
from coordinator_api.handlers._shared import REASON_CODES, caller_of, json_reply, reason_of
from coordinator_api.problems import ApiProblem
from coordinator_api.wire import (
    ReasonRequest,
    ReleaseAdmissionHoldRequest,
    RetentionRequest,
    RetentionResult,
    doctor_body,
    hold_state_body,
    instant_of,
)
from coordinator_core.shell.service import AuditRequest

__all__ = ["get_doctor", "release_admission_hold", "release_restore_hold", "restore_hold", "retain"]

_RETENTION_CODES = {
    "before": "coordinator.command.retention-invalid",
    "limit": "coordinator.command.retention-invalid",
}


async def get_doctor(token_info: dict[str, Any], coordinator: RequestContext) -> Response:
    """06 §7.1."""
    state = coordinator.state
    entry = AuditRequest(action="doctor", caller=caller_of(token_info))
    async with Audited(state.journal, entry) as audit:
        return json_reply(doctor_body(await audit.act(state.service.doctor)))


async def restore_hold(token_info: dict[str, Any], coordinator: RequestContext) -> Response:
    """06 §7.2."""
    state = coordinator.state
    entry = AuditRequest(action="restore-hold", caller=caller_of(token_info))
    async with Audited(state.journal, entry) as audit:
        body = read_body(coordinator.body, ReasonRequest, member_codes=REASON_CODES)
        reason = reason_of(body.reason)
        audit.note(reason=reason)
        return json_reply(hold_state_body(await audit.act(state.service.restore_hold, reason)))


async def release_restore_hold(token_info: dict[str, Any], coordinator: RequestContext) -> Response:
    """06 §7.3."""
    state = coordinator.state
    entry = AuditRequest(action="release-restore-hold", caller=caller_of(token_info))
    async with Audited(state.journal, entry) as audit:
        body = read_body(coordinator.body, ReasonRequest, member_codes=REASON_CODES)
        reason = reason_of(body.reason)
        audit.note(reason=reason)
        return json_reply(
            hold_state_body(await audit.act(state.service.release_restore_hold, reason))
        )


async def release_admission_hold(
    token_info: dict[str, Any], coordinator: RequestContext
) -> Response:
    """06 §7.4: both attestations (409 attestation-required), then the service's hold check."""
    state = coordinator.state
    entry = AuditRequest(action="release-admission-hold", caller=caller_of(token_info))
    async with Audited(state.journal, entry) as audit:
        body = read_body(coordinator.body, ReleaseAdmissionHoldRequest, member_codes=REASON_CODES)
        reason = reason_of(body.reason)
        audit.note(reason=reason)
        if not (body.admission_history_complete and body.prior_deployment_fenced):
            raise ApiProblem("coordinator.command.attestation-required")
        return json_reply(
            hold_state_body(await audit.act(state.service.release_admission_hold, reason))
        )


async def retain(token_info: dict[str, Any], coordinator: RequestContext) -> Response:
    """06 §7.5: `before` is an RFC 3339 date-time not in the future, `limit` 1–100."""
    state = coordinator.state
    entry = AuditRequest(action="retention", caller=caller_of(token_info))
    async with Audited(state.journal, entry) as audit:
        body = read_body(coordinator.body, RetentionRequest, member_codes=_RETENTION_CODES)
        if body.before > state.settings.clock():
            raise ApiProblem("coordinator.command.retention-invalid")
        erased = await audit.act(state.service.retain, instant_of(body.before), body.limit)
        return json_reply(RetentionResult(erased=erased))
