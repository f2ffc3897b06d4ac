"""Starting the sandbox as a child process and reading its readiness line, for tests and demos.

Everything that drives the sandbox from outside (test suites, the demo, benchmarks) waits for the
same one line; this module is the one place that knows its form.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from coordinator_sandbox.server import READY_PREFIX

__all__ = ["SandboxNotReady", "endpoints_in", "start"]


class SandboxNotReady(RuntimeError):
    """The sandbox exited or did not print its readiness line in time."""


def endpoints_in(text: str) -> dict[str, str] | None:
    """The endpoints announced by a readiness line anywhere in `text`, if one was printed."""
    for line in text.splitlines():
        if line.startswith(READY_PREFIX):
            found: dict[str, str] = json.loads(line[len(READY_PREFIX) :])
            return found
    return None


def start(
    state_dir: Path,
    *,
    arguments: Sequence[str] = (),
    stderr: IO[str] | None = None,
    timeout: float = 30.0,
) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """`coordinator-sandbox serve --ports 0 --state-dir STATE_DIR …` and its endpoints.

    The child's stdout is read by a daemon thread, so a blocked pipe never stalls it.
    """
    process = subprocess.Popen(
        [
            sys.executable, "-m", "coordinator_sandbox", "serve", "--ports", "0",
            "--state-dir", str(state_dir), *arguments,
        ],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    stdout = process.stdout
    assert stdout is not None

    def pump() -> None:
        for text in iter(stdout.readline, ""):
            lines.put(text)

    threading.Thread(target=pump, daemon=True).start()
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        process.kill()
        raise SandboxNotReady("the sandbox did not report ready in time") from None
    endpoints = endpoints_in(line)
    if endpoints is None:
        process.kill()
        raise SandboxNotReady("the sandbox printed something other than its readiness line")
    return process, endpoints
