"""`Store`: the one store the service and the worker use, on PostgreSQL and SQLite alike.

Each public method is one transaction and states the rule it keeps. Transitions are never
computed here: the engine computes them, inside the transaction, through a `Decide` callback
that receives the locked `RunSnapshot` and returns a `RunWrite`. The store adds what only the
store can do: verifying the deployment, taking locks in the contract's order (admission lock →
control → step record → run, 07 §6.1), fencing leases, checking the write's invariants and
writing it.

One class, its methods kept by concern in the modules of this package: `base` (opening,
transactions, locks, the checked write every transition goes through), `reads`, `admission`,
`work` (the worker's claim, sweeps, fences and finish), `operations` (cancel, retry-same,
reconcile, holds, retention) and `wakeups` (notifications across processes); the statements
they run are built once in `statements`, the rules every write keeps are in `invariants`.
"""

from __future__ import annotations

from coordinator_core.shell.store.admission import StoreAdmissions
from coordinator_core.shell.store.invariants import StaleLease, StoreInvariantError
from coordinator_core.shell.store.operations import StoreOperations
from coordinator_core.shell.store.reads import StoreReads
from coordinator_core.shell.store.wakeups import StoreWakeUps
from coordinator_core.shell.store.work import FIRE_BATCH, LEASE_SECONDS, StoreWork

__all__ = ["FIRE_BATCH", "LEASE_SECONDS", "StaleLease", "Store", "StoreInvariantError"]


class Store(StoreReads, StoreAdmissions, StoreWork, StoreOperations, StoreWakeUps):
    """The store of one deployment, opened by the service or a worker process.

    Open it with `Store.open`, which refuses a store that is not at this build's schema version
    or does not belong to the deployment (07 §14.4, §15). Every method takes the caller's `now`
    (an aware datetime; stored truncated to milliseconds): the store never reads a clock, so
    the same instants reach the engine and the rows.
    """
