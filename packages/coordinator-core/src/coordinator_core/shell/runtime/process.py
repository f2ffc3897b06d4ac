"""The start sequence and the loops of a service process (contract 09 §5), shared by
`coordinator serve` (coordinator-api adds the caller key set, the listener and the HTTP app)
and `coordinator worker`, which needs only coordinator-core:

    python -m coordinator_core.shell.runtime.process worker --runtime-config FILE [--poll-ms N]

is the same command as `coordinator worker`; neither imports an HTTP server framework.

Start sequence (`worker` skips the HTTP parts), each step refusing with its exit class:

1. Load and validate the runtime file with environment substitution (read once per process).
2. Load and verify the pinned package; validate its workflow's bindings (exit 1).
3. Resolve secrets; open the audit journal; connect to the store (exit 3).
4. Deployment check (07 §15); build the run service; in normal mode also the live-binding
   check, the service's own (exit 1).
5. (`serve`) Obtain the caller JWKS (exit 3).
6. (`serve`) Bind the listener (`listener-unavailable`, exit 3) and serve; start the worker
   loops unless `--recovery-only`.
7. Every 30 s re-run the deployment check; a definite mismatch stops the process after the
   in-flight tick (exit 1). A store that cannot be reached after start is ridden out, not
   fatal: the loops back off (`outage.Backoff`: 100 ms doubling to at most 5 s, jittered) and
   resume by themselves, a check that could not run is retried, and the process logs one line
   when the store is lost and one when it is back (`outage.StoreOutage`).

Metrics (06 §14, `shell.observe.metrics`): `serve` answers `GET /metrics` on its listener; `worker`
has no listener unless `--metrics-bind <ip>:<port>` opens one for its metrics (several worker
processes may share a host, so none is assumed); a bind that fails refuses the start
(`listener-unavailable`, exit 3). Both read the store gauges when scraped.

SIGTERM or SIGINT stops accepting connections and claims, lets in-flight requests and ticks
finish (bounded by the lease), and exits 0. The service never migrates the store.

Logs are JSON lines on stderr with `time`, `level`, `code` and `message` only (service_log).
Lifecycle events use the codes `coordinator.service.starting`, `…ready`, `…stopping` and
`…stopped`; refusals use their catalogue code and fixed sentence.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import ipaddress
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final, Protocol

from coordinator_core.config.model import (
    Deployment,
    DeploymentRefused,
    DeploymentSettings,
    SqliteDatabase,
)
from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.audit import AuditWriter
from coordinator_core.shell.audit.witness import RestoreWitness
from coordinator_core.shell.clock import wall_clock
from coordinator_core.shell.deployment import load_deployment, package_binding_problems
from coordinator_core.shell.execution.wakeup import Wakeup
from coordinator_core.shell.observe import metrics, tracing
from coordinator_core.shell.package_files import LoadedPackage, load_package
from coordinator_core.shell.restore_detection import (
    check_journal,
    journal_identity,
    set_aside_torn_tails,
)
from coordinator_core.shell.runtime import store_access
from coordinator_core.shell.runtime.argv import (
    ArgumentParser,
    HelpRequested,
    UsageMistake,
    VersionRequested,
    add_version_flag,
)
from coordinator_core.shell.runtime.outage import Backoff, StoreOutage
from coordinator_core.shell.runtime.service_log import ServiceLog, install
from coordinator_core.shell.runtime.streams import guard_output
from coordinator_core.shell.secrets import Secrets, resolve_secrets
from coordinator_core.shell.service import Runtime, StoreRunService
from coordinator_core.shell.store import Store

__all__ = [
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "GRACE_SECONDS",
    "ArgumentParser",
    "Refused",
    "Shutdown",
    "Started",
    "Subcommand",
    "add_process_arguments",
    "add_worker_command",
    "build_parser",
    "install_signals",
    "join",
    "main",
    "recheck_loop",
    "refusal",
    "run_command",
    "run_worker",
    "start",
    "start_workers",
    "worker_loop"
]  # fmt: skip

EXIT_OK: Final = 0
EXIT_REFUSED: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNAVAILABLE: Final = 3

RECHECK_SECONDS: Final = 30.0
GRACE_SECONDS: Final = 15  # the lease (07 §16): in-flight requests and ticks finish within it
MIN_POLL_MS: Final = 10
MAX_POLL_MS: Final = 10_000

_USAGE: Final = "coordinator.cli.usage"
_STORE_UNAVAILABLE: Final = "coordinator.command.store-unavailable"
_STORE_RESTORED: Final = "coordinator.deployment.store-restored"
_WORKER_UNAVAILABLE: Final = "coordinator.command.worker-unavailable"


class Ticking(Protocol):
    """What a worker loop drives: `Worker` (`Runtime.worker`), one per thread."""

    wakeup: Wakeup

    def tick(self, *, seen: int | None = None) -> bool: ...

    def rests(self, seen: int) -> bool: ...

    @property
    def holding(self) -> bool: ...

    def stop(self) -> None: ...


# -- the command line ---------------------------------------------------------------------------


def _poll(text: str) -> int:
    if not text.isdigit() or not MIN_POLL_MS <= int(text) <= MAX_POLL_MS:
        raise argparse.ArgumentTypeError("out of range")
    return int(text)


def add_process_arguments(parser: argparse.ArgumentParser, *, serving: bool = False) -> None:
    """`--runtime-config FILE`, `--recovery-only` (serve only) and `--poll-ms N`."""
    parser.add_argument(
        "--runtime-config",
        required=True,
        metavar="FILE",
        help="absolute path of the runtime file (with database and deployment)",
    )
    if serving:
        parser.add_argument(
            "--recovery-only", action="store_true", help="admit nothing, run no worker"
        )
    parser.add_argument("--poll-ms", type=_poll, metavar="N", help="10-10000")


def _metrics_bind(text: str) -> tuple[str, int]:
    """`<ip>:<port>` or `[<ipv6>]:<port>`, port 1–65535: where the worker serves `/metrics`."""
    host, colon, port = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise argparse.ArgumentTypeError("not an address") from None
    if not colon or not port.isdigit() or not 1 <= int(port) <= 65_535:
        raise argparse.ArgumentTypeError("not a port")
    if (address.version == 6) != bracketed:
        raise argparse.ArgumentTypeError("an IPv6 address is written in brackets")
    return host, int(port)


def add_worker_command(commands: Any) -> None:
    """The `worker` sub-command on an `add_subparsers` result."""
    what = "run worker loops without HTTP (PostgreSQL)"
    worker = commands.add_parser("worker", help=what, description=what)
    add_process_arguments(worker)
    worker.add_argument(
        "--metrics-bind",
        type=_metrics_bind,
        metavar="ADDR:PORT",
        help="serve GET /metrics there (default: no metrics listener)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="coordinator", description="The Registry Coordinator worker.")
    add_version_flag(parser, "coordinator-core")
    commands = parser.add_subparsers(dest="command", parser_class=ArgumentParser, metavar="COMMAND")
    add_worker_command(commands)
    return parser


# -- refusals -----------------------------------------------------------------------------------


class Refused(Exception):
    """A start step refused: every diagnostic is logged, the process exits with `exit_code`."""

    def __init__(self, diagnostics: Sequence[Diagnostic], exit_code: int) -> None:
        super().__init__()
        self.diagnostics = tuple(diagnostics)
        self.exit_code = exit_code


def refusal(code: str, message: str | None = None) -> Refused:
    diagnostic = Diagnostic(code, message=message)
    return Refused([diagnostic], diagnostic.exit_code or EXIT_REFUSED)


@contextlib.contextmanager
def _step(default_code: str | None = None) -> Iterator[None]:
    """Turn a core refusal raised by one start step into `Refused` with its exit class."""
    try:
        yield
    except DeploymentRefused as refused:
        raise Refused(refused.diagnostics, refused.exit_code or EXIT_REFUSED) from None
    except CoordinatorError as error:
        raise Refused([error.diagnostic], error.diagnostic.exit_code or EXIT_REFUSED) from None
    except OSError:
        if default_code is None:
            raise
        raise refusal(default_code) from None


def _log_refusal(log: ServiceLog, refused: Refused) -> None:
    for diagnostic in refused.diagnostics:
        if diagnostic.effective_severity == "error":
            log.emit("error", diagnostic.code, diagnostic.effective_message)
        else:
            log.emit("warning", diagnostic.code, diagnostic.effective_message)


# -- shutdown -----------------------------------------------------------------------------------


@dataclass
class Shutdown:
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


def install_signals(shutdown: Shutdown) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, shutdown.handle_signal)


# -- the command --------------------------------------------------------------------------------

Subcommand = Callable[[argparse.Namespace, ServiceLog, contextlib.ExitStack], int]


def run_command(
    parser: argparse.ArgumentParser,
    commands: Mapping[str, Subcommand],
    argv: Sequence[str] | None = None,
) -> int:
    """Parse, run the chosen command with the service log installed, exit with its class.

    A stdout or stderr that cannot be written (`--help | head -c1`, `> /dev/full`) ends it with
    `coordinator.command.output-unavailable` (exit 3) logged if stderr still takes it, never a
    traceback; the service log itself never stops the process (service_log)."""
    log = ServiceLog()
    install(log)
    return guard_output(
        lambda: _run_command(log, parser, commands, argv),
        lambda diagnostic: log.emit("error", diagnostic.code, diagnostic.effective_message),
    )


def _run_command(
    log: ServiceLog,
    parser: argparse.ArgumentParser,
    commands: Mapping[str, Subcommand],
    argv: Sequence[str] | None,
) -> int:
    try:
        options = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except HelpRequested as asked:
        return _print(asked.parser.format_help())
    except VersionRequested as asked:
        return _print(f"{asked.program} {asked.version}\n")
    except UsageMistake as mistake:
        # Names only the commands and options involved, never a value (command_line).
        log.emit("error", _USAGE, f"{mistake.message} {mistake.hint}")
        return EXIT_USAGE
    if options.command is None:
        return _print(parser.format_help())  # a bare `coordinator` is a request for help
    with contextlib.ExitStack() as started:
        try:
            return commands[options.command](options, log, started)
        except Refused as refused:
            _log_refusal(log, refused)
            return refused.exit_code


def _print(text: str) -> int:
    """Help or the version, on stdout: exit 0."""
    sys.stdout.write(text)
    sys.stdout.flush()
    return EXIT_OK


# -- the start sequence -------------------------------------------------------------------------


@dataclass
class Started:
    """What steps 1–4 produced: the checked deployment, its store and its run service."""

    deployment: Deployment
    settings: DeploymentSettings
    secrets: Secrets
    package: LoadedPackage
    writer: AuditWriter
    store: Store
    runtime: Runtime
    service: StoreRunService
    concurrency: int
    poll_ms: int
    shutdown: Shutdown
    log: ServiceLog
    outage: StoreOutage = field(init=False)

    def __post_init__(self) -> None:
        self.outage = StoreOutage(self.log)

    def recheck(self) -> threading.Thread:
        """The step 7 deployment re-check thread (not started)."""
        return threading.Thread(
            target=recheck_loop,
            args=(self.store, self.shutdown, self.log, self.outage),
            name="deployment-recheck",
            daemon=True,
        )

    def stopped_before_serving(self) -> bool:
        """A signal during the start sequence ends it cleanly before anything is claimed."""
        if not self.shutdown.stop.is_set():
            return False
        self.log.emit("info", "coordinator.service.stopped", "Stopped before serving.")
        return True


def start(
    options: argparse.Namespace, log: ServiceLog, started: contextlib.ExitStack, *, serving: bool
) -> Started:
    """Steps 1–4 of the start sequence; closes what it opened through `started`."""
    recovery_only = bool(getattr(options, "recovery_only", False))
    environment = dict(os.environ)
    log.emit("info", "coordinator.service.starting", "Starting: loading the runtime file.")
    shutdown = Shutdown(log)
    install_signals(shutdown)

    # 1. The runtime file, substituted from the environment: the one read of it.
    with _step():
        deployment = load_deployment(options.runtime_config, environment=environment)
    settings = deployment.deployment
    assert settings is not None
    for warning in deployment.warnings:
        log.emit("warning", warning.code, warning.effective_message)
    if not serving and isinstance(deployment.database, SqliteDatabase):
        raise refusal("coordinator.command.store-single-process")

    # 2. The pinned package and its bindings, against the file as step 1 read it.
    with _step():
        package = load_package(Path(settings.package.root), settings.package.expected_digest)
        problems = package_binding_problems(deployment, package.snapshot.workflow)
        if problems:
            raise DeploymentRefused(problems)

    # 3. Secrets, the audit journal, the store.
    with _step():
        secrets = resolve_secrets(deployment, environment=environment, database_role="runtime")
    witness = (
        RestoreWitness(Path(deployment.restore_witness)) if deployment.restore_witness else None
    )
    if witness is not None:
        try:
            witness.create()
        except OSError:
            raise refusal(
                "coordinator.command.audit-unavailable",
                "The restore witness file (`store.restoreWitness`) cannot be created or written.",
            ) from None
    with _step("coordinator.command.audit-unavailable"):
        writer = AuditWriter.open(
            settings.audit_directory,
            "serve" if serving else "worker",
            proofs=witness.append if witness is not None else None,
        )
    started.callback(writer.close)
    url = started.enter_context(store_access.store_url(deployment, secrets))
    concurrency = 0 if recovery_only else settings.worker.concurrency
    # 4. The deployment check (Store.open verifies), the service, its live-binding check.
    with _step("coordinator.command.store-unavailable"):
        store = Store.open(
            url,
            store_access.identity(settings, secrets),
            namespace=store_access.namespace_of(deployment),
            exclusive=serving,
            pool_size=concurrency + (8 if serving else 2),
        )
    started.callback(store.close)
    metrics.watch_store(lambda: store.reads.gauges(wall_clock()))
    started.callback(metrics.watch_store, None)
    # 07 §12.1: a torn tail of a dead process is set aside (item 6); a store older than the
    # journal, or not in the database the journal and heads name (a restore), is never worked
    # ordinarily; the journal then names the database this process works (item 5).
    journal = Path(settings.audit_directory)
    with _step("coordinator.command.audit-unavailable"):
        set_aside_torn_tails(journal, writer)
    if not recovery_only:
        with _step("coordinator.command.store-unavailable"):
            check_journal(store, journal, secrets.audit_references, witness=witness)
    with _step("coordinator.command.audit-unavailable"):
        journal_identity(writer, store)
    store.follow_journal(lambda: writer.position)
    started.callback(_save_head, store, log)
    with _step():
        runtime = Runtime.build(deployment, secrets, store, package, audit=writer)
    service = StoreRunService(runtime)
    shutdown.on_stop.append(runtime.changes.close)  # waiting status reads answer at once
    runtime.events.write_to(log)
    # Spans only when the environment names an exporter (shell.observe.tracing); flushed at stop.
    stop_tracing = tracing.configure(environment, process="serve" if serving else "worker")
    if stop_tracing is not None:
        started.callback(stop_tracing)
        log.emit("info", "coordinator.service.tracing", "Exporting spans over OTLP/HTTP.")
    if not recovery_only:
        with _step("coordinator.command.store-unavailable"):
            bindings_ok = runtime.bindings.unsettled_match(runtime.now())
        if not bindings_ok:
            raise refusal("coordinator.command.live-binding-conflict")
    return Started(
        deployment=deployment,
        settings=settings,
        secrets=secrets,
        package=package,
        writer=writer,
        store=store,
        runtime=runtime,
        service=service,
        concurrency=concurrency,
        poll_ms=options.poll_ms or settings.worker.poll_milliseconds,
        shutdown=shutdown,
        log=log,
    )


def _save_head(store: Store, log: ServiceLog) -> None:
    """At a stop: the journal's last line becomes this process's head in the store."""
    try:
        store.save_journal_head(wall_clock())
    except Exception:  # the next start reads a little more of the journal
        log.emit(
            "warning",
            "coordinator.command.store-unavailable",
            "The journal head was not saved at the stop.",
        )


def run_worker(options: argparse.Namespace, log: ServiceLog, started: contextlib.ExitStack) -> int:
    """`coordinator worker`: worker loops only, until a stop."""
    process = start(options, log, started, serving=False)
    if process.stopped_before_serving():
        return EXIT_OK
    shutdown = process.shutdown
    bind = getattr(options, "metrics_bind", None)
    if bind is not None:
        try:
            server, _ = metrics.serve(bind[0], bind[1])
        except OSError:
            raise refusal("coordinator.command.listener-unavailable") from None
        started.callback(server.server_close)
        started.callback(server.shutdown)
    settle_heap()
    threads = start_workers(process)
    process.recheck().start()
    log.emit("info", "coordinator.service.ready", "Worker loops running.")
    # A signal interrupts the wait (its handler runs on this thread), so a long wait costs
    # no wake-ups while the process runs.
    while not shutdown.stop.wait(RECHECK_SECONDS):
        pass
    join(threads)
    log.emit("info", "coordinator.service.stopped", "Stopped.")
    return shutdown.exit_code


# -- the loops ----------------------------------------------------------------------------------


def recheck_loop(
    store: Any, shutdown: Shutdown, log: ServiceLog, outage: StoreOutage | None = None
) -> None:
    """07 §15 with 09 §5 step 7: the deployment check every 30 s; a definite failure stops the
    process. A check that could not run because the store was unreachable is not a failure:
    it is reported to `outage` and retried after a backoff until it runs."""
    outage = outage or StoreOutage(log)
    backoff = Backoff()
    pause = RECHECK_SECONDS
    while not shutdown.stop.wait(pause):
        began = time.monotonic()
        try:
            store.verify()
        except CoordinatorError as error:
            if error.diagnostic.code == _STORE_UNAVAILABLE:
                outage.lost(began)
                pause = backoff.next()
                continue
            log.emit("error", error.diagnostic.code, error.diagnostic.effective_message)
            shutdown.request(error.diagnostic.exit_code or EXIT_REFUSED)
            return
        except Exception:
            log.emit(
                "error", "coordinator.deployment.refused", "The periodic deployment check failed."
            )
            shutdown.request(EXIT_REFUSED)
            return
        outage.answered(began)
        backoff.reset()
        pause = RECHECK_SECONDS


def worker_loop(
    worker: Ticking,
    poll_ms: int,
    shutdown: Shutdown,
    log: ServiceLog,
    outage: StoreOutage | None = None,
) -> None:
    """07 §7.1 with 09 §5 step 7: tick; when idle wait for a wake-up (an admission or re-arm
    in this process, a notification from another) or, as the process's one poller, until the
    store can next have work (at least `poll_ms`, `Wakeup.idle`); stop claiming once the
    process is stopping (the in-flight tick finishes first, and the record its last finish
    claimed for the loop, if any, is worked too).

    A tick that fails waits out a backoff (`Backoff`, interrupted by a stop) before the next.
    One that cannot reach the store is reported to `outage` (which logs the loss and the
    recovery once per process) and never ends the process: what it left in flight is settled
    by its lease (07 §7). Any other failed tick is logged by code and the loop goes on."""
    pause = poll_ms / 1000
    outage = outage or StoreOutage(log)
    backoff = Backoff()
    shutdown.on_stop.append(worker.stop)
    shutdown.on_stop.append(worker.wakeup.ring_all)
    state = metrics.LoopState()
    try:
        _worker_ticks(worker, pause, shutdown, log, outage, backoff, state)
    finally:
        state.leave()


def _worker_ticks(
    worker: Ticking,
    pause: float,
    shutdown: Shutdown,
    log: ServiceLog,
    outage: StoreOutage,
    backoff: Backoff,
    state: metrics.LoopState,
) -> None:
    """`worker_loop`'s loop, moving `state` (`coordinator_worker_loops`) as it goes. A loop
    whose last finish claimed a record for it works that record before it stops."""
    polled = False
    streak = 0  # ticks in a row that found work since the loop last waited
    while not shutdown.stop.is_set() or worker.holding:
        seen = worker.wakeup.generation
        began = time.monotonic()
        state.enter("working")
        try:
            worked = worker.tick(seen=seen)
        except CoordinatorError as error:
            if error.diagnostic.code == _STORE_RESTORED:
                # Its connections reached another database (a promoted standby, a file put
                # back): nothing more is worked, the process stops (07 §12.1 item 5).
                log.emit("error", error.diagnostic.code, error.diagnostic.effective_message)
                shutdown.request(EXIT_REFUSED)
                return
            if error.diagnostic.code == _STORE_UNAVAILABLE:
                outage.lost(began)
            else:
                log.emit("warning", error.diagnostic.code, error.diagnostic.effective_message)
            if shutdown.stop.is_set():
                return  # stopping: a claim the loop still holds is left to its lease
            streak, polled = 0, False
            state.enter("backoff")
            shutdown.stop.wait(backoff.next())
            continue
        except Exception:
            log.emit("error", _WORKER_UNAVAILABLE, "A worker tick failed unexpectedly.")
            if shutdown.stop.is_set():
                return  # stopping: a claim the loop still holds is left to its lease
            streak, polled = 0, False
            state.enter("backoff")
            shutdown.stop.wait(backoff.next())
            continue
        outage.answered(began)
        backoff.reset()
        if worked and worker.rests(seen):
            worked = False  # the run handed over, and nothing else known: wait for a ring
        streak = streak + 1 if worked else 0
        if streak == 2 or (streak == 1 and polled):
            # more than the one record a ring is for, or work found by polling (nobody rang
            # for it): there may be more, so the other idle loops look too
            worker.wakeup.found_work()
        polled = False
        if not worked and not shutdown.stop.is_set():
            # the process's one poller waits until something can be due, the others for a ring
            state.enter("idle")
            polled = not worker.wakeup.idle(seen, pause)


def settle_heap() -> None:
    """Once start-up is over, before the loops start: collect what start-up left unreachable,
    then move every object that survived to the permanent generation (`gc.freeze`). The
    imported modules, the app, the compiled statements and schemas — about 150,000 objects in
    `coordinator serve` — are never garbage, yet a full collection would walk all of them, every
    thread stopped meanwhile: about 105 ms each, one or two per 1,500 runs at concurrency 8.
    After it, a full collection walks only what came later (4 ms in the same window). The
    count is the metric `coordinator_process_frozen_objects`."""
    gc.collect()
    gc.freeze()
    metrics.heap_settled(gc.get_freeze_count())


def start_workers(process: Started) -> list[threading.Thread]:
    """`process.concurrency` worker loops, one thread each, named after host, pid and index,
    sharing one wake-up; on PostgreSQL the store's listener rings it when another process
    admits or re-arms a run, and schedules the instant another announces (07 §7.7 item 4); the
    listener reports a lost connection and its return to the process's `outage`."""
    threads: list[threading.Thread] = []
    for index in range(process.concurrency):
        worker = process.runtime.worker(f"{socket.gethostname()}:{os.getpid()}:{index + 1}")
        if index == 0:
            wakeup = worker.wakeup
            process.store.channel.listen(
                wakeup.ring,
                process.shutdown.stop,
                schedule=wakeup.schedule,
                watch=process.outage,
            )
        thread = threading.Thread(
            target=worker_loop,
            args=(worker, process.poll_ms, process.shutdown, process.log, process.outage),
            name=f"worker-{index + 1}",
        )
        thread.start()
        threads.append(thread)
    return threads


def join(threads: Sequence[threading.Thread]) -> None:
    """Wait for the loops' in-flight ticks, at most `GRACE_SECONDS` in all."""
    deadline = time.monotonic() + GRACE_SECONDS
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m coordinator_core.shell.runtime.process worker --runtime-config FILE [--poll-ms N]`."""
    return run_command(build_parser(), {"worker": run_worker}, argv)


if __name__ == "__main__":
    raise SystemExit(main())
