"""The JSON Schema dialect of the authored formats and its validators (`dialect`)."""

from __future__ import annotations

__all__: list[str] = []
