"""The rig's crash runs in the VM lab's guest kernel (the vm tier; one guest per session).

The same suites as the fake and netns tiers (``harness.crash.CrashSuite``,
``harness.process_rig.sigkill_runs``), each run on a new lab session in the guest
(``VmLab.session``: a node namespace with the parents ``enp3s0f0``..``enp3s0f2`` in the
random start state of the rig's seed), the invariants read from the guest's kernel.
Under TCG a run costs seconds, not milliseconds, so each suite runs a seeded sample of
the points, sized so the vm tier fits its CI budget (docs/vm-lab.md has the figures):
every k-th point from an offset the seed draws, printed with the seed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakekernel.model import diff
from harness.crash import (
    CrashSuite,
    LabFactory,
    Reference,
    every_kth,
    is_recovery_boundary,
    is_undo_boundary,
    reference,
)
from harness.process_rig import ProcessRig, sigkill_runs
from harness.pytest_plugin import RigStats
from harness.scenarios import SEED_ENV, allocate, start_state_seed
from labs.netns import PARENTS
from labs.vm import VmLab

pytestmark = pytest.mark.vm

SEED = start_state_seed()
REPRODUCE = f"starting state seed {SEED}: reproduce with {SEED_ENV}={SEED}"
TOPOLOGIES = ("macvlan", "ipvlan")
SKIPPED = {
    "vf-bond-vlan": "its VFs are allocated from topologies/inventory.yaml (enp3s0f0v0.. at "
    "0000:03:10.x); the guest's igb VFs have other PCI addresses and the rig has no "
    "lab-provided inventory yet",
}
# Runs per topology (seeded every-k-th samples), sized to the budget in docs/vm-lab.md.
INPROCESS_SAMPLE = {"retry": 6, "cleanup": 4}
UNDO_SAMPLE = 3
RECOVERY_SAMPLE = 2
SIGKILL_SAMPLE = 3
TIMEOUT_S = 900


def chosen(what: str, topology: str, points: list[str], wanted: int) -> list[str]:
    offset = random.Random(f"{SEED}/vm/{what}/{topology}").randrange(len(points) or 1)
    picked = every_kth(points, wanted, offset)
    print(
        f"\nvm {what} of {topology}: {len(picked)} of {len(points)} points ({REPRODUCE}): {picked}"
    )
    return picked


@pytest.fixture(scope="module")
def root_unchanged(vm_lab: VmLab) -> Iterator[None]:
    """Every run's session leaves the guest's own namespace as it was."""
    before = vm_lab.kernel.snapshot()
    yield
    assert diff(before, vm_lab.kernel.snapshot()) == [], "the crash runs changed the guest"


@pytest.fixture(scope="module", params=[*TOPOLOGIES, *SKIPPED])
def topology(request: pytest.FixtureRequest, vm_lab: VmLab, root_unchanged: None) -> str:
    if request.param in SKIPPED:
        pytest.skip(f"vm tier: {request.param}: {SKIPPED[request.param]}")
    return str(request.param)


@pytest.fixture(scope="module")
def make_lab(vm_lab: VmLab) -> LabFactory:
    return vm_lab.session


@pytest.fixture(scope="module")
def ref(topology: str, make_lab: LabFactory, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    started = time.monotonic()
    made = reference(topology, tmp_path_factory.mktemp("ref"), make_lab=make_lab)
    print(
        f"\nvm reference run of {topology}: {len(made.points)} points, "
        f"{time.monotonic() - started:.1f} s (session open and close included)"
    )
    return made


def test_the_topology_allocates_a_parent_of_the_session(topology: str) -> None:
    names = [d.attributes["ifName"] for d in allocate(topology).values()]
    assert names
    assert set(names) <= set(PARENTS), f"{names} are not all parents of a vm session"


@pytest.mark.timeout(TIMEOUT_S)
@pytest.mark.parametrize("path", ["retry", "cleanup"])
def test_crash_at_a_sample_of_points(
    topology: str,
    path: str,
    ref: Reference,
    make_lab: LabFactory,
    tmp_path: Path,
    rig_stats: RigStats,
) -> None:
    hooks = {p.split("/", 1)[0] for p in ref.points}
    assert hooks == {"NodePrepare", "ConnectNetwork", "RemoveNetwork", "NodeUnprepare"}
    points = chosen(f"in-process {path}", topology, ref.points, INPROCESS_SAMPLE[path])
    started = time.monotonic()
    failures = CrashSuite(topology, ref, rig_stats, make_lab).every_point(path, tmp_path, points)
    print(f"{len(points)} runs in {time.monotonic() - started:.1f} s")
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])


@pytest.mark.timeout(TIMEOUT_S)
def test_compound_crash_at_undo_boundaries(
    topology: str, ref: Reference, make_lab: LabFactory, tmp_path: Path, rig_stats: RigStats
) -> None:
    suite = CrashSuite(topology, ref, rig_stats, make_lab)
    # The last undo boundary has nothing after it to crash at a second time.
    points = chosen("undo compound", topology, suite.undo_points()[:-1], UNDO_SAMPLE)
    failures = suite.compound(is_undo_boundary, points, tmp_path)
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
    assert suite.second_crashes == len(points), "a run did not crash a second time"


@pytest.mark.timeout(TIMEOUT_S)
def test_compound_crash_during_recovery(
    topology: str, ref: Reference, make_lab: LabFactory, tmp_path: Path, rig_stats: RigStats
) -> None:
    suite = CrashSuite(topology, ref, rig_stats, make_lab)
    points = chosen("recovery compound", topology, suite.interrupted_points(), RECOVERY_SAMPLE)
    failures = suite.compound(is_recovery_boundary, points, tmp_path)
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
    assert suite.second_crashes > 0, "no run crashed a second time during recovery"


@pytest.mark.timeout(TIMEOUT_S)
def test_sigkill_sample(
    topology: str, ref: Reference, vm_lab: VmLab, tmp_path: Path, rig_stats: RigStats
) -> None:
    """Real service processes on the host, their kernel the session's (``fake://`` on
    the relay), SIGKILLed at a seeded sample of the points."""
    points = chosen("SIGKILL", topology, ref.points, SIGKILL_SAMPLE)
    started = time.monotonic()
    rig = ProcessRig(tmp_path / "rig", vm_lab.session())
    try:
        failures = sigkill_runs(rig, topology, points, rig_stats)
    finally:
        rig.close()
    print(f"{len(points)} SIGKILL runs in {time.monotonic() - started:.1f} s")
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
