"""The operation catalog (contract 08 §1): immutable descriptors pinned into every snapshot.

Beside the pinned descriptor (`to_json`, 02 §8), each entry names the definitions of its output
and of its completions' outputs in `spec/schemas/outputs.schema.json` (the shapes the adapters
accept from live products and scenarios may script: `coordinator_core.outputs`), and, for a
mutation that leaves something open at the product, how a workflow withdraws it (the clean-up
lint of `check`). Neither is part of the descriptor's identity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal

from coordinator_core.limits import ADAPTER_ABI

__all__ = [
    "ADAPTER_ABI",
    "CATALOG",
    "PROPOSAL_OPERATION",
    "Completion",
    "OperationDescriptor",
    "Withdrawal",
    "descriptor",
    "product_of",
]

Effect = Literal["read", "mutation", "evaluation"]
RecoveryRule = Literal[
    "read-again", "same-command", "same-command-and-receipt", "hold-after-dispatch"
]


@dataclass(frozen=True, slots=True)
class Completion:
    """A named result an accepted call exposes; a wait-for observes it by reading `observe`.
    `output` names the definition of its output in the outputs schema."""

    observe: str
    reference: str
    default_interval_seconds: int
    output: str

    def to_json(self) -> dict[str, Any]:
        return {
            "observe": self.observe,
            "reference": self.reference,
            "defaultIntervalSeconds": self.default_interval_seconds,
        }


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """What an accepted mutation leaves open at its product until it completes or is
    withdrawn: `what` names it for people ("review request"), `by` lists the operations that
    withdraw it (on the same connection)."""

    what: str
    by: frozenset[str]


@dataclass(frozen=True, slots=True)
class OperationDescriptor:
    """One catalog entry. A changed descriptor needs a new id and a new adapter ABI.

    `output` names the definition of its output in the outputs schema; `withdrawal` is set for
    a mutation whose accepted effect stays open until completed or withdrawn."""

    id: str
    product: str
    effect: Effect
    key_required: bool
    requires_preparation: bool
    recovery: RecoveryRule
    read_receipt: bool
    declared_refusals: bool
    output: str
    completions: Mapping[str, Completion] = field(default_factory=lambda: MappingProxyType({}))
    withdrawal: Withdrawal | None = None

    @property
    def dispatch_risk(self) -> bool:
        """Mutations and evaluations are marked before sending and report effects."""
        return self.effect in ("mutation", "evaluation")

    @property
    def allows_retry_same(self) -> bool:
        return self.recovery != "hold-after-dispatch"

    @property
    def key_requirement(self) -> Literal["required", "none"]:
        """Whether the product command key is sent as `Idempotency-Key` (`keyRequirement`)."""
        return "required" if self.key_required else "none"

    def to_json(self) -> dict[str, Any]:
        """The descriptor as pinned into snapshots (`operationIdentities`, contract 02 §8)."""
        return {
            "id": self.id,
            "product": self.product,
            "effect": self.effect,
            "keyRequirement": self.key_requirement,
            "requiresPreparation": self.requires_preparation,
            "recovery": self.recovery,
            "readReceipt": self.read_receipt,
            "declaredRefusals": self.declared_refusals,
            "completions": {name: c.to_json() for name, c in sorted(self.completions.items())},
        }


def _op(
    operation_id: str,
    effect: Effect,
    recovery: RecoveryRule,
    *,
    output: str,
    key: bool = False,
    preparation: bool = False,
    receipt: bool = False,
    refusals: bool = False,
    completions: Mapping[str, Completion] | None = None,
    withdrawal: Withdrawal | None = None,
) -> OperationDescriptor:
    return OperationDescriptor(
        id=operation_id,
        product=product_of(operation_id),
        effect=effect,
        key_required=key,
        requires_preparation=preparation,
        recovery=recovery,
        read_receipt=receipt,
        declared_refusals=refusals,
        completions=MappingProxyType(dict(completions or {})),
        output=output,
        withdrawal=withdrawal,
    )


def product_of(operation_id: str) -> str:
    """The product part of an operation id (`casework.submit-review-request/v1` → casework)."""
    return operation_id.split(".", 1)[0]


PROPOSAL_OPERATION: Final = "breg.propose-action/v1"

_WITHDRAW_REVIEW: Final = "casework.withdraw-review-request/v1"

# Scheduling bookings stay open too, but contract 08 §6 has no operation that cancels an
# appointment: a workflow cannot withdraw one, so `create-appointment` names no withdrawal and
# the clean-up lint (which asks for a withdrawing step) does not apply to it.
_ENTRIES: Final = (
    _op("breg.read-record/v1", "read", "read-again", output="BregRecord"),
    _op(
        "breg.invoke-action/v1",
        "mutation",
        "same-command",
        output="BregActionResult",
        key=True,
        preparation=True,
        refusals=True,
    ),
    _op(
        "breg.propose-action/v1",
        "mutation",
        "same-command",
        output="ProposalNeverRuns",
        key=True,
        preparation=True,
    ),
    _op(
        "casework.submit-review-request/v1",
        "mutation",
        "same-command",
        output="ReviewRequestAccepted",
        key=True,
        completions={
            "result": Completion(
                observe="casework.read-review-result/v1",
                reference="/requestId",
                default_interval_seconds=900,
                output="ReviewResult",
            )
        },
        withdrawal=Withdrawal("review request", frozenset({_WITHDRAW_REVIEW})),
    ),
    _op("casework.read-review-result/v1", "read", "read-again", output="ReviewResultRead"),
    _op(_WITHDRAW_REVIEW, "mutation", "same-command", output="ReviewWithdrawal", key=True),
    _op(
        "messaging.submit-message/v1",
        "mutation",
        "same-command-and-receipt",
        output="MessageReceipt",
        key=True,
        receipt=True,
    ),
    _op("scheduling.read-scheduling/v1", "read", "read-again", output="Scheduling"),
    _op("scheduling.read-availability/v1", "read", "read-again", output="Availability"),
    _op(
        "scheduling.create-appointment/v1",
        "mutation",
        "same-command-and-receipt",
        output="Appointment",
        key=True,
        receipt=True,
    ),
    _op("external-http.get/v1", "read", "read-again", output="ExternalAnswer"),
    _op(
        "evaluation.evaluate/v1",
        "evaluation",
        "hold-after-dispatch",
        output="Evaluation",
        preparation=True,
    ),
)

CATALOG: Final[Mapping[str, OperationDescriptor]] = MappingProxyType(
    {entry.id: entry for entry in _ENTRIES}
)


def descriptor(operation_id: str) -> OperationDescriptor | None:
    """The descriptor of `operation_id` in this build's catalog, if any."""
    return CATALOG.get(operation_id)
