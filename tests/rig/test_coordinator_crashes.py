"""The rig crashes the coordinator too: at every boundary of its journal that the three
example topologies reach (all four hooks), in-process, both recovery paths. The services
and the fake kernel keep running; every run ends with the invariants of harness.invariants
checked, including that no coordinator call is left open."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from harness.coordinator_crash import (
    coordinator_crash_run,
    coordinator_reference,
    is_coordinator_boundary,
)
from harness.crash_log import CrashLog
from harness.rig import _Collector, summarize
from harness.scenarios import TOPOLOGIES
from harness.stats import Gathered
from plugins.coordinator._journal import CoordinatorJournal
from plugins.sdk.runner import UNSCOPED, CrashPoint, Owner, Phase, PhaseKind

from .conftest import References

HOOKS = {"NodePrepare", "ConnectNetwork", "RemoveNetwork", "NodeUnprepare"}
COMMITS = {"set_unit", "claim", "record_call", "finish_call", "finish_cleanup", "release"}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", ["retry", "cleanup"])
def test_coordinator_crash_at_every_boundary(
    path: str, references: References, tmp_path: Path, crash_log: CrashLog
) -> None:
    refs = {t: references.coordinator(t) for t in TOPOLOGIES}
    boundaries: set[CrashPoint] = set()
    for topology, ref in refs.items():
        assert all(is_coordinator_boundary(p) for p in ref.points)
        assert len(ref.points) == len(set(ref.points)), f"{topology}: point names must be unique"
        assert {p.hook for p in ref.points} == HOOKS, topology
        boundaries.update(ref.points)
    assert {p.phase.boundary for p in boundaries} == COMMITS

    failures, runs = [], 0
    for topology, ref in refs.items():
        for i, point in enumerate(ref.points):
            run = partial(
                coordinator_crash_run, topology, point, path, tmp_path / f"{topology}-{i}", ref=ref
            )
            result = crash_log.run(topology, "coordinator", path, i, run)
            runs += 1
            if not result.ok:
                failures.append(f"{point} [{path}]: {result.violations} {result.replay_mismatch}")
    assert not failures, "\n".join(failures[:10])
    assert runs >= len(boundaries)


def test_a_coordinator_that_leaves_abandoned_calls_open_fails_the_rig(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The broken variant: a CLEANED cleanup that does not close the calls it proves finished."""

    def cleaned_without_closing(
        self: CoordinatorJournal, operation_id: str, receipt: object
    ) -> list[str]:
        self.finish_call(operation_id, "cleaned", receipt)
        return []

    point = CrashPoint(
        "ConnectNetwork",
        "att-1:secondary:ConnectNetwork:g1",
        UNSCOPED,
        Phase.commit(PhaseKind.AFTER_COMMIT, "record_call"),
        Owner.COORDINATOR,
    )
    assert point in coordinator_reference("macvlan", tmp_path / "reference").points
    monkeypatch.setattr(CoordinatorJournal, "finish_cleanup", cleaned_without_closing)
    result = coordinator_crash_run("macvlan", point, "cleanup", tmp_path / "run")
    assert result.violations == [
        "att-1:secondary:ConnectNetwork:g1: coordinator call left requested"
    ]


def test_the_rig_summary_counts_coordinator_crash_runs() -> None:
    collector = _Collector()
    collector.stats = Gathered({"coordinator_crash_runs": 7})
    summary = summarize("fake", "fake://", collector, 2.0)
    assert summary["coordinator_crash_runs"] == 7
    assert summary["crash_runs_per_second"] == 3.5
