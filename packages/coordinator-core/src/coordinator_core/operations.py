"""The operation catalog (contract 08 §1): immutable descriptors pinned into every snapshot."""

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
    "descriptor",
    "product_of",
]

Effect = Literal["read", "mutation", "evaluation"]
RecoveryRule = Literal[
    "read-again", "same-command", "same-command-and-receipt", "hold-after-dispatch"
]


@dataclass(frozen=True, slots=True)
class Completion:
    """A named result an accepted call exposes; a wait-for observes it by reading `observe`."""

    observe: str
    reference: str
    default_interval_seconds: int

    def to_json(self) -> dict[str, Any]:
        return {
            "observe": self.observe,
            "reference": self.reference,
            "defaultIntervalSeconds": self.default_interval_seconds,
        }


@dataclass(frozen=True, slots=True)
class OperationDescriptor:
    """One catalog entry. A changed descriptor needs a new id and a new adapter ABI."""

    id: str
    product: str
    effect: Effect
    key_required: bool
    requires_preparation: bool
    recovery: RecoveryRule
    read_receipt: bool
    declared_refusals: bool
    completions: Mapping[str, Completion] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def dispatch_risk(self) -> bool:
        """Mutations and evaluations are marked before sending and report effects."""
        return self.effect in ("mutation", "evaluation")

    @property
    def allows_retry_same(self) -> bool:
        return self.recovery != "hold-after-dispatch"

    def to_json(self) -> dict[str, Any]:
        """The descriptor as pinned into snapshots (`operationIdentities`, contract 02 §8)."""
        return {
            "id": self.id,
            "product": self.product,
            "effect": self.effect,
            "keyRequirement": "required" if self.key_required else "none",
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
    key: bool = False,
    preparation: bool = False,
    receipt: bool = False,
    refusals: bool = False,
    completions: Mapping[str, Completion] | None = None,
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
    )


def product_of(operation_id: str) -> str:
    """The product part of an operation id (`casework.submit-review-request/v1` → casework)."""
    return operation_id.split(".", 1)[0]


PROPOSAL_OPERATION: Final = "breg.propose-action/v1"

_ENTRIES: Final = (
    _op("breg.read-record/v1", "read", "read-again"),
    _op(
        "breg.invoke-action/v1",
        "mutation",
        "same-command",
        key=True,
        preparation=True,
        refusals=True,
    ),
    _op("breg.propose-action/v1", "mutation", "same-command", key=True, preparation=True),
    _op(
        "casework.submit-review-request/v1",
        "mutation",
        "same-command",
        key=True,
        completions={
            "result": Completion(
                observe="casework.read-review-result/v1",
                reference="/requestId",
                default_interval_seconds=900,
            )
        },
    ),
    _op("casework.read-review-result/v1", "read", "read-again"),
    _op("casework.withdraw-review-request/v1", "mutation", "same-command", key=True),
    _op(
        "messaging.submit-message/v1",
        "mutation",
        "same-command-and-receipt",
        key=True,
        receipt=True,
    ),
    _op("scheduling.read-scheduling/v1", "read", "read-again"),
    _op("scheduling.read-availability/v1", "read", "read-again"),
    _op(
        "scheduling.create-appointment/v1",
        "mutation",
        "same-command-and-receipt",
        key=True,
        receipt=True,
    ),
    _op("external-http.get/v1", "read", "read-again"),
    _op("evaluation.evaluate/v1", "evaluation", "hold-after-dispatch", preparation=True),
)

CATALOG: Final[Mapping[str, OperationDescriptor]] = MappingProxyType(
    {entry.id: entry for entry in _ENTRIES}
)


def descriptor(operation_id: str) -> OperationDescriptor | None:
    """The descriptor of `operation_id` in this build's catalog, if any."""
    return CATALOG.get(operation_id)
