"""07 §7.7 item 4: the in-process wake-up of idle worker loops."""

from __future__ import annotations

import threading
import time

from coordinator_core.worker import Wakeup


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


def test_the_process_sweeps_at_most_once_a_second_of_store_time() -> None:
    from datetime import UTC, datetime, timedelta

    wakeup = Wakeup()
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert wakeup.sweep_due(now)
    assert not wakeup.sweep_due(now + timedelta(milliseconds=999))
    assert wakeup.sweep_due(now + timedelta(seconds=1))
    assert wakeup.sweep_due(now)  # the clock went back: sweep at once
