"""`process.settle_heap`: what start-up left unreachable is collected, what survived is moved
out of the collector's way, so that a full collection no longer walks the start-up heap."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from coordinator_core.shell.observe import metrics
from coordinator_core.shell.runtime import process


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the rest of the test session keeps its ordinary collector


def test_start_up_garbage_is_collected_and_what_survived_is_frozen(unfrozen: None) -> None:
    kept = _Node()
    first, second = _Node(), _Node()
    first.other, second.other = second, first  # a cycle only the collector can free
    gone = weakref.ref(first)
    del first, second
    assert gc.get_freeze_count() == 0

    process.settle_heap()

    assert gone() is None, "an unreachable cycle is collected, not frozen forever"
    frozen = gc.get_freeze_count()  # frozen objects that die since leave the count
    assert (
        0 < frozen <= (metrics.REGISTRY.get_sample_value("coordinator_process_frozen_objects") or 0)
    )
    assert gc.is_tracked(kept)
    assert not any(found is kept for found in gc.get_objects()), "kept is in the frozen heap"
    gc.collect()
    assert not any(found is kept for found in gc.get_objects()), "a collection leaves it there"
