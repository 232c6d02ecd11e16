"""The node authority across services: conflicting access to one physical interface is
refused before any plugin is asked, and incompatible shared modes wait for cleanup."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from plugins.coordinator import AllocatedDevice
from plugins.sdk import Aborted, CleanupStatus, Sharing

from .node import Node, compiled


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    yield n
    n.close()


def macvlan_on(ifname: str, pci: str) -> dict[str, AllocatedDevice]:
    """A (mis)allocation of a macvlan share whose parent is the given netdev."""
    return {
        "secondary": AllocatedDevice(
            step="secondary",
            device=f"{ifname}-macvlan",
            source_device=ifname,
            device_type="pf",
            sharing=Sharing.SHARED,
            attributes={"type": "pf", "ifName": ifname, "pciAddress": pci},
            consumed={"dra.networking/macvlans": 1},
            policy="sdk-parent-macvlan",
            pool="fake-node-1",
        )
    }


def test_vf_service_and_link_service_on_one_physical_interface(node: Node) -> None:
    vfs = compiled("vf-bond-vlan")
    node.coordinator.prepare("claim-vf", vfs, node.allocator.allocate(vfs))
    macvlan = compiled("macvlan")
    with pytest.raises(Aborted, match=r"pci:0000:03:10\.0 is held by claim-vf\.vf0"):
        node.coordinator.prepare("claim-mv", macvlan, macvlan_on("enp3s0f0v0", "0000:03:10.0"))
    # The link service was never asked to act on it.
    assert not node.coordinator.clients["macvlan"].inspect("", "claim-mv.secondary").found
    assert [c.plugin for c in node.journal.calls("claim-mv.secondary")] == []


def test_concurrent_conflicting_claims_are_serialized(node: Node) -> None:
    vfs = compiled("vf-bond-vlan")
    macvlan = compiled("macvlan")
    allocations = node.allocator.allocate(vfs)
    outcomes: list[str] = []
    start = threading.Barrier(2)

    def run(name: str, fn: object) -> None:
        start.wait(10)
        try:
            fn()  # type: ignore[operator]
            outcomes.append(f"{name}:ok")
        except Aborted:
            outcomes.append(f"{name}:refused")

    threads = [
        threading.Thread(
            target=run, args=("vf", lambda: node.coordinator.prepare("claim-vf", vfs, allocations))
        ),
        threading.Thread(
            target=run,
            args=(
                "mv",
                lambda: node.coordinator.prepare(
                    "claim-mv", macvlan, macvlan_on("enp3s0f0v0", "0000:03:10.0")
                ),
            ),
        ),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(o.split(":")[1] for o in outcomes) == ["ok", "refused"], outcomes


def test_ipvlan_waits_until_macvlan_shares_are_released_and_cleaned(node: Node) -> None:
    macvlan, ipvlan = compiled("macvlan"), compiled("ipvlan")
    node.coordinator.prepare("claim-mv", macvlan, node.allocator.allocate(macvlan))
    ip_alloc = {
        "secondary": AllocatedDevice(
            step="secondary",
            device="enp3s0f2-ipvlan",
            source_device="enp3s0f2",
            device_type="pf",
            sharing=Sharing.SHARED,
            attributes={"type": "pf", "ifName": "enp3s0f2", "pciAddress": "0000:03:00.2"},
            consumed={"dra.networking/ipvlans": 1},
            policy="sdk-parent-ipvlan",
            pool="fake-node-1",
        )
    }
    with pytest.raises(
        Aborted, match=r"shared by claim-mv\.secondary as macvlan; ipvlan cannot coexist"
    ):
        node.coordinator.prepare("claim-ip", ipvlan, ip_alloc)
    receipts = node.coordinator.unprepare("claim-mv")
    assert [r.status for r in receipts.values()] == [CleanupStatus.CLEANED]
    prepared = node.coordinator.prepare("claim-ip", ipvlan, ip_alloc)
    assert list(prepared) == ["secondary"]
