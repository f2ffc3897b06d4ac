"""In-process rules of the sandbox: canonical JSON (RFC 8785), the command line, and keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator_sandbox.canonical import JsonParseError, canonical_json, parse_json_strict
from coordinator_sandbox.cli import main
from coordinator_sandbox.keys import SigningKey, generate_private_jwk, jwk_thumbprint


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-7, "1e-7"),
        (0.000001, "0.000001"),
        (-0.0, "0"),
        (123.0, "123"),
        (1.5, "1.5"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (333333333.33333329, "333333333.3333333"),
    ],
)
def test_numbers_print_as_ecmascript_prints_them(value: float, text: str) -> None:
    assert canonical_json(value) == text.encode()


def test_members_sort_by_utf16_code_units_and_strings_escape_minimally() -> None:
    value = {"\u20ac": 1, "\r": 2, "\U0001f600": 3, "\u00f6": 4, "1": 5, "a": '\u000f"\\/'}
    expected = '{"\\r":2,"1":5,"a":"\\u000f\\"\\\\/","\u00f6":4,"\u20ac":1,"\U0001f600":3}'
    assert canonical_json(value) == expected.encode("utf-8")


def test_strict_parser_refuses_duplicate_names_and_nan() -> None:
    with pytest.raises(JsonParseError):
        parse_json_strict(b'{"a":1,"a":2}')
    with pytest.raises(JsonParseError):
        parse_json_strict(b"[NaN]")


def test_serve_refuses_a_non_loopback_host(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    assert "loopback" in capsys.readouterr().err


def test_ports_take_zero_or_name_port_pairs() -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--ports", "nothing=1"])


def test_keys_are_kept_on_a_second_run_and_replaced_with_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secrets = tmp_path / "secrets"
    argv = ["keys", "--secrets-dir", str(secrets), "--client", "svc=svc-client.jwk"]
    assert main(argv) == 0
    first = json.loads((secrets / "svc-client.jwk").read_text())
    clients = json.loads((tmp_path / "sandbox" / "clients.json").read_text())["clients"]
    assert clients[0]["clientId"] == "svc" and "d" not in clients[0]["jwks"]["keys"][0]
    assert main(argv) == 0
    assert json.loads((secrets / "svc-client.jwk").read_text()) == first
    assert main([*argv, "--force", "--key-type", "RSA"]) == 0
    replaced = json.loads((secrets / "svc-client.jwk").read_text())
    assert replaced["kty"] == "RSA" and replaced["kid"] != first["kid"]
    capsys.readouterr()


def test_generated_keys_carry_their_thumbprint_as_kid_and_sign_with_their_algorithm() -> None:
    for kind, algorithm in (("EC", "ES256"), ("RSA", "RS256")):
        jwk = generate_private_jwk(kind)  # type: ignore[arg-type]
        assert jwk["kid"] == jwk_thumbprint(jwk)
        assert SigningKey(jwk).algorithm == algorithm
