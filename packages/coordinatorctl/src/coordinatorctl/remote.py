"""The remote commands of contract 09 §4: one service API call (file 06) each.

Everything a command needs is checked locally first — `--url` (09 §1), the token file, and the
command's own inputs (`--run`, `--reason`, `--input`, `--key-file`, `--before`) — and nothing is
sent unless all of it holds. Then exactly one request goes out under the client policy of 09 §4:
a total deadline of 30 s (connect 5 s), redirects never followed, no proxy or netrc from the
environment, at most 1 MiB of answer read incrementally and parsed as strict JSON. The answer is
mapped to an outcome by the table of 09 §4; the exit code comes from that mapping (02 §3), not
from the catalogue's class of a code the service chose.

The access token is read, sent in the `Authorization` header and otherwise never touched: no
diagnostic, result or text line carries it, nor the URL (which could carry user info), nor any
exception text. A problem's `detail` and `suggestedAction` are the service's fixed sentences and
are passed through, but stripped of control and format characters and capped in length.

This module runs one command; its steps live beside it: remote_inputs.py (the local checks),
remote_request.py (the API call of each command), remote_exchange.py (the HTTP exchange) and
remote_outcome.py (answers to outcomes). remote_args.py holds the command lines and
remote_text.py the text mode. remote_models.py is their typed boundary: request bodies are built
and answers read through the generated models of the API's bodies (spec/schemas/api.schema.json).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from coordinator_core.errors import Diagnostic
from coordinatorctl.remote_exchange import RemoteAnswer, send
from coordinatorctl.remote_inputs import parse_origin, read_token
from coordinatorctl.remote_outcome import outcome_of
from coordinatorctl.remote_request import build_request
from coordinatorctl.report import Outcome

if TYPE_CHECKING:
    from coordinatorctl.remote_graph import GraphRequest

__all__ = ["run"]


def run(options: argparse.Namespace) -> Outcome:
    """Run one remote command of 09 §4 from parsed options."""
    command: str = options.command
    usage: list[Diagnostic] = []
    origin: str | None = None
    if options.url is None:
        usage.append(Diagnostic("coordinator.command.service-required", path=""))
    else:
        origin = parse_origin(options.url)
        if origin is None:
            # Never echoed: the value may carry user info.
            usage.append(
                Diagnostic(
                    "coordinator.command.usage",
                    path="",
                    message=(
                        "--url must be an origin: https://host[:port], or http:// with a "
                        "loopback host, without user info, path, query or fragment."
                    ),
                    hint="Pass the service origin only, e.g. --url https://coordinator.example.org.",
                )
            )
    token_file: str | None = options.token_file
    if token_file is None:
        usage.append(Diagnostic("coordinator.command.token-file-required", path=""))
    elif not os.path.isabs(token_file):
        usage.append(
            Diagnostic(
                "coordinator.command.usage",
                path="",
                message="--token-file must be an absolute path.",
                hint="Name the token file by its absolute path, e.g. /home/ops/token.",
            )
        )
    if usage:
        return Outcome(command, usage)
    assert origin is not None and token_file is not None

    local: list[Diagnostic] = []
    graph: GraphRequest | None = None
    if command == "inspect":
        from coordinatorctl import remote_graph

        prepared = remote_graph.prepare(options)  # --graph … --project DIR (docs/graphs.md)
        if isinstance(prepared, list):
            return Outcome(command, prepared)
        graph = prepared
    token = read_token(token_file)
    if isinstance(token, Diagnostic):
        local.append(token)
    request = build_request(options)
    if isinstance(request, list):
        local.extend(request)
    if local or isinstance(token, Diagnostic) or isinstance(request, list):
        return Outcome(command, local)
    answer = send(origin, request, token)
    if isinstance(answer, RemoteAnswer) and token.encode("ascii") in answer.body:
        # 06 §12: the service never returns a token; an answer that repeats the caller's is not
        # a valid answer of the service, and it must not reach the output.
        answer = "invalid"
    outcome = outcome_of(command, answer, stdout_is_terminal=sys.stdout.isatty())
    if graph is not None and isinstance(answer, RemoteAnswer) and outcome.exit_code == 0:
        from coordinatorctl import remote_graph

        return remote_graph.draw(graph, answer.body, outcome)
    return outcome
