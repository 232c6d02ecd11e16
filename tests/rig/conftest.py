"""The rig's fixtures: the uncrashed reference runs, computed once per test process."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.coordinator_crash import coordinator_reference
from harness.crash import Reference, reference


class References:
    """Each topology's uncrashed reference run (``harness.crash.reference``: the plugin
    services' crash points and the results) and its coordinator's
    (``harness.coordinator_crash.coordinator_reference``), computed on first use and
    handed out as copies. Every fake-tier lab of a process starts from the same seeded
    state, so every crash case of a topology has the same reference: the rig's cases
    computed it again each (forty-odd runs of the three lifecycles per test process)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: dict[tuple[str, str], Reference] = {}

    def plugin(self, topology: str) -> Reference:
        return self._get("plugin", topology, reference)

    def coordinator(self, topology: str) -> Reference:
        return self._get("coordinator", topology, coordinator_reference)

    def _get(self, kind: str, topology: str, make: Callable[[str, Path], Reference]) -> Reference:
        if (kind, topology) not in self._made:
            self._made[kind, topology] = make(topology, self.root / f"{kind}-{topology}")
        return copy.deepcopy(self._made[kind, topology])


@pytest.fixture(scope="session")
def references(tmp_path_factory: pytest.TempPathFactory) -> References:
    return References(tmp_path_factory.mktemp("references"))
