"""The waiting status read (06 §5.3 `wait` and `seen`, an addition of this build): a read that
answers when the run no longer matches what the caller saw, instead of the caller polling.

A waiting read holds neither a thread nor a store connection while it waits: it awaits an
`asyncio.Event` on the event loop, set by

* the run service's `RunChanges` (a change of the run this process committed: its own worker
  loops and commands), handed over from the committing thread with `call_soon_threadsafe`;
* one poller per process while any read waits, which every `STATUS_LOOK_SECONDS` reads the
  fingerprints of all waited-for runs in one small store read (`RunService.fingerprints`), for
  what another process (`coordinator worker`) committed;
* the stop of the service (`RunChanges.close`), which answers at once;
* the client going away (`http.disconnect` on the request's channel), which ends the wait.

A woken read reads the run in full (in a worker thread, as every read) and answers if its
fingerprint differs from `seen` or it has ended; otherwise it waits on. When the wait runs out
it answers the run as it then stands. At most `limit` reads wait at once (`ApiSettings.
status_waiters`); past it, and once the service stops, a waiting read answers at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from typing import Final

from starlette.types import Receive

from coordinator_api.limits import STATUS_LOOK_SECONDS
from coordinator_api.problems import ApiProblem
from coordinator_core.engine.state import TERMINAL_STATUSES
from coordinator_core.shell.service import Caller, RunService, RunStatus

__all__ = ["StatusWaits", "ended"]

logger = logging.getLogger("coordinator_api")

_LOOK_FAILED: Final = "coordinator.service.status-look-failed"


def ended(status: RunStatus) -> bool:
    """A run whose watched members cannot change any more: a wait for it answers at once."""
    return status.run.state.status in TERMINAL_STATUSES


async def _went_away(receive: Receive, event: asyncio.Event) -> None:
    """Returns (setting `event`) once the client has gone away: after the body, the only
    message left on a request's channel is `http.disconnect`."""
    while (await receive())["type"] != "http.disconnect":
        pass
    event.set()


@dataclass(eq=False, slots=True)
class _Waiter:
    seen: str
    event: asyncio.Event = field(default_factory=asyncio.Event)


class StatusWaits:
    """The waiting reads of one app (see the module documentation)."""

    def __init__(
        self, service: RunService, *, limit: int, look_seconds: float = STATUS_LOOK_SECONDS
    ) -> None:
        self._service = service
        self._limit = limit
        self._look_seconds = look_seconds
        self._runs: dict[uuid.UUID, list[_Waiter]] = {}
        self._count = 0
        self._poller: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        """Reads waiting now."""
        return self._count

    async def until_changed(
        self,
        caller: Caller,
        status: RunStatus,
        seen: str,
        seconds: int,
        receive: Receive | None = None,
    ) -> RunStatus:
        """The run to answer for a read that found `status` matching `seen`: after a change,
        the end of the wait (`seconds`), the stop of the service, or the client going away
        (heard on `receive`, the request's ASGI channel once its body was read); at once past
        the bound. A run that became invisible meanwhile answers `run-absent`."""
        changes = self._service.changes
        if seconds <= 0 or self._count >= self._limit or changes.closed:
            return status
        loop = asyncio.get_running_loop()
        run_id = status.run_id
        waiter = _Waiter(seen)

        def wake() -> None:
            # A closed loop has nobody waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(waiter.event.set)

        unwatch = changes.watch(run_id, wake)
        self._runs.setdefault(run_id, []).append(waiter)
        self._count += 1
        self._look_soon(loop)
        deadline = loop.time() + seconds
        gone = None if receive is None else loop.create_task(_went_away(receive, waiter.event))
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    async with asyncio.timeout(remaining):
                        await waiter.event.wait()
                except TimeoutError:
                    break
                waiter.event.clear()
                if self._service.changes.closed or (gone is not None and gone.done()):
                    return status  # the service stops, or nobody listens: answer at once
                status = await self._read(caller, run_id)
                if status.fingerprint != seen or ended(status):
                    return status
            return await self._read(caller, run_id)
        finally:
            if gone is not None:
                gone.cancel()
            unwatch()
            self._count -= 1
            waiters = self._runs.get(run_id)
            if waiters is not None:
                waiters.remove(waiter)
                if not waiters:
                    del self._runs[run_id]

    async def _read(self, caller: Caller, run_id: uuid.UUID) -> RunStatus:
        run = await asyncio.to_thread(self._service.get_run, caller, run_id)
        if run is None or not caller.may("status", run.run.workflow_id):
            raise ApiProblem("coordinator.command.run-absent")
        return run

    # -- the poller: what other processes committed ------------------------------------------

    def _look_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        poller = self._poller
        if poller is not None and not poller.done() and poller.get_loop() is loop:
            return
        self._poller = loop.create_task(self._look(), name="status-waits")

    async def _look(self) -> None:
        """While any read waits: every `look_seconds`, the fingerprints of every waited-for
        run in one read; each waiter whose run no longer matches its `seen` is woken."""
        while self._runs:
            await asyncio.sleep(self._look_seconds)
            runs = {run_id: list(waiters) for run_id, waiters in self._runs.items()}
            if not runs:
                break
            try:
                fingerprints = await asyncio.to_thread(self._service.fingerprints, list(runs))
            except Exception:  # the store is away: the waits end at their bound
                logger.debug("waiting reads could not look", extra={"code": _LOOK_FAILED})
                continue
            for run_id, waiters in runs.items():
                current = fingerprints.get(run_id)
                for waiter in waiters:
                    if current != waiter.seen:
                        waiter.event.set()
        if asyncio.current_task() is self._poller:
            self._poller = None
