"""Per-attempt access tokens: OAuth client credentials with a signed client assertion (08 §2.2).

Every attempt, preparation, observation and receipt lookup gets a token of its own: a new
assertion (new `jti`) is signed and exchanged, and nothing is cached except the parsed signing
key (a key is configuration, a token is authority). The signing key is the connection's
private JWK: `EC` on `P-256` signs `ES256`, `RSA` of at least 2048 bits signs `RS256`; nothing
else is accepted (05 §2.2). No token, assertion or key text ever appears in an error.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import urlencode

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from coordinator_core.engine.inputs import CallOutcome
from coordinator_core.shell.adapters.base import AccessToken, ClientCredentials
from coordinator_core.shell.adapters.destinations import DestinationRefused
from coordinator_core.shell.adapters.http import HttpSettings, exchange, json_body
from coordinator_core.shell.adapters.transport import TransportFailure

__all__ = [
    "ASSERTION_LIFETIME_SECONDS",
    "CLIENT_ASSERTION_TYPE",
    "CredentialIssuer",
    "SigningKey",
    "load_signing_key",
]

CLIENT_ASSERTION_TYPE: Final = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
ASSERTION_LIFETIME_SECONDS: Final = 60
_MIN_RSA_BITS: Final = 2048
# RFC 6750 b64token: anything else could not travel in an Authorization header anyway.
_B64TOKEN: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_MAX_TOKEN_CHARS: Final = 16_384
_MAX_CACHED_KEYS: Final = 64


class SigningKeyError(ValueError):
    """The signing key cannot be loaded or used (fixed message, never the key)."""

    def __init__(self) -> None:
        super().__init__("The client signing key cannot be loaded or used.")


class SigningKey:
    """A loaded private signing key, its JWS algorithm and its `kid`."""

    __slots__ = ("algorithm", "key", "kid")

    def __init__(
        self, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, algorithm: str, kid: str
    ) -> None:
        self.key = key
        self.algorithm = algorithm
        self.kid = kid

    def __repr__(self) -> str:
        return f"SigningKey({self.algorithm}, <redacted>)"


def load_signing_key(jwk: Mapping[str, Any] | str | bytes) -> SigningKey:
    """Load a private JWK as 05 §2.2 allows it; raises SigningKeyError otherwise."""
    try:
        data: Any = json.loads(jwk) if isinstance(jwk, str | bytes) else dict(jwk)
    except (ValueError, TypeError) as exc:
        raise SigningKeyError() from exc
    if not isinstance(data, dict):
        raise SigningKeyError()
    kid, kty, declared = data.get("kid"), data.get("kty"), data.get("alg")
    if not isinstance(kid, str) or not kid or "d" not in data:
        raise SigningKeyError()
    if kty == "EC" and data.get("crv") == "P-256":
        algorithm = "ES256"
    elif kty == "RSA":
        algorithm = "RS256"
    else:
        raise SigningKeyError()
    if declared is not None and declared != algorithm:
        raise SigningKeyError()
    try:
        key = jwt.PyJWK(data, algorithm=algorithm).key
    except Exception as exc:  # PyJWT raises several types for bad key material
        raise SigningKeyError() from exc
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise SigningKeyError()
        return SigningKey(key, algorithm, kid)
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size >= _MIN_RSA_BITS:
        return SigningKey(key, algorithm, kid)
    raise SigningKeyError()


class CredentialIssuer:
    """Obtains one fresh access token per call of `obtain`; never caches a token.

    `wall_clock` gives `iat`/`exp` (seconds since the epoch); deadlines use the monotonic
    clock of `settings`.
    """

    def __init__(
        self,
        settings: HttpSettings | None = None,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings or HttpSettings()
        self._wall_clock = wall_clock
        # ClientCredentials compares by identity, so a reloaded runtime file parses again.
        self._keys: dict[ClientCredentials, SigningKey] = {}
        self._lock = threading.Lock()

    def signing_key(self, credentials: ClientCredentials) -> SigningKey:
        """The parsed key of `credentials` (parsed once per credentials object)."""
        with self._lock:
            cached = self._keys.get(credentials)
        if cached is not None:
            return cached
        key = load_signing_key(credentials.signing_key)
        with self._lock:
            if len(self._keys) >= _MAX_CACHED_KEYS:
                self._keys.clear()
            self._keys[credentials] = key
        return key

    def assertion(self, credentials: ClientCredentials) -> str:
        """A new client assertion JWT (08 §2.2 step 1). Raises SigningKeyError."""
        key = self.signing_key(credentials)
        now = int(self._wall_clock())
        claims = {
            "iss": credentials.client_id,
            "sub": credentials.client_id,
            "aud": credentials.audience,
            "jti": str(uuid.uuid4()),
            "iat": now,
            "exp": now + ASSERTION_LIFETIME_SECONDS,
        }
        try:
            return jwt.encode(
                claims, key.key, algorithm=key.algorithm, headers={"kid": key.kid, "typ": "JWT"}
            )
        except Exception as exc:  # a key that loads but cannot sign
            raise SigningKeyError() from exc

    def obtain(
        self, credentials: ClientCredentials, *, step: str, attempt_deadline: float
    ) -> AccessToken | CallOutcome:
        """Exchange a fresh assertion for a token (08 §2.2 steps 2–3), or the engine's
        `CallOutcome` for `step`, classified by the table of §2.2: transport failure, 408,
        429, 5xx → retryable `credential-unavailable`; an unusable signing key → refused
        `credential-configuration`; any other non-200 or a malformed answer → refused
        `credential-refused`."""
        refused = CallOutcome(step, "refused", code="credential-refused")
        unavailable = CallOutcome(step, "retryable", code="credential-unavailable")
        try:
            assertion = self.assertion(credentials)
        except SigningKeyError:
            return CallOutcome(step, "refused", code="credential-configuration")
        form = urlencode(
            {
                "grant_type": "client_credentials",
                "client_assertion_type": CLIENT_ASSERTION_TYPE,
                "client_assertion": assertion,
                "scope": " ".join(credentials.scopes),
                "resource": credentials.resource,
            }
        ).encode("ascii")
        try:
            answer = exchange(
                "POST",
                credentials.token_endpoint,
                headers={"Content-Type": "application/x-www-form-urlencoded"},
                body=form,
                attempt_deadline=attempt_deadline,
                settings=self._settings,
            )
        except TransportFailure:
            return unavailable
        except DestinationRefused:
            return refused
        status = answer.status
        if status in (408, 429) or 500 <= status < 600:
            return unavailable
        if status != 200:
            return refused
        value = json_body(answer)
        if not isinstance(value, dict):
            return refused
        token, token_type = value.get("access_token"), value.get("token_type")
        expires_in = value.get("expires_in")
        if (
            not isinstance(token, str)
            or len(token) > _MAX_TOKEN_CHARS
            or _B64TOKEN.fullmatch(token) is None
            or not isinstance(token_type, str)
            or token_type.lower() != "bearer"
            or not isinstance(expires_in, int)
            or isinstance(expires_in, bool)
        ):
            return refused
        return AccessToken(token)
