"""Caller authentication and authorisation (06 §2): access tokens, key sets, policies.

A token is accepted only when every rule of 06 §2 holds; the checks are written out here rather
than left to PyJWT's defaults so that each one is explicit and tested:

* compact JWS, at most 16,384 bytes; header `typ` `at+jwt` or `application/at+jwt`; `alg`
  exactly `RS256` or `ES256` (so `none`, `HS256` with the public key as secret, and every other
  algorithm are refused before any key is touched); no `crit`; `kid` names a key of the set
  whose type fits the algorithm;
* the signature verifies (PyJWT, with the one algorithm the header names);
* `iss` equals the issuer; `aud` (string or array) contains the audience;
* `exp` and `iat` present and numeric, `exp − iat ≤ 3600`, and with 30 s leeway `now < exp`,
  `iat ≤ now`, `nbf ≤ now` when present;
* `sub` non-empty, at most 512 characters, no control characters;
* the client id claim names an allowed client; a `registry_assertion_issuer` claim is refused
  unless it names an allowed assertion issuer.

Key sets come from the configuration (static: the resolved secret `Secrets.caller_jwks`), a URI
or OIDC discovery (`deployment.authentication.jwksSource`, 05 §8.1). They are loaded at start
(failure stops the start), used for 5 minutes, and fetched again early on an unknown `kid` at
most once per 30 s; when a needed key set cannot be obtained the answer is 503
`coordinator.access.unavailable`. `jku`, `x5u` and embedded `jwk` headers are never followed.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from coordinator_api.limits import (
    JWKS_CACHE_SECONDS,
    JWKS_MAX_BYTES,
    JWKS_REFETCH_SECONDS,
    JWKS_TIMEOUT_SECONDS,
    RSA_MIN_BITS,
    SUBJECT_MAX_CHARACTERS,
    TOKEN_LEEWAY_SECONDS,
    TOKEN_MAX_BYTES,
    TOKEN_MAX_LIFETIME_SECONDS,
    VERIFIED_TOKENS,
)
from coordinator_api.problems import ApiProblem
from coordinator_core.config.model import (
    Authentication,
    JwksDiscovery,
    JwksSource,
    JwksStatic,
    JwksUri,
)
from coordinator_core.shell.service import Caller
from coordinator_core.values import StrictJsonError, parse_strict_json

__all__ = [
    "ALGORITHMS",
    "AccessVerifier",
    "KeySet",
    "KeySetCache",
    "KeySetUnavailable",
    "TokenRefused",
    "bearer_token",
    "match_secret",
]

logger = logging.getLogger("coordinator_api.access")

ALGORITHMS: Final = frozenset({"RS256", "ES256"})
TOKEN_TYPES: Final = frozenset({"at+jwt", "application/at+jwt"})
_COMPACT_JWS: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")
ASSERTION_ISSUER_CLAIM: Final = "registry_assertion_issuer"


class TokenRefused(Exception):
    """The token breaks a rule of 06 §2: `reason` is its class (REFUSAL_CLASSES), a word the
    service's log line and, where the token holder learns nothing new from it, the problem's
    detail carry; the message names the rule for tests, never for the caller or the log."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# The classes of a refused token, each with the fixed detail and next step of its 401 problem.
# The classes a token's signature had to verify for (every claim check runs after it) say
# which claim failed: only a holder of a token the issuer signed reaches them, and it can read
# its own claims. Before the signature verifies, the class is logged but the problem stays the
# catalogue's generic sentence, so a forger learns nothing about the key set from it.
_FRESH_TOKEN: Final = "Obtain a fresh access token from the configured issuer and send it."
REFUSAL_CLASSES: Final[Mapping[str, tuple[str, str] | None]] = {
    "missing": (
        "The request has no bearer access token.",
        "Send `Authorization: Bearer <token>` with an access token of the configured issuer.",
    ),
    "malformed": (
        "The access token is not a compact `at+jwt` JWS of at most 16,384 bytes signed with"
        " RS256 or ES256 and naming its key (`kid`).",
        "Send an access token (RFC 9068, `typ` `at+jwt`) from the configured issuer.",
    ),
    "signature": None,  # an unknown key or a signature that does not verify: the generic text
    "issuer": (
        "The access token was issued by another issuer than the one this service trusts.",
        "Obtain the access token from the issuer the service is configured with.",
    ),
    "audience": (
        "The access token is not meant for this service: its `aud` does not name the service's"
        " audience.",
        "Ask the issuer for a token whose audience is this service.",
    ),
    "expired": ("The access token has expired.", _FRESH_TOKEN),
    "lifetime": (
        "The access token lives longer than this service accepts: at most 3,600 seconds from"
        " `iat` to `exp`.",
        "Ask the issuer for a token that lives at most one hour.",
    ),
    "not-yet-valid": (
        "The access token is not valid yet: its `iat` or `nbf` is in the future.",
        "Check the clocks of the issuer and of this host, then retry.",
    ),
    "subject": (
        "The access token's `sub` is missing, too long or has control characters.",
        _FRESH_TOKEN,
    ),
    "client": (
        "The access token's client is not one this service allows.",
        "Use a client the service's `allowedClients` names.",
    ),
    "scope": (
        "The access token's scope claim is neither a string nor an array of strings.",
        _FRESH_TOKEN,
    ),
    "assertion-issuer": (
        "The access token names an assertion issuer this service does not allow.",
        _FRESH_TOKEN,
    ),
}


class KeySetUnavailable(Exception):
    """The key set cannot be obtained or parsed."""


# ---------------------------------------------------------------------------------------------
# Key sets


@dataclass(frozen=True, slots=True)
class KeySet:
    """The usable signature keys of a JWKS, by (kid, algorithm)."""

    keys: Mapping[tuple[str, str], jwt.PyJWK]

    @classmethod
    def parse(cls, document: bytes) -> KeySet:
        """Keep RSA (≥ 2048 bits, RS256) and P-256 (ES256) signature keys that have a `kid`;
        ignore the rest. A document that is not a JWKS object is refused."""
        try:
            value = parse_strict_json(document)
        except StrictJsonError as exc:
            raise KeySetUnavailable("the key set is not strict JSON") from exc
        if not isinstance(value, dict) or not isinstance(value.get("keys"), list):
            raise KeySetUnavailable("the key set has no `keys` array")
        keys: dict[tuple[str, str], jwt.PyJWK] = {}
        for entry in value["keys"]:
            parsed = _usable_key(entry)
            if parsed is not None:
                keys.setdefault(parsed[0], parsed[1])
        return cls(keys)

    def find(self, kid: str, algorithm: str) -> jwt.PyJWK | None:
        return self.keys.get((kid, algorithm))


def _usable_key(entry: object) -> tuple[tuple[str, str], jwt.PyJWK] | None:
    if not isinstance(entry, dict):
        return None
    kid, use, kty, alg = entry.get("kid"), entry.get("use"), entry.get("kty"), entry.get("alg")
    if not isinstance(kid, str) or not kid or use not in (None, "sig"):
        return None
    if kty == "RSA":
        algorithm = "RS256"
    elif kty == "EC" and entry.get("crv") == "P-256":
        algorithm = "ES256"
    else:
        return None
    if alg not in (None, algorithm):
        return None
    key_ops = entry.get("key_ops")
    if key_ops is not None and (not isinstance(key_ops, list) or "verify" not in key_ops):
        return None
    try:
        key = jwt.PyJWK(entry, algorithm=algorithm)
    except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
        return None
    material = key.key
    if isinstance(material, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        return None  # a key set publishes public keys only
    if isinstance(material, rsa.RSAPublicKey) and material.key_size < RSA_MIN_BITS:
        return None
    return (kid, algorithm), key


class KeySetCache:
    """One key set source with the refresh policy of 06 §2 (single flight). A static source's
    document is the resolved secret `document` (`Secrets.caller_jwks`)."""

    def __init__(
        self,
        source: JwksSource,
        issuer: str,
        transport: httpx.AsyncBaseTransport | None,
        monotonic: Callable[[], float] = time.monotonic,
        *,
        document: bytes | None = None,
    ) -> None:
        self._source = source
        self._issuer = issuer
        self._transport = transport
        self._monotonic = monotonic
        self._lock = asyncio.Lock()
        self._keys: KeySet | None = None
        self._fetched_at = -math.inf
        self._attempted_at = -math.inf
        self._failed = False
        if isinstance(source, JwksStatic):
            if document is None:
                raise ValueError("A static key set needs its document (Secrets.caller_jwks).")
            self._keys = KeySet.parse(document)  # a broken static set stops the start

    async def start(self) -> None:
        """Load the key set; raise KeySetUnavailable when it cannot be obtained."""
        if isinstance(self._source, JwksStatic):
            return
        async with self._lock:
            await self._refresh()

    async def key(self, kid: str, algorithm: str) -> jwt.PyJWK | None:
        """The key for (kid, algorithm), refreshing as 06 §2 recommends; None if unknown."""
        if isinstance(self._source, JwksStatic):
            assert self._keys is not None
            return self._keys.find(kid, algorithm)
        async with self._lock:
            now = self._monotonic()
            may_refetch = now - self._attempted_at >= JWKS_REFETCH_SECONDS
            refreshed = False
            if self._keys is None or self._failed or now - self._fetched_at >= JWKS_CACHE_SECONDS:
                if not may_refetch:
                    raise KeySetUnavailable("the key set could not be obtained recently")
                await self._refresh()
                refreshed = True
            assert self._keys is not None
            found = self._keys.find(kid, algorithm)
            if found is None and may_refetch and not refreshed:
                await self._refresh()  # a new kid: the issuer may have rotated its keys
                found = self._keys.find(kid, algorithm)
            return found

    async def _refresh(self) -> None:
        self._attempted_at = self._monotonic()
        try:
            document = await self._fetch()
            keys = KeySet.parse(document)
        except KeySetUnavailable:
            self._failed = True
            logger.warning("access key set unavailable")
            raise
        self._keys, self._fetched_at, self._failed = keys, self._attempted_at, False

    async def _fetch(self) -> bytes:
        async with httpx.AsyncClient(
            transport=self._transport, timeout=JWKS_TIMEOUT_SECONDS, follow_redirects=False
        ) as client:
            if isinstance(self._source, JwksUri):
                return await _get(client, self._source.uri)
            assert isinstance(self._source, JwksDiscovery)
            url = self._issuer.rstrip("/") + "/.well-known/openid-configuration"
            try:
                discovery = parse_strict_json(await _get(client, url))
            except StrictJsonError as exc:
                raise KeySetUnavailable("the discovery document is not strict JSON") from exc
            if not isinstance(discovery, dict) or discovery.get("issuer") != self._issuer:
                raise KeySetUnavailable("the discovery document names another issuer")
            jwks_uri = discovery.get("jwks_uri")
            if not isinstance(jwks_uri, str) or not jwks_uri:
                raise KeySetUnavailable("the discovery document has no jwks_uri")
            return await _get(client, jwks_uri)


async def _get(client: httpx.AsyncClient, url: str) -> bytes:
    try:
        async with client.stream("GET", url, headers={"Accept": "application/json"}) as response:
            if response.status_code != 200:
                raise KeySetUnavailable("the key set endpoint did not answer 200")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body.extend(chunk)
                if len(body) > JWKS_MAX_BYTES:
                    raise KeySetUnavailable("the key set document is too large")
            return bytes(body)
    except httpx.HTTPError as exc:
        raise KeySetUnavailable("the key set endpoint cannot be reached") from exc


# ---------------------------------------------------------------------------------------------
# Tokens


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip(" ")
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenRefused("malformed", f"`{name}` is not a number")
    if not math.isfinite(value):
        raise TokenRefused("malformed", f"`{name}` is not finite")
    return float(value)


class AccessVerifier:
    """Verifies access tokens and resolves the caller's policy (06 §2): `settings` is
    `deployment.authentication`, `caller_jwks` the document of its static key set."""

    def __init__(
        self,
        settings: Authentication,
        clock: Callable[[], float],
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        caller_jwks: bytes | None = None,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._keys = KeySetCache(
            settings.jwks_source, settings.issuer, transport, document=caller_jwks
        )
        self._verified: OrderedDict[str, tuple[object, dict[str, Any], str, str]]
        self._verified = OrderedDict()
        """Tokens whose header and signature verified, with the key that verified it, their
        claims, and the header's `kid` and `alg` (a caller presents the same token for up to an
        hour): a token met again under the same key is neither parsed nor verified again; its
        claims are checked every time."""

    async def start(self) -> None:
        await self._keys.start()

    async def verify(self, token: str) -> dict[str, Any]:
        """The verified claims; TokenRefused (401) or KeySetUnavailable (503)."""
        known = self._verified.get(token)
        # A token verified before: its header is the one checked then (the same bytes), so only
        # its key is looked up again (the key set may have rotated since) and its claims checked
        # against the clock.
        if known is not None and await self._keys.key(known[2], known[3]) is known[0]:
            self._verified.move_to_end(token)
            self._check_claims(known[1])
            return dict(known[1])
        if len(token.encode("utf-8")) > TOKEN_MAX_BYTES or not _COMPACT_JWS.fullmatch(token):
            raise TokenRefused("malformed", "not a compact JWS within 16,384 bytes")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise TokenRefused("malformed", "the header does not decode") from exc
        typ, algorithm = header.get("typ"), header.get("alg")
        if not isinstance(typ, str) or typ not in TOKEN_TYPES:
            raise TokenRefused("malformed", "`typ` is not at+jwt")
        if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
            raise TokenRefused("malformed", "`alg` is not RS256 or ES256")
        if "crit" in header:
            raise TokenRefused(
                "malformed", "`crit` names extensions this service does not understand"
            )
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise TokenRefused("malformed", "`kid` is missing")
        key = await self._keys.key(kid, algorithm)
        if key is None:
            raise TokenRefused("signature", "`kid` names no key of the key set")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key.key,
                algorithms=[algorithm],
                options={
                    "verify_signature": True,
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "verify_aud": False,
                    "verify_iss": False,
                    "verify_sub": False,
                    "verify_jti": False,
                    "require": [],
                },
            )
        except jwt.InvalidTokenError as exc:
            raise TokenRefused("signature", "the signature does not verify") from exc
        self._check_claims(claims)
        self._verified[token] = (key, dict(claims), kid, algorithm)
        if len(self._verified) > VERIFIED_TOKENS:
            self._verified.popitem(last=False)
        return claims

    def _check_claims(self, claims: Mapping[str, Any]) -> None:
        settings = self._settings
        if claims.get("iss") != settings.issuer:
            raise TokenRefused("issuer", "`iss` is not the issuer")
        audience = claims.get("aud")
        audiences = [audience] if isinstance(audience, str) else audience
        if not isinstance(audiences, list) or settings.audience not in [
            item for item in audiences if isinstance(item, str)
        ]:
            raise TokenRefused("audience", "`aud` does not contain the audience")
        expires, issued, not_before = (
            _number(claims, "exp"),
            _number(claims, "iat"),
            _number(claims, "nbf"),
        )
        if expires is None or issued is None:
            raise TokenRefused("malformed", "`exp` or `iat` is missing")
        if expires - issued > TOKEN_MAX_LIFETIME_SECONDS:
            raise TokenRefused("lifetime", "the token lives longer than an hour")
        now = self._clock()
        if not now < expires + TOKEN_LEEWAY_SECONDS:
            raise TokenRefused("expired", "the token has expired")
        if issued > now + TOKEN_LEEWAY_SECONDS:
            raise TokenRefused("not-yet-valid", "the token is issued in the future")
        if not_before is not None and not_before > now + TOKEN_LEEWAY_SECONDS:
            raise TokenRefused("not-yet-valid", "the token is not yet valid")
        subject = claims.get("sub")
        if (
            not isinstance(subject, str)
            or not subject
            or len(subject) > SUBJECT_MAX_CHARACTERS
            or _CONTROL.search(subject)
        ):
            raise TokenRefused("subject", "`sub` is missing or malformed")
        client = claims.get(settings.client_id_claim)
        if not isinstance(client, str) or client not in settings.allowed_clients:
            raise TokenRefused("client", "the client is not allowed")
        assertion_issuer = claims.get(ASSERTION_ISSUER_CLAIM)
        if ASSERTION_ISSUER_CLAIM in claims and (
            not isinstance(assertion_issuer, str)
            or assertion_issuer not in settings.assertion_issuers
        ):
            raise TokenRefused("assertion-issuer", "the assertion issuer is not allowed")

    def scopes(self, claims: Mapping[str, Any]) -> frozenset[str]:
        value = claims.get(self._settings.scope_claim)
        if value is None:
            return frozenset()
        if isinstance(value, str):
            return frozenset(part for part in value.split(" ") if part)
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return frozenset(value)
        raise TokenRefused("scope", "the scope claim is neither a string nor an array of strings")

    def caller(self, claims: Mapping[str, Any]) -> Caller | None:
        """The caller under the first policy of its client whose scopes the token carries."""
        client = claims[self._settings.client_id_claim]
        scopes = self.scopes(claims)
        for policy in self._settings.policies:
            if policy.client_id == client and policy.required_scopes <= scopes:
                return Caller(
                    issuer=claims["iss"],
                    subject=claims["sub"],
                    client_id=client,
                    operator=policy.operator,
                    workflows=policy.workflows,
                    actions=policy.actions,
                )
        return None

    async def authenticate(self, authorization: str | None) -> Caller:
        """06 §2 end to end: the caller, or ApiProblem 401 / 403 / 503."""
        token = bearer_token(authorization)
        try:
            if token is None:
                raise TokenRefused("missing", "no bearer token")
            claims = await self.verify(token)
            caller = self.caller(claims)
        except TokenRefused as exc:
            _log_refusal("access token refused", "coordinator.access.unauthenticated", exc.reason)
            shown = REFUSAL_CLASSES.get(exc.reason)
            raise ApiProblem(
                "coordinator.access.unauthenticated",
                detail=shown[0] if shown is not None else None,
                hint=shown[1] if shown is not None else None,
            ) from None
        except KeySetUnavailable:
            raise ApiProblem("coordinator.access.unavailable") from None
        if caller is None:
            _log_refusal("access denied", "coordinator.access.denied", "scope")
            raise ApiProblem(
                "coordinator.access.denied",
                detail="The access token carries none of the scope sets a policy of its client"
                " requires.",
            )
        return caller


def _log_refusal(message: str, code: str, reason: str) -> None:
    """One service-log line per refusal: the catalogue code and the refusal's class (a word of
    REFUSAL_CLASSES, or `scope`), never anything of the token."""
    logger.info(message, extra={"code": code, "keyed": {"refusal": reason}})


def match_secret(token: str | None, secrets: Mapping[str, bytes]) -> str | None:
    """The name of the first secret equal to `token` (constant-time comparison), or None."""
    if token is None:
        return None
    presented = token.encode("utf-8")
    for name, secret in secrets.items():
        if hmac.compare_digest(presented, secret):
            return name
    return None
