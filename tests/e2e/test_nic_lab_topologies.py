"""The example topologies end to end on a NIC lab's real kernel (the VM lab's guest, an
SR-IOV host): the coordinator drives the three real service processes (on the rig's
machine, their kernel a lab session of the NIC lab's machine, reached through the
relay's ``kernel+unix://`` socket); the session's kernel ends as it began, and so does the
machine's own namespace.

vf-bond-vlan and vf-bond run on a session that lends the machine's PFs and one VF of
each (``AgentLab.lend_vfs``) under the example inventory's names; the allocator takes
the session's inventory (``AgentSession.inventory()``: the VFs' real PCI addresses, PFs
and indexes), and each PF's VF table must end as it began too.

A NIC lacking ``vlan_on_bond`` refuses a VLAN on a bond of its VFs: igb refuses its VFs'
VLAN filters (igbvf's request through the mailbox is NACKed), and an 8021q device on a
bond asks every slave for its id, so vf-bond-vlan's data-vlan step is EINVAL there. On
such a NIC the test expects exactly that refusal, after which removal and unpreparation
clean everything up. vf-bond (the same without the VLAN) runs end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakekernel.model import diff
from harness.scenarios import lab_inventory
from labs import AgentLab
from plugins.coordinator import Allocator, StepFailed
from plugins.sdk import CleanupStatus

from .node import Node, compiled
from .test_topologies import run_topology

# The topologies a NIC lacking a capability refuses (EINVAL), and the step it stops.
REFUSED = {"vf-bond-vlan": ("vlan_on_bond", "data-vlan")}


def run_refused(node: Node, name: str, step: str) -> None:
    """``name`` up to the connect, which the NIC refuses at ``step`` (EINVAL); removal
    and unpreparation then clean up what the earlier steps made, and the kernel is back
    as it was once the pod is gone."""
    topology = compiled(name)
    before = node.snapshot()
    allocations = node.allocator.allocate(topology)
    prepared = node.coordinator.prepare("claim-1", topology, allocations)
    with pytest.raises(StepFailed) as refused:
        node.coordinator.connect(
            "att-1", "claim-1", topology, allocations, prepared, node.sandbox("pod-a")
        )
    assert refused.value.step == step, refused.value
    assert "EINVAL" in str(refused.value), refused.value
    removed = node.coordinator.remove("att-1")
    assert all(r.status is CleanupStatus.CLEANED for r in removed.values()), removed
    unprepared = node.coordinator.unprepare("claim-1")
    assert [r.status for r in unprepared.values()] == [CleanupStatus.CLEANED] * len(
        topology.prepare_order
    )
    node.kernel.delete_namespace("pod-a")
    # An igbvf VF reset (the bond's failed VLAN unwinding) makes igbvf take a new
    # permanent address from its PF: no plugin can give that back. Everything else must
    # be as it was.
    changes = [c for c in diff(before, node.snapshot()) if "perm_mac:" not in c]
    assert changes == []


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", ["vf-bond-vlan", "vf-bond", "macvlan", "ipvlan"])
def test_topology_end_to_end(nic_lab: AgentLab, name: str, tmp_path: Path) -> None:
    lend = nic_lab.lend_vfs(1) if name.startswith("vf-") else None
    root_before = nic_lab.kernel.snapshot()
    tables_before = nic_lab.vf_tables()
    node = Node(tmp_path, nic_lab.session(lend=lend))
    try:
        assert node.lab.kernel_url is not None
        assert node.lab.kernel_url.startswith("kernel+unix://")
        if lend:
            # A scheduler of its own: the node's allocator keeps what it handed out.
            scheduler = Allocator(lab_inventory(node.lab), node.policies)
            allocated = scheduler.allocate(compiled(name)).values()
            vfs = {d.attributes["ifName"]: d.attributes.get("pciAddress") for d in allocated}
            print(
                f"\n{nic_lab.tier} {name}: allocated {vfs} (pfName/vfIndex from the session's inventory)"
            )
            k = node.lab.kernel
            host = k.host_namespace()
            real = {n: getattr(k.get_link(host, name=str(n)), "pci_address", None) for n in vfs}
            assert vfs == real, "the allocation does not name the session's own VFs"
        capability, step = REFUSED.get(name, ("", ""))
        if capability and nic_lab.lacks(capability):
            print(f"\n{name}: expected refusal at {step}: {nic_lab.lacks(capability)}")
            run_refused(node, name, step)
        else:
            run_topology(node, name)
    finally:
        node.close()
    assert nic_lab.changes_since(root_before) == []
    assert nic_lab.vf_tables() == tables_before
