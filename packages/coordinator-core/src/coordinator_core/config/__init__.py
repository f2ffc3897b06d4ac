"""runtime.yaml: reading (`read`), environment expressions (`expressions`), the file's rules
(`rules`) and the deployment model (`model`). Pure: resolving secrets and loading a deployment
are shell work (`coordinator_core.shell.secrets`, `coordinator_core.shell.deployment`)."""

from __future__ import annotations

__all__: list[str] = []
