"""Architecture rule 7: each distribution's root names its public surface, pinned here.

`coordinator_core` exports nothing from its root on purpose: callers import the module that owns
what they need (`coordinator_core.engine`, `coordinator_core.functions`, …), each of which pins
its own `__all__` in its own suite.
"""

from __future__ import annotations

import importlib

import pytest

ROOTS = {
    "coordinator_core": [],
    "coordinatorctl": ["main"],
    "coordinator_sandbox": ["main"],
}

MODULES = {
    # The test kit shared by the suites, the demo and the benchmarks.
    "coordinator_sandbox.testing": [
        "OPERATOR_ACTIONS",
        "PYTHON",
        "KitFailure",
        "Policy",
        "Processes",
        "Sandbox",
        "ScratchPostgres",
        "caller_token",
        "database_url",
        "deployment_block",
        "endpoints_in",
        "free_port",
        "point_at_sandbox",
        "postgresql_database",
        "service_of",
        "wait_for",
        "write_keys",
        "write_token",
    ],
    # The packages of the layout (docs/architecture.md) export nothing from their roots:
    # callers import the module that owns the name.
    "coordinator_core.authoring": [],
    "coordinator_core.checking": [],
    "coordinator_core.config": [],
    "coordinator_core.definition": [],
    "coordinator_core.jsonschema": [],
    "coordinator_core.shell": [],
    "coordinator_core.shell.service": [
        "INTERNAL_ERROR",
        "RUN_STATUSES",
        "Action",
        "AdmissionRequest",
        "AfterAnswer",
        "AttemptPage",
        "RunAdmitted",
        "RunChanges",
        "AuditAction",
        "AuditJournal",
        "AuditOutcome",
        "AuditRequest",
        "AuditResponse",
        "AuditUnavailable",
        "BlockReason",
        "Caller",
        "Doctor",
        "DoctorState",
        "EffectStatus",
        "EventAdmitted",
        "EventDelivery",
        "HoldState",
        "ReconcileResult",
        "Recovery",
        "RunInspection",
        "RunList",
        "RunQuery",
        "RunService",
        "RunStatus",
        "RunStatusValue",
        "ServiceRefusal",
        "StepAttempt",
        "StepRoute",
        "StepStatus",
        "Runtime",
        "StoreRunService",
        "WaitResult",
        "WriterJournal",
        "commits_after",
        "durable",
    ],
    "coordinator_core.functions": [
        "INTERPRETER_ABI",
        "CompileResult",
        "CompiledFunctions",
        "FunctionError",
        "FunctionInfo",
        "UnresolvedCall",
        "compile_functions",
    ],
    "coordinator_core.operations": [
        "ADAPTER_ABI",
        "CATALOG",
        "PROPOSAL_OPERATION",
        "Completion",
        "OperationDescriptor",
        "Withdrawal",
        "descriptor",
        "product_of",
    ],
    "coordinator_core.outputs": [
        "completion_output_failure",
        "completion_output_schema",
        "first_violation",
        "operation_output_schema",
        "output_failure",
        "outputs_document",
        "prepare_validators",
    ],
}


@pytest.mark.parametrize("name", sorted({**ROOTS, **MODULES}))
def test_public_surface_is_exactly_the_pinned_names(name: str) -> None:
    module = importlib.import_module(name)
    expected = {**ROOTS, **MODULES}[name]
    assert sorted(module.__all__) == sorted(expected)
    for exported in module.__all__:
        assert hasattr(module, exported), exported


def test_every_spelling_of_the_run_statuses_is_the_one_tuple() -> None:
    from typing import get_args

    from coordinator_core.engine.state import RunStatusValue as EngineStatus
    from coordinator_core.limits import RUN_STATUSES
    from coordinator_core.shell.service import RUN_STATUSES as API_STATUSES
    from coordinator_core.shell.service import RunStatusValue
    from coordinator_core.shell.store.schema import RUN_STATUSES as STORE_STATUSES

    assert len(RUN_STATUSES) == 8
    assert get_args(EngineStatus) == RUN_STATUSES
    assert get_args(RunStatusValue) == RUN_STATUSES
    assert API_STATUSES == RUN_STATUSES
    assert STORE_STATUSES == RUN_STATUSES
