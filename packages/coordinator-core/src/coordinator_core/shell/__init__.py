"""The imperative shell: everything that does I/O. The pure half of core never imports it."""

from __future__ import annotations

__all__: list[str] = []
