"""PostgreSQL URLs of the test suites."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["database_url"]


def database_url(url: str, database: str, user: str | None = None) -> str:
    """`url` pointing at another database (and, optionally, logging in as another user)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        netloc = user + "@" + netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, "/" + database, parts.query, parts.fragment))
