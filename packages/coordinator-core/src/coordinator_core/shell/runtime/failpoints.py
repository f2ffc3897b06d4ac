"""Failpoints: named places on the write-ahead path where a test can make the process die, at an
exact boundary rather than at a random moment (the chaos suite, `nox -s chaos`).

`COORDINATOR_FAILPOINTS` arms them when the process starts: a comma-separated list of
`name=N`, each killing the process with SIGKILL the N-th time (1-based) it passes `name`, e.g.
`COORDINATOR_FAILPOINTS=after-pre-send=2`. The names are `FAILPOINTS`. Unset (always, outside
tests), `reach` is one falsy check. Only the process's own worker loops pass them; nothing here
reads or writes state, so an armed failpoint is exactly `kill -9` at that instant.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Final

__all__ = ["FAILPOINTS", "reach"]

FAILPOINTS: Final = (
    "after-claim",  # the claim transaction committed (the record leased, maybe carried on)
    "after-freeze",  # the freeze fence committed the sealed command
    "after-pre-send",  # the pre-send fence committed `dispatched` and its proof is journaled
    "after-finish",  # the finish transaction committed
    "mid-continuation",  # a finish committed that carried the run on to a leased next record
    "after-finish-claim",  # a finish committed that also claimed another run's record
)
_VARIABLE: Final = "COORDINATOR_FAILPOINTS"


def _armed(text: str) -> dict[str, int]:
    armed: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, count = item.partition("=")
        if name in FAILPOINTS and count.isdigit() and int(count) >= 1:
            armed[name] = int(count)
    return armed


_ARMED: Final = _armed(os.environ.get(_VARIABLE, ""))
_PASSED: dict[str, int] = {}
_LOCK: Final = threading.Lock()


def reach(name: str) -> None:
    """Pass the failpoint `name`: dies here if it is armed for this passage."""
    if not _ARMED:
        return
    with _LOCK:
        passed = _PASSED.get(name, 0) + 1
        _PASSED[name] = passed
        if passed == _ARMED.get(name):
            os.kill(os.getpid(), signal.SIGKILL)
