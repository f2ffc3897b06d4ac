"""Both entry points, `coordinatorctl` and `coordinator`, as installed scripts: a closed pipe, a
full device or a closed descriptor on stdout or stderr ends the command with exit 3 and
`coordinator.command.output-unavailable` on stderr (when stderr still takes it), never a
traceback (09 §7; issue 11 item 5)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
CTL = str(BIN / "coordinatorctl")
SERVICE = str(BIN / "coordinator")
CODE = "coordinator.command.output-unavailable"
FULL = Path("/dev/full")

# `schema workflow` is a text-mode result, `--format json` the envelope, `--help` argparse's own
# output (argparse swallows a failed write itself, the guard must still see it).
COMMANDS = {
    "ctl-text": [CTL, "schema", "workflow"],
    "ctl-json": [CTL, "--format", "json", "schema", "workflow"],
    "ctl-help": [CTL, "--help"],
    "ctl-module": [sys.executable, "-m", "coordinatorctl", "schema", "workflow"],
    "service-help": [SERVICE, "--help"],
    "worker-help": [sys.executable, "-m", "coordinator_core.shell.runtime.process", "--help"],
}


def _run(command: Sequence[str], **streams: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, text=True, timeout=60, check=False, **streams)  # type: ignore[call-overload, no-any-return]


def _assert_clean_refusal(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 3, done.stderr
    assert CODE in done.stderr
    assert "Traceback" not in done.stderr
    assert "Exception ignored" not in done.stderr


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_pipe_whose_reader_is_gone_ends_the_command_with_exit_3(name: str) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader went away before the first byte (`| head -c0`)
    try:
        done = _run(COMMANDS[name], stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    _assert_clean_refusal(done)


@pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full")
@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_full_device_on_stdout_ends_the_command_with_exit_3(name: str) -> None:
    with FULL.open("w") as full:
        done = _run(COMMANDS[name], stdout=full, stderr=subprocess.PIPE)
    _assert_clean_refusal(done)


@pytest.mark.parametrize("name", ["ctl-text", "service-help"])
def test_a_closed_stdout_descriptor_ends_the_command_with_exit_3(name: str) -> None:
    script = 'exec "$@" >&-'
    done = _run(["/bin/sh", "-c", script, "sh", *COMMANDS[name]], stderr=subprocess.PIPE)
    _assert_clean_refusal(done)


@pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full")
def test_a_full_stderr_still_exits_3_without_a_word_on_stdout() -> None:
    # A usage error writes only its diagnostic to stderr; stderr itself is full.
    with FULL.open("w") as full:
        done = _run([CTL, "no-such-command"], stdout=subprocess.PIPE, stderr=full)
    assert (done.returncode, done.stdout) == (3, "")


@pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full")
def test_a_full_stderr_does_not_lose_what_stdout_received() -> None:
    with FULL.open("w") as full:
        done = _run([CTL, "schema", "workflow"], stdout=subprocess.PIPE, stderr=full)
    # Nothing went to stderr, so the command succeeded and its document arrived whole.
    assert done.returncode == 0
    assert done.stdout.startswith("{") and done.stdout.rstrip().endswith("}")


def test_a_reader_that_stays_open_gets_everything_and_exit_0() -> None:
    for command in (COMMANDS["ctl-json"], COMMANDS["service-help"]):
        done = _run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert (done.returncode, done.stderr) == (0, "")
        assert done.stdout.endswith("\n")
