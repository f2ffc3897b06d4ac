"""A released migration is verified by the checksum of its bytes; versions 1 and 2 also by the
checksum of their bytes before the store moved under `shell/` (07 §14.4), and by nothing else."""

from __future__ import annotations

import hashlib

import pytest

from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.store.guards import check_known
from coordinator_core.shell.store.migrations import (
    MIGRATIONS_DIR,
    RELOCATED_CHECKSUMS,
    supported_migrations,
)


def _current() -> dict[int, str]:
    return {migration.version: migration.checksum for migration in supported_migrations()}


def test_only_the_relocated_versions_have_an_earlier_checksum() -> None:
    assert sorted(RELOCATED_CHECKSUMS) == [1, 2]
    for migration in supported_migrations():
        assert migration.earlier_checksums == RELOCATED_CHECKSUMS.get(migration.version, ())
        assert migration.checksum not in migration.earlier_checksums
        for earlier in migration.earlier_checksums:
            assert earlier.startswith("sha256:") and len(earlier) == len(migration.checksum)


def test_the_checksum_is_the_sha256_of_the_revision_file() -> None:
    paths = sorted((MIGRATIONS_DIR / "versions").glob("v[0-9]*.py"))
    for migration, path in zip(supported_migrations(), paths, strict=True):
        assert migration.checksum == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_ledger_carrying_the_earlier_checksums_verifies() -> None:
    ledger = _current()
    check_known(ledger)
    for version, (earlier,) in RELOCATED_CHECKSUMS.items():
        ledger[version] = earlier
    check_known(ledger)
    migration = {m.version: m for m in supported_migrations()}
    for version, (earlier,) in RELOCATED_CHECKSUMS.items():
        assert migration[version].accepts(earlier)
        assert migration[version].accepts(migration[version].checksum)


@pytest.mark.parametrize(
    "version, checksum",
    [
        (1, "sha256:" + "0" * 64),
        (1, RELOCATED_CHECKSUMS[2][0]),  # another version's earlier checksum
        (2, RELOCATED_CHECKSUMS[1][0]),
        (3, RELOCATED_CHECKSUMS[1][0]),  # version 3 never had other bytes
        (3, "sha256:" + "f" * 64),
    ],
)
def test_any_other_checksum_still_refuses(version: int, checksum: str) -> None:
    ledger = _current()
    ledger[version] = checksum
    with pytest.raises(CoordinatorError) as refused:
        check_known(ledger)
    assert refused.value.code == "coordinator.deployment.schema-mismatch"
    assert not {m.version: m for m in supported_migrations()}[version].accepts(checksum)
