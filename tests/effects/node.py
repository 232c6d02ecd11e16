"""A node of the real plugins: the three services' runners in one place, with request
builders of the blueprint's topologies.

``PluginNode`` is what every such node has, whatever its kernel: the requests, the pod,
the VFs' attributes. ``FakeNode`` is one on the fake kernel's lab file (the kernel model
lives outside every runner, like a real kernel outlives a service, so ``crash()``
abandons the runners and stores but keeps the model); ``tests.effects.nic_node.NicNode``
is one on a NIC lab's real kernel.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fakekernel.model import FakeKernelModel, diff
from labs import DEFAULT_LAB, FakeModelLab, Node
from plugins.kernel import Link, NsRef
from plugins.sdk import (
    AllocationBinding,
    CleanupRequest,
    CleanupResponse,
    ConnectRequest,
    Grant,
    Hook,
    OperationEnvelope,
    PreparedState,
    PrepareRequest,
    ResourceHandle,
    SandboxHandle,
    Sharing,
)
from plugins.sdk.runner import CrashPoints

LAB = DEFAULT_LAB
VF0 = {"pfName": "enp3s0f0", "vfIndex": "0", "pciAddress": "0000:03:10.0"}
VF1 = {"pfName": "enp3s0f1", "vfIndex": "0", "pciAddress": "0000:03:10.1"}
VF_CONFIG = {
    "mtu": 1500,
    "vf": {"vlan": 0, "spoofCheck": False, "trust": True},
    "rdmaAccess": False,
}
BOND_CONFIG = {"mode": "active-backup", "monitorIntervalMs": 100, "mtu": 1500}
VLAN_CONFIG = {"vlanId": 100, "mtu": 1500}


def envelope(hook: Hook, op: str, scope: str, step: str) -> OperationEnvelope:
    return OperationEnvelope(op, hook, scope, step, 1, 1)


class PluginNode(Node):
    """The three services' runners in-process (so any in-process crash point can fire),
    no coordinator, on a lab whose pod is ``pod``; ``vf0`` and ``vf1`` are the
    allocation attributes of VF 0 of each of the node's two PFs. A subclass sets
    ``vf0``, ``vf1`` and ``pod_ns`` and says how a VF disappears (``remove_vf``)."""

    vf0: dict[str, str]
    vf1: dict[str, str]
    pod: SandboxHandle
    pod_ns: NsRef
    _closed = False

    def crash_plan(self) -> CrashPoints:
        """The crash points of every incarnation of the services (after ``crash()`` too)."""
        return CrashPoints()

    def crash(self) -> None:
        self.crash_services(self.crash_plan())

    def changes(self, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
        """How snapshot ``after`` differs from ``before`` (``diff`` lines)."""
        return diff(before, after)

    def require(self, *capabilities: str) -> None:
        """Skip, naming why, unless the node's NICs can do each of ``capabilities`` (the
        SR-IOV inventory's names, docs/labs.md); the fake kernel's NIC does all."""

    def remove_vf(self, attributes: dict[str, str]) -> None:
        """The VF of ``attributes`` disappears from under the node, as when an
        administrator lowers its PF's ``sriov_numvfs``."""
        raise NotImplementedError

    def link(self, name: str) -> Link | None:
        """The node's (host namespace's) link ``name``."""
        return self.kernel.get_link(self.kernel.host_namespace(), name=name)

    def close(self) -> None:
        """Idempotent: a test may close its node itself before its fixture does."""
        if not self._closed:
            self._closed = True
            super().close()

    # -- requests of the blueprint's VF/bond/VLAN topology --------------------------------------

    def prepare_vf(self, root: str, attributes: dict[str, str]) -> PreparedState:
        req = PrepareRequest(
            envelope(Hook.NODE_PREPARE, f"prep-{root}", f"claim-{root}", root),
            self.allocation(root, attributes),
            json.dumps(VF_CONFIG),
        )
        return self.endpoints["sriov"].node_prepare(req).prepared_state

    def allocation(self, root: str, attributes: dict[str, str]) -> AllocationBinding:
        return AllocationBinding(
            root, "dra.networking", "node", root, "vf", Sharing.EXCLUSIVE, attributes
        )

    def connect_vf(
        self, root: str, attributes: dict[str, str], prepared: PreparedState, name: str
    ) -> ResourceHandle:
        req = ConnectRequest(
            envelope(Hook.CONNECT_NETWORK, f"conn-{root}", "att-1", root),
            self.pod,
            json.dumps(VF_CONFIG),
            interface_names={"interface": name},
            prepared=prepared,
            allocation=self.allocation(root, attributes),
        )
        (handle,) = self.endpoints["sriov"].connect_network(req).outputs["interface"]
        return handle

    def connect_bond(
        self, members: tuple[ResourceHandle, ...], name: str = "bond0"
    ) -> ResourceHandle:
        req = ConnectRequest(
            envelope(Hook.CONNECT_NETWORK, "conn-bond0", "att-1", "bond0"),
            self.pod,
            json.dumps(BOND_CONFIG),
            inputs={"members": members},
            interface_names={"interface": name},
            grants=tuple(Grant("linux/attach-member/v1", m.id) for m in members),
        )
        (handle,) = self.endpoints["bond"].connect_network(req).outputs["interface"]
        return handle

    def connect_vlan(self, parent: ResourceHandle, name: str = "data0") -> ResourceHandle:
        req = ConnectRequest(
            envelope(Hook.CONNECT_NETWORK, "conn-vlan", "att-1", "data-vlan"),
            self.pod,
            json.dumps(VLAN_CONFIG),
            inputs={"parent": (parent,)},
            interface_names={"interface": name},
            grants=(Grant("linux/create-vlan/v1", parent.id),),
        )
        (handle,) = self.endpoints["vlan"].connect_network(req).outputs["interface"]
        return handle

    def remove(
        self, plugin: str, step: str, op: str | None = None, attachment: str = "att-1"
    ) -> CleanupResponse:
        req = CleanupRequest(
            envelope(Hook.REMOVE_NETWORK, op or f"remove-{attachment}-{step}", attachment, step)
        )
        return self.endpoints[plugin].remove_network(req)

    # -- shared parents (macvlan / ipvlan) --------------------------------------------------

    def share(
        self, kind: str, root: str, parent: str = "enp3s0f2", quantity: str = "1"
    ) -> AllocationBinding:
        capacity = {"macvlan": "dra.networking/macvlans", "ipvlan": "dra.networking/ipvlans"}[kind]
        return AllocationBinding(
            root,
            "dra.networking",
            "node",
            f"{parent}-{kind}",
            "pf",
            Sharing.SHARED,
            {"ifName": parent},
            {capacity: quantity},
        )

    def prepare_share(self, kind: str, root: str, mtu: int = 1500, **share: str) -> PreparedState:
        mode = {"macvlan": "bridge", "ipvlan": "l2"}[kind]
        req = PrepareRequest(
            envelope(Hook.NODE_PREPARE, f"prep-{root}", f"claim-{root}", root),
            self.share(kind, root, **share),
            json.dumps({"mode": mode, "mtu": mtu}),
        )
        return self.endpoints[kind].node_prepare(req).prepared_state

    def connect_share(
        self, kind: str, root: str, prepared: PreparedState, name: str, attachment: str = "att-1"
    ) -> ResourceHandle:
        mode = {"macvlan": "bridge", "ipvlan": "l2"}[kind]
        req = ConnectRequest(
            envelope(Hook.CONNECT_NETWORK, f"conn-{attachment}-{root}", attachment, root),
            self.pod,
            json.dumps({"mode": mode, "mtu": 1500}),
            interface_names={"interface": name},
            prepared=prepared,
            allocation=self.share(kind, root),
        )
        (handle,) = self.endpoints[kind].connect_network(req).outputs["interface"]
        return handle

    def unprepare_vf(self, root: str) -> CleanupResponse:
        req = CleanupRequest(envelope(Hook.NODE_UNPREPARE, f"unprep-{root}", f"claim-{root}", root))
        return self.endpoints["sriov"].node_unprepare(req)

    def full_attach(self) -> dict[str, Any]:
        p0 = self.prepare_vf("vf0", self.vf0)
        p1 = self.prepare_vf("vf1", self.vf1)
        h0 = self.connect_vf("vf0", self.vf0, p0, "net1")
        h1 = self.connect_vf("vf1", self.vf1, p1, "net2")
        b = self.connect_bond((h0, h1))
        v = self.connect_vlan(b)
        return {"vf0": h0, "vf1": h1, "bond0": b, "data0": v}

    def full_detach(self) -> list[CleanupResponse]:
        return [
            self.remove("vlan", "data-vlan"),
            self.remove("bond", "bond0"),
            self.remove("sriov", "vf1"),
            self.remove("sriov", "vf0"),
            self.unprepare_vf("vf1"),
            self.unprepare_vf("vf0"),
        ]

    def sandbox_links(self) -> dict[str, Link]:
        return {link.name: link for link in self.kernel.list_links(self.pod_ns)}


class FakeNode(PluginNode):
    """The node on the lab file's model as written (no random start: these tests set
    their own scenes); ``pod`` is the sandbox every request names."""

    vf0 = VF0
    vf1 = VF1

    def __init__(
        self, root: Path, model: FakeKernelModel | None = None, crash: CrashPoints | None = None
    ) -> None:
        # The lab file as written, from FakeModelLab's per-process copy of its model.
        self.fake = (
            FakeModelLab(LAB, randomize=False) if model is None else FakeModelLab(model=model)
        )
        super().__init__(self.fake, root, crash=crash or self.crash_plan(), coordinator=False)
        self.pod = self.sandbox()
        self.pod_ns = self.model.open_namespace(self.pod.namespace)

    @property
    def model(self) -> FakeKernelModel:
        return self.fake.model

    def remove_vf(self, attributes: dict[str, str]) -> None:
        self.model.remove_device(attributes["pciAddress"])
