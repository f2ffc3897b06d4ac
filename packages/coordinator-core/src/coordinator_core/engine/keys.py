"""Keyed identities of file 07 §3: commitments, product command keys and completion references.

Pure computation over bytes (HMAC-SHA256 from the standard library). The engine asks a `Keys`
object for the two keyed values it needs while it runs; the worker passes `CommitmentKeys` built
from the deployment's admission key, the scenario runner its own offline keys.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

__all__ = ["CommitmentKeys", "Keys", "commitment"]

_COMMITMENT_DOMAIN: Final = b"registry-coordinator/commitment/v1"


def commitment(admission_key: bytes, purpose: str, parts: Sequence[str]) -> str:
    """`hex(HMAC-SHA256(key, domain ‖ u64be(len(x)) ‖ x …))` over `[purpose] + parts` (07 §3)."""
    message = bytearray(_COMMITMENT_DOMAIN)
    for part in (purpose, *parts):
        data = part.encode("utf-8")
        message += len(data).to_bytes(8, "big")
        message += data
    return hmac.new(admission_key, bytes(message), hashlib.sha256).hexdigest()


class Keys(Protocol):
    """The keyed values a run needs; identical across restarts, retries and `retry-same`."""

    def command_key(self, step: str) -> str:
        """The idempotency key sent with the frozen command of `step`."""
        ...

    def completion_ref(self, connection: str, reference: str) -> str:
        """The reference under which completion events find a `wait-for` record."""
        ...


@dataclass(frozen=True)
class CommitmentKeys:
    """The service's keys: commitments under the admission key for one admitted run."""

    admission_key: bytes = field(repr=False)
    database_id: str
    start_identity: str

    def command_key(self, step: str) -> str:
        return commitment(
            self.admission_key, "command", [self.database_id, self.start_identity, step]
        )

    def completion_ref(self, connection: str, reference: str) -> str:
        return commitment(
            self.admission_key, "completion", [self.database_id, connection, reference]
        )
