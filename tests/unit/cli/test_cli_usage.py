"""Usage errors that say what is wrong, help, `--version`, completion and colour (issue 13
items 1 and 7; 09 §1): every mistake is `coordinator.cli.usage` (exit 2) naming commands and
options only, never a value given."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from coordinatorctl import cli
from coordinatorctl.cli import main
from coordinatorctl.remote import args as remote_args

REPO = Path(__file__).resolve().parents[3]
PROJECT = str(REPO / "examples" / "delayed-follow-up")
CTL = str(Path(sys.executable).parent / "coordinatorctl")
# Lower-case and shaped like a name, so only the rule "never a value" keeps it out.
VALUE = "canary-value-5e7a"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def usage(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """The one usage diagnostic of `argv`, in JSON mode; text mode says the same."""
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 2 and err == ""
    document = json.loads(out)
    assert document["command"] == "usage" and document["status"] == "usage-error"
    [diagnostic] = document["diagnostics"]
    assert diagnostic["code"] == "coordinator.cli.usage"
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.splitlines()[:3] == [
        "error[coordinator.cli.usage] /",
        f"  {diagnostic['message']}",
        f"  next: {diagnostic['suggestedAction']}",
    ]
    return dict(diagnostic)


def test_an_unknown_command_is_named_with_the_closest_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    diagnostic = usage(capsys, "chek")
    assert diagnostic["message"] == "Unknown command `chek`; did you mean `check`?"
    assert diagnostic["suggestedAction"] == "Run `coordinatorctl --help` for the list of commands."
    nested = usage(capsys, "audit", "verfy")
    assert nested["message"] == "Unknown command `audit verfy`; did you mean `audit verify`?"
    far = usage(capsys, "hunter-two")
    assert far["message"] == (
        "Unknown command (not shown: it is not a near miss of a command name)."
    )


def test_an_unknown_option_is_named_with_the_closest_option_of_that_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv in (["check", "--projekt", VALUE], ["check", f"--projekt={VALUE}"]):
        diagnostic = usage(capsys, *argv)
        assert diagnostic["message"] == (
            "Unknown option `--projekt` for `coordinatorctl check`; did you mean `--project`?"
        )
        assert VALUE not in json.dumps(diagnostic)
    # An option name is not user data: one that is no near miss is named all the same (only
    # a value written after `=` is left out); one not shaped like a name is not.
    for argv in (["check", "--frobnicate"], ["check", f"--frobnicate={VALUE}"]):
        far = usage(capsys, *argv)
        assert far["message"] == "Unknown option `--frobnicate` for `coordinatorctl check`."
        assert VALUE not in json.dumps(far)
    assert usage(capsys, "check", "--Hunter2")["message"] == (
        "Unknown option for `coordinatorctl check` (not shown: it is not shaped like an option"
        " name)."
    )
    # The closest option of THAT command: `--reason` exists on `cancel`, not on `status`.
    assert (
        "did you mean `--reason`"
        in usage(capsys, "cancel", "--run", "x", "--reasn", "r")["message"]
    )
    assert "did you mean" not in usage(capsys, "status", "--run", "x", "--reason", "r")["message"]
    # An unknown option beside a missing required one is the likelier cause, and is named.
    named = usage(capsys, "package", "--projekt", "x", "--output", "y")
    assert named["message"].startswith("Unknown option `--projekt`")


def test_a_missing_required_option_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    diagnostic = usage(capsys, "package", "--project", PROJECT)
    assert diagnostic["message"] == "The option `--output` is required by `coordinatorctl package`."
    assert diagnostic["suggestedAction"] == (
        "Give `--output NEW_DIR`; see `coordinatorctl package --help`."
    )
    several = usage(capsys, "retain", "--limit", "5")
    assert several["message"] == "The option `--before` is required by `coordinatorctl retain`."
    assert usage(capsys, "schema")["message"] == (
        "`coordinatorctl schema` needs `workflow|runtime|scenarios|operation`."
    )
    assert usage(capsys, "audit")["message"] == (
        "The command `coordinatorctl audit` needs a command: `verify`."
    )


def test_a_bad_choice_lists_the_choices_and_never_the_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    fmt = usage(capsys, "check", "--project", PROJECT, "--format", "yaml")
    assert (
        fmt["message"]
        == "The value given to `--format` is not one of its choices: text, json, jsonl."
    )
    assert "yaml" not in json.dumps(fmt)
    schema = usage(capsys, "schema", "nope")
    assert schema["message"] == (
        "The value of `coordinatorctl schema` is not one of its choices: workflow, runtime,"
        " scenarios, operation."
    )
    assert "nope" not in json.dumps(schema)


def test_a_missing_value_or_a_value_given_to_a_flag_is_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert usage(capsys, "check", "--project")["message"] == (
        "The option `--project` needs a value."
    )
    assert usage(capsys, "check", f"--explain={VALUE}")["message"] == (
        "The flag `--explain` takes no value."
    )
    assert usage(capsys, "list", "--limit", "500")["message"] == (
        "The value given to `--limit` is not valid."
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--format", VALUE],
        ["schema", VALUE],
        ["list", "--limit", VALUE],
        ["list", "--status", VALUE],
        ["explain", "--project", "x", "--graph", VALUE],
        ["check", f"--projekt={VALUE}"],
        ["check", "--projekt", VALUE],
        ["check", f"--explain={VALUE}"],
        ["schema", "workflow", VALUE],
        ["check", f"--{VALUE.upper()}"],
        [VALUE.upper()],
        [VALUE],  # name-shaped, but no near miss of a command: it may be data
        ["check", f"--frobnicate={VALUE}"],
        ["cancel", "--run", "x", "--reason", "r", VALUE],
    ],
)
def test_no_usage_error_prints_a_value_given(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    diagnostic = usage(capsys, *argv)
    assert VALUE not in json.dumps(diagnostic).lower()


def test_bare_coordinatorctl_prints_the_grouped_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys)
    assert code == 0 and err == ""
    assert out.startswith("usage: coordinatorctl [GLOBAL FLAGS] COMMAND [FLAGS]\n")
    titles = [line for line in out.splitlines() if line.endswith(":") and not line[0].isspace()]
    assert titles == [
        "authoring commands (offline):",
        "local development:",
        "deployment commands (--runtime-config):",
        "remote commands (--url, --token-file):",
        "operator commands (--url, --token-file):",
        "shell:",
        "options:",
        "global flags:",
    ]
    code, out, _ = run(capsys, "--format", "json")
    document = json.loads(out)
    assert code == 0 and document["command"] == "help" and "authoring commands" in document["usage"]


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sub
                for inner in sub._actions:
                    if isinstance(inner, argparse._SubParsersAction):
                        found.update({f"{name} {n}": s for n, s in inner.choices.items()})
    return found


def test_every_command_is_in_exactly_one_help_group() -> None:
    grouped = [name for _, names in cli.COMMAND_GROUPS for name in names]
    assert sorted(grouped) == sorted(name for name in _commands() if " " not in name)


def test_every_option_has_help_text() -> None:
    for name, sub in [("", cli.build_parser()), *_commands().items()]:
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, f"`coordinatorctl {name}` {action.option_strings or action.dest}"


@pytest.mark.parametrize(
    ("command", "shown", "hidden"),
    [
        ("init", set(), {"--runtime-config", "--url", "--token-file"}),
        ("check", {"--runtime-config"}, {"--url", "--token-file"}),
        ("openapi", {"--url"}, {"--runtime-config", "--token-file"}),
        ("migrate", {"--runtime-config"}, {"--url", "--token-file"}),
        ("audit verify", {"--runtime-config"}, {"--url", "--token-file"}),
        ("start", {"--url", "--token-file"}, {"--runtime-config"}),
        ("doctor", {"--url", "--token-file"}, {"--runtime-config"}),
    ],
)
def test_each_command_shows_only_the_global_flags_it_reads(
    capsys: pytest.CaptureFixture[str], command: str, shown: set[str], hidden: set[str]
) -> None:
    code, out, _ = run(capsys, *command.split(), "--help")
    assert code == 0
    assert f"usage: coordinatorctl {command} " in out
    for flag in shown | {"--format"}:
        assert flag in out
    for flag in hidden:
        assert flag not in out
    assert set(remote_args.COMMANDS) <= set(_commands())


def test_a_hidden_global_flag_is_still_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "check", "--project", PROJECT, "--token-file", "/t", "--format", "json"
    )
    assert code == 0 and json.loads(out)["status"] == "valid"


def test_version_is_the_distribution_version(capsys: pytest.CaptureFixture[str]) -> None:
    version = metadata.version("coordinatorctl")
    assert run(capsys, "--version") == (0, f"coordinatorctl {version}\n", "")
    code, out, _ = run(capsys, "--version", "--format", "json")
    document = json.loads(out)
    assert code == 0 and document["command"] == "version" and document["version"] == version


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_are_printed_and_parse(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, shell: str
) -> None:
    code, out, err = run(capsys, "completion", shell)
    assert code == 0 and err == ""
    assert "coordinatorctl" in out and "_ARGCOMPLETE" in out
    program = shutil.which(shell)
    if program is None:
        pytest.skip(f"{shell} is not installed: only the script's text is checked")
    script = tmp_path / f"coordinatorctl.{shell}"
    script.write_text(out, encoding="utf-8")
    checked = subprocess.run(
        [program, "-n", str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert checked.returncode == 0, checked.stderr


def _complete(tmp_path: Path, line: str) -> list[str]:
    """What the installed `coordinatorctl` answers a shell asking to complete `line`."""
    answer = tmp_path / "answer"
    environment = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_SHELL": "bash",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
    }
    subprocess.run(
        [CTL],
        env=environment,
        capture_output=True,
        timeout=60,
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return answer.read_text(encoding="utf-8").split("\013")


def test_completion_answers_the_commands_options_and_choices(tmp_path: Path) -> None:
    commands = {word.strip() for word in _complete(tmp_path, "coordinatorctl ")}
    assert {name for _, names in cli.COMMAND_GROUPS for name in names} <= commands
    options = {word.strip() for word in _complete(tmp_path, "coordinatorctl check --")}
    assert {"--project", "--explain", "--runtime-config", "--format"} <= options
    assert "--url" not in options  # a hidden global flag is not offered
    schemas = {word.strip() for word in _complete(tmp_path, "coordinatorctl schema ")}
    assert {"workflow", "runtime", "scenarios"} <= schemas


def test_force_color_colours_and_no_color_wins(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert "\x1b[" not in run(capsys, "chek")[2]  # not a terminal: plain
    monkeypatch.setenv("FORCE_COLOR", "1")
    coloured = run(capsys, "chek")[2]
    assert "\x1b[" in coloured and "Unknown command `chek`" in coloured
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in run(capsys, "chek")[2]
    monkeypatch.setenv("NO_COLOR", "")  # empty: unset (no-color.org)
    assert "\x1b[" in run(capsys, "chek")[2]
    code, out, _ = run(capsys, "chek", "--format", "json")
    assert code == 2 and "\x1b[" not in out  # JSON is never coloured
