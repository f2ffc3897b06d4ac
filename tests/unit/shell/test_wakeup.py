"""07 §7.7 item 4: the in-process wake-up of idle worker loops."""

from __future__ import annotations

import threading

from coordinator_core.worker import Wakeup


def test_a_ring_before_the_wait_is_not_lost() -> None:
    wakeup = Wakeup()
    seen = wakeup.generation
    wakeup.ring()  # came while the loop's tick was looking
    assert wakeup.wait(seen, timeout=5.0) is True


def test_without_a_ring_the_wait_times_out() -> None:
    wakeup = Wakeup()
    assert wakeup.wait(wakeup.generation, timeout=0.01) is False


def test_one_ring_wakes_every_waiting_loop() -> None:
    wakeup = Wakeup()
    seen = wakeup.generation
    woken: list[bool] = []
    ready = threading.Barrier(4)

    def loop() -> None:
        ready.wait()
        woken.append(wakeup.wait(seen, timeout=10.0))

    threads = [threading.Thread(target=loop) for _ in range(3)]
    for thread in threads:
        thread.start()
    ready.wait()
    wakeup.ring()
    for thread in threads:
        thread.join(timeout=10)
    assert woken == [True, True, True]
