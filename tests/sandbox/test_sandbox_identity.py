"""The sandbox identity provider: client credentials with a signed client assertion (08 §2.2,
§11.1), its JWKS, and caller tokens for the coordinator (06 §2)."""

from __future__ import annotations

import json
import stat
import time
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from sandbox_support import CLIENTS, RESOURCES, SCOPES, Sandbox, run_cli


def jwks_client_keys(sandbox: Sandbox) -> dict[str, jwt.PyJWK]:
    document = sandbox.http.get(sandbox.endpoints["jwksUri"]).json()
    return {key["kid"]: jwt.PyJWK(key) for key in document["keys"]}


def verify_with_jwks(sandbox: Sandbox, token: str, audience: str) -> dict[str, Any]:
    header = jwt.get_unverified_header(token)
    key = jwks_client_keys(sandbox)[header["kid"]]
    return jwt.decode(
        token, key.key, algorithms=[header["alg"]], audience=audience,
        issuer=sandbox.endpoints["issuer"],
    )  # fmt: skip


def assert_invalid_client(answer: httpx.Response) -> None:
    assert answer.status_code == 401
    assert answer.json()["error"] == "invalid_client"


def test_signed_client_assertion_buys_an_es256_access_token_for_the_requested_resource(
    sandbox: Sandbox,
) -> None:
    client_id = CLIENTS["messaging"]
    answer = sandbox.token_request(
        sandbox.assertion(client_id), RESOURCES["messaging"], SCOPES["messaging"]
    )
    assert answer.status_code == 200
    body = answer.json()
    assert body["token_type"].lower() == "bearer"
    assert isinstance(body["expires_in"], int) and 0 < body["expires_in"] <= 300
    assert answer.headers["cache-control"] == "no-store"
    token = body["access_token"]
    assert jwt.get_unverified_header(token)["alg"] == "ES256"
    claims = verify_with_jwks(sandbox, token, RESOURCES["messaging"])
    assert claims["sub"] == claims["client_id"] == client_id
    assert claims["scope"] == "messaging:messages:submit"
    assert isinstance(claims["jti"], str)
    assert int(claims["exp"]) - int(claims["iat"]) <= 300


def test_assertion_signed_by_another_key_is_refused(sandbox: Sandbox) -> None:
    client_id = CLIENTS["messaging"]
    stranger = ec.generate_private_key(ec.SECP256R1())
    assertion = sandbox.assertion(client_id, key=stranger)
    answer = sandbox.token_request(assertion, RESOURCES["messaging"], SCOPES["messaging"])
    assert_invalid_client(answer)


def test_assertion_for_another_audience_is_refused(sandbox: Sandbox) -> None:
    client_id = CLIENTS["messaging"]
    for audience in (sandbox.endpoints["issuer"] + "/other", "urn:registrystack:messaging"):
        assertion = sandbox.assertion(client_id, audience=audience)
        answer = sandbox.token_request(assertion, RESOURCES["messaging"], SCOPES["messaging"])
        assert_invalid_client(answer)


def test_expired_assertion_is_refused(sandbox: Sandbox) -> None:
    client_id = CLIENTS["messaging"]
    assertion = sandbox.assertion(client_id, issued_at=int(time.time()) - 120, lifetime=60)
    answer = sandbox.token_request(assertion, RESOURCES["messaging"], SCOPES["messaging"])
    assert_invalid_client(answer)


def test_assertion_living_longer_than_300_seconds_is_refused(sandbox: Sandbox) -> None:
    assertion = sandbox.assertion(CLIENTS["messaging"], lifetime=3600)
    answer = sandbox.token_request(assertion, RESOURCES["messaging"], SCOPES["messaging"])
    assert_invalid_client(answer)


def test_replayed_assertion_jti_is_refused(sandbox: Sandbox) -> None:
    assertion = sandbox.assertion(CLIENTS["messaging"])
    first = sandbox.token_request(assertion, RESOURCES["messaging"], SCOPES["messaging"])
    again = sandbox.token_request(assertion, RESOURCES["messaging"], SCOPES["messaging"])
    assert first.status_code == 200
    assert_invalid_client(again)


def test_assertion_of_unregistered_client_or_unknown_kid_is_refused(sandbox: Sandbox) -> None:
    assertion = sandbox.assertion(CLIENTS["messaging"], kid="no-such-key")
    assert_invalid_client(
        sandbox.token_request(assertion, RESOURCES["messaging"], SCOPES["messaging"])
    )
    forged = jwt.encode(
        {"iss": "intruder", "sub": "intruder", "aud": sandbox.token_endpoint, "jti": "x",
         "iat": int(time.time()), "exp": int(time.time()) + 60},
        ec.generate_private_key(ec.SECP256R1()), algorithm="ES256", headers={"kid": "k"},
    )  # fmt: skip
    assert_invalid_client(
        sandbox.token_request(forged, RESOURCES["messaging"], SCOPES["messaging"])
    )


def test_token_request_needs_a_served_resource_and_client_credentials_grant(
    sandbox: Sandbox,
) -> None:
    client_id = CLIENTS["messaging"]
    unknown = sandbox.token_request(
        sandbox.assertion(client_id), "urn:example:unknown", SCOPES["messaging"]
    )
    assert unknown.status_code == 400 and unknown.json()["error"] == "invalid_target"
    wrong_grant = sandbox.http.post(
        sandbox.token_endpoint,
        data={"grant_type": "password", "client_assertion": sandbox.assertion(client_id)},
    )
    assert wrong_grant.status_code == 400
    assert wrong_grant.json()["error"] == "unsupported_grant_type"


def test_token_endpoint_faults_answer_before_any_assertion_is_checked(sandbox: Sandbox) -> None:
    sandbox.inject("identity", operation="identity.token", kind="fail", status=503)
    refused = sandbox.token_request("not-even-a-jwt", RESOURCES["messaging"], ["x"])
    assert refused.status_code == 503
    assert refused.json()["error"] == "temporarily_unavailable"
    assert sandbox.token("messaging")  # the fault was used up


def test_caller_token_is_an_at_jwt_that_verifies_with_the_published_jwks(
    sandbox: Sandbox,
) -> None:
    for algorithm in ("ES256", "RS256"):
        answer = sandbox.http.post(
            sandbox.url("identity", "/sandbox/caller-tokens"),
            json={"subject": "alice", "clientId": "ops-console", "algorithm": algorithm,
                  "scopes": ["coordinator:operate", "coordinator:read"], "expiresIn": 600},
        )  # fmt: skip
        assert answer.status_code == 201
        token = answer.json()["access_token"]
        header = jwt.get_unverified_header(token)
        assert header["typ"] == "at+jwt" and header["alg"] == algorithm
        claims = verify_with_jwks(sandbox, token, "coordinator")
        assert claims["sub"] == "alice" and claims["client_id"] == "ops-console"
        assert claims["registry_scopes"] == "coordinator:operate coordinator:read"
        assert int(claims["exp"]) - int(claims["iat"]) == 600


def test_caller_token_overrides_build_malformed_tokens_for_auth_tests(sandbox: Sandbox) -> None:
    answer = sandbox.http.post(
        sandbox.url("identity", "/sandbox/caller-tokens"),
        json={"header": {"typ": "JWT", "kid": "unknown"}, "claims": {"sub": None, "extra": 1}},
    )
    token = answer.json()["access_token"]
    assert jwt.get_unverified_header(token) == {"alg": "ES256", "typ": "JWT", "kid": "unknown"}
    claims = jwt.decode(token, options={"verify_signature": False})
    assert "sub" not in claims and claims["extra"] == 1


def test_keys_writes_file_secrets_the_coordinator_accepts(sandbox: Sandbox) -> None:
    directory = sandbox.secrets_dir
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for name in ("applications-client.jwk", "notices-client.jwk", "caller-jwks.json",
                 "casework-completions-token", "applications-events.key"):  # fmt: skip
        path = directory / name
        assert path.is_file() and not path.is_symlink()
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0
    jwk = sandbox.private_jwk("coordinator-notices")
    assert jwk["kty"] == "EC" and jwk["crv"] == "P-256" and "d" in jwk and jwk["kid"]
    assert len((directory / "applications-events.key").read_bytes()) >= 32
    token = (directory / "casework-completions-token").read_bytes()
    assert 32 <= len(token) <= 4096 and all(0x21 <= b <= 0x7E for b in token)


def test_caller_token_cli_verifies_with_the_caller_jwks_secret(sandbox: Sandbox) -> None:
    minted = run_cli(
        "caller-token", "--state-dir", str(sandbox.state_dir), "--subject", "bob",
        "--scope", "coordinator:operate",
    )  # fmt: skip
    assert minted.returncode == 0, minted.stderr
    token = minted.stdout.strip()
    jwks = json.loads((sandbox.secrets_dir / "caller-jwks.json").read_text())
    header = jwt.get_unverified_header(token)
    key = next(jwt.PyJWK(k) for k in jwks["keys"] if k["kid"] == header["kid"])
    claims = jwt.decode(
        token, key.key, algorithms=["ES256"], audience="coordinator",
        issuer=sandbox.endpoints["issuer"],
    )  # fmt: skip
    assert claims["sub"] == "bob" and claims["registry_scopes"] == "coordinator:operate"


def test_discovery_names_the_issuer_jwks_and_token_endpoint(sandbox: Sandbox) -> None:
    document = sandbox.http.get(sandbox.url("identity", "/.well-known/openid-configuration")).json()
    assert document["issuer"] == sandbox.endpoints["issuer"]
    assert document["jwks_uri"] == sandbox.endpoints["jwksUri"]
    assert document["token_endpoint"] == sandbox.token_endpoint
