"""The rig's fixtures: the uncrashed reference runs, computed once per test process, and
each test's crash log."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.coordinator_crash import coordinator_reference
from harness.crash import Reference, reference
from harness.crash_log import CrashLog
from harness.pytest_plugin import RigStats
from harness.report_labels import lab_label
from harness.stats import STATS_DIR_ENV


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


@pytest.fixture
def crash_log(request: pytest.FixtureRequest, rig_stats: RigStats) -> CrashLog:
    """Where this test's crash runs are counted and reported (``harness.crash_log``):
    the rig's counters, an Allure step per run, and the rig's run log for the crash
    matrix (when the rig runs the test: it names the directory)."""
    directory = os.environ.get(STATS_DIR_ENV)
    return CrashLog(
        rig_stats,
        lab_label(request.node),
        request.node.nodeid,
        Path(directory) if directory else None,
    )
