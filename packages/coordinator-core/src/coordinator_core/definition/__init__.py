"""Definitions: rules, graph and availability analysis, snapshots (no file I/O)."""

from __future__ import annotations

__all__: list[str] = []
