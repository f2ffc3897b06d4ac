"""The peer of the service benchmark: the benchmark's job on DBOS Transact, in one process.

`scripts/bench_service.py` starts this script with the Python of its own virtual environment
(`scripts/bench_peer/requirements.txt`: `dbos==3.4.0`, uvicorn, Starlette, httpx, PyJWT; never
a dependency of the workspace) and a JSON configuration file that it derives from the very
`runtime.yaml` and sandbox endpoints our service is benchmarked with:

* `POST /v1/runs` takes the body our admission takes (`{workflow, revision, input:
  {applicationId}}`) and an `Idempotency-Key` header, verifies the caller's bearer token the
  way `coordinator_api.access` does (an `at+jwt` signed by the sandbox identity, checked with
  PyJWT against the sandbox's JWKS, issuer, audience, lifetime, subject, client and scope),
  starts the workflow with the idempotency key as its workflow id and answers 201
  `{"runId": …}`; the same key again answers the same run.
* The workflow does what `bench_service.py`'s project does: step 1 obtains a fresh access
  token (client credentials with a signed client assertion, as our adapters do for every
  call) and reads the BReg record; a choose on `data.domainData.followUpAllowed`; step 2
  obtains a fresh token and submits the Messaging message (the body our functions build, with
  an idempotency key derived from the workflow id and the step); then it finishes.
* Every product request opens its own connection, as our adapters' client does (one pinned
  connection per exchange, no keep-alive), so both sides pay the same for the products.
* The system database is PostgreSQL (`systemDatabaseUrl`, a database of its own).

`start` chooses how a run is started, and so the peer's concurrency:

* `direct` (the benchmark's default): `DBOS.start_workflow_async` in the handler, DBOS's own
  pattern for starting durable work from a request. The workflow status row is written before
  the answer, and the workflow runs at once as a task of the server's event loop: nothing
  polls, and as many runs are in flight as were admitted and have not finished (one at
  concurrency 1; at concurrency 8 every admitted run). Our service, too, starts a run's work
  at once (an admission wakes an idle worker loop) but carries at most
  `deployment.worker.concurrency` runs per process.
* `queue`: admission enqueues the workflow on a DBOS queue with `worker_concurrency`
  (`queueConcurrency`, by default our `deployment.worker.concurrency`, 4) and our worker's
  poll interval (`pollMilliseconds`, 20 ms): the shape of a bounded set of worker loops, but
  DBOS queues have no wake-up, so every run waits for the next poll and idle polls cost
  transactions.

`GET /health` answers 200 once DBOS is launched. SIGTERM stops uvicorn, then DBOS.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
import uvicorn
from dbos import DBOS, DBOSConfig, SetWorkflowID
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

QUEUE = "bench-peer"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
TOKEN_TYPES = frozenset({"at+jwt", "application/at+jwt"})
ALGORITHMS = frozenset({"RS256", "ES256"})
COMPACT_JWS = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
KEY_PATTERN = re.compile(r"[\x21-\x7e]{1,255}")
LEEWAY = 30
TIMEOUT = httpx.Timeout(10.0)
# One TLS context for every client, as our adapters keep one (building it per client loads the
# CA bundle each time, which would cost the peer milliseconds per request that ours does not pay).
SSL_CONTEXT = httpx.create_ssl_context(trust_env=False)


class Refused(Exception):
    """The caller's token breaks a rule; the reason is logged, never answered."""


class Config:
    """The configuration file written by `bench_service.py`."""

    def __init__(self, path: Path) -> None:
        value: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        self.port: int = value["port"]
        self.system_database_url: str = value["systemDatabaseUrl"]
        self.issuer: str = value["issuer"]
        self.jwks_uri: str = value["jwksUri"]
        self.audience: str = value["audience"]
        self.allowed_clients = frozenset(value["allowedClients"])
        self.required_scopes = frozenset(value["requiredScopes"])
        self.workflow: str = value["workflow"]
        self.start: str = value["start"]
        self.queue_concurrency: int = value["queueConcurrency"]
        self.poll_seconds: float = value["pollMilliseconds"] / 1000
        self.connections: dict[str, dict[str, Any]] = value["connections"]
        self.keys: dict[str, jwt.PyJWK] = {}
        for name, connection in self.connections.items():
            text = Path(connection["signingKeyFile"]).read_text(encoding="utf-8")
            jwk = json.loads(text)
            algorithm = "ES256" if jwk["kty"] == "EC" else "RS256"
            self.keys[name] = jwt.PyJWK(jwk, algorithm=algorithm)


CONFIG: Config
CALLER_KEYS: dict[tuple[str, str], jwt.PyJWK] = {}


# -- the caller's token (what coordinator_api.access checks) ---------------------------------


def load_caller_keys(jwks_uri: str) -> None:
    """The sandbox identity's published key set, fetched once at start (ours: loaded at start
    and cached, here too)."""
    document = httpx.get(jwks_uri, timeout=TIMEOUT, trust_env=False).raise_for_status().json()
    for entry in document["keys"]:
        kid, kty = entry.get("kid"), entry.get("kty")
        algorithm = {"EC": "ES256", "RSA": "RS256"}.get(kty or "")
        if isinstance(kid, str) and algorithm is not None and entry.get("use") in (None, "sig"):
            CALLER_KEYS[(kid, algorithm)] = jwt.PyJWK(entry, algorithm=algorithm)


def verify_caller(authorization: str | None) -> dict[str, Any]:
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip(" ")
    if scheme.lower() != "bearer" or len(token) > 16_384 or not COMPACT_JWS.fullmatch(token):
        raise Refused("no compact bearer token")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError as exc:
        raise Refused("the header does not decode") from exc
    algorithm = header.get("alg")
    if header.get("typ") not in TOKEN_TYPES or algorithm not in ALGORITHMS or "crit" in header:
        raise Refused("typ, alg or crit")
    key = CALLER_KEYS.get((str(header.get("kid")), str(algorithm)))
    if key is None:
        raise Refused("unknown kid")
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key=key.key,
            algorithms=[str(algorithm)],
            audience=CONFIG.audience,
            issuer=CONFIG.issuer,
            leeway=LEEWAY,
            options={"require": ["exp", "iat", "iss", "aud", "sub"]},
        )
    except jwt.InvalidTokenError as exc:
        raise Refused("signature or registered claims") from exc
    if claims["exp"] - claims["iat"] > 3600:
        raise Refused("lives longer than an hour")
    subject = claims["sub"]
    if not isinstance(subject, str) or not subject or len(subject) > 512:
        raise Refused("sub")
    if claims.get("client_id") not in CONFIG.allowed_clients:
        raise Refused("client")
    scopes = claims.get("registry_scopes", "")
    granted = set(scopes.split(" ")) if isinstance(scopes, str) else set(scopes)
    if not CONFIG.required_scopes <= granted:
        raise Refused("scopes")
    return claims


# -- the products (what coordinator_core.shell.adapters do per call) -------------------------------


def client_assertion(name: str) -> str:
    connection, key = CONFIG.connections[name], CONFIG.keys[name]
    now = int(time.time())
    claims = {
        "iss": connection["clientId"],
        "sub": connection["clientId"],
        "aud": connection["tokenEndpoint"],
        "jti": str(uuid.uuid4()),
        "iat": now,
        "exp": now + 60,
    }
    assert key.key_id is not None
    return jwt.encode(
        claims, key.key, algorithm=key.algorithm_name, headers={"kid": key.key_id, "typ": "JWT"}
    )


async def exchange(method: str, url: str, **arguments: Any) -> httpx.Response:
    """One request on a connection of its own (as our adapters' pinned client)."""
    async with httpx.AsyncClient(timeout=TIMEOUT, trust_env=False, verify=SSL_CONTEXT) as client:
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        headers.update(arguments.pop("headers", {}))
        return await client.request(method, url, headers=headers, **arguments)


async def access_token(name: str) -> str:
    """A fresh token for one call: a new assertion exchanged at the token endpoint."""
    connection = CONFIG.connections[name]
    form = urlencode(
        {
            "grant_type": "client_credentials",
            "client_assertion_type": ASSERTION_TYPE,
            "client_assertion": client_assertion(name),
            "scope": " ".join(connection["scopes"]),
            "resource": connection["resource"],
        }
    )
    answer = await exchange(
        "POST",
        connection["tokenEndpoint"],
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        content=form.encode("ascii"),
    )
    answer.raise_for_status()
    body = answer.json()
    if str(body.get("token_type", "")).lower() != "bearer":
        raise RuntimeError("the token endpoint answered no bearer token")
    token: str = body["access_token"]
    return token


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@DBOS.step()
async def read_application(application_id: str) -> dict[str, Any]:
    connection = CONFIG.connections["applications"]
    token = await access_token("applications")
    answer = await exchange(
        "GET",
        f"{connection['baseUrl']}/v1/records/applications/{application_id}",
        headers={
            "Authorization": "Bearer " + token,
            "Registry-Access-Profile": connection["profile"],
        },
    )
    answer.raise_for_status()
    record: dict[str, Any] = answer.json()
    if not isinstance(record.get("data"), dict):
        raise RuntimeError("BReg answered a record without data")
    return record


@DBOS.step()
async def send_notice(key: str, application_id: str, record: dict[str, Any]) -> dict[str, Any]:
    connection = CONFIG.connections["notices"]
    data = record["data"]["domainData"]
    message = {
        "senderProfile": "applicant-notices",
        "to": {"email": data["contactEmail"]},
        "template": {"id": "follow-up", "version": "1"},
        "locale": "en",
        "data": {"applicantName": data["applicantName"]},
        "correlationId": application_id,
    }
    token = await access_token("notices")
    answer = await exchange(
        "POST",
        f"{connection['baseUrl']}/v1/messages",
        headers={
            "Authorization": "Bearer " + token,
            "Content-Type": "application/json",
            "Idempotency-Key": key,
        },
        content=canonical(message),
    )
    if answer.status_code != 202:
        raise RuntimeError(f"Messaging answered {answer.status_code}")
    receipt: dict[str, Any] = answer.json()
    return receipt


@DBOS.workflow()
async def follow_up(application_id: str) -> dict[str, Any]:
    record = await read_application(application_id)
    if record["data"].get("domainData", {}).get("followUpAllowed") is not True:
        return {"outcome": "no-current-permission"}
    workflow_id = DBOS.workflow_id
    assert workflow_id is not None
    # The product command key: a stable function of the run and the step (ours: an HMAC of the
    # start identity and the step under the admission key), the same on every attempt.
    key = hashlib.sha256(f"{workflow_id}\0notify".encode()).hexdigest()
    receipt = await send_notice(key, application_id, record)
    return {"outcome": "message-accepted", "messageId": receipt["id"]}


# -- the endpoint ---------------------------------------------------------------------------


def problem(status: int, code: str) -> JSONResponse:
    return JSONResponse({"status": status, "code": code}, status_code=status)


async def admit(request: Request) -> Response:
    try:
        verify_caller(request.headers.get("authorization"))
    except Refused as exc:
        DBOS.logger.info("caller refused: %s", exc)
        return problem(401, "unauthenticated")
    key = request.headers.get("idempotency-key")
    if key is None or not KEY_PATTERN.fullmatch(key):
        return problem(400, "idempotency-key")
    try:
        body = json.loads(await request.body())
        application_id = str(uuid.UUID(body["input"]["applicationId"]))
        if body["workflow"] != CONFIG.workflow or not isinstance(body["revision"], str):
            return problem(403, "workflow")
    except (ValueError, KeyError, TypeError, AttributeError):
        return problem(400, "body")
    with SetWorkflowID(key):
        if CONFIG.start == "queue":
            handle = await DBOS.enqueue_workflow_async(QUEUE, follow_up, application_id)
        else:
            handle = await DBOS.start_workflow_async(follow_up, application_id)
    return JSONResponse({"runId": handle.workflow_id}, status_code=201)


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


def main() -> None:
    global CONFIG  # noqa: PLW0603 - one process, one configuration
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", type=Path, required=True)
    CONFIG = Config(parser.parse_args().config)
    load_caller_keys(CONFIG.jwks_uri)
    config: DBOSConfig = {
        "name": "bench-peer",
        "system_database_url": CONFIG.system_database_url,
        "application_version": "bench-peer-1",
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()
    if CONFIG.start == "queue":
        DBOS.register_queue(
            QUEUE,
            worker_concurrency=CONFIG.queue_concurrency,
            polling_interval_sec=CONFIG.poll_seconds,
            on_conflict="always_update",
        )
        # The queue manager looks for new queues once a second; be listening before ready.
        time.sleep(1.2)
    app = Starlette(
        routes=[
            Route("/v1/runs", admit, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ]
    )
    try:
        uvicorn.run(
            app,
            host="127.0.0.1",
            port=CONFIG.port,
            log_level="warning",
            access_log=False,
            server_header=False,
        )
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=5)


if __name__ == "__main__":
    main()
