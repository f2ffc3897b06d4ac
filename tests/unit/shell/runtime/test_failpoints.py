"""Failpoints (`shell.runtime.failpoints`): unarmed they do nothing; armed, the process dies by SIGKILL
exactly at the N-th passage of the named one, and nowhere else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from coordinator_core.shell.runtime import failpoints

PROGRAM = """
import sys
from coordinator_core.shell.runtime import failpoints
for name in ("after-claim", "after-pre-send", "after-claim", "after-pre-send", "after-claim"):
    failpoints.reach(name)
    print(name, flush=True)
print("survived", flush=True)
"""


def run(armed: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("COORDINATOR_FAILPOINTS", None)
    if armed is not None:
        env["COORDINATOR_FAILPOINTS"] = armed
    return subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip


def test_unarmed_failpoints_do_nothing() -> None:
    done = run(None)
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1] == "survived"


def test_an_armed_failpoint_kills_at_its_nth_passage() -> None:
    done = run("after-pre-send=2")
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.splitlines() == ["after-claim", "after-pre-send", "after-claim"]


def test_unknown_names_and_counts_arm_nothing() -> None:
    done = run("after-lunch=1,after-claim=0,after-claim=x")
    assert done.returncode == 0


def test_every_failpoint_is_a_boundary_the_chaos_suite_names() -> None:
    assert failpoints.FAILPOINTS == (
        "after-claim", "after-freeze", "after-pre-send", "after-finish", "mid-continuation",
        "after-finish-claim",
    )  # fmt: skip
