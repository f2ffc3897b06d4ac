"""docs/running-locally.md, run as written: every `$ ` line of its console blocks, in order, in the
terminal the block is marked for (`<!-- terminal: N -->`), as a shell would run it.

Each terminal keeps its working directory (`cd`) and environment (`. FILE`). A `coordinatorctl
dev` line holds its terminal, as it does in front of a user: it runs in the background until it
prints its block. After a `sed -i` edit of the project the next line waits for `dev` to report
the activation, as a reader watching the first terminal would. A line ending in `# exits N` must
exit N, every other line 0. Afterwards the runs the page started are read back from the service,
and Ctrl-C (SIGINT) ends each `dev` without leaving a process behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from e2e_support import ROOT, alive, descendants

from coordinator_sandbox.testing import wait_for

PAGE = ROOT / "docs" / "running-locally.md"
READY = "Ctrl-C stops everything."
_BLOCK = re.compile(r"<!-- terminal: (\d+) -->\n```console\n(.*?)```", re.S)
_EXITS = re.compile(r"\s+# exits (\d+)$")


def page_commands() -> list[tuple[int, str]]:
    """(terminal, command) for every `$ ` line of the marked console blocks, in page order."""
    text = PAGE.read_text(encoding="utf-8")
    commands = [
        (int(terminal), line[2:])
        for terminal, block in _BLOCK.findall(text)
        for line in block.splitlines()
        if line.startswith("$ ")
    ]
    unmarked = text.count("```console") - len(_BLOCK.findall(text))
    assert unmarked == 0, "every console block of the page says its terminal"
    return commands


@dataclass
class Terminal:
    cwd: Path
    env: dict[str, str]


@dataclass
class Session:
    """A `coordinatorctl dev` a line started: its process, its output file and project."""

    process: subprocess.Popen[bytes]
    output: Path
    project: Path
    family: set[int] = field(default_factory=set)

    def text(self) -> str:
        return self.output.read_text(errors="replace")


class Page:
    def __init__(self, root: Path) -> None:
        self.root = root
        env = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        self.base = env
        self.terminals: dict[int, Terminal] = {}
        self.sessions: list[Session] = []
        self.transcript: list[str] = []

    def terminal(self, number: int) -> Terminal:
        return self.terminals.setdefault(number, Terminal(self.root, dict(self.base)))

    def run(self, number: int, line: str) -> None:
        term = self.terminal(number)
        found = _EXITS.search(line)
        expected = int(found.group(1)) if found else 0
        command = _EXITS.sub("", line)
        self.transcript.append(f"[{number}] $ {command}")
        if command.startswith("cd "):
            term.cwd = (term.cwd / command[3:].strip()).resolve()
            return
        if command.startswith(". "):
            dumped = subprocess.run(
                ["bash", "-c", f"{command} && env -0"], cwd=term.cwd, env=term.env,
                capture_output=True, check=True, timeout=30,
            )  # fmt: skip
            pairs = (
                item.split("=", 1) for item in dumped.stdout.decode().split("\0") if "=" in item
            )
            term.env = dict(pairs)
            return
        if command.startswith("coordinatorctl dev"):
            self.start_dev(term, command)
            return
        before = self.activations(term.cwd) if command.startswith("sed -i") else None
        done = subprocess.run(
            ["bash", "-c", command], cwd=term.cwd, env=term.env,
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        self.transcript.append(done.stdout + done.stderr)
        assert done.returncode == expected, "\n".join(self.transcript)
        if before is not None:
            wait_for(lambda: self.activations(term.cwd) > before, 60, "dev to activate the edit")

    def start_dev(self, term: Terminal, command: str) -> None:
        output = self.root.parent / f"dev-{len(self.sessions)}.out"
        handle = output.open("wb")
        process = subprocess.Popen(
            ["bash", "-c", "exec " + command], cwd=term.cwd, env=term.env,
            stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        handle.close()
        match = re.search(r"--project (\S+)", command)
        project = (term.cwd / match.group(1)).resolve() if match else term.cwd
        session = Session(process, output, project)
        self.sessions.append(session)

        def ready() -> bool:
            assert process.poll() is None, session.text()
            return READY in session.text()

        wait_for(ready, 120, f"`{command}` to print its block")
        session.family = descendants(process.pid)

    def activations(self, cwd: Path) -> int:
        [session] = [s for s in self.sessions if cwd == s.project or s.project in cwd.parents]
        return session.text().count("Activated revision")

    def stop_all(self) -> None:
        for session in self.sessions:
            if session.process.poll() is None:
                session.family |= descendants(session.process.pid)
                session.process.send_signal(signal.SIGINT)
        for session in self.sessions:
            try:
                assert session.process.wait(60) == 0, session.text()
            finally:
                if session.process.poll() is None:
                    session.process.kill()
                for pid in session.family:
                    if alive(pid):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)


def runs(page: Page, terminal: int) -> list[dict[str, object]]:
    done = subprocess.run(
        ["coordinatorctl", "list", "--format", "json"], cwd=page.terminal(terminal).cwd,
        env=page.terminal(terminal).env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    found: list[dict[str, object]] = json.loads(done.stdout)["runs"]
    return found


def test_the_page_runs_as_written(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    shutil.copytree(ROOT / "examples", root / "examples")  # "from the checkout's root"
    page = Page(root)
    commands = page_commands()
    assert commands[0] == (1, "coordinatorctl init --directory follow-up")
    try:
        for terminal, line in commands:
            page.run(terminal, line)
        # What the page says happened, read back from the service.
        follow_up = runs(page, 2)
        outcomes = sorted(str(run["outcome"]) for run in follow_up if run["status"] == "finished")
        assert outcomes.count("message-accepted") >= 3 and "no-current-permission" in outcomes
        assert [run["failureCode"] for run in follow_up if run["status"] == "failed"] == [
            "product-refused"
        ]
        assert any(run["status"] == "running" and run["step"] == "due" for run in follow_up)
        wait_for(
            lambda: [run["status"] for run in runs(page, 4)] == ["finished"],
            30,
            "the reviewed run to finish after the decision",
        )
        assert runs(page, 4)[0]["outcome"] == "notice-sent"
    finally:
        page.stop_all()
    families = set().union(*(session.family for session in page.sessions))
    assert len(page.sessions) == 2 and families
    wait_for(lambda: not any(alive(pid) for pid in families), 10, "every child of dev to end")
