"""The HTTP edge limits of a real `coordinator serve` (docs/operations.md, "HTTP edge limits"),
with the service's own bounds, over real sockets: request heads above 32,768 bytes are 431 and
closed, smaller ones are handled; a client that stops mid-head is cut; connections beyond the
cap are answered 503 and service resumes after the flood; parallel 64 MB heads leave the resident
memory near where it was. The guard's finer cases, with small bounds, are
tests/api/test_api_connection.py."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from e2e_support import Processes, Project, wait_for

from coordinator_api.limits import HEAD_MAX_BYTES, MAX_CONNECTIONS, TOKEN_MAX_BYTES

WAIT = 60.0  # a bound on every socket read, never an expected duration
MIB = 1_048_576
ATTACKERS = 8
ATTACK_BYTES = 64 * MIB
RSS_MARGIN_BYTES = 50 * MIB


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Project, int]]:
    directory: Path = tmp_path_factory.mktemp("edge")
    processes = Processes(directory)
    try:
        project = Project.create(directory, processes)
        sandbox = project.start_sandbox()
        project.write_runtime(sandbox)
        assert project.deploy_ctl("migrate")["status"] == "migrated"
        assert project.deploy_ctl("apply", "--reference", "EDGE-1")["status"] == "applied"
        service = project.start_service()
        project.wait_healthy(service)
        yield project, service.pid
    finally:
        processes.stop_all()


def _connect(project: Project) -> socket.socket:
    return socket.create_connection(("127.0.0.1", project.listener_port), timeout=WAIT)


def _read_all(client: socket.socket) -> bytes:
    received = b""
    while chunk := client.recv(65_536):
        received += chunk
    return received


def _head(filler: int, target: bytes = b"/health", extra: bytes = b"") -> bytes:
    head = b"GET " + target + b" HTTP/1.1\r\nHost: coordinator\r\nConnection: close\r\n" + extra
    return head + b"X-Filler: " + b"f" * filler + b"\r\n\r\n"


def _answer(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_head_over_32_kib_is_431_and_closed_and_smaller_heads_are_served(
    served: tuple[Project, int],
) -> None:
    project, _ = served
    for filler in (15 * 1024, 17 * 1024, HEAD_MAX_BYTES - 200):
        with _connect(project) as client:
            client.sendall(_head(filler))
            status, _, _ = _answer(_read_all(client))
        assert status == 200, filler
    with _connect(project) as client:
        client.sendall(_head(HEAD_MAX_BYTES + 1024))
        raw = _read_all(client)  # returns once the service closed the connection
    status, headers, body = _answer(raw)
    assert status == 431
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    problem = json.loads(body)
    assert problem["code"] == "coordinator.request.headers-too-large"
    assert "fff" not in body.decode()


def test_a_token_one_byte_too_long_still_reaches_the_token_check(
    served: tuple[Project, int],
) -> None:
    """06 §2 item 1: the head bound leaves room for the longest access token and more."""
    project, _ = served
    token = b"a" * (TOKEN_MAX_BYTES + 1)
    with _connect(project) as client:
        client.sendall(_head(8 * 1024, b"/v1/runs", b"Authorization: Bearer " + token + b"\r\n"))
        status, _, body = _answer(_read_all(client))
    assert status == 401
    assert json.loads(body)["code"] == "coordinator.access.unauthenticated"


def test_a_client_that_sends_half_a_head_is_disconnected(served: tuple[Project, int]) -> None:
    project, _ = served
    with _connect(project) as client:
        client.sendall(b"GET /health HTTP/1.1\r\nHost: coordinator\r\nX-Slow: ")
        assert _read_all(client) == b""  # the service closed it, without an answer


def test_connections_beyond_the_cap_are_refused_and_service_resumes(
    served: tuple[Project, int],
) -> None:
    project, _ = served
    held = [_connect(project) for _ in range(MAX_CONNECTIONS)]
    try:
        # Accepted in order: the last held connection being answered shows all were accepted.
        held[-1].sendall(b"GET /health HTTP/1.1\r\nHost: coordinator\r\n\r\n")
        assert held[-1].recv(65_536).startswith(b"HTTP/1.1 200 ")
        refused = []
        for _ in range(4):
            with _connect(project) as extra:
                refused.append(_answer(_read_all(extra)))
        for status, headers, body in refused:
            assert status == 503
            assert "retry-after" in headers
            assert json.loads(body)["code"] == "coordinator.request.connections-exhausted"
    finally:
        for client in held:
            client.close()

    def answered() -> bool:
        with _connect(project) as client:
            client.sendall(_head(10))
            return _read_all(client).startswith(b"HTTP/1.1 200 ")

    assert wait_for(answered, WAIT, "the service to answer after the flood")


def _attack(project: Project) -> bytes:
    chunk = b"x" * MIB
    with _connect(project) as client:
        try:
            client.sendall(b"GET /health HTTP/1.1\r\nHost: coordinator\r\nX-Big: ")
            for _ in range(ATTACK_BYTES // MIB):
                client.sendall(chunk)
            client.shutdown(socket.SHUT_WR)
            return _read_all(client)
        except (BrokenPipeError, ConnectionResetError):
            return b""  # the service stopped reading after its answer; the answer may be lost


def test_parallel_64_mb_heads_leave_memory_near_its_baseline(served: tuple[Project, int]) -> None:
    project, pid = served
    baseline = _rss_bytes(pid)
    peak = baseline
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, _rss_bytes(pid))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(ATTACKERS) as pool:
            answers = list(pool.map(lambda _: _attack(project), range(ATTACKERS)))
    finally:
        done.set()
        sampler.join()
    after = _rss_bytes(pid)
    print(f"RSS baseline {baseline / MIB:.1f} MiB, peak {peak / MIB:.1f}, after {after / MIB:.1f}")
    for answer in answers:
        assert answer == b"" or answer.startswith(b"HTTP/1.1 431 ")
    assert peak < baseline + RSS_MARGIN_BYTES
    assert after < baseline + RSS_MARGIN_BYTES
    with _connect(project) as client:
        client.sendall(_head(10))
        assert _read_all(client).startswith(b"HTTP/1.1 200 ")
