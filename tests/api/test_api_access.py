"""Caller authentication and authorisation (06 §2): every token rule, attacks included, and the
policy checks in the order of 06 §1 item 6."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import jwt
import pytest
from api_fakes import (
    AUDIENCE,
    BASE_URL,
    CANARY,
    ISSUER,
    NOW,
    FakeJournal,
    FakeRunService,
    SigningKeys,
    authentication,
    bearer,
    caller_jwks,
    claims,
    settings,
    token,
)

from coordinator_api import access as access_module
from coordinator_api import create_app
from coordinator_api.access import AccessVerifier, KeySetCache, KeySetUnavailable, TokenRefused
from coordinator_core.config.model import JwksDiscovery, JwksUri

pytestmark = pytest.mark.anyio


def _segment(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def forged(header: dict[str, Any], payload: dict[str, Any], secret: bytes | None) -> str:
    """A token built by hand (PyJWT refuses to build these attacks)."""
    signing_input = f"{_segment(header)}.{_segment(payload)}"
    if secret is None:
        return signing_input + "."
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


async def refused(client: httpx.AsyncClient, authorization: str | None) -> httpx.Response:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = await client.get("/v1/workflow", headers=headers)
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["code"] == "coordinator.access.unauthenticated"
    return response


async def test_a_valid_rs256_token_is_accepted(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    assert (await client.get("/v1/workflow", headers=bearer(keys))).status_code == 200


async def test_a_valid_es256_token_is_accepted(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    headers = bearer(keys, algorithm="ES256", kid="ec-1")
    assert (await client.get("/v1/workflow", headers=headers)).status_code == 200


@pytest.mark.parametrize("typ", ["at+jwt", "application/at+jwt"])
async def test_both_access_token_types_are_accepted(
    client: httpx.AsyncClient, keys: SigningKeys, typ: str
) -> None:
    assert (await client.get("/v1/workflow", headers=bearer(keys, typ=typ))).status_code == 200


async def test_a_missing_token_is_refused(client: httpx.AsyncClient) -> None:
    await refused(client, None)


@pytest.mark.parametrize(
    "authorization",
    ["Bearer", "Bearer ", "Bearer abc", "Bearer a.b", "Bearer a.b.c", "Basic dXNlcjpwYXNz",
     "Bearer !!!.???.***", "Bearer a.b.c.d.e", "Token abc.def.ghi"],
)  # fmt: skip
async def test_malformed_tokens_are_refused(client: httpx.AsyncClient, authorization: str) -> None:
    await refused(client, authorization)


async def test_alg_none_is_refused(client: httpx.AsyncClient) -> None:
    header = {"alg": "none", "typ": "at+jwt", "kid": "rsa-1"}
    await refused(client, "Bearer " + forged(header, claims(), None))
    await refused(client, "Bearer " + forged(header, claims(), b"anything"))


async def test_hs256_with_the_public_key_as_secret_is_refused(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    header = {"alg": "HS256", "typ": "at+jwt", "kid": "rsa-1"}
    await refused(client, "Bearer " + forged(header, claims(), keys.rsa_public_pem()))
    hmac_header = {"alg": "HS256", "typ": "at+jwt", "kid": "hmac-1"}  # an `oct` key in the set
    await refused(client, "Bearer " + forged(hmac_header, claims(), b"secret"))


async def test_a_token_signed_with_another_key_is_refused(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    await refused(client, "Bearer " + token(keys, key=keys.other_rsa_key))


@pytest.mark.parametrize(
    ("kid", "algorithm"),
    [(None, "RS256"), ("unknown", "RS256"), ("rsa-1", "ES256"), ("ec-1", "RS256")],
)
async def test_kid_must_name_a_key_of_the_algorithm(
    client: httpx.AsyncClient, keys: SigningKeys, kid: str | None, algorithm: str
) -> None:
    await refused(client, "Bearer " + token(keys, kid=kid, algorithm=algorithm))


@pytest.mark.parametrize("typ", [None, "JWT", "at+JWT", "jwt"])
async def test_typ_must_be_an_access_token_type(
    client: httpx.AsyncClient, keys: SigningKeys, typ: str | None
) -> None:
    await refused(client, "Bearer " + token(keys, typ=typ))


async def test_other_asymmetric_algorithms_are_refused(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    for algorithm in ("RS384", "RS512", "PS256"):
        await refused(client, "Bearer " + token(keys, algorithm=algorithm))


async def test_header_members_of_the_wrong_type_are_refused(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    await refused(client, "Bearer " + token(keys, headers={"typ": ["at+jwt"]}))
    await refused(
        client, "Bearer " + forged({"alg": "RS256", "typ": "at+jwt", "kid": {}}, claims(), b"x")
    )
    header = {"alg": ["RS256"], "typ": "at+jwt", "kid": "rsa-1"}
    await refused(client, "Bearer " + forged(header, claims(), b"x"))


async def test_crit_headers_are_refused(client: httpx.AsyncClient, keys: SigningKeys) -> None:
    await refused(client, "Bearer " + token(keys, headers={"crit": ["exp"]}))


@pytest.mark.parametrize(
    "changes",
    [
        {"iss": "https://evil.test"},
        {"iss": None},
        {"aud": "someone-else"},
        {"aud": ["someone-else", "other"]},
        {"aud": None},
        {"exp": int(NOW.timestamp()) - 31},  # expired beyond the 30 s leeway
        {"exp": None},
        {"iat": None},
        {"iat": int(NOW.timestamp()) + 31},  # issued in the future
        {"nbf": int(NOW.timestamp()) + 31},  # not yet valid
        {"exp": int(NOW.timestamp()) + 3000, "iat": int(NOW.timestamp()) - 601},  # lives > 1 h
        {"exp": "tomorrow"},
        {"exp": True},
        {"sub": None},
        {"sub": ""},
        {"sub": "x" * 513},
        {"sub": "line\nbreak"},
        {"client_id": "unknown-client"},
        {"client_id": None},
        {"registry_assertion_issuer": "https://untrusted.test"},
        {"registry_assertion_issuer": ["https://assertions.test"]},
        {"registry_scopes": 42},
    ],
    ids=lambda changes: ",".join(f"{k}={str(v)[:12]}" for k, v in changes.items()),
)
async def test_claim_rules_are_enforced(
    client: httpx.AsyncClient, keys: SigningKeys, changes: dict[str, Any]
) -> None:
    payload = claims()
    for name, value in changes.items():
        if value is None:
            payload.pop(name, None)
        else:
            payload[name] = value
    await refused(client, "Bearer " + token(keys, payload))


@pytest.mark.parametrize(
    "changes",
    [
        {"exp": int(NOW.timestamp()) - 29},  # within the leeway
        {"iat": int(NOW.timestamp()) + 29},
        {"nbf": int(NOW.timestamp()) + 29},
        {"aud": ["other", AUDIENCE]},
        {"registry_assertion_issuer": "https://assertions.test"},
        {"registry_scopes": ["coordinator:operate", "extra"]},
        {"registry_scopes": "extra coordinator:operate"},
    ],
)
async def test_tokens_within_the_rules_are_accepted(
    client: httpx.AsyncClient, keys: SigningKeys, changes: dict[str, Any]
) -> None:
    payload = {**claims(), **changes}
    if "iat" in changes:
        payload["exp"] = changes["iat"] + 600
    response = await client.get("/v1/workflow", headers=bearer(keys, payload))
    assert response.status_code == 200, response.text


async def test_an_oversized_token_is_refused(client: httpx.AsyncClient, keys: SigningKeys) -> None:
    await refused(client, "Bearer " + token(keys, claims(padding="x" * 16_400)))


async def test_refusals_never_echo_the_token(client: httpx.AsyncClient, keys: SigningKeys) -> None:
    response = await refused(client, "Bearer " + token(keys, claims(sub=CANARY, aud="nope")))
    assert CANARY not in response.text


async def test_no_policy_matching_the_scopes_is_denied(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    response = await client.get("/v1/workflow", headers=bearer(keys, claims(scopes="other")))
    assert (response.status_code, response.json()["code"]) == (403, "coordinator.access.denied")


@pytest.mark.parametrize(
    ("method", "path", "who"),
    [
        ("GET", "/v1/doctor", "starter"),  # operator-only
        ("POST", "/v1/restore-hold", "starter"),
        ("POST", "/v1/retention", "starter"),
        ("POST", "/v1/runs", "reader"),  # no `start`
        ("GET", "/v1/runs/00000000-0000-4000-8000-000000000000/inspect", "reader"),
        ("GET", "/v1/runs/00000000-0000-4000-8000-000000000000/steps/a/attempts", "reader"),
        ("POST", "/v1/runs/not-a-uuid/cancel", "reader"),  # 403 before the run id check
    ],
)
async def test_the_route_action_is_checked_before_anything_else(
    client: httpx.AsyncClient, keys: SigningKeys, method: str, path: str, who: str
) -> None:
    scope = {"starter": "coordinator:start", "reader": "coordinator:read"}[who]
    headers = {**bearer(keys, claims(client=who, scopes=scope)), "Content-Type": "text/plain"}
    response = await client.request(method, path, headers=headers, content=b"{not json")
    assert (response.status_code, response.json()["code"]) == (403, "coordinator.access.denied")


async def test_starting_a_workflow_outside_the_policy_is_denied(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    headers = {
        **bearer(keys, claims(client="stranger", scopes="coordinator:start")),
        "Idempotency-Key": "k",
    }
    body = {"workflow": "reviewed-notice", "revision": "sha256:" + "5" * 64, "input": {}}
    response = await client.post("/v1/runs", json=body, headers=headers)
    assert (response.status_code, response.json()["code"]) == (403, "coordinator.access.denied")
    workflow = await client.get(
        "/v1/workflow", headers=bearer(keys, claims(client="stranger", scopes="coordinator:start"))
    )
    assert workflow.status_code == 403


# ---------------------------------------------------------------------------------------------
# Key sets fetched from a URI or by discovery


class _KeyServer:
    """A loopback HTTP server for a JWKS and a discovery document; counts requests."""

    def __init__(self, jwks: dict[str, Any]) -> None:
        self.jwks = jwks
        self.requests: list[str] = []
        self.failing = False
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests.append(self.path)
                if owner.failing:
                    self.send_response(500)
                    self.end_headers()
                    return
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": owner.url, "jwks_uri": owner.url + "/jwks"}
                else:
                    body = owner.jwks
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def key_server(keys: SigningKeys) -> Iterator[_KeyServer]:
    server = _KeyServer(keys.jwks())
    yield server
    server.close()


def _app_with(keys: SigningKeys, source: Any, issuer: str = ISSUER) -> Any:
    base = settings(keys)
    auth = dataclasses.replace(base.authentication, jwks_source=source, issuer=issuer)
    return create_app(
        dataclasses.replace(base, authentication=auth),
        service=FakeRunService(),
        journal=FakeJournal(),
    )


async def _lifespan_startup(app: Any) -> str:
    """Run the ASGI lifespan startup and return the message type the app answered."""
    sent: list[dict[str, Any]] = []
    messages = [{"type": "lifespan.startup"}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "lifespan.shutdown"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    with contextlib.suppress(Exception):  # a failed startup re-raises after answering
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    return str(sent[0]["type"]) if sent else "none"


async def test_a_key_set_from_a_uri_is_fetched_once_and_used(
    keys: SigningKeys, key_server: _KeyServer
) -> None:
    app = _app_with(keys, JwksUri(key_server.url + "/jwks"))
    assert await _lifespan_startup(app) == "lifespan.startup.complete"
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE_URL
    ) as client:
        for _ in range(3):
            assert (await client.get("/v1/workflow", headers=bearer(keys))).status_code == 200
    assert key_server.requests == ["/jwks"]


async def test_a_key_set_by_discovery_is_fetched_from_the_issuer(
    keys: SigningKeys, key_server: _KeyServer
) -> None:
    app = _app_with(keys, JwksDiscovery(), issuer=key_server.url)
    payload = claims(iss=key_server.url)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE_URL
    ) as client:
        assert (await client.get("/v1/workflow", headers=bearer(keys, payload))).status_code == 200
    assert key_server.requests == ["/.well-known/openid-configuration", "/jwks"]


async def test_an_unreachable_key_set_stops_the_start(
    keys: SigningKeys, key_server: _KeyServer
) -> None:
    key_server.failing = True
    app = _app_with(keys, JwksUri(key_server.url + "/jwks"))
    assert await _lifespan_startup(app) == "lifespan.startup.failed"


async def test_an_unobtainable_key_set_answers_503(
    keys: SigningKeys, key_server: _KeyServer
) -> None:
    key_server.failing = True
    app = _app_with(keys, JwksUri(key_server.url + "/jwks"))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE_URL
    ) as client:
        response = await client.get("/v1/workflow", headers=bearer(keys))
    assert (response.status_code, response.json()["code"]) == (
        503,
        "coordinator.access.unavailable",
    )


async def test_an_unknown_kid_refetches_at_most_once_per_30_seconds(keys: SigningKeys) -> None:
    fetches: list[float] = []
    clock = [1000.0]
    document = {"keys": [keys.jwks()["keys"][0]]}

    def handler(request: httpx.Request) -> httpx.Response:
        fetches.append(clock[0])
        return httpx.Response(200, json=document)

    cache = KeySetCache(
        JwksUri("https://keys.test/jwks"), ISSUER, httpx.MockTransport(handler), lambda: clock[0]
    )
    await cache.start()
    assert await cache.key("rsa-1", "RS256") is not None
    assert await cache.key("ec-1", "ES256") is None  # within 30 s of the start: no refetch
    clock[0] += 31
    document["keys"] = keys.jwks()["keys"]  # the issuer published its new key
    assert await cache.key("ec-1", "ES256") is not None  # refetched
    assert await cache.key("other", "ES256") is None  # throttled
    assert len(fetches) == 2
    clock[0] += 301  # stale after 5 minutes: fetched again
    assert await cache.key("rsa-1", "RS256") is not None
    assert len(fetches) == 3


async def test_a_malformed_key_set_is_unavailable(keys: SigningKeys) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b'{"keys": 1}'))
    cache = KeySetCache(JwksUri("https://keys.test/jwks"), ISSUER, transport)
    with pytest.raises(KeySetUnavailable):
        await cache.start()


def test_private_or_short_keys_in_a_key_set_are_ignored(keys: SigningKeys) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    from coordinator_api.access import KeySet

    short = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()
    numbers = short.public_numbers()
    short_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(short))
    private_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(keys.rsa_key))
    document = {"keys": [{**short_jwk, "kid": "short"}, {**private_jwk, "kid": "private"}]}
    assert numbers.n.bit_length() <= 1024
    assert KeySet.parse(json.dumps(document).encode()).keys == {}


async def test_a_token_met_again_is_not_verified_again_but_its_claims_are_checked(
    keys: SigningKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller presents one token for many requests: its header is parsed and its signature
    verified once for the key that verified it; expiry and the other claim rules hold on every
    request."""
    clock = [NOW.timestamp()]
    verifier = AccessVerifier(
        authentication(keys), clock=lambda: clock[0], caller_jwks=caller_jwks(keys)
    )
    await verifier.start()
    decodes: list[str] = []
    real_decode = access_module.jwt.decode

    def counting(presented: str, *args: Any, **kwargs: Any) -> Any:
        decodes.append(presented)
        return real_decode(presented, *args, **kwargs)

    headers: list[str] = []
    real_header = access_module.jwt.get_unverified_header

    def counting_headers(presented: str) -> Any:
        headers.append(presented)
        return real_header(presented)

    monkeypatch.setattr(access_module.jwt, "decode", counting)
    monkeypatch.setattr(access_module.jwt, "get_unverified_header", counting_headers)
    presented = token(keys, claims(lifetime=600))
    first = await verifier.verify(presented)
    again = await verifier.verify(presented)
    assert first == again and len(decodes) == 1 and len(headers) == 1
    again["sub"] = "someone-else"  # a caller's copy never changes what is kept
    assert (await verifier.verify(presented))["sub"] == first["sub"]
    clock[0] += 601 + 30  # past `exp` and the leeway
    with pytest.raises(TokenRefused):
        await verifier.verify(presented)
    forged = token(keys, claims(lifetime=600), key=keys.other_rsa_key)  # same kid, wrong key
    for _ in range(2):
        with pytest.raises(TokenRefused):
            await verifier.verify(forged)
    assert len(decodes) == 3  # a refused signature is never kept: checked each time


async def test_a_kept_token_is_verified_again_once_its_key_set_changed(keys: SigningKeys) -> None:
    """The kept verdict belongs to the key that gave it: after the key set was fetched anew
    (a rotation), the token's signature is checked against the key the set now holds."""
    verifier = AccessVerifier(
        authentication(keys), clock=NOW.timestamp, caller_jwks=caller_jwks(keys)
    )
    await verifier.start()
    presented = token(keys, claims())
    await verifier.verify(presented)
    real_key = verifier._keys.key

    other = jwt.algorithms.RSAAlgorithm.to_jwk(keys.other_rsa_key.public_key(), as_dict=True)
    replaced = jwt.PyJWK({**other, "kid": "rsa-1", "alg": "RS256"})

    async def rotated(kid: str, algorithm: str) -> Any:
        return replaced if await real_key(kid, algorithm) is not None else None

    verifier._keys.key = rotated  # type: ignore[method-assign]
    with pytest.raises(TokenRefused):
        await verifier.verify(presented)


# ---------------------------------------------------------------------------------------------
# Refusals that explain themselves: the class of a refused token in the service's log line and,
# once the signature verified, in the problem's detail (never anything of the token).

_NOW = int(NOW.timestamp())


@pytest.mark.parametrize(
    ("changes", "reason", "detail"),
    [
        ({"exp": _NOW - 31}, "expired", "The access token has expired."),
        ({"exp": _NOW + 3000, "iat": _NOW - 601}, "lifetime", "at most 3,600 seconds"),
        ({"aud": "someone-else"}, "audience", "its `aud` does not name"),
        ({"iss": "https://evil.test"}, "issuer", "another issuer"),
        ({"client_id": "unknown-client"}, "client", "client is not one this service allows"),
        ({"nbf": _NOW + 31}, "not-yet-valid", "is not valid yet"),
        ({"sub": "line\nbreak"}, "subject", "`sub` is missing"),
        ({"registry_scopes": 42}, "scope", "scope claim is neither"),
    ],
    ids=lambda value: value if isinstance(value, str) and " " not in value else None,
)
async def test_a_refused_token_names_its_class_in_the_log_and_the_problem(
    client: httpx.AsyncClient,
    keys: SigningKeys,
    caplog: pytest.LogCaptureFixture,
    changes: dict[str, Any],
    reason: str,
    detail: str,
) -> None:
    payload = {**claims(subject=CANARY), **changes}
    caplog.set_level("INFO", logger="coordinator_api.access")
    response = await refused(client, "Bearer " + token(keys, payload))
    problem = response.json()
    assert detail in problem["detail"] and problem["suggestedAction"]
    assert CANARY not in response.text
    [record] = [r for r in caplog.records if r.name == "coordinator_api.access"]
    assert record.getMessage() == "access token refused" and record.args == ()
    assert record.__dict__["code"] == "coordinator.access.unauthenticated"
    assert record.__dict__["keyed"] == {"refusal": reason}


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer a.b.c",  # malformed: the detail says what a token must be, which is public
        None,  # missing
    ],
)
async def test_a_token_refused_before_its_signature_says_only_what_is_public(
    client: httpx.AsyncClient, authorization: str | None
) -> None:
    problem = (await refused(client, authorization)).json()
    assert problem["detail"] in {
        "The request has no bearer access token.",
        "The access token is not a compact `at+jwt` JWS of at most 16,384 bytes signed with"
        " RS256 or ES256 and naming its key (`kid`).",
    }


async def test_a_bad_signature_gets_the_generic_detail_and_logs_its_class(
    client: httpx.AsyncClient, keys: SigningKeys, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="coordinator_api.access")
    # Claims a forger would like to probe (expired, another audience) stay unsaid.
    forged_token = token(keys, claims(aud="nope", exp=_NOW - 100), key=keys.other_rsa_key)
    problem = (await refused(client, "Bearer " + forged_token)).json()
    assert problem["detail"] == "The request has no valid access token."
    [record] = [r for r in caplog.records if r.name == "coordinator_api.access"]
    assert record.__dict__["keyed"] == {"refusal": "signature"}


async def test_a_token_no_policy_covers_is_denied_and_logged_as_scope(
    client: httpx.AsyncClient, keys: SigningKeys, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="coordinator_api.access")
    response = await client.get("/v1/workflow", headers=bearer(keys, claims(scopes="other")))
    assert response.status_code == 403 and "scope" in response.json()["detail"]
    [record] = [r for r in caplog.records if r.name == "coordinator_api.access"]
    assert record.__dict__["keyed"] == {"refusal": "scope"}


async def test_the_service_log_line_of_a_refusal_carries_the_class_and_no_token(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    import io
    import logging

    from coordinator_core.shell.runtime.service_log import JsonLineHandler, ServiceLog

    stream = io.StringIO()
    handler = JsonLineHandler(ServiceLog(stream))
    logger = logging.getLogger("coordinator_api.access")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    expired = token(keys, claims(subject=CANARY, exp=_NOW - 100))
    try:
        await refused(client, "Bearer " + expired)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    [line] = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert line["code"] == "coordinator.access.unauthenticated"
    assert line["message"] == "access token refused" and line["refusal"] == "expired"
    assert CANARY not in stream.getvalue() and expired not in stream.getvalue()
