"""Instants for tests, as the product keeps them: integer milliseconds since the Unix epoch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["instant", "ms"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


def instant(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    """The instant of a UTC calendar time."""
    return (datetime(year, month, day, hour, minute, tzinfo=UTC) - _EPOCH) // _MILLISECOND


def ms(**duration: float) -> int:
    """A duration in milliseconds, given as `timedelta`'s keywords (`ms(seconds=5)`)."""
    return timedelta(**duration) // _MILLISECOND
