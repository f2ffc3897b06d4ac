"""Keyed references `hmac-sha256:<hex>` (07 §11 "Keyed references")."""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.audit.entries import (
    MIN_AUDIT_KEY_BYTES,
    REFERENCE_CLASSES,
    ReferenceClass,
)

# --------------------------------------------------------------------------------------------
# Keyed references
# --------------------------------------------------------------------------------------------

_ID_KEY_INFO: Final = b"registry-platform-audit/identifier-key/v1"
_REFERENCE_CONTEXT: Final = "registry-platform:audit-reference:v1"


_RECENT_REFERENCES: Final = 4096


def _utf8(text: str) -> bytes:
    encoded: bytes | None
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        encoded = None
    if encoded is None:
        raise ValueError("A referenced value is not valid Unicode.")
    return encoded


class AuditReferences:
    """Keyed references for one database: `reference(class, value)` hides `value` behind the
    audit key, so equal values can be matched across entries without being revealed."""

    __slots__ = ("_id_key", "_recent", "_scope")

    def __init__(self, audit_key: bytes, database_id: str) -> None:
        if not isinstance(audit_key, bytes | bytearray) or len(audit_key) < MIN_AUDIT_KEY_BYTES:
            raise CoordinatorError(
                Diagnostic(
                    code="coordinator.secret.invalid",
                    path="/deployment/auditKeyRef",
                    message="The audit key is shorter than 32 bytes.",
                )
            )
        # idKey = HMAC-SHA256(auditKey, label ‖ 0x01): HKDF-Expand of one block (RFC 5869 §2.3).
        self._id_key = hmac.digest(bytes(audit_key), _ID_KEY_INFO + b"\x01", hashlib.sha256)
        self._scope = database_id
        _utf8(database_id)
        # A run's and its steps' references are asked for again by every entry of the run:
        # the recent ones are kept (a bounded cache, emptied when full).
        self._recent: dict[tuple[str, str], str] = {}

    def __repr__(self) -> str:  # never the key
        return "AuditReferences(<redacted>)"

    def reference(self, reference_class: ReferenceClass, value: str) -> str:
        """`"hmac-sha256:" + hex(HMAC-SHA256(idKey, context \\0 len \\0 class \\0 len \\0 scope
        \\0 len \\0 value))` with decimal UTF-8 byte lengths and `scope = databaseId`."""
        key = (reference_class, value)
        known = self._recent.get(key)
        if known is not None:
            return known
        if reference_class not in REFERENCE_CLASSES:
            raise ValueError("The reference class is not one of 07 §11.")
        parts = [_utf8(reference_class), _utf8(self._scope), _utf8(value)]
        message = _REFERENCE_CONTEXT.encode("ascii") + b"".join(
            b"\0" + str(len(part)).encode("ascii") + b"\0" + part for part in parts
        )
        reference = "hmac-sha256:" + hmac.digest(self._id_key, message, hashlib.sha256).hex()
        if len(self._recent) >= _RECENT_REFERENCES:
            self._recent.clear()
        self._recent[key] = reference
        return reference

    def actor(self, owner_commitment: str) -> str:
        return self.reference("actor-v1", owner_commitment)

    def run(self, run_id: str) -> str:
        return self.reference("run-v1", run_id)

    def step(self, run_id: str, step: str) -> str:
        return self.reference("step-v1", f"{run_id}/{step}")

    def reason(self, reason: str) -> str:
        return self.reference("reason-v1", reason)

    def event(self, ce_id: str) -> str:
        return self.reference("event-v1", ce_id)

    def source(self, source_name: str) -> str:
        return self.reference("source-v1", source_name)

    def request(self, request_id: str) -> str:
        return self.reference("request-v1", request_id)

    def connection(self, connection_name: str) -> str:
        return self.reference("connection-v1", connection_name)

    def restore_evidence(self, evidence: str) -> str:
        return self.reference("restore-evidence-v1", evidence)

    def admission_recovery(self, evidence: str) -> str:
        return self.reference("admission-recovery-v1", evidence)
