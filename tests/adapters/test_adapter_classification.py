"""Contract 08 §9: every row of the default classification table, for a read and a mutation,
over a real loopback socket (status rows) or a raw TCP server (transport rows)."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from adapter_support import (
    RawServer,
    Reply,
    call,
    command,
    command_key,
    credential_of,
    deadline,
    problem,
    read_request,
    receipt_expired,
    refused,
    reset,
    retryable,
    success,
    uncertain,
)

from coordinator_core.engine.inputs import CallOutcome
from coordinator_core.shell.adapters import AccessToken, HttpSettings, ProductConnection
from coordinator_core.shell.adapters.messaging import MessagingAdapter
from coordinator_core.shell.adapters.scheduling import SchedulingAdapter
from coordinator_sandbox.testing import free_port

READ = "scheduling.read-scheduling/v1"
MUTATION = "messaging.submit-message/v1"
MESSAGE = {
    "senderProfile": "notices",
    "to": {"email": "someone@example.org"},
    "content": {"text": "Hello"},
}
RECEIPT = {
    "id": "7d444840-9dc0-11d1-b245-5ffdce74fad2",
    "status": "accepted",
    "links": {"self": "/v1/messages/1", "cancel": "/v1/messages/1/cancel"},
}
SCHEDULING = {"schedulingId": "s-1", "policyRevision": "r-1", "policyDigest": "sha256:00"}


def read(
    connection: ProductConnection, settings: HttpSettings | None = None, **kw: Any
) -> CallOutcome:
    return call(
        SchedulingAdapter(settings),
        connection,
        command(READ, {}),
        attempt_deadline=kw.get("until", deadline()),
    )


def mutate(
    connection: ProductConnection, settings: HttpSettings | None = None, **kw: Any
) -> CallOutcome:
    return call(
        MessagingAdapter(settings),
        connection,
        command(MUTATION, MESSAGE, key=command_key()),
        attempt_deadline=kw.get("until", deadline()),
    )


@pytest.fixture
def reader(connect):
    return connect("scheduling")


@pytest.fixture
def writer(connect):
    return connect("messaging")


def test_expected_2xx_with_a_valid_body_is_success(fake, reader, writer):
    fake.route("GET", "/v1/scheduling", Reply(200, SCHEDULING))
    fake.route("POST", "/v1/messages", Reply(202, RECEIPT))
    assert read(reader) == success(SCHEDULING)
    assert mutate(writer) == success(RECEIPT)


STATUS_ROWS = [
    # (reply, read outcome, mutation outcome)
    (Reply(408), retryable("transport-unavailable"), retryable("transport-unavailable")),
    (
        problem(503, "service.unavailable"),
        retryable("transport-unavailable"),
        retryable("transport-unavailable"),
    ),
    (Reply(429), retryable("rate-limited"), retryable("rate-limited")),
    (Reply(500), retryable("transport-unavailable"), uncertain("transport-uncertain")),
    (Reply(502), retryable("transport-unavailable"), uncertain("transport-uncertain")),
    (Reply(503), retryable("transport-unavailable"), uncertain("transport-uncertain")),
    (problem(503, "other"), retryable("transport-unavailable"), uncertain("transport-uncertain")),
    (problem(400, "request.invalid"), refused("invalid-command"), refused("invalid-command")),
    (Reply(413), refused("invalid-command"), refused("invalid-command")),
    (
        problem(401, "authentication.refused"),
        refused("product-forbidden"),
        refused("product-forbidden"),
    ),
    (Reply(403), refused("product-forbidden"), refused("product-forbidden")),
    (
        problem(404, "template.not-found"),
        refused("product-not-found"),
        refused("product-not-found"),
    ),
    (
        problem(409, "idempotency.key-reused"),
        refused("product-refused"),
        refused("product-refused"),
    ),
    (problem(410, "idempotency.expired"), refused("product-refused"), receipt_expired()),
    (Reply(410), refused("product-refused"), refused("product-refused")),
    (problem(422, "content.invalid"), refused("product-refused"), refused("product-refused")),
    (Reply(418), refused("product-refused"), refused("product-refused")),
    (
        Reply(302, headers={"location": "/v1/elsewhere"}),
        refused("product-refused"),
        uncertain("remote-uncertain"),
    ),
    (
        Reply(307, headers={"location": "/v1/elsewhere"}),
        refused("product-refused"),
        uncertain("remote-uncertain"),
    ),
    # A 2xx that is not the operation's expected answer is an invalid response.
    (Reply(204), refused("invalid-response"), uncertain("invalid-response")),
]


@pytest.mark.parametrize(("reply", "as_read", "as_mutation"), STATUS_ROWS)
def test_status_rows(fake, reader, writer, reply, as_read, as_mutation):
    fake.route("GET", "/v1/scheduling", reply)
    fake.route("POST", "/v1/messages", reply)
    fake.route("GET", "/v1/elsewhere", Reply(200, SCHEDULING))
    assert read(reader) == as_read
    assert mutate(writer) == as_mutation
    assert not fake.requests("/v1/elsewhere"), "a redirect was followed"


def test_retry_after_is_not_kept_the_retry_policy_ignores_it(fake, reader):
    fake.route("GET", "/v1/scheduling", Reply(429, headers={"retry-after": "7"}))
    assert read(reader) == retryable("rate-limited")


def test_a_problem_code_counts_only_when_its_status_matches(fake, writer):
    # 410 whose body claims status 409: classified by status alone → not receipt-expired.
    fake.route("POST", "/v1/messages", Reply(410, {"status": 409, "code": "idempotency.expired"}))
    assert mutate(writer) == refused("product-refused")
    # 503 whose problem body says 500: other 5xx.
    fake.route("POST", "/v1/messages", Reply(503, {"status": 500, "code": "service.unavailable"}))
    assert mutate(writer) == uncertain("transport-uncertain")
    # A boolean status never equals a number.
    fake.route("POST", "/v1/messages", Reply(410, {"status": True, "code": "idempotency.expired"}))
    assert mutate(writer) == refused("product-refused")


@pytest.mark.parametrize(
    "raw",
    [
        b'{"schedulingId": "a", "schedulingId": "b", "policyRevision": "r", "policyDigest": "d"}',
        b"{not json",
        b'{"schedulingId": NaN, "policyRevision": "r", "policyDigest": "d"}',
        b"\xff\xfe{}",
        b"[" * 40 + b"]" * 40,
        b"",
    ],
    ids=["duplicate-names", "syntax", "nan", "not-utf8", "too-deep", "empty"],
)
def test_2xx_with_an_unreadable_body_is_invalid_response(fake, reader, writer, raw):
    fake.route("GET", "/v1/scheduling", Reply(200, raw=raw))
    fake.route("POST", "/v1/messages", Reply(202, raw=raw))
    assert read(reader) == refused("invalid-response")
    assert mutate(writer) == uncertain("invalid-response")


def test_2xx_with_the_wrong_shape_is_invalid_response(fake, reader, writer):
    fake.route("GET", "/v1/scheduling", Reply(200, {"schedulingId": 1}))
    fake.route("POST", "/v1/messages", Reply(202, {"id": "not-a-uuid"}))
    assert read(reader) == refused("invalid-response")
    assert mutate(writer) == uncertain("invalid-response")


def test_an_oversize_2xx_body_is_invalid_response(fake, reader, writer):
    padding = "x" * 70_000
    fake.route("GET", "/v1/scheduling", Reply(200, {**SCHEDULING, "pad": padding}))
    fake.route("POST", "/v1/messages", Reply(202, {**RECEIPT, "pad": padding}))
    assert read(reader) == refused("invalid-response")
    assert mutate(writer) == uncertain("invalid-response")


# -- transport rows ---------------------------------------------------------------------------------

# What the timeouts below must cut short takes this long (a total timeout, a silent product, a
# drip): an exchange that the short timeout under test did not end could not end before it.
# The tests bound the time generously below it, so that a loaded machine cannot make them flaky.
SLOW = 15.0
WELL_BEFORE_SLOW = SLOW / 3


def test_connection_refused_is_retryable_for_reads_and_mutations(connect):
    origin = f"http://127.0.0.1:{free_port()}"
    assert read(connect("scheduling", origin)) == retryable("transport-unavailable")
    assert mutate(connect("messaging", origin)) == retryable("transport-unavailable")


def test_connect_timeout_before_sending_is_retryable_even_for_a_mutation(connect):
    # A listener with a full backlog never completes the handshake: the connect times out.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    held = [socket.create_connection(("127.0.0.1", port))]
    try:
        for _ in range(3):  # fill the accept queue whatever its exact size
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            held.append(filler)
        # Only the connect timeout can end the exchange before the total one.
        quick = HttpSettings(connect_timeout=0.2, total_timeout=SLOW)
        began = time.monotonic()
        outcome = mutate(connect("messaging", f"http://127.0.0.1:{port}"), quick)
        assert outcome == retryable("transport-unavailable")
        assert time.monotonic() - began < WELL_BEFORE_SLOW
    finally:
        for sock in held:
            sock.close()
        listener.close()


def _answer_nothing(conn: socket.socket) -> None:
    read_request(conn)
    time.sleep(SLOW)


def _reset_after_request(conn: socket.socket) -> None:
    read_request(conn)
    reset(conn)


def _close_after_request(conn: socket.socket) -> None:
    read_request(conn)
    conn.shutdown(socket.SHUT_RDWR)


def _half_answer(conn: socket.socket) -> None:
    read_request(conn)
    conn.sendall(b'HTTP/1.1 202 Accepted\r\ncontent-length: 100\r\n\r\n{"id":')
    reset(conn)


@pytest.mark.parametrize(
    "behaviour",
    [_reset_after_request, _close_after_request, _half_answer],
    ids=["reset", "closed", "truncated-body"],
)
def test_failure_after_sending_began(connect, behaviour):
    server = RawServer(behaviour)
    try:
        assert read(connect("scheduling", server.origin)) == retryable("transport-unavailable")
        assert mutate(connect("messaging", server.origin)) == uncertain("transport-uncertain")
    finally:
        server.close()


def test_timeout_waiting_for_the_answer(connect):
    server = RawServer(_answer_nothing)
    quick = HttpSettings(total_timeout=0.3)
    try:
        began = time.monotonic()
        assert read(connect("scheduling", server.origin), quick) == retryable(
            "transport-unavailable"
        )
        assert mutate(connect("messaging", server.origin), quick) == uncertain(
            "transport-uncertain"
        )
        assert time.monotonic() - began < WELL_BEFORE_SLOW
    finally:
        server.close()


def test_attempt_budget_exhausted(connect):
    server = RawServer(_answer_nothing)
    try:
        began = time.monotonic()
        outcome = read(connect("scheduling", server.origin), until=time.monotonic() + 0.3)
        assert outcome == retryable("attempt-timeout")
        outcome = mutate(connect("messaging", server.origin), until=time.monotonic() + 0.3)
        assert outcome == uncertain("attempt-timeout")
        assert time.monotonic() - began < WELL_BEFORE_SLOW
    finally:
        server.close()


def test_no_budget_left_sends_nothing(fake, connect):
    fake.route("GET", "/v1/scheduling", Reply(200, SCHEDULING))
    # The worker supplies the credential; no budget remains for the product request.
    adapter = SchedulingAdapter()
    bound = connect("scheduling")
    token = adapter.obtain_credential(bound, credential_of(), attempt_deadline=deadline())
    assert isinstance(token, AccessToken)
    outcome = call(
        adapter, bound, command(READ, {}), attempt_deadline=time.monotonic() - 1, credential=token
    )
    assert outcome == retryable("attempt-timeout")
    assert not fake.requests()


def test_a_slow_drip_cannot_outlast_the_total_timeout(fake, reader):
    chunks = (
        [b'{"schedulingId": "s", ']
        + [b" "] * 100
        + [b'"policyRevision": "r", "policyDigest": "d"}']
    )
    # 102 chunks 0.15 s apart: the whole answer takes SLOW; each chunk comes within the read
    # timeout, so only the total timeout can end it.
    fake.route("GET", "/v1/scheduling", Reply(200, chunks=chunks, chunk_delay=SLOW / 100))
    quick = HttpSettings(total_timeout=0.4)
    began = time.monotonic()
    assert read(reader, quick) == retryable("transport-unavailable")
    assert 0.35 <= time.monotonic() - began < WELL_BEFORE_SLOW
