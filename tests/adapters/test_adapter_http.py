"""Contract 08 §2.1: the shared HTTP client policy (destinations, DNS pinning, TLS, headers,
path segments, body limits), over real loopback sockets."""

from __future__ import annotations

import ipaddress
import threading
from typing import Any

import pytest
from adapter_support import Reply, call, command, command_key, deadline, refused, retryable, success

from coordinator_core.shell.adapters import HttpSettings
from coordinator_core.shell.adapters.breg import BregAdapter
from coordinator_core.shell.adapters.destinations import (
    METADATA_ADDRESSES,
    DestinationRefused,
    embedded_ipv4,
)
from coordinator_core.shell.adapters.http import exchange, path_segment, user_agent
from coordinator_core.shell.adapters.messaging import MessagingAdapter
from coordinator_core.shell.adapters.scheduling import SchedulingAdapter
from coordinator_core.shell.adapters.transport import TransportFailure

RECORD = {
    "data": {
        "recordIdentifier": "r",
        "revisionIdentifier": "1",
        "revisionDigest": "sha256:" + "0" * 64,
        "domainData": {},
    },
    "meta": {},
}
SCHEDULING = {"schedulingId": "s-1", "policyRevision": "r-1", "policyDigest": "sha256:00"}


def read_record(connection, record_id: str = "r-1", collection: str = "people", **kw: Any):
    return call(
        BregAdapter(kw.pop("settings", None)),
        connection,
        command("breg.read-record/v1", {"collection": collection, "recordId": record_id}),
        attempt_deadline=deadline(),
        **kw,
    )


# -- path segments ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ("plain-id_1.2~x", "plain-id_1.2~x"),
        ("a/b", "a%2Fb"),
        ("a?b#c", "a%3Fb%23c"),
        ("100%", "100%25"),
        ("..", "%2E%2E"),
        (".", "%2E"),
        ("a b+c", "a%20b%2Bc"),
        ("é", "%C3%A9"),
    ],
)
def test_path_values_are_single_percent_encoded_segments(fake, connect, value, encoded):
    assert path_segment(value) == encoded
    fake.route("GET", f"/v1/records/people/{encoded}", Reply(200, RECORD))
    assert read_record(connect("breg", profile="reader"), value) == success(RECORD)
    assert fake.requests()[-1].path == f"/v1/records/people/{encoded}"


def test_a_base_url_path_prefix_is_kept(fake, connect, live):
    fake.route("GET", "/prefix/v1/records/people/r-1", Reply(200, RECORD))
    bound = connect("breg", live.origin + "/prefix/", profile="reader")
    assert read_record(bound) == success(RECORD)


# -- headers --------------------------------------------------------------------------------------------


def test_every_request_carries_accept_user_agent_and_its_credential(fake, connect):
    fake.route("GET", "/v1/records/people/r-1", Reply(200, RECORD))
    read_record(connect("breg", profile="_reader-1.2"))
    seen = fake.requests()[-1]
    assert seen.headers["accept"] == "application/json"
    assert seen.headers["user-agent"] == user_agent()
    assert user_agent().startswith("registry-coordinator/")
    assert seen.headers["registry-access-profile"] == "_reader-1.2"
    assert seen.headers["authorization"].startswith("Bearer tok-")
    assert "idempotency-key" not in seen.headers  # a read has no key
    assert "traceparent" not in seen.headers
    token_request = fake.requests("/oauth")[-1]
    assert token_request.headers["accept"] == "application/json"
    assert token_request.headers["user-agent"] == user_agent()


def test_a_keyed_operation_sends_its_key_and_a_valid_traceparent(fake, connect):
    receipt = {
        "id": "7d444840-9dc0-11d1-b245-5ffdce74fad2",
        "status": "accepted",
        "links": {"self": "s", "cancel": "c"},
    }
    fake.route("POST", "/v1/messages", Reply(202, receipt))
    key = command_key()
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    message = {"senderProfile": "p", "to": {"phone": "+3212345678"}, "content": {"text": "t"}}
    outcome = call(
        MessagingAdapter(),
        connect("messaging"),
        command("messaging.submit-message/v1", message, key=key),
        attempt_deadline=deadline(),
        traceparent=trace,
    )
    assert outcome == success(receipt)
    seen = fake.requests()[-1]
    assert seen.headers["idempotency-key"] == key
    assert seen.headers["traceparent"] == trace
    assert seen.headers["content-type"] == "application/json"


def test_a_malformed_traceparent_is_dropped(fake, connect):
    fake.route("GET", "/v1/records/people/r-1", Reply(200, RECORD))
    read_record(connect("breg", profile="reader"), traceparent="00-bad\r\nx: y")
    assert "traceparent" not in fake.requests()[-1].headers


# -- destination policy --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "base_url",
    [
        "http://example.org",  # plain http to a name
        "http://localhost:8101",  # a name, even a loopback one
        "http://10.1.2.3:8101",  # plain http to a non-loopback address
        "http://[::ffff:127.0.0.1]:8101",  # not the numeric loopback grammar of 05 §5.1
        "https://169.254.169.254",
        "https://100.100.100.200",
        "https://[fd00:ec2::254]",
        "https://[::ffff:169.254.169.254]",
        "ftp://127.0.0.1",
    ],
)
def test_refused_destinations_send_nothing(fake, connect, base_url):
    outcome = read_record(connect("breg", base_url, profile="reader"))
    assert outcome == refused("product-refused")
    assert not fake.requests()  # the product request never reached anything


def _rfc6052(prefix: str, length: int, ipv4: str) -> str:
    """RFC 6052 §2.2: `ipv4` embedded in the IPv6 prefix `prefix`/`length` (the `u` octet,
    bits 64-71, stays zero)."""
    value = int(ipaddress.IPv6Address(prefix))
    v4 = int(ipaddress.IPv4Address(ipv4))
    layouts = {
        32: ((32, 64),),
        40: ((40, 64), (72, 80)),
        48: ((48, 64), (72, 88)),
        56: ((56, 64), (72, 96)),
        64: ((72, 104),),
        96: ((96, 128),),
    }
    remaining = 32
    for start, end in layouts[length]:
        width = end - start
        remaining -= width
        value |= ((v4 >> remaining) & ((1 << width) - 1)) << (128 - end)
    return str(ipaddress.IPv6Address(value))


def _embeddings(ipv4: str) -> list[str]:
    """Every IPv6 spelling of `ipv4` for a translator or tunnel (RFC 4291, 6052, 3056, 4380)."""
    v4 = int(ipaddress.IPv4Address(ipv4))
    spellings = [
        f"::ffff:{ipv4}",  # IPv4-mapped
        f"::{ipv4}",  # IPv4-compatible (deprecated, RFC 4291 §2.5.5.1)
        str(ipaddress.IPv6Address((0x2002 << 112) | (v4 << 80))),  # 6to4
        # Teredo: the client address obfuscated in the last 32 bits, and the server's
        str(ipaddress.IPv6Address((0x20010000 << 96) | (v4 ^ 0xFFFFFFFF))),
        str(ipaddress.IPv6Address((0x20010000 << 96) | (v4 << 64))),
    ]
    for prefix, lengths in (
        ("64:ff9b::", (96,)),  # the well-known prefix
        ("64:ff9b:1::", (48, 56, 64, 96)),  # the local-use prefix of RFC 8215
        ("2001:db8::", (32, 40, 48, 56, 64, 96)),  # a network-specific prefix
    ):
        spellings += [_rfc6052(prefix, length, ipv4) for length in lengths]
    return spellings


REFUSED_IPV4 = ("169.254.169.254", "100.100.100.200")


@pytest.mark.parametrize(
    "spelling",
    [spelling for address in REFUSED_IPV4 for spelling in _embeddings(address)],
)
def test_every_ipv6_spelling_of_a_metadata_address_is_refused(fake, connect, spelling):
    """Issue 23: `[::a9fe:a9fe]` and `[64:ff9b::a9fe:a9fe]` reached 169.254.169.254."""
    assert embedded_ipv4(ipaddress.IPv6Address(spelling)) & METADATA_ADDRESSES
    outcome = read_record(connect("breg", f"https://[{spelling}]", profile="reader"))
    assert outcome == refused("product-refused")

    def resolver(host: str, port: int) -> list[str]:
        return [spelling]

    settings = HttpSettings(resolver=resolver)
    named = read_record(connect("breg", "https://registry.example", profile="r"), settings=settings)
    assert named == refused("product-refused")
    assert not fake.requests()


@pytest.mark.parametrize("address", ["2606:4700:4700::1111", "2001:db8:1::10", "64:ff9b::808:808"])
def test_ipv6_addresses_that_embed_no_metadata_address_are_not_refused(address):
    assert not embedded_ipv4(ipaddress.IPv6Address(address)) & METADATA_ADDRESSES


def test_plain_http_to_any_numeric_loopback_is_allowed(fake, connect, live):
    fake.route("GET", "/v1/records/people/r-1", Reply(200, RECORD))
    bound = connect("breg", f"http://127.0.0.1:{live.port}", profile="reader")
    assert read_record(bound) == success(RECORD)


def test_a_name_resolving_to_a_metadata_address_is_refused(fake, connect):
    resolved: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        resolved.append(host)
        return ["203.0.113.9", "169.254.169.254"]

    settings = HttpSettings(resolver=resolver)
    outcome = read_record(
        connect("breg", "https://registry.example", profile="r"), settings=settings
    )
    assert outcome == refused("product-refused")
    assert resolved == ["registry.example"]


def test_dns_failure_is_retryable(connect):
    def resolver(host: str, port: int) -> list[str]:
        raise OSError("no such host")

    settings = HttpSettings(resolver=resolver)
    outcome = read_record(
        connect("breg", "https://registry.example", profile="r"), settings=settings
    )
    assert outcome == retryable("transport-unavailable")


def test_a_resolver_slower_than_the_connect_timeout_is_a_connect_failure(connect):
    release = threading.Event()

    def resolver(host: str, port: int) -> list[str]:
        release.wait(2)
        return ["127.0.0.1"]

    settings = HttpSettings(resolver=resolver, connect_timeout=0.2)
    try:
        message = {"senderProfile": "p", "to": {"email": "a@b.c"}, "content": {"text": "t"}}
        outcome = call(
            MessagingAdapter(settings),
            connect("messaging", "https://messaging.example"),
            command("messaging.submit-message/v1", message, key=command_key()),
            attempt_deadline=deadline(),
        )
    finally:
        release.set()
    assert outcome == retryable("transport-unavailable")  # nothing was sent


def test_https_connects_to_the_address_resolved_once_and_verifies_the_name(
    fake, connect, tls_live, tls_files
):
    resolved: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        resolved.append(host)
        return ["127.0.0.1"]

    settings = HttpSettings(resolver=resolver, ssl_context=tls_files.context)
    fake.route("GET", "/v1/scheduling", Reply(200, SCHEDULING))
    bound = connect("scheduling", f"https://product.test:{tls_live.port}")
    outcome = call(
        SchedulingAdapter(settings),
        bound,
        command("scheduling.read-scheduling/v1", {}),
        attempt_deadline=deadline(),
    )
    assert outcome == success(SCHEDULING)
    assert resolved == ["product.test"]  # once for this request (the token endpoint is loopback)
    assert fake.requests()[-1].headers["host"] == f"product.test:{tls_live.port}"


def test_a_certificate_for_another_name_fails_the_handshake_before_sending(
    fake, connect, tls_live, tls_files
):
    settings = HttpSettings(
        resolver=lambda host, port: ["127.0.0.1"], ssl_context=tls_files.context
    )
    fake.route("POST", "/v1/messages", Reply(202, {}))
    message = {"senderProfile": "p", "to": {"email": "a@b.c"}, "content": {"text": "t"}}
    outcome = call(
        MessagingAdapter(settings),
        connect("messaging", f"https://other.test:{tls_live.port}"),
        command("messaging.submit-message/v1", message, key=command_key()),
        attempt_deadline=deadline(),
    )
    assert outcome == retryable("transport-unavailable")
    assert not fake.requests()


# -- bodies ------------------------------------------------------------------------------------------


def _padded(size: int) -> bytes:
    # Insignificant whitespace fills the body: a long string would break the value bounds.
    head = b'{"schedulingId": "s", "policyRevision": "r", "policyDigest": "d"'
    return head + b" " * (size - len(head) - 1) + b"}"


@pytest.mark.parametrize("chunked", [False, True])
def test_bodies_are_read_up_to_65536_bytes(fake, connect, chunked):
    bound = connect("scheduling")
    for size, expected in ((65_536, "success"), (65_537, "refused")):
        body = _padded(size)
        reply = (
            Reply(200, chunks=[body[:40_000], body[40_000:]]) if chunked else Reply(200, raw=body)
        )
        fake.route("GET", "/v1/scheduling", reply)
        outcome = call(
            SchedulingAdapter(),
            bound,
            command("scheduling.read-scheduling/v1", {}),
            attempt_deadline=deadline(),
        )
        assert outcome.outcome == expected
        if expected == "refused":
            assert outcome == refused("invalid-response")


def test_exchange_raises_only_its_two_exception_types(live):
    settings = HttpSettings()
    with pytest.raises(DestinationRefused):
        exchange(
            "GET", "http://example.org/", headers={}, attempt_deadline=deadline(), settings=settings
        )
    with pytest.raises(DestinationRefused):
        exchange("GET", "not a url", headers={}, attempt_deadline=deadline(), settings=settings)
    with pytest.raises(TransportFailure) as failure:
        exchange(
            "GET", live.origin + "/x", headers={}, attempt_deadline=deadline(-1), settings=settings
        )
    assert failure.value.budget and not failure.value.sent
    assert str(failure.value) == "The request did not complete."
