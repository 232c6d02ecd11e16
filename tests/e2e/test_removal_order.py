"""Removal waits for each dependent's CLEANED receipt before touching its ancestors."""

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


def test_bond_and_vfs_wait_for_the_vlan_receipt(node: Node) -> None:
    topology = compiled("vf-bond-vlan")
    before = node.snapshot()
    allocations = node.allocator.allocate(topology)
    prepared = node.coordinator.prepare("claim-1", topology, allocations)
    node.coordinator.connect(
        "att-1", "claim-1", topology, allocations, prepared, node.sandbox("pod-a")
    )
    attached = node.snapshot()

    links = node.processes.processes["networkplugin-links"]
    links.kill()  # the VLAN's service is down: no receipt can be had
    receipts = node.coordinator.remove("att-1")
    assert list(receipts) == ["data-vlan"]
    assert receipts["data-vlan"].status is CleanupStatus.PENDING
    assert diff(attached, node.snapshot()) == []  # bond and VFs untouched while the VLAN is pending

    links.start()
    receipts = node.coordinator.remove("att-1")
    assert [r.status for r in receipts.values()] == [CleanupStatus.CLEANED] * 4
    node.coordinator.unprepare("claim-1")
    node.kernel.delete_namespace("pod-a")
    assert diff(before, node.snapshot()) == []
