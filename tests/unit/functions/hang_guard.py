"""A hang detector for the break-out and fuzz suites: not a performance assertion.

The operation budget is what bounds a function; this only turns a would-be endless test into a
failure. The ceiling is far above anything a correct interpreter needs on any machine, so it
never measures speed (benchmarks do that: `nox -s bench -- functions`).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

HANG_SECONDS = 60.0


class Hung(AssertionError):
    """The guarded block did not finish: the interpreter is not bounded."""


@contextmanager
def no_hang(seconds: float = HANG_SECONDS) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise Hung("the guarded block did not finish")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
