"""The blueprint's first gate: a recorded VF/bond/VLAN attachment can fail, restart, and
be safely removed without losing ownership (real processes, real sockets, SIGKILL)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakekernel.model import diff
from plugins.coordinator._runtime import StepFailed
from plugins.sdk import CleanupStatus, OperationState
from plugins.sdk.runner import UNSCOPED, Commit, CrashPoint, Phase, PhaseKind

from .node import Node, compiled

BOND_OP = "att-1:bond0:ConnectNetwork:g1"
POINTS = [
    CrashPoint("ConnectNetwork", BOND_OP, effect, phase)
    for effect, phase in (
        (UNSCOPED, Phase.commit(PhaseKind.AFTER_COMMIT, Commit.INTENT)),
        ("create-bond", Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, 2, "set_link")),
        ("attach-member-1", Phase.commit(PhaseKind.BEFORE_COMMIT, Commit.ADVANCE)),
        ("attach-member-1", Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, 1, "set_link")),
        (UNSCOPED, Phase.commit(PhaseKind.BEFORE_COMMIT, Commit.RESPONSE)),
    )
]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    yield n
    n.close()


@pytest.mark.parametrize("point", POINTS, ids=str)
def test_sigkill_the_bond_service_mid_connect_then_remove(node: Node, point: CrashPoint) -> None:
    topology = compiled("vf-bond-vlan")
    before = node.snapshot()
    bond_service = node.processes.processes["networkplugin-bond"]
    bond_service.kill()
    bond_service.start(crash_at=point)

    allocations = node.allocator.allocate(topology)
    prepared = node.coordinator.prepare("claim-1", topology, allocations)
    sandbox = node.sandbox("pod-a")
    with pytest.raises(StepFailed, match="step bond0"):
        node.coordinator.connect("att-1", "claim-1", topology, allocations, prepared, sandbox)
    assert bond_service.wait_exit() == -signal.SIGKILL
    assert node.journal.unit("att-1")[0] == "failed"  # type: ignore[index]

    bond_service.start()  # recovers from its journal before it reports ready
    removed = node.coordinator.remove("att-1")
    assert list(removed) == ["bond0", "vf1", "vf0"]  # data-vlan was never requested
    assert all(r.status is CleanupStatus.CLEANED for r in removed.values()), removed
    unprepared = node.coordinator.unprepare("claim-1")
    assert all(r.status is CleanupStatus.CLEANED for r in unprepared.values())
    assert node.journal.claims() == []

    # Both journals agree on every operation the coordinator asked for.
    clients = node.coordinator.clients
    for call in node.journal.calls():
        seen = clients[call.plugin].inspect(call.operation_id, "")
        assert seen.found, call.operation_id
        if call.hook in ("RemoveNetwork", "NodeUnprepare"):
            assert (call.state, seen.state) == ("cleaned", OperationState.CLEANED), call
        else:
            assert seen.state is OperationState.CLEANED, (call.operation_id, seen.state)

    # Nothing leaked, both VFs are back with their names and attributes, nothing foreign touched.
    node.kernel.delete_namespace("pod-a")
    assert diff(before, node.snapshot()) == []
