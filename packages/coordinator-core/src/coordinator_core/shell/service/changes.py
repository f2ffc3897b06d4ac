"""`RunChanges`: who waits for a run's change in this process, told when one commits (06 §5.3,
the waiting status read).

The store's observer (`Runtime.build`) tells it every status change and step outcome this
process commits, on the committing thread; each waiter of that run is woken through the
callback it registered (`watch`), which must be cheap and thread-safe (the API's hands the
wake-up to its event loop). What another process commits is not told here: the waiting reads
look at the store at a modest interval for that (`RunReads.watched_runs`). The stop of the
process wakes every waiter, and from then on a new one is woken at once (`close`).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Final

from coordinator_core.shell.store import Committed

__all__ = ["RunChanges"]

logger = logging.getLogger("coordinator.runs")

_WAKE_FAILED: Final = "coordinator.service.wake-failed"

Wake = Callable[[], None]


class RunChanges:
    """The waiters of runs in one process (see the module documentation)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[uuid.UUID, list[Wake]] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether the process is stopping: a waiting read answers at once."""
        return self._closed

    def watch(self, run_id: uuid.UUID, wake: Wake) -> Callable[[], None]:
        """Call `wake` (from any thread) whenever a change of `run_id` commits in this process,
        and once the process stops; answers the function that ends the watch."""
        with self._lock:
            closed = self._closed
            if not closed:
                self._waiters.setdefault(run_id, []).append(wake)
        if closed:
            _call(wake)

        def unwatch() -> None:
            with self._lock:
                waiters = self._waiters.get(run_id)
                if waiters is None:
                    return
                try:
                    waiters.remove(wake)
                except ValueError:
                    return
                if not waiters:
                    del self._waiters[run_id]

        return unwatch

    def committed(self, items: Sequence[Committed]) -> None:
        """The store's observer: wake the waiters of every run a commit changed."""
        if not self._waiters:  # read without the lock: the common case has no waiter at all
            return
        with self._lock:
            woken = [wake for item in items for wake in self._waiters.get(item.run_id, ())]
        for wake in woken:
            _call(wake)

    def close(self) -> None:
        """The process stops: wake every waiter, and every later one at once."""
        with self._lock:
            self._closed = True
            woken = [wake for waiters in self._waiters.values() for wake in waiters]
        for wake in woken:
            _call(wake)


def _call(wake: Wake) -> None:
    try:
        wake()
    except Exception:  # a waiter that went away must not fail a commit's observer
        logger.debug("a waiter could not be woken", extra={"code": _WAKE_FAILED})
