"""The rig's crash runs on a NIC lab's real kernel: the VM lab's guest (the vm tier; one
guest per session) and each SR-IOV host (the sriov tier), through their kernel agents.

The same suites as the fake and netns tiers (``harness.crash.CrashSuite``,
``harness.process_rig.sigkill_runs``), each run on a new lab session on the machine
(``AgentLab.session``: a node namespace with the parents ``enp3s0f0``..``enp3s0f2`` in
the random start state of the rig's seed), the invariants read from its kernel.
vf-bond's sessions lend the machine's PFs and VF 0 of each under the example
inventory's names (``AgentLab.lend_vfs``), and its VFs are allocated from the session's
inventory (their real PCI addresses); the PFs' VF tables must end as they began.
vf-bond is vf-bond-vlan without the VLAN: igb refuses its VFs' VLAN filters, so a VLAN
on a bond of igbvf VFs is EINVAL on the real kernel (tests/e2e/test_nic_lab_topologies.py
checks that refusal end to end, on every NIC lacking ``vlan_on_bond``).
Under TCG a run costs seconds, not milliseconds, so each suite runs a seeded sample of
the points, sized so the vm tier fits its CI budget (docs/vm-lab.md has the figures):
every k-th point from an offset the seed draws, printed with the seed.
``RIG_CRASH_FULL=1`` (``harness.remote_rig``) crashes every point instead.

On an SR-IOV host the SIGKILL sample's services run on the host itself, ``linux://`` on
the session's node (``HostLab.on_host``, ``labs.remote_services``): the real process is
killed in its own netlink calls, VF moves included, at no less than a tenth of the
points of each topology; elsewhere they run on this machine through the relay.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.crash import (
    CrashSuite,
    LabFactory,
    Reference,
    every_kth,
    is_recovery_boundary,
    is_undo_boundary,
    reference,
)
from harness.crash_log import CrashLog
from harness.process_rig import ProcessRig, sigkill_runs
from harness.remote_rig import full_mode, on_host_sigkill_runs, seeded_sample
from harness.scenarios import SEED_ENV, allocate, lab_inventory, start_state_seed
from labs import AgentLab, HostLab, Lab
from plugins.sdk.runner import CrashPoint

SEED = start_state_seed()
REPRODUCE = f"starting state seed {SEED}: reproduce with {SEED_ENV}={SEED}"
TOPOLOGIES = ("macvlan", "ipvlan", "vf-bond")
# Runs per topology (seeded every-k-th samples), sized to the budget in docs/vm-lab.md;
# vf-bond's runs cost about twice as much (three steps, two PFs and VFs lent per session).
INPROCESS_SAMPLE = {
    "macvlan": {"retry": 6, "cleanup": 4},
    "ipvlan": {"retry": 6, "cleanup": 4},
    "vf-bond": {"retry": 3, "cleanup": 2},
}
UNDO_SAMPLE = {"macvlan": 3, "ipvlan": 3, "vf-bond": 2}
RECOVERY_SAMPLE = {"macvlan": 2, "ipvlan": 2, "vf-bond": 1}
SIGKILL_SAMPLE = {"macvlan": 3, "ipvlan": 3, "vf-bond": 2}
# Full mode crashes every point (vf-bond: 132 SIGKILLs on the host at 7-10 s each, which
# 900 s cut off at the 75th): an hour per case, not a sample's quarter of an hour.
TIMEOUT_S = 3600 if full_mode() else 900


def chosen(what: str, topology: str, points: list[CrashPoint], wanted: int) -> list[CrashPoint]:
    # The same sample on every NIC lab: one seed, one choice (the seed's name is kept).
    offset = random.Random(f"{SEED}/vm/{what}/{topology}").randrange(len(points) or 1)
    picked = list(points) if full_mode() else every_kth(points, wanted, offset)
    return shown(what, topology, points, picked)


def shown(
    what: str, topology: str, points: list[CrashPoint], picked: list[CrashPoint]
) -> list[CrashPoint]:
    names = [str(p) for p in picked]
    print(f"\n{what} of {topology}: {len(picked)} of {len(points)} points ({REPRODUCE}): {names}")
    return picked


@pytest.fixture(scope="module")
def lend(nic_lab: AgentLab) -> dict[str, str]:
    """The machine's PFs and VF 0 of each, as vf-bond's sessions hold them (made
    before the machine is recorded)."""
    return nic_lab.lend_vfs(1)


@pytest.fixture(scope="module")
def root_unchanged(nic_lab: AgentLab, lend: dict[str, str]) -> Iterator[None]:
    """Every run's session leaves the machine's own namespace and VF tables as they were."""
    before, tables = nic_lab.kernel.snapshot(), nic_lab.vf_tables()
    yield
    assert nic_lab.changes_since(before) == [], "the crash runs changed the machine"
    assert nic_lab.vf_tables() == tables, "the crash runs left a PF's VF table changed"


@pytest.fixture(scope="module", params=TOPOLOGIES)
def topology(request: pytest.FixtureRequest, nic_lab: AgentLab, root_unchanged: None) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def make_lab(nic_lab: AgentLab, topology: str, lend: dict[str, str]) -> LabFactory:
    if topology == "vf-bond":
        return lambda: nic_lab.session(lend=lend)
    return nic_lab.session


@pytest.fixture(scope="module")
def ref(topology: str, make_lab: LabFactory, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    started = time.monotonic()
    made = reference(topology, tmp_path_factory.mktemp("ref"), make_lab=make_lab)
    print(
        f"\nreference run of {topology}: {len(made.points)} points, "
        f"{time.monotonic() - started:.1f} s (session open and close included)"
    )
    return made


def test_the_topology_allocates_devices_of_the_session(topology: str, make_lab: LabFactory) -> None:
    """The allocation (from the session's inventory) names devices of the session's
    node, with their real PCI addresses."""
    session = make_lab()
    try:
        allocated = allocate(topology, lab_inventory(session)).values()
        k = session.kernel
        node = k.host_namespace()
        names = {str(d.attributes["ifName"]): d.attributes.get("pciAddress") for d in allocated}
        assert names
        links = {n: k.get_link(node, name=n) for n in names}
        assert None not in links.values(), f"{names} are not all devices of the session"
        if topology == "vf-bond":
            real = {n: link.pci_address for n, link in links.items() if link is not None}
            assert names == real, "the VFs' PCI addresses are not the session's"
    finally:
        session.close()


@pytest.mark.timeout(TIMEOUT_S)
@pytest.mark.parametrize("path", ["retry", "cleanup"])
def test_crash_at_a_sample_of_points(
    topology: str,
    path: str,
    ref: Reference,
    make_lab: LabFactory,
    tmp_path: Path,
    crash_log: CrashLog,
) -> None:
    hooks = {p.hook for p in ref.points}
    assert hooks == {"NodePrepare", "ConnectNetwork", "RemoveNetwork", "NodeUnprepare"}
    wanted = INPROCESS_SAMPLE[topology][path]
    points = chosen(f"in-process {path}", topology, ref.points, wanted)
    started = time.monotonic()
    failures = CrashSuite(topology, ref, crash_log, make_lab).every_point(path, tmp_path, points)
    print(f"{len(points)} runs in {time.monotonic() - started:.1f} s")
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])


@pytest.mark.timeout(TIMEOUT_S)
def test_compound_crash_at_undo_boundaries(
    topology: str, ref: Reference, make_lab: LabFactory, tmp_path: Path, crash_log: CrashLog
) -> None:
    suite = CrashSuite(topology, ref, crash_log, make_lab)
    # The last undo boundary has nothing after it to crash at a second time.
    points = chosen("undo compound", topology, suite.undo_points()[:-1], UNDO_SAMPLE[topology])
    failures = suite.compound(is_undo_boundary, points, tmp_path)
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
    assert suite.second_crashes == len(points), "a run did not crash a second time"


@pytest.mark.timeout(TIMEOUT_S)
def test_compound_crash_during_recovery(
    topology: str, ref: Reference, make_lab: LabFactory, tmp_path: Path, crash_log: CrashLog
) -> None:
    suite = CrashSuite(topology, ref, crash_log, make_lab)
    points = chosen(
        "recovery compound", topology, suite.interrupted_points(), RECOVERY_SAMPLE[topology]
    )
    failures = suite.compound(is_recovery_boundary, points, tmp_path)
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
    assert suite.second_crashes > 0, "no run crashed a second time during recovery"


@pytest.mark.timeout(TIMEOUT_S)
def test_sigkill_sample(
    nic_lab: AgentLab,
    topology: str,
    ref: Reference,
    make_lab: LabFactory,
    tmp_path: Path,
    crash_log: CrashLog,
) -> None:
    """Real service processes SIGKILLed at a seeded sample of the points: on an SR-IOV
    host, the host's own (``linux://`` on the session's node); else on the rig's
    machine, their kernel the session's (``kernel+unix://`` on the relay)."""
    host = nic_lab if isinstance(nic_lab, HostLab) and nic_lab.remote is not None else None
    started = time.monotonic()
    if host is not None:
        seed = f"{SEED}/vm/SIGKILL/{topology}"
        sample = seeded_sample(topology, ref.points, SIGKILL_SAMPLE[topology], seed)
        points = shown("SIGKILL on the host", topology, ref.points, sample)
        lab: Lab = host.on_host(make_lab())
    else:
        points = chosen("SIGKILL", topology, ref.points, SIGKILL_SAMPLE[topology])
        lab = make_lab()
    rig = ProcessRig(tmp_path / "rig", lab)
    try:
        runs = sigkill_runs if host is None else on_host_sigkill_runs
        failures = runs(rig, topology, points, crash_log, ref.points)
    finally:
        rig.close()
    print(f"{len(points)} SIGKILL runs in {time.monotonic() - started:.1f} s")
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
