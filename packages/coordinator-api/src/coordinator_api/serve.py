"""`coordinator`: the service process (contract 09 §5).

    coordinator serve  --runtime-config FILE [--recovery-only] [--poll-ms N]
    coordinator worker --runtime-config FILE [--poll-ms N]

Start sequence (`worker` skips the HTTP parts), each step refusing with its exit class:

1. Load and validate the runtime file with environment substitution.
2. Load and verify the pinned package; validate its workflow's bindings (exit 1).
3. Resolve secrets; open the audit journal; connect to the store (exit 3).
4. Deployment check (07 §15); in normal mode also the live-binding check (exit 1).
5. Obtain the caller JWKS (exit 3); build the service and its adapters.
6. Bind the listener (`listener-unavailable`, exit 3); serve; start the worker loops unless
   `--recovery-only`.
7. Every 30 s re-run the deployment check; a failure stops the process after the in-flight
   tick (exit 1, or 3 when the store cannot be reached). A worker loop that fails stops the
   process with `coordinator.command.worker-unavailable` (exit 3).

SIGTERM or SIGINT stops accepting connections and claims, lets in-flight requests and ticks
finish (bounded by the lease), and exits 0. The service never migrates the store.

Logs are JSON lines on stderr with `time`, `level`, `code` and `message` only (serve_log).
Lifecycle events use the codes `coordinator.service.starting`, `…ready`, `…stopping` and
`…stopped`; refusals use their catalogue code and fixed sentence.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final, NoReturn, Protocol

from coordinator_api.serve_log import ServiceLog, install
from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.worker import Wakeup

__all__ = ["EXIT_OK", "EXIT_REFUSED", "EXIT_UNAVAILABLE", "EXIT_USAGE", "main"]

EXIT_OK: Final = 0
EXIT_REFUSED: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNAVAILABLE: Final = 3

RECHECK_SECONDS: Final = 30.0
GRACE_SECONDS: Final = 15  # the lease (07 §16): in-flight requests and ticks finish within it
MIN_POLL_MS: Final = 10
MAX_POLL_MS: Final = 10_000

MAX_FAILED_TICKS: Final = 3

_USAGE: Final = "coordinator.cli.usage"
_STORE_UNAVAILABLE: Final = "coordinator.command.store-unavailable"
_WORKER_UNAVAILABLE: Final = "coordinator.command.worker-unavailable"


class Worker(Protocol):
    """What `coordinator_api.runtime.build_service`'s factory returns (one loop per thread)."""

    wakeup: Wakeup

    def tick(self) -> bool: ...


# -- the command line ---------------------------------------------------------------------------


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError  # argparse's message quotes the argument: never echoed


def _poll(text: str) -> int:
    if not text.isdigit() or not MIN_POLL_MS <= int(text) <= MAX_POLL_MS:
        raise argparse.ArgumentTypeError("out of range")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="coordinator", description="The Registry Coordinator service.")
    commands = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    serve = commands.add_parser("serve", help="serve the API and run the worker loops")
    serve.add_argument("--runtime-config", required=True, metavar="FILE")
    serve.add_argument("--recovery-only", action="store_true", help="admit nothing, run no worker")
    serve.add_argument("--poll-ms", type=_poll, metavar="N", help="10-10000")
    worker = commands.add_parser("worker", help="run worker loops without HTTP (PostgreSQL)")
    worker.add_argument("--runtime-config", required=True, metavar="FILE")
    worker.add_argument("--poll-ms", type=_poll, metavar="N", help="10-10000")
    return parser


# -- refusals -----------------------------------------------------------------------------------


class _Refused(Exception):
    """A start step refused: every diagnostic is logged, the process exits with `exit_code`."""

    def __init__(self, diagnostics: Sequence[Diagnostic], exit_code: int) -> None:
        super().__init__()
        self.diagnostics = tuple(diagnostics)
        self.exit_code = exit_code


def _refusal(code: str, message: str | None = None) -> _Refused:
    diagnostic = Diagnostic(code, message=message)
    return _Refused([diagnostic], diagnostic.exit_code or EXIT_REFUSED)


@contextlib.contextmanager
def _step(default_code: str | None = None) -> Iterator[None]:
    """Turn a core refusal raised by one start step into `_Refused` with its exit class."""
    from coordinator_core.deployment import DeploymentRefused

    try:
        yield
    except DeploymentRefused as refused:
        raise _Refused(refused.diagnostics, refused.exit_code or EXIT_REFUSED) from None
    except CoordinatorError as error:
        raise _Refused([error.diagnostic], error.diagnostic.exit_code or EXIT_REFUSED) from None
    except OSError:
        if default_code is None:
            raise
        raise _refusal(default_code) from None


# -- shutdown -----------------------------------------------------------------------------------


@dataclass
class _Shutdown:
    """One stop for the whole process: signals, a failed re-check, a failed worker loop."""

    log: ServiceLog
    stop: threading.Event = field(default_factory=threading.Event)
    exit_code: int = EXIT_OK
    on_stop: list[Callable[[], None]] = field(default_factory=list)
    # Re-entrant: a signal handler may interrupt the main thread inside `request`.
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def request(self, exit_code: int = EXIT_OK) -> None:
        with self._lock:
            first = not self.stop.is_set()
            self.exit_code = max(self.exit_code, exit_code)
            self.stop.set()
        if first:
            self.log.emit(
                "info", "coordinator.service.stopping", "Stopping: no new claims or connections."
            )
        for callback in list(self.on_stop):
            callback()

    def handle_signal(self, _signum: int, _frame: FrameType | None) -> None:
        self.request(EXIT_OK)


# -- the start sequence -------------------------------------------------------------------------


def _log_refusal(log: ServiceLog, refused: _Refused) -> None:
    for diagnostic in refused.diagnostics:
        if diagnostic.effective_severity == "error":
            log.emit("error", diagnostic.code, diagnostic.effective_message)
        else:
            log.emit("warning", diagnostic.code, diagnostic.effective_message)


def main(argv: Sequence[str] | None = None) -> int:
    log = ServiceLog()
    install(log)
    try:
        options = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except _UsageError:
        log.emit("error", _USAGE, "The command line could not be parsed.")
        return EXIT_USAGE
    if options.command is None:
        log.emit("error", _USAGE, "The command line could not be parsed.")
        return EXIT_USAGE
    with contextlib.ExitStack() as started:
        try:
            return _run(options, log, started)
        except _Refused as refused:
            _log_refusal(log, refused)
            return refused.exit_code


def _run(options: argparse.Namespace, log: ServiceLog, started: contextlib.ExitStack) -> int:
    from coordinator_api import serve_settings
    from coordinator_core.audit import AuditWriter
    from coordinator_core.definition.package import load_package
    from coordinator_core.deployment import SqliteDatabase, load_deployment, resolve_secrets
    from coordinator_core.store import Store

    serving = options.command == "serve"
    recovery_only = bool(getattr(options, "recovery_only", False))
    environment = dict(os.environ)
    log.emit("info", "coordinator.service.starting", "Starting: loading the runtime file.")
    # A signal during the start sequence ends it cleanly before anything is served or claimed.
    shutdown = _Shutdown(log)
    _install_signals(shutdown)

    # 1. The runtime file, substituted from the environment.
    with _step():
        deployment = load_deployment(options.runtime_config, environment=environment)
    settings = deployment.deployment
    assert settings is not None
    for warning in deployment.warnings:
        log.emit("warning", warning.code, warning.effective_message)
    if not serving and isinstance(deployment.database, SqliteDatabase):
        raise _refusal("coordinator.command.store-single-process")

    # 2. The pinned package and its bindings.
    with _step():
        package = load_package(Path(settings.package.root), settings.package.expected_digest)
        serve_settings.check_package_bindings(deployment, package, environment)

    # 3. Secrets, the audit journal, the store.
    with _step():
        secrets = resolve_secrets(deployment, environment=environment, database_role="runtime")
    with _step("coordinator.command.audit-unavailable"):
        writer = AuditWriter.open(settings.audit_directory, "serve" if serving else "worker")
    started.callback(writer.close)
    url = started.enter_context(serve_settings.store_url(deployment, secrets))
    concurrency = 0 if recovery_only else settings.worker.concurrency
    # 4. The deployment check (Store.open verifies), then the live-binding check.
    with _step("coordinator.command.store-unavailable"):
        store = Store.open(
            url,
            serve_settings.identity(settings, secrets),
            namespace=serve_settings.namespace_of(deployment),
            exclusive=serving,
            pool_size=concurrency + (8 if serving else 2),
        )
    started.callback(store.close)
    if not recovery_only:
        with _step("coordinator.command.store-unavailable"):
            bindings_ok = serve_settings.live_bindings_ok(deployment, secrets, store, package)
        if not bindings_ok:
            raise _refusal("coordinator.command.live-binding-conflict")

    # 5. The caller JWKS, then the service and its adapters.
    if serving:
        _check_jwks(serve_settings.authentication_settings(deployment, secrets))
    from coordinator_api.runtime import build_service

    with _step():
        service, worker_factory = build_service(deployment, secrets, store, package, audit=writer)

    if shutdown.stop.is_set():
        log.emit("info", "coordinator.service.stopped", "Stopped before serving.")
        return EXIT_OK
    poll_ms = options.poll_ms or settings.worker.poll_milliseconds
    recheck = threading.Thread(
        target=_recheck_loop, args=(store, shutdown, log), name="deployment-recheck", daemon=True
    )
    if not serving:
        return _run_workers(worker_factory, concurrency, poll_ms, shutdown, log, recheck)

    # 6. The listener, the app, the worker loops.
    from coordinator_api.app import create_app
    from coordinator_api.serve_journal import WriterJournal

    listener = settings.listener
    sock = _bind(listener.host, listener.port)
    started.callback(sock.close)
    app = create_app(
        serve_settings.api_settings(deployment, secrets, package, recovery_only=recovery_only),
        service=service,
        journal=WriterJournal(
            writer, secrets.audit_references, secrets.admission_key, settings.database_id
        ),
    )
    return _serve(app, sock, worker_factory, concurrency, poll_ms, shutdown, log, recheck)


def _check_jwks(authentication: Any) -> None:
    """Step 5: the caller key set must be obtainable before the listener opens."""
    from coordinator_api.access import AccessVerifier

    verifier = AccessVerifier(authentication, clock=time.time)
    try:
        asyncio.run(verifier.start())
    except Exception:
        raise _refusal("coordinator.access.unavailable") from None


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise _refusal("coordinator.command.listener-unavailable") from None
    return sock


def _recheck_loop(store: Any, shutdown: _Shutdown, log: ServiceLog) -> None:
    """07 §15: the deployment check every 30 s; a failure stops the process."""
    while not shutdown.stop.wait(RECHECK_SECONDS):
        try:
            store.verify()
        except CoordinatorError as error:
            log.emit("error", error.diagnostic.code, error.diagnostic.effective_message)
            shutdown.request(error.diagnostic.exit_code or EXIT_REFUSED)
            return
        except Exception:
            log.emit(
                "error", "coordinator.deployment.refused", "The periodic deployment check failed."
            )
            shutdown.request(EXIT_REFUSED)
            return


def _worker_loop(worker: Worker, poll_ms: int, shutdown: _Shutdown, log: ServiceLog) -> None:
    """07 §7.1 with 09 §5 step 7: tick; when idle wait `poll_ms` or until this process admits
    or re-arms a run (the service rings the worker's wake-up); stop claiming once the
    process is stopping (the in-flight tick finishes first). Three consecutive ticks that
    cannot reach the store stop the process (`worker-unavailable`, exit 3); any other failed
    tick is logged by code and the loop goes on (its record is left to its lease)."""
    pause = poll_ms / 1000
    failures = 0
    shutdown.on_stop.append(worker.wakeup.ring)
    while not shutdown.stop.is_set():
        seen = worker.wakeup.generation
        try:
            worked = worker.tick()
            failures = 0
        except CoordinatorError as error:
            worked = False
            if error.diagnostic.code == _STORE_UNAVAILABLE:
                failures += 1
                if failures >= MAX_FAILED_TICKS:
                    log.emit("error", _WORKER_UNAVAILABLE, "A worker loop cannot reach the store.")
                    shutdown.request(EXIT_UNAVAILABLE)
                    return
            log.emit("warning", error.diagnostic.code, error.diagnostic.effective_message)
        except Exception:
            worked = False
            log.emit("error", _WORKER_UNAVAILABLE, "A worker tick failed unexpectedly.")
        if not worked and not shutdown.stop.is_set():
            worker.wakeup.wait(seen, pause)  # an admission in this process ends the wait


def _start_workers(
    factory: Callable[[str], Worker],
    concurrency: int,
    poll_ms: int,
    shutdown: _Shutdown,
    log: ServiceLog,
) -> list[threading.Thread]:
    threads: list[threading.Thread] = []
    for index in range(concurrency):
        worker = factory(f"{socket.gethostname()}:{os.getpid()}:{index + 1}")
        thread = threading.Thread(
            target=_worker_loop, args=(worker, poll_ms, shutdown, log), name=f"worker-{index + 1}"
        )
        thread.start()
        threads.append(thread)
    return threads


def _join(threads: Sequence[threading.Thread]) -> None:
    deadline = time.monotonic() + GRACE_SECONDS
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def _install_signals(shutdown: _Shutdown) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, shutdown.handle_signal)


def _run_workers(
    factory: Callable[[str], Worker],
    concurrency: int,
    poll_ms: int,
    shutdown: _Shutdown,
    log: ServiceLog,
    recheck: threading.Thread,
) -> int:
    threads = _start_workers(factory, concurrency, poll_ms, shutdown, log)
    recheck.start()
    log.emit("info", "coordinator.service.ready", "Worker loops running.")
    while not shutdown.stop.wait(0.5):
        pass
    _join(threads)
    log.emit("info", "coordinator.service.stopped", "Stopped.")
    return shutdown.exit_code


def _serve(
    app: Any,
    sock: socket.socket,
    factory: Callable[[str], Worker],
    concurrency: int,
    poll_ms: int,
    shutdown: _Shutdown,
    log: ServiceLog,
    recheck: threading.Thread,
) -> int:
    import uvicorn

    config = uvicorn.Config(
        app,
        lifespan="on",
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=GRACE_SECONDS,
    )

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn re-raises a captured signal after shutdown (the process would then die of
            # it); the service exits 0 instead, after its workers have finished.
            _install_signals(shutdown)
            yield

    server = _Server(config)

    def stop_server() -> None:
        server.should_exit = True

    shutdown.on_stop.append(stop_server)
    threads = _start_workers(factory, concurrency, poll_ms, shutdown, log)
    recheck.start()

    async def serve() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started:
            log.emit("info", "coordinator.service.ready", "Serving the API.")
        await task

    asyncio.run(serve())
    if not server.started and not shutdown.stop.is_set():
        log.emit("error", "coordinator.access.unavailable", "The service could not start serving.")
        shutdown.request(EXIT_UNAVAILABLE)
    shutdown.request(shutdown.exit_code)
    _join(threads)
    log.emit("info", "coordinator.service.stopped", "Stopped.")
    return shutdown.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
