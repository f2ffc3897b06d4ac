"""One `coordinatorctl dev` session: the sandbox, the dev deployment, the service, the console,
the caller token, and the loop that watches the project (docs/running-locally.md).

The order at start: development keys (the project's, made when missing, and the sandbox's
`keys`); the sandbox products on ephemeral loopback ports (`serve --ports 0`, loading the
project's `sandbox.json`); then the first activation; then the caller token, the console and
the block that says how to use them. An activation is: `check` the project as `coordinatorctl
check --project` does; bind its aliases to the sandbox (`coordinator-sandbox bind`); `package`
it (nothing more when the package is the active one); write the dev runtime file pinning it and
check the definition against it; stop the service (SQLite has one process), `migrate` (the
first time) and `apply` through the deployment commands' own code, start `coordinator serve`
again and wait for `/health`. A refused check leaves the running service as it was; so does a
refused `apply` (the previous runtime file is put back and the service started on it). Runs
already admitted stay on the definition they were admitted with, as always.

The loop polls the project's files (their size and modification time) a few times a second;
a change that has settled is one activation. It also restarts a service that exited on its
own (once per activation), and mints a fresh caller token ten minutes before the current one
expires. Ctrl-C (SIGINT), SIGTERM and SIGHUP end the session: every child is stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets as random_bytes
import shlex
import shutil
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final

from coordinator_core.errors import Diagnostic
from coordinatorctl.console import READY_PREFIX as CONSOLE_READY_PREFIX
from coordinatorctl.dev.children import ChildFailed, Children, run_once
from coordinatorctl.dev.runtime_file import (
    SANDBOX_PRODUCTS,
    Pin,
    aliases,
    read_runtime,
    runtime_document,
    write_runtime,
)

__all__ = ["DevFailed", "Events", "Session"]

POLL_SECONDS: Final = 0.25
SETTLE_SECONDS: Final = 0.3
READY_TIMEOUT_SECONDS: Final = 60.0
TOKEN_LIFETIME_SECONDS: Final = 3600  # the longest a caller token may live (06 §2)
TOKEN_REFRESH_MARGIN_SECONDS: Final = 600
# `coordinator-sandbox serve` prints this, then its endpoints as JSON, once every port answers
# (coordinator_sandbox/server.py READY_PREFIX; tests/unit/cli/test_dev_runtime_file.py keeps them equal).
SANDBOX_READY: Final = "coordinator-sandbox ready "
DEV_KEYS: Final = ("state-1.key", "admission.key", "audit.key")
# Listener ports below Linux's ephemeral range: the sandbox's `--ports 0` can never take one
# between this probe and the service's bind.
_LISTENER_PORTS: Final = range(20_000, 32_000)


class DevFailed(Exception):
    """The session cannot go on; `diagnostic` says why (exit 3 unless it says otherwise)."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.code)
        self.diagnostic = diagnostic


def _unavailable(message: str, hint: str | None = None) -> DevFailed:
    return DevFailed(
        Diagnostic("coordinator.dev.component-unavailable", path="", message=message, hint=hint)
    )


class Events:
    """What the session tells its user: text lines (stdout; diagnostics on stderr), one
    report line per event (`--format jsonl`), or nothing until the end (`--format json`)."""

    def __init__(self, output_format: str) -> None:
        self.output_format = output_format

    def say(self, text: str) -> None:
        if self.output_format == "text":
            print(text, flush=True)

    def event(
        self,
        status: str,
        result: Mapping[str, Any],
        *,
        text: str | None = None,
        diagnostics: list[Diagnostic] | None = None,
        sources: Mapping[str, str] | None = None,
    ) -> None:
        from coordinatorctl.report import Outcome, emit

        if self.output_format == "json":
            return
        outcome = Outcome(
            "dev", list(diagnostics or []), status=status, result=dict(result), text=text
        )
        if sources:
            outcome.sources = sources
        if self.output_format == "jsonl":
            line = json.dumps(outcome.envelope(), ensure_ascii=False, separators=(",", ":"))
            print(line, flush=True)
            return
        emit(outcome, "text")
        if outcome.exit_code != 0 and text is not None:
            print(text, end="", flush=True)


def free_port() -> int:
    for port in random.sample(_LISTENER_PORTS, 64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise _unavailable("No free loopback port was found for the service.")


class Interrupts:
    """What SIGINT, SIGTERM and SIGHUP do while `dev` runs (`interruptible`): the first ends
    the session (KeyboardInterrupt in the main thread); every later one, and every one once
    the session is stopping (`stopping`), calls `hurry` instead (which kills the children
    still running), so that a second Ctrl-C, or a supervisor's SIGTERM after the first, makes
    the stop quicker rather than cutting it short with a traceback."""

    def __init__(self, hurry: Callable[[], None]) -> None:
        self.hurry = hurry
        self.ended = False

    def stopping(self) -> None:
        self.ended = True

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.ended:
            self.hurry()
            return
        self.ended = True
        raise KeyboardInterrupt


@contextlib.contextmanager
def interruptible(hurry: Callable[[], None]) -> Iterator[Interrupts]:
    """`Interrupts` installed for SIGINT, SIGTERM and SIGHUP. SIGINT is set explicitly: a
    shell starts a background job (`coordinatorctl dev &`) with SIGINT ignored, and Python
    keeps an ignored SIGINT ignored."""
    interrupts = Interrupts(hurry)
    previous = {
        signum: signal.signal(signum, interrupts)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        yield interrupts
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@dataclass
class Session:
    """The state of one session; `run` drives it until interrupted."""

    project: Path
    given: Path | None
    console: bool
    events: Events
    environment: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    home: Path = field(init=False)
    state: Path = field(init=False)
    secrets: Path = field(init=False)
    sandbox_state: Path = field(init=False)
    token: Path = field(init=False)
    runtime: Path = field(init=False)
    children: Children = field(init=False)
    port: int = 0
    origin: str = ""
    endpoints: dict[str, str] = field(default_factory=dict)
    bound: dict[str, Any] = field(default_factory=lambda: {"connections": {}, "eventSources": {}})
    active: Pin | None = None
    revision: str | None = None
    migrated: bool = False
    restarts: int = 0
    token_minted: float = 0.0
    console_url: str | None = None
    console_port: int = 0
    workflow_id: str = ""

    def __post_init__(self) -> None:
        self.home = self.project / ".coordinator"
        self.state = self.home / "dev"
        self.sandbox_state = self.home / "sandbox"
        self.token = self.home / "caller-token"
        self.runtime = self.state / "runtime.yaml"
        self.secrets = self.home / "secrets"
        if self.given is not None:
            root = _file_root(read_runtime(self.given))
            if root is not None:
                self.secrets = Path(root)
        self.environment.setdefault("PYTHONUNBUFFERED", "1")
        self.children = Children(self.state / "logs", self.environment)

    # -- the whole session --------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Serve until interrupted; the final result members."""
        with interruptible(self.children.kill_all) as interrupts:
            try:
                self._prepare()
                watched = self._fingerprint()
                if not self._activate():
                    self.events.say("Waiting for a change that checks clean (Ctrl-C stops).")
                while True:
                    time.sleep(POLL_SECONDS)
                    self._keep_alive()
                    now = self._fingerprint()
                    if now != watched:
                        watched = self._settled(now)
                        self._activate()
            except KeyboardInterrupt:
                pass
            finally:
                interrupts.stopping()
                self.events.say("Stopping the service, the console and the sandbox…")
                self.children.stop_all()
        return {
            "project": str(self.project),
            "revision": self.revision,
            "service": self.origin or None,
        }

    # -- start ---------------------------------------------------------------------------------

    def _prepare(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.home, 0o700)
        self._dev_keys()
        keys = run_once(
            [
                "-m", "coordinator_sandbox", "keys", "--secrets-dir", str(self.secrets),
                "--state-dir", str(self.sandbox_state),
            ],
            self.environment,
        )  # fmt: skip
        if keys.returncode != 0:
            raise _unavailable(
                "`coordinator-sandbox keys` failed: " + _last_line(keys.stderr),
                "Check that the project's .coordinator directory is writable.",
            )
        self.port = self.port or (8108 if self.given is not None else free_port())
        self.origin = f"http://127.0.0.1:{self.port}"
        with contextlib.suppress(FileNotFoundError):
            (self.sandbox_state / "endpoints.json").unlink()
        arguments = [
            "-m", "coordinator_sandbox", "serve", "--state-dir", str(self.sandbox_state),
            "--coordinator-url", self.origin,
        ]  # fmt: skip
        if self.given is None:
            arguments += ["--ports", "0"]  # a given runtime file names the default ports
        seed = self.project / "sandbox.json"
        if seed.is_file():
            arguments += ["--config", str(seed)]
        sandbox = self.children.start("sandbox", arguments, read_stdout=True)
        try:
            self.endpoints = json.loads(sandbox.wait_line(SANDBOX_READY, READY_TIMEOUT_SECONDS))
        except (ChildFailed, ValueError) as failed:
            raise _unavailable(
                f"The sandbox did not start: {failed}",
                "Read the sandbox's log; a port in use or a broken sandbox.json are the usual"
                " causes.",
            ) from None
        loaded = " (with sandbox.json)" if seed.is_file() else ""
        self.events.say(f"Sandbox products are up{loaded}; state in {self.sandbox_state}")

    def _dev_keys(self) -> None:
        """The state, admission and audit keys `init` generates, when the project has none."""
        self.secrets.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.secrets, 0o700)
        for name in DEV_KEYS:
            path = self.secrets / name
            if path.exists():
                continue
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(random_bytes.token_bytes(32))

    # -- activation ----------------------------------------------------------------------------

    def _activate(self) -> bool:
        """One activation (module docstring); whether the project's revision is now served."""
        from coordinator_core.checking.checker import check_project

        started = time.monotonic()
        checked = check_project(self.project, runtime_config=self.given, environment=None)
        definition = checked.definition
        if checked.has_errors or definition is None or definition.decoded is None:
            self.events.event(
                "check-failed",
                {"project": str(self.project)},
                diagnostics=list(checked.diagnostics),
                sources=checked.sources,
                text="The running service is unchanged; fix the project and save again.\n",
            )
            return False
        decoded = definition.decoded
        self.workflow_id = str(decoded["project"]["id"])
        if self.given is None:
            self._bind(decoded)
        packaged = self._package()
        if packaged is None:
            return False
        if self.active is not None and packaged.package_digest == self.active.package_digest:
            self.events.event(
                "unchanged",
                {"revision": self.revision},
                text=f"Checked: the definition is unchanged; revision {self.revision} stays"
                " active.\n",
            )
            return True
        candidate = self.runtime.with_name("runtime.next.yaml")
        write_runtime(candidate, self._document(packaged))
        bindings = check_project(self.project, runtime_config=candidate, definition_only=True)
        if bindings.has_errors:
            self.events.event(
                "check-failed",
                {"project": str(self.project)},
                diagnostics=[d for d in bindings.diagnostics if d.effective_severity == "error"],
                text="The project does not bind to the sandbox; the running service is"
                " unchanged.\n",
            )
            return False
        self.events.say(f"Checked and packaged revision {packaged.revision}")
        previous = self.runtime.read_bytes() if self.runtime.exists() else None
        self.children.stop("service")
        os.replace(candidate, self.runtime)
        refused = self._deploy()
        if refused is not None:
            if previous is not None:
                self.runtime.write_bytes(previous)
                self._start_service()
            self.events.event(
                "activation-failed",
                {"project": str(self.project)},
                diagnostics=refused,
                text="The previous revision stays active.\n" if previous is not None else None,
            )
            return False
        first = self.active is None
        self._start_service()
        self.active = packaged
        self.revision = packaged.revision
        self.restarts = 0
        elapsed = time.monotonic() - started
        if first:
            self._mint_token()
        if self.console:
            self._start_console()
        result = {
            "revision": self.revision,
            "packageDigest": packaged.package_digest,
            "workflow": self.workflow_id,
            "seconds": round(elapsed, 3),
        }
        if first:
            self._ready(result)
        else:
            self.events.event(
                "activated",
                result,
                text=f"Activated revision {self.revision} in {elapsed:.1f} s; runs already"
                " admitted stay on their revision.\n",
            )
        self._remember()
        return True

    def _bind(self, decoded: Mapping[str, Any]) -> None:
        connections, sources = aliases(decoded)
        wanted = {
            name: product for name, product in connections.items() if product in SANDBOX_PRODUCTS
        }
        have = self.bound["connections"]
        if set(wanted) <= set(have) and set(sources) <= set(self.bound["eventSources"]):
            return
        arguments = [
            "-m", "coordinator_sandbox", "bind", "--json", "--state-dir",
            str(self.sandbox_state), "--secrets-dir", str(self.secrets),
            *(f"{name}={product}" for name, product in sorted(wanted.items())),
        ]  # fmt: skip
        for source in sources:
            arguments += ["--event-source", source]
        bound = run_once(arguments, self.environment)
        if bound.returncode != 0:
            raise _unavailable("`coordinator-sandbox bind` failed: " + _last_line(bound.stderr))
        self.bound = json.loads(bound.stdout)

    def _package(self) -> Pin | None:
        from coordinatorctl import commands

        packages = self.state / "packages"
        packages.mkdir(parents=True, exist_ok=True)
        scratch = packages / f".new-{os.getpid()}"
        shutil.rmtree(scratch, ignore_errors=True)
        outcome = commands.package(self.project, scratch, runtime_config=None)
        if outcome.exit_code != 0 or outcome.result is None:
            self.events.event(
                "check-failed",
                {"project": str(self.project)},
                diagnostics=outcome.diagnostics,
                sources=outcome.sources,
            )
            return None
        digest = str(outcome.result["packageDigest"])
        root = packages / digest.removeprefix("sha256:")[:16]
        if root.exists():
            shutil.rmtree(scratch, ignore_errors=True)  # the same package as before: reused
        else:
            os.replace(scratch, root)
        return Pin(root, digest, self.workflow_id, str(outcome.result["revision"]))

    def _document(self, pin: Pin) -> dict[str, Any]:
        # Read again at every activation: an edit of the runtime file is a change too.
        base = read_runtime(self.given if self.given is not None else self.project / "runtime.yaml")
        return runtime_document(
            base=base,
            given=self.given is not None,
            bound=self.bound,
            endpoints=self.endpoints,
            state=self.state,
            secrets=self.secrets,
            listener_port=self.port,
            pin=pin,
        )

    def _deploy(self) -> list[Diagnostic] | None:
        """`migrate` (once per session) and `apply`, through the deployment commands' code."""
        from coordinatorctl import deploy

        steps = ["apply"] if self.migrated else ["migrate", "apply"]
        for command in steps:
            options = argparse.Namespace(
                command=command, runtime_config=str(self.runtime), reference="coordinatorctl dev"
            )
            outcome = deploy.run(options)
            if outcome.exit_code != 0:
                return list(outcome.diagnostics)
            if command == "migrate":
                self.migrated = True
        return None

    # -- the service, the console, the token --------------------------------------------------

    def _start_service(self) -> None:
        import httpx  # noqa: TID251 - dev drives real processes over loopback HTTP

        service = self.children.start(
            "service",
            ["-m", "coordinator_api.serve", "serve", "--runtime-config", str(self.runtime)],
        )
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if not service.alive():
                raise _unavailable(
                    f"`coordinator serve` exited with code {service.process.returncode}"
                    f" (log: {service.log}).",
                    "Read the service's log: each line has a stable code.",
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.origin + "/health", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise _unavailable(f"`coordinator serve` did not answer /health (log: {service.log}).")

    def _start_console(self) -> None:
        self.children.stop("console")
        arguments = [
            "-m", "coordinatorctl", "--url", self.origin, "--token-file", str(self.token),
            "console", "--port", str(self.console_port), "--project", str(self.project),
        ]  # fmt: skip
        console = self.children.start("console", arguments, read_stdout=True)
        try:
            line = console.wait_line(CONSOLE_READY_PREFIX, READY_TIMEOUT_SECONDS)
        except ChildFailed as failed:
            self.events.say(f"The console did not start: {failed}")
            self.console_url = None
            return
        self.console_url = line.split(" ", 1)[0]
        port = self.console_url.rstrip("/").rpartition(":")[2]
        self.console_port = int(port) if port.isdigit() else 0

    def _mint_token(self) -> None:
        minted = run_once(
            [
                "-m", "coordinator_sandbox", "caller-token", "--state-dir",
                str(self.sandbox_state), "--expires-in", str(TOKEN_LIFETIME_SECONDS),
                "--output", str(self.token),
            ],
            self.environment,
        )  # fmt: skip
        if minted.returncode != 0:
            raise _unavailable(
                "`coordinator-sandbox caller-token` failed: " + _last_line(minted.stderr)
            )
        self.token_minted = time.monotonic()

    def _ready(self, result: Mapping[str, Any]) -> None:
        start = self._start_line()
        environment = {
            "COORDINATOR_URL": self.origin,
            "COORDINATOR_TOKEN_FILE": str(self.token),
        }
        env_file = self.state / "env"
        env_file.write_text(
            "".join(f"export {name}={shlex.quote(value)}\n" for name, value in environment.items()),
            encoding="utf-8",
        )
        block = [
            "",
            f"coordinatorctl dev: {self.workflow_id} is live, revision {self.revision}",
            "",
            f"  Service   {self.origin}   (API explorer: {self.origin}/docs)",
        ]
        if self.console_url is not None:
            block.append(f"  Console   {self.console_url}")
        block += [
            f"  Sandbox   {self.sandbox_state}   (coordinator-sandbox reviews|decide|fault|received)",
            f"  Logs      {self.children.logs}",
            "",
            f"In another terminal (`. {self._shown(env_file)}` sets the same):",
            *(f"  export {name}={shlex.quote(value)}" for name, value in environment.items()),
            f"  {start}",
            "",
            "Watching the project: every change that checks clean is packaged and activated."
            " Ctrl-C stops everything.",
            "",
        ]
        self.events.event(
            "ready",
            {
                **result,
                "service": self.origin,
                "console": self.console_url,
                "tokenFile": str(self.token),
                "environment": environment,
                "environmentFile": str(env_file),
                "start": start,
            },
            text="\n".join(block) + "\n",
        )

    def _start_line(self) -> str:
        example = self.project / "input.example.json"
        line = f"coordinatorctl start --workflow {self.workflow_id}"
        if example.is_file():
            return f"{line} --input @{self._shown(example)} --wait"
        return line + " --input-json '{…}' --wait"

    @staticmethod
    def _shown(path: Path) -> str:
        """`path` relative to the working directory when it is below it, else absolute."""
        relative = os.path.relpath(path)
        return shlex.quote(relative if not relative.startswith("..") else str(path))

    def _remember(self) -> None:
        session = {
            "pid": os.getpid(),
            "service": self.origin,
            "console": self.console_url,
            "revision": self.revision,
        }
        (self.state / "session.json").write_text(json.dumps(session, indent=2) + "\n")

    # -- the loop ------------------------------------------------------------------------------

    def _keep_alive(self) -> None:
        sandbox = self.children.running.get("sandbox")
        if sandbox is not None and not sandbox.alive():
            raise _unavailable(
                f"The sandbox exited with code {sandbox.process.returncode} (log: {sandbox.log})."
            )
        service = self.children.running.get("service")
        if service is not None and not service.alive() and self.active is not None:
            code = service.process.returncode
            self.children.running.pop("service", None)
            if self.restarts == 0:
                self.restarts += 1
                self.events.say(f"The service exited with code {code}; starting it again.")
                try:
                    self._start_service()
                except DevFailed as failed:
                    self.events.event("service-exited", {}, diagnostics=[failed.diagnostic])
            else:
                self.events.event(
                    "service-exited",
                    {"exitCode": code},
                    diagnostics=[
                        Diagnostic(
                            "coordinator.dev.component-unavailable",
                            path="",
                            message=f"The service exited again with code {code} (log:"
                            f" {service.log}).",
                        )
                    ],
                    text="Waiting for a change to the project.\n",
                )
        age = time.monotonic() - self.token_minted
        if self.token_minted and age > TOKEN_LIFETIME_SECONDS - TOKEN_REFRESH_MARGIN_SECONDS:
            self._mint_token()
            self.events.say(f"Caller token renewed in {self.token}")

    def _fingerprint(self) -> dict[str, tuple[int, int]]:
        """Size and modification time of every regular file of the project (and the given
        runtime file); hidden entries (`.coordinator`, `.git`) are not the project's."""
        found: dict[str, tuple[int, int]] = {}
        paths = [self.given] if self.given is not None else []
        with contextlib.suppress(OSError):
            paths += [p for p in self.project.iterdir() if not p.name.startswith(".")]
        for path in paths:
            with contextlib.suppress(OSError):
                info = path.stat()
                if path.is_file():
                    found[str(path)] = (info.st_mtime_ns, info.st_size)
        return found

    def _settled(self, seen: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        """The files once they have stopped changing (an editor writes in several steps)."""
        while True:
            time.sleep(SETTLE_SECONDS)
            now = self._fingerprint()
            if now == seen:
                return now
            seen = now


def _file_root(document: Mapping[str, Any] | None) -> str | None:
    providers = (document or {}).get("secretProviders")
    if isinstance(providers, dict) and isinstance(providers.get("file"), dict):
        root = providers["file"].get("root")
        return root if isinstance(root, str) else None
    return None


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"
