"""The outage record and the backoff of shell/runtime/outage.py (09 §5 step 7): one loss and one
recovery line per outage, stale reports ignored, delays doubling from 100 ms to at most 5 s."""

from __future__ import annotations

import io
import json

from coordinator_core.shell.runtime.outage import (
    BACKOFF_CAP_SECONDS,
    BACKOFF_FIRST_SECONDS,
    STORE_AVAILABLE,
    STORE_UNAVAILABLE,
    Backoff,
    StoreOutage,
)
from coordinator_core.shell.runtime.service_log import ServiceLog


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _outage() -> tuple[StoreOutage, io.StringIO, _Clock]:
    stream, clock = io.StringIO(), _Clock()
    return StoreOutage(ServiceLog(stream), clock=clock), stream, clock


def _lines(stream: io.StringIO) -> list[dict[str, str]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_an_outage_is_logged_once_when_lost_and_once_when_back() -> None:
    outage, stream, clock = _outage()
    outage.answered(99.0)  # nothing was lost: nothing to say
    outage.lost(100.0)
    clock.now = 101.0
    outage.lost(100.5)
    outage.lost(101.0)
    assert outage.unreachable
    clock.now = 102.0
    outage.answered(101.5)
    outage.answered(101.9)
    assert not outage.unreachable
    lines = _lines(stream)
    assert [(line["level"], line["code"]) for line in lines] == [
        ("warning", STORE_UNAVAILABLE),
        ("info", STORE_AVAILABLE),
    ]
    assert all(set(line) == {"time", "level", "code", "message"} for line in lines)


def test_a_look_begun_before_the_last_change_does_not_flip_the_record() -> None:
    outage, stream, clock = _outage()
    outage.lost(100.0)  # lost at 100
    outage.answered(99.0)  # a tick begun before the loss succeeded: not a recovery
    assert outage.unreachable
    clock.now = 105.0
    outage.answered(104.0)  # back at 105
    outage.lost(104.5)  # a tick begun before the recovery failed: not a new outage
    assert not outage.unreachable
    clock.now = 110.0
    outage.lost(109.0)  # begun after the recovery: a second outage
    assert outage.unreachable
    codes = [line["code"] for line in _lines(stream)]
    assert codes == [STORE_UNAVAILABLE, STORE_AVAILABLE, STORE_UNAVAILABLE]


def test_the_backoff_doubles_from_100_ms_to_at_most_5_s_with_jitter() -> None:
    highest = Backoff(draw=lambda: 1.0)
    delays = [highest.next() for _ in range(10)]
    assert delays[0] == BACKOFF_FIRST_SECONDS
    assert delays[:6] == [0.1 * 2**n for n in range(6)]
    assert max(delays) == BACKOFF_CAP_SECONDS
    assert delays[-1] == BACKOFF_CAP_SECONDS
    lowest = Backoff(draw=lambda: 0.0)
    assert [lowest.next() for _ in range(3)] == [0.05, 0.1, 0.2]
    jittered = Backoff()
    for _ in range(100):
        assert 0 < jittered.next() <= BACKOFF_CAP_SECONDS


def test_a_reset_backoff_starts_again_from_the_first_delay() -> None:
    backoff = Backoff(draw=lambda: 1.0)
    for _ in range(5):
        backoff.next()
    backoff.reset()
    assert backoff.next() == BACKOFF_FIRST_SECONDS
