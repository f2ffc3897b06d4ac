"""The connection guard (coordinator_api.connection) on real sockets, in-process and fast: a
uvicorn server with the guard's protocol and small bounds in a thread, a plain app behind it.
The same guard in a real `coordinator serve`, with the service's own bounds, is
tests/e2e/test_serve_edge.py. Last, the edge layer's half of "half-sent requests": a body the
client never finished is not handled."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from api_fakes import REVISION, WORKFLOW, FakeRunService, SigningKeys, bearer

from coordinator_api.connection import ConnectionLimits, guarded_protocol
from coordinator_api.serve import _bind
from coordinator_core.shell.runtime.guard import peer_of

LIMITS = ConnectionLimits(
    head_max_bytes=2_048,
    head_timeout_seconds=0.5,
    body_timeout_seconds=0.5,
    max_connections=4,
    close_linger_seconds=0.5,
)
WAIT = 30.0  # a bound on every socket read, never an expected duration


@dataclass
class Served:
    port: int
    calls: list[str]


async def _app(scope: dict[str, object], receive: object, send: object) -> None:
    assert callable(receive) and callable(send)
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    _served.calls.append(f"{scope['method']} {scope['path']} {len(body)}")
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


_served = Served(0, [])


@pytest.fixture(scope="module")
def server() -> Iterator[Served]:
    sock = _bind("127.0.0.1", 0)
    config = uvicorn.Config(
        _app,
        http=guarded_protocol(LIMITS),
        ws="none",
        lifespan="off",
        log_config=None,
        timeout_keep_alive=1,
    )
    instance = uvicorn.Server(config)
    thread = threading.Thread(
        target=lambda: asyncio.run(instance.serve(sockets=[sock])), daemon=True
    )
    thread.start()
    try:
        for _ in range(300):
            if instance.started:
                break
            threading.Event().wait(0.05)
        _served.port = sock.getsockname()[1]
        yield _served
    finally:
        instance.should_exit = True
        thread.join(10)
        sock.close()


@contextlib.contextmanager
def _connect(served: Served) -> Iterator[socket.socket]:
    with socket.create_connection(("127.0.0.1", served.port), timeout=WAIT) as client:
        yield client


def _read_all(client: socket.socket) -> bytes:
    """Everything until the server closes the connection."""
    received = b""
    while chunk := client.recv(65_536):
        received += chunk
    return received


def _read_answer(client: socket.socket) -> bytes:
    """One answer with a Content-Length body (the connection stays open), and whatever of the
    next answer the same reads brought."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = client.recv(65_536)
        assert chunk, received
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = client.recv(65_536)
        assert chunk, received + body
        body += chunk
    return head + b"\r\n\r\n" + body  # with what came after the body in the same reads


def _request(filler: int, *, body: bytes = b"") -> bytes:
    head = b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n" % len(body)
    head += b"X-Filler: " + b"a" * filler + b"\r\n\r\n"
    return head + body


def _problem(answer: bytes) -> tuple[int, dict[str, str], dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)


def test_a_head_within_the_bound_is_handled_and_one_byte_more_is_431(server: Served) -> None:
    exact = _request(0)
    fits = _request(LIMITS.head_max_bytes - len(exact))
    assert len(fits) == LIMITS.head_max_bytes
    with _connect(server) as client:
        client.sendall(fits + _request(10, body=b"xyz"))  # two requests, one chunk
        first = _read_answer(client)
        assert first.startswith(b"HTTP/1.1 200 ")
    with _connect(server) as client:
        client.sendall(_request(LIMITS.head_max_bytes - len(exact) + 1))
        status, headers, problem = _problem(_read_all(client))
    assert status == 431
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    assert headers["cache-control"] == "no-store"
    assert problem["code"] == "coordinator.request.headers-too-large"
    assert problem["status"] == 431
    assert "aaaa" not in json.dumps(problem)


def test_a_pipelined_head_of_exactly_the_bound_is_handled(server: Served) -> None:
    """Counted through the parser (it began in the chunk that ended the first request), with
    the tightest header syntax: still not refused."""
    base = b"POST /echo HTTP/1.1\r\nHost:t\r\nContent-Length:0\r\nX-Filler:"
    second = base + b"a" * (LIMITS.head_max_bytes - len(base) - 4) + b"\r\n\r\n"
    assert len(second) == LIMITS.head_max_bytes
    with _connect(server) as client:
        client.sendall(_request(1, body=b"abc") + second)
        first = _read_answer(client)
        assert first.startswith(b"HTTP/1.1 200 ")
        rest = first.partition(b"\r\n\r\nok")[2] or _read_answer(client)
    assert rest.startswith(b"HTTP/1.1 200 ")


def test_a_long_head_sent_in_pieces_is_refused_before_it_is_parsed(server: Served) -> None:
    before = list(server.calls)
    with _connect(server) as client:
        client.sendall(b"GET /echo HTTP/1.1\r\nHost: t\r\n")
        for _ in range(8):
            client.sendall(b"X-Filler: " + b"b" * 500 + b"\r\n")
        status, _, problem = _problem(_read_all(client))
    assert (status, problem["code"]) == (431, "coordinator.request.headers-too-large")
    assert server.calls == before  # the app never saw it


def test_a_long_head_pipelined_after_a_body_is_refused(server: Served) -> None:
    with _connect(server) as client:
        client.sendall(_request(10, body=b"abc") + _request(LIMITS.head_max_bytes))
        first = _read_answer(client)
        rest = _read_all(client)
    assert first.startswith(b"HTTP/1.1 200 ")
    # The first answer was complete, so the second request is refused with its own answer.
    status, _, problem = _problem(first.partition(b"\r\n\r\nok")[2] + rest)
    assert (status, problem["code"]) == (431, "coordinator.request.headers-too-large")


def test_a_client_that_stops_mid_head_is_cut(server: Served) -> None:
    with _connect(server) as client:
        client.sendall(b"GET /echo HTTP/1.1\r\nHost: t\r\n")
        assert _read_all(client) == b""


def test_a_silent_connection_is_cut(server: Served) -> None:
    with _connect(server) as client:
        assert _read_all(client) == b""


def test_a_client_that_stops_mid_body_is_cut_and_nothing_is_handled(server: Served) -> None:
    before = list(server.calls)
    with _connect(server) as client:
        client.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{}")
        assert _read_all(client) == b""
    assert server.calls == before


def test_an_idle_kept_alive_connection_is_closed_after_its_answer(server: Served) -> None:
    with _connect(server) as client:
        client.sendall(_request(1))
        assert _read_answer(client).startswith(b"HTTP/1.1 200 ")
        assert _read_all(client) == b""


def test_connections_beyond_the_cap_are_answered_503_and_normal_service_resumes(
    server: Served,
) -> None:
    held = [socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) for _ in range(4)]
    try:
        # The held connections are accepted in order; one of them answering proves all were.
        held[-1].sendall(_request(1))
        assert _read_answer(held[-1]).startswith(b"HTTP/1.1 200 ")
        with _connect(server) as extra:
            status, headers, problem = _problem(_read_all(extra))
        assert status == 503
        assert headers["retry-after"] == "1"
        assert problem["code"] == "coordinator.request.connections-exhausted"
    finally:
        for client in held:
            client.close()
    answered = None
    for _ in range(200):  # the server sees the closes; a bound, not an expected duration
        with _connect(server) as client:
            client.sendall(_request(1))
            answered = client.recv(65_536)
        if answered.startswith(b"HTTP/1.1 200 "):
            break
        threading.Event().wait(0.05)
    assert answered is not None and answered.startswith(b"HTTP/1.1 200 ")


async def _post_start(app: Any, keys: SigningKeys, *, complete: bool) -> list[dict[str, Any]]:
    """POST /v1/runs straight into the ASGI app; the body's last chunk never comes unless
    `complete` (the client goes away instead)."""
    body = json.dumps(
        {"workflow": WORKFLOW, "revision": REVISION, "input": {"applicationId": "app-1"}}
    ).encode()
    headers = {**bearer(keys), "Content-Type": "application/json", "Idempotency-Key": "key-1"}
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/runs",
        "raw_path": b"/v1/runs",
        "query_string": b"",
        "root_path": "",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 1),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    messages = [{"type": "http.request", "body": body, "more_body": not complete}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


@pytest.mark.anyio
async def test_a_body_cut_short_by_a_disconnect_is_never_handled(
    app: Any, keys: SigningKeys, service: FakeRunService
) -> None:
    # The chunk received is a complete, valid start; only the client never finished sending.
    assert await _post_start(app, keys, complete=False) == []
    assert service.runs == {}
    answered = await _post_start(app, keys, complete=True)
    assert answered[0]["status"] == 201
    assert len(service.runs) == 1


# -- fair share per peer (docs/operations.md, "HTTP edge limits") ----------------------------------------------

FAIR = ConnectionLimits(
    head_max_bytes=2_048,
    head_timeout_seconds=5.0,
    body_timeout_seconds=5.0,
    max_connections=32,
    close_linger_seconds=0.5,
    connections_per_peer=3,
    heads_per_peer=2,
    trusted_proxies=("127.0.0.3/32",),
)


@pytest.fixture(scope="module")
def fair() -> Iterator[Served]:
    sock = _bind("127.0.0.1", 0)
    config = uvicorn.Config(
        _app, http=guarded_protocol(FAIR), ws="none", lifespan="off", log_config=None
    )
    instance = uvicorn.Server(config)
    thread = threading.Thread(
        target=lambda: asyncio.run(instance.serve(sockets=[sock])), daemon=True
    )
    thread.start()
    try:
        for _ in range(300):
            if instance.started:
                break
            threading.Event().wait(0.05)
        yield Served(sock.getsockname()[1], [])
    finally:
        instance.should_exit = True
        thread.join(10)
        sock.close()


def _from(served: Served, source: str) -> socket.socket:
    return socket.create_connection(
        ("127.0.0.1", served.port), timeout=WAIT, source_address=(source, 0)
    )


def _answered(client: socket.socket) -> int:
    client.sendall(_request(1))
    return int(_read_answer(client).split(b" ", 2)[1])


@pytest.mark.parametrize(
    ("address", "peer"),
    [
        (("192.0.2.7", 5000), "192.0.2.7"),
        (("2001:db8:1:2:aaaa::1", 5000, 0, 0), "2001:db8:1:2::/64"),
        (("2001:db8:1:2:bbbb::9", 6000, 0, 0), "2001:db8:1:2::/64"),
        (("::ffff:192.0.2.7", 5000, 0, 0), "192.0.2.7"),
        (("fe80::1%eth0", 5000, 0, 2), "fe80::/64"),
        ("/run/coordinator.sock", None),
        (None, None),
    ],
)
def test_a_peer_is_an_ipv4_address_or_an_ipv6_slash_64(address: object, peer: str | None) -> None:
    assert peer_of(address) == peer


def test_heads_beyond_the_share_of_one_address_are_refused_and_others_are_served(
    fair: Served,
) -> None:
    pending = [_from(fair, "127.0.0.2") for _ in range(2)]  # its share of pending heads
    try:
        with _from(fair, "127.0.0.2") as extra:
            status, headers, problem = _problem(_read_all(extra))
        assert (status, headers["retry-after"]) == (503, "1")
        assert problem["code"] == "coordinator.request.peer-connections-exhausted"
        with _from(fair, "127.0.0.4") as other:
            assert _answered(other) == 200
        assert _answered(pending[0]) == 200  # its head done: one more head may come
        with _from(fair, "127.0.0.2") as again:
            assert _answered(again) == 200
    finally:
        for client in pending:
            client.close()


def test_open_connections_beyond_the_share_of_one_address_are_refused(fair: Served) -> None:
    busy: list[socket.socket] = []
    try:
        for _ in range(3):  # each answered once, then half its next request: open, not idle
            busy.append(_from(fair, "127.0.0.5"))
            assert _answered(busy[-1]) == 200
            busy[-1].sendall(_request(1, body=b"0123456789")[:-5])
        for _ in range(200):  # the service has seen every head: a bound, not a duration
            with _from(fair, "127.0.0.5") as extra:
                status, _, problem = _problem(_read_all(extra))
            if problem["code"] == "coordinator.request.peer-connections-exhausted":
                break
            threading.Event().wait(0.05)
        assert status == 503
        assert problem["code"] == "coordinator.request.peer-connections-exhausted"
        for client in busy:
            client.sendall(b"56789")
            assert _read_answer(client).startswith(b"HTTP/1.1 200 ")
    finally:
        for client in busy:
            client.close()


def test_an_idle_kept_alive_connection_gives_way_to_a_new_one_of_its_peer(fair: Served) -> None:
    """A client whose pool leaves connections idle is not refused for them: at its share, its
    oldest idle connection is closed for the new one."""
    idle: list[socket.socket] = []
    try:
        for _ in range(3):
            idle.append(_from(fair, "127.0.0.6"))
            assert _answered(idle[-1]) == 200  # kept alive, idle
        with _from(fair, "127.0.0.6") as fourth:
            assert _answered(fourth) == 200
        assert idle[0].recv(65_536) == b""  # the oldest idle one was closed for it
    finally:
        for client in idle:
            client.close()


def test_a_trusted_proxy_counts_only_against_the_global_cap(fair: Served) -> None:
    held = [_from(fair, "127.0.0.3") for _ in range(10)]  # far beyond 2 heads and 3 open
    try:
        assert _answered(held[-1]) == 200
    finally:
        for client in held:
            client.close()
