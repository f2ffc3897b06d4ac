"""Sealed state, key custody and keyed commitments (contract 07 §3 and §10; keys from 05 §2.2, §8).

This is a shell module: it may import `cryptography`, and it is the only place payload state keys
and the admission key are used. Nothing here ever returns, logs or raises a key or a plaintext.

Public API
----------

`StateKeyRing(active, keys)`
    The configured payload state keys (`deployment.activeStateKey`, `deployment.stateKeys`): one
    active version that seals, every configured version that opens. Keys are exactly 32 bytes and
    not all zero (05 §2.2, `coordinator.secret.invalid`); 1–16 versions in 1–4,294,967,295 with
    the active one among them (05 §8, `coordinator.deployment.configuration`).
    `custody_marker(database_id, version)` and `custody_markers(database_id)` give the 07 §10
    markers; `check_custody(database_id, registered, registering=False)` applies the start rule
    (refusal `coordinator.command.state-key-custody`) and returns the markers `migrate`/`apply`
    must register.

`Sealer(ring, database_id, nonce_source=os.urandom)`
    `seal(value, run_id=, purpose=, step="")` returns the stored form
    `{"sealedCoordinatorV1": "<base64>"}` of the RFC 8785 bytes of `value`;
    `open(stored, run_id=, purpose=, step="")` returns the value or raises `CoordinatorError` with
    code `protected-state-invalid` for any failure (wrong key, unknown version, tampered byte,
    other database/run/purpose/step, malformed stored form). `seal_command`/`open_command` handle
    the `command` purpose's `{"request": …, "preparation": <base64 or null>}` shape. Purposes and
    their step rule are those of the 07 §10 table; breaking them, or sealing a value that has no
    canonical JSON form or is over 16 MiB, is a caller bug and raises `ValueError`.
    The store keeps the envelope itself (`dialect.SealedBytes`), and the execution shell works
    with it as it is kept: `seal_text(text, …)` seals the canonical JSON text the engine already
    has and returns the envelope; `open_text(kept, …)` returns the plaintext (that canonical
    text); `open` and `open_command` take a kept value too. A kept value is the envelope, or
    the stored form's JSON text that a store before schema version 3 kept.

`AdmissionKey(key, state_keys=None)`
    The deployment's commitment key (07 §3): `commitment(purpose, parts)` and the named
    commitments `owner_api`, `owner_event`, `start_identity`, `input_digest_api`,
    `input_digest_event`, `command_key`, `completion_reference`, plus `custody_marker` and
    `check_custody` (refusal `coordinator.command.admission-key-custody`). A key that equals a
    configured state key is refused (`coordinator.secret.invalid`, 05 §2.2).

Formats (07 §10), with `lp32(x) = u32be(len(x)) ‖ x` over the scope parts
`[b"registry-coordinator/state/v1", databaseId, runId, purpose, step]` (UTF-8):

    key      = HKDF-Expand-SHA256(stateKey[version], "registry-platform/sealed-value-key/v1" ‖ lp32…, 32)
    aad      = "registry-platform/sealed-value-aad/v1" ‖ lp32… ‖ u32be(version)
    envelope = 0x01 ‖ u32be(version) ‖ nonce(12) ‖ ciphertext ‖ tag(16)   (33 bytes of overhead)
    stored   = {"sealedCoordinatorV1": base64(envelope)}   (standard alphabet, padded)

Each value gets its own key, derived from its full scope, so a random 96-bit nonce only has to be
unique among the few seals of one (database, run, purpose, step) under one key version.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Literal, NamedTuple

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.values import CanonicalJsonError, canonical_json, parse_canonical_json

__all__ = [
    "ENVELOPE_OVERHEAD",
    "MAX_PLAINTEXT_BYTES",
    "MAX_STATE_KEY_VERSIONS",
    "PROTECTED_STATE_INVALID",
    "PURPOSES",
    "SEALED_MEMBER",
    "STATE_KEY_BYTES",
    "AdmissionKey",
    "CommandParts",
    "Purpose",
    "Sealer",
    "StateKeyRing",
]

Purpose = Literal["snapshot", "input", "output", "terminal", "command"]

# 07 §10 table: which purposes name a step (`output`, `command`) and which use "".
_STEP_PURPOSES: Final = frozenset({"output", "command"})
PURPOSES: Final[frozenset[str]] = frozenset({"snapshot", "input", "output", "terminal", "command"})

SEALED_MEMBER: Final = "sealedCoordinatorV1"
STATE_KEY_BYTES: Final = 32
MAX_STATE_KEY_VERSIONS: Final = 16
MAX_KEY_VERSION: Final = 4_294_967_295
MAX_PLAINTEXT_BYTES: Final = 16 * 1024 * 1024  # 07 §10: "at most 16 MiB"
PROTECTED_STATE_INVALID: Final = "protected-state-invalid"  # run failure code (07 §10, 08 §10)

_FORMAT: Final = b"\x01"
_NONCE_BYTES: Final = 12
_TAG_BYTES: Final = 16
_HEADER_BYTES: Final = 1 + 4 + _NONCE_BYTES
ENVELOPE_OVERHEAD: Final = _HEADER_BYTES + _TAG_BYTES  # 33

_STATE_DOMAIN: Final = b"registry-coordinator/state/v1"
_KEY_INFO: Final = b"registry-platform/sealed-value-key/v1"
_AAD_LABEL: Final = b"registry-platform/sealed-value-aad/v1"
_STATE_CUSTODY_LABEL: Final = b"registry-coordinator/payload-key-custody/v1"
_COMMITMENT_LABEL: Final = b"registry-coordinator/commitment/v1"

# Base64 of the largest envelope: anything longer cannot open, so it is refused before decoding.
_MAX_STORED_CHARS: Final = 4 * -(-(MAX_PLAINTEXT_BYTES + ENVELOPE_OVERHEAD) // 3)

_INVALID_MESSAGE: Final = "A sealed value could not be opened."
_INVALID_HINT: Final = (
    "Configure every registered state-key version with its original key; a value that still "
    "does not open was altered or moved and must be restored from backup."
)


def _protected_state_invalid() -> CoordinatorError:
    # Always built outside any `except` block, so no exception holding bytes is chained to it.
    return CoordinatorError(
        Diagnostic(code=PROTECTED_STATE_INVALID, message=_INVALID_MESSAGE, hint=_INVALID_HINT)
    )


def _utf8(text: str) -> bytes:
    """UTF-8 bytes of a context string; a lone surrogate raises a ValueError that quotes nothing."""
    encoded: bytes | None
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        encoded = None
    if encoded is None:
        raise ValueError("A context string is not valid Unicode.")
    return encoded


def _lp32(part: bytes) -> bytes:
    return struct.pack(">I", len(part)) + part


def _lp64(part: bytes) -> bytes:
    return struct.pack(">Q", len(part)) + part


def _hmac_sha256(key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, hashlib.sha256)


def _is_valid_version(version: object) -> bool:
    return (
        isinstance(version, int)
        and not isinstance(version, bool)
        and 1 <= version <= MAX_KEY_VERSION
    )


def _check_secret_key(key: object, path: str) -> bytes:
    """05 §2.2: a state or admission key is exactly 32 raw bytes, not all zero."""
    if not isinstance(key, bytes | bytearray) or len(key) != STATE_KEY_BYTES or not any(key):
        raise CoordinatorError(
            Diagnostic(
                code="coordinator.secret.invalid",
                path=path,
                message="The key is not exactly 32 raw bytes, or it is all zero.",
            )
        )
    return bytes(key)


def _same_marker(expected: str, registered: object) -> bool:
    """Constant-time comparison with a stored marker, which may be of any type or spelling."""
    if not isinstance(registered, str) or not registered.isascii():
        return False
    return hmac.compare_digest(expected, registered)


def _context_parts(database_id: str, run_id: str, purpose: str, step: str) -> bytes:
    """`lp32` of each scope part of 07 §10, after checking purpose and step against its table."""
    return _scope_head(database_id) + _scope_tail(run_id, purpose, step)


def _scope_head(database_id: str) -> bytes:
    """The scope's parts that every value of one database shares."""
    return _lp32(_STATE_DOMAIN) + _lp32(_utf8(database_id))


def _scope_tail(run_id: str, purpose: str, step: str) -> bytes:
    """The scope's parts of one value of a database."""
    if purpose not in PURPOSES:
        raise ValueError("The purpose is not one of snapshot, input, output, terminal, command.")
    if (purpose in _STEP_PURPOSES) != (step != ""):
        raise ValueError("Only the output and command purposes name a step.")
    return _lp32(_utf8(run_id)) + _lp32(_utf8(purpose)) + _lp32(_utf8(step))


def _value_key(state_key: bytes, scope: bytes) -> bytes:
    """HKDF-Expand-SHA256 with L = 32 (RFC 5869 §2.3): one block, T(1) = HMAC(PRK, info ‖ 0x01)."""
    return _hmac_sha256(state_key, _KEY_INFO + scope + b"\x01")


def _aad(scope: bytes, version: int) -> bytes:
    return _AAD_LABEL + scope + struct.pack(">I", version)


class StateKeyRing:
    """The payload state keys of one deployment: the active version seals, every version opens."""

    __slots__ = ("_active", "_keys")

    def __init__(self, active: int, keys: Mapping[int, bytes]) -> None:
        if not 1 <= len(keys) <= MAX_STATE_KEY_VERSIONS or not all(
            _is_valid_version(version) for version in keys
        ):
            raise CoordinatorError(
                Diagnostic(
                    code="coordinator.deployment.configuration",
                    path="/deployment/stateKeys",
                    message=(
                        "There must be 1 to 16 state-key versions, each from 1 to 4,294,967,295."
                    ),
                )
            )
        if not _is_valid_version(active) or active not in keys:
            raise CoordinatorError(
                Diagnostic(
                    code="coordinator.deployment.configuration",
                    path="/deployment/activeStateKey",
                    message="The active state-key version is not one of the configured versions.",
                )
            )
        self._active = active
        self._keys: dict[int, bytes] = {
            version: _check_secret_key(key, f"/deployment/stateKeys/{version}/keyRef")
            for version, key in sorted(keys.items())
        }

    def __repr__(self) -> str:  # never the keys
        return f"StateKeyRing(active={self._active}, versions={list(self._keys)})"

    @property
    def active_version(self) -> int:
        """The version new values are sealed under (`deployment.activeStateKey`)."""
        return self._active

    @property
    def versions(self) -> tuple[int, ...]:
        """Every configured version, ascending; each of them opens values."""
        return tuple(self._keys)

    def _holds(self, key: bytes) -> bool:
        return any(hmac.compare_digest(key, own) for own in self._keys.values())

    def custody_marker(self, database_id: str, version: int) -> str:
        """07 §10: `hex(HMAC-SHA256(stateKey, label ‖ u64be(len(db)) ‖ db ‖ u32be(version)))`.

        It proves which key a version had without revealing it."""
        key = self._keys.get(version)
        if key is None:
            raise KeyError(version)
        message = _STATE_CUSTODY_LABEL + _lp64(_utf8(database_id)) + struct.pack(">I", version)
        return _hmac_sha256(key, message).hex()

    def custody_markers(self, database_id: str) -> dict[int, str]:
        """The marker of every configured version."""
        return {version: self.custody_marker(database_id, version) for version in self._keys}

    def check_custody(
        self, database_id: str, registered: Mapping[int, str], *, registering: bool = False
    ) -> dict[int, str]:
        """Check the configured keys against the markers held in the store's control row.

        Refused (`coordinator.command.state-key-custody`): a registered version that is not
        configured, or a configured key that differs from its marker; and, unless `registering`
        (`migrate` and `apply`, which register new versions), an active version that is not
        registered. Returns the markers of configured versions not yet registered: the ones
        `migrate`/`apply` must store (the service ignores them).
        """
        for version in sorted(registered):
            if version not in self._keys:
                raise CoordinatorError(
                    Diagnostic(
                        code="coordinator.command.state-key-custody",
                        path="/deployment/stateKeys",
                        message=f"State-key version {version} is registered in the store but"
                        " not configured in `deployment.stateKeys`.",
                    )
                )
            if not _same_marker(self.custody_marker(database_id, version), registered[version]):
                raise CoordinatorError(
                    Diagnostic(
                        code="coordinator.command.state-key-custody",
                        path=f"/deployment/stateKeys/{version}",
                        message=f"The configured state key of version {version} differs from"
                        " the key the store registered for it.",
                    )
                )
        if not registering and self._active not in registered:
            raise CoordinatorError(
                Diagnostic(
                    code="coordinator.command.state-key-custody",
                    path="/deployment/activeStateKey",
                    message=f"The active state-key version {self._active} is not registered in"
                    " the store: register it with apply.",
                )
            )
        return {
            version: self.custody_marker(database_id, version)
            for version in self._keys
            if version not in registered
        }


class CommandParts(NamedTuple):
    """The two parts of a sealed `command` value (07 §10 table, §4)."""

    request: object
    preparation: bytes | None


class Sealer:
    """Seals and opens the sensitive values of one database (07 §10)."""

    __slots__ = ("_nonce_source", "_ring", "_scope_head")

    def __init__(
        self,
        ring: StateKeyRing,
        database_id: str,
        *,
        nonce_source: Callable[[int], bytes] = os.urandom,
    ) -> None:
        self._ring = ring
        self._nonce_source = nonce_source
        self._scope_head = _scope_head(database_id)

    def __repr__(self) -> str:
        return f"Sealer({self._ring!r})"

    @property
    def ring(self) -> StateKeyRing:
        return self._ring

    def seal(
        self, value: object, *, run_id: str, purpose: Purpose, step: str = ""
    ) -> dict[str, str]:
        """The stored form of `value`, sealed under the active version for this exact context.

        The plaintext is the RFC 8785 form of `value`; a value with no such form, or one larger
        than 16 MiB, raises ValueError (it is a caller bug, never stored data)."""
        try:
            plaintext = canonical_json(value)
        except CanonicalJsonError:
            plaintext = None
        if plaintext is None:
            raise ValueError("The value has no canonical JSON form.")
        envelope = self._seal_bytes(plaintext, self._scope(run_id, purpose, step))
        return {SEALED_MEMBER: base64.b64encode(envelope).decode("ascii")}

    def seal_text(self, text: bytes, *, run_id: str, purpose: Purpose, step: str = "") -> bytes:
        """The envelope of `text`, the RFC 8785 text of a value that the caller already has
        (the engine keeps inputs, outputs and commands as that text): the value `seal` seals,
        as the store keeps it. Over 16 MiB raises ValueError."""
        return self._seal_bytes(text, self._scope(run_id, purpose, step))

    def open_text(self, kept: bytes, *, run_id: str, purpose: Purpose, step: str = "") -> bytes:
        """The plaintext sealed in a kept value (the envelope, or the stored form's JSON text
        of an earlier store): the RFC 8785 text it was sealed from. Every failure is
        `protected-state-invalid`."""
        return self._open_bytes(kept, self._scope(run_id, purpose, step))

    def open(self, stored: object, *, run_id: str, purpose: Purpose, step: str = "") -> object:
        """The value sealed in `stored` (the stored form, or a kept value) for this exact
        context; every failure is `protected-state-invalid`, never a partial value."""
        plaintext = self._open_bytes(stored, self._scope(run_id, purpose, step))
        try:
            # authenticated: bytes that `seal` or `seal_text` made with `canonical_json`
            value: object = parse_canonical_json(plaintext)
        except ValueError:
            value = _UNREADABLE
        if value is _UNREADABLE:
            raise _protected_state_invalid()
        return value

    def seal_command(
        self, request: object, preparation: bytes | None, *, run_id: str, step: str
    ) -> dict[str, str]:
        """Seal a frozen command: `{"request": request, "preparation": <base64 or null>}`."""
        encoded = None if preparation is None else base64.b64encode(preparation).decode("ascii")
        return self.seal(
            {"request": request, "preparation": encoded},
            run_id=run_id,
            purpose="command",
            step=step,
        )

    def seal_command_text(
        self, request: bytes, preparation: bytes | None, *, run_id: str, step: str
    ) -> bytes:
        """`seal_command`'s value as the store keeps it (`seal_text`), from the RFC 8785 text of
        the request: the command's own RFC 8785 text is written around it (its two members in
        their canonical order, a base64 text needing no escape)."""
        encoded = b"null" if preparation is None else b'"' + base64.b64encode(preparation) + b'"'
        text = b'{"preparation":' + encoded + b',"request":' + request + b"}"
        return self.seal_text(text, run_id=run_id, purpose="command", step=step)

    def open_command(self, stored: object, *, run_id: str, step: str) -> CommandParts:
        """Open a frozen command; a value of another shape is `protected-state-invalid`."""
        value = self.open(stored, run_id=run_id, purpose="command", step=step)
        parts: CommandParts | None = None
        if isinstance(value, dict) and set(value) == {"request", "preparation"}:
            preparation = value["preparation"]
            if preparation is None:
                parts = CommandParts(value["request"], None)
            elif isinstance(preparation, str):
                decoded = _strict_b64decode(preparation)
                if decoded is not None:
                    parts = CommandParts(value["request"], decoded)
        if parts is None:
            raise _protected_state_invalid()
        return parts

    # ---------------------------------------------------------------------------------------

    def _scope(self, run_id: str, purpose: str, step: str) -> bytes:
        return self._scope_head + _scope_tail(run_id, purpose, step)

    def _seal_bytes(self, plaintext: bytes, scope: bytes) -> bytes:
        if len(plaintext) > MAX_PLAINTEXT_BYTES:
            raise ValueError("The value is larger than 16 MiB.")
        version = self._ring.active_version
        nonce = self._nonce_source(_NONCE_BYTES)
        if not isinstance(nonce, bytes) or len(nonce) != _NONCE_BYTES:
            raise RuntimeError("The nonce source did not return 12 bytes.")
        key = _value_key(self._ring._keys[version], scope)
        sealed = AESGCM(key).encrypt(nonce, plaintext, _aad(scope, version))
        return _FORMAT + struct.pack(">I", version) + nonce + sealed

    def _open_bytes(self, stored: object, scope: bytes) -> bytes:
        envelope = _kept_envelope(stored) if isinstance(stored, bytes) else _envelope_of(stored)
        if envelope is None or len(envelope) < ENVELOPE_OVERHEAD or envelope[:1] != _FORMAT:
            raise _protected_state_invalid()
        (version,) = struct.unpack(">I", envelope[1:5])
        state_key = self._ring._keys.get(version)
        if state_key is None:
            raise _protected_state_invalid()
        key = _value_key(state_key, scope)
        try:
            plaintext: bytes | None = AESGCM(key).decrypt(
                envelope[5:_HEADER_BYTES], envelope[_HEADER_BYTES:], _aad(scope, version)
            )
        except InvalidTag:
            plaintext = None
        if plaintext is None or len(plaintext) > MAX_PLAINTEXT_BYTES:
            raise _protected_state_invalid()
        return plaintext


_UNREADABLE: Final = object()


def _strict_b64decode(text: str) -> bytes | None:
    """Standard-alphabet, padded base64 in its one canonical spelling, else None."""
    try:
        # strict: only alphabet characters, correct and contiguous padding, nothing after it
        data = binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (UnicodeEncodeError, binascii.Error):
        return None
    if len(text) != 4 * ((len(data) + 2) // 3):
        return None  # e.g. a whole quantum of padding, which strict mode lets through
    remainder = len(data) % 3
    if remainder and base64.b64encode(data[-remainder:]).decode("ascii") != text[-4:]:
        return None  # non-zero pad bits: another spelling of the same bytes
    return data


def _kept_envelope(kept: bytes) -> bytes | None:
    """The envelope of a kept value: itself, or the one in an earlier store's stored form."""
    if kept[:1] == _FORMAT:
        return kept
    try:
        stored = json.loads(kept)
    except (ValueError, UnicodeDecodeError):
        return None
    return _envelope_of(stored)


def _envelope_of(stored: object) -> bytes | None:
    if not isinstance(stored, Mapping) or len(stored) != 1:
        return None
    text = stored.get(SEALED_MEMBER)
    if not isinstance(text, str) or len(text) > _MAX_STORED_CHARS:
        return None
    return _strict_b64decode(text)


class AdmissionKey:
    """The deployment's commitment key (07 §3): keyed, stable identities that hide their parts."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes, *, state_keys: StateKeyRing | None = None) -> None:
        checked = _check_secret_key(key, "/deployment/admissionKeyRef")
        if state_keys is not None and state_keys._holds(checked):
            raise CoordinatorError(
                Diagnostic(
                    code="coordinator.secret.invalid",
                    path="/deployment/admissionKeyRef",
                    message="The admission key is the same as a state key.",
                )
            )
        self._key = checked

    def __repr__(self) -> str:  # never the key
        return "AdmissionKey(<redacted>)"

    def commitment(self, purpose: str, parts: Sequence[str | bytes]) -> str:
        """`hex(HMAC-SHA256(admissionKey, "registry-coordinator/commitment/v1" ‖ u64be-framed
        purpose and parts))`: 64 lowercase hex. Strings are taken as UTF-8."""
        message = [_COMMITMENT_LABEL, _lp64(_utf8(purpose))]
        message.extend(_lp64(part if isinstance(part, bytes) else _utf8(part)) for part in parts)
        return _hmac_sha256(self._key, b"".join(message)).hex()

    def owner_api(self, database_id: str, iss: str, sub: str) -> str:
        return self.commitment("owner", [database_id, iss, sub])

    def owner_event(self, database_id: str, source_name: str, trigger_id: str) -> str:
        return self.commitment(
            "owner", [database_id, "event-source:" + source_name, "trigger:" + trigger_id]
        )

    def start_identity(self, database_id: str, owner: str, workflow_id: str, key: str) -> str:
        """`key` is the `Idempotency-Key` header (API) or the event's `ce-id`."""
        return self.commitment("start", [database_id, owner, workflow_id, key])

    def input_digest_api(self, start_identity: str, revision: str, input_value: object) -> str:
        return self.commitment("input", [start_identity, revision, canonical_json(input_value)])

    def input_digest_event(self, start_identity: str, event_body: object) -> str:
        return self.commitment("event", [start_identity, canonical_json(event_body)])

    def command_key(self, database_id: str, start_identity: str, step_id: str) -> str:
        """The product command key: identical across restarts, retries, `retry-same` and
        state-key rotation (it depends only on the admission key)."""
        return self.commitment("command", [database_id, start_identity, step_id])

    def completion_reference(self, database_id: str, connection_name: str, reference: str) -> str:
        return self.commitment("completion", [database_id, connection_name, reference])

    def custody_marker(self, database_id: str) -> str:
        return self.commitment("admission-key-custody", [database_id])

    def check_custody(self, database_id: str, registered: str) -> None:
        """Refuse a key other than the one the store was created with."""
        if not _same_marker(self.custody_marker(database_id), registered):
            raise CoordinatorError(
                Diagnostic(
                    code="coordinator.command.admission-key-custody",
                    path="/deployment/admissionKeyRef",
                    message="The configured admission key (`deployment.admissionKeyRef`)"
                    " differs from the one the store was created with.",
                )
            )
