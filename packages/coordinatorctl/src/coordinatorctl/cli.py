"""`coordinatorctl`: the command line (contract 09). Parses arguments and renders outcomes.

Offline commands call coordinator_core directly. Parsing never echoes an offending argument:
an unparsable command line is reported only as `coordinator.cli.usage`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.streams import guard_output
from coordinatorctl import installed, remote_args
from coordinatorctl.report import Outcome, emit, render_text

__all__ = ["main"]

DEPLOYMENT_COMMANDS = frozenset({"migrate", "plan", "apply", "deployment-status"})
SCHEMA_NAMES = {"workflow": "project", "runtime": "runtime", "scenarios": "scenarios"}


class UsageError(Exception):
    """The command line could not be parsed."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse's own message quotes the offending argument; it is deliberately dropped.
        raise UsageError


def _add_global_flags(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    default: Any = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "-o",
        "--format",
        choices=("text", "json", "jsonl"),
        default=argparse.SUPPRESS if suppress else "text",
        help="output mode: text (default), json (one CoordinatorCtlReport on stdout) or jsonl"
        " (one report per line: a run per line for list, a line per change for --wait/--watch)",
    )
    parser.add_argument("--runtime-config", default=default, metavar="FILE", help="runtime file")
    parser.add_argument(
        "--url", default=default, metavar="ORIGIN", help="service origin (else $COORDINATOR_URL)"
    )
    parser.add_argument(
        "--token-file",
        default=default,
        metavar="FILE",
        help="access token file (else $COORDINATOR_TOKEN_FILE)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="coordinatorctl",
        description="Check, explain, test, evaluate and package Registry Coordinator projects.",
    )
    _add_global_flags(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        _add_global_flags(sub, suppress=True)
        return sub

    init = command("init", "create a starter project (delayed-follow-up) in a new directory")
    init.add_argument("--directory", required=True, metavar="DIR")

    check = command("check", "prove a project (and/or a runtime file) offline")
    check.add_argument("--project", metavar="DIR")
    check.add_argument("--explain", action="store_true", help="report the explain result")
    check.add_argument("--deny-warnings", action="store_true", help="fail on warnings")
    check.add_argument(
        "--environment", action="store_true", help="substitute ${…} from the environment"
    )

    explain = command("explain", "check a project and describe its structure")
    explain.add_argument("--project", required=True, metavar="DIR")
    explain.add_argument(
        "--graph", choices=("mermaid", "dot"), help="print the step graph instead (text mode)"
    )
    explain.add_argument("--deny-warnings", action="store_true", help="fail on warnings")

    test = command("test", "run the project's scenarios offline on a virtual clock")
    test.add_argument("--project", required=True, metavar="DIR")
    test.add_argument("--scenarios", metavar="FILE", help="instead of DIR/scenarios.yaml")

    package = command("package", "freeze a checked project into an immutable package")
    package.add_argument("--project", required=True, metavar="DIR")
    package.add_argument("--output", required=True, metavar="NEW_DIR")

    audit = command("audit", "verify the coordinator's audit journal")
    audit_commands = audit.add_subparsers(
        dest="audit_command", parser_class=_Parser, metavar="verify"
    )
    verify = audit_commands.add_parser("verify", help="verify every journal file of a directory")
    _add_global_flags(verify, suppress=True)
    verify.add_argument("--directory", required=True, metavar="DIR")

    schema = command("schema", "print the JSON Schema of an authored format")
    schema.add_argument("name", choices=tuple(SCHEMA_NAMES), metavar="workflow|runtime|scenarios")

    command("openapi", "print the service's OpenAPI 3.1 document (with --url: the one it serves)")

    evaluate = command("eval", "evaluate one function of a functions file offline")
    evaluate.add_argument("--functions", required=True, metavar="FILE")
    evaluate.add_argument("--function", required=True, metavar="NAME")
    evaluate.add_argument("--arguments", required=True, metavar="JSON_ARRAY")

    # 09 §3: the deployment commands (implemented in deploy.py, imported only when one runs).
    command("migrate", "create the store if absent and apply every pending migration")
    command("plan", "report the store, its migrations and what apply would change (read-only)")
    apply = command("apply", "activate the pinned package in the store")
    apply.add_argument("--reference", metavar="REF", help="journaled as a keyed reference")
    command("deployment-status", "run the service's deployment check (read-only)")

    remote_args.add_remote_commands(command)  # 09 §4: workflow, start, status, list, inspect, …
    return parser


def _usage_outcome(command: str = "usage") -> Outcome:
    return Outcome(command, [Diagnostic("coordinator.cli.usage", path="")])


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line. A closed or full stdout or stderr (`| head -c1`, `> /dev/full`)
    ends it with `coordinator.command.output-unavailable` on stderr, exit 3, no traceback."""
    return guard_output(lambda: _main(argv), _report_output_unavailable)


def _report_output_unavailable(diagnostic: Diagnostic) -> None:
    for _, line in render_text([diagnostic]):
        sys.stderr.write(line + "\n")


def _main(argv: Sequence[str] | None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    output_format = _sniff_format(arguments)
    parser = build_parser()
    if output_format == "json" and ("-h" in arguments or "--help" in arguments):
        # Even help honours the envelope: one report object on stdout, nothing else.
        return emit(
            Outcome("help", status="completed", result={"usage": parser.format_help()}), "json"
        )
    try:
        options = parser.parse_args(arguments)
    except UsageError:
        return emit(_usage_outcome(), output_format)
    if options.command is None:
        return emit(_usage_outcome(), output_format)
    try:
        outcome = _run(options)
    except CoordinatorError as error:
        # A refused runtime file or secret carries every diagnostic found, not only the first.
        found = getattr(error, "diagnostics", None)
        diagnostics = list(found) if isinstance(found, tuple) else [error.diagnostic]
        outcome = Outcome(_command_name(options), diagnostics)
    return emit(outcome, options.format)


def _command_name(options: argparse.Namespace) -> str:
    """The envelope's `command`: the subcommand, or exactly "audit verify" (02 §3)."""
    if options.command == "audit":
        return "audit verify"
    return str(options.command)


def _sniff_format(arguments: Sequence[str]) -> str:
    """The output mode for a usage error, read without trusting the rest of the line."""
    for index, argument in enumerate(arguments):
        for flag in ("--format", "-o"):
            if argument in (f"{flag}=json", f"{flag}=jsonl") or (
                argument == flag
                and index + 1 < len(arguments)
                and arguments[index + 1] in ("json", "jsonl")
            ):
                return "json"
    return "text"


def _run(options: argparse.Namespace) -> Outcome:
    from coordinatorctl import commands

    runtime = options.runtime_config
    if runtime is not None and (
        not runtime.startswith("/") or any(part in (".", "..") for part in runtime.split("/"))
    ):
        return Outcome(
            options.command,
            [
                Diagnostic(
                    "coordinator.command.usage",
                    path="",
                    message="--runtime-config must be an absolute path without . or .. segments.",
                    hint="Name the runtime file by its absolute path, e.g. /srv/coordinator/runtime.yaml.",
                )
            ],
        )

    if options.command == "init":
        return commands.init(Path(options.directory))
    if options.command == "check":
        if options.project is None and options.runtime_config is None:
            return Outcome("check", [Diagnostic("coordinator.command.usage", path="")])
        return commands.check(
            Path(options.project) if options.project is not None else None,
            runtime_config=_runtime_path(options.runtime_config),
            explain=options.explain,
            deny_warnings=options.deny_warnings,
            environment=dict(os.environ) if options.environment else None,
        )
    if options.command == "explain":
        return commands.explain(
            Path(options.project),
            runtime_config=_runtime_path(options.runtime_config),
            graph=options.graph,
            deny_warnings=options.deny_warnings,
        )
    if options.command == "package":
        return commands.package(
            Path(options.project),
            Path(options.output),
            runtime_config=_runtime_path(options.runtime_config),
        )
    if options.command == "test":
        scenarios = Path(options.scenarios) if options.scenarios is not None else None
        return commands.test(Path(options.project), scenarios)
    if options.command == "audit":
        if getattr(options, "audit_command", None) != "verify":
            return _usage_outcome()
        heads = None
        if options.runtime_config is not None:
            missing = installed.require_deploy_extra()
            if missing is not None:
                return Outcome("audit verify", [missing])
            from coordinatorctl import deploy

            found = deploy.journal_heads(options.runtime_config)
            if isinstance(found, Outcome):
                return found
            heads = found
        return commands.audit_verify(Path(options.directory), heads)
    if options.command == "schema":
        return commands.schema(SCHEMA_NAMES[options.name])
    if options.command == "openapi":
        from coordinatorctl import describe

        return describe.openapi(options.url)
    if options.command == "eval":
        return commands.evaluate(Path(options.functions), options.function, options.arguments)
    if options.command in DEPLOYMENT_COMMANDS:
        if options.runtime_config is None:
            return Outcome(
                options.command, [Diagnostic("coordinator.command.runtime-config-required")]
            )
        missing = installed.require_deploy_extra()
        if missing is not None:
            return Outcome(options.command, [missing])
        from coordinatorctl import deploy

        return deploy.run(options)
    if options.command in remote_args.COMMANDS:
        from coordinatorctl import remote

        return remote.run(options)
    return _usage_outcome()


def _runtime_path(value: str | None) -> Path | None:
    return Path(value) if value is not None else None


if __name__ == "__main__":
    raise SystemExit(main())
