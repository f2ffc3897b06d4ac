"""The peer of the service benchmark: the benchmark's job on DBOS Transact.

`scripts/bench_service.py` starts this script with the Python of its own virtual environment
(`scripts/bench_peer/requirements.txt`: `dbos==3.4.0`, uvicorn, Starlette, httpx, PyJWT; never
a dependency of the workspace) and a JSON configuration file that it derives from the very
`runtime.yaml` and sandbox endpoints our service is benchmarked with. It is written as a DBOS
user would write it (DBOS's documented defaults, one HTTP client per process) and does our job:

* `POST /v1/runs` takes the body our admission takes (`{workflow, revision, input:
  {applicationId}}`) and an `Idempotency-Key` header, verifies the caller's bearer token by
  the rules `coordinator_api.access` applies (an `at+jwt` signed by the sandbox identity:
  `typ`, `alg`, `crit`, `kid`, the signature, issuer, audience, lifetime, `exp`/`iat`/`nbf`
  with 30 s leeway, subject, client, assertion issuer, scopes), starts the workflow with the
  idempotency key as its workflow id and answers 201 `{"runId": …}`; the same key again
  answers the same run.
* Caching, as ours: the caller key set is fetched once at start and kept (ours reads the
  bench's static key set once at start), and a token whose signature verified is remembered
  (at most 1,024, least recently used out): met again under the same key, its signature is not
  verified again but its claims are checked every time (ours: `AccessVerifier._verified`).
* The workflow does what `bench_service.py`'s project does: step 1 obtains a fresh access
  token (client credentials with a new signed client assertion; our adapters obtain one per
  call and cache none) and reads the BReg record; a choose on
  `data.domainData.followUpAllowed`; step 2 obtains a fresh token and submits the Messaging
  message (the body our functions build, with an idempotency key derived from the workflow id
  and the step); then it finishes.
* Every product and token request goes through one `httpx.AsyncClient` per process (per event
  loop, in fact: the workflows of one process run on one loop), with httpx's default limits:
  connections are kept alive and reused (at most 20 idle, for 5 s). Ours pools keep-alive
  connections per destination too (at most 8 idle per destination, for 30 s).
* The system database is PostgreSQL (`systemDatabaseUrl`, a database of its own), or, for the
  benchmark's `dbos-sqlite` configuration, a SQLite file (`sqlite:///<path>`). DBOS commits
  the workflow's status row before the admission answers, each step's output once the step
  returns and the final status: four write transactions per run, with DBOS's default
  `synchronous_commit` on PostgreSQL and DBOS's own SQLite settings on SQLite (every
  transaction `BEGIN IMMEDIATE`, `busy_timeout` 30 s, SQLite's default rollback journal and
  `synchronous=FULL`; `bench_service.py --peer-sqlite-journal wal` puts the file in WAL mode
  before DBOS opens it).

Processes: `bench_service.py --peer-processes N` starts N copies of this script on the one
system database, as DBOS documents for several processes: each with an executor id of its own
(`DBOS__VMID`), all serving the same port, which each binds with `SO_REUSEPORT` so that the
kernel spreads the client's connections over them. Each process runs the workflows it admitted
(with `start: queue`, any process dequeues any run). Ours runs `coordinator serve` (which
admits and runs) beside `coordinator worker` processes (which only run), the runs spread over
them through the store.

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

`GET /runs/{id}` answers a workflow's status from `DBOS.get_workflow_status_async`, `GET
/runs/{id}/steps` that status and the workflow's steps, `GET /runs?limit=N` the newest
workflows' statuses, each with the caller's token checked as above (`scripts/bench_reads.py`
measures them beside our status read, inspection and list; `run_status` says what they leave
out that ours do). `GET /health` answers 200 once DBOS is launched; the line `bench-peer ready` goes to standard
output once the server listens. SIGTERM stops uvicorn, then DBOS.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
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
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
KEY_PATTERN = re.compile(r"[\x21-\x7e]{1,255}")
ASSERTION_ISSUER_CLAIM = "registry_assertion_issuer"
LEEWAY = 30
MAX_LIFETIME = 3600
VERIFIED_TOKENS = 1024
TIMEOUT = httpx.Timeout(10.0)
# One TLS context for the process (building one per client loads the CA bundle each time). The
# products are on plain-HTTP loopback here, as ours reaches them.
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
# Tokens whose signature verified, with the key that verified it and their claims.
VERIFIED: OrderedDict[str, tuple[jwt.PyJWK, dict[str, Any]]] = OrderedDict()
# The process's HTTP client for the products and the token endpoint, by event loop.
CLIENTS: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}


# -- the caller's token (what coordinator_api.access checks) ---------------------------------


def load_caller_keys(jwks_uri: str) -> None:
    """The sandbox identity's published key set, fetched once at start and kept."""
    document = httpx.get(jwks_uri, timeout=TIMEOUT, trust_env=False).raise_for_status().json()
    for entry in document["keys"]:
        kid, kty = entry.get("kid"), entry.get("kty")
        algorithm = {"EC": "ES256", "RSA": "RS256"}.get(kty or "")
        if isinstance(kid, str) and algorithm is not None and entry.get("use") in (None, "sig"):
            CALLER_KEYS[(kid, algorithm)] = jwt.PyJWK(entry, algorithm=algorithm)


def number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Refused(f"{name} is not a number")
    return float(value)


def check_claims(claims: Mapping[str, Any]) -> None:
    """The claims' rules, checked on every request (a remembered token's too)."""
    if claims.get("iss") != CONFIG.issuer:
        raise Refused("iss")
    audience = claims.get("aud")
    audiences = [audience] if isinstance(audience, str) else audience
    if not isinstance(audiences, list) or CONFIG.audience not in audiences:
        raise Refused("aud")
    expires, issued = number(claims, "exp"), number(claims, "iat")
    not_before = number(claims, "nbf")
    if expires is None or issued is None or expires - issued > MAX_LIFETIME:
        raise Refused("exp, iat or lifetime")
    now = time.time()
    if not now < expires + LEEWAY or issued > now + LEEWAY:
        raise Refused("expired or issued in the future")
    if not_before is not None and not_before > now + LEEWAY:
        raise Refused("not yet valid")
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject or len(subject) > 512 or CONTROL.search(subject):
        raise Refused("sub")
    if claims.get("client_id") not in CONFIG.allowed_clients:
        raise Refused("client")
    if ASSERTION_ISSUER_CLAIM in claims:
        raise Refused("no assertion issuer is allowed")
    scopes = claims.get("registry_scopes", "")
    granted = set(scopes.split(" ")) if isinstance(scopes, str) else set(scopes)
    if not CONFIG.required_scopes <= granted:
        raise Refused("scopes")


def verify_caller(authorization: str | None) -> dict[str, Any]:
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip(" ")
    if scheme.lower() != "bearer" or len(token) > 16_384 or not COMPACT_JWS.fullmatch(token):
        raise Refused("no compact bearer token")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError as exc:
        raise Refused("the header does not decode") from exc
    algorithm, kid = header.get("alg"), header.get("kid")
    if header.get("typ") not in TOKEN_TYPES or algorithm not in ALGORITHMS or "crit" in header:
        raise Refused("typ, alg or crit")
    key = CALLER_KEYS.get((str(kid), str(algorithm))) if isinstance(kid, str) and kid else None
    if key is None:
        raise Refused("unknown kid")
    known = VERIFIED.get(token)
    if known is not None and known[0] is key:
        VERIFIED.move_to_end(token)
        check_claims(known[1])
        return dict(known[1])
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key=key.key,
            algorithms=[str(algorithm)],
            options={
                "verify_signature": True,
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
                "verify_aud": False,
                "verify_iss": False,
                "require": [],
            },
        )
    except jwt.InvalidTokenError as exc:
        raise Refused("the signature does not verify") from exc
    check_claims(claims)
    VERIFIED[token] = (key, dict(claims))
    if len(VERIFIED) > VERIFIED_TOKENS:
        VERIFIED.popitem(last=False)
    return claims


# -- the products (what coordinator_core.shell.adapters do per call) -------------------------------


def client() -> httpx.AsyncClient:
    """The process's keep-alive client (one per event loop: an async client's connections
    belong to the loop that opened them), with httpx's default pool limits."""
    loop = asyncio.get_running_loop()
    found = CLIENTS.get(loop)
    if found is None:
        found = httpx.AsyncClient(timeout=TIMEOUT, trust_env=False, verify=SSL_CONTEXT)
        CLIENTS[loop] = found
    return found


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
    """One request on the process's client (a kept-alive connection when one is idle)."""
    headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
    headers.update(arguments.pop("headers", {}))
    return await client().request(method, url, headers=headers, **arguments)


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


def caller_refused(request: Request) -> Response | None:
    """The caller's token checked as the admission checks it: None when it passes."""
    try:
        verify_caller(request.headers.get("authorization"))
    except Refused as exc:
        DBOS.logger.info("caller refused: %s", exc)
        return problem(401, "unauthenticated")
    return None


async def admit(request: Request) -> Response:
    refused = caller_refused(request)
    if refused is not None:
        return refused
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


def status_body(status: Any) -> dict[str, Any]:
    """A workflow's status as the peer's reads answer it: DBOS's own record, the output
    deserialised from its pickle or JSON."""
    return {
        "runId": status.workflow_id,
        "status": status.status,
        "workflow": status.name,
        "createdAt": status.created_at,
        "updatedAt": status.updated_at,
        "completedAt": status.completed_at,
        "output": status.output,
        "error": None if status.error is None else type(status.error).__name__,
    }


async def run_status(request: Request) -> Response:
    """`GET /runs/{id}`: the workflow's status, as a DBOS user serves it (`scripts/bench_reads.py`
    measures it beside our `GET /v1/runs/{run}`, and the issue's read targets against it).

    The caller's token is checked as the admission checks it; then one
    `DBOS.get_workflow_status_async` (a read of the `workflow_status` row, on DBOS's thread pool)
    and its fields as JSON. What it does not do, and ours does: ours journals every read to the
    audit journal (request and response entries, not waiting for the fsync: 07 §7.7 item 5),
    checks that the run is visible to the caller (its policy's workflows, an owner's runs),
    validates the path and query against the spec (an unknown parameter is refused), renders
    the spec's `RunStatus` body (current step, due times, effect uncertainty, links) and sets a
    weak `ETag`. The same holds for the two reads below beside our inspection and list."""
    refused = caller_refused(request)
    if refused is not None:
        return refused
    status = await DBOS.get_workflow_status_async(request.path_params["run"])
    if status is None:
        return problem(404, "absent")
    return JSONResponse(status_body(status))


async def run_steps(request: Request) -> Response:
    """`GET /runs/{id}/steps`: the peer's counterpart of our inspection (`GET
    /v1/runs/{run}/inspect`: the run and each of its steps): the workflow's status and its
    steps (`DBOS.list_workflow_steps_async`), each step's number, name, error type and times.
    The steps' outputs are not loaded (`load_output=False`): our inspection shows none either."""
    refused = caller_refused(request)
    if refused is not None:
        return refused
    run = request.path_params["run"]
    status = await DBOS.get_workflow_status_async(run)
    if status is None:
        return problem(404, "absent")
    steps = await DBOS.list_workflow_steps_async(run, load_output=False)
    body = {
        "run": status_body(status),
        "steps": [
            {
                "number": step["function_id"],
                "name": step["function_name"],
                "error": None if step["error"] is None else type(step["error"]).__name__,
                "startedAt": step["started_at_epoch_ms"],
                "completedAt": step["completed_at_epoch_ms"],
            }
            for step in steps
        ],
    }
    return JSONResponse(body)


async def run_list(request: Request) -> Response:
    """`GET /runs?limit=N` (1–100, default 20): the peer's counterpart of our list page (`GET
    /v1/runs?limit=20`): the newest workflows' statuses (`DBOS.list_workflows_async`, newest
    first). Their inputs are not loaded (`load_input=False`): our list shows none either."""
    refused = caller_refused(request)
    if refused is not None:
        return refused
    limit = request.query_params.get("limit", "20")
    if not limit.isdigit() or not 1 <= int(limit) <= 100:
        return problem(400, "limit")
    statuses = await DBOS.list_workflows_async(limit=int(limit), sort_desc=True, load_input=False)
    return JSONResponse({"runs": [status_body(status) for status in statuses]})


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


class Server(uvicorn.Server):
    """uvicorn's server, saying when it listens (the benchmark waits for every process)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit:
            print("bench-peer ready", flush=True)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        found = CLIENTS.pop(asyncio.get_running_loop(), None)  # another loop's ends with it
        if found is not None:
            await found.aclose()


def listening_socket(port: int) -> socket.socket:
    """The server's socket on the shared port: every process of the peer binds it with
    SO_REUSEPORT, and the kernel spreads incoming connections over them."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.set_inheritable(True)
    return sock


def main() -> None:
    global CONFIG  # noqa: PLW0603 - one process, one configuration
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", type=Path, required=True)
    CONFIG = Config(parser.parse_args().config)
    load_caller_keys(CONFIG.jwks_uri)
    # The executor id comes from DBOS__VMID (set per process by bench_service.py), as DBOS
    # documents for running several processes on one system database.
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
            Route("/runs", run_list, methods=["GET"]),
            Route("/runs/{run}", run_status, methods=["GET"]),
            Route("/runs/{run}/steps", run_steps, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ]
    )
    server = Server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            server_header=False,
        )
    )
    try:
        server.run(sockets=[listening_socket(CONFIG.port)])
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=5)


if __name__ == "__main__":
    main()
