"""Every named bound of the service HTTP API (contract 06)."""

from __future__ import annotations

from typing import Final

BODY_MAX_BYTES: Final = 65_536
"""06 §1 item 2: request bodies on every route."""

TOKEN_MAX_BYTES: Final = 16_384
"""06 §2 item 1: a compact JWS access token."""

VERIFIED_TOKENS: Final = 1024
"""Tokens kept with the key that verified their signature (`AccessVerifier`)."""

TOKEN_LEEWAY_SECONDS: Final = 30
"""06 §2 item 4: clock leeway for `exp`, `iat` and `nbf`."""

TOKEN_MAX_LIFETIME_SECONDS: Final = 3_600
"""06 §2 item 4: `exp − iat` at most."""

SUBJECT_MAX_CHARACTERS: Final = 512
"""06 §2 item 5."""

JWKS_CACHE_SECONDS: Final = 300
"""06 §2 (RECOMMENDED): how long a fetched key set is used before it is fetched again."""

JWKS_REFETCH_SECONDS: Final = 30
"""06 §2 (RECOMMENDED): at most one refetch per this many seconds (unknown `kid`, failures)."""

JWKS_TIMEOUT_SECONDS: Final = 5.0
"""05 §8.1: discovery (and, here, every key-set fetch) times out after this long."""

JWKS_MAX_BYTES: Final = 1_048_576
"""05 §8.1: a discovery document (and, here, a key set) is at most this large."""

RSA_MIN_BITS: Final = 2_048
"""Shorter RSA keys in a key set are ignored."""

IDEMPOTENCY_KEY_MAX_CHARACTERS: Final = 256
"""06 §5.1 step 6 and 05 §7.1: 1–256 visible ASCII characters."""

REASON_MAX_BYTES: Final = 256
"""06 §5.5: a reason is 1–256 bytes of UTF-8 without control characters."""

RETRY_AFTER_SECONDS: Final = 60
"""06 §8 step 8: `Retry-After` on `coordinator.event.admissions-held`."""

# -- the connection guard of `coordinator serve` (coordinator_api.connection) ------------------
# The contract names none of these (06 §1 item 1 says only that the listener speaks HTTP/1.1);
# they are fixed here, documented in docs/operations.md ("HTTP edge limits").

HEAD_MAX_BYTES: Final = 32_768
"""The request line and every header of one request, in all. Room for an access token of
`TOKEN_MAX_BYTES` (06 §2 item 1: it must reach the token check, which answers 401 for a longer
one) plus 16 KiB of everything else; a longer head is answered 431 before anything else."""

HEAD_TIMEOUT_SECONDS: Final = 10.0
"""From the connection's opening (or the first byte of a kept-alive connection's next request)
to the end of the request head; a client that has not finished its head by then is cut."""

BODY_TIMEOUT_SECONDS: Final = 10.0
"""From the end of the request head to the end of its body (at most `BODY_MAX_BYTES`)."""

KEEP_ALIVE_SECONDS: Final = 5
"""How long a connection may stay idle after an answer before the service closes it."""

MAX_CONNECTIONS: Final = 256
"""Open client connections at once; a connection beyond them is answered 503 at once and
closed, before any of its bytes is parsed. The last guard: each peer has a smaller share
(`deployment.listener.connectionsPerPeer`, default 32, and `headsPerPeer`, default 8)."""

CLOSE_LINGER_SECONDS: Final = 2.0
"""After a refusal the service sends its answer, stops writing and reads (and drops) what the
client still sends for at most this long, so that the client can read the answer before the
connection is reset."""

# -- the waiting status read (06 §5.3, an addition of this build; coordinator_api.waits) --------

STATUS_WAIT_MAX_SECONDS: Final = 20
"""`GET /v1/runs/{run}?wait=`: the longest wait (the document's `maximum`), below the client's
30 s total timeout of 09 §4, so that a waiting read is never cut by `coordinatorctl`."""

STATUS_WAITERS_MAX: Final = 64
"""Reads waiting at once in one service process; past it a waiting read answers at once, as a
plain read. A quarter of `MAX_CONNECTIONS`: waiting reads never take the connections others
need, and the look at the store (`STATUS_LOOK_SECONDS`) stays one small read."""

STATUS_LOOK_SECONDS: Final = 0.25
"""How often the waiting reads of a process look at the store, all in one read, for what
another process committed (what this process commits wakes them at once)."""
