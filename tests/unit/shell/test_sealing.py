"""Sealing, key custody and commitments (contract 07 §3, §10; key forms 05 §2.2, §8).

Vectors are copied from 07 §3 and §10. Every refusal is a CoordinatorError with the contract's
code, and neither the plaintext nor a key ever appears in a sealed value or an error.
"""

from __future__ import annotations

import base64
import json
import struct
import traceback
from collections.abc import Callable
from functools import partial
from typing import cast

import pytest
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
from hypothesis import given
from hypothesis import strategies as st

from coordinator_core.errors import CoordinatorError
from coordinator_core.shell import sealing
from coordinator_core.shell.sealing import (
    ENVELOPE_OVERHEAD,
    PROTECTED_STATE_INVALID,
    SEALED_MEMBER,
    AdmissionKey,
    CommandParts,
    Sealer,
    StateKeyRing,
)
from coordinator_core.values import canonical_json

DB = "reviewed-notice-dev"
RUN = "0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4f"
KEY_1 = b"\x42" * 32
KEY_2 = bytes(range(100, 132))
ADMISSION = bytes(range(32))
CANARY = "canary-5c1e9d-plaintext"


def counting_nonces() -> Callable[[int], bytes]:
    """A deterministic nonce source for tests that need one (07 §10 asks it to be injectable)."""
    counter = iter(range(1, 2**32))

    def source(size: int) -> bytes:
        return next(counter).to_bytes(size, "big")

    return source


def ring_1() -> StateKeyRing:
    return StateKeyRing(1, {1: KEY_1})


def sealer(ring: StateKeyRing | None = None, database: str = DB) -> Sealer:
    return Sealer(ring or ring_1(), database)


def envelope(stored: dict[str, str]) -> bytes:
    return base64.b64decode(stored[SEALED_MEMBER])


def stored_of(raw: bytes) -> dict[str, str]:
    return {SEALED_MEMBER: base64.b64encode(raw).decode("ascii")}


def refused(action: Callable[[], object]) -> CoordinatorError:
    with pytest.raises(CoordinatorError) as caught:
        action()
    return caught.value


def all_text_of(error: BaseException) -> str:
    """Everything an error could show: message, repr, diagnostic and the formatted chain."""
    parts = [str(error), repr(error), "".join(traceback.format_exception(error))]
    if isinstance(error, CoordinatorError):
        parts.append(json.dumps(error.diagnostic.to_json()))
    seen: BaseException | None = error
    while seen is not None:
        parts.append(repr(seen))
        parts.extend(repr(arg) for arg in seen.args)
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


# --- contract vectors ---------------------------------------------------------------------------


def test_sealed_value_matches_the_contract_vector() -> None:
    vector = Sealer(ring_1(), DB, nonce_source=lambda size: bytes(range(size)))
    stored = vector.seal(
        {"applicationId": "a8d12546-b2ca-46ac-b12b-06c199041bb2"}, run_id=RUN, purpose="input"
    )
    assert stored == {
        "sealedCoordinatorV1": "AQAAAAEAAQIDBAUGBwgJCgt/0fkZ7S36igENQmmm7ZpK+xF044HwY5ws02uTe34wpMdO2ZBWx1DmBKO59r+byvLJsH9Jtqel/3pLHHyCwNG0RljVXDctNRo="
    }
    assert vector.open(stored, run_id=RUN, purpose="input") == {
        "applicationId": "a8d12546-b2ca-46ac-b12b-06c199041bb2"
    }


def test_derived_value_key_matches_the_contract_vector_and_rfc5869() -> None:
    scope = sealing._context_parts(DB, RUN, "input", "")
    derived = sealing._value_key(KEY_1, scope)
    assert derived.hex() == "14ae7aa81b676253c0e198c2f733f50bdec9e7a04b1413e3149db6227c20eedd"
    info = b"registry-platform/sealed-value-key/v1" + scope
    assert derived == HKDFExpand(SHA256(), 32, info).derive(KEY_1)


def test_associated_data_layout_is_label_scope_and_version() -> None:
    def lp32(part: bytes) -> bytes:
        return struct.pack(">I", len(part)) + part

    scope = sealing._context_parts(DB, RUN, "output", "request-review")
    expected = b"".join(
        lp32(part)
        for part in (
            b"registry-coordinator/state/v1",
            DB.encode(),
            RUN.encode(),
            b"output",
            b"request-review",
        )
    )
    assert scope == expected
    assert sealing._aad(scope, 7) == b"registry-platform/sealed-value-aad/v1" + expected + (
        b"\x00\x00\x00\x07"
    )


def test_state_key_custody_marker_matches_the_contract_vector() -> None:
    assert (
        ring_1().custody_marker(DB, 1)
        == "3f66eae894c6567d45436eac0488eeaa8e7796f6cdb19a24899547f9c14774df"
    )


def test_commitments_match_the_contract_vectors() -> None:
    key = AdmissionKey(ADMISSION)
    owner = key.owner_api(DB, "http://127.0.0.1:8100", "user-1")
    assert owner == "71c81206d5f6b89b000af2820e4d807ced29d408b206c98a73f0bb4eb627ad9c"
    start = key.start_identity(DB, owner, "reviewed-notice", "key-1")
    assert start == "aa8d2cbdabe3681c7e6c8e26fb408414bf7657dc4fbf497efdb41bb0dffe70fc"
    assert (
        key.command_key(DB, start, "request-review")
        == "ba6cb370cb772252bdd25dae1d8bdc6a126858d92eb9b079f62246f432b2d1b3"
    )


def test_commitments_frame_every_part_so_boundaries_cannot_shift() -> None:
    key = AdmissionKey(ADMISSION)
    assert key.commitment("owner", ["ab", "c"]) != key.commitment("owner", ["a", "bc"])
    assert key.commitment("owner", ["a"]) != key.commitment("owne", ["ra"])
    assert key.commitment("owner", ["a"]) == key.commitment("owner", [b"a"])


def test_named_commitments_use_their_contract_purposes_and_parts() -> None:
    key = AdmissionKey(ADMISSION)
    start = "s" * 64
    assert key.owner_event(DB, "casework", "t1") == key.commitment(
        "owner", [DB, "event-source:casework", "trigger:t1"]
    )
    assert key.input_digest_api(start, "sha256:r", {"b": 1, "a": [2]}) == key.commitment(
        "input", [start, "sha256:r", b'{"a":[2],"b":1}']
    )
    assert key.input_digest_event(start, {"z": None}) == key.commitment(
        "event", [start, b'{"z":null}']
    )
    assert key.completion_reference(DB, "casework", "req-1") == key.commitment(
        "completion", [DB, "casework", "req-1"]
    )
    assert key.custody_marker(DB) == key.commitment("admission-key-custody", [DB])


def test_command_key_does_not_change_with_state_key_rotation() -> None:
    # 07 §3: identical across restarts, retries, retry-same and key rotation.
    before = AdmissionKey(ADMISSION, state_keys=ring_1())
    after = AdmissionKey(ADMISSION, state_keys=StateKeyRing(2, {1: KEY_1, 2: KEY_2}))
    assert before.command_key(DB, "s", "step") == after.command_key(DB, "s", "step")


# --- round trip -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("purpose", "step"),
    [("snapshot", ""), ("input", ""), ("output", "read"), ("terminal", ""), ("command", "send")],
)
def test_every_purpose_round_trips(purpose: sealing.Purpose, step: str) -> None:
    value = {"nested": [1, 2.5, None, True, "é"], "empty": {}}
    box = sealer()
    assert (
        box.open(
            box.seal(value, run_id=RUN, purpose=purpose, step=step),
            run_id=RUN,
            purpose=purpose,
            step=step,
        )
        == value
    )


def test_plaintext_is_the_canonical_json_of_the_value() -> None:
    box = sealer()
    stored = box.seal({"b": 2.0, "a": "x"}, run_id=RUN, purpose="input")
    scope = sealing._context_parts(DB, RUN, "input", "")
    assert box._open_bytes(stored, scope) == b'{"a":"x","b":2}'


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=20,
)


@given(value=json_values, run=st.text(min_size=1, max_size=40).filter(str.isprintable))
def test_any_json_value_round_trips(value: object, run: str) -> None:
    box = sealer()
    assert (
        box.open(box.seal(value, run_id=run, purpose="input"), run_id=run, purpose="input") == value
    )


def test_command_round_trips_with_and_without_preparation() -> None:
    box = sealer()
    for preparation in (b"\x00\xffprepared", b"", None):
        stored = box.seal_command({"path": "/x"}, preparation, run_id=RUN, step="send")
        assert box.open_command(stored, run_id=RUN, step="send") == CommandParts(
            {"path": "/x"}, preparation
        )


@given(value=json_values)
def test_a_canonical_text_sealed_as_the_store_keeps_it_opens_in_every_kept_form(
    value: object,
) -> None:
    """`seal_text` gives the envelope (what the store keeps); it opens as the value and as the
    exact text it sealed, and so does the stored form of 07 §10, as an object or as the JSON
    text a store before schema version 3 kept."""
    box = sealer()
    text = canonical_json(value)
    envelope = box.seal_text(text, run_id=RUN, purpose="input")
    assert envelope[:1] == b"\x01" and len(envelope) == len(text) + ENVELOPE_OVERHEAD
    stored = {SEALED_MEMBER: base64.b64encode(envelope).decode("ascii")}
    for kept in (envelope, stored, canonical_json(stored)):
        assert box.open(kept, run_id=RUN, purpose="input") == value
    for kept in (envelope, canonical_json(stored)):
        assert box.open_text(kept, run_id=RUN, purpose="input") == text


def test_a_kept_value_altered_or_opened_elsewhere_is_refused() -> None:
    box = sealer()
    envelope = box.seal_text(b'{"a":1}', run_id=RUN, purpose="output", step="read")
    altered = envelope[:-1] + bytes([envelope[-1] ^ 1])
    for attempt in (
        partial(box.open_text, altered, run_id=RUN, purpose="output", step="read"),
        partial(box.open_text, envelope, run_id=RUN, purpose="output", step="send"),
        partial(box.open_text, envelope, run_id=RUN, purpose="terminal"),
        partial(box.open_text, b"\x02" + envelope[1:], run_id=RUN, purpose="output", step="read"),
        partial(box.open_text, b'{"sealedCoordinatorV1":1}', run_id=RUN, purpose="terminal"),
        partial(box.open_text, b"", run_id=RUN, purpose="terminal"),
    ):
        assert refused(attempt).code == PROTECTED_STATE_INVALID


def test_a_command_sealed_from_its_request_text_is_the_command_seal_command_seals() -> None:
    box = sealer()
    request = {"path": "/x", "query": {"b": [1, 2.5, None], "a": "é"}}
    for preparation in (b"\x00\xffprepared", b"", None):
        kept = box.seal_command_text(canonical_json(request), preparation, run_id=RUN, step="send")
        assert box.open_command(kept, run_id=RUN, step="send") == CommandParts(request, preparation)
        encoded = None if preparation is None else base64.b64encode(preparation).decode("ascii")
        assert box.open_text(kept, run_id=RUN, purpose="command", step="send") == canonical_json(
            {"request": request, "preparation": encoded}
        )


def test_command_of_another_shape_is_protected_state_invalid() -> None:
    box = sealer()
    for value in (
        {"request": 1},
        {"request": 1, "preparation": 5},
        {"request": 1, "preparation": "not base64!"},
        {"request": 1, "preparation": None, "extra": 0},
        [1],
    ):
        stored = box.seal(value, run_id=RUN, purpose="command", step="send")
        error = refused(partial(box.open_command, stored, run_id=RUN, step="send"))
        assert error.code == PROTECTED_STATE_INVALID


# --- associated data --------------------------------------------------------------------------


def test_value_opened_in_another_context_is_refused() -> None:
    box = sealer()
    stored = box.seal({"v": CANARY}, run_id=RUN, purpose="output", step="read")
    attempts: list[Callable[[], object]] = [
        lambda: box.open(stored, run_id="other-run", purpose="output", step="read"),
        lambda: box.open(stored, run_id=RUN, purpose="command", step="read"),
        lambda: box.open(stored, run_id=RUN, purpose="output", step="other-step"),
        lambda: sealer(database="other-database").open(
            stored, run_id=RUN, purpose="output", step="read"
        ),
    ]
    for attempt in attempts:
        assert refused(attempt).code == PROTECTED_STATE_INVALID
    assert box.open(stored, run_id=RUN, purpose="output", step="read") == {"v": CANARY}


def test_scope_parts_are_length_framed_so_they_cannot_shift() -> None:
    box = Sealer(ring_1(), "db")
    stored = box.seal(1, run_id="ab", purpose="output", step="c")
    assert refused(lambda: box.open(stored, run_id="a", purpose="output", step="bc"))
    assert refused(
        lambda: Sealer(ring_1(), "dba").open(stored, run_id="b", purpose="output", step="c")
    )


def test_purpose_and_step_must_follow_the_contract_table() -> None:
    box = sealer()
    with pytest.raises(ValueError):
        box.seal(1, run_id=RUN, purpose="output")  # output names a step
    with pytest.raises(ValueError):
        box.seal(1, run_id=RUN, purpose="input", step="s")  # input does not
    with pytest.raises(ValueError):
        box.seal(1, run_id=RUN, purpose="secrets")  # type: ignore[arg-type]


# --- tampering --------------------------------------------------------------------------------


def test_one_flipped_bit_anywhere_is_refused() -> None:
    box = sealer()
    stored = box.seal({"v": CANARY}, run_id=RUN, purpose="input")
    raw = envelope(stored)
    for index in range(len(raw)):
        for bit in range(8):
            tampered = bytearray(raw)
            tampered[index] ^= 1 << bit
            error = refused(
                partial(box.open, stored_of(bytes(tampered)), run_id=RUN, purpose="input")
            )
            assert error.code == PROTECTED_STATE_INVALID


def test_truncated_or_extended_envelopes_are_refused() -> None:
    box = sealer()
    raw = envelope(box.seal({"v": 1}, run_id=RUN, purpose="input"))
    for candidate in (raw[:-1], raw[:ENVELOPE_OVERHEAD], raw[:5], b"", raw + b"\x00"):
        assert refused(partial(box.open, stored_of(candidate), run_id=RUN, purpose="input"))


@pytest.mark.parametrize(
    "stored",
    [
        None,
        "text",
        {},
        {SEALED_MEMBER: 1},
        {SEALED_MEMBER: "@@@@"},
        {SEALED_MEMBER: "AQAAAAE"},  # missing padding
        {SEALED_MEMBER: "QR=="},  # non-canonical pad bits
        {SEALED_MEMBER: "ü"},
        {"sealedCoordinatorV2": "AAAA"},
    ],
)
def test_malformed_stored_forms_are_protected_state_invalid(stored: object) -> None:
    assert refused(lambda: sealer().open(stored, run_id=RUN, purpose="input")).code == (
        PROTECTED_STATE_INVALID
    )


def test_only_the_canonical_base64_spelling_of_a_valid_envelope_opens() -> None:
    box = sealer()
    stored = box.seal("abc", run_id=RUN, purpose="input")  # 33 + 5 bytes: one pad character
    text = stored[SEALED_MEMBER]
    assert text.endswith("=") and not text.endswith("==")
    last = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".index(text[-2])
    other_pad_bits = (
        text[:-2]
        + "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[last ^ 1]
        + "="
    )
    assert base64.b64decode(other_pad_bits) == base64.b64decode(text)  # same bytes, other text
    for spelling in (other_pad_bits, text + "====", text + "\n", " " + text, text[:-1]):
        assert refused(partial(box.open, {SEALED_MEMBER: spelling}, run_id=RUN, purpose="input"))
    assert box.open(stored, run_id=RUN, purpose="input") == "abc"


def test_extra_member_beside_the_envelope_is_refused() -> None:
    box = sealer()
    stored: dict[str, object] = dict(box.seal(1, run_id=RUN, purpose="input"))
    stored["note"] = "x"
    assert refused(lambda: box.open(stored, run_id=RUN, purpose="input"))


def test_authenticated_plaintext_that_is_not_json_is_refused() -> None:
    box = sealer()
    scope = sealing._context_parts(DB, RUN, "input", "")
    stored = box._seal_bytes(b"\xff" + CANARY.encode() + b"{", scope)
    error = refused(lambda: box.open(stored, run_id=RUN, purpose="input"))
    assert error.code == PROTECTED_STATE_INVALID
    assert CANARY not in all_text_of(error)


# --- keys and versions ------------------------------------------------------------------------


def test_a_wrong_key_for_the_same_version_is_refused() -> None:
    stored = sealer().seal(1, run_id=RUN, purpose="input")
    other = sealer(StateKeyRing(1, {1: KEY_2}))
    assert refused(lambda: other.open(stored, run_id=RUN, purpose="input")).code == (
        PROTECTED_STATE_INVALID
    )


def test_old_key_version_still_opens_after_rotation() -> None:
    old = sealer().seal({"v": "before"}, run_id=RUN, purpose="input")
    rotated = sealer(StateKeyRing(2, {1: KEY_1, 2: KEY_2}))
    assert rotated.open(old, run_id=RUN, purpose="input") == {"v": "before"}
    new = rotated.seal({"v": "after"}, run_id=RUN, purpose="input")
    assert envelope(new)[:5] == b"\x01\x00\x00\x00\x02"  # new values use the active version
    assert envelope(old)[:5] == b"\x01\x00\x00\x00\x01"  # old ones are never re-encrypted
    assert rotated.open(new, run_id=RUN, purpose="input") == {"v": "after"}


def test_unknown_key_version_is_refused() -> None:
    stored = sealer().seal(1, run_id=RUN, purpose="input")
    without_1 = sealer(StateKeyRing(2, {2: KEY_2}))
    assert refused(lambda: without_1.open(stored, run_id=RUN, purpose="input")).code == (
        PROTECTED_STATE_INVALID
    )


def test_envelope_version_must_equal_the_version_bound_into_the_aad() -> None:
    # Same key under versions 1 and 2: only the version bound into the AAD tells them apart.
    box = sealer(StateKeyRing(1, {1: KEY_1, 2: KEY_1}))
    raw = bytearray(envelope(box.seal(1, run_id=RUN, purpose="input")))
    raw[1:5] = struct.pack(">I", 2)
    assert refused(lambda: box.open(stored_of(bytes(raw)), run_id=RUN, purpose="input"))
    raw[1:5] = struct.pack(">I", 0)
    assert refused(lambda: box.open(stored_of(bytes(raw)), run_id=RUN, purpose="input"))


@pytest.mark.parametrize(
    ("active", "keys", "code", "path"),
    [
        (1, {1: b"\x42" * 31}, "coordinator.secret.invalid", "/deployment/stateKeys/1/keyRef"),
        (1, {1: b"\x00" * 32}, "coordinator.secret.invalid", "/deployment/stateKeys/1/keyRef"),
        (1, {1: "x" * 32}, "coordinator.secret.invalid", "/deployment/stateKeys/1/keyRef"),
        (2, {1: KEY_1}, "coordinator.deployment.configuration", "/deployment/activeStateKey"),
        (1, {}, "coordinator.deployment.configuration", "/deployment/stateKeys"),
        (0, {0: KEY_1}, "coordinator.deployment.configuration", "/deployment/stateKeys"),
        (2**32, {2**32: KEY_1}, "coordinator.deployment.configuration", "/deployment/stateKeys"),
        (
            1,
            {v: bytes([v]) * 32 for v in range(1, 18)},
            "coordinator.deployment.configuration",
            "/deployment/stateKeys",
        ),
    ],
)
def test_state_key_configuration_is_checked(
    active: int, keys: dict[int, bytes], code: str, path: str
) -> None:
    error = refused(lambda: StateKeyRing(active, keys))
    assert (error.code, error.diagnostic.path) == (code, path)


def test_sixteen_versions_and_the_largest_version_are_accepted() -> None:
    ring = StateKeyRing(2**32 - 1, {2**32 - 1: KEY_1, **{v: KEY_2 for v in range(1, 16)}})
    assert len(ring.versions) == 16
    stored = Sealer(ring, DB).seal(1, run_id=RUN, purpose="input")
    assert envelope(stored)[1:5] == b"\xff\xff\xff\xff"
    assert Sealer(ring, DB).open(stored, run_id=RUN, purpose="input") == 1  # and opened
    markers = {version: ring.custody_marker(DB, version) for version in ring.versions}
    assert ring.check_custody(DB, markers) == {}  # its custody marker too


def test_admission_key_form_and_separation_are_checked() -> None:
    for bad in (b"\x00" * 32, b"\x01" * 33, b""):
        error = refused(partial(AdmissionKey, bad))
        assert (error.code, error.diagnostic.path) == (
            "coordinator.secret.invalid",
            "/deployment/admissionKeyRef",
        )
    error = refused(lambda: AdmissionKey(KEY_2, state_keys=StateKeyRing(1, {1: KEY_1, 2: KEY_2})))
    assert (error.code, error.diagnostic.path, error.diagnostic.message) == (
        "coordinator.secret.invalid",
        "/deployment/admissionKeyRef",
        "The admission key is the same as a state key.",
    )


def test_key_and_sealed_value_refusals_say_what_is_wrong_and_what_to_do() -> None:
    # The standards' "clear error with a stable code and a repair hint", never the key or value.
    bad_key = refused(partial(AdmissionKey, b"\x01" * 33)).diagnostic
    assert bad_key.message == "The key is not exactly 32 raw bytes, or it is all zero."
    stored = sealer().seal(CANARY, run_id=RUN, purpose="input")
    unopened = refused(partial(sealer().open, stored, run_id=RUN, purpose="output", step="s"))
    assert unopened.code == PROTECTED_STATE_INVALID
    assert unopened.diagnostic.message == "A sealed value could not be opened."
    assert unopened.diagnostic.hint


# --- custody ----------------------------------------------------------------------------------


def test_custody_accepts_the_registered_keys_and_lists_new_versions() -> None:
    first = StateKeyRing(1, {1: KEY_1})
    registered = first.custody_markers(DB)
    assert first.check_custody(DB, registered) == {}
    rotated = StateKeyRing(1, {1: KEY_1, 2: KEY_2})
    new = rotated.check_custody(DB, registered, registering=True)
    assert new == {2: rotated.custody_marker(DB, 2)}
    switched = StateKeyRing(2, {1: KEY_1, 2: KEY_2})
    assert switched.check_custody(DB, {**registered, **new}) == {}


@pytest.mark.parametrize(
    ("ring", "registered_keys", "path", "message"),
    [
        # a registered version missing from the configuration
        (
            StateKeyRing(2, {2: KEY_2}),
            {1: KEY_1, 2: KEY_2},
            "/deployment/stateKeys",
            "State-key version 1 is registered in the store but not configured in"
            " `deployment.stateKeys`.",
        ),
        # a configured key that does not match its marker
        (
            StateKeyRing(1, {1: KEY_2}),
            {1: KEY_1},
            "/deployment/stateKeys/1",
            "The configured state key of version 1 differs from the key the store registered"
            " for it.",
        ),
        # the active version not registered
        (
            StateKeyRing(2, {1: KEY_1, 2: KEY_2}),
            {1: KEY_1},
            "/deployment/activeStateKey",
            "The active state-key version 2 is not registered in the store: register it with"
            " apply.",
        ),
    ],
)
def test_custody_refusals_name_the_code_and_the_key_version(
    ring: StateKeyRing, registered_keys: dict[int, bytes], path: str, message: str
) -> None:
    registered = {
        version: StateKeyRing(version, {version: key}).custody_marker(DB, version)
        for version, key in registered_keys.items()
    }
    error = refused(lambda: ring.check_custody(DB, registered))
    assert (error.code, error.diagnostic.path) == ("coordinator.command.state-key-custody", path)
    assert error.diagnostic.effective_message == message


def test_apply_refuses_a_configured_key_that_differs_from_its_marker() -> None:
    registered = StateKeyRing(1, {1: KEY_1}).custody_markers(DB)
    changed = StateKeyRing(1, {1: KEY_2})
    assert refused(lambda: changed.check_custody(DB, registered, registering=True)).code == (
        "coordinator.command.state-key-custody"
    )


def test_custody_marker_depends_on_database_and_version() -> None:
    ring = StateKeyRing(1, {1: KEY_1, 2: KEY_1})
    assert ring.custody_marker(DB, 1) != ring.custody_marker(DB, 2)
    assert ring.custody_marker(DB, 1) != ring.custody_marker("other", 1)
    assert refused(lambda: ring.check_custody("other", ring.custody_markers(DB)))


def test_malformed_stored_markers_are_refused_not_crashed() -> None:
    ring = ring_1()
    markers: list[object] = ["é" * 64, "", None, 7]
    for marker in markers:
        registered = cast(dict[int, str], {1: marker})
        assert refused(partial(ring.check_custody, DB, registered)).code == (
            "coordinator.command.state-key-custody"
        )


def test_admission_key_custody_refuses_another_key() -> None:
    registered = AdmissionKey(ADMISSION).custody_marker(DB)
    AdmissionKey(ADMISSION).check_custody(DB, registered)
    error = refused(lambda: AdmissionKey(KEY_2).check_custody(DB, registered))
    assert error.code == "coordinator.command.admission-key-custody"
    assert error.diagnostic.path == "/deployment/admissionKeyRef"  # where the operator looks
    assert "admissionKeyRef" in (error.diagnostic.message or "")


# --- nonces, sizes, canaries ------------------------------------------------------------------


def test_nonces_never_repeat_across_ten_thousand_seals() -> None:
    box = sealer()
    nonces = {envelope(box.seal(0, run_id=RUN, purpose="input"))[5:17] for _ in range(10_000)}
    assert len(nonces) == 10_000


def test_seal_takes_a_fresh_nonce_from_the_source_each_time() -> None:
    box = Sealer(ring_1(), DB, nonce_source=counting_nonces())
    first = envelope(box.seal(0, run_id=RUN, purpose="input"))
    second = envelope(box.seal(0, run_id=RUN, purpose="input"))
    assert first[5:17] == (1).to_bytes(12, "big")
    assert second[5:17] == (2).to_bytes(12, "big")
    assert first[17:] != second[17:]


def test_a_nonce_source_of_the_wrong_size_is_refused() -> None:
    box = Sealer(ring_1(), DB, nonce_source=lambda size: b"\x00" * (size - 1))
    with pytest.raises(RuntimeError):
        box.seal(0, run_id=RUN, purpose="input")


def test_envelope_overhead_is_a_constant_33_bytes() -> None:
    box = sealer()
    assert ENVELOPE_OVERHEAD == 33
    for size in (0, 1, 15, 16, 17, 255, 2048, 65_537):
        value = "x" * size
        plaintext_length = len(json.dumps(value))
        stored = box.seal(value, run_id=RUN, purpose="input")
        assert len(envelope(stored)) - plaintext_length == ENVELOPE_OVERHEAD


def test_a_value_of_exactly_sixteen_mebibytes_is_sealed_and_opened() -> None:
    # 07 §10: "at most 16 MiB" of plaintext, in both directions and in the stored form.
    box = sealer()
    largest = "x" * (sealing.MAX_PLAINTEXT_BYTES - 2)  # its JSON text: the quotes around it
    stored = box.seal(largest, run_id=RUN, purpose="input")
    assert len(envelope(stored)) == sealing.MAX_PLAINTEXT_BYTES + ENVELOPE_OVERHEAD
    assert box.open(stored, run_id=RUN, purpose="input") == largest
    text = canonical_json(largest)
    kept = box.seal_text(text, run_id=RUN, purpose="input")
    assert box.open_text(kept, run_id=RUN, purpose="input") == text
    with pytest.raises(ValueError):
        box.seal_text(text + b" ", run_id=RUN, purpose="input")


def test_oversized_or_non_json_values_are_not_sealed() -> None:
    box = sealer()
    with pytest.raises(ValueError) as too_large:
        box.seal("x" * sealing.MAX_PLAINTEXT_BYTES, run_id=RUN, purpose="input")
    with pytest.raises(ValueError) as not_json:
        box.seal({"v": CANARY, "n": float("nan")}, run_id=RUN, purpose="input")
    for error in (too_large.value, not_json.value):
        assert CANARY not in all_text_of(error)


@pytest.mark.parametrize(
    ("purpose", "step"), [("input", ""), ("output", "s"), ("command", "s"), ("snapshot", "")]
)
def test_canary_never_appears_in_sealed_bytes_or_any_error(
    purpose: sealing.Purpose, step: str
) -> None:
    box = sealer()
    stored = box.seal({"secret": CANARY}, run_id=RUN, purpose=purpose, step=step)
    assert CANARY not in json.dumps(stored)
    assert CANARY.encode() not in envelope(stored)
    wrong_key = sealer(StateKeyRing(1, {1: KEY_2}))
    errors = [
        refused(lambda: box.open(stored, run_id="other", purpose=purpose, step=step)),
        refused(lambda: wrong_key.open(stored, run_id=RUN, purpose=purpose, step=step)),
    ]
    for error in errors:
        text = all_text_of(error)
        assert CANARY not in text
        assert KEY_1.hex() not in text and KEY_2.hex() not in text
        assert error.__cause__ is None and error.__context__ is None


def test_keys_never_appear_in_a_repr() -> None:
    ring = StateKeyRing(2, {1: KEY_1, 2: KEY_2})
    texts = [repr(ring), repr(Sealer(ring, DB)), repr(AdmissionKey(ADMISSION))]
    for text in texts:
        for key in (KEY_1, KEY_2, ADMISSION):
            assert key.hex() not in text and repr(key) not in text


def test_a_lone_surrogate_in_a_context_string_raises_without_quoting_it() -> None:
    with pytest.raises(ValueError) as caught:
        sealer().seal(1, run_id="run-\ud800", purpose="input")
    assert "\ud800" not in str(caught.value) and caught.value.__context__ is None


def test_public_surface_is_pinned() -> None:
    assert set(sealing.__all__) == {
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
    }
    for name in sealing.__all__:
        assert hasattr(sealing, name)
