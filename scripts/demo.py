"""The README's main job: check and package every example offline, then run one live.

Part 1 (offline): `coordinatorctl check`, `explain` and `package` for every example, with the
mermaid graph of `reviewed-notice`.

Part 2 (live, embedded SQLite, loopback only), in a temporary directory:
`coordinatorctl init` a `delayed-follow-up` project; `coordinator-sandbox keys` into its
secrets; start the sandbox products on ephemeral ports; point the runtime file at them and add
a `deployment` block (listener on a free loopback port, caller authentication against the
sandbox issuer's JWKS, the state, admission and audit keys `init` generated, the audit
directory and the package pin); seed the BReg record the workflow reads; `package`, `migrate`,
`apply`; start `coordinator serve`; mint a caller token; `start` a run whose `sendAfter` is a
few seconds away; follow it with `status` until it finishes (a live display on a terminal,
plain lines otherwise); print `inspect`; stop everything.

Every command runs as its own process, as a user would run it. The live part fails after
`--timeout` seconds (default 60) and stops every process it started on any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from coordinator_sandbox.testing import (
    KitFailure,
    Policy,
    Processes,
    Sandbox,
    caller_token,
    deployment_block,
    free_port,
    point_at_sandbox,
    wait_for,
    write_keys,
    write_token,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PYTHON = sys.executable
GRAPH_EXAMPLE = "reviewed-notice"
MESSAGING = "messaging.submit-message/v1"
SETTLED = frozenset({"finished", "failed", "cancelled", "cancelled-after-effect", "expired"})


class DemoFailure(Exception):
    """The live part could not go on; the message says where."""


def run(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", *arguments],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=60,
    )


def ctl(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run("coordinatorctl", *arguments, env=env)


def banner(text: str) -> None:
    print(f"\n=== {text} " + "=" * max(0, 72 - len(text)), flush=True)


def show(done: subprocess.CompletedProcess[str]) -> None:
    print(done.stdout + done.stderr, end="", flush=True)


# -- part 1: offline ------------------------------------------------------------------------------


def offline(scratch: Path) -> int:
    failures = 0
    for project in sorted(p for p in EXAMPLES.iterdir() if (p / "workflow.yaml").exists()):
        name = f"examples/{project.name}"
        banner(f"coordinatorctl check --project {name}")
        checked = ctl("check", "--project", str(project))
        show(checked)
        if checked.returncode != 0:
            failures += 1
            continue
        explained = ctl("explain", "--project", str(project), "--format", "json")
        report = json.loads(explained.stdout)
        print(
            f"explain: {len(report.get('steps', []))} steps, "
            f"{len(report.get('operations', {}))} operations, "
            f"outcomes {', '.join(report.get('outcomes', []))}"
        )
        failures += explained.returncode != 0
        if project.name == GRAPH_EXAMPLE:
            banner(f"coordinatorctl explain --project {name} --graph mermaid")
            drawn = ctl("explain", "--project", str(project), "--graph", "mermaid")
            show(drawn)
            failures += drawn.returncode != 0
        banner(f"coordinatorctl package --project {name}")
        packaged = ctl(
            "package", "--project", str(project), "--output", str(scratch / project.name)
        )
        show(packaged)
        failures += packaged.returncode != 0
    return failures


# -- part 2: live ---------------------------------------------------------------------------------


class Live:
    """The live part's processes, files and deadline."""

    def __init__(self, directory: Path, timeout: float) -> None:
        self.directory = directory
        self.project = directory / "follow-up"
        self.runtime = self.project / "runtime.yaml"
        self.secrets = self.project / ".coordinator" / "secrets"
        self.state = self.project / ".coordinator" / "sandbox"
        self.deadline = time.monotonic() + timeout
        self.port = free_port()
        self.origin = f"http://127.0.0.1:{self.port}"
        self.processes = Processes(directory)
        self.sandbox: Sandbox | None = None
        self.revision = ""

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DemoFailure("the live demo ran out of time")
        return left

    def step(
        self, title: str, *arguments: str, quiet: bool = False
    ) -> subprocess.CompletedProcess[str]:
        banner(title)
        done = ctl(*arguments)
        if not quiet:
            show(done)
        if done.returncode != 0:
            if quiet:
                show(done)
            raise DemoFailure(f"`{title}` exited {done.returncode}")
        return done

    # -- the flow ---------------------------------------------------------------------------

    def prepare(self) -> None:
        self.step(
            "coordinatorctl init --directory follow-up", "init", "--directory", str(self.project)
        )
        banner("coordinator-sandbox keys --secrets-dir follow-up/.coordinator/secrets")
        write_keys(self.secrets)
        print("client signing keys, caller JWKS and event key written (files 0600)")

        banner("coordinator-sandbox serve --ports 0 (identity, BReg, Messaging on loopback)")
        self.sandbox = Sandbox.start(
            self.processes,
            self.state,
            services=("identity", "breg", "messaging"),
            coordinator_url=self.origin,
            timeout=self.remaining(),
        )
        for service in ("identity", "breg", "messaging"):
            print(f"{service:10} {self.sandbox.url(service)}")

    def configure(self) -> str:
        assert self.sandbox is not None
        packaged = self.step(
            "coordinatorctl package --project follow-up --output follow-up/dist/package",
            "package", "--project", str(self.project),
            "--output", str(self.project / "dist" / "package"), "--format", "json",
            quiet=True,
        )  # fmt: skip
        report = json.loads(packaged.stdout)
        self.revision = report["revision"]
        print(f"Package:  {report['packageDigest']}\nRevision: {self.revision}")

        banner("runtime.yaml: sandbox endpoints and a deployment block")
        block = deployment_block(
            database_id="follow-up-demo",
            package=self.project / "dist" / "package",
            digest=report["packageDigest"],
            port=self.port,
            issuer=self.sandbox.url("issuer"),
            policies=[Policy(["delayed-follow-up"])],
            audit_directory=self.project / ".coordinator" / "audit",
        )
        text = point_at_sandbox(self.runtime.read_text(), self.sandbox.endpoints)
        self.runtime.write_text(text + block)
        print(block, end="")

        banner("seed the BReg application record (followUpAllowed: true)")
        application = str(uuid.uuid4())
        self.sandbox.seed_application(application)
        print(f"applications/{application}")
        return application

    def deploy(self) -> None:
        runtime = ("--runtime-config", str(self.runtime))
        self.step(
            "coordinatorctl --runtime-config follow-up/runtime.yaml migrate", *runtime, "migrate"
        )
        self.step("coordinatorctl --runtime-config follow-up/runtime.yaml apply", *runtime, "apply")
        banner(
            f"coordinator serve --runtime-config follow-up/runtime.yaml  (listening on {self.origin})"
        )
        service = self.processes.start(
            "coordinator",
            ["-m", "coordinator_api.serve", "serve", "--runtime-config", str(self.runtime)],
        )
        import httpx

        def healthy() -> bool:
            if service.poll() is not None:
                log = self.processes.log("coordinator")
                raise DemoFailure(f"coordinator exited {service.returncode}:\n{log}")
            try:
                return httpx.get(self.origin + "/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, self.remaining(), "the coordinator", interval=0.2)
        print("GET /health → 200")

    def start_run(self, application: str) -> tuple[Path, str]:
        banner("coordinator-sandbox caller-token (ops-console, coordinator:operate)")
        token = write_token(
            self.project / ".coordinator" / "caller-token", caller_token(self.state)
        )
        print(f"token written to {token.relative_to(self.directory)} (never printed)")

        send_after = datetime.now(UTC) + timedelta(seconds=4)
        moment = send_after.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        input_file = self.project / "input.json"
        input_file.write_text(json.dumps({"applicationId": application, "sendAfter": moment}))
        key_file = self.project / "key.txt"
        key_file.write_text(f"demo-{uuid.uuid4()}")
        started = self.step(
            "coordinatorctl start --workflow delayed-follow-up (sendAfter in 4 s)",
            "--url", self.origin, "--token-file", str(token), "start",
            "--workflow", "delayed-follow-up", "--revision", self.revision,
            "--input", str(input_file), "--key-file", str(key_file), "--format", "json",
            quiet=True,
        )  # fmt: skip
        report = json.loads(started.stdout)
        run_id: str = report["run"]["runId"]
        print(f"{report['status']}: run {run_id}, step {report['run']['step']}")
        return token, run_id

    def status(self, token: Path, run_id: str) -> dict[str, Any]:
        done = ctl(
            "--url", self.origin, "--token-file", str(token), "status", "--run", run_id,
            "--format", "json",
        )  # fmt: skip
        if done.returncode != 0:
            show(done)
            raise DemoFailure("coordinatorctl status failed")
        run_status: dict[str, Any] = json.loads(done.stdout)["run"]
        return run_status

    def follow(self, token: Path, run_id: str) -> dict[str, Any]:
        banner(f"coordinatorctl status --run {run_id} (until it finishes)")
        with progress_display() as update:
            while True:
                current = self.status(token, run_id)
                update(current)
                if current["status"] in SETTLED or current["status"] == "attention":
                    return current
                self.remaining()
                time.sleep(0.5)

    def inspect(self, token: Path, run_id: str) -> None:
        self.step(
            f"coordinatorctl inspect --run {run_id}",
            "--url", self.origin, "--token-file", str(token), "inspect", "--run", run_id,
        )  # fmt: skip
        assert self.sandbox is not None
        found = self.sandbox.messages()
        print(f"sandbox Messaging received {len(found)} message(s)")
        if len(found) != 1:
            raise DemoFailure("Messaging did not receive exactly one message")


@contextmanager
def progress_display() -> Iterator[Callable[[dict[str, Any]], None]]:
    """A live line on a terminal (rich), one plain line per change otherwise."""
    started = time.monotonic()

    def describe(run_status: dict[str, Any]) -> str:
        parts = [f"{time.monotonic() - started:5.1f}s", run_status["status"], run_status["step"]]
        if run_status.get("nextDueAt"):
            parts.append(f"next due {run_status['nextDueAt']}")
        if run_status.get("outcome"):
            parts.append(f"outcome {run_status['outcome']}")
        return "  ".join(parts)

    if sys.stdout.isatty():
        from rich.console import Console
        from rich.live import Live as RichLive
        from rich.text import Text

        with RichLive(Text("waiting…"), console=Console(), refresh_per_second=8) as live:
            yield lambda run_status: live.update(Text(describe(run_status), style="bold"))
        return
    last: list[tuple[str, str]] = []

    def plain(run_status: dict[str, Any]) -> None:
        key = (run_status["status"], run_status["step"])
        if not last or last[-1] != key:
            last.append(key)
            print(describe(run_status), flush=True)

    yield plain


def live(timeout: float) -> int:
    with tempfile.TemporaryDirectory(prefix="coordinator-demo-") as scratch:
        demo = Live(Path(scratch), timeout)
        try:
            demo.prepare()
            application = demo.configure()
            demo.deploy()
            token, run_id = demo.start_run(application)
            final = demo.follow(token, run_id)
            demo.inspect(token, run_id)
            if final["status"] != "finished":
                raise DemoFailure(f"the run ended {final['status']}, not finished")
        except (
            DemoFailure,
            KitFailure,
            subprocess.TimeoutExpired,
            OSError,
            ValueError,
            KeyError,
        ) as error:
            banner("live demo failed")
            print(f"{type(error).__name__}: {error}")
            for name in demo.processes.names.values():
                tail = demo.processes.log(name).splitlines()[-15:]
                print(f"--- {name} (last lines)\n" + "\n".join(tail))
            demo.processes.stop_all()
            return 1
        except BaseException:
            demo.processes.stop_all()
            raise
        banner("stop the coordinator and the sandbox (SIGTERM)")
        codes = demo.processes.stop_all()
        print("coordinator log (JSON lines on stderr):")
        for line in demo.processes.log("coordinator").splitlines():
            if line.startswith("{"):
                print("  " + line)
        for name, code in codes:
            print(f"{name} exited {code}")
            if code != 0:
                return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offline", action="store_true", help="run only the offline part")
    parser.add_argument("--timeout", type=float, default=60.0, help="live part bound (seconds)")
    options = parser.parse_args(argv)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    with tempfile.TemporaryDirectory() as scratch:
        failures = offline(Path(scratch))
    banner("offline summary")
    print(
        "all examples checked, explained and packaged" if not failures else f"{failures} failures"
    )
    if failures:
        return 1
    if options.offline:
        return 0
    result = live(options.timeout)
    banner("summary")
    print("live run finished exactly once" if result == 0 else "live demo failed")
    return result


if __name__ == "__main__":
    raise SystemExit(main())
