"""Instants of the engine: integer milliseconds since the Unix epoch (UTC), and RFC 3339 text.

The engine never reads a clock: every instant reaches it as an argument. Milliseconds are the
resolution of the scenario runner's virtual clock (file 04 §4.1) and of the retry delays
(100 ms, 500 ms; file 07 §7.4), and SQLite stores times as integer milliseconds (07 §14.3).
"""

from __future__ import annotations

import re
from typing import Final

from coordinator_core.jsonschema.dialect import format_matches

__all__ = ["Instant", "format_instant", "parse_instant"]

Instant = int
"""Milliseconds since 1970-01-01T00:00:00Z."""

_DATE_TIME: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:[Zz]|([+-])(\d{2}):(\d{2}))"
)


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def _civil_from_days(days: int) -> tuple[int, int, int]:
    days += 719468
    era = days // 146097
    day_of_era = days - era * 146097
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36524 - day_of_era // 146096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    month_index = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * month_index + 2) // 5 + 1
    month = month_index + (3 if month_index < 10 else -9)
    return year_of_era + era * 400 + (month <= 2), month, day


def parse_instant(text: object) -> Instant | None:
    """The instant of an RFC 3339 date-time with an offset, or None if `text` is not one.

    The grammar is the dialect's `date-time` format (file 01 §12). A leap second `:60` is the
    first instant of the next minute; fractions finer than a millisecond are truncated.
    """
    if not isinstance(text, str) or not format_matches("date-time", text):
        return None
    match = _DATE_TIME.fullmatch(text)
    if match is None:  # pragma: no cover - format_matches accepted the same grammar
        return None
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    fraction = (match.group(7) or "")[:3].ljust(3, "0")
    seconds = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    if match.group(8) is not None:
        offset = int(match.group(9)) * 3600 + int(match.group(10)) * 60
        seconds -= offset if match.group(8) == "+" else -offset
    return seconds * 1000 + int(fraction)


def format_instant(instant: Instant) -> str:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ` for an instant (the form of audit times, file 07 §11)."""
    seconds, millis = divmod(instant, 1000)
    days, rest = divmod(seconds, 86400)
    year, month, day = _civil_from_days(days)
    hour, rest = divmod(rest, 3600)
    minute, second = divmod(rest, 60)
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{millis:03d}Z"
