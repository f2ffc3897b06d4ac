"""`coordinatorctl.installed.SERVICE_MODULES` names the top-level module of every requirement of
coordinator-core's `service` extra, so that a deployment command can say which are missing:
a requirement added to the extra without its module here would be missed by that check."""

from __future__ import annotations

import importlib.metadata
import re

from coordinatorctl.installed import SERVICE_MODULES

# The distributions whose import name is not their project name lowercased.
IMPORT_NAMES = {"pyjwt": "jwt", "prometheus-client": "prometheus_client"}


def _service_extra() -> list[str]:
    """The project names of the `service` extra of the installed coordinator-core."""
    names = []
    for requirement in importlib.metadata.requires("coordinator-core") or []:
        if re.search(r"""extra\s*==\s*["']service["']""", requirement):
            name = re.match(r"[A-Za-z0-9_.-]+", requirement)
            assert name is not None
            names.append(name.group(0).lower())
    return names


def test_service_modules_are_the_service_extra_requirements() -> None:
    extra = _service_extra()
    assert extra, "coordinator-core declares no `service` extra"
    assert sorted(IMPORT_NAMES.get(name, name) for name in extra) == sorted(SERVICE_MODULES)
