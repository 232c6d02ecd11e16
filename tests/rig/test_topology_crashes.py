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
from harness.crash import CrashSuite, is_recovery_boundary, is_undo_boundary
from harness.crash_log import CrashLog
from harness.inprocess import DEFAULT_LAB, SANDBOX, in_process_node
from harness.rig import _Collector, summarize
from harness.scenarios import DEFAULT_SEED, SEED_ENV, TOPOLOGIES, start_state_seed

from .conftest import References

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


# The cases a topology's points are run in (every n-th point each), so the fake tier's
# workers share out the long ones: vf-bond-vlan's 194 points took one case ~25 s of CPU.
PARTS = {"vf-bond-vlan": 4, "macvlan": 1, "ipvlan": 1}
CASES = [
    pytest.param(t, (k, n), id=f"{t}-{k + 1}of{n}") for t, n in PARTS.items() for k in range(n)
]


def test_every_topology_is_run_in_parts() -> None:
    assert sorted(PARTS) == sorted(TOPOLOGIES)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", ["retry", "cleanup"])
@pytest.mark.parametrize(("case", "part"), CASES)
def test_crash_at_every_point(
    case: str,
    part: tuple[int, int],
    path: str,
    references: References,
    tmp_path: Path,
    crash_log: CrashLog,
) -> None:
    print(f"\nrig crash runs of {case}, part {part[0] + 1} of {part[1]}: {REPRODUCE}")
    ref = references.plugin(case)
    hooks = {p.hook for p in ref.points}
    assert hooks == {"NodePrepare", "ConnectNetwork", "RemoveNetwork", "NodeUnprepare"}
    assert len(ref.points) == len(set(ref.points)), "crash points must be unique"
    failures = CrashSuite(case, ref, crash_log).every_point(path, tmp_path, part=part)
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])


@pytest.mark.timeout(900)
def test_compound_crash_at_every_undo_boundary(
    topology: str, references: References, tmp_path: Path, crash_log: CrashLog
) -> None:
    suite = CrashSuite(topology, references.plugin(topology), crash_log)
    undo_points = suite.undo_points()
    assert undo_points
    failures = suite.compound(is_undo_boundary, undo_points, tmp_path)
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
    # The last undo boundary has nothing after it; every other one got its second crash.
    assert suite.second_crashes >= len(undo_points) - 1


@pytest.mark.timeout(900)
def test_compound_crash_during_recovery(
    topology: str, references: References, tmp_path: Path, crash_log: CrashLog
) -> None:
    suite = CrashSuite(topology, references.plugin(topology), crash_log)
    interrupted = suite.interrupted_points()
    chosen = interrupted[:: max(1, len(interrupted) // 15)]
    failures = suite.compound(is_recovery_boundary, chosen, tmp_path)
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
    assert suite.second_crashes > 0, "no run crashed a second time during recovery"
