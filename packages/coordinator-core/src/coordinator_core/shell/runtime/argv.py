"""The argument parser of both command lines, `coordinatorctl` and `coordinator` (09 §1, §5).

argparse's own messages quote what was typed (`invalid choice: 'my secret'`), so none of them
is ever shown. A mistake is instead described from the parser's structure, by the names of
the commands and options involved (rule 4 of the architecture: never a submitted value):

* an unknown option is named whenever it is shaped like an option name (`-` or `--` and
  lower-case words joined by `-`, at most 40 characters: a name, not user data), with the near
  miss of a real one offered when there is one (difflib: `--projekt` → `--project` of that
  command); an unknown command is named only when it is such a near miss (`chek` → `check`),
  since a bare word may be data typed in the wrong place (`coordinatorctl hunter2`). Anything
  not shaped like a name is left out; a value written as `--name=value` is never shown, nor is
  a left-over argument;
* a bad choice lists the allowed choices, never the value given;
* a missing required option or argument is named with its metavar;
* an option without its value, or a flag given a value, is named.

`-h`/`--help` and `--version` raise `HelpRequested` / `VersionRequested` instead of printing
and exiting, so each command line decides how to render them (text, or one JSON report).
"""

from __future__ import annotations

import argparse
import copy
import difflib
import re
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any, Final, NoReturn

__all__ = [
    "ArgumentParser",
    "HelpRequested",
    "UsageMistake",
    "VersionRequested",
    "add_version_flag",
    "distribution_version",
]

_NAME: Final = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_OPTION: Final = re.compile(r"--?[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_MAX_NAME: Final = 40


class UsageMistake(Exception):
    """A command line that could not be parsed: a fixed-shape sentence naming only commands
    and options, and what to do next."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class HelpRequested(Exception):
    """`-h`/`--help` (or a bare command line): `parser` is the one whose help was asked for."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


class VersionRequested(Exception):
    """`--version`: `text` is `<program> <distribution version>`."""

    def __init__(self, program: str, version: str) -> None:
        super().__init__(f"{program} {version}")
        self.program = program
        self.version = version


def distribution_version(distribution: str) -> str:
    """The installed version of `distribution` (importlib.metadata), `unknown` if absent."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


class _Help(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.pop("nargs", None)
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        raise HelpRequested(parser)


class _Version(argparse.Action):
    def __init__(
        self, option_strings: Sequence[str], dest: str, distribution: str = "", **kwargs: Any
    ) -> None:
        kwargs.pop("nargs", None)
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.distribution = distribution

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        raise VersionRequested(parser.prog, distribution_version(self.distribution))


def add_version_flag(parser: argparse.ArgumentParser, distribution: str) -> None:
    """`--version`: print the installed version of `distribution` and exit 0."""
    parser.add_argument(
        "--version",
        action=_Version,
        distribution=distribution,
        help="print the program's version and exit",
    )


def _quote(name: str) -> str:
    return f"`{name}`"


def _names(names: Sequence[str]) -> str:
    quoted = [_quote(name) for name in names]
    if len(quoted) <= 1:
        return "".join(quoted)
    return ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _shown(token: str, pattern: re.Pattern[str]) -> str | None:
    """`token` if it is shaped like a command or option name, else None (it may be data)."""
    return token if len(token) <= _MAX_NAME and pattern.fullmatch(token) else None


def _closest(token: str, candidates: Sequence[str]) -> str | None:
    """The closest candidate (difflib), compared without the leading dashes they all share."""
    names = {candidate.lstrip("-"): candidate for candidate in candidates}
    found = difflib.get_close_matches(token.lstrip("-"), list(names), n=1, cutoff=0.6)
    return names[found[0]] if found else None


def _action_name(action: argparse.Action) -> str:
    if action.option_strings:
        return "/".join(action.option_strings)
    if action.metavar not in (None, argparse.SUPPRESS):
        return str(action.metavar)
    return str(action.dest)


def _form(action: argparse.Action) -> str:
    """How an action is written: `--output NEW_DIR`, `--explain`, `workflow|runtime|scenarios`."""
    if action.option_strings:
        option = max(action.option_strings, key=len)
        if action.nargs == 0:
            return option
        return f"{option} {action.metavar or action.dest.upper()}"
    return _action_name(action)


class ArgumentParser(argparse.ArgumentParser):
    """argparse that never echoes a value: every mistake is a `UsageMistake`.

    `command_groups` (on the parser that holds the sub-commands) lists its commands under
    titled sections in `--help` instead of one flat list."""

    command_groups: Sequence[tuple[str, Sequence[str]]] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["add_help"] = False
        kwargs["exit_on_error"] = False
        super().__init__(*args, **kwargs)
        self._given: list[str] = []
        self.add_argument("-h", "--help", action=_Help, help="show this help and exit")

    # -- where argparse would print an argument back ---------------------------------------

    @property
    def command(self) -> str:
        """The command this parser reads, as written: `coordinatorctl audit verify`."""
        return self.prog

    @property
    def path(self) -> str:
        """The sub-command path without the program: `audit verify`; `` for the program."""
        return self.prog.partition(" ")[2]

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        options, extras = self.parse_known_args(args, namespace)
        if extras:
            raise self._chosen(options)._unrecognized(extras)
        return options

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        try:
            return super().parse_known_args(self._given, namespace)
        except argparse.ArgumentError as error:
            raise self._placed(error) from None

    def error(self, message: str) -> NoReturn:
        # argparse's `message` quotes the offending argument; it is deliberately dropped.
        raise self._unplaced()

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise self._unplaced()

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is None or value in action.choices:
            return
        choices = [str(choice) for choice in action.choices]
        if isinstance(action, argparse._SubParsersAction):
            prefix = f"{self.path} " if self.path else ""
            guess = _closest(str(value), choices)
            shown = _shown(str(value), _NAME)
            if guess is None:
                message = "Unknown command (not shown: it is not a near miss of a command name)."
            elif shown is None:
                message = f"Unknown command (not shown); did you mean {_quote(prefix + guess)}?"
            else:
                message = f"Unknown command {_quote(prefix + shown)}; did you mean"
                message += f" {_quote(prefix + guess)}?"
            raise UsageMistake(message, f"Run `{self.command} --help` for the list of commands.")
        where = (
            f"given to {_quote(max(action.option_strings, key=len))}"
            if action.option_strings
            else f"of {_quote(self.command)}"
        )
        raise UsageMistake(
            f"The value {where} is not one of its choices: {', '.join(choices)}.",
            "Write one of the listed choices (the value given is not shown).",
        )

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError:
            raise UsageMistake(
                f"The value given to {_quote(_action_name(action))} is not valid.",
                f"Write it as {_quote(_form(action))} (see `{self.command} --help`); the value"
                " given is not shown.",
            ) from None

    # -- describing a mistake ----------------------------------------------------------------

    def _chosen(self, options: argparse.Namespace) -> ArgumentParser:
        """The parser of the (sub-)command the namespace chose, descending from this one."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(options, action.dest, None) or "")
                if isinstance(chosen, ArgumentParser):
                    return chosen._chosen(options)
        return self

    def _option_strings(self) -> list[str]:
        return [
            option
            for action in self._actions
            if action.help is not argparse.SUPPRESS
            for option in action.option_strings
            if option.startswith("--")
        ]

    def _unrecognized(self, extras: Sequence[str]) -> UsageMistake:
        for extra in extras:
            if extra.startswith("-") and extra != "-":
                name = extra.split("=", 1)[0]
                guess = _closest(name, self._option_strings())
                shown = _shown(name, _OPTION)
                where = _quote(self.command)
                if guess is None and shown is not None:
                    message = f"Unknown option {_quote(shown)} for {where}."
                elif guess is None:
                    message = f"Unknown option for {where} (not shown: it is not shaped like"
                    message += " an option name)."
                elif shown is None:
                    message = f"Unknown option for {where} (not shown); did you mean"
                    message += f" {_quote(guess)}?"
                else:
                    message = f"Unknown option {_quote(shown)} for {where}; did you mean"
                    message += f" {_quote(guess)}?"
                return UsageMistake(message, f"Run `{self.command} --help` for its options.")
        return UsageMistake(
            f"Unexpected argument for {_quote(self.command)} (not shown).",
            f"Run `{self.command} --help` for what it accepts; quote a value that contains spaces.",
        )

    def _placed(self, error: argparse.ArgumentError) -> UsageMistake:
        """An argparse error that names its argument: a value missing or not allowed."""
        for action in self._actions:
            if error.argument_name is not None and _action_name(action) == error.argument_name:
                if action.nargs == 0:
                    return UsageMistake(
                        f"The flag {_quote(_action_name(action))} takes no value.",
                        f"Write {_quote(_form(action))} alone, without `=`.",
                    )
                return UsageMistake(
                    f"The option {_quote(_action_name(action))} needs a value.",
                    f"Write {_quote(_form(action))}; see `{self.command} --help`.",
                )
        return self._unplaced()

    def _unplaced(self) -> UsageMistake:
        """An argparse error that names nothing usable: find what it was from the structure."""
        ambiguous = self._ambiguous()
        if ambiguous is not None:
            return ambiguous
        missing, extras = self._missing()
        if any(extra.startswith("-") and extra != "-" for extra in extras):
            return self._unrecognized(extras)  # the likelier cause: `--projekt` for `--project`
        if missing:
            forms = [_form(action) for action in missing]
            if all(action.option_strings for action in missing):
                names = [max(action.option_strings, key=len) for action in missing]
                noun = "option" if len(names) == 1 else "options"
                verb = "is" if len(names) == 1 else "are"
                message = f"The {noun} {_names(names)} {verb} required by {_quote(self.command)}."
            else:
                message = f"{_quote(self.command)} needs {_names(forms)}."
            return UsageMistake(message, f"Give {_names(forms)}; see `{self.command} --help`.")
        return UsageMistake(
            "The command line could not be parsed.",
            f"Check the command and its flags against `{self.command} --help`.",
        )

    def _ambiguous(self) -> UsageMistake | None:
        options = {
            option
            for action in self._actions
            for option in action.option_strings
            if option.startswith("--")
        }
        for given in self._given:
            if given == "--":
                break
            name = given.split("=", 1)[0]
            if not name.startswith("--") or name in options:
                continue
            matches = sorted(option for option in options if option.startswith(name))
            if len(matches) > 1:
                return UsageMistake(
                    f"The option {_quote(name)} is ambiguous: it could be {_names(matches)}.",
                    "Write the option's full name.",
                )
        return None

    def _missing(self) -> tuple[list[argparse.Action], list[str]]:
        """The required actions not given, and what was not recognized: the arguments parsed
        again with each required one optional and defaulting to a sentinel, so what was given
        is read by argparse itself."""
        required = [action for action in self._actions if action.required]
        if not required:
            return [], []
        saved = [(action, action.required, action.default) for action in required]
        sentinel = object()
        try:
            for action in required:
                action.required = False
                action.default = sentinel
            try:
                # On a shallow copy: the parse leaves no state on this parser (argcomplete
                # reads what its own parse recorded on it).
                options, extras = argparse.ArgumentParser.parse_known_args(
                    copy.copy(self), self._given, argparse.Namespace()
                )
            except Exception:  # any other mistake (or help): nothing is named
                return [], []
        finally:
            for action, was_required, default in saved:
                action.required = was_required
                action.default = default
        missing = [action for action in required if getattr(options, action.dest, None) is sentinel]
        return missing, extras

    # -- help --------------------------------------------------------------------------------

    def format_help(self) -> str:
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._actions, self._mutually_exclusive_groups)
        formatter.add_text(self.description)
        commands = next(
            (a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None
        )
        if commands is not None and self.command_groups:
            listed = {action.dest: action for action in commands._get_subactions()}
            groups = [(title, list(names)) for title, names in self.command_groups]
            grouped = {name for _, names in groups for name in names}
            rest = [name for name in listed if name not in grouped]
            if rest:
                groups.append(("other commands", rest))
            for title, names in groups:
                formatter.start_section(title)
                formatter.add_arguments([listed[name] for name in names if name in listed])
                formatter.end_section()
        for group in self._action_groups:
            formatter.start_section(group.title)
            formatter.add_text(group.description)
            formatter.add_arguments(group._group_actions)
            formatter.end_section()
        formatter.add_text(self.epilog)
        return formatter.format_help()
