"""Registry Coordinator core: reader, checker, pure functions, definitions and packages."""

from __future__ import annotations

__all__: list[str] = []
