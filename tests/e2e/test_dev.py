"""End to end: `coordinatorctl dev` on a project made by `coordinatorctl init`, every part a real
process (the sandbox, `coordinator serve`, the console, the CLI).

A fresh project goes live; `start --input-json … --wait` finishes a run; a broken edit is
refused and leaves the service as it was; an edit of a step's mapping becomes the active
revision within seconds, and a second run takes it while the first stays on its own; a second
`dev` on the project is refused; SIGINT stops `dev`, and no process it started is left. If `dev`
itself is killed, its children end with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
from e2e_support import alive, descendants

from coordinator_sandbox.testing import PYTHON, wait_for

READY_TIMEOUT = 90.0
INPUT = {
    "applicationId": "a8d12546-b2ca-46ac-b12b-06c199041bb2",
    "sendAfter": "2026-01-01T00:00:00Z",
}


@dataclass
class Dev:
    """A running `coordinatorctl --format jsonl dev`, its event lines read as they come."""

    process: subprocess.Popen[str]
    events: list[dict[str, Any]] = field(default_factory=list)

    def next_event(self, status: str, timeout: float = READY_TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        stdout = self.process.stdout
        assert stdout is not None
        while time.monotonic() < deadline:
            line = stdout.readline()
            if not line:
                raise AssertionError(f"dev ended before `{status}`: {self.events}")
            event = json.loads(line)
            self.events.append(event)
            if event["status"] == status or (
                status == "check-failed" and event["status"] == "domain-refusal"
            ):
                return event
        raise AssertionError(f"no `{status}` event in time: {self.events}")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "follow-up"
    done = ctl("init", "--directory", str(root))
    assert done.returncode == 0, done.stderr
    return root


def ctl(
    *argv: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "coordinatorctl", *argv],
        capture_output=True, text=True, timeout=120, check=False, env=env, input=stdin,
    )  # fmt: skip


@contextlib.contextmanager
def running_dev(project: Path, err: IO[str], *extra: str) -> Iterator[Dev]:
    process = subprocess.Popen(
        [PYTHON, "-m", "coordinatorctl", "--format", "jsonl", "dev", "--project", str(project), *extra],
        stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    started = Dev(process)
    try:
        yield started
    finally:
        if process.poll() is None:
            family = descendants(process.pid)
            process.kill()
            process.wait(30)
            for pid in family:  # a failed test leaves nothing behind either
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def remote(ready: dict[str, Any], *argv: str) -> dict[str, Any]:
    env = {**os.environ, **ready["environment"]}
    done = ctl(*argv, "--format", "json", env=env)
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def test_dev_runs_a_fresh_project_live_activates_edits_and_leaves_no_process(
    project: Path, tmp_path: Path
) -> None:
    with (tmp_path / "dev.err").open("w") as err, running_dev(project, err) as dev:
        ready = dev.next_event("ready")
        assert ready["workflow"] == "delayed-follow-up" and ready["console"].startswith("http://")
        token_file = Path(ready["tokenFile"])
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        assert ready["start"].startswith("coordinatorctl start --workflow delayed-follow-up")
        assert ready["start"].endswith("input.example.json --wait")
        first_revision = ready["revision"]

        # 1. A run on the sample input finishes against the sandbox products.
        started = remote(ready, "start", "--input-json", json.dumps(INPUT), "--wait")
        assert started["ok"] and started["run"]["status"] == "finished", started
        assert started["run"]["outcome"] == "message-accepted"
        first_run = started["run"]["runId"]
        assert started["run"]["revision"] == first_revision

        # 2. A broken edit is shown and the service keeps serving the revision it had.
        functions = project / "functions.rhai"
        original = functions.read_text()
        functions.write_text(original.replace("receipt.id }", "receipt.id"))
        refused = dev.next_event("check-failed")
        assert refused["ok"] is False and refused["diagnostics"]
        assert remote(ready, "workflow")["revision"] == first_revision

        # 3. An edit of a step's mapping (the notice's locale) becomes the active revision.
        functions.write_text(original.replace('locale: "en"', 'locale: "fr"'))
        activated = dev.next_event("activated")
        second_revision = activated["revision"]
        assert second_revision != first_revision
        wait_for(
            lambda: remote(ready, "workflow").get("revision") == second_revision,
            30,
            "the new revision to be served",
        )
        second = remote(
            ready, "start", "--input", "@" + str(project / "input.example.json"), "--wait"
        )
        assert second["ok"] and second["run"]["revision"] == second_revision
        assert remote(ready, "status", "--run", first_run)["run"]["revision"] == first_revision
        messages = subprocess.run(
            [PYTHON, "-m", "coordinator_sandbox", "received", "--product", "messaging", "--json",
             "--state-dir", str(project / ".coordinator" / "sandbox")],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        bodies = [entry["body"] for entry in json.loads(messages.stdout)["messaging"]]
        assert [body["locale"] for body in bodies] == ["en", "fr"]

        # 4. A second `dev` on the same project says so.
        again = ctl("--format", "json", "dev", "--project", str(project))
        report = json.loads(again.stdout)
        assert again.returncode == 1
        assert report["diagnostics"][0]["code"] == "coordinator.dev.already-running"
        assert ready["service"] in report["diagnostics"][0]["message"]

        # 5. SIGINT stops everything dev started.
        family = descendants(dev.process.pid)
        assert len(family) >= 3  # the sandbox, the service, the console
        dev.process.send_signal(signal.SIGINT)
        stopped = dev.next_event("stopped", timeout=60)
        assert stopped["ok"] is True and dev.process.wait(60) == 0
        wait_for(lambda: not any(alive(pid) for pid in family), 10, "every child to end")
        port = int(ready["service"].rsplit(":", 1)[1])
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
    # The state is kept for the next session; the session file is not.
    assert (project / ".coordinator" / "dev" / "coordinator.db").exists()
    assert not (project / ".coordinator" / "dev" / "session.json").exists()


def test_a_second_interrupt_while_stopping_hurries_the_stop_without_a_traceback(
    project: Path, tmp_path: Path
) -> None:
    # Ctrl-C pressed twice, or a supervisor's SIGTERM after it: the stop goes on, quicker (the
    # children still running are killed), and ends as a stop does: no traceback, nothing left.
    errors = tmp_path / "dev.err"
    with errors.open("w") as err, running_dev(project, err, "--no-console") as dev:
        dev.next_event("ready")
        family = descendants(dev.process.pid)
        assert len(family) >= 2  # the sandbox and the service
        dev.process.send_signal(signal.SIGINT)
        time.sleep(0.05)
        dev.process.send_signal(signal.SIGTERM)
        stopped = dev.next_event("stopped", timeout=60)
        assert stopped["ok"] is True and dev.process.wait(60) == 0
        wait_for(lambda: not any(alive(pid) for pid in family), 10, "every child to end")
    assert "Traceback" not in errors.read_text()


def test_the_children_of_a_killed_dev_end_with_it(project: Path, tmp_path: Path) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("the parent-death signal is Linux's")
    with (tmp_path / "dev.err").open("w") as err, running_dev(project, err, "--no-console") as dev:
        ready = dev.next_event("ready")
        assert ready["console"] is None
        family = descendants(dev.process.pid)
        assert len(family) >= 2  # the sandbox and the service
        dev.process.kill()
        dev.process.wait(30)
        wait_for(lambda: not any(alive(pid) for pid in family), 30, "every child to end")
