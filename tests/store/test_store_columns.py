"""How the store keeps sealed values and keyed identities (07 §3, §10, §14; issue 9): a sealed
value as its envelope, a commitment or digest as its bytes on PostgreSQL, each read back as the
exact value written; anything else is kept or refused, never altered."""

from __future__ import annotations

import base64
import uuid

import pytest
from sqlalchemy.dialects import postgresql, sqlite

from coordinator_core.shell.execution.codec import seal_text
from coordinator_core.shell.sealing import Sealer, StateKeyRing
from coordinator_core.shell.store.dialect import HexKey, SealedBytes
from coordinator_core.values import canonical_json

PG = postgresql.dialect()  # type: ignore[no-untyped-call]
LITE = sqlite.dialect()  # type: ignore[no-untyped-call]


_SEALER = Sealer(StateKeyRing(1, {1: bytes(range(32))}), "columns-dev")
_RUN = uuid.uuid4()
_VALUE = {"applicationId": "app-1"}


def _sealed() -> bytes:
    return seal_text(_SEALER, canonical_json(_VALUE), _RUN, "input")


@pytest.mark.parametrize("dialect", [PG, LITE], ids=["postgresql", "sqlite"])
def test_a_sealed_value_is_kept_and_handed_out_as_its_envelope(dialect: object) -> None:
    column = SealedBytes()
    sealed = _sealed()
    assert sealed[:1] == b"\x01"
    kept = column.process_bind_param(sealed, dialect)  # type: ignore[arg-type]
    assert kept == sealed
    assert column.process_result_value(kept, dialect) == sealed  # type: ignore[arg-type]
    assert column.process_result_value(memoryview(kept), dialect) == sealed  # type: ignore[arg-type]
    assert column.process_bind_param(None, dialect) is None  # type: ignore[arg-type]
    assert _SEALER.open(sealed, run_id=str(_RUN), purpose="input") == _VALUE


@pytest.mark.parametrize("dialect", [PG, LITE], ids=["postgresql", "sqlite"])
def test_a_value_in_the_stored_form_is_kept_as_its_envelope(dialect: object) -> None:
    """The 07 §10 stored form, as a store before schema version 3 kept it: its envelope is
    kept, and the sealer opens either."""
    stored_form = canonical_json(_SEALER.seal(_VALUE, run_id=str(_RUN), purpose="input"))
    kept = SealedBytes().process_bind_param(stored_form, dialect)  # type: ignore[arg-type]
    assert kept == base64.b64decode(stored_form[len(b'{"sealedCoordinatorV1":"') : -2])
    for form in (stored_form, kept):
        assert _SEALER.open(form, run_id=str(_RUN), purpose="input") == _VALUE
        assert _SEALER.open_text(form, run_id=str(_RUN), purpose="input") == canonical_json(_VALUE)


@pytest.mark.parametrize(
    "other",
    [
        b"sealed-input",
        b'{"sealedCoordinatorV1":"not base64!"}',
        b'{"sealedCoordinatorV1":"AQAAAAEAAQ"}',  # unpadded: not the form the sealer writes
        b'{"sealedCoordinatorV1":"' + base64.b64encode(b"\x02rest") + b'"}',  # another format
        b'{"other":"AQAAAAEAAQID"}',
        b"",
    ],
)
def test_bytes_that_are_not_a_sealed_value_in_its_stored_form_are_kept_as_they_are(
    other: bytes,
) -> None:
    column = SealedBytes()
    kept = column.process_bind_param(other, PG)  # type: ignore[arg-type]
    assert kept == other
    assert column.process_result_value(kept, PG) == other  # type: ignore[arg-type]


def test_a_commitment_or_digest_is_its_32_bytes_on_postgresql_and_its_text_on_sqlite() -> None:
    commitment, digest = HexKey(), HexKey("sha256:")
    text = "0123456789abcdef" * 4
    assert commitment.process_bind_param(text, PG) == bytes.fromhex(text)  # type: ignore[arg-type]
    assert commitment.process_result_value(bytes.fromhex(text), PG) == text  # type: ignore[arg-type]
    assert digest.process_bind_param("sha256:" + text, PG) == bytes.fromhex(text)  # type: ignore[arg-type]
    assert digest.process_result_value(bytes.fromhex(text), PG) == "sha256:" + text  # type: ignore[arg-type]
    assert commitment.process_bind_param(text, LITE) == text  # type: ignore[arg-type]
    assert digest.process_result_value("sha256:" + text, LITE) == "sha256:" + text  # type: ignore[arg-type]
    assert commitment.process_bind_param(None, PG) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("prefix", "value"),
    [
        ("", "0123456789ABCDEF" * 4),  # upper case would not read back the same
        ("", "0123456789abcdef" * 3),
        ("", "sha256:" + "0" * 64),
        ("sha256:", "0" * 64),
        ("sha256:", "sha512:" + "0" * 64),
        ("", "g" * 64),
    ],
)
def test_a_key_column_refuses_what_is_not_exactly_a_commitment_or_digest(
    prefix: str, value: str
) -> None:
    with pytest.raises(ValueError):
        HexKey(prefix).process_bind_param(value, PG)  # type: ignore[arg-type]
