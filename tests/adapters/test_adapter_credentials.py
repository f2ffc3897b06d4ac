"""Contract 08 §2.2: a fresh access token for every attempt through a signed client
assertion, and the token endpoint's outcomes classified."""

from __future__ import annotations

import json
import time
import uuid
from urllib.parse import parse_qs

import jwt
import pytest
from adapter_support import (
    STEP,
    TOKEN_PATH,
    KeyPair,
    Reply,
    call,
    command,
    credential_of,
    deadline,
    ec_key,
    refused,
    retryable,
    rsa_key,
    success,
)
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from jwt.algorithms import ECAlgorithm, OKPAlgorithm

from coordinator_core.shell.adapters import (
    AccessToken,
    CredentialIssuer,
    HttpSettings,
)
from coordinator_core.shell.adapters.credentials import (
    CLIENT_ASSERTION_TYPE,
    SigningKeyError,
    load_signing_key,
)
from coordinator_core.shell.adapters.scheduling import SchedulingAdapter
from coordinator_sandbox.testing import free_port

SCHEDULING = {"schedulingId": "s-1", "policyRevision": "r-1", "policyDigest": "sha256:00"}
READ = "scheduling.read-scheduling/v1"


def test_every_attempt_gets_a_fresh_token_and_a_fresh_assertion(fake, connect):
    fake.route("GET", "/v1/scheduling", Reply(200, SCHEDULING))
    bound = connect("scheduling")
    adapter = SchedulingAdapter()
    for _ in range(3):
        outcome = call(adapter, bound, command(READ, {}), attempt_deadline=deadline())
        assert outcome == success(SCHEDULING)
    assert len(fake.assertions) == 3
    assert len({claims["jti"] for _header, claims in fake.assertions}) == 3
    used = [seen.headers["authorization"] for seen in fake.requests()]
    assert used == [f"Bearer {token}" for token in fake.issued]
    assert len(set(used)) == 3


@pytest.mark.parametrize("algorithm", ["ES256", "RS256"])
def test_the_assertion_claims_and_signature(fake, connect, ec_pair, rsa_pair, algorithm):
    key: KeyPair = ec_pair if algorithm == "ES256" else rsa_pair
    bound = connect("scheduling", key=key, client_id="coordinator-notices")
    now = int(time.time())
    issuer = CredentialIssuer(wall_clock=lambda: now + 0.5)
    token = issuer.obtain(bound.authorization, step=STEP, attempt_deadline=deadline())
    assert isinstance(token, AccessToken)
    form = parse_qs(fake.requests(TOKEN_PATH)[-1].body.decode("ascii"), strict_parsing=True)
    assert form["grant_type"] == ["client_credentials"]
    assert form["client_assertion_type"] == [CLIENT_ASSERTION_TYPE]
    assert form["scope"] == ["scope:a scope:b"]
    assert form["resource"] == ["urn:registrystack:scheduling"]
    assertion = form["client_assertion"][0]
    assert jwt.get_unverified_header(assertion) == {
        "alg": algorithm,
        "kid": key.public["kid"],
        "typ": "JWT",
    }
    public = jwt.PyJWK(key.public, algorithm=algorithm).key
    claims = jwt.decode(
        assertion,
        public,
        algorithms=[algorithm],
        audience=bound.authorization.token_endpoint,
        options={"verify_exp": False, "verify_iat": False},
    )
    assert claims["iss"] == claims["sub"] == "coordinator-notices"
    assert claims["aud"] == bound.authorization.token_endpoint
    assert uuid.UUID(claims["jti"])
    assert claims["iat"] == now
    assert claims["exp"] == claims["iat"] + 60


def test_an_explicit_assertion_audience_is_used(fake, connect):
    bound = connect("scheduling", audience="https://idp.example/")
    assert isinstance(
        CredentialIssuer().obtain(bound.authorization, step=STEP, attempt_deadline=deadline()),
        AccessToken,
    )
    assert fake.assertions[-1][1]["aud"] == "https://idp.example/"


def test_a_supplied_credential_is_used_without_a_new_exchange(fake, connect):
    fake.route("GET", "/v1/scheduling", Reply(200, SCHEDULING))
    bound = connect("scheduling")
    adapter = SchedulingAdapter()
    token = adapter.obtain_credential(bound, credential_of(), attempt_deadline=deadline())
    assert isinstance(token, AccessToken)
    outcome = call(adapter, bound, command(READ, {}), attempt_deadline=deadline(), credential=token)
    assert outcome == success(SCHEDULING)
    assert len(fake.requests(TOKEN_PATH)) == 1


def _token_reply(reply: Reply):
    return lambda seen: reply


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply(408), retryable("credential-unavailable")),
        (Reply(429), retryable("credential-unavailable")),
        (Reply(500), retryable("credential-unavailable")),
        (Reply(503), retryable("credential-unavailable")),
        (Reply(400, {"error": "invalid_client"}), refused("credential-refused")),
        (Reply(401, {"error": "invalid_client"}), refused("credential-refused")),
        (Reply(403), refused("credential-refused")),
        (Reply(302, headers={"location": "/elsewhere"}), refused("credential-refused")),
        (
            Reply(201, {"access_token": "t", "token_type": "Bearer", "expires_in": 1}),
            refused("credential-refused"),
        ),
        (Reply(200, raw=b"not json"), refused("credential-refused")),
        (Reply(200, {"token_type": "Bearer", "expires_in": 1}), refused("credential-refused")),
        (
            Reply(200, {"access_token": "t", "token_type": "mac", "expires_in": 1}),
            refused("credential-refused"),
        ),
        (
            Reply(200, {"access_token": "t", "token_type": "Bearer", "expires_in": "1"}),
            refused("credential-refused"),
        ),
        (
            Reply(200, {"access_token": "t", "token_type": "Bearer", "expires_in": True}),
            refused("credential-refused"),
        ),
        (
            Reply(200, {"access_token": "a b\r\n", "token_type": "Bearer", "expires_in": 1}),
            refused("credential-refused"),
        ),
        (
            Reply(
                200,
                raw=b'{"access_token": "a", "access_token": "b", "token_type": "Bearer", "expires_in": 1}',
            ),
            refused("credential-refused"),
        ),
    ],
)
def test_token_endpoint_outcomes(fake, connect, reply, expected):
    fake.route("GET", "/v1/scheduling", Reply(200, SCHEDULING))
    fake.token_reply = _token_reply(reply)
    bound = connect("scheduling")
    outcome = call(SchedulingAdapter(), bound, command(READ, {}), attempt_deadline=deadline())
    assert outcome == expected
    assert not fake.requests(), "the product was called without a credential"


def test_a_case_insensitive_bearer_token_type_is_accepted(fake, connect):
    fake.token_reply = _token_reply(
        Reply(200, {"access_token": "abc.DEF-_~+/==", "token_type": "bEaReR", "expires_in": 60})
    )
    bound = connect("scheduling")
    token = CredentialIssuer().obtain(bound.authorization, step=STEP, attempt_deadline=deadline())
    assert isinstance(token, AccessToken)
    assert token.authorization() == "Bearer abc.DEF-_~+/=="


def test_token_endpoint_transport_failure_is_retryable(connect):
    bound = connect("scheduling")
    unreachable = bound.authorization.__class__(
        token_endpoint=f"http://127.0.0.1:{free_port()}/oauth/token",
        client_id="c",
        signing_key=bound.authorization.signing_key,
        resource="urn:r",
        scopes=("s",),
    )
    outcome = CredentialIssuer().obtain(unreachable, step=STEP, attempt_deadline=deadline())
    assert outcome == retryable("credential-unavailable")


def test_token_endpoint_timeout_is_retryable(fake, connect):
    fake.token_reply = _token_reply(Reply(200, {}, delay=1.0))
    bound = connect("scheduling")
    outcome = CredentialIssuer(HttpSettings(total_timeout=0.2)).obtain(
        bound.authorization, step=STEP, attempt_deadline=deadline()
    )
    assert outcome == retryable("credential-unavailable")


def _public_only(pair: KeyPair) -> dict[str, object]:
    return dict(pair.public)


def _p384() -> dict[str, object]:
    key = json.loads(ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP384R1())))
    return {**key, "kid": "k"}


def _ed25519() -> dict[str, object]:
    key = json.loads(OKPAlgorithm.to_jwk(ed25519.Ed25519PrivateKey.generate()))
    return {**key, "kid": "k"}


@pytest.mark.parametrize(
    "make_key",
    [
        lambda: _public_only(ec_key()),
        lambda: {k: v for k, v in ec_key().private.items() if k != "kid"},
        lambda: {**ec_key().private, "alg": "RS256"},
        _p384,
        _ed25519,
        lambda: rsa_key(bits=1024).private,
        lambda: "not json",
        lambda: b'["a list"]',
        lambda: {**ec_key().private, "d": "AAAA"},
    ],
    ids=[
        "public-only",
        "no-kid",
        "alg-mismatch",
        "p-384",
        "ed25519",
        "rsa-1024",
        "text",
        "list",
        "bad-d",
    ],
)
def test_an_unusable_signing_key_is_credential_configuration(fake, connect, make_key):
    bound = connect("scheduling")
    bad = bound.authorization.__class__(
        token_endpoint=bound.authorization.token_endpoint,
        client_id="c",
        signing_key=make_key(),
        resource="urn:r",
        scopes=("s",),
    )
    with pytest.raises(SigningKeyError):
        load_signing_key(bad.signing_key)
    assert CredentialIssuer().obtain(bad, step=STEP, attempt_deadline=deadline()) == refused(
        "credential-configuration"
    )
    assert not fake.requests(TOKEN_PATH)


def test_the_signing_key_may_be_the_secret_file_text(fake, connect, ec_pair):
    bound = connect("scheduling")
    as_text = bound.authorization.__class__(
        token_endpoint=bound.authorization.token_endpoint,
        client_id=bound.authorization.client_id,
        signing_key=json.dumps(ec_pair.private).encode() + b"\n",
        resource="urn:r",
        scopes=("s",),
    )
    obtained = CredentialIssuer().obtain(as_text, step=STEP, attempt_deadline=deadline())
    assert isinstance(obtained, AccessToken)
