"""`coordinatorctl dev`: your project, live on this machine, in one command
(docs/running-locally.md).

In the foreground it starts the sandbox products (state and keys under `DIR/.coordinator/`,
kept between runs), writes the dev deployment (every alias bound to the sandbox, development
keys, a SQLite store under `.coordinator/dev/`), packages, migrates, applies, starts
`coordinator serve` and the operator console, mints a caller token into
`.coordinator/caller-token`, and prints the URLs, the environment to export and a ready `start`
line. Then it watches the project: a change that checks clean is activated without a restart by
hand; a refused check is shown and the running service left as it was. Ctrl-C stops everything
it started (session.py; children.py says how no process outlives it).

One session per project: a second `dev` on the same project while one runs is refused
(`coordinator.dev.already-running`), naming the running one's service. It needs the service,
the sandbox and the deployment commands installed (`coordinatorctl[dev]`).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from coordinator_core.errors import Diagnostic
from coordinatorctl.report import Outcome

__all__ = ["DEV_EXTRA", "run"]

DEV_EXTRA: Final = "coordinatorctl[dev]"
# What `dev` runs besides itself: the service (`coordinator serve`) and the sandbox products.
_COMPONENTS: Final = (
    ("coordinator_api", "coordinator-api"),
    ("coordinator_sandbox", "coordinator-sandbox"),
)


def _missing_components() -> list[str]:
    from coordinatorctl import installed

    missing = [name for module, name in _COMPONENTS if importlib.util.find_spec(module) is None]
    if installed.missing_service_modules():
        missing.append("coordinator-core[service]")
    return missing


@contextlib.contextmanager
def _one_session(state: Path) -> Iterator[bool]:
    """An exclusive lock on `.coordinator/dev/lock` for the session's life; yields whether it
    was taken (False: another `dev` holds it)."""
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor = os.open(state / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(descriptor)


def _running_service(state: Path) -> str:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        session = json.loads((state / "session.json").read_text(encoding="utf-8"))
        return f" (process {int(session['pid'])}, service at {session['service']})"
    return ""


def run(options: argparse.Namespace) -> Outcome:
    """Run one dev session until interrupted; its outcome (`stopped`, or the refusal)."""
    from coordinatorctl.dev.session import DevFailed, Events, Session

    project = Path(os.path.abspath(options.project or "."))
    if not (project / "workflow.yaml").is_file():
        return Outcome(
            "dev",
            [
                Diagnostic(
                    "coordinator.definition.read",
                    path="",
                    file="workflow.yaml",
                    message=f"{project} has no workflow.yaml: it is not a project directory.",
                    hint="Run `coordinatorctl dev` in a project directory or name one with"
                    " --project DIR; `coordinatorctl init --directory DIR` makes one.",
                )
            ],
        )
    missing = _missing_components()
    if missing:
        return Outcome(
            "dev",
            [
                Diagnostic(
                    "coordinator.dev.extra-required",
                    path="",
                    message="`dev` needs " + ", ".join(missing) + ", which this installation"
                    " does not have.",
                )
            ],
        )
    given = Path(options.runtime_config) if options.runtime_config is not None else None
    state = project / ".coordinator" / "dev"
    with _one_session(state) as mine:
        if not mine:
            return Outcome(
                "dev",
                [
                    Diagnostic(
                        "coordinator.dev.already-running",
                        path="",
                        message="A `coordinatorctl dev` already runs for this project"
                        + _running_service(state)
                        + ".",
                    )
                ],
            )
        session = Session(
            project, given, console=not options.no_console, events=Events(options.format)
        )
        try:
            result = session.run()
        except DevFailed as failed:
            return Outcome("dev", [failed.diagnostic])
        with contextlib.suppress(OSError):
            (state / "session.json").unlink()
    return Outcome("dev", status="stopped", result=result, text="Stopped.\n")
