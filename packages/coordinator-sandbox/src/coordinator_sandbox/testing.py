"""The test kit: what the test suites, the demo and the benchmarks share to run the product
against the stand-in products, in one place.

* `Processes`: the processes a test or a script started, each writing its stdout and stderr into
  `<name>.log`, stopped together (SIGTERM, then SIGKILL) whatever happens;
* the sandbox: `write_keys` (`coordinator-sandbox keys`), `Sandbox.start` (`coordinator-sandbox
  serve --ports 0`, answering once its readiness line is printed) and the control routes a test
  drives (file 08 §11);
* caller tokens: `caller_token` (`coordinator-sandbox caller-token`) and `write_token`, the file
  `--token-file` reads;
* the runtime file: `point_at_sandbox` (the origins `coordinatorctl init` and the examples write,
  at the running sandbox), `postgresql_database` (the store on PostgreSQL) and
  `deployment_block` (package pin, listener, caller authentication against the sandbox's issuer,
  keys, audit directory, worker);
* PostgreSQL: `database_url` and `ScratchPostgres`, the databases and login roles of one run;
* `free_port` and `wait_for`.

Every command runs as a process of its own, as a user runs it. The product never imports this
module (ARCHITECTURE.md). PostgreSQL's driver is imported by `ScratchPostgres` alone, from the
environment it runs in (`coordinator-sandbox[testing]` names it).
"""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from coordinator_sandbox.defaults import DEFAULT_PORTS
from coordinator_sandbox.server import READY_PREFIX

__all__ = [
    "OPERATOR_ACTIONS",
    "PYTHON",
    "KitFailure",
    "Policy",
    "Processes",
    "Sandbox",
    "ScratchPostgres",
    "caller_token",
    "database_url",
    "deployment_block",
    "endpoints_in",
    "free_port",
    "point_at_sandbox",
    "postgresql_database",
    "service_of",
    "wait_for",
    "write_keys",
    "write_token",
]

PYTHON = sys.executable
READY_TIMEOUT = 60.0
COMMAND_TIMEOUT = 60.0
T = TypeVar("T")


class KitFailure(AssertionError):
    """A step of the set-up failed: a process exited, a command failed or a wait ran out. An
    AssertionError, so that a test reports it as its failure; a script catches it by name."""


# -- processes ------------------------------------------------------------------------------------

# Below Linux's ephemeral range (32768–60999 by default): a port handed out here is never the
# one the kernel gives a later `bind(0)` (the sandbox's `--ports 0`, a client's socket), which
# could take it between this probe and the listener's own bind.
_LISTENER_PORTS: Final = range(20_000, 32_000)


def free_port() -> int:
    """A loopback port free now, outside the ephemeral range (for a listener bound later)."""
    for port in random.sample(_LISTENER_PORTS, 64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise KitFailure("no free loopback port below the ephemeral range")


def wait_for(
    predicate: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1
) -> T:
    """The first true value `predicate` answers, polled every `interval` seconds; `KitFailure`
    after `timeout` seconds. The predicate may raise to give up at once."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise KitFailure(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Processes:
    """Every process a test or a script started, with their logs in `directory`: each writes its
    stdout and stderr, unbuffered, into `<name>.log`. `stop_all` ends them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[subprocess.Popen[bytes]] = []
        self.names: dict[int, str] = {}  # pid → the name its log has

    def start(
        self,
        name: str,
        arguments: Sequence[str],
        env: Mapping[str, str] | None = None,
        python: str = PYTHON,
    ) -> subprocess.Popen[bytes]:
        """`python ARGUMENTS` in a session of its own (`env`, or this process's environment)."""
        environment = dict(os.environ if env is None else env)
        environment["PYTHONUNBUFFERED"] = "1"  # whole lines in the log, in the order written
        with (self.directory / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                [python, *arguments],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=environment,
                start_new_session=True,
            )
        self.started.append(process)
        self.names[process.pid] = name
        return process

    def log(self, name: str, tail: int | None = None) -> str:
        """What the process `name` wrote (its last `tail` characters)."""
        path = self.directory / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return text if tail is None else text[-tail:]

    def log_size(self, name: str) -> int:
        path = self.directory / f"{name}.log"
        return path.stat().st_size if path.exists() else 0

    def log_since(self, name: str, offset: int) -> str:
        """What the log of `name` gained after it was `offset` bytes long."""
        path = self.directory / f"{name}.log"
        if not path.exists():
            return ""
        with path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def stop(
        self,
        process: subprocess.Popen[bytes],
        signum: signal.Signals = signal.SIGTERM,
        timeout: float = 20.0,
    ) -> int:
        """`signum` to one process, SIGKILL if it has not exited after `timeout`; its code."""
        if process.poll() is None:
            process.send_signal(signum)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        return process.returncode

    def stop_all(
        self, processes: Iterable[subprocess.Popen[bytes]] | None = None, grace: float = 15.0
    ) -> list[tuple[str, int]]:
        """SIGTERM to `processes` (every one started, by default), newest first, SIGKILL to what
        has not exited after `grace` seconds; each one's name and exit code."""
        chosen = list(self.started if processes is None else processes)
        for process in reversed(chosen):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        codes: list[tuple[str, int]] = []
        for process in reversed(chosen):
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
            codes.append((self.names.get(process.pid, str(process.args)), process.returncode))
        self.started = [process for process in self.started if process not in chosen]
        return codes


def _sandbox_command(*arguments: str) -> str:
    """`coordinator-sandbox ARGUMENTS` as a process of its own; its stdout."""
    done = subprocess.run(
        [PYTHON, "-m", "coordinator_sandbox", *arguments],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise KitFailure(
            f"coordinator-sandbox {arguments[0]} exited {done.returncode}: {done.stderr}"
        )
    return done.stdout


# -- the sandbox ----------------------------------------------------------------------------------


def write_keys(secrets_dir: Path, state_dir: Path | None = None) -> None:
    """`coordinator-sandbox keys`: the clients' signing keys, the caller JWKS and the other
    development secrets into `secrets_dir` (0700, files 0600), the public halves and the
    issuer's keys into `state_dir` (default `<secrets_dir>/../sandbox`)."""
    arguments = ["keys", "--secrets-dir", str(secrets_dir)]
    if state_dir is not None:
        arguments += ["--state-dir", str(state_dir)]
    _sandbox_command(*arguments)


def endpoints_in(text: str) -> dict[str, str] | None:
    """The endpoints announced by a readiness line anywhere in `text`, if one was printed."""
    for line in text.splitlines():
        if line.startswith(READY_PREFIX):
            found: dict[str, str] = json.loads(line[len(READY_PREFIX) :])
            return found
    return None


# The sandbox service that serves the operations of a product of another name.
_SERVICE_OF_PRODUCT: Final = {"external-http": "external"}


def service_of(operation: str) -> str:
    """The sandbox service that serves `operation` (`messaging.submit-message/v1` → messaging)."""
    product = operation.split(".", 1)[0]
    return _SERVICE_OF_PRODUCT.get(product, product)


@dataclass
class Sandbox:
    """A running `coordinator-sandbox serve` on ephemeral loopback ports, and its control routes
    (file 08 §11). `endpoints` is its readiness line: each service's origin, `issuer`,
    `tokenEndpoint` and `jwksUri`."""

    process: subprocess.Popen[bytes]
    endpoints: dict[str, str]
    state_dir: Path
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10, trust_env=False))

    @classmethod
    def start(
        cls,
        processes: Processes,
        state_dir: Path,
        *,
        services: Sequence[str] = (),
        coordinator_url: str | None = None,
        seed: Mapping[str, Any] | None = None,
        name: str = "sandbox",
        timeout: float = READY_TIMEOUT,
    ) -> Self:
        """`coordinator-sandbox serve --ports 0 --state-dir STATE_DIR`, started in `processes`
        as `name`: the `services` given (every one by default), BReg's events and Casework's
        completions sent to `coordinator_url`, `seed` as its `sandbox.json`. Answers once the
        sandbox printed its readiness line; `KitFailure` if it exits or `timeout` runs out."""
        if isinstance(services, str):
            raise TypeError("services is a sequence of service names, not one string")
        if seed is not None:
            state_dir.mkdir(parents=True, exist_ok=True)
            (state_dir / "sandbox.json").write_text(json.dumps(seed))
        arguments = ["-m", "coordinator_sandbox", "serve", "--ports", "0"]
        arguments += ["--state-dir", str(state_dir)]
        if services:
            arguments += ["--services", ",".join(services)]
        if coordinator_url is not None:
            arguments += ["--coordinator-url", coordinator_url]
        offset = processes.log_size(name)  # a sandbox of the same name may have run before
        process = processes.start(name, arguments)

        def ready() -> dict[str, str] | None:
            if process.poll() is not None:
                log = processes.log_since(name, offset)
                raise KitFailure(f"the sandbox exited {process.returncode}: {log}")
            return endpoints_in(processes.log_since(name, offset))

        return cls(process, wait_for(ready, timeout, "the sandbox"), state_dir)

    def url(self, service: str, path: str = "") -> str:
        return self.endpoints[service] + path

    def requests(self, service: str, **query: str) -> list[dict[str, Any]]:
        """The requests `service` recorded, those matching `query` (`operation`,
        `idempotencyKey`, …)."""
        answer = self.http.get(self.url(service, "/sandbox/requests"), params=query)
        answer.raise_for_status()
        body = answer.json()
        return list(body["requests"] if isinstance(body, dict) else body)

    def received(self, operation: str, **query: str) -> list[dict[str, Any]]:
        """The requests of `operation` (`messaging.submit-message/v1`, …) its service recorded."""
        return self.requests(service_of(operation), operation=operation, **query)

    def inject(self, service: str, **fault: Any) -> None:
        """A fault of `service`'s (`operation`, `kind` and the kind's members)."""
        answer = self.http.post(self.url(service, "/sandbox/faults"), json=fault)
        if answer.status_code != 201:
            raise KitFailure(f"the sandbox refused the fault: {answer.status_code} {answer.text}")

    def fault(self, operation: str, **fault: Any) -> None:
        """A fault of `operation`'s, at the service that serves it."""
        self.inject(service_of(operation), operation=operation, **fault)

    def clear_faults(self, service: str) -> None:
        self.http.delete(self.url(service, "/sandbox/faults")).raise_for_status()

    def messages(self) -> list[dict[str, Any]]:
        """The messages Messaging accepted."""
        answer = self.http.get(self.url("messaging", "/sandbox/messages"))
        answer.raise_for_status()
        body = answer.json()
        return list(body["messages"] if isinstance(body, dict) else body)

    def seed_record(self, collection: str, record_id: str, domain_data: Mapping[str, Any]) -> None:
        """BReg's record `record_id` of `collection`, holding `domain_data`."""
        answer = self.http.put(
            self.url("breg", f"/sandbox/records/{collection}/{record_id}"),
            json={"domainData": domain_data},
        )
        answer.raise_for_status()

    def seed_application(
        self,
        application_id: str,
        *,
        follow_up: bool = True,
        contact: str = "applicant@example.org",
        name: str = "A. Applicant",
    ) -> None:
        """BReg's `applications` record `application_id`, as the follow-up examples read it."""
        domain_data = {"followUpAllowed": follow_up, "contactEmail": contact, "applicantName": name}
        self.seed_record("applications", application_id, domain_data)

    def close(self) -> None:
        self.http.close()


# -- caller tokens --------------------------------------------------------------------------------


def caller_token(
    state_dir: Path,
    *,
    subject: str | None = None,
    client_id: str | None = None,
    scopes: Sequence[str] = (),
    expires_in: int = 3600,
) -> str:
    """`coordinator-sandbox caller-token`: a caller token signed by the issuer of `state_dir`,
    the operator's (`ops-console`, `coordinator:operate`) unless a subject, client or scopes are
    given."""
    arguments = ["caller-token", "--state-dir", str(state_dir), "--expires-in", str(expires_in)]
    if subject is not None:
        arguments += ["--subject", subject]
    if client_id is not None:
        arguments += ["--client-id", client_id]
    for scope in scopes:
        arguments += ["--scope", scope]
    return _sandbox_command(*arguments).strip()


def write_token(path: Path, token: str) -> Path:
    """`token` in the file `path` (0600, created so), as `--token-file` reads it."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as stream:
        stream.write(token + "\n")
    return path


# -- the runtime file -----------------------------------------------------------------------------


def point_at_sandbox(text: str, endpoints: Mapping[str, str]) -> str:
    """A runtime file's `text` with the sandbox's default loopback origins (what `coordinatorctl
    init` and the examples write: `http://127.0.0.1:8100/oauth/token`, `…:8101`, …) replaced by
    the running sandbox's `endpoints`, for the services it serves."""
    if "tokenEndpoint" in endpoints:
        default = f"http://127.0.0.1:{DEFAULT_PORTS['identity']}/oauth/token"
        text = text.replace(default, endpoints["tokenEndpoint"])
    for service, port in DEFAULT_PORTS.items():
        if service in endpoints:
            text = text.replace(f"http://127.0.0.1:{port}", endpoints[service])
    return text


def postgresql_database(
    text: str, *, namespace: str, runtime_url_variable: str, migration_url_variable: str
) -> str:
    """A runtime file's `text` with its `database` section (up to the connections) replaced by a
    PostgreSQL store whose runtime and migration URLs are the environment secrets named, and
    with the `environment` secret provider that reads them."""
    start = text.index("database:\n")
    end = min(
        text.index(section)
        for section in ("connections:\n", "externalHttpConnections:\n")
        if section in text
    )
    database = (
        "database:\n  postgresql:\n"
        f"    runtimeUrlRef: secret:env/{runtime_url_variable}\n"
        f"    migrationUrlRef: secret:env/{migration_url_variable}\n"
        f"    namespace: {namespace}\n"
    )
    text = text[:start] + database + text[end:]
    return text.replace("secretProviders:\n", "secretProviders:\n  environment: {}\n", 1)


# Every action of the API's caller policy (file 06 §2): the operator of a test deployment has all.
OPERATOR_ACTIONS: Final = (
    "start", "status", "inspect", "cancel", "retry-same", "reconcile", "doctor", "restore-hold",
    "release-restore-hold", "release-admission-hold", "retain",
)  # fmt: skip


@dataclass(frozen=True)
class Policy:
    """One caller policy of the deployment block: the operator's (`ops-console`,
    `coordinator:operate`, every action) unless told otherwise."""

    workflows: Sequence[str]
    client_id: str = "ops-console"
    required_scopes: Sequence[str] = ("coordinator:operate",)
    actions: Sequence[str] = OPERATOR_ACTIONS
    operator: bool = True

    def render(self) -> str:
        return (
            f"      - clientId: {self.client_id}\n"
            f"        requiredScopes: [{', '.join(self.required_scopes)}]\n"
            f"        workflows: [{', '.join(self.workflows)}]\n"
            f"        actions: [{', '.join(self.actions)}]\n"
            + ("        operator: true\n" if self.operator else "")
        )


def deployment_block(
    *,
    database_id: str,
    package: Path,
    digest: str,
    port: int,
    issuer: str,
    policies: Sequence[Policy],
    audit_directory: Path,
    runtime_role: str | None = None,
    poll_ms: int | None = None,
    concurrency: int | None = None,
) -> str:
    """The runtime file's `deployment` section (file 05): the package at `package` pinned to
    `digest`, a development listener on loopback `port`, callers authenticated against `issuer`
    with the sandbox's caller JWKS (`secret:file/caller-jwks.json`) under `policies`, the
    audit, state and admission keys `coordinatorctl init` writes, the audit directory, and the
    worker's poll and concurrency when given."""
    clients = ", ".join(dict.fromkeys(policy.client_id for policy in policies))
    block = (
        "deployment:\n"
        f"  databaseId: {database_id}\n"
        + (f"  runtimeRole: {runtime_role}\n" if runtime_role is not None else "")
        + "  package:\n"
        f"    root: {json.dumps(str(package))}\n"
        f'    expectedDigest: "{digest}"\n'
        "  listener:\n"
        f"    bind: 127.0.0.1:{port}\n"
        "    tlsTermination: development-loopback\n"
        "  authentication:\n"
        f"    issuer: {issuer}\n"
        "    audience: coordinator\n"
        "    jwksSource:\n"
        "      type: static\n"
        "      documentRef: secret:file/caller-jwks.json\n"
        f"    allowedClients: [{clients}]\n"
        "    policies:\n"
        + "".join(policy.render() for policy in policies)
        + f"  auditDirectory: {json.dumps(str(audit_directory))}\n"
        "  auditKeyRef: secret:file/audit.key\n"
        "  activeStateKey: 1\n"
        "  stateKeys:\n"
        '    "1":\n'
        "      keyRef: secret:file/state-1.key\n"
        "  admissionKeyRef: secret:file/admission.key\n"
    )
    if poll_ms is not None or concurrency is not None:
        block += "  worker:\n"
        block += f"    pollMilliseconds: {poll_ms}\n" if poll_ms is not None else ""
        block += f"    concurrency: {concurrency}\n" if concurrency is not None else ""
    return block


# -- PostgreSQL -----------------------------------------------------------------------------------


def database_url(url: str, database: str, user: str | None = None) -> str:
    """`url` naming another database (and, with `user`, logging in as that user)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        netloc = user + "@" + netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, "/" + database, parts.query, parts.fragment))


class ScratchPostgres:
    """The databases and login roles of one run on the PostgreSQL server `admin_url` names,
    `<prefix>_…` each, dropped by `drop` (or at the end of the `with` block): the databases
    first (`WITH (FORCE)`: their sessions are ended), then the roles, which then own nothing."""

    def __init__(self, admin_url: str, prefix: str) -> None:
        self.admin_url = admin_url
        self.prefix = prefix
        self.databases: list[str] = []
        self.roles: list[str] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.drop()

    def _execute(self, *statements: tuple[str, str]) -> None:
        """Each `(statement, name)`: the statement with the name quoted in place of `{}`."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as admin:
            for statement, name in statements:
                admin.execute(sql.SQL(statement).format(sql.Identifier(name)))

    def database(self, label: str = "") -> str:
        """A new database (`<prefix>_<label>_<random>`); its URL, as the admin's user."""
        name = "_".join(filter(None, (self.prefix, label, secrets.token_hex(5))))
        self._execute(("CREATE DATABASE {}", name))
        self.databases.append(name)
        return database_url(self.admin_url, name)

    def role(self) -> str:
        """A new login role (`<prefix>_rt_<random>`, no password: the test servers trust
        loopback); its name."""
        name = f"{self.prefix}_rt_{secrets.token_hex(5)}"
        self._execute(("CREATE ROLE {} LOGIN", name))
        self.roles.append(name)
        return name

    def drop(self) -> None:
        statements = [("DROP DATABASE IF EXISTS {} WITH (FORCE)", name) for name in self.databases]
        statements += [("DROP ROLE IF EXISTS {}", name) for name in self.roles]
        if statements:
            self._execute(*statements)
        self.databases.clear()
        self.roles.clear()
