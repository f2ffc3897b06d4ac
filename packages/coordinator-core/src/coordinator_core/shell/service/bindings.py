"""The one live-binding check (05 §10): a definition's binding digest under the current
runtime file, compared with the digest a run recorded at admission.

The service start, readiness, every admission transaction, retry-same, reconcile, the
inspection's recovery summary and the worker's pre-dispatch check (07 §7.4 step 4) all ask this
object. A definition the process does not serve is restored from the sealed snapshot stored
for its digest, through the process's `DefinitionCache` (the one way to open a snapshot).
"""

from __future__ import annotations

import threading
from typing import Final

from coordinator_core.config.model import Deployment, DeploymentRefused, binding_digest
from coordinator_core.definition.snapshot import Snapshot
from coordinator_core.engine import DefinitionError, Instant
from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.execution.codec import DefinitionCache
from coordinator_core.shell.store import Store, StoredRun

__all__ = ["UNBOUND", "LiveBindings"]

UNBOUND: Final = "unbound"
"""The digest of a workflow using a connection the runtime file no longer binds, or of a
definition that cannot be restored: never equal to a recorded digest."""


class LiveBindings:
    """Binding digests by definition digest, computed once per process (the runtime file is
    loaded once, so a digest cannot change while the process runs)."""

    def __init__(
        self, deployment: Deployment, definitions: DefinitionCache, store: Store | None = None
    ) -> None:
        self._deployment = deployment
        self._definitions = definitions
        self._store = store
        self._digests: dict[str, str] = {}
        self._lock = threading.Lock()

    def of(self, snapshot: Snapshot) -> str:
        """05 §10 for `snapshot` under the current runtime file; `UNBOUND` when a connection it
        uses is no longer bound."""
        digest = snapshot.definition_digest
        with self._lock:
            known = self._digests.get(digest)
        if known is not None:
            return known
        try:
            computed = binding_digest(self._deployment, snapshot.workflow)
        except DeploymentRefused:
            computed = UNBOUND
        with self._lock:
            self._digests[digest] = computed
        return computed

    def matches(self, run: StoredRun, snapshot: Snapshot) -> bool:
        """The run's recorded binding digest is the one its snapshot gets now."""
        return self.of(snapshot) == run.binding_digest

    def all_match(self, pairs: frozenset[tuple[str, str]]) -> bool:
        """Every (definition digest, recorded binding digest) pair still matches; a definition
        that cannot be found or restored counts as a conflict."""
        return all(self._of_digest(definition) == recorded for definition, recorded in pairs)

    def unsettled_match(self, now: Instant) -> bool:
        """The check over every unsettled run of the store (raises the store's refusals)."""
        assert self._store is not None, "a check over the store's runs needs the store"
        return self.all_match(self._store.reads.unsettled_bindings(now))

    def _of_digest(self, definition_digest: str) -> str:
        try:
            snapshot, _ = self._definitions.restore_digest(definition_digest)
        except (CoordinatorError, DefinitionError, ValueError):
            return UNBOUND
        return self.of(snapshot)
