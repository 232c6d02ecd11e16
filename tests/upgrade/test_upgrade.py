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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.invariants import violations
from harness.pytest_plugin import RigStats
from harness.scenarios import Lifecycle
from harness.upgrade import (
    JournalRecord,
    Release,
    ReleaseServiceProcess,
    ReleaseUnavailable,
    hand_over,
    journal_bytes,
    journal_records,
    previous_release,
    previous_release_node,
    raw_call,
    record_requests,
)
from labs import PROJECT_SERVICES, Node, start_state_seed
from plugins.coordinator import StepFailed
from plugins.kernel import LinkSpec
from plugins.sdk import CleanupStatus, SandboxHandle
from plugins.sdk.store import Store

TOPOLOGY = "macvlan"
SERVICE = "networkplugin-links"
SOCKET = "macvlan.sock"
LINKS = tuple(s for s in PROJECT_SERVICES if s.name == SERVICE)
CLEANED = "CLEANED"
QUARANTINED_SCOPES = ("att-3", "claim-3.secondary")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def release() -> Release:
    try:
        return previous_release()
    except ReleaseUnavailable as exc:
        pytest.skip(f"upgrade test: {exc}")


@dataclass
class Pod:
    """A lifecycle's view of the node with a pod of its own (``Lifecycle`` asks its
    ``lab`` for the coordinator and the sandbox)."""

    node: Node
    name: str

    @property
    def coordinator(self) -> Any:
        return self.node.coordinator

    @property
    def lab(self) -> Any:
        return self.node.lab

    def sandbox(self, name: str = "") -> SandboxHandle:
        return self.node.sandbox(self.name)


def lifecycle(node: Node, n: int) -> Lifecycle:
    return Lifecycle(TOPOLOGY, Pod(node, f"pod-{n}"), claim=f"claim-{n}", attachment=f"att-{n}")


def old_process(node: Node) -> ReleaseServiceProcess:
    process = node.processes.processes[SERVICE]
    assert isinstance(process, ReleaseServiceProcess)
    return process


def restart_old(node: Node, sent: dict[str, tuple[str, bytes]], **launch: Any) -> None:
    old = old_process(node)
    old.kill()
    old.launch(**launch)
    node.reconnect()
    record_requests(node, sent)


def seeded_connect_point(trace: Path, reference: int, n: int) -> str:
    """A point of the previous release's connect, as it names them, at which a record of
    the connect exists (from its intent's commit on), picked by the rig's seed and
    renamed from the reference run's identities to run ``n``'s."""
    points = [
        p
        for p in trace.read_text().splitlines()
        if p.startswith(f"ConnectNetwork/att-{reference}:")
    ]
    recorded = points[points.index(next(p for p in points if "intent.after-commit" in p)) :]
    point = random.Random(start_state_seed()).choice(recorded)
    return point.replace(f"att-{reference}", f"att-{n}").replace(f"claim-{reference}", f"claim-{n}")


def quarantine_remove(node: Node, life: Lifecycle) -> None:
    """An administrator replaces our macvlan in the pod by a dummy carrying our marker:
    the remove cannot tell it from ours and must quarantine, never delete it."""
    pod = life.lab.sandbox()
    ns = node.kernel.open_namespace(pod.namespace)
    ours = node.kernel.get_link(ns, name="secondary0")
    assert ours is not None
    assert ours.alias
    node.kernel.delete_link(ns, ours.ifindex)
    node.kernel.create_link(ns, LinkSpec(name="secondary0", kind="dummy", alias=ours.alias))
    removed = life.phase("remove")()
    assert [r.status for r in removed.values()] == [CleanupStatus.QUARANTINED]


def administrator_clears(node: Node, pod: SandboxHandle) -> None:
    ns = node.kernel.open_namespace(pod.namespace)
    planted = node.kernel.get_link(ns, name="secondary0")
    assert planted is not None
    assert planted.kind == "dummy"
    node.kernel.delete_link(ns, planted.ifindex)


def cleaned(record: JournalRecord) -> bool:
    return record.cleanup_status == CLEANED


@pytest.mark.parametrize("handover", ["SIGTERM", "SIGKILL"])
def test_an_upgrade_recovers_cleans_or_reports_every_record_of_the_previous_release(
    release: Release, tmp_path: Path, rig_stats: RigStats, handover: str
) -> None:
    sent: dict[str, tuple[str, bytes]] = {}
    with previous_release_node(release, tmp_path / "node", LINKS) as node:
        for n in range(4):
            node.sandbox(f"pod-{n}")
        baseline = node.snapshot()  # the pods exist: a link of ours left in one shows
        state = old_process(node).root / "state"
        trace = tmp_path / "trace"
        restart_old(node, sent, trace=trace)

        # The previous release: a whole lifecycle (its points traced), a connect that
        # succeeded, one quarantined, one SIGKILLed in flight.
        lifecycle(node, 0).run()
        done = lifecycle(node, 1)
        done.run(0, 2)
        old_answers = {
            op: raw_call(old_process(node), SOCKET, rpc, wire)
            for op, (rpc, wire) in sent.items()
            if "claim-1" in op or "att-1" in op
        }
        assert len(old_answers) == 2
        assert all(old_answers.values())
        quarantined = lifecycle(node, 3)
        quarantined.run(0, 2)
        quarantine_remove(node, quarantined)
        point = seeded_connect_point(trace, 0, 2)
        rig_stats.fact("upgrade_crash_point", point)
        restart_old(node, sent, armed=point)
        in_flight = lifecycle(node, 2)
        in_flight.run(0, 1)
        with pytest.raises(StepFailed):
            in_flight.phase("connect")()
        assert old_process(node).wait_exit() == -signal.SIGKILL, f"not killed at {point}"
        if handover == "SIGTERM":
            restart_old(node, sent)  # its pod restarts it; it recovers, then is updated

        old_records = journal_records(state)
        code = hand_over(node, SERVICE, stopped=handover == "SIGKILL")
        assert code in (None, 0)
        record_requests(node, sent)

        # Every old record is reported by this tree.
        client = node.processes.processes[SERVICE].client(SOCKET)
        with client:
            reported = {
                r.operation_id: client.inspect(r.operation_id, r.scope) for r in old_records
            }
        missing = [op for op, answer in reported.items() if not answer.found]
        quarantined_op = "att-3:secondary:ConnectNetwork:g1"
        assert reported[quarantined_op].cleanup is CleanupStatus.QUARANTINED

        # The previous release's answers, replayed by this tree, byte for byte.
        new = node.processes.processes[SERVICE]
        replayed = {op: raw_call(new, SOCKET, *sent[op]) for op in old_answers}
        assert replayed == old_answers

        # This tree finishes and cleans what the old one left.
        in_flight.run(1)
        done.run(2)
        administrator_clears(node, quarantined.lab.sandbox())
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
    assert (
        f"{quarantined_op.replace('Connect', 'Remove')}: coordinator call left quarantined"
        in problems
    )
    # claim-0's four, claim-1's two, claim-3's three, claim-2's prepare and connect
    assert len(old_records) == 11, old_records
    assert newly_cleaned, "the upgrade cleaned nothing the old release left"


def test_the_kernel_check_sees_a_link_left_behind(release: Release, tmp_path: Path) -> None:
    """The oracle the upgrade test ends with is not blind on this lab: a link of ours
    left in a pod is a violation."""
    with previous_release_node(release, tmp_path / "node", LINKS) as node:
        baseline = node.snapshot()
        life = lifecycle(node, 1)
        life.run(0, 2)
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
