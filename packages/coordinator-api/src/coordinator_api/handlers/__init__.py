"""HTTP handlers, one module per operationId prefix (Connexion `RelativeResolver`)."""

from __future__ import annotations

__all__: list[str] = []
