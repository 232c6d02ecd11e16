"""The rig's crash enumeration on the running kernel (the netns tier, root).

The same ``reference``/``crash_run`` as the fake tier's (tests/rig/test_topology_crashes.py),
each run on a new ``labs.NetnsLab`` whose parents (``enp3s0f0``..``enp3s0f2``, veth ends)
start from the random state of the rig's seed, with the invariants read from the real
kernel; and SIGKILL of real service processes on a NetnsLab at a seeded sample of the
points, and of the coordinator program at a seeded sample of its apply boundaries. A
topology the host kernel cannot run skips with one line naming what is missing.
"""

from __future__ import annotations

import errno
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.coordinator_crash import coordinator_reference
from harness.coordinator_process import CoordinatorRig, coordinator_kill_runs, is_apply_boundary
from harness.crash import CrashSuite, Reference, is_recovery_boundary, is_undo_boundary, reference
from harness.crash_log import CrashLog
from harness.process_rig import ProcessRig, sigkill_runs
from harness.pytest_plugin import require_lab
from harness.scenarios import SEED_ENV, TOPOLOGIES, allocate, start_state_seed
from labs.netns import PARENTS, NetnsLab, NetnsLabUnavailable
from plugins.kernel import KernelError, LinkKind, LinkSpec

pytestmark = pytest.mark.netns

SEED = start_state_seed()
REPRODUCE = f"starting state seed {SEED}: reproduce with {SEED_ENV}={SEED}"
MODULES: dict[str, str] = {"bond": "bonding", "vlan": "8021q", "ipvlan": "ipvlan"}
# What each topology needs of the kernel beyond veth and macvlan (which the lab needs).
NEEDS: dict[str, tuple[LinkKind, ...]] = {
    "vf-bond-vlan": ("bond", "vlan"),
    "ipvlan": ("ipvlan",),
    "macvlan": (),
}
SIGKILL_SAMPLE = 12  # SIGKILL runs per runnable topology (seeded, logged)
RECOVERY_SAMPLE = 10  # compound runs crashing again during recovery, per topology
COORDINATOR_SAMPLE = 3  # SIGKILL runs of the coordinator program mid-apply, per topology


def make_lab() -> NetnsLab:
    return NetnsLab(randomize=True)


@pytest.fixture(scope="module")
def kinds(request: pytest.FixtureRequest) -> dict[str, str | None]:
    """Why each optional link kind cannot be made here (errno name), or None if it can."""
    try:
        lab = NetnsLab()
    except NetnsLabUnavailable as exc:
        require_lab(request.config, "netns", str(exc))
        raise
    try:
        k = lab.kernel
        port = k.get_link(k.wire, name="swp0")
        assert port is not None
        found: dict[str, str | None] = {}
        for kind in MODULES:
            spec = LinkSpec(
                kind=kind,  # type: ignore[arg-type]  # the probed kinds are LinkKinds
                name=f"probe-{kind}",
                parent=None if kind == "bond" else port.ifindex,
                vlan_id=7 if kind == "vlan" else None,
            )
            try:
                k.delete_link(k.wire, k.create_link(k.wire, spec).ifindex)
                found[kind] = None
            except KernelError as exc:
                code = exc.code
                found[kind] = "EOPNOTSUPP" if code == errno.EOPNOTSUPP else errno.errorcode[code]
        return found
    finally:
        lab.close()


def why_not(topology: str, kinds: dict[str, str | None]) -> str | None:
    """One line: what the host kernel lacks for ``topology`` (None: it can run it)."""
    missing = [
        f"the {MODULES[k]} module (creating a link of kind {k} gives {kinds[k]})"
        for k in NEEDS[topology]
        if kinds[k]
    ]
    if topology == "vf-bond-vlan":
        missing.insert(0, "SR-IOV VFs (a NetnsLab has none; the vm and sriov tiers have)")
    return f"{topology} needs {', '.join(missing)}" if missing else None


@pytest.fixture(scope="module", params=TOPOLOGIES)
def topology(request: pytest.FixtureRequest, kinds: dict[str, str | None]) -> str:
    problem = why_not(str(request.param), kinds)
    if problem is not None:
        pytest.skip(f"netns tier: {problem}")
    print(f"\nnetns rig crash runs of {request.param}: {REPRODUCE}")
    return str(request.param)


@pytest.fixture(scope="module")
def ref(topology: str, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    return reference(topology, tmp_path_factory.mktemp("ref"), make_lab=make_lab)


@pytest.fixture
def labs() -> Iterator[Callable[[], NetnsLab]]:
    made: list[NetnsLab] = []

    def make() -> NetnsLab:
        made.append(make_lab())
        return made[-1]

    yield make
    for lab in made:
        lab.close()


def test_the_topology_allocates_a_parent_of_the_lab(topology: str) -> None:
    names = [d.attributes["ifName"] for d in allocate(topology).values()]
    assert names
    assert set(names) <= set(PARENTS), f"{names} are not all parents of a NetnsLab"


def test_the_lab_starts_from_the_seeds_random_state(labs: Callable[[], NetnsLab]) -> None:
    first, second = labs(), labs()

    def state(lab: NetnsLab) -> list[tuple[str, int, str, bool]]:
        host = lab.kernel.host_namespace()
        links = [lab.kernel.get_link(host, name=n) for n in (*PARENTS, "fveth0")]
        return [(lk.name, lk.mtu, lk.mac, lk.up) for lk in links if lk is not None]

    assert state(first) == state(second), REPRODUCE
    assert len(state(first)) == len(PARENTS) + 1, "a parent or the foreign veth is missing"
    # Not the unrandomized lab: a parent's MAC is the seed's, not the kernel's random one.
    plain = NetnsLab(parents=PARENTS[:1])
    try:
        host = plain.kernel.host_namespace()
        parent = plain.kernel.get_link(host, name=PARENTS[0])
        assert parent is not None
        assert parent.mac != state(first)[0][2]
    finally:
        plain.close()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", ["retry", "cleanup"])
def test_crash_at_every_point(
    topology: str, path: str, ref: Reference, tmp_path: Path, crash_log: CrashLog
) -> None:
    hooks = {p.hook for p in ref.points}
    assert hooks == {"NodePrepare", "ConnectNetwork", "RemoveNetwork", "NodeUnprepare"}
    failures = CrashSuite(topology, ref, crash_log, make_lab).every_point(path, tmp_path)
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])


@pytest.mark.timeout(600)
def test_compound_crash_at_every_undo_boundary(
    topology: str, ref: Reference, tmp_path: Path, crash_log: CrashLog
) -> None:
    suite = CrashSuite(topology, ref, crash_log, make_lab)
    undo_points = suite.undo_points()
    assert undo_points
    failures = suite.compound(is_undo_boundary, undo_points, tmp_path)
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
    assert suite.second_crashes >= len(undo_points) - 1


@pytest.mark.timeout(600)
def test_compound_crash_during_recovery(
    topology: str, ref: Reference, tmp_path: Path, crash_log: CrashLog
) -> None:
    suite = CrashSuite(topology, ref, crash_log, make_lab)
    interrupted = suite.interrupted_points()
    chosen = interrupted[:: max(1, len(interrupted) // RECOVERY_SAMPLE)]
    failures = suite.compound(is_recovery_boundary, chosen, tmp_path)
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
    assert suite.second_crashes > 0, "no run crashed a second time during recovery"


@pytest.mark.timeout(600)
def test_sigkill_sample(topology: str, ref: Reference, tmp_path: Path, crash_log: CrashLog) -> None:
    """Real service processes on a NetnsLab (their LinuxKernel on the lab's node
    namespace), SIGKILLed at a seeded sample of the points; the pod is deleted after each
    run (the invariants), which needs the services not to hold its namespace."""
    rng = random.Random(f"{SEED}/sigkill/{topology}")
    chosen = sorted(
        rng.sample(ref.points, min(SIGKILL_SAMPLE, len(ref.points))), key=ref.points.index
    )
    print(f"SIGKILL sample of {topology} ({REPRODUCE}): {[str(p) for p in chosen]}")
    rig = ProcessRig(tmp_path / "rig", make_lab())
    try:
        failures = sigkill_runs(rig, topology, chosen, crash_log, ref.points)
    finally:
        rig.close()
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])


@pytest.mark.timeout(600)
def test_sigkill_the_coordinator_mid_apply(
    topology: str, tmp_path: Path, crash_log: CrashLog
) -> None:
    """The coordinator program (a real process, over real service processes on a NetnsLab)
    SIGKILLed at a seeded sample of its apply boundaries, restarted (recovery completes or
    undoes the apply), the attachment removed over its socket, the invariants read from
    the real kernel."""
    reference_points = coordinator_reference(topology, tmp_path / "reference").points
    points = [p for p in reference_points if is_apply_boundary(p)]
    rng = random.Random(f"{SEED}/coordinator-sigkill/{topology}")
    chosen = sorted(rng.sample(points, min(COORDINATOR_SAMPLE, len(points))), key=points.index)
    print(f"coordinator SIGKILL sample of {topology} ({REPRODUCE}): {chosen}")
    rig = CoordinatorRig(tmp_path / "rig", make_lab())
    try:
        failures = coordinator_kill_runs(rig, topology, chosen, crash_log, reference_points)
    finally:
        rig.close()
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
