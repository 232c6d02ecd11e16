"""The node most of the CLI's tests read copies of (``kit.clone``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.scenarios import Lifecycle
from labs import FakeServerLab, Node
from plugins.sdk.runner import CrashPoints, SimulatedCrash

from .kit import MARKED


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """The services in this process over the fake kernel server (no processes to start):
    crashed mid-connect, restarted once (recovery marks the connect Failed), closed."""
    root = tmp_path_factory.mktemp("crashed")
    with Node(FakeServerLab(), root, crash=CrashPoints(armed=MARKED)) as node:
        life = Lifecycle("macvlan", node)
        life.run(0, 1)
        with pytest.raises(SimulatedCrash):
            life.phase("connect")()
        node.services.crash(CrashPoints())  # abandoned, then started from the journals
        node.services.close()
        yield node
