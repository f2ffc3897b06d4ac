"""The waiting status read (06 §5.3 `wait` and `seen`, docs/reference/api.md): it answers at
once when the run no longer matches what the caller saw, waits for a change otherwise (woken by
this process's commits, or by its look at the store for another process's), answers 200 either
way, is bounded in length and in number, ends when the service stops, and never echoes a
refused value."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from typing import Any

import httpx
import pytest
from api_fakes import (
    BASE_URL,
    ISSUER,
    WORKFLOW,
    FakeJournal,
    FakeRunService,
    SigningKeys,
    bearer,
    settings,
)
from test_api_contract import start

from coordinator_api import create_app
from coordinator_api.waits import StatusWaits
from coordinator_core.shell.service import Caller
from coordinator_core.shell.store import StepOutcome

pytestmark = pytest.mark.anyio

CANARY = "c0ffee0c0ffee0ca"  # a well-formed tag that is never a fingerprint here
_ETAG = re.compile(r'^W/"([0-9a-f]{16})"$')


async def _admitted(client: httpx.AsyncClient, keys: SigningKeys) -> uuid.UUID:
    response = await start(client, keys)
    assert response.status_code == 201
    return uuid.UUID(response.json()["runId"])


def _tag(response: httpx.Response) -> str:
    found = _ETAG.match(response.headers["etag"])
    assert found is not None, response.headers["etag"]
    return found.group(1)


async def _read(
    client: httpx.AsyncClient, keys: SigningKeys, run_id: uuid.UUID, **query: Any
) -> tuple[httpx.Response, float]:
    began = time.monotonic()
    response = await client.get(f"/v1/runs/{run_id}", params=query, headers=bearer(keys))
    return response, time.monotonic() - began


async def test_every_status_read_carries_a_weak_etag_of_what_a_follower_watches(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService, conforms: Any
) -> None:
    run_id = await _admitted(client, keys)
    first, _ = await _read(client, keys, run_id)
    again, _ = await _read(client, keys, run_id)
    assert conforms(first).status_code == 200
    assert _tag(first) == _tag(again)
    service.move(run_id, current_step="choose-route")
    moved, _ = await _read(client, keys, run_id)
    assert _tag(moved) != _tag(first)
    service.move(run_id, cancel_requested=True)
    assert _tag((await _read(client, keys, run_id))[0]) != _tag(moved)


async def test_a_read_that_saw_something_else_answers_at_once(
    client: httpx.AsyncClient, keys: SigningKeys, conforms: Any
) -> None:
    run_id = await _admitted(client, keys)
    response, took = await _read(client, keys, run_id, wait=20, seen=CANARY)
    assert conforms(response).status_code == 200
    assert _tag(response) != CANARY
    assert took < 5  # far under the bound: it did not wait


async def test_an_unchanged_run_is_answered_when_the_wait_ends_with_the_same_tag(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService, conforms: Any
) -> None:
    run_id = await _admitted(client, keys)
    seen = _tag((await _read(client, keys, run_id))[0])
    response, took = await _read(client, keys, run_id, wait=1, seen=seen)
    assert conforms(response).status_code == 200
    assert _tag(response) == seen
    assert took >= 0.9  # it waited out its second
    assert service.looks >= 1  # and looked at the store for other processes meanwhile


async def test_a_change_committed_by_another_process_ends_the_wait(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService
) -> None:
    run_id = await _admitted(client, keys)
    seen = _tag((await _read(client, keys, run_id))[0])
    waiting = asyncio.create_task(_read(client, keys, run_id, wait=20, seen=seen))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    service.move(run_id, current_step="choose-route")  # nobody tells `changes`
    response, took = await waiting
    assert response.status_code == 200
    assert response.json()["step"] == "choose-route"
    assert _tag(response) != seen
    assert took < 10  # the look at the store found it, long before the bound


async def test_a_change_committed_in_this_process_wakes_the_wait(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService
) -> None:
    run_id = await _admitted(client, keys)
    seen = _tag((await _read(client, keys, run_id))[0])
    waiting = asyncio.create_task(_read(client, keys, run_id, wait=20, seen=seen))
    await asyncio.sleep(0.3)
    service.move(run_id, status="finished", current_step="notify", outcome="sent")
    # the store's observer, on the committing thread
    await asyncio.to_thread(
        service.changes.committed, [StepOutcome(run_id, "notify", "call", "success")]
    )
    response, took = await waiting
    assert response.json()["status"] == "finished"
    assert took < 10


async def test_an_ended_run_and_a_read_without_seen_answer_at_once(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService
) -> None:
    run_id = await _admitted(client, keys)
    _, took = await _read(client, keys, run_id, wait=20)
    assert took < 5
    service.move(run_id, status="finished", outcome="sent")
    seen = _tag((await _read(client, keys, run_id))[0])
    response, took = await _read(client, keys, run_id, wait=20, seen=seen)
    assert _tag(response) == seen
    assert took < 5


async def test_the_stop_of_the_service_ends_every_wait_at_once(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService
) -> None:
    run_id = await _admitted(client, keys)
    seen = _tag((await _read(client, keys, run_id))[0])
    waiting = asyncio.create_task(_read(client, keys, run_id, wait=20, seen=seen))
    await asyncio.sleep(0.3)
    await asyncio.to_thread(service.changes.close)
    response, took = await waiting
    assert response.status_code == 200
    assert took < 10
    _, took = await _read(client, keys, run_id, wait=20, seen=seen)  # after the stop
    assert took < 5


async def test_past_the_bound_of_waiting_reads_a_read_answers_at_once(keys: SigningKeys) -> None:
    service, journal = FakeRunService(), FakeJournal()
    app = create_app(settings(keys, status_waiters=1), service=service, journal=journal)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        run_id = await _admitted(client, keys)
        seen = _tag((await _read(client, keys, run_id))[0])
        holding = asyncio.create_task(_read(client, keys, run_id, wait=3, seen=seen))
        await asyncio.sleep(0.3)
        response, took = await _read(client, keys, run_id, wait=20, seen=seen)
        assert response.status_code == 200
        assert _tag(response) == seen
        assert took < 2  # degraded to a plain read
        first, _ = await holding
        assert first.status_code == 200


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ({"wait": "21", "seen": CANARY}, "coordinator.request.wait-invalid"),
        ({"wait": "-1", "seen": CANARY}, "coordinator.request.wait-invalid"),
        ({"wait": "canary-wait-e7c1", "seen": CANARY}, "coordinator.request.wait-invalid"),
        ({"wait": "5", "seen": "canary-seen-e7c1"}, "coordinator.request.wait-invalid"),
        ({"wait": "5", "canary-name-e7c1": "1"}, "coordinator.request.invalid"),
    ],
)
async def test_a_query_out_of_bounds_is_refused_with_a_stable_code_and_no_value(
    client: httpx.AsyncClient,
    keys: SigningKeys,
    journal: FakeJournal,
    conforms: Any,
    query: dict[str, str],
    code: str,
) -> None:
    run_id = await _admitted(client, keys)
    response = await client.get(f"/v1/runs/{run_id}", params=query, headers=bearer(keys))
    assert conforms(response).status_code == 400
    assert response.json()["code"] == code
    assert "canary" not in response.text
    assert "21" not in response.text


async def test_a_waiting_read_is_journaled_once_as_a_status_read(
    client: httpx.AsyncClient, keys: SigningKeys, journal: FakeJournal
) -> None:
    run_id = await _admitted(client, keys)
    seen = _tag((await _read(client, keys, run_id))[0])
    before = len(journal.entries)
    await _read(client, keys, run_id, wait=1, seen=seen)
    entries = journal.entries[before:]
    assert [kind for kind, _, _ in entries] == ["request", "response"]
    assert all(entry.action == "status" for _, _, entry in entries)


async def test_a_client_that_goes_away_ends_its_wait_and_frees_its_place(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService
) -> None:
    run_id = await _admitted(client, keys)
    status = service.runs[run_id].status
    waits = StatusWaits(service, limit=1)
    left = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await left.wait()
        return {"type": "http.disconnect"}

    waiting = asyncio.create_task(
        waits.until_changed(
            Caller(ISSUER, "operator-1", "ops-console", True, frozenset({WORKFLOW}), frozenset()),
            status,
            status.fingerprint,
            20,
            receive,
        )
    )
    await asyncio.sleep(0.3)
    assert waits.waiting == 1
    began = time.monotonic()
    left.set()
    answered = await waiting
    assert answered.fingerprint == status.fingerprint
    assert time.monotonic() - began < 5
    assert waits.waiting == 0
