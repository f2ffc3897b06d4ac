"""The README's two set-up commands (issue 12 item 7): one runs the demo, one the tests; each makes
its own virtual environment (a Debian or Ubuntu system Python refuses `pip install` outside
one), pins nox and uv as constraints.txt does, and .ci/run runs the test command as written."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CI_RUN = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
PREFIX = "python3 -m venv .venv && .venv/bin/python -m pip install -q "


def _fresh_machine_commands() -> list[str]:
    section = README.split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    return [block.strip() for block in blocks]


def _pin(name: str) -> str:
    [line] = [
        line
        for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
        if line.startswith(f"{name}==")
    ]
    return line


def test_exactly_two_one_line_commands_demo_then_tests() -> None:
    commands = _fresh_machine_commands()
    assert len(commands) == 2 and all("\n" not in command for command in commands)
    pins = f"'{_pin('nox')}' '{_pin('uv')}'"
    assert commands == [
        f"{PREFIX}{pins} && .venv/bin/python -m nox -s demo",
        f"{PREFIX}{pins} && .venv/bin/python -m nox -s tests",
    ]


def test_no_command_installs_into_the_system_python() -> None:
    for command in _fresh_machine_commands():
        assert "python3 -m pip" not in command and "sudo" not in command
        assert "--break-system-packages" not in command


def test_ci_runs_the_readme_test_command_as_written() -> None:
    [program] = re.findall(r"awk '([^']+)' README.md", CI_RUN)
    extracted = subprocess.run(
        ["awk", program, "README.md"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert extracted == _fresh_machine_commands()[1]
    assert 'bash -c "$TEST_COMMAND"' in CI_RUN
