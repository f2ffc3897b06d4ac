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

This module runs one command; its steps live beside it: remote/checks.py (the local checks),
remote/request.py (the API call of each command), remote/exchange.py (the HTTP exchange) and
remote/outcome.py (answers to outcomes). remote/args.py holds the command lines and
remote/text.py the text mode. remote/models.py is their typed boundary: request bodies are built
and answers read through the generated models of the API's bodies (spec/schemas/api.schema.json).

`--url` and `--token-file` default to the environment variables `COORDINATOR_URL` and
`COORDINATOR_TOKEN_FILE` (a flag wins; an empty variable counts as unset). 09 §1 asks for an
absolute token path: a relative one is resolved against the current directory here, before
anything is read, so the file that is read is always named by an absolute path.

`start --wait` and `status --watch` follow the run after the command's own call with further
`GET /v1/runs/{run}` calls, each under the same client policy (remote/watch.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from coordinator_core.errors import Diagnostic
from coordinatorctl.remote.checks import parse_origin, read_token
from coordinatorctl.remote.exchange import RemoteAnswer, exchange
from coordinatorctl.remote.outcome import outcome_of
from coordinatorctl.remote.request import ApiRequest, StartInputs, build_request, start_inputs
from coordinatorctl.report import Outcome

if TYPE_CHECKING:
    from coordinatorctl.remote.drawing import GraphRequest

__all__ = ["TOKEN_FILE_VARIABLE", "URL_VARIABLE", "exchange", "run"]

URL_VARIABLE: Final = "COORDINATOR_URL"
TOKEN_FILE_VARIABLE: Final = "COORDINATOR_TOKEN_FILE"


def _from_environment(flag_value: str | None, variable: str) -> tuple[str | None, bool]:
    """The flag's value, else the variable's (unset or empty: None); and whether it came from
    the environment."""
    if flag_value is not None:
        return flag_value, False
    value = os.environ.get(variable)
    return (value, True) if value else (None, False)


def _usage(message: str, hint: str) -> Diagnostic:
    return Diagnostic("coordinator.command.usage", path="", message=message, hint=hint)


def run(options: argparse.Namespace) -> Outcome:
    """Run one remote command of 09 §4 from parsed options."""
    command: str = options.command
    usage: list[Diagnostic] = []
    origin: str | None = None
    url, url_from_environment = _from_environment(options.url, URL_VARIABLE)
    if url is None:
        usage.append(Diagnostic("coordinator.command.service-required", path=""))
    else:
        origin = parse_origin(url)
        if origin is None:
            # Never echoed: the value may carry user info.
            source = URL_VARIABLE if url_from_environment else "--url"
            usage.append(
                _usage(
                    f"{source} must be an origin: https://host[:port], or http:// with a "
                    "loopback host, without user info, path, query or fragment.",
                    f"Give the service origin only, e.g. {source}"
                    f"{'=' if url_from_environment else ' '}https://coordinator.example.org.",
                )
            )
    token_file, _ = _from_environment(options.token_file, TOKEN_FILE_VARIABLE)
    if token_file is None:
        usage.append(Diagnostic("coordinator.command.token-file-required", path=""))
    elif not os.path.isabs(token_file):
        try:
            # Joined, not normalised: `..` keeps its meaning under a symbolic link.
            token_file = os.path.join(os.getcwd(), token_file)
        except OSError:  # the current directory is gone
            usage.append(
                _usage(
                    "The relative token file path cannot be resolved: the current directory "
                    "cannot be read.",
                    "Name the token file by its absolute path, e.g. /home/ops/token.",
                )
            )
            token_file = None
    watching = bool(getattr(options, "wait", False) or getattr(options, "watch", False))
    if getattr(options, "timeout", None) is not None and not watching:
        flag = "--wait" if command == "start" else "--watch"
        usage.append(
            _usage(
                f"--timeout bounds a watch: it needs {flag}.",
                f"Add {flag} to follow the run, or drop --timeout.",
            )
        )
    if usage:
        return Outcome(command, usage)
    assert origin is not None and token_file is not None

    local: list[Diagnostic] = []
    graph: GraphRequest | None = None
    if command == "inspect":
        from coordinatorctl.remote import drawing as remote_graph

        prepared = remote_graph.prepare(options)  # --graph … --project DIR (docs/graphs.md)
        if isinstance(prepared, list):
            return Outcome(command, prepared)
        graph = prepared
    token = read_token(token_file)
    if isinstance(token, Diagnostic):
        local.append(token)
    start: StartInputs | None = None
    request: ApiRequest | list[Diagnostic] | None = None
    if command == "start":
        found = start_inputs(options)  # read once: standard input can be read only once
        if isinstance(found, list):
            local.extend(found)
        else:
            start = found
    else:
        request = build_request(options)
        if isinstance(request, list):
            local.extend(request)
    if local or isinstance(token, Diagnostic):
        return Outcome(command, local)
    if start is not None:
        served: tuple[str, str] | None = None
        if start.needs_workflow:
            workflow = _served_workflow(origin, token)
            if isinstance(workflow, Outcome):
                return _with_key(workflow, start)
            served = workflow
        request = build_request(options, start=start, served=served)
    if not isinstance(request, ApiRequest):
        return Outcome(command, request or [])
    output_format: str = getattr(options, "format", "text")
    if watching:
        from coordinatorctl.remote.watch import watch

        watched = watch(
            command,
            origin,
            token,
            request,
            timeout=options.timeout,
            output_format=output_format,
            announce=start.key if start is not None and start.generated else None,
        )
        return _with_run(_with_key(watched, start), _run_id(options, watched))
    answer = exchange(origin, request, token)
    outcome = outcome_of(command, answer, stdout_is_terminal=sys.stdout.isatty())
    if graph is not None and isinstance(answer, RemoteAnswer) and outcome.exit_code == 0:
        from coordinatorctl.remote import drawing as remote_graph

        return remote_graph.draw(graph, answer.body, outcome)
    if output_format == "jsonl" and command == "list" and outcome.exit_code == 0:
        from coordinatorctl.remote.outcome import list_lines

        outcome.raw = list_lines(outcome)
    return _with_run(_with_key(outcome, start), _run_id(options, outcome))


def _served_workflow(origin: str, token: str) -> tuple[str, str] | Outcome:
    """The service's workflow id and active revision (`GET /v1/workflow`), which `start`
    takes when --workflow or --revision is not given; the failed read's outcome else."""
    outcome = outcome_of(
        "workflow",
        exchange(origin, ApiRequest("GET", "/v1/workflow"), token),
        stdout_is_terminal=False,
    )
    outcome.command = "start"
    if outcome.exit_code != 0 or outcome.result is None:
        for index, diagnostic in enumerate(outcome.diagnostics):
            if diagnostic.code == "coordinator.command.service-unavailable":
                outcome.diagnostics[index] = replace(
                    diagnostic,
                    message=(diagnostic.message or "")
                    + " (reading the service's workflow and active revision, which --workflow"
                    " and --revision default to)",
                )
        return outcome
    return str(outcome.result["workflowId"]), str(outcome.result["revision"])


def _with_key(outcome: Outcome, start: StartInputs | None) -> Outcome:
    """A generated Idempotency-Key is part of the report (`idempotencyKey`) and of every hint
    that asks for a retry with the same key, so that a retry can reuse it."""
    if start is None or not start.generated:
        return outcome
    outcome.result = {**(outcome.result or {}), "idempotencyKey": start.key}
    hint = f"with `--key {start.key}`"
    outcome.diagnostics = [
        replace(d, hint=d.effective_hint.replace("with the same `--key-file`", hint))
        for d in outcome.diagnostics
    ]
    if outcome.exit_code == 0 and outcome.text is not None:
        outcome.text = (
            f"Idempotency-Key: {start.key} (a retry with `--key` reuses it)\n" + outcome.text
        )
    return outcome


_RUN_FLAG: Final = re.compile(r"--run`")


def _run_id(options: argparse.Namespace, outcome: Outcome) -> str | None:
    """The run a command is about: `--run`, or the run its answer (or watch) names."""
    given = getattr(options, "run", None)
    if isinstance(given, str):
        from coordinatorctl.remote.checks import parse_run_id

        parsed = parse_run_id(given)
        if isinstance(parsed, str):
            return parsed
    run = (outcome.result or {}).get("run")
    if isinstance(run, dict) and isinstance(run.get("runId"), str):
        with contextlib.suppress(ValueError):
            return str(uuid.UUID(run["runId"]))
    return None


def _with_run(outcome: Outcome, run_id: str | None) -> Outcome:
    """Every `next:` that names `--run` names the run too (`--run <id>`)."""
    if run_id is None:
        return outcome
    outcome.diagnostics = [
        replace(d, hint=_RUN_FLAG.sub(f"--run {run_id}`", d.effective_hint))
        if "--run`" in d.effective_hint
        else d
        for d in outcome.diagnostics
    ]
    return outcome
