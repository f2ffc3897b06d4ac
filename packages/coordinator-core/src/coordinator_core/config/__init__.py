"""runtime.yaml in one family: reading and checking (`read`, with the environment expressions
of `expressions` and the file's rules of `rules`), building (`build`) and the typed deployment
model (`model`, with the binding digest of 05 §10). Pure: the path rules and the file read of a
deployment, and resolving its secrets, are shell work (`coordinator_core.shell.deployment`,
`coordinator_core.shell.secrets`)."""

from __future__ import annotations

__all__: list[str] = []
