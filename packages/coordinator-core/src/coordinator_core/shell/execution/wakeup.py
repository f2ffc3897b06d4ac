"""What the worker loops of one process share (07 §7.7 item 4): the wake-up that rings idle
loops for claimable records, the one poller sleeping until the store can next have work, when
to sweep, and the requests to fire due waits in batches."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Final

from coordinator_core.engine.instants import Instant
from coordinator_core.shell.clock import Clock, wall_clock
from coordinator_core.shell.store import NextInstants

__all__ = ["IDLE_CAP_SECONDS", "SWEEP_FALLBACK", "SWEEP_INTERVAL", "Wakeup"]

SWEEP_INTERVAL: Final = 1000
"""The least time (in store time, milliseconds) between two sweeps of one process."""
IDLE_CAP_SECONDS: Final = 30.0
"""The longest an idle loop waits without looking at the store: the fallback of 07 §7.7
item 4 for what no process announced."""
SWEEP_FALLBACK: Final = int(2 * IDLE_CAP_SECONDS * 1000)
"""A process that has not looked ahead (it stayed busy) nor swept for this long sweeps anyway:
a peer that stopped may have left a lease to lapse."""


def _earliest(*instants: Instant | None) -> Instant | None:
    known = [instant for instant in instants if instant is not None]
    return min(known) if known else None


class Wakeup:
    """What the worker loops of one process share (07 §7.1, §7.7 item 4).

    * **Wake-ups.** Whatever makes a record claimable now (an admission, a retry-same, a
      settled reconcile, a cancel, a notification from another process) rings it and one
      idle loop wakes, rather than sleeping out a poll interval; the stop of the process
      wakes them all (`ring_all`). A loop reads `generation` before its tick and waits with
      it, so a ring that came while the tick was looking (and found nothing) is not lost.
    * **One poller, sleeping until something can be due.** Polling stays the fallback for
      what nobody rings for (waits and retries falling due, leases lapsing, deadlines
      passing), and one idle loop of the process does it: the first to go idle waits until
      the earliest instant the store can next have work (`learn`, from `Store.next_instants`
      after a tick found nothing), at least `poll` and at most `cap` seconds; the others wait
      for a ring (or `cap`). A record this process writes due later lowers that instant
      (`schedule`, which answers whether it was earlier than known, so that the worker tells
      the other processes), as does such a notification from another process. A loop that
      finds a second record in a row after an idle wait, or work its poll found, rings, so
      the others join in (`found_work`; `process.worker_loop`). An admission takes an idle
      loop of its own process when one is free (`take_idle_loop`) and then tells no other.
    * **Sweeps when something can have lapsed.** Lapsed leases and overdue records are swept
      when a lease or a deadline the process knows of has come (`lapses`, learnt instants), or
      when the process has neither looked ahead nor swept for `SWEEP_FALLBACK`; at most once
      per `SWEEP_INTERVAL` of store time (`sweep_due`).
    * **Due waits in batches.** A claim that finds a parked wait fallen due asks for the
      other due waits to be fired in batches (`fire_soon`, `take_fire`).
    """

    def __init__(self, *, clock: Clock | None = None, cap: float = IDLE_CAP_SECONDS) -> None:
        self._condition = threading.Condition()
        self._clock = clock or wall_clock
        self._cap = cap
        self._generation = 0
        self._polling = False
        self._known = False
        self._due: Instant | None = None
        self._sweep_at: Instant | None = None
        self._swept_at: Instant | None = None
        self._looked_at: Instant | None = None
        self._scheduled = 0
        self._fire = False
        self._waiting = 0  # loops inside `idle`
        self._free = 0  # of those, how many no ring has been made for yet
        self._promised = 0  # loops taken (`take_idle_loop`) whose ring has not come yet
        self._handed: collections.deque[tuple[Any, Any]] = collections.deque()

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def scheduled(self) -> int:
        """Counts `schedule`/`lapses` calls: read it before looking at the store and give it to
        `learn`, so that an instant scheduled meanwhile is kept."""
        return self._scheduled

    def ring(self) -> None:
        """One record became claimable: wake one idle loop (which wakes the next when it finds
        more than that record, so a burst is taken up loop by loop and a single run costs one
        claim)."""
        with self._condition:
            self._generation += 1
            if self._promised > 0:
                self._promised -= 1  # the ring a taken loop waited for: counted already
            else:
                self._free = max(0, self._free - 1)
            self._condition.notify(1)

    def take_idle_loop(self) -> bool:
        """Whether an idle loop of this process is free to take a record about to become
        claimable; the loop is counted as taken, and the caller rings once the record is
        (`ring`). When none is free, the change is announced to the other processes
        (07 §7.7 item 4): a process whose own loops are all busy hands new work on instead of
        queueing it behind them."""
        with self._condition:
            if self._free <= 0:
                return False
            self._free -= 1
            self._promised += 1
            return True

    def hand(self, run: Any, claim: Any) -> None:
        """An admission of this process claimed its run's first record for the idle loop it
        took (07 §7.7 item 6): that loop (or the next to tick) works it from this claim, with
        no claim transaction of its own (`take_handed`). The admission rings as every action
        that makes work does; that ring is the one the taken loop waits for."""
        with self._condition:
            self._handed.append((run, claim))

    def take_handed(self) -> tuple[Any, Any] | None:
        """The oldest claim an admission handed over, or None."""
        with self._condition:
            return self._handed.popleft() if self._handed else None

    def ring_all(self) -> None:
        """Wake every idle loop (the process stops)."""
        with self._condition:
            self._generation += 1
            self._condition.notify_all()

    def wait(self, seen: int, timeout: float) -> bool:
        """Wait until a ring after `seen`, or `timeout` seconds; True when rung."""
        with self._condition:
            return self._condition.wait_for(lambda: self._generation != seen, timeout)

    # -- what the store can next have ------------------------------------------------------

    def learn(self, instants: NextInstants, since: int, now: Instant) -> None:
        """What `Store.next_instants` answered at `now`, for a look that began when
        `scheduled` was `since`: it replaces what was known, except instants scheduled
        meanwhile, which it may not have seen."""
        with self._condition:
            due = instants.due_at
            sweep_at = _earliest(instants.lapses_at, instants.overdue_at)
            if self._scheduled != since:
                due = _earliest(due, self._due)
                sweep_at = _earliest(sweep_at, self._sweep_at)
            before = self._next()
            self._due, self._sweep_at, self._known = due, sweep_at, True
            self._looked_at = now
            after = self._next()
            if after is not None and (before is None or after < before):
                self._condition.notify_all()  # a waiting poller wakes earlier

    def rests(self, seen: int, now: Instant) -> bool:
        """Whether a loop that has just worked the run an admission handed it may wait for a
        ring instead of claiming again: nothing rang since it read `seen` (a ring, a fire
        request, a notification), nothing more is handed over, and what is known holds with
        nothing due by `now` (`looks_ahead` would not look). Whatever became claimable
        meanwhile rang, so the claim could find only what a look ahead would."""
        with self._condition:
            return (
                self._generation == seen
                and not self._handed
                and not self._fire
                and not self.looks_ahead(now)
            )

    def looks_ahead(self, now: Instant) -> bool:
        """Whether a tick that found nothing at `now` looks at the store: nothing is known yet,
        the earliest known instant has come, or the last look is `cap` old (what no process
        announced is found at least that often). Otherwise what is known still holds: this
        process's own writes and the announcements of the others only ever bring it
        forward."""
        with self._condition:
            if not self._known or self._looked_at is None:
                return True
            instant = self._next()
            if instant is not None and instant <= now:
                return True
            looked = self._looked_at
            return not looked <= now < looked + self._cap * 1000

    def forget(self) -> None:
        """The store could not be read: poll every `poll` until a look succeeds."""
        with self._condition:
            self._known = False

    def schedule(self, instant: Instant) -> bool:
        """A record falls due at `instant` (written by this process, or announced by another):
        the poller wakes then. True when that is earlier than anything known (so that the
        other processes are told too)."""
        with self._condition:
            self._scheduled += 1
            if self._known and self._due is not None and self._due <= instant:
                return False
            if self._known:
                self._due = instant
                self._condition.notify_all()
            return True

    def lapses(self, instant: Instant) -> None:
        """A lease or a deadline this process knows of passes at `instant`: sweep then."""
        with self._condition:
            self._scheduled += 1
            if self._sweep_at is None or instant < self._sweep_at:
                self._sweep_at = instant
                self._condition.notify_all()

    def _next(self) -> Instant | None:
        return _earliest(self._due, self._sweep_at)

    def poll_seconds(self, poll: float) -> float:
        """How long the poller sleeps from now: until the earliest known instant, at least
        `poll` and at most `cap` seconds; `poll` while nothing is known, `cap` when the store
        has nothing to wait for."""
        with self._condition:
            began = time.monotonic()
            return self._poll_deadline(began, poll) - began

    def _poll_deadline(self, began: float, poll: float) -> float:
        """The monotonic instant a poller that began waiting at `began` wakes at."""
        if not self._known:
            return began + poll
        cap = began + max(poll, self._cap)
        instant = self._next()
        if instant is None:
            return cap
        at = time.monotonic() + (instant - self._clock()) / 1000
        return max(began + poll, min(cap, at))

    def idle(self, seen: int, poll: float) -> bool:
        """An idle loop's wait: `poll_seconds` for the process's one poller (recomputed when
        an earlier instant is scheduled), up to `cap` for the others; True when rung."""
        with self._condition:
            polling = not self._polling
            self._polling = True
            began = time.monotonic()
            rung = False
            self._waiting += 1
            self._free += 1
            try:
                while self._generation == seen:
                    if polling:
                        limit = self._poll_deadline(began, poll)
                    else:
                        limit = began + max(poll, self._cap)
                    remaining = limit - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._condition.wait(remaining)
                rung = True
                return True
            finally:
                if polling:
                    self._polling = False
                self._waiting -= 1
                if not rung:
                    self._free -= 1
                self._free = max(0, min(self._free, self._waiting))

    def found_work(self) -> None:
        """A loop found more work than it was rung for: one more idle loop looks too."""
        self.ring()

    # -- sweeps and batches ----------------------------------------------------------------

    def sweep_due(self, now: Instant) -> bool:
        """Whether this process sweeps now: at its first tick, once a lease or deadline it
        knows of has come, or after `SWEEP_FALLBACK` without looking; never twice within
        `SWEEP_INTERVAL` of store time (a clock that went back sweeps at once)."""
        with self._condition:
            last = self._swept_at
            if last is not None and last <= now < last + SWEEP_INTERVAL:
                return False
            looked = max(
                (x for x in (last, self._looked_at) if x is not None and x <= now), default=None
            )
            due = (
                last is None
                or now < last
                or looked is None
                or now >= looked + SWEEP_FALLBACK
                or (self._sweep_at is not None and self._sweep_at <= now)
            )
            if not due:
                return False
            self._swept_at = now
            self._sweep_at = None  # learnt again by the next look ahead, or by `lapses`
            return True

    def fire_soon(self) -> None:
        """A parked wait fell due: others may have too; a loop fires them in batches."""
        with self._condition:
            self._fire = True
            self._generation += 1
            self._condition.notify(1)

    def take_fire(self) -> bool:
        """Whether this loop fires due waits now (the request is taken: one loop at a time
        takes it; a full batch asks again)."""
        with self._condition:
            fire, self._fire = self._fire, False
            return fire
