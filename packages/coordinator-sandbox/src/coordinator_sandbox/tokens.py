"""The identity provider's signing keys and the access-token check every sandbox product runs.

Access tokens for products are ES256 JWTs (file 08 §11.1); products accept a token when its
signature verifies with a key of the issuer's JWKS, `iss` is the issuer, `aud` is the product's
resource and it has not expired (→ 401 `authentication.refused`), and it carries one of the
scopes the operation accepts (→ 403 `operation.not-authorized`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from coordinator_sandbox.errors import ProblemError
from coordinator_sandbox.keys import (
    SigningKey,
    generate_private_jwk,
    read_json_file,
    write_secret_json,
)

__all__ = [
    "CALLER_TOKEN_SECONDS",
    "Issuer",
    "Principal",
    "load_issuer",
    "mint_caller_token",
    "scopes_of",
]

ALLOWED_ALGORITHMS = ("ES256", "RS256")
# A caller token's default lifetime: the longest the coordinator accepts (06 §2: `exp - iat`
# at most 3600 s), so a development token does not lapse five minutes into a session.
CALLER_TOKEN_SECONDS = 3600


@dataclass(frozen=True)
class Principal:
    """Who called a product: the verified token's subject, client id and scopes."""

    subject: str
    client_id: str
    scopes: frozenset[str]


def scopes_of(value: Any) -> frozenset[str]:
    """Scopes from a space-separated string or an array of strings; anything else is none."""
    if isinstance(value, str):
        return frozenset(part for part in value.split(" ") if part)
    if isinstance(value, list):
        return frozenset(item for item in value if isinstance(item, str) and item)
    return frozenset()


def _unauthenticated(detail: str) -> ProblemError:
    return ProblemError(
        401, "authentication.refused", detail, headers={"WWW-Authenticate": "Bearer"}
    )


class Issuer:
    """The sandbox identity provider's issuer URL and signing keys (one ES256, one RS256)."""

    def __init__(
        self,
        issuer_url: str,
        private_jwks: Iterable[Mapping[str, Any]] | None = None,
        access_token_lifetime_seconds: int = 300,
    ) -> None:
        self.url = issuer_url
        keys = [SigningKey(jwk) for jwk in (private_jwks or ())]
        if not any(key.algorithm == "ES256" for key in keys):
            keys.append(SigningKey(generate_private_jwk("EC")))
        if not any(key.algorithm == "RS256" for key in keys):
            keys.append(SigningKey(generate_private_jwk("RSA")))
        self.keys = {key.kid: key for key in keys}
        self.access_token_lifetime_seconds = access_token_lifetime_seconds

    @property
    def token_endpoint(self) -> str:
        return self.url + "/oauth/token"

    def private_jwks(self) -> dict[str, Any]:
        return {"keys": [key.jwk for key in self.keys.values()]}

    def jwks(self) -> dict[str, Any]:
        """The public JWKS published at `/.well-known/jwks.json`."""
        return {"keys": [key.public for key in self.keys.values()]}

    def key_for(self, algorithm: str) -> SigningKey:
        for key in self.keys.values():
            if key.algorithm == algorithm:
                return key
        raise ValueError(f"the issuer has no {algorithm} key")

    def sign(
        self,
        claims: Mapping[str, Any],
        *,
        algorithm: str = "ES256",
        typ: str | None = "JWT",
        kid: str | None = None,
        extra_header: Mapping[str, Any] | None = None,
    ) -> str:
        key = self.key_for(algorithm)
        header: dict[str, Any] = {"kid": key.kid if kid is None else kid}
        if typ is not None:
            header["typ"] = typ
        header.update(extra_header or {})
        return jwt.encode(dict(claims), key.key, algorithm=key.algorithm, headers=header)

    def issue_access_token(
        self, client_id: str, resource: str, scopes: Iterable[str], lifetime: int | None = None
    ) -> tuple[str, int]:
        """An ES256 product access token (file 08 §11.1) and its lifetime in seconds."""
        now = int(time.time())
        expires_in = self.access_token_lifetime_seconds if lifetime is None else lifetime
        claims = {
            "iss": self.url,
            "sub": client_id,
            "client_id": client_id,
            "aud": resource,
            "scope": " ".join(scopes),
            "iat": now,
            "exp": now + expires_in,
            "jti": str(uuid.uuid4()),
        }
        return self.sign(claims), expires_in

    def verify_access_token(self, token: str, resource: str) -> Principal:
        """Check a product access token; refusals are 401 `authentication.refused`."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise _unauthenticated("The bearer token is not a JWS.") from exc
        algorithm = header.get("alg")
        key = self.keys.get(str(header.get("kid")))
        if algorithm not in ALLOWED_ALGORITHMS or key is None or key.algorithm != algorithm:
            raise _unauthenticated("The bearer token is not signed by the identity provider.")
        try:
            claims = jwt.decode(
                token,
                key.key.public_key(),
                algorithms=[key.algorithm],
                audience=resource,
                issuer=self.url,
                options={"require": ["exp", "iat", "sub"]},
            )
        except jwt.PyJWTError as exc:
            raise _unauthenticated("The bearer token was refused.") from exc
        client_id = claims.get("client_id", claims.get("sub"))
        if not isinstance(client_id, str) or not isinstance(claims.get("sub"), str):
            raise _unauthenticated("The bearer token names no client.")
        return Principal(claims["sub"], client_id, scopes_of(claims.get("scope")))

    def authenticate(
        self, authorization: str | None, resource: str, accepted_scopes: Iterable[str]
    ) -> Principal:
        """Bearer check of file 08 §11.2: 401 without a valid token, 403 without a scope."""
        if not authorization:
            raise _unauthenticated("A bearer token is required.")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthenticated("A bearer token is required.")
        principal = self.verify_access_token(token.strip(), resource)
        accepted = frozenset(accepted_scopes)
        if accepted and not principal.scopes & accepted:
            raise ProblemError(
                403, "operation.not-authorized", "The token lacks a scope this operation needs."
            )
        return principal


def load_issuer(state_dir: Path | None, issuer_url: str, lifetime: int = 300) -> Issuer:
    """The issuer with the state directory's keys, creating and saving them when absent."""
    path = state_dir / "issuer-keys.json" if state_dir else None
    keys = read_json_file(path)["keys"] if path and path.exists() else None
    issuer = Issuer(issuer_url, keys, lifetime)
    if path is not None and keys is None:
        write_secret_json(path, issuer.private_jwks())
    return issuer


def mint_caller_token(issuer: Issuer, spec: Any) -> tuple[str, dict[str, Any]]:
    """A coordinator caller token (RFC 9068 `at+jwt`, file 06 §2) from a request of the form

    `{subject, clientId, scopes | scope, audience, issuer, expiresIn, issuedAt, notBefore,
      algorithm: ES256|RS256, scopeClaim, clientIdClaim, claims: {…}, header: {…}}`

    with defaults `demo-operator`, `ops-console`, `["coordinator:operate"]`, `coordinator`,
    this issuer, 3600 s (CALLER_TOKEN_SECONDS), now. `claims` adds or replaces claims (null removes one) and `header`
    overrides header members, so tests can build every malformed token they need.
    """
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise ValueError("the request is a JSON object")
    now = int(time.time())

    def text(name: str, default: str) -> str:
        value = spec.get(name, default)
        if not isinstance(value, str):
            raise ValueError(f"`{name}` must be a string")
        return value

    def integer(name: str, default: int | None) -> int | None:
        value = spec.get(name, default)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"`{name}` must be an integer")
        return value

    raw_scopes = spec.get("scopes", spec.get("scope", ["coordinator:operate"]))
    if isinstance(raw_scopes, list):
        if not all(isinstance(item, str) for item in raw_scopes):
            raise ValueError("`scopes` must be strings")
        scope_text = " ".join(raw_scopes)
    elif isinstance(raw_scopes, str):
        scope_text = raw_scopes
    else:
        raise ValueError("`scopes` must be a list or a string")
    issued_at = integer("issuedAt", now)
    assert issued_at is not None
    expires_in = integer("expiresIn", CALLER_TOKEN_SECONDS)
    assert expires_in is not None
    audience: Any = spec.get("audience", "coordinator")
    if not isinstance(audience, str | list):
        raise ValueError("`audience` must be a string or a list")
    claims: dict[str, Any] = {
        "iss": text("issuer", issuer.url),
        "sub": text("subject", "demo-operator"),
        "aud": audience,
        text("clientIdClaim", "client_id"): text("clientId", "ops-console"),
        text("scopeClaim", "registry_scopes"): scope_text,
        "iat": issued_at,
        "exp": issued_at + expires_in,
        "jti": str(uuid.uuid4()),
    }
    not_before = integer("notBefore", None)
    if not_before is not None:
        claims["nbf"] = not_before
    overrides = spec.get("claims", {})
    header = spec.get("header", {})
    if not isinstance(overrides, dict) or not isinstance(header, dict):
        raise ValueError("`claims` and `header` must be objects")
    for name, value in overrides.items():
        if value is None:
            claims.pop(name, None)
        else:
            claims[name] = value
    algorithm = text("algorithm", "ES256")
    if algorithm not in ALLOWED_ALGORITHMS:
        raise ValueError("`algorithm` must be ES256 or RS256")
    typ = header.get("typ", "at+jwt")
    kid = header.get("kid")
    extra = {name: value for name, value in header.items() if name not in {"typ", "kid"}}
    token = issuer.sign(
        claims,
        algorithm=algorithm,
        typ=typ if isinstance(typ, str) else None,
        kid=kid if isinstance(kid, str) else None,
        extra_header=extra,
    )
    return token, claims
