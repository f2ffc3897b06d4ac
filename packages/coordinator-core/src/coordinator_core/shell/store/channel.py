"""`Channel`: wake-ups across processes (07 §7.7 item 4) — PostgreSQL notifications announced
and listened for on the store's channel (named by its namespace). Nothing on SQLite, where one
process holds the store."""

from __future__ import annotations

import select as select_module
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

from coordinator_core.engine.instants import Instant
from coordinator_core.shell.store.transactor import Transactor

__all__ = ["Channel", "ConnectionWatch", "announced"]

_LISTEN_TIMEOUT: Final = 60.0
"""How often the listener looks at its stop flag when nothing arrives (it is a daemon thread:
the process does not wait for it)."""
_LISTEN_RETRY_SECONDS: Final = 2.0


class ConnectionWatch(Protocol):
    """Told when the listener's connection is lost and when it is back (`StoreOutage`), with
    the monotonic instant the look began."""

    def lost(self, began: float) -> None: ...

    def answered(self, began: float) -> None: ...


class Channel:
    """The store's notification channel (see the module documentation)."""

    def __init__(self, transactor: Transactor) -> None:
        self._tx = transactor

    def announce(self, instant: Instant) -> None:
        """PostgreSQL: tell the other processes that a record this one wrote falls due at
        `instant`, so that their idle loops wake then rather than at the instant they knew
        (07 §7.7 item 4). One short transaction, sent only for an instant earlier than the one
        this process knew (`Wakeup.schedule`): never on the path of a parked run. Nothing on
        SQLite."""
        if self._tx.wake_channel is None:
            return
        self._tx.transact("announce", lambda conn: self._tx.notify_txn(conn, str(instant)))

    def listen(
        self,
        ring: Callable[[], None],
        stop: threading.Event,
        schedule: Callable[[Instant], object] | None = None,
        watch: ConnectionWatch | None = None,
    ) -> threading.Thread | None:
        """PostgreSQL: a daemon thread that `LISTEN`s on the store's channel on a connection of
        its own and calls `ring` for every notification of a record claimable now (another
        process admitted or re-armed a run) and `schedule(instant)` for one of a record due
        later (`announce`; `ring` without `schedule`), reconnecting after a failure. It waits
        on the connection's socket, so an idle listener does not wake; it ends within
        `_LISTEN_TIMEOUT` after `stop` is set. `watch` hears of every failure (a connection
        that broke, or could not be made) and of every `LISTEN` that succeeded. None on
        SQLite."""
        channel = self._tx.wake_channel
        if channel is None:
            return None
        thread = threading.Thread(
            target=self._listen_loop,
            args=(channel, ring, schedule, stop, watch),
            name="store-listen",
            daemon=True,
        )
        thread.start()
        return thread

    def _listen_loop(
        self,
        channel: str,
        ring: Callable[[], None],
        schedule: Callable[[Instant], object] | None,
        stop: threading.Event,
        watch: ConnectionWatch | None = None,
    ) -> None:
        own = self._tx.sender.encode()
        while not stop.is_set():
            began = time.monotonic()
            listening = False
            try:
                pooled = self._tx.engine.raw_connection()
                driver: Any = pooled.driver_connection
                pooled.detach()  # this connection is the listener's own from now on
                try:
                    driver.rollback()
                    driver.autocommit = True
                    driver.execute(f'LISTEN "{channel}"')
                    listening = True
                    if watch is not None:
                        watch.answered(began)
                    ring()  # whatever was announced before the LISTEN is looked for now
                    # libpq directly: psycopg's `notifies()` wakes every 0.1 s to look for
                    # interrupts, which an idle service would pay for all day.
                    pgconn = driver.pgconn
                    while not stop.is_set():
                        readable, _, _ = select_module.select(
                            [pgconn.socket], [], [], _LISTEN_TIMEOUT
                        )
                        if not readable:
                            continue
                        pgconn.consume_input()  # raises once the connection is gone
                        while (notice := pgconn.notifies()) is not None:
                            payload = bytes(notice.extra)
                            if payload != own:
                                announced(payload, ring, schedule)
                finally:
                    pooled.close()
            except Exception:  # the store went away: try again shortly (polling covers it)
                if watch is not None and not stop.is_set():
                    # a connection that listened was good until now; a failed connect is as
                    # old as the attempt
                    watch.lost(time.monotonic() if listening else began)
                stop.wait(_LISTEN_RETRY_SECONDS)


def announced(payload: bytes, ring: Callable[[], None], schedule: Any) -> None:
    """Another process's notification on the store's channel: an instant (`Store.announce`)
    is scheduled; anything else (an admission, a re-arm, a hold released…) rings."""
    if schedule is not None and payload.isdigit():
        schedule(int(payload))
    else:
        ring()
