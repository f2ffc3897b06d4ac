"""Fakes for the adapter tests: a scripted product and token endpoint served by uvicorn on
127.0.0.1, a raw TCP server for transport faults, keys, certificates and connections; the
engine's commands an adapter carries out and the exact engine events it must answer."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import socket
import ssl
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jwt
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from coordinator_core.engine.commands import (
    Dispatch,
    LookupReceipt,
    Observe,
    ObtainCredential,
    Prepare,
)
from coordinator_core.engine.inputs import (
    CallOutcome,
    ObservationOutcome,
    PreparationDone,
    ReceiptAnswer,
    to_canonical,
)
from coordinator_core.engine.keys import commitment
from coordinator_core.shell.adapters import (
    Adapter,
    ClientCredentials,
    PreparedCommand,
    ProductConnection,
)

TOKEN_PATH = "/oauth/token"
CANARY = "canary-7f3a9c-SECRET"
STEP = "step"
"""The step of every engine command the adapter tests hand an adapter."""


def deadline(seconds: float = 10.0) -> float:
    return time.monotonic() + seconds


def command_key(step: str = "step") -> str:
    return commitment(bytes(range(32)), "command", ["db", "start", step])


# -- keys -------------------------------------------------------------------------------------


@dataclass
class KeyPair:
    private: dict[str, Any]
    public: dict[str, Any]
    algorithm: str


def ec_key(kid: str = "ec-1") -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    private = json.loads(ECAlgorithm.to_jwk(key))
    public = json.loads(ECAlgorithm.to_jwk(key.public_key()))
    private["kid"] = public["kid"] = kid
    return KeyPair(private, public, "ES256")


def rsa_key(kid: str = "rsa-1", bits: int = 2048) -> KeyPair:
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    private = json.loads(RSAAlgorithm.to_jwk(key))
    public = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    private["kid"] = public["kid"] = kid
    return KeyPair(private, public, "RS256")


# -- the scripted HTTP fake ----------------------------------------------------------------------


@dataclass
class Seen:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    chunks: list[bytes] | None = None
    chunk_delay: float = 0.0

    def payload(self) -> bytes:
        if self.raw is not None:
            return self.raw
        if self.body is None:
            return b""
        return json.dumps(self.body).encode("utf-8")


def problem(status: int, code: str, **extra: Any) -> Reply:
    body = {
        "type": "about:blank",
        "title": f"Refused {CANARY}",
        "status": status,
        "detail": f"detail {CANARY}",
        "code": code,
        **extra,
    }
    return Reply(status, body, headers={"content-type": "application/problem+json"})


Handler = Callable[[Seen], Reply]


@dataclass
class Client:
    """A client registered at the fake token endpoint."""

    public: dict[str, Any]
    algorithm: str
    audience: str


class FakeServer:
    """One ASGI app: a token endpoint (08 §2.2) and scripted product routes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.routes: dict[tuple[str, str], Handler] = {}
            self.public: set[tuple[str, str]] = set()
            self.seen: list[Seen] = []
            self.clients: dict[str, Client] = {}
            self.assertions: list[tuple[dict[str, Any], dict[str, Any]]] = []
            self.forms: list[dict[str, list[str]]] = []
            self.jtis: set[str] = set()
            self.issued: list[str] = []
            self.token_reply: Handler | None = None

    # routes
    def route(
        self, method: str, path: str, handler: Handler | Reply, *, public: bool = False
    ) -> None:
        """Script `method path`; a `public` route answers without any bearer token."""
        self.routes[(method, path)] = handler if callable(handler) else (lambda _s, r=handler: r)
        if public:
            self.public.add((method, path))

    def requests(self, path_prefix: str = "/v1") -> list[Seen]:
        return [s for s in self.seen if s.path.startswith(path_prefix)]

    # token endpoint
    def register(self, client_id: str, key: KeyPair, audience: str) -> None:
        self.clients[client_id] = Client(key.public, key.algorithm, audience)

    def _token(self, seen: Seen) -> Reply:
        from urllib.parse import parse_qs

        form = parse_qs(seen.body.decode("ascii"), strict_parsing=True)
        self.forms.append(form)
        if self.token_reply is not None:
            return self.token_reply(seen)
        assertion = form["client_assertion"][0]
        header = jwt.get_unverified_header(assertion)
        unverified = jwt.decode(assertion, options={"verify_signature": False})
        client = self.clients.get(unverified.get("iss", ""))
        if client is None:
            return Reply(401, {"error": "invalid_client"})
        key = jwt.PyJWK(client.public, algorithm=client.algorithm).key
        claims = jwt.decode(
            assertion,
            key,
            algorithms=[client.algorithm],
            audience=client.audience,
            options={"require": ["iss", "sub", "aud", "jti", "iat", "exp"]},
        )
        if claims["jti"] in self.jtis:
            return Reply(400, {"error": "invalid_grant"})
        self.jtis.add(claims["jti"])
        self.assertions.append((header, claims))
        token = f"tok-{len(self.issued)}-{uuid.uuid4().hex}"
        self.issued.append(token)
        return Reply(200, {"access_token": token, "token_type": "Bearer", "expires_in": 300})

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen = Seen(
            scope["method"],
            scope["raw_path"].decode("ascii"),
            scope["query_string"].decode("ascii"),
            {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]},
            body,
        )
        with self.lock:
            self.seen.append(seen)
        if seen.path == TOKEN_PATH and seen.method == "POST":
            reply = self._token(seen)
        else:
            handler = self.routes.get((seen.method, seen.path))
            if handler is None:
                reply = problem(404, "not-found")
            elif (seen.method, seen.path) not in self.public and not self._authorised(seen):
                reply = problem(401, "authentication.refused")
            else:
                reply = handler(seen)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        headers = [(k.lower().encode(), v.encode()) for k, v in reply.headers.items()]
        chunks = reply.chunks
        if chunks is None:
            payload = reply.payload()
            chunks = [payload]
            headers.append((b"content-length", str(len(payload)).encode()))
        try:
            await send({"type": "http.response.start", "status": reply.status, "headers": headers})
            for index, chunk in enumerate(chunks):
                more = index < len(chunks) - 1
                await send({"type": "http.response.body", "body": chunk, "more_body": more})
                if reply.chunk_delay and more:
                    await asyncio.sleep(reply.chunk_delay)
        except Exception:  # the client gave up (timeouts): nothing to do
            return

    def _authorised(self, seen: Seen) -> bool:
        value = seen.headers.get("authorization", "")
        return value.startswith("Bearer ") and value[7:] in self.issued


class LiveServer:
    """uvicorn serving an ASGI app on 127.0.0.1 (a free port) in a thread."""

    def __init__(self, app: Any, *, certfile: Path | None = None, keyfile: Path | None = None):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            http="h11",
            lifespan="off",
            log_level="critical",
            access_log=False,
            timeout_graceful_shutdown=1,
            ssl_certfile=str(certfile) if certfile else None,
            ssl_keyfile=str(keyfile) if keyfile else None,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self.thread.start()
        limit = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > limit:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


# -- raw TCP faults -----------------------------------------------------------------------------------

Behaviour = Callable[[socket.socket], None]


def read_request(conn: socket.socket) -> bytes:
    """Read one HTTP/1.1 request with a Content-Length body."""
    conn.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def reset(conn: socket.socket) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


class RawServer:
    """A TCP server on 127.0.0.1 whose connections are handled by `behaviour`."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.requests: list[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            self.behaviour(conn)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    def close(self) -> None:
        self.closed = True
        self.sock.close()


# -- TLS --------------------------------------------------------------------------------------------


@dataclass
class Tls:
    certfile: Path
    keyfile: Path
    context: ssl.SSLContext


def make_tls(directory: Path, host: str) -> Tls:
    """A private CA and a certificate for `host` signed by it; the client context trusts it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "adapter test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    certfile, keyfile, cafile = (directory / n for n in ("leaf.pem", "leaf.key", "ca.pem"))
    certfile.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    cafile.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return Tls(certfile, keyfile, ssl.create_default_context(cafile=str(cafile)))


# -- connections and commands -------------------------------------------------------------------------


def connection(
    product: str,
    base_url: str,
    token_endpoint: str,
    key: KeyPair,
    *,
    name: str = "conn",
    client_id: str = "coordinator-test",
    profile: str | None = None,
    audience: str | None = None,
    scopes: tuple[str, ...] = ("scope:a", "scope:b"),
) -> ProductConnection:
    return ProductConnection(
        name=name,
        product=product,
        base_url=base_url,
        profile=profile,
        authorization=ClientCredentials(
            token_endpoint=token_endpoint,
            client_id=client_id,
            signing_key=key.private,
            resource=f"urn:registrystack:{product}",
            scopes=scopes,
            client_assertion_audience=audience,
        ),
    )


def command(
    operation: str,
    value: Any,
    *,
    key: str | None = None,
    action: str | None = None,
    preparation: bytes | None = None,
    connection_name: str = "conn",
) -> PreparedCommand:
    return PreparedCommand(
        operation=operation,
        connection=connection_name,
        input=value,
        idempotency_key=key,
        action=action,
        preparation=preparation,
    )


# -- the engine's commands, and the adapter calls that carry them out ------------------------------


def _sealed(frozen: PreparedCommand) -> str:
    sealed = {"operation": frozen.operation, "connection": frozen.connection, "input": frozen.input}
    if frozen.idempotency_key is not None:
        sealed["idempotencyKey"] = frozen.idempotency_key
    return to_canonical(sealed)


def dispatch_of(frozen: PreparedCommand, *, step: str = STEP) -> Dispatch:
    preparation = frozen.preparation
    return Dispatch(
        step,
        frozen.operation,
        frozen.connection,
        _sealed(frozen),
        frozen.idempotency_key,
        preparation,
        1,
        1,
    )


def prepare_of(frozen: PreparedCommand, *, step: str = STEP) -> Prepare:
    return Prepare(step, frozen.operation, frozen.connection, _sealed(frozen))


def observe_of(
    operation: str, reference: Any, *, connection_name: str = "conn", step: str = STEP
) -> Observe:
    return Observe(step, operation, connection_name, to_canonical(reference))


def lookup_of(frozen: PreparedCommand, *, step: str = STEP, generation: int = 1) -> LookupReceipt:
    return LookupReceipt(
        step,
        frozen.operation,
        frozen.connection,
        _sealed(frozen),
        frozen.idempotency_key,
        generation,
    )


def credential_of(connection_name: str = "conn", *, step: str = STEP) -> ObtainCredential:
    return ObtainCredential(step, connection_name)


def call(adapter: Adapter, bound: Any, frozen: PreparedCommand, **options: Any) -> CallOutcome:
    """`adapter.dispatch` of the engine's `Dispatch` of `frozen`."""
    return adapter.dispatch(bound, dispatch_of(frozen), frozen, **options)


def prepare_with(
    adapter: Adapter, bound: Any, frozen: PreparedCommand, **options: Any
) -> PreparationDone | CallOutcome:
    """`adapter.prepare` of the engine's `Prepare` of `frozen`."""
    return adapter.prepare(bound, prepare_of(frozen), frozen, **options)


def observe(
    adapter: Adapter, bound: Any, operation: str, reference: Any, **options: Any
) -> ObservationOutcome:
    """`adapter.observe` of the engine's `Observe` of `operation` on `reference`."""
    return adapter.observe(bound, observe_of(operation, reference), **options)


def lookup(adapter: Adapter, bound: Any, frozen: PreparedCommand, **options: Any) -> ReceiptAnswer:
    """`adapter.lookup_receipt` of the engine's `LookupReceipt` of `frozen`."""
    return adapter.lookup_receipt(bound, lookup_of(frozen), frozen, **options)


def preparation_bytes(outcome: PreparationDone | CallOutcome) -> bytes:
    """The frozen preparation of a `PreparationDone` (its bytes, as the engine keeps them)."""
    assert isinstance(outcome, PreparationDone), outcome
    return outcome.preparation


# -- the exact engine events an adapter answers for STEP ----------------------------------------------


def success(output: Any) -> CallOutcome:
    return CallOutcome.success(STEP, output)


def declared_refusal(refusal_code: str) -> CallOutcome:
    return CallOutcome(STEP, "declared-refusal", refusal_code=refusal_code)


def refused(code: str) -> CallOutcome:
    return CallOutcome(STEP, "refused", code=code)


def retryable(code: str) -> CallOutcome:
    return CallOutcome(STEP, "retryable", code=code)


def uncertain(code: str) -> CallOutcome:
    return CallOutcome(STEP, "uncertain", code=code)


def receipt_expired() -> CallOutcome:
    return CallOutcome(STEP, "receipt-expired", code="receipt-expired")


def complete(output: Any) -> ObservationOutcome:
    return ObservationOutcome.complete(STEP, output)


def pending() -> ObservationOutcome:
    return ObservationOutcome(STEP, "pending")


def observed(kind: Literal["refused", "retryable"], code: str) -> ObservationOutcome:
    return ObservationOutcome(STEP, kind, code=code)


def confirmed(receipt: Any) -> ReceiptAnswer:
    return ReceiptAnswer.confirmed(STEP, 1, receipt)


def answered(
    answer: Literal["unresolved", "key-reused", "expired", "unavailable"],
) -> ReceiptAnswer:
    """A receipt lookup's answer other than `confirmed` (generation 1, as `lookup_of`)."""
    return ReceiptAnswer(STEP, 1, answer)
