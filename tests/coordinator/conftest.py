"""The coordinator program's node, one per test module that asks for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.coordinator_process import CoordinatorRig


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorRig]:
    """Real service processes on the fake kernel server and the coordinator program over
    them, started once per module (each start costs seconds of CPU)."""
    node = CoordinatorRig(tmp_path_factory.mktemp("program"))
    try:
        node.program.start()
        yield node
    finally:
        node.close()
