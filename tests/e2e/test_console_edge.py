"""The edge of a real `coordinatorctl console` process (docs/console.md, "Limits"): the same
connection guard as the service's, and a form's guards checked before any byte of its body is
read. Issue 23's attacks: a 200 MB cross-origin form POST, and four 32 MB request heads, leave
the console's resident memory near its baseline and are refused (403, 431); a silent
connection is cut. The service behind the console is never reached (none runs here)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from coordinator_sandbox.testing import Processes, wait_for

MIB = 1_048_576
WAIT = 60.0
RSS_MARGIN_BYTES = 30 * MIB


@pytest.fixture
def console(tmp_path: Path, processes: Processes) -> Iterator[tuple[int, int]]:
    token = tmp_path / "token"
    token.write_text("eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJvcGVyYXRvciJ9.c2lnbmF0dXJl\n")  # compact form
    token.chmod(0o600)
    process = processes.start(
        "console",
        [
            "-m", "coordinatorctl", "--url", "http://127.0.0.1:9", "--token-file", str(token),
            "console", "--port", "0",
        ],
    )  # fmt: skip

    def port() -> int | None:
        assert process.poll() is None, processes.log("console")
        found = re.search(r"http://127\.0\.0\.1:(\d+)", processes.log("console"))
        return int(found.group(1)) if found else None

    yield wait_for(port, 30, "the console to listen"), process.pid
    assert "Traceback" not in processes.log("console")


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def _read_all(client: socket.socket) -> bytes:
    received = b""
    try:
        while chunk := client.recv(65_536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def _send_then_read(port: int, head: bytes, body_bytes: int) -> tuple[bytes, int]:
    """Send `head`, then up to `body_bytes` in 1 MiB pieces while the console takes them;
    answer what the console wrote before it closed and how many bytes it took."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as client:
        client.sendall(head)
        piece = b"r=" + b"x" * (MIB - 2)
        sent = 0
        try:
            for _ in range(body_bytes // MIB):
                client.sendall(piece)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the console answered and closed: the rest never left
        return _read_all(client), sent


def test_a_cross_origin_form_of_200_mb_is_refused_unread(console: tuple[int, int]) -> None:
    port, pid = console
    baseline = _rss(pid)
    head = (
        b"POST /holds/restore-hold?csrf=guess HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
        b"Origin: http://evil.example\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        b"Content-Length: %d\r\n\r\n" % (port, 200 * MIB)
    )
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as client:
        client.sendall(head)  # the answer comes before any byte of the body is read
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = client.recv(65_536)
            assert chunk, answer
            answer += chunk
        sent = 0
        try:
            for _ in range(200):
                client.sendall(b"r=" + b"x" * (MIB - 2))
                sent += MIB
        except (BrokenPipeError, ConnectionResetError):
            pass
    peak = _rss(pid)
    print(
        f"\nconsole, 200 MB cross-origin form: RSS {baseline / MIB:.1f} -> {peak / MIB:.1f} MiB,"
        f" {sent / MIB:.0f} MiB of the body sent before the console closed"
    )
    assert _status(answer) == 403
    assert b"connection: close" in answer.lower()
    assert sent < 200 * MIB  # the console closed rather than take the body in
    assert peak < baseline + RSS_MARGIN_BYTES


def test_four_32_mb_heads_are_431_and_held_nowhere(console: tuple[int, int]) -> None:
    port, pid = console
    baseline = _rss(pid)

    def attack() -> bytes:
        head = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Big: " % port
        return _send_then_read(port, head, 32 * MIB)[0]

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: attack(), range(4)))
    peak = _rss(pid)
    print(f"\nconsole, 4 x 32 MB heads: RSS {baseline / MIB:.1f} -> {peak / MIB:.1f} MiB")
    assert [_status(answer) for answer in answers] == [431] * 4
    assert peak < baseline + RSS_MARGIN_BYTES


def test_a_silent_connection_is_cut(console: tuple[int, int]) -> None:
    port, _ = console
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Slow: " % port)
        assert client.recv(65_536) == b""  # cut at the head timeout, without an answer


def test_the_console_starts_with_the_listener_extra_only() -> None:
    """The guard's imports are the console's own dependencies (coordinatorctl needs
    coordinator-core[listener], not the service extra)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import coordinatorctl.console.web, sys;"
            " print('sqlalchemy' in sys.modules, 'httptools' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split() == ["False", "True"]
