"""`coordinatorctl`: the command line (contract 09). Parses arguments and renders outcomes.

Offline commands call coordinator_core directly. An unparsable command line is
`coordinator.cli.usage` (exit 2) with a message that names what is wrong by command and option
names only, never a value given (coordinator_core.shell.runtime.argv). A bare `coordinatorctl`
prints the help (exit 0), grouped by kind of command; each command's help shows the global
flags it reads.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.runtime.argv import (
    ArgumentParser,
    HelpRequested,
    UsageMistake,
    VersionRequested,
    add_version_flag,
)
from coordinator_core.shell.runtime.streams import guard_output
from coordinatorctl import completion, installed
from coordinatorctl.remote import args as remote_args
from coordinatorctl.report import Outcome, emit, render_text

__all__ = ["main"]

DEPLOYMENT_COMMANDS = frozenset({"migrate", "plan", "apply", "deployment-status"})
SCHEMA_NAMES = {"workflow": "project", "runtime": "runtime", "scenarios": "scenarios"}


# The sections of `coordinatorctl --help` (every command is in exactly one; a test pins it).
COMMAND_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("authoring commands (offline)", (
        "init", "check", "explain", "test", "package", "eval", "schema", "openapi",
    )),
    ("local development", ("dev",)),
    ("deployment commands (--runtime-config)", (
        "migrate", "plan", "apply", "deployment-status", "audit",
    )),
    ("remote commands (--url, --token-file)", (
        "workflow", "start", "status", "list", "inspect", "attempts", "cancel", "retry-same",
        "reconcile",
    )),
    ("operator commands (--url, --token-file)", (
        "doctor", "restore-hold", "release-restore-hold", "release-admission-hold", "retain",
        "console",
    )),
    ("shell", ("completion",)),
)  # fmt: skip

# The global flags each command uses; the others are still accepted (before or after the
# command, 09 §1) but not shown in its help, where they would mean nothing.
_RUNTIME_CHECKED = frozenset({"check", "explain", "test", "package", "audit verify", "dev"})
_GLOBAL_HELP: Final = {
    "--format": "output mode: text (default), json (one CoordinatorCtlReport on stdout) or jsonl"
    " (one report per line: a run per line for list, a line per change for --wait/--watch)",
    "--runtime-config": "path of a runtime file, relative to the working directory or absolute"
    " (required by deployment commands; checked with the project by check, explain and"
    " package)",
    "--url": "the service origin: https://host[:port], or http:// with a loopback host"
    " (else $COORDINATOR_URL)",
    "--token-file": "path of a file holding one access token, never printed"
    " (else $COORDINATOR_TOKEN_FILE)",
}


_RUNTIME_HELP: Final = {
    "check": "also check this runtime file; alone: check only it",
    "explain": "also check this runtime file",
    "package": "also check this runtime file",
    "test": "also check this runtime file, and hold scripted external-http replies to its"
    " connections' responseSchema",
    "audit verify": "compare the journal with the heads the store recorded",
    "dev": "take this runtime file's connections, secrets and database as written and add a"
    " dev deployment to a copy (the sandbox then listens on its default ports); the file is"
    " never written",
}


def _global_flags(command: str) -> frozenset[str]:
    """The global flags that `command` (`check`, `audit verify`, …) reads."""
    if command in DEPLOYMENT_COMMANDS:
        return frozenset({"--runtime-config"})
    if command in remote_args.COMMANDS:
        return frozenset({"--url", "--token-file"})
    if command == "console":
        return frozenset({"--url", "--token-file"})
    if command in _RUNTIME_CHECKED:
        return frozenset({"--runtime-config"})
    if command == "openapi":
        return frozenset({"--url"})
    return frozenset()


def _add_global_flags(parser: argparse.ArgumentParser, *, command: str | None) -> None:
    """The four global flags: on the program (`command` None) with their defaults and shown;
    on a command without defaults (so they never overwrite one given before it), shown only
    where `command` reads them."""
    group = parser.add_argument_group("global flags")
    shown = None if command is None else _global_flags(command)

    def add(flag: str, **kwargs: Any) -> None:
        if command is not None:
            kwargs["default"] = argparse.SUPPRESS
        visible = shown is None or flag in shown or flag == "--format"
        text = _GLOBAL_HELP[flag]
        if flag == "--runtime-config" and command is not None:
            text = _RUNTIME_HELP.get(command, "path of the runtime file (required)")
        names = ("-o", flag) if flag == "--format" else (flag,)
        group.add_argument(*names, help=text if visible else argparse.SUPPRESS, **kwargs)

    add("--format", choices=("text", "json", "jsonl"), default="text")
    add("--runtime-config", metavar="FILE")
    add("--url", metavar="ORIGIN")
    add("--token-file", metavar="FILE")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="coordinatorctl",
        description="Check, explain, test and package Registry Coordinator projects; deploy"
        " them; drive and operate a running service.",
        epilog="Run `coordinatorctl COMMAND --help` for the flags of one command.",
    )
    parser.command_groups = COMMAND_GROUPS
    add_version_flag(parser, "coordinatorctl")
    _add_global_flags(parser, command=None)
    commands = parser.add_subparsers(
        dest="command", parser_class=ArgumentParser, metavar="COMMAND", help=argparse.SUPPRESS
    )
    # Set after add_subparsers, which builds each command's `prog` from the program's usage.
    parser.usage = "coordinatorctl [GLOBAL FLAGS] COMMAND [FLAGS]"

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        _add_global_flags(sub, command=name)
        return sub

    init = command("init", "create a starter project (delayed-follow-up) in a new directory")
    init.add_argument(
        "--directory",
        required=True,
        metavar="DIR",
        help="the new project directory (must not exist)",
    )

    check = command("check", "prove a project (and/or a runtime file) offline")
    check.add_argument("--project", metavar="DIR", help="the project directory")
    check.add_argument("--explain", action="store_true", help="report the explain result")
    check.add_argument("--deny-warnings", action="store_true", help="fail on warnings")
    check.add_argument(
        "--environment", action="store_true", help="substitute ${…} from the environment"
    )

    explain = command("explain", "check a project and describe its structure")
    explain.add_argument("--project", required=True, metavar="DIR", help="the project directory")
    explain.add_argument(
        "--graph",
        choices=("mermaid", "dot", "svg", "png"),
        help="draw the step graph instead (text mode; png needs --output and a converter)",
    )
    explain.add_argument("--output", metavar="FILE", help="write the --graph picture to FILE")
    explain.add_argument("--deny-warnings", action="store_true", help="fail on warnings")

    test = command("test", "run the project's scenarios offline on a virtual clock")
    test.add_argument("--project", required=True, metavar="DIR", help="the project directory")
    test.add_argument("--scenarios", metavar="FILE", help="instead of DIR/scenarios.yaml")
    test.add_argument(
        "--junit",
        metavar="FILE",
        help="also write a JUnit XML report (one testcase per case) to FILE, replacing it",
    )

    package = command("package", "freeze a checked project into an immutable package")
    package.add_argument("--project", required=True, metavar="DIR", help="the project directory")
    package.add_argument(
        "--output", required=True, metavar="NEW_DIR", help="the package directory (must not exist)"
    )

    audit = command("audit", "verify the coordinator's audit journal")
    audit_commands = audit.add_subparsers(
        dest="audit_command", parser_class=ArgumentParser, metavar="verify"
    )
    verify = audit_commands.add_parser(
        "verify",
        help="verify every journal file of a directory",
        description="verify every journal file of a directory",
    )
    _add_global_flags(verify, command="audit verify")
    verify.add_argument(
        "--directory", required=True, metavar="DIR", help="the directory of the journal files"
    )

    schema = command(
        "schema",
        "print the JSON Schema of an authored format, or of an operation's output",
    )
    schema.add_argument(
        "name",
        choices=(*SCHEMA_NAMES, "operation"),
        metavar="workflow|runtime|scenarios|operation",
        help="the format: workflow.yaml, runtime.yaml or scenarios.yaml; or `operation`: the"
        " catalogue's operations (listed), or with ID the output of one",
    )
    schema.add_argument(
        "operation_id",
        nargs="?",
        metavar="ID",
        help="with `operation`: an operation id, e.g. casework.submit-review-request/v1",
    )
    schema.add_argument(
        "--completion",
        metavar="NAME",
        help="with `operation ID`: the output of this completion (what a wait-for gets)",
    )

    command("openapi", "print the service's OpenAPI 3.1 document (with --url: the one it serves)")

    evaluate = command("eval", "evaluate one function of a functions file offline")
    evaluate.add_argument("--functions", required=True, metavar="FILE", help="the functions file")
    evaluate.add_argument("--function", required=True, metavar="NAME", help="the public function")
    evaluate.add_argument(
        "--arguments", required=True, metavar="JSON_ARRAY", help="its arguments, as a JSON array"
    )

    dev = command(
        "dev",
        "run the project live on this machine: sandbox products, the service, the console;"
        " every saved change that checks clean is activated (Ctrl-C stops everything)",
    )
    dev.add_argument(
        "--project", default=".", metavar="DIR", help="the project directory (default: .)"
    )
    dev.add_argument("--no-console", action="store_true", help="do not start the operator console")

    # 09 §3: the deployment commands (implemented in deploy.py, imported only when one runs).
    command("migrate", "create the store if absent and apply every pending migration")
    command("plan", "report the store, its migrations and what apply would change (read-only)")
    apply = command("apply", "activate the pinned package in the store")
    apply.add_argument("--reference", metavar="REF", help="journaled as a keyed reference")
    command("deployment-status", "run the service's deployment check (read-only)")

    remote_args.add_remote_commands(command)  # 09 §4: workflow, start, status, list, inspect, …
    console = command(
        "console",
        "serve the operator console, a local web companion over the service API, on loopback",
    )
    console.add_argument(
        "--port",
        type=int,
        default=8470,
        metavar="PORT",
        help="the port on 127.0.0.1 (the only address it binds; default 8470, 0: any free port)",
    )
    console.add_argument(
        "--project",
        metavar="DIR",
        help="the run's project directory: draws runs' paths over its graph when its"
        " definition digest matches",
    )
    command("completion", "print a shell completion script (bash, zsh or fish)").add_argument(
        "shell", choices=completion.SHELLS, metavar="bash|zsh|fish", help="the shell"
    )
    return parser


def _usage_outcome(mistake: UsageMistake | None = None) -> Outcome:
    if mistake is None:
        return Outcome("usage", [Diagnostic("coordinator.cli.usage", path="")])
    diagnostic = Diagnostic(
        "coordinator.cli.usage", path="", message=mistake.message, hint=mistake.hint
    )
    return Outcome("usage", [diagnostic])


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
    if "_ARGCOMPLETE" in os.environ:
        completion.complete(parser)  # answers the shell's completion request and exits
    try:
        options = parser.parse_args(arguments)
    except HelpRequested as asked:
        return _help(asked.parser, output_format)
    except VersionRequested as asked:
        return emit(
            Outcome(
                "version",
                status="completed",
                result={"version": asked.version},
                text=f"{asked.program} {asked.version}\n",
            ),
            output_format,
        )
    except UsageMistake as mistake:
        return emit(_usage_outcome(mistake), output_format)
    if options.command is None:
        return _help(parser, options.format)  # a bare `coordinatorctl` is a request for help
    try:
        outcome = _run(options)
    except CoordinatorError as error:
        # A refused runtime file or secret carries every diagnostic found, not only the first.
        found = getattr(error, "diagnostics", None)
        diagnostics = list(found) if isinstance(found, tuple) else [error.diagnostic]
        outcome = Outcome(_command_name(options), diagnostics)
    return emit(outcome, options.format)


def _help(parser: argparse.ArgumentParser, output_format: str) -> int:
    """Help on stdout, exit 0; in json mode as the `usage` member of one report."""
    text = parser.format_help()
    return emit(
        Outcome("help", status="completed", result={"usage": text}, text=text), output_format
    )


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
    runtime = options.runtime_config
    if runtime is not None and not runtime.startswith("/"):
        # A relative path is the working directory's (resolved once, here, so that the file
        # read is always named by an absolute path).
        try:
            runtime = options.runtime_config = os.path.realpath(os.path.join(os.getcwd(), runtime))
        except OSError:
            return Outcome(
                options.command,
                [
                    Diagnostic(
                        "coordinator.command.usage",
                        path="",
                        message="The relative --runtime-config cannot be resolved: the current"
                        " directory cannot be read.",
                        hint="Name the runtime file by its absolute path.",
                    )
                ],
            )
    if runtime is not None and any(part in (".", "..") for part in runtime.split("/")):
        return Outcome(
            options.command,
            [
                Diagnostic(
                    "coordinator.command.usage",
                    path="",
                    message="An absolute --runtime-config must not have . or .. segments.",
                    hint="Name the runtime file without . or .. segments, e.g."
                    " /srv/coordinator/runtime.yaml, or by a path relative to the working"
                    " directory.",
                )
            ],
        )

    handler = _HANDLERS.get(options.command)
    return _usage_outcome() if handler is None else handler(options)


# -- the subcommands: one handler each, registered in `_HANDLERS` -----------------------------


def _init(options: argparse.Namespace) -> Outcome:
    from coordinatorctl import commands

    return commands.init(Path(options.directory))


def _check(options: argparse.Namespace) -> Outcome:
    from coordinatorctl import commands

    if options.project is None and options.runtime_config is None:
        return Outcome("check", [Diagnostic("coordinator.command.usage", path="")])
    return commands.check(
        Path(options.project) if options.project is not None else None,
        runtime_config=_runtime_path(options.runtime_config),
        explain=options.explain,
        deny_warnings=options.deny_warnings,
        environment=dict(os.environ) if options.environment else None,
    )


def _explain(options: argparse.Namespace) -> Outcome:
    from coordinatorctl import commands

    return commands.explain(
        Path(options.project),
        runtime_config=_runtime_path(options.runtime_config),
        graph=options.graph,
        output=options.output,
        deny_warnings=options.deny_warnings,
    )


def _package(options: argparse.Namespace) -> Outcome:
    from coordinatorctl import commands

    return commands.package(
        Path(options.project),
        Path(options.output),
        runtime_config=_runtime_path(options.runtime_config),
    )


def _test(options: argparse.Namespace) -> Outcome:
    from coordinatorctl import commands

    scenarios = Path(options.scenarios) if options.scenarios is not None else None
    junit = Path(options.junit) if options.junit is not None else None
    return commands.test(
        Path(options.project),
        scenarios,
        junit,
        runtime_config=_runtime_path(options.runtime_config),
    )


def _audit(options: argparse.Namespace) -> Outcome:
    from coordinatorctl import commands

    if getattr(options, "audit_command", None) != "verify":
        return _usage_outcome(
            UsageMistake(
                "The command `coordinatorctl audit` needs a command: `verify`.",
                "Run `coordinatorctl audit verify --directory DIR`.",
            )
        )
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


def _schema(options: argparse.Namespace) -> Outcome:
    from coordinatorctl import commands

    if options.name == "operation":
        return commands.schema_operation(options.operation_id, options.completion)
    if options.operation_id is not None or options.completion is not None:
        return _usage_outcome(
            UsageMistake(
                f"`coordinatorctl schema {options.name}` takes no further argument.",
                "Run `coordinatorctl schema workflow|runtime|scenarios`, or"
                " `coordinatorctl schema operation [ID [--completion NAME]]`.",
            )
        )
    return commands.schema(SCHEMA_NAMES[options.name])


def _openapi(options: argparse.Namespace) -> Outcome:
    from coordinatorctl import describe

    return describe.openapi(options.url)


def _eval(options: argparse.Namespace) -> Outcome:
    from coordinatorctl import commands

    return commands.evaluate(Path(options.functions), options.function, options.arguments)


def _deployment(options: argparse.Namespace) -> Outcome:
    if options.runtime_config is None:
        return Outcome(options.command, [Diagnostic("coordinator.command.runtime-config-required")])
    missing = installed.require_deploy_extra()
    if missing is not None:
        return Outcome(options.command, [missing])
    from coordinatorctl import deploy

    return deploy.run(options)


def _remote(options: argparse.Namespace) -> Outcome:
    from coordinatorctl.remote import command as remote

    return remote.run(options)


def _console(options: argparse.Namespace) -> Outcome:
    from coordinatorctl import console

    return console.run(options)


def _dev(options: argparse.Namespace) -> Outcome:
    from coordinatorctl import dev

    return dev.run(options)


def _completion(options: argparse.Namespace) -> Outcome:
    script = completion.script(options.shell)
    return Outcome(
        "completion", status="printed", result={"shell": options.shell, "script": script},
        text=script,
    )  # fmt: skip


_HANDLERS: Final[Mapping[str, Callable[[argparse.Namespace], Outcome]]] = {
    "init": _init,
    "check": _check,
    "explain": _explain,
    "package": _package,
    "test": _test,
    "audit": _audit,
    "schema": _schema,
    "openapi": _openapi,
    "eval": _eval,
    **dict.fromkeys(DEPLOYMENT_COMMANDS, _deployment),
    **dict.fromkeys(remote_args.COMMANDS, _remote),
    "console": _console,
    "dev": _dev,
    "completion": _completion,
}
"""Every subcommand's handler, by the name `build_parser` registered it under."""


def _runtime_path(value: str | None) -> Path | None:
    return Path(value) if value is not None else None


if __name__ == "__main__":
    raise SystemExit(main())
