"""Benchmark: sealing and opening 2 KB values (contract 07 §10) on this machine.

Seals then opens 10,000 values whose canonical JSON is exactly 2,048 bytes, and measures, in the
same run, plain `hashlib.sha256` over the same bytes as a baseline, so the printed ratio compares
across machines. Also reports the crypto-only path (no JSON encoding or parsing) to show where
the time goes. Prints plain `name value` lines; times are the median of several rounds.

Run: `python scripts/bench_sealing.py` (`nox -s bench -- sealing`); `--smoke` seals 100 values
in one round (CI: `nox -s bench_smoke`), so it proves the bench runs and means nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from collections.abc import Callable

from coordinator_core.shell import sealing
from coordinator_core.shell.sealing import Sealer, StateKeyRing
from coordinator_core.values import canonical_json

COUNT = 10_000
VALUE_BYTES = 2_048
ROUNDS = 5
DATABASE = "bench-db"
RUN = "0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4f"


def value_of_size(size: int) -> dict[str, object]:
    """A JSON object whose RFC 8785 bytes are exactly `size` long."""
    value: dict[str, object] = {"applicationId": RUN, "decision": "approved", "notes": ""}
    padding = size - len(canonical_json(value))
    value["notes"] = "n" * padding
    assert len(canonical_json(value)) == size
    return value


def median_seconds(action: Callable[[], object]) -> float:
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    global COUNT, ROUNDS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="100 values, one round (CI)")
    if parser.parse_args().smoke:
        COUNT, ROUNDS = 100, 1
        print("# SMOKE RUN: 100 values, one round, the figures mean nothing")
    ring = StateKeyRing(1, {1: bytes(range(1, 33))})
    box = Sealer(ring, DATABASE)
    value = value_of_size(VALUE_BYTES)
    plaintext = canonical_json(value)
    stored = box.seal(value, run_id=RUN, purpose="input")
    assert box.open(stored, run_id=RUN, purpose="input") == value
    scope = sealing._context_parts(DATABASE, RUN, "input", "")

    def baseline() -> None:
        for _ in range(COUNT):
            hashlib.sha256(plaintext).digest()

    def seal_all() -> None:
        for _ in range(COUNT):
            box.seal(value, run_id=RUN, purpose="input")

    def open_all() -> None:
        for _ in range(COUNT):
            box.open(stored, run_id=RUN, purpose="input")

    def seal_bytes_all() -> None:
        for _ in range(COUNT):
            box._seal_bytes(plaintext, scope)

    def open_bytes_all() -> None:
        for _ in range(COUNT):
            box._open_bytes(stored, scope)

    t_hash = median_seconds(baseline)
    t_seal = median_seconds(seal_all)
    t_open = median_seconds(open_all)
    t_seal_bytes = median_seconds(seal_bytes_all)
    t_open_bytes = median_seconds(open_bytes_all)

    def per_op_us(seconds: float) -> float:
        return seconds / COUNT * 1e6

    envelope_bytes = len(plaintext) + sealing.ENVELOPE_OVERHEAD
    print(f"sealing.count {COUNT}")
    print(f"sealing.value_bytes {VALUE_BYTES}")
    print(f"sealing.envelope_bytes {envelope_bytes}")
    print(f"sealing.stored_chars {len(stored[sealing.SEALED_MEMBER])}")
    print(f"sealing.sha256_us_per_op {per_op_us(t_hash):.2f}")
    print(f"sealing.seal_us_per_op {per_op_us(t_seal):.2f}")
    print(f"sealing.open_us_per_op {per_op_us(t_open):.2f}")
    print(f"sealing.seal_open_us_per_op {per_op_us(t_seal + t_open):.2f}")
    print(f"sealing.seal_bytes_us_per_op {per_op_us(t_seal_bytes):.2f}")
    print(f"sealing.open_bytes_us_per_op {per_op_us(t_open_bytes):.2f}")
    print(f"sealing.seal_to_sha256_ratio {t_seal / t_hash:.1f}")
    print(f"sealing.open_to_sha256_ratio {t_open / t_hash:.1f}")
    print(f"sealing.seal_open_to_sha256_ratio {(t_seal + t_open) / t_hash:.1f}")


if __name__ == "__main__":
    main()
