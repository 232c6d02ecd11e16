"""A long-lived daemon keeps no per-scope memory: memory stays flat over many operations.

Every in-memory table of the runner (unit locks, joins of duplicates, removals in
flight, damaged records) is bounded by the work in flight, not by the scopes ever
served. The run is connects and removes over distinct attachments; the journal lives
on a tmpfs so the run measures the runner, not the disk. What the runner's own modules
keep across the second half is measured with tracemalloc: the code before this test
kept ~490 bytes per lifecycle there (a lock and a fence mark per unit), so the 1,000
measured lifecycles would keep ~480 KiB against a bound of 16 KiB.

10,000 operations (5,000 lifecycles): 4,000 to reach a daemon's steady state, then
1,000 under tracemalloc (which slows every allocation, so it watches only the end).
"""

from __future__ import annotations

import gc
import tempfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

import plugins.sdk.runner as runner_package
from plugins.sdk import CleanupStatus
from plugins.sdk.runner import NO_CRASH

from . import node as n

LIFECYCLES = 5_000  # one connect and one remove each: 10,000 operations
MEASURED = 1_000  # the last lifecycles, under tracemalloc
RUNNER_GROWTH_LIMIT = 16 * 1024
"""Bytes allocated by the runner's modules that the second half may keep."""
RUNNER = str(Path(runner_package.__file__).parent)


@pytest.fixture
def toy() -> Iterator[n.ToyNode]:
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as root:
        # The toy kernel in memory: this run never crashes nor shares it with another
        # process, and its file's I/O was a quarter of the run's CPU. What is measured is
        # the runner's memory (tracemalloc's filter), over the same journal on a tmpfs.
        node = n.ToyNode(Path(root), NO_CRASH, kernel_in_memory=True)
        yield node
        node.close()


def lifecycle(toy: n.ToyNode, i: int) -> None:
    scope = f"att-{i}"
    toy.endpoint.connect_network(n.connect(op=f"connect-{i}", scope=scope))
    removed = toy.endpoint.remove_network(n.remove(op=f"remove-{i}", scope=scope))
    assert removed.status is CleanupStatus.CLEANED


@pytest.mark.timeout(900)
def test_many_operations_keep_the_runners_memory_flat(toy: n.ToyNode) -> None:
    for i in range(LIFECYCLES - MEASURED):
        lifecycle(toy, i)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i in range(LIFECYCLES - MEASURED, LIFECYCLES):
            lifecycle(toy, i)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    runner_only = [tracemalloc.Filter(inclusive=True, filename_pattern=f"{RUNNER}/*")]
    growth = after.filter_traces(runner_only).compare_to(
        before.filter_traces(runner_only), "lineno"
    )
    kept = sum(stat.size_diff for stat in growth)
    biggest = "\n".join(str(stat) for stat in growth[:5])
    assert kept < RUNNER_GROWTH_LIMIT, (
        f"the runner kept {kept} bytes over {MEASURED} lifecycles:\n{biggest}"
    )
    assert toy.runner.in_memory_sizes() == {
        "unit_locks": 0,
        "joins": 0,
        "quiescing": 0,
        "damaged": 0,
    }
