"""`coordinatorctl audit verify` as a process refuses whatever is not a regular file under a
journal file's name (FIFO, socket, device, directory, a symlink to one of these) with
`coordinator.audit.unreadable`, exit 3 and the file name, and never blocks on it (issue 11 item
5). Every run has a harness timeout, so a regression fails instead of hanging."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinator_core.shell.audit import AuditReferences, AuditWriter, api_request, new_correlation

CTL = str(Path(sys.executable).parent / "coordinatorctl")
NAME = "serve-20300101T000000Z-0123abcd.jsonl"
HARNESS_TIMEOUT = 30  # seconds; verification of these directories takes well under one


def _verify(directory: Path) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [CTL, "--format", "json", "audit", "verify", "--directory", str(directory)],
        capture_output=True,
        text=True,
        timeout=HARNESS_TIMEOUT,
        check=False,
    )
    assert "Traceback" not in done.stderr
    return done.returncode, json.loads(done.stdout)


def _journal(directory: Path) -> Path:
    references = AuditReferences(b"k" * 32, "db-kinds")
    with AuditWriter.open(directory, "ctl") as writer:
        writer.append(api_request(new_correlation(), "status", references.actor("a" * 64)))
    (path,) = directory.glob("ctl-*.jsonl")
    return path


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    here = Path.cwd()
    os.chdir(path.parent)  # bound by its relative name: a temporary path can be too long
    try:
        server.bind(path.name)
    finally:
        os.chdir(here)
        server.close()  # the socket file stays


def _directory(path: Path) -> None:
    path.mkdir()


def _device_link(path: Path) -> None:
    path.symlink_to("/dev/zero")  # a device that would never end a line


def _fifo_link(path: Path) -> None:
    target = path.parent.parent / "elsewhere.fifo"
    os.mkfifo(target)
    path.symlink_to(target)


KINDS: dict[str, Callable[[Path], None]] = {
    "fifo": _fifo,
    "socket": _socket,
    "directory": _directory,
    "device-symlink": _device_link,
    "fifo-symlink": _fifo_link,
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_journal_name_that_is_not_a_regular_file_is_refused_without_blocking(
    tmp_path: Path, kind: str
) -> None:
    directory = tmp_path / "audit"
    _journal(directory)
    KINDS[kind](directory / NAME)
    code, report = _verify(directory)
    assert code == 3
    (diagnostic,) = report["diagnostics"]
    assert diagnostic["code"] == "coordinator.audit.unreadable"
    assert diagnostic["source"]["file"] == NAME
    assert "not a regular file" in diagnostic["message"]


def test_a_symlink_to_a_regular_journal_file_still_verifies(tmp_path: Path) -> None:
    directory = tmp_path / "audit"
    journal = _journal(directory)
    kept = tmp_path / "kept.jsonl"
    journal.rename(kept)
    journal.symlink_to(kept)
    code, report = _verify(directory)
    assert (code, report["status"], report["entries"]) == (0, "verified", 1)
