"""Riding out a store outage (09 §5 step 7): one log line lost, one back; loops back off."""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from typing import Final

from coordinator_core.shell.runtime.service_log import ServiceLog

__all__ = [
    "BACKOFF_CAP_SECONDS",
    "BACKOFF_FIRST_SECONDS",
    "STORE_AVAILABLE",
    "STORE_UNAVAILABLE",
    "Backoff",
    "StoreOutage",
]

STORE_UNAVAILABLE: Final = "coordinator.command.store-unavailable"
STORE_AVAILABLE: Final = "coordinator.service.store-available"
BACKOFF_FIRST_SECONDS: Final = 0.1
BACKOFF_CAP_SECONDS: Final = 5.0

_LOST_MESSAGE: Final = "The store cannot be reached: the process stays up and retries."
_BACK_MESSAGE: Final = "The store answers again: the loops resume."


class StoreOutage:
    """Whether this process last found the store unreachable, shared by every loop of the
    process (worker loops, the deployment re-check, the store's listener).

    A loop reports each look at the store with the monotonic instant it *began* (`lost` when it
    could not reach the store, `answered` when it could). The first loss logs one warning
    (`coordinator.command.store-unavailable`), the first answer after it one info line
    (`coordinator.service.store-available`); every other report changes nothing. A look begun
    before the last change is stale and ignored: a tick that began before the store came back
    and failed does not declare a second outage, and one that began before the loss and
    succeeded does not declare the store back."""

    def __init__(self, log: ServiceLog, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = log
        self._clock = clock
        self._lock = threading.Lock()
        self._lost_at: float | None = None
        self._back_at = -math.inf

    @property
    def unreachable(self) -> bool:
        """True from the logged loss until the logged recovery."""
        with self._lock:
            return self._lost_at is not None

    def lost(self, began: float) -> None:
        """A look begun at `began` could not reach the store."""
        with self._lock:
            if self._lost_at is not None or began < self._back_at:
                return
            self._lost_at = self._clock()
            self._log.emit("warning", STORE_UNAVAILABLE, _LOST_MESSAGE)

    def answered(self, began: float) -> None:
        """A look begun at `began` reached the store."""
        with self._lock:
            if self._lost_at is None or began < self._lost_at:
                return
            self._lost_at = None
            self._back_at = self._clock()
            self._log.emit("info", STORE_AVAILABLE, _BACK_MESSAGE)


class Backoff:
    """Bounded exponential backoff with jitter: the n-th delay in a row is drawn from
    [d/2, d] where d = `first` · 2ⁿ⁻¹, at most `cap` (09 §5: 100 ms doubling to at most 5 s);
    `reset` after a success. One per loop (not thread-safe)."""

    def __init__(
        self,
        first: float = BACKOFF_FIRST_SECONDS,
        cap: float = BACKOFF_CAP_SECONDS,
        *,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self._first = first
        self._cap = cap
        self._draw = draw
        self._failures = 0

    def next(self) -> float:
        """The delay before the next try (seconds)."""
        ceiling = min(self._cap, self._first * 2.0 ** min(self._failures, 32))
        self._failures += 1
        return ceiling / 2 + self._draw() * ceiling / 2

    def reset(self) -> None:
        self._failures = 0
