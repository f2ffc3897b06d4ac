"""The sandbox identity provider: client credentials with a signed client assertion (RFC 7523
`private_key_jwt`, file 08 §2.2 and §11.1), its JWKS, and caller tokens (RFC 9068) for tests.

Assertion rules, each refused with `401 invalid_client`:
header `alg` ES256/RS256 matching the client's key named by `kid`, `typ` absent or `JWT`;
`iss` = `sub` = a registered client; signature; `aud` (string, or array containing it) exactly
one of the accepted audiences (the token endpoint URL by default); `exp` in the future and at
most 300 s after `iat`; `iat` not in the future; `nbf` (when present) passed; `jti` present and
never seen before for this client while the assertion is valid.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import jwt
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from coordinator_sandbox.keys import public_jwk, verification_key
from coordinator_sandbox.service import Service
from coordinator_sandbox.tokens import ALLOWED_ALGORITHMS, Issuer, mint_caller_token, scopes_of
from coordinator_sandbox.web import (
    DroppedResponse,
    ProblemError,
    json_response,
    problems,
    read_json_body,
    read_raw_body,
)

__all__ = ["ClientRegistry", "IdentityService", "RegisteredClient"]

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
TOKEN_OPERATION = "identity.token"
MAXIMUM_ASSERTION_LIFETIME = 300
CLOCK_SKEW_SECONDS = 5
_SCOPE_TOKEN = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]{1,256}$")
_OAUTH_ERRORS = {429: "slow_down", 503: "temporarily_unavailable"}


@dataclass
class RegisteredClient:
    """A client allowed at the token endpoint: its public keys and optional limits."""

    client_id: str
    keys: dict[str, dict[str, Any]]
    scopes: frozenset[str] | None = None
    resources: frozenset[str] | None = None

    def describe(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "clientId": self.client_id,
            "jwks": {"keys": list(self.keys.values())},
        }
        if self.scopes is not None:
            result["scopes"] = sorted(self.scopes)
        if self.resources is not None:
            result["resources"] = sorted(self.resources)
        return result


def _string_list(value: Any, name: str) -> frozenset[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"`{name}` must be a list of strings")
    return frozenset(value)


def client_from_json(value: Any) -> RegisteredClient:
    """A registered client from `{clientId, jwk | jwks, scopes?, resources?}`; private members
    of a key, if given, are dropped and only the public half is kept."""
    if not isinstance(value, dict):
        raise ValueError("a client is a JSON object")
    client_id = value.get("clientId")
    if not isinstance(client_id, str) or not client_id.strip() or len(client_id) > 256:
        raise ValueError("`clientId` must be a non-blank string of at most 256 characters")
    raw_keys: list[Any]
    if "jwk" in value:
        raw_keys = [value["jwk"]]
    elif isinstance(value.get("jwks"), dict) and isinstance(value["jwks"].get("keys"), list):
        raw_keys = value["jwks"]["keys"]
    else:
        raise ValueError("a client needs `jwk` or `jwks`")
    keys: dict[str, dict[str, Any]] = {}
    for raw in raw_keys:
        if not isinstance(raw, dict) or not isinstance(raw.get("kid"), str):
            raise ValueError("every client key is a JWK with a `kid`")
        public = public_jwk(raw)
        verification_key(public)  # refuses unusable keys now rather than at the first token
        keys[public["kid"]] = public
    if not keys:
        raise ValueError("a client needs at least one key")
    return RegisteredClient(
        client_id,
        keys,
        _string_list(value.get("scopes"), "scopes"),
        _string_list(value.get("resources"), "resources"),
    )


class ClientRegistry:
    """Registered clients by id."""

    def __init__(self, clients: Iterable[RegisteredClient] = ()) -> None:
        self.clients = {client.client_id: client for client in clients}

    def register(self, client: RegisteredClient) -> None:
        self.clients[client.client_id] = client


class OAuthError(Exception):
    """An RFC 6749 §5.2 error answer."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.description = description


def _oauth_response(status: int, error: str, description: str) -> Response:
    headers = {"Pragma": "no-cache"}
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer error="invalid_client"'
    return json_response({"error": error, "error_description": description}, status, headers)


def _absolute_uri_without_fragment(value: str) -> bool:
    parts = urlsplit(value)
    return bool(parts.scheme) and not parts.fragment and "#" not in value and " " not in value


class IdentityService(Service):
    """Token endpoint `POST /oauth/token`, `/.well-known/jwks.json` and caller-token minting."""

    def __init__(
        self,
        issuer: Issuer,
        clients: ClientRegistry,
        resources: Iterable[str],
        assertion_audiences: Iterable[str] = (),
    ) -> None:
        super().__init__("identity", None, None, [TOKEN_OPERATION])
        self.provider = issuer
        self.clients = clients
        self.resources = set(resources)
        self.assertion_audiences = {issuer.token_endpoint, *assertion_audiences}
        self.seen_jti: dict[tuple[str, str], float] = {}

    def fault_response(self, status: int, code: str | None, request: Request) -> Response:
        error = code or _OAUTH_ERRORS.get(
            status, "server_error" if status >= 500 else "invalid_request"
        )
        return _oauth_response(status, error, "Injected by the sandbox.")

    def product_routes(self) -> list[BaseRoute]:
        return [
            Route("/oauth/token", self._token, methods=["POST"]),
            Route("/.well-known/jwks.json", self._jwks, methods=["GET"]),
            Route("/.well-known/openid-configuration", self._discovery, methods=["GET"]),
            Route("/.well-known/oauth-authorization-server", self._discovery, methods=["GET"]),
        ]

    def control_routes(self) -> list[BaseRoute]:
        return [
            Route("/sandbox/clients", problems(self._list_clients), methods=["GET"]),
            Route("/sandbox/clients", problems(self._register_client), methods=["POST"]),
            Route("/sandbox/caller-tokens", problems(self._caller_token), methods=["POST"]),
            Route("/sandbox/access-tokens", problems(self._access_token), methods=["POST"]),
            *super().control_routes(),
        ]

    async def _jwks(self, request: Request) -> Response:
        return json_response(self.provider.jwks())

    async def _discovery(self, request: Request) -> Response:
        return json_response(
            {
                "issuer": self.provider.url,
                "jwks_uri": self.provider.url + "/.well-known/jwks.json",
                "token_endpoint": self.provider.token_endpoint,
                "grant_types_supported": ["client_credentials"],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
                "token_endpoint_auth_signing_alg_values_supported": list(ALLOWED_ALGORITHMS),
                "id_token_signing_alg_values_supported": list(ALLOWED_ALGORITHMS),
                "response_types_supported": ["token"],
                "subject_types_supported": ["public"],
            }
        )

    # -- the token endpoint
    async def _token(self, request: Request) -> Response:
        record = self.log.begin(TOKEN_OPERATION, request)
        fault = self.faults.take(TOKEN_OPERATION)
        record["fault"] = fault.kind if fault else None
        response = await self._pre_commit_fault(fault, request) if fault else None
        if response is None:
            try:
                response = await self._issue(request, record)
            except OAuthError as error:
                response = _oauth_response(error.status, error.error, error.description)
            if fault is not None and fault.kind == "commit-then-drop":
                response = DroppedResponse()
        if isinstance(response, DroppedResponse):
            record["outcome"] = "dropped"
        else:
            record["outcome"] = "answered"
            record["status"] = response.status_code
            record["committed"] = response.status_code == 200
        return response

    async def _form(self, request: Request) -> dict[str, str]:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/x-www-form-urlencoded":
            raise OAuthError(400, "invalid_request", "The body must be form-encoded.")
        try:
            raw = await read_raw_body(request, 65_536)
            pairs = parse_qsl(raw.decode("ascii"), keep_blank_values=True, strict_parsing=True)
        except (ProblemError, UnicodeDecodeError, ValueError) as exc:
            raise OAuthError(400, "invalid_request", "The form body is malformed.") from exc
        form: dict[str, str] = {}
        for name, value in pairs:
            if name in form:
                raise OAuthError(400, "invalid_request", f"`{name}` is repeated.")
            form[name] = value
        return form

    async def _issue(self, request: Request, record: dict[str, Any]) -> Response:
        form = await self._form(request)
        if form.get("grant_type") != "client_credentials":
            raise OAuthError(400, "unsupported_grant_type", "Only client_credentials is served.")
        if form.get("client_assertion_type") != ASSERTION_TYPE:
            raise OAuthError(400, "invalid_client", "A jwt-bearer client assertion is required.")
        assertion = form.get("client_assertion", "")
        client = self._verify_assertion(assertion, form.get("client_id"))
        record["principal"] = client.client_id
        resource = form.get("resource", "")
        if not resource or not _absolute_uri_without_fragment(resource):
            raise OAuthError(400, "invalid_target", "`resource` must be an absolute URI.")
        if resource not in self.resources or (
            client.resources is not None and resource not in client.resources
        ):
            raise OAuthError(400, "invalid_target", "The resource is not served to this client.")
        requested = [part for part in form.get("scope", "").split(" ") if part]
        if not requested or not all(_SCOPE_TOKEN.match(scope) for scope in requested):
            raise OAuthError(400, "invalid_scope", "`scope` must name at least one scope.")
        if client.scopes is not None and not set(requested) <= client.scopes:
            raise OAuthError(400, "invalid_scope", "A scope is not granted to this client.")
        scopes = list(dict.fromkeys(requested))
        record["body"] = {"clientId": client.client_id, "resource": resource, "scope": scopes}
        token, expires_in = self.provider.issue_access_token(client.client_id, resource, scopes)
        return json_response(
            {
                "access_token": token,
                "token_type": "Bearer",
                "expires_in": expires_in,
                "scope": " ".join(scopes),
            },
            headers={"Pragma": "no-cache"},
        )

    def _verify_assertion(self, assertion: str, client_id_field: str | None) -> RegisteredClient:
        def refuse(description: str) -> OAuthError:
            return OAuthError(401, "invalid_client", description)

        try:
            header = jwt.get_unverified_header(assertion)
            unverified = jwt.decode(assertion, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise refuse("The client assertion is not a JWS.") from exc
        if header.get("typ") is not None and str(header["typ"]).upper() != "JWT":
            raise refuse("The client assertion `typ` must be JWT.")
        issuer, subject = unverified.get("iss"), unverified.get("sub")
        if not isinstance(issuer, str) or issuer != subject:
            raise refuse("`iss` and `sub` must both be the client id.")
        if client_id_field is not None and client_id_field != issuer:
            raise refuse("`client_id` does not match the assertion.")
        client = self.clients.clients.get(issuer)
        if client is None:
            raise refuse("The client is not registered.")
        public = client.keys.get(str(header.get("kid")))
        if public is None:
            raise refuse("`kid` names no key of this client.")
        algorithm, key = verification_key(public)
        if header.get("alg") != algorithm:
            raise refuse("`alg` does not match the client's key.")
        try:
            claims = jwt.decode(
                assertion,
                key,
                algorithms=[algorithm],
                options={
                    "verify_aud": False,
                    "verify_iss": False,
                    "verify_exp": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                },
            )
        except jwt.PyJWTError as exc:
            raise refuse("The client assertion signature does not verify.") from exc
        self._check_assertion_claims(client.client_id, claims, refuse)
        return client

    def _check_assertion_claims(
        self, client_id: str, claims: Mapping[str, Any], refuse: Callable[[str], OAuthError]
    ) -> None:
        audience = claims.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if not any(
            isinstance(item, str) and item in self.assertion_audiences for item in audiences
        ):
            raise refuse("`aud` is not this token endpoint.")
        now = time.time()
        expires, issued = claims.get("exp"), claims.get("iat")
        if not isinstance(expires, int | float) or isinstance(expires, bool):
            raise refuse("`exp` is required.")
        if not isinstance(issued, int | float) or isinstance(issued, bool):
            raise refuse("`iat` is required.")
        if expires <= now:
            raise refuse("The client assertion has expired.")
        if issued > now + CLOCK_SKEW_SECONDS:
            raise refuse("The client assertion is issued in the future.")
        if expires - max(issued, now) > MAXIMUM_ASSERTION_LIFETIME:
            raise refuse("The client assertion lives too long.")
        not_before = claims.get("nbf")
        if isinstance(not_before, int | float) and not_before > now + CLOCK_SKEW_SECONDS:
            raise refuse("The client assertion is not yet valid.")
        jti = claims.get("jti")
        if not isinstance(jti, str) or not jti:
            raise refuse("`jti` is required.")
        self.seen_jti = {name: until for name, until in self.seen_jti.items() if until > now}
        if (client_id, jti) in self.seen_jti:
            raise refuse("The client assertion was already used (`jti` replay).")
        self.seen_jti[(client_id, jti)] = float(expires) + CLOCK_SKEW_SECONDS

    # -- control
    async def _list_clients(self, request: Request) -> Response:
        return json_response(
            {"clients": [client.describe() for client in self.clients.clients.values()]}
        )

    async def _register_client(self, request: Request) -> Response:
        body = await read_json_body(request)
        try:
            client = client_from_json(body)
        except (ValueError, KeyError, jwt.PyJWTError) as exc:
            raise ProblemError(400, "request.invalid", str(exc)) from exc
        self.clients.register(client)
        return json_response(client.describe(), 201)

    async def _access_token(self, request: Request) -> Response:
        """A product access token without an assertion, for tests that exercise products only."""
        body = await read_json_body(request)
        if not isinstance(body, dict):
            raise ProblemError(400, "request.invalid", "The body is a JSON object.")
        client_id = body.get("clientId", "sandbox-test-client")
        resource = body.get("resource")
        scopes = scopes_of(body.get("scope", body.get("scopes", [])))
        lifetime = body.get("expiresIn", self.provider.access_token_lifetime_seconds)
        if not isinstance(client_id, str) or not isinstance(resource, str):
            raise ProblemError(400, "request.invalid", "`clientId` and `resource` are strings.")
        if isinstance(lifetime, bool) or not isinstance(lifetime, int):
            raise ProblemError(400, "request.invalid", "`expiresIn` is an integer.")
        token, expires_in = self.provider.issue_access_token(
            client_id, resource, sorted(scopes), lifetime
        )
        return json_response(
            {"access_token": token, "token_type": "Bearer", "expires_in": expires_in}
        )

    async def _caller_token(self, request: Request) -> Response:
        body = await read_json_body(request)
        try:
            token, claims = mint_caller_token(self.provider, body)
        except ValueError as exc:
            raise ProblemError(400, "request.invalid", str(exc)) from exc
        return json_response(
            {
                "access_token": token,
                "token_type": "Bearer",
                "expires_in": int(claims.get("exp", 0)) - int(claims.get("iat", 0)),
                "claims": claims,
            },
            201,
        )
