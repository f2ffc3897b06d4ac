"""The installed `coordinator` console script (09 §5), as its own process: a bare command line
prints help naming its commands, `--version` the distribution version. (The command line's
parsing is tests/unit/shell/runtime/test_process_command_line.py's.)"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

PROGRAM = str(Path(sys.executable).parent / "coordinator")


def test_the_installed_coordinator_console_script() -> None:
    bare = subprocess.run([PROGRAM], capture_output=True, text=True, timeout=60, check=False)
    assert bare.returncode == 0 and "serve" in bare.stdout and "worker" in bare.stdout
    version = subprocess.run(
        [PROGRAM, "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert version.returncode == 0
    assert version.stdout == f"coordinator {metadata.version('coordinator-api')}\n"
