"""The installed console scripts, each as its own process. `coordinator` (09 §5): a bare command
line prints help naming its commands, `--version` the distribution version. `coordinatorctl`
(09 §1): help, version, a usage error that names the command or option and never a value, and
the completion script. (Their parsing is tests/unit/shell/runtime/test_process_command_line.py's
and tests/unit/cli/test_cli_usage.py's.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

PROGRAM = str(Path(sys.executable).parent / "coordinator")
CTL = str(Path(sys.executable).parent / "coordinatorctl")
# Lower-case and shaped like a name, so only the rule "never a value" keeps it out.
VALUE = "canary-value-5e7a"


def test_the_installed_coordinator_console_script() -> None:
    bare = subprocess.run([PROGRAM], capture_output=True, text=True, timeout=60, check=False)
    assert bare.returncode == 0 and "serve" in bare.stdout and "worker" in bare.stdout
    version = subprocess.run(
        [PROGRAM, "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert version.returncode == 0
    assert version.stdout == f"coordinator {metadata.version('coordinator-api')}\n"


def test_the_installed_coordinatorctl_console_script() -> None:
    def ctl(*argv: str) -> subprocess.CompletedProcess[str]:
        environment = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR",)}
        return subprocess.run(
            [CTL, *argv], capture_output=True, text=True, timeout=60, check=False, env=environment
        )

    bare = ctl()
    assert bare.returncode == 0 and "authoring commands (offline):" in bare.stdout
    version = ctl("--version")
    assert (version.returncode, version.stdout) == (
        0, f"coordinatorctl {metadata.version('coordinatorctl')}\n"
    )  # fmt: skip
    typo = ctl("chek")
    assert typo.returncode == 2 and typo.stdout == ""
    assert "Unknown command `chek`; did you mean `check`?" in typo.stderr
    option = ctl("check", "--projekt", VALUE, "--format", "json")
    assert option.returncode == 2 and VALUE not in option.stdout + option.stderr
    [diagnostic] = json.loads(option.stdout)["diagnostics"]
    assert diagnostic["message"].startswith("Unknown option `--projekt`")
    script = ctl("completion", "bash")
    assert script.returncode == 0 and "coordinatorctl" in script.stdout
