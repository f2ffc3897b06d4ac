"""Default loopback origins and resources: the ones the runtime examples name (file 08 §11,
file 05 §11.1 and §11.3)."""

from __future__ import annotations

__all__ = [
    "DEFAULT_COORDINATOR_URL",
    "DEFAULT_ISSUER",
    "DEFAULT_PORTS",
    "DEFAULT_RESOURCES",
    "SERVICES",
]

SERVICES = ("identity", "breg", "casework", "messaging", "scheduling", "external", "evaluation")
DEFAULT_PORTS = {
    "identity": 8100,
    "breg": 8101,
    "casework": 8102,
    "messaging": 8103,
    "scheduling": 8104,
    "external": 8105,
    "evaluation": 8106,
}
DEFAULT_RESOURCES = {
    "breg": "urn:registrystack:breg:applications",
    "casework": "urn:registrystack:casework",
    "messaging": "urn:registrystack:messaging",
    "scheduling": "urn:registrystack:scheduling",
}
DEFAULT_ISSUER = "http://127.0.0.1:8100"
# The coordinator's listener in the development example (file 05 §11.1).
DEFAULT_COORDINATOR_URL = "http://127.0.0.1:8108"
