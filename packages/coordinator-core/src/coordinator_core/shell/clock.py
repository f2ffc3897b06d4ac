"""The wall clock of the shell: the one place a process reads the time. Instants are the
engine's — integer milliseconds since the Unix epoch, UTC — from the clock to the rows; a
`Clock` is what the run service, the worker and the deployment commands are given (tests give
a fixed or virtual one)."""

from __future__ import annotations

import time
from collections.abc import Callable

from coordinator_core.engine.instants import Instant

__all__ = ["Clock", "wall_clock"]

Clock = Callable[[], Instant]


def wall_clock() -> Instant:
    """Now, in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000
