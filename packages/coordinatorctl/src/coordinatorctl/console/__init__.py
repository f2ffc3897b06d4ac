"""`coordinatorctl console`: the operator console, a local web companion (docs/console.md).

The command checks what the remote commands check (`--url`, the token file; `--project` when
given), binds 127.0.0.1 only, prints the console's address and serves until interrupted. The
token is read from its file for each API call (a renewed file is picked up), sent by this
process under the client policy of 09 §4 (remote.exchange.exchange) and never reaches the browser.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any, Final

from coordinator_core.errors import Diagnostic
from coordinatorctl.report import Outcome

__all__ = ["DEFAULT_PORT", "READY_PREFIX", "run"]

DEFAULT_PORT: Final = 8470
# The line the console prints once it listens, then its URL (`coordinatorctl dev` reads it).
READY_PREFIX: Final = "The console is at "
LOOPBACK: Final = "127.0.0.1"


def _usage(message: str, hint: str) -> Diagnostic:
    return Diagnostic("coordinator.command.usage", path="", message=message, hint=hint)


def run(options: argparse.Namespace) -> Outcome:
    """Serve the console until interrupted; the outcome of a refusal, else `stopped`."""
    from coordinatorctl.remote.checks import parse_origin, read_token
    from coordinatorctl.remote.command import TOKEN_FILE_VARIABLE, URL_VARIABLE

    usage: list[Diagnostic] = []
    url = options.url if options.url is not None else (os.environ.get(URL_VARIABLE) or None)
    token_file = options.token_file
    if token_file is None:
        token_file = os.environ.get(TOKEN_FILE_VARIABLE) or None
    origin = None
    if url is None:
        usage.append(Diagnostic("coordinator.command.service-required", path=""))
    else:
        origin = parse_origin(url)
        if origin is None:
            usage.append(
                _usage(
                    "--url must be an origin: https://host[:port], or http:// with a loopback"
                    " host, without user info, path, query or fragment.",
                    "Give the service origin only, e.g. --url https://coordinator.example.org.",
                )
            )
    if token_file is None:
        usage.append(Diagnostic("coordinator.command.token-file-required", path=""))
    port: int = options.port
    if not 0 <= port <= 65535:
        usage.append(_usage("--port must be 0–65535.", "Pass a free port, or 0 for any free port."))
    if usage:
        return Outcome("console", usage)
    assert origin is not None and token_file is not None
    token_path = os.path.abspath(token_file)
    token = read_token(token_path)
    if isinstance(token, Diagnostic):
        return Outcome("console", [token])
    explained: dict[str, Any] | None = None
    if options.project is not None:
        prepared = _explain(options.project)
        if isinstance(prepared, list):
            return Outcome("console", prepared)
        explained = prepared
    try:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK, port))
        listener.listen(64)
    except OSError:
        return Outcome(
            "console",
            [
                _usage(
                    f"Port {port} on {LOOPBACK} cannot be bound (in use or not allowed).",
                    "Pass another --port, or --port 0 for any free port.",
                )
            ],
        )
    bound: int = listener.getsockname()[1]
    return _serve(listener, bound, origin, token_path, explained)


def _explain(project: str) -> dict[str, Any] | list[Diagnostic]:
    from pathlib import Path

    from coordinator_core.checking.checker import check_project
    from coordinator_core.checking.explain import explain_result

    checked = check_project(Path(project), runtime_config=None, environment=None)
    definition = checked.definition
    if checked.has_errors or definition is None or definition.snapshot is None:
        return [d for d in checked.diagnostics if d.effective_severity == "error"] or [
            Diagnostic("coordinator.command.usage", path="")
        ]
    return dict(explain_result(definition, warnings=checked.has_warnings))


def _serve(
    listener: socket.socket,
    port: int,
    origin: str,
    token_path: str,
    explained: dict[str, Any] | None,
) -> Outcome:
    import uvicorn

    from coordinator_core.shell.runtime.guard import guarded_protocol
    from coordinatorctl.console.web import (
        CONSOLE_LIMITS,
        ConsoleSettings,
        console_refusals,
        create_app,
    )
    from coordinatorctl.remote.checks import read_token
    from coordinatorctl.remote.exchange import Failure, RemoteAnswer, exchange
    from coordinatorctl.remote.request import ApiRequest

    def api(request: ApiRequest) -> RemoteAnswer | Failure:
        token = read_token(token_path)
        if isinstance(token, Diagnostic):
            return "invalid"
        return exchange(origin, request, token)

    settings = ConsoleSettings(port=port, explained=explained)
    app = create_app(api, settings)
    config = uvicorn.Config(
        app,
        # The same connection guard as the service's (bounded heads, head and body timeouts,
        # connection caps); no WebSocket upgrade.
        http=guarded_protocol(CONSOLE_LIMITS, console_refusals()),
        ws="none",
        timeout_keep_alive=5,
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
        proxy_headers=False,
        lifespan="off",
    )
    sys.stdout.write(f"{READY_PREFIX}{settings.origin}/ (Ctrl-C stops it)\n")
    sys.stdout.flush()
    uvicorn.Server(config).run(sockets=[listener])
    return Outcome(
        "console", status="stopped", result={"url": settings.origin + "/"}, text="Stopped.\n"
    )
