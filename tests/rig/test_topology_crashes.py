"""The rig over the three example topologies: a crash at every point they reach (all four
hooks), in-process, both recovery paths; compound crashes at every undo boundary and
during recovery. Every run ends with the invariants of harness.invariants checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.crash import crash_run, is_recovery_boundary, is_undo_boundary, reference
from harness.pytest_plugin import RigStats
from harness.scenarios import TOPOLOGIES


@pytest.fixture(scope="module", params=TOPOLOGIES)
def topology(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", ["retry", "cleanup"])
def test_crash_at_every_point(
    topology: str, path: str, tmp_path: Path, rig_stats: RigStats
) -> None:
    ref = reference(topology, tmp_path / "reference")
    hooks = {p.split("/", 1)[0] for p in ref.points}
    assert hooks == {"NodePrepare", "ConnectNetwork", "RemoveNetwork", "NodeUnprepare"}
    assert len(ref.points) == len(set(ref.points)), "crash point names must be unique"
    if path == "retry":
        rig_stats.add("crash_points_enumerated", len(ref.points))
    failures = []
    for i, point in enumerate(ref.points):
        result = crash_run(topology, point, path, tmp_path / f"{i}", ref=ref)
        rig_stats.add("crash_runs_inprocess")
        rig_stats.add("invariant_violations", len(result.violations))
        if not result.ok:
            failures.append(f"{point} [{path}]: {result.violations} {result.replay_mismatch}")
    assert not failures, "\n".join(failures[:10])


@pytest.mark.timeout(900)
def test_compound_crash_at_every_undo_boundary(
    topology: str, tmp_path: Path, rig_stats: RigStats
) -> None:
    ref = reference(topology, tmp_path / "reference")
    undo_points = [p for p in ref.points if is_undo_boundary(p)]
    assert undo_points
    failures, second_crashes = [], 0
    for i, point in enumerate(undo_points):
        result = crash_run(topology, point, "retry", tmp_path / f"{i}", second=is_undo_boundary)
        rig_stats.add("compound_crash_runs")
        rig_stats.add("invariant_violations", len(result.violations))
        second_crashes += result.crashes == 2
        if not result.ok:
            failures.append(f"{point}: {result.violations}")
    assert not failures, "\n".join(failures[:10])
    # The last undo boundary has nothing after it; every other one got its second crash.
    assert second_crashes >= len(undo_points) - 1


@pytest.mark.timeout(900)
def test_compound_crash_during_recovery(topology: str, tmp_path: Path, rig_stats: RigStats) -> None:
    ref = reference(topology, tmp_path / "reference")
    # Points after which recovery has work to do: inside an operation, after its intent.
    interrupted = [p for p in ref.points if p.split("/")[2] != "-" and "after-commit" in p]
    failures, second_crashes = [], 0
    for i, point in enumerate(interrupted[:: max(1, len(interrupted) // 15)]):
        result = crash_run(topology, point, "retry", tmp_path / f"{i}", second=is_recovery_boundary)
        rig_stats.add("compound_crash_runs")
        rig_stats.add("invariant_violations", len(result.violations))
        second_crashes += result.crashes == 2
        if not result.ok:
            failures.append(f"{point}: {result.violations}")
    assert not failures, "\n".join(failures[:10])
    assert second_crashes > 0, "no run crashed a second time during recovery"
