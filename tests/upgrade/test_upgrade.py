"""An upgrade from the previous release to this tree, with real processes (issue 29).

The previous release (``v0.1.0``, built from its tag by ``harness.upgrade``) serves a
node's ``networkplugin-links`` and leaves operations in every state: a lifecycle run to
its end, a connect that succeeded, one quarantined (an administrator put a link of
another kind under our marker), one in flight (SIGKILLed at a crash point the rig's seed
picks among the release's own). Then a rolling update: the old process is stopped by
SIGTERM (after restarting from the kill, as its pod would) or was SIGKILLed and never
came back, and this tree's program starts on the same state directory. Every record the
old release wrote must be found by InspectOperation (reported), the unfinished ones
finished or cleaned by this tree, nothing of ours left in the kernel, and the old
release's answers to the same requests replayed by this tree byte for byte.

Counters (reports/summary.json under the rig): ``upgrade_records`` (old records met),
``upgrade_cleaned`` (of those, cleaned by this tree), ``upgrade_lost`` (not found, or
neither cleaned nor reported as quarantined: must be 0).
"""

from __future__ import annotations

import random
import signal
import subprocess
from pathlib import Path

import pytest

from harness.invariants import violations
from harness.pytest_plugin import RigStats
from harness.scenarios import compiled
from harness.upgrade import (
    IN_FLIGHT,
    LINKS,
    PREVIOUS_RELEASE,
    QUARANTINED,
    QUARANTINED_SCOPES,
    RELEASES,
    REPO,
    SERVICE,
    SOCKET,
    SUCCEEDED,
    JournalRecord,
    Release,
    ReleaseUnavailable,
    Sent,
    administrator_clears,
    connect_points,
    hand_over,
    journal_bytes,
    journal_records,
    leave_every_state,
    lifecycle,
    old_process,
    previous_release,
    previous_release_node,
    record_requests,
    release_commit,
    renamed,
    replay,
    restart_old,
)
from labs import PROJECT_SERVICES, start_state_seed
from plugins.coordinator import StepFailed
from plugins.sdk import CleanupStatus
from plugins.sdk.store import Store

CLEANED = "CLEANED"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def release() -> Release:
    try:
        return previous_release()
    except ReleaseUnavailable as exc:
        pytest.skip(f"upgrade test: {exc}")


def cleaned(record: JournalRecord) -> bool:
    return record.cleanup_status == CLEANED


def seeded(points: list[str]) -> str:
    """The rig's seed picks the in-flight connect's point (RIG_SEED reproduces it)."""
    return random.Random(start_state_seed()).choice(points)


@pytest.mark.parametrize("handover", ["SIGTERM", "SIGKILL"])
def test_an_upgrade_recovers_cleans_or_reports_every_record_of_the_previous_release(
    release: Release, tmp_path: Path, rig_stats: RigStats, handover: str
) -> None:
    with previous_release_node(release, tmp_path / "node", LINKS) as node:
        for n in range(4):
            node.sandbox(f"pod-{n}")
        baseline = node.snapshot()  # the pods exist: a link of ours left in one shows
        state = old_process(node).root / "state"
        left = leave_every_state(node, tmp_path / "trace", seeded)
        rig_stats.fact("upgrade_crash_point", left.point)
        if handover == "SIGTERM":
            restart_old(node, left.sent)  # its pod restarts it; it recovers, then is updated
        old_records = journal_records(state)
        code = hand_over(node, SERVICE, stopped=handover == "SIGKILL")
        assert code in (None, 0)  # SIGTERM: a clean exit
        record_requests(node, left.sent)
        new = node.processes.processes[SERVICE]

        # Every old record is reported by this tree.
        with new.client(SOCKET) as client:
            reported = {
                r.operation_id: client.inspect(r.operation_id, r.scope) for r in old_records
            }
        missing = [op for op, answer in reported.items() if not answer.found]
        quarantined_op = f"att-{QUARANTINED}:secondary:ConnectNetwork:g1"
        assert reported[quarantined_op].cleanup is CleanupStatus.QUARANTINED

        # The previous release's answers, replayed by this tree, byte for byte.
        replayed = {op: replay(node, left.sent[op]) for op in left.answers}
        assert replayed == left.answers

        # This tree finishes and cleans what the old one left.
        left.lifecycles[IN_FLIGHT].run(1)
        left.lifecycles[SUCCEEDED].run(2)
        administrator_clears(node, left.lifecycles[QUARANTINED].lab.sandbox())
        problems = violations(
            baseline, node.kernel, node.journal, dict(node.coordinator.clients), "pod-3"
        )
        new.stop()
        after = {r.operation_id: r for r in journal_records(state)}

    # The quarantined attachment and its claim stay as they are, reported, until an
    # operator acts (docs/operating.md); everything else the old release left is cleaned.
    lost = missing + [r.operation_id for r in old_records if r.operation_id not in after]
    lost += [
        op
        for op, record in after.items()
        if op in reported and not cleaned(record) and record.scope not in QUARANTINED_SCOPES
    ]
    unreported = [p for p in problems if not any(s in p for s in QUARANTINED_SCOPES)]
    newly_cleaned = [r for r in old_records if not cleaned(r) and cleaned(after[r.operation_id])]
    rig_stats.add("upgrade_records", len(old_records))
    rig_stats.add("upgrade_cleaned", len(newly_cleaned))
    rig_stats.add("upgrade_lost", len(lost))
    rig_stats.add("invariant_violations", len(unreported))
    assert lost == []
    assert unreported == []
    removal = quarantined_op.replace("Connect", "Remove")
    assert f"{removal}: coordinator call left quarantined" in problems
    # claim 0's four, claim 1's two, claim 3's three, claim 2's prepare and connect
    assert len(old_records) == 11, old_records
    assert newly_cleaned, "the upgrade cleaned nothing the old release left"


VF_TOPOLOGY = "vf-bond-vlan"
VF_SERVICE = "networkplugin-vf"


def plugin_of_step(topology: str, step: str) -> str:
    return compiled(topology).steps[step].plugin


def test_an_upgrade_of_every_service_with_vfs_in_pods(
    release: Release, tmp_path: Path, rig_stats: RigStats
) -> None:
    """The three services of the previous release (VFs moved into a pod, bonded, a VLAN
    on the bond): a lifecycle done, then a claim prepared whose connect networkplugin-vf
    is SIGKILLed in at a seeded point of its own (the topology's VFs are exclusive: one
    claim at a time), the other two services stopped by SIGTERM; this tree's three take
    over, report every record, replay the old prepare's answers byte for byte, finish
    the connect and clean everything."""
    reference, in_flight = 4, 6
    with previous_release_node(release, tmp_path / "node", PROJECT_SERVICES) as node:
        for n in (reference, in_flight):
            node.sandbox(f"pod-{n}")
        baseline = node.snapshot()
        sent: Sent = {}
        record_requests(node, sent)
        trace = tmp_path / "trace"
        restart_old(node, sent, VF_SERVICE, trace=trace)
        runs = {n: lifecycle(node, n, VF_TOPOLOGY) for n in (reference, in_flight)}
        runs[reference].run()
        runs[in_flight].run(0, 1)
        answers = {
            op: replay(node, request)
            for op, request in sent.items()
            if op.startswith(f"claim-{in_flight}.")
        }
        assert len(answers) == 2  # the two VFs' prepares (the bond and the VLAN have none)
        # Only networkplugin-vf was traced: its points, the VF moves among them.
        point = renamed(seeded(connect_points(trace, reference)), reference, in_flight)
        rig_stats.fact("upgrade_vf_crash_point", point)
        restart_old(node, sent, VF_SERVICE, armed=point)
        with pytest.raises(StepFailed):
            runs[in_flight].phase("connect")()
        assert old_process(node, VF_SERVICE).wait_exit() == -signal.SIGKILL, point

        states = {
            name: node.processes.processes[name].root / "state" for name in node.processes.processes
        }
        old_records = {name: journal_records(state) for name, state in states.items()}
        for name in node.processes.processes:
            code = hand_over(node, name, stopped=name == VF_SERVICE)
            assert code in (None, 0)
        record_requests(node, sent)

        reported: dict[str, bool] = {}
        for records in old_records.values():
            for r in records:
                plugin = plugin_of_step(VF_TOPOLOGY, r.step)
                with node.processes.of(plugin).client(f"{plugin}.sock") as client:
                    reported[r.operation_id] = client.inspect(r.operation_id, r.scope).found
        missing = [op for op, found in reported.items() if not found]
        assert {op: replay(node, sent[op]) for op in answers} == answers

        runs[in_flight].run(1)
        problems = violations(
            baseline, node.kernel, node.journal, dict(node.coordinator.clients), f"pod-{in_flight}"
        )
        for process in node.processes.processes.values():
            assert process.stop() == 0
        after = {
            name: {r.operation_id: r for r in journal_records(state)}
            for name, state in states.items()
        }

    lost = missing + [
        r.operation_id
        for name, records in old_records.items()
        for r in records
        if r.operation_id not in after[name] or not cleaned(after[name][r.operation_id])
    ]
    newly_cleaned = [
        r
        for name, records in old_records.items()
        for r in records
        if not cleaned(r) and cleaned(after[name][r.operation_id])
    ]
    rig_stats.add("upgrade_records", sum(len(r) for r in old_records.values()))
    rig_stats.add("upgrade_cleaned", len(newly_cleaned))
    rig_stats.add("upgrade_lost", len(lost))
    rig_stats.add("invariant_violations", len(problems))
    assert lost == []
    assert problems == []
    assert newly_cleaned


def test_the_kernel_check_sees_a_link_left_behind(release: Release, tmp_path: Path) -> None:
    """The oracle the upgrade test ends with is not blind on this lab: a link of ours
    left in a pod is a violation."""
    with previous_release_node(release, tmp_path / "node", LINKS) as node:
        baseline = node.snapshot()
        lifecycle(node, SUCCEEDED).run(0, 2)
        found = violations(
            baseline, node.kernel, node.journal, dict(node.coordinator.clients), "pod-1"
        )
    assert any("secondary0" in line for line in found), found


def test_old_records_are_read_from_a_copy(tmp_path: Path) -> None:
    """``journal_records`` never changes the journal it reads (a copy, -wal included)."""
    with Store.open(tmp_path / "state"):
        pass
    before = journal_bytes(tmp_path / "state")
    assert journal_records(tmp_path / "state") == []
    assert journal_bytes(tmp_path / "state") == before


def test_an_unknown_release_without_its_tag_gets_one_line() -> None:
    """What the upgrade tests skip with where a release is neither tagged nor recorded."""
    with pytest.raises(ReleaseUnavailable) as missing:
        previous_release("v0.0.0-never")
    assert (
        str(missing.value) == "the release tag v0.0.0-never is not in this clone (git fetch --tags)"
    )


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], capture_output=True, text=True, check=True, timeout=120
    ).stdout.strip()


def test_a_clone_without_tags_finds_the_release_by_its_recorded_commit(tmp_path: Path) -> None:
    """CI clones main without its tags: the release is still the commit RELEASES records."""
    clone = tmp_path / "clone"
    _git("clone", "--quiet", "--no-tags", str(REPO), str(clone))
    assert _git("-C", str(clone), "tag") == ""
    assert release_commit(PREVIOUS_RELEASE, clone) == RELEASES[PREVIOUS_RELEASE]


def test_a_moved_tag_is_refused_and_a_shallow_clone_named(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    _git("clone", "--quiet", "--no-tags", str(REPO), str(clone))
    _git("-C", str(clone), "tag", PREVIOUS_RELEASE, "HEAD")
    head = _git("-C", str(clone), "rev-parse", "HEAD")
    with pytest.raises(ReleaseUnavailable) as moved:
        release_commit(PREVIOUS_RELEASE, clone)
    assert str(moved.value) == (
        f"the release tag {PREVIOUS_RELEASE} names {head[:12]}, "
        f"not the released {RELEASES[PREVIOUS_RELEASE][:12]}"
    )
    shallow = tmp_path / "shallow"
    _git("clone", "--quiet", "--no-tags", "--depth", "1", f"file://{REPO}", str(shallow))
    with pytest.raises(ReleaseUnavailable) as missing:
        release_commit(PREVIOUS_RELEASE, shallow)
    assert str(missing.value) == (
        f"release {PREVIOUS_RELEASE}'s commit {RELEASES[PREVIOUS_RELEASE][:12]} "
        "is not in this clone (a shallow clone?)"
    )
