"""The three example topologies end to end: the coordinator drives the three real
service processes over their sockets on the fake kernel; the kernel ends as it began.
(``run_topology`` is the vm tier's too: tests/e2e/test_nic_lab_topologies.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakekernel.model import diff
from plugins.sdk import CleanupStatus

from .node import Node, compiled


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    yield n
    n.close()


@pytest.mark.parametrize("name", ["vf-bond-vlan", "macvlan", "ipvlan"])
def test_topology_end_to_end(node: Node, name: str) -> None:
    run_topology(node, name)


def run_topology(node: Node, name: str) -> None:
    """Prepare, connect, remove, unprepare ``name`` on ``node``; every step's outputs and
    receipts as the topology says, and the kernel back as it was once the pod is gone."""
    topology = compiled(name)
    before = node.snapshot()
    allocations = node.allocator.allocate(topology)
    prepared = node.coordinator.prepare("claim-1", topology, allocations)
    assert sorted(prepared) == sorted(topology.prepare_order)
    sandbox = node.sandbox("pod-a")
    attachment = node.coordinator.connect(
        "att-1", "claim-1", topology, allocations, prepared, sandbox
    )
    assert attachment.ready
    exported = {
        h.description()["ifName"]
        for ports in attachment.outputs.values()
        for hs in ports.values()
        for h in hs
    }
    expected = {s.interface_names["interface"] for s in topology.steps.values()}
    assert exported == expected
    assert node.journal.unit("att-1")[0] == "ready"  # type: ignore[index]
    removed = node.coordinator.remove("att-1")
    assert [r.status for r in removed.values()] == [CleanupStatus.CLEANED] * len(
        topology.connect_order
    )
    assert list(removed) == list(topology.remove_order)
    unprepared = node.coordinator.unprepare("claim-1")
    assert [r.status for r in unprepared.values()] == [CleanupStatus.CLEANED] * len(
        topology.prepare_order
    )
    assert node.journal.claims() == []
    node.kernel.delete_namespace("pod-a")
    assert diff(before, node.snapshot()) == []
