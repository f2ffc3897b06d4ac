"""The public surfaces of the engine and the scenario runner are explicit and pinned."""

from __future__ import annotations

import coordinator_core.engine as engine
import coordinator_core.scenarios as scenarios

ENGINE = {
    # entry points
    "advance", "unrestorable", "is_settled", "retry_blocked_by", "reconcile_blocked_by",
    "claim_record", "carry_on", "send_ready", "Carried", "MAX_CARRIED",
    "Advance", "Persistence", "needs_credential", "Definition", "DefinitionError", "EngineInvariantError", "FormatError",
    "FunctionProgram",
    # definitions
    "Alias", "Argument", "MappingSpec", "StepSpec", "CallStep", "ChooseStep", "FinishStep",
    "WaitForStep", "WaitUntilStep", "TriggerSpec",
    # state
    "RunState", "StepRecord", "TimingPolicy", "StepRoute", "RouteKind", "RunStatusValue", "StepState",
    "CancelMode", "EffectState", "TERMINAL_STATUSES",
    # events
    "Event", "Admitted", "StepDue", "Work", "PreparationDone", "ReadyToSend", "CallOutcome",
    "ObservationOutcome", "DeadlinePassed", "LeaseLapsed", "CompletionNotified",
    "CancelRequested", "RetrySame", "ReconcileRequested", "ReceiptAnswer", "RestoreHold",
    "AttemptRefused", "event_from_json",
    # commands
    "Command", "ScheduleDue", "ScheduleObservation", "Claimed", "FreezeCommand", "Prepare",
    "FreezePreparation", "ObtainCredential", "MarkMaySend", "Dispatch", "Observe",
    "LookupReceipt", "Finish", "Fail", "Cancelled", "Attention", "command_from_json",
    # keys, time, codes
    "Keys", "CommitmentKeys", "commitment", "Instant", "parse_instant", "format_instant",
    "to_canonical", "ADAPTER_CODES", "FALLBACK_CODES", "RUN_CODES", "FAILURE_CODES",
    "REPLY_CODES", "NON_RECOVERABLE_CODES",
}  # fmt: skip


def test_engine_public_surface_is_pinned() -> None:
    assert set(engine.__all__) == ENGINE
    assert all(hasattr(engine, name) for name in engine.__all__)


def test_scenarios_public_surface_is_pinned() -> None:
    assert set(scenarios.__all__) == {
        "CaseResult",
        "SCENARIOS_FILE",
        "ScenarioKeys",
        "ScenarioReport",
        "check_scenario_document",
        "run_scenarios",
    }
    assert all(hasattr(scenarios, name) for name in scenarios.__all__)
