"""07 §7.7 item 4: the in-process wake-up of idle worker loops: rings, the one poller that
sleeps until the store can next have work, the sweeps and the batches of due waits."""

from __future__ import annotations

import threading
import time

import pytest
from support.instants import instant, ms

from coordinator_core.shell.execution.wakeup import SWEEP_FALLBACK, Wakeup
from coordinator_core.shell.store import NextInstants


def test_a_ring_before_the_wait_is_not_lost() -> None:
    wakeup = Wakeup()
    seen = wakeup.generation
    wakeup.ring()  # came while the loop's tick was looking
    assert wakeup.wait(seen, timeout=5.0) is True


def test_without_a_ring_the_wait_times_out() -> None:
    wakeup = Wakeup()
    assert wakeup.wait(wakeup.generation, timeout=0.01) is False


def _waiting_loops(
    wakeup: Wakeup, count: int, timeout: float
) -> tuple[list[bool], list[threading.Thread]]:
    seen = wakeup.generation
    woken: list[bool] = []
    ready = threading.Barrier(count + 1)

    def loop() -> None:
        ready.wait()
        woken.append(wakeup.wait(seen, timeout=timeout))

    threads = [threading.Thread(target=loop) for _ in range(count)]
    for thread in threads:
        thread.start()
    ready.wait()
    return woken, threads


def test_a_ring_wakes_one_waiting_loop_and_a_stop_wakes_them_all() -> None:
    """One new claimable record needs one loop: a ring wakes one idle loop (which rings on
    when it finds work); the stop of the process wakes every loop."""
    wakeup = Wakeup()
    woken, threads = _waiting_loops(wakeup, 3, timeout=30.0)
    deadline = time.monotonic() + 10
    while len(wakeup._condition._waiters) < 3 and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.01)
    wakeup.ring()
    while not woken and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert woken == [True]  # one loop, the others still wait
    wakeup.ring_all()
    for thread in threads:
        thread.join(timeout=10)
    assert woken == [True, True, True]


def test_one_idle_loop_polls_the_others_wait_for_a_ring() -> None:
    """07 §7.7 item 4: polling is the fallback, and one loop of the process does it."""
    wakeup = Wakeup()
    results: list[tuple[str, bool, float]] = []
    started = threading.Barrier(3)

    def idle(name: str) -> None:
        started.wait()
        began = time.monotonic()
        rung = wakeup.idle(wakeup.generation, 0.05)
        results.append((name, rung, time.monotonic() - began))

    threads = [threading.Thread(target=idle, args=(f"loop-{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    started.wait()
    time.sleep(1.0)
    # the poller came back after its poll interval; the follower is still waiting
    assert [rung for _, rung, _ in results] == [False]
    wakeup.ring_all()
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(rung for _, rung, _ in results) == [False, True]


T = instant(2030, 1, 1)


def _fixed(at: int = T) -> Wakeup:
    """A wake-up whose wall clock stands at `at` and whose cap is an hour (so that only what a
    test does can end a wait early)."""
    return Wakeup(clock=lambda: at, cap=3600.0)


def _waiting(wakeup: Wakeup, count: int) -> None:
    deadline = time.monotonic() + 10  # a hang guard: the threads start waiting at once
    while len(wakeup._condition._waiters) < count and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.01)


def test_the_poller_sleeps_until_the_earliest_instant_the_store_can_have_work() -> None:
    """07 §7.7 item 4: nothing known → every poll; the earliest of the next due record, the
    next lease to lapse and the next deadline, at least the poll and at most the cap."""
    wakeup = _fixed()
    assert wakeup.poll_seconds(0.1) == pytest.approx(0.1)  # not looked yet
    wakeup.learn(NextInstants(T + ms(seconds=600)), wakeup.scheduled, T)
    assert wakeup.poll_seconds(0.1) == pytest.approx(600, abs=0.5)
    wakeup.learn(
        NextInstants(T + ms(days=1), T + ms(seconds=20), T + ms(days=3)),
        wakeup.scheduled,
        T,
    )
    assert wakeup.poll_seconds(0.1) == pytest.approx(20, abs=0.5)  # the lease lapses first
    wakeup.learn(NextInstants(T - ms(seconds=5)), wakeup.scheduled, T)
    assert wakeup.poll_seconds(0.1) == pytest.approx(0.1, abs=0.05)  # due already: the poll
    wakeup.learn(NextInstants(T + ms(days=1)), wakeup.scheduled, T)
    assert wakeup.poll_seconds(0.1) == pytest.approx(3600, abs=0.5)  # the cap
    wakeup.learn(NextInstants(), wakeup.scheduled, T)
    assert wakeup.poll_seconds(0.1) == pytest.approx(3600, abs=0.5)  # nothing to wait for
    wakeup.forget()  # the store could not be read
    assert wakeup.poll_seconds(0.1) == pytest.approx(0.1)
    assert Wakeup().poll_seconds(0.1) == pytest.approx(0.1)


def test_a_record_scheduled_earlier_wakes_the_sleeping_poller_and_asks_to_tell_the_others() -> None:
    wakeup = _fixed()
    wakeup.learn(NextInstants(T + ms(days=1)), wakeup.scheduled, T)
    results: list[bool] = []
    poller = threading.Thread(target=lambda: results.append(wakeup.idle(wakeup.generation, 0.01)))
    poller.start()
    _waiting(wakeup, 1)
    assert wakeup.schedule(T + ms(days=2)) is False  # later than known: nobody told
    assert poller.is_alive()
    assert wakeup.schedule(T) is True  # due now, earlier than known: tell the others
    poller.join(timeout=60)  # its wait (an hour) ends at the poll after the schedule
    assert not poller.is_alive() and results == [False]  # woken by the instant, not a ring
    assert wakeup.poll_seconds(0.01) == pytest.approx(0.01, abs=0.05)


def test_a_look_ahead_keeps_what_was_scheduled_while_it_looked() -> None:
    wakeup = _fixed()
    wakeup.learn(NextInstants(T + ms(days=1)), wakeup.scheduled, T)
    since = wakeup.scheduled
    assert wakeup.schedule(T + ms(seconds=5))  # written while the look was under way
    wakeup.learn(NextInstants(T + ms(hours=2)), since, T)
    assert wakeup.poll_seconds(0.1) == pytest.approx(5, abs=0.5)
    # a look that began after it sees the store as it is (the record was taken since)
    wakeup.learn(NextInstants(T + ms(seconds=300)), wakeup.scheduled, T)
    assert wakeup.poll_seconds(0.1) == pytest.approx(300, abs=0.5)


def test_an_instant_announced_before_anything_was_learnt_is_told_on() -> None:
    wakeup = _fixed()
    assert wakeup.schedule(T + ms(seconds=5)) is True
    assert wakeup.poll_seconds(0.1) == pytest.approx(0.1)  # still polling until the first look


def test_the_process_sweeps_when_something_can_have_lapsed_and_at_most_once_a_second() -> None:
    wakeup = _fixed()
    assert wakeup.sweep_due(T)  # the first tick sweeps (a restart finds lapsed leases)
    assert not wakeup.sweep_due(T + ms(milliseconds=999))
    assert not wakeup.sweep_due(T + ms(seconds=2))  # nothing known can have lapsed
    wakeup.lapses(T + ms(seconds=15))  # an attempt left its lease to lapse
    assert not wakeup.sweep_due(T + ms(seconds=14))
    assert wakeup.sweep_due(T + ms(seconds=15))
    assert not wakeup.sweep_due(T + ms(seconds=17))
    later = T + ms(seconds=20)
    wakeup.learn(
        NextInstants(None, later + ms(seconds=3), later + ms(seconds=9)),
        wakeup.scheduled,
        later,
    )
    assert not wakeup.sweep_due(later + ms(seconds=2))
    assert wakeup.sweep_due(later + ms(seconds=3))  # the lease the look found
    # a process that neither looked nor swept for SWEEP_FALLBACK sweeps anyway
    assert not wakeup.sweep_due(later + ms(seconds=4) + SWEEP_FALLBACK / 2)
    assert wakeup.sweep_due(later + ms(seconds=3) + SWEEP_FALLBACK)
    assert wakeup.sweep_due(T)  # the clock went back: sweep at once


def test_a_due_wait_asks_one_loop_to_fire_the_others_in_batches() -> None:
    wakeup = Wakeup()
    seen = wakeup.generation
    assert not wakeup.take_fire()
    wakeup.fire_soon()
    assert wakeup.generation != seen  # an idle loop wakes to take it
    assert wakeup.take_fire()
    assert not wakeup.take_fire()  # taken once; a full batch asks again


def test_an_idle_tick_looks_at_the_store_only_when_what_is_known_may_be_out_of_date() -> None:
    wakeup = _fixed()
    assert wakeup.looks_ahead(T)  # nothing known yet
    wakeup.learn(NextInstants(T + ms(seconds=600)), wakeup.scheduled, T)
    assert not wakeup.looks_ahead(T + ms(seconds=10))  # still holds
    wakeup.schedule(T + ms(seconds=20))  # brought forward by this process
    assert not wakeup.looks_ahead(T + ms(seconds=19))
    assert wakeup.looks_ahead(T + ms(seconds=20))  # the instant has come
    wakeup.learn(NextInstants(T + ms(days=1)), wakeup.scheduled, T)
    assert not wakeup.looks_ahead(T + ms(seconds=3599))
    assert wakeup.looks_ahead(T + ms(seconds=3600))  # the cap: look again anyway
    wakeup.forget()
    assert wakeup.looks_ahead(T)


def _idle_loops(wakeup: Wakeup, count: int) -> tuple[list[bool], list[threading.Thread]]:
    """`count` loops waiting in `idle` (what each wait answered is appended to the list)."""
    woken: list[bool] = []
    loops = [
        threading.Thread(target=lambda: woken.append(wakeup.idle(wakeup.generation, 30.0)))
        for _ in range(count)
    ]
    for loop in loops:
        loop.start()
    _waiting(wakeup, count)
    return woken, loops


def test_an_idle_loop_is_taken_once_for_a_new_run_and_none_is_free_while_all_work() -> None:
    """Issue 9: an admission whose process has an idle loop leaves the run to it (the other
    processes are not notified); with every loop busy, or each idle one already promised a
    ring, there is none to take and the admission is announced."""
    wakeup = Wakeup()
    assert wakeup.take_idle_loop() is False  # no loop waits
    woken, loops = _idle_loops(wakeup, 2)
    assert wakeup.take_idle_loop() is True
    wakeup.ring()  # the admission's ring wakes the loop it took
    deadline = time.monotonic() + 10
    while not woken and time.monotonic() < deadline:
        time.sleep(0.01)
    assert woken == [True]
    assert wakeup.take_idle_loop() is True  # the other loop still waits, free
    assert wakeup.take_idle_loop() is False  # and is taken now
    wakeup.ring()
    deadline = time.monotonic() + 10
    while len(woken) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert woken == [True, True]
    assert wakeup.take_idle_loop() is False  # nobody waits any more
    for loop in loops:
        loop.join(timeout=10)


def test_loops_that_go_idle_again_are_free_again_run_after_run() -> None:
    """A lone loop taken for one run after another is found free each time it waits again
    (the count never drifts, so a quiet process keeps its runs and notifies nobody)."""
    wakeup = Wakeup()
    for _ in range(5):
        woken, (loop,) = _idle_loops(wakeup, 1)
        assert wakeup.take_idle_loop() is True
        wakeup.ring()
        loop.join(timeout=10)
        assert woken == [True]
    assert wakeup.take_idle_loop() is False


def test_a_ring_nobody_was_promised_takes_a_free_loop() -> None:
    wakeup = Wakeup()
    _, loops = _idle_loops(wakeup, 2)
    wakeup.ring()  # a record another process announced: one loop goes for it
    assert wakeup.take_idle_loop() is True
    assert wakeup.take_idle_loop() is False
    wakeup.ring_all()
    for loop in loops:
        loop.join(timeout=10)
    assert wakeup.take_idle_loop() is False  # nobody waits any more


def test_a_loop_that_timed_out_is_no_longer_free() -> None:
    wakeup = Wakeup()
    assert wakeup.idle(wakeup.generation, 0.01) is False  # the poller came back by itself
    assert wakeup.take_idle_loop() is False


def test_a_loop_rests_after_a_handed_run_only_when_nothing_else_can_be_claimable() -> None:
    """Issue 25 (`Wakeup.rests`): a loop that worked the run an admission handed it waits for
    a ring instead of claiming again only while what the process knows holds: it has looked
    ahead, nothing rang since the loop read `seen`, nothing is handed over or asked to fire,
    nothing known is due, and the look is younger than the cap."""
    now = instant(2026, 12, 4)
    wakeup = Wakeup(cap=30.0)
    seen = wakeup.generation
    assert not wakeup.rests(seen, now)  # never looked ahead: the claim looks
    wakeup.learn(NextInstants(due_at=now + ms(seconds=5), lapses_at=None, overdue_at=None), 0, now)
    assert wakeup.rests(seen, now)
    assert not wakeup.rests(seen, now + ms(seconds=5))  # the known instant has come
    assert not wakeup.rests(seen, now + ms(seconds=30))  # the look is as old as the cap
    wakeup.ring()  # something became claimable during the tick
    assert not wakeup.rests(seen, now)
    seen = wakeup.generation
    wakeup.hand("run", "claim")
    assert not wakeup.rests(seen, now)
    assert wakeup.take_handed() == ("run", "claim")
    assert wakeup.rests(seen, now)
    wakeup.lapses(now + 1)  # a lease this process knows of lapses: the sweep is due then
    assert not wakeup.rests(seen, now + 1)
    assert wakeup.rests(seen, now)
    wakeup.schedule(now)  # a record written due now
    assert not wakeup.rests(seen, now)
