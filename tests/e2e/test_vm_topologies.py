"""The example topologies end to end in the VM lab's guest kernel: the coordinator
drives the three real service processes (on the host, their kernel a lab session of
the guest, reached through the relay's ``fake://`` socket); the session's kernel ends
as it began, and so does the guest's own namespace."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakekernel.model import diff
from labs.vm import VmLab

from .node import Node
from .test_topologies import run_topology

pytestmark = pytest.mark.vm

SKIPPED = {
    "vf-bond-vlan": "its VFs are allocated from topologies/inventory.yaml (0000:03:10.x); "
    "the guest's igb VFs have other PCI addresses and there is no lab-provided inventory yet",
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", ["vf-bond-vlan", "macvlan", "ipvlan"])
def test_topology_end_to_end_on_vm(vm_lab: VmLab, name: str, tmp_path: Path) -> None:
    if name in SKIPPED:
        pytest.skip(f"vm tier: {name}: {SKIPPED[name]}")
    root_before = vm_lab.kernel.snapshot()
    node = Node(tmp_path, vm_lab.session())
    try:
        assert node.lab.kernel_url is not None
        assert node.lab.kernel_url.startswith("fake://")
        run_topology(node, name)
    finally:
        node.close()
    assert diff(root_before, vm_lab.kernel.snapshot()) == []
