"""`coordinator` (09 §5): a bare command line and `--help` print help (exit 0), `--version`
the distribution version, and a usage error names the option, never a value (issue 13). The
installed console script itself runs in tests/e2e/test_console_scripts.py."""

from __future__ import annotations

import io
import json
from importlib import metadata

import pytest

from coordinator_core.shell.runtime import process
from coordinator_core.shell.runtime.service_log import ServiceLog

VALUE = "canary-value-9b1c"


def run(argv: list[str]) -> tuple[int, list[dict[str, str]]]:
    stream = io.StringIO()
    code = process._run_command(
        ServiceLog(stream), process.build_parser(), {"worker": process.run_worker}, argv
    )
    return code, [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_bare_command_line_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, logged = run([])
    assert code == process.EXIT_OK and logged == []
    assert capsys.readouterr().out.startswith("usage: coordinator ")


def test_version_is_the_distribution_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, logged = run(["--version"])
    assert code == process.EXIT_OK and logged == []
    assert capsys.readouterr().out == f"coordinator {metadata.version('coordinator-core')}\n"


def test_worker_help_shows_every_option_with_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["worker", "--help"])[0] == process.EXIT_OK
    out = capsys.readouterr().out
    for flag in ("--runtime-config", "--poll-ms", "--metrics-bind"):
        assert flag in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["worker", "--runtime-confg", VALUE],
            "Unknown option `--runtime-confg` for `coordinator worker`; did you mean"
            " `--runtime-config`?",
        ),
        (["worker"], "The option `--runtime-config` is required by `coordinator worker`."),
        (
            ["worker", "--runtime-config", "/x", "--poll-ms", VALUE],
            "The value given to `--poll-ms` is not valid.",
        ),
        (["wokrer"], "Unknown command `wokrer`; did you mean `worker`?"),
    ],
)
def test_a_usage_error_names_what_is_wrong(argv: list[str], message: str) -> None:
    code, logged = run(argv)
    assert code == process.EXIT_USAGE
    [line] = logged
    assert line["code"] == "coordinator.cli.usage"
    assert line["message"].startswith(message)
    assert VALUE not in json.dumps(logged)
