"""Authoring: the strict YAML reader with positions and the decoding of the authored formats."""

from __future__ import annotations

__all__: list[str] = []
