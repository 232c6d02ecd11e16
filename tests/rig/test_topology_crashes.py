"""The rig over the three example topologies: a crash at every point they reach (all four
hooks), in-process, both recovery paths; compound crashes at every undo boundary and
during recovery. Every run ends with the invariants of harness.invariants checked.

Every run starts from the same random node state (``RIG_SEED=<n>``, else the rig's
fixed default): devices up or down with their own MTU, MAC and VF settings, foreign
links in the host and in the pod, so the invariant "the kernel equals its first
snapshot" catches a restore bug on every crash path."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakekernel.lab import load_lab
from fakekernel.model import diff
from harness.crash import crash_run, is_recovery_boundary, is_undo_boundary, reference
from harness.inprocess import DEFAULT_LAB, SANDBOX, in_process_node
from harness.pytest_plugin import RigStats
from harness.rig import _Collector, summarize
from harness.scenarios import DEFAULT_SEED, SEED_ENV, TOPOLOGIES, start_state_seed

SEED = start_state_seed()
REPRODUCE = f"starting state seed {SEED}: reproduce with {SEED_ENV}={SEED}"


@pytest.fixture(scope="module", params=TOPOLOGIES)
def topology(request: pytest.FixtureRequest) -> str:
    print(f"\nrig crash runs of {request.param}: {REPRODUCE}")
    return str(request.param)


def test_crash_runs_start_from_a_random_state_with_a_pod_interface(tmp_path: Path) -> None:
    lab = in_process_node(tmp_path)
    try:
        changes = diff(load_lab(DEFAULT_LAB).snapshot(), lab.kernel.snapshot())
        pod = lab.kernel.list_links(lab.kernel.namespace(SANDBOX))
    finally:
        lab.close()
    fields = {line.split(": ")[1] for line in changes if line.startswith("~ ")}
    assert {"up", "mtu", "mac", "vlan", "trust", "link_state", "max_tx_rate"} <= fields, REPRODUCE
    assert any(line.startswith("+ link") for line in changes), "no foreign link planted"
    assert [lk.name for lk in pod] == ["eth0"]


def test_the_summary_reports_the_start_state_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SEED_ENV, "4242")
    assert summarize("fake", "fake://", _Collector(), 1.0)["start_state_seed"] == 4242
    monkeypatch.delenv(SEED_ENV)
    assert summarize("fake", "fake://", _Collector(), 1.0)["start_state_seed"] == DEFAULT_SEED


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
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])


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
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
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
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
    assert second_crashes > 0, "no run crashed a second time during recovery"
