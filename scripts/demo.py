"""The README's main job (for now offline): check, explain, draw and package every example.

Runs the installed `coordinatorctl` as a user would, one process per command, and prints what
each command printed. Exits non-zero if any example does not check clean or package.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def ctl(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinatorctl", *arguments],
        capture_output=True,
        text=True,
        check=False,
    )


def banner(text: str) -> None:
    print(f"\n=== {text} " + "=" * max(0, 72 - len(text)))


def main() -> int:
    failures = 0
    with tempfile.TemporaryDirectory() as scratch:
        for project in sorted(p for p in EXAMPLES.iterdir() if (p / "workflow.yaml").exists()):
            banner(f"coordinatorctl check --project examples/{project.name}")
            checked = ctl("check", "--project", str(project))
            print(checked.stdout + checked.stderr, end="")
            if checked.returncode != 0:
                failures += 1
                continue
            banner(f"coordinatorctl explain --project examples/{project.name} --graph mermaid")
            drawn = ctl("explain", "--project", str(project), "--graph", "mermaid")
            print(drawn.stdout + drawn.stderr, end="")
            failures += drawn.returncode != 0
            explained = ctl("explain", "--project", str(project), "--format", "json")
            report = json.loads(explained.stdout)
            print(
                f"explain: {len(report.get('steps', []))} steps, "
                f"{len(report.get('operations', {}))} operations, "
                f"outcomes {', '.join(report.get('outcomes', []))}"
            )
            banner(f"coordinatorctl package --project examples/{project.name}")
            packaged = ctl(
                "package", "--project", str(project), "--output", str(Path(scratch) / project.name)
            )
            print(packaged.stdout + packaged.stderr, end="")
            failures += packaged.returncode != 0
    banner("summary")
    print(
        "all examples checked, explained and packaged" if not failures else f"{failures} failures"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
