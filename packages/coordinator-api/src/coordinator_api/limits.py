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
