"""The offline pipeline on top of the pure core: check a project, run its scenarios, explain it."""

from __future__ import annotations

__all__: list[str] = []
