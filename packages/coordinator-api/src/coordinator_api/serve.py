"""`coordinator`: the service process (contract 09 §5).

    coordinator serve  --runtime-config FILE [--recovery-only] [--poll-ms N]
    coordinator worker --runtime-config FILE [--poll-ms N] [--metrics-bind ADDR:PORT]

The start sequence, the worker loops, the shutdown and the service log are
`coordinator_core.shell.runtime.process`; `worker` is that module's command as it is. `serve` adds
the HTTP steps: the caller key set (exit 3), the listener (`listener-unavailable`, exit 3),
the app and uvicorn with the connection guard of `coordinator_api.connection`. Nothing HTTP is imported at module level, so `coordinator worker` runs
where Connexion, Starlette and uvicorn are not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import time
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, Final, TypeVar

from coordinator_core.config.model import Authentication
from coordinator_core.shell.runtime import process
from coordinator_core.shell.runtime.argv import add_version_flag
from coordinator_core.shell.runtime.service_log import ServiceLog

T = TypeVar("T")

__all__ = ["build_parser", "main"]

_TICK_SECONDS: Final = 1.0


def build_parser() -> argparse.ArgumentParser:
    parser = process.ArgumentParser(
        prog="coordinator", description="The Registry Coordinator service."
    )
    add_version_flag(parser, "coordinator-api")
    commands = parser.add_subparsers(
        dest="command", parser_class=process.ArgumentParser, metavar="COMMAND"
    )
    what = "serve the API and run the worker loops"
    serve = commands.add_parser("serve", help=what, description=what)
    process.add_process_arguments(serve, serving=True)
    process.add_worker_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return process.run_command(
        build_parser(), {"serve": _serve_command, "worker": process.run_worker}, argv
    )


def _serve_command(
    options: argparse.Namespace, log: ServiceLog, started: contextlib.ExitStack
) -> int:
    from coordinator_api import serve_settings
    from coordinator_api.app import create_app
    from coordinator_core.shell.service import WriterJournal

    begun = process.start(options, log, started, serving=True)
    deployment, secrets, settings = begun.deployment, begun.secrets, begun.settings
    # 5. The caller key set, before the listener opens.
    _check_jwks(settings.authentication, secrets.caller_jwks)
    if begun.stopped_before_serving():
        return process.EXIT_OK

    # 6. The listener, the app, the worker loops.
    listener = settings.listener
    sock = _bind(listener.host, listener.port)
    started.callback(sock.close)
    recovery_only = bool(options.recovery_only)
    app = create_app(
        serve_settings.api_settings(
            deployment, secrets, begun.package, recovery_only=recovery_only
        ),
        service=begun.service,
        journal=WriterJournal(
            begun.writer, secrets.audit_references, secrets.admission_key, settings.database_id
        ),
    )
    return _serve(app, sock, begun)


def _check_jwks(authentication: Authentication, caller_jwks: bytes | None) -> None:
    """Step 5: the caller key set must be obtainable before the listener opens."""
    from coordinator_api.access import AccessVerifier

    verifier = AccessVerifier(authentication, clock=time.time, caller_jwks=caller_jwks)
    try:
        asyncio.run(verifier.start())
    except Exception:
        raise process.refusal("coordinator.access.unavailable") from None


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio turns Nagle off (TCP_NODELAY) only on accepted sockets whose
    # proto says TCP; without it every answer on a kept-alive connection waits ~40 ms for the
    # peer's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise process.refusal("coordinator.command.listener-unavailable") from None
    return sock


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run the API's event loop: uvloop where it is installed (a dependency of this package on
    CPython outside Windows; its loop costs less CPU per request than asyncio's own), else
    asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - platforms without uvloop
        return asyncio.run(main)
    return uvloop.run(main)


def _serve(app: Any, sock: socket.socket, begun: process.Started) -> int:
    import uvicorn

    from coordinator_api.connection import guarded_protocol, service_limits
    from coordinator_api.limits import KEEP_ALIVE_SECONDS

    shutdown, log = begun.shutdown, begun.log
    config = uvicorn.Config(
        app,
        # The connection guard: bounded heads, head/body/idle timeouts, a connection cap and
        # a fair share per peer (coordinator_api.connection). No WebSocket upgrade: the API
        # has no such route.
        http=guarded_protocol(service_limits(begun.settings.listener)),
        ws="none",
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        lifespan="on",
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=process.GRACE_SECONDS,
    )

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn re-raises a captured signal after shutdown (the process would then die of
            # it); the service exits 0 instead, after its workers have finished.
            process.install_signals(shutdown)
            yield

        async def main_loop(self) -> None:
            # uvicorn's own loop wakes ten times a second to look for a stop; once a second
            # (the resolution of the `Date` header it refreshes there) is enough for an idle
            # service, and a stop is seen within that second.
            while not await self.on_tick(0):
                await asyncio.sleep(_TICK_SECONDS)

    server = _Server(config)

    def stop_server() -> None:
        server.should_exit = True

    shutdown.on_stop.append(stop_server)
    process.settle_heap()
    threads = process.start_workers(begun)
    begun.recheck().start()

    async def serve() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started:
            log.emit("info", "coordinator.service.ready", "Serving the API.")
        await task

    run_loop(serve())
    if not server.started and not shutdown.stop.is_set():
        log.emit("error", "coordinator.access.unavailable", "The service could not start serving.")
        shutdown.request(process.EXIT_UNAVAILABLE)
    shutdown.request(shutdown.exit_code)
    process.join(threads)
    log.emit("info", "coordinator.service.stopped", "Stopped.")
    return shutdown.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
