"""What the conformance suite needs to know about a plugin: a ``Target``.

A plugin author describes how to register the plugin, which executors it runs, how
to build one valid request per hook on a fresh host, and where a foreign object
would collide with it. The suite does the rest (see ``conformance.checks``).

A host is a ``labs.Lab`` from a factory the checks take (``make_lab``; default: the
fake kernel model of ``fakekernel/labs/default.yaml``, in this process), so the same
checks run on a real kernel: a netns lab, or a session of the VM lab's guest whose node
holds the guest's igb PFs and VFs under the example inventory's names.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from fakekernel.lab import load_lab
from labs import FakeModelLab, Lab, LabKernel
from plugins.kernel import Kernel, KernelError, LinkChanges, LinkSpec, NsRef
from plugins.sdk import (
    AllocationBinding,
    ConnectRequest,
    Grant,
    Hook,
    NamespaceHandle,
    OperationEnvelope,
    PreparedState,
    PrepareRequest,
    Registry,
    ResourceHandle,
    SandboxHandle,
    Sharing,
)
from plugins.sdk.runner import EffectRegistry

DEFAULT_LAB = Path(__file__).resolve().parent.parent / "fakekernel" / "labs" / "default.yaml"
LabFactory = Callable[[], Lab]
"""A new lab per call: what each check builds its host on."""
# The example node's two VFs the targets use (VF 0 of enp3s0f0, VF 0 of enp3s0f1), by the
# PCI addresses of topologies/inventory.yaml; a lab with an inventory of its own names
# its own (``Host.vf``).
EXAMPLE_VFS = (
    {"name": "enp3s0f0v0", "pfName": "enp3s0f0", "vfIndex": 0, "pciAddress": "0000:03:10.0"},
    {"name": "enp3s0f1v0", "pfName": "enp3s0f1", "vfIndex": 0, "pciAddress": "0000:03:10.1"},
)


def fake_lab(lab: Path = DEFAULT_LAB) -> Lab:
    """The default host: the kernel model of a fake lab file, as written (no random
    start state), in this process."""
    return FakeModelLab(model=load_lab(lab), randomize=False)


@dataclass
class Host:
    """A fresh host for one check: its lab, the lab's kernel and the sandbox namespace."""

    lab: Lab
    sandbox: SandboxHandle

    @classmethod
    def create(cls, make_lab: LabFactory | None = None) -> Host:
        lab = fake_lab() if make_lab is None else make_lab()
        try:
            ns = lab.kernel.add_namespace("pod-a")
        except BaseException:
            lab.close()
            raise
        return cls(
            lab, SandboxHandle("pod-a", NamespaceHandle(ns.path, ns.device, ns.inode, ns.boot_id))
        )

    @property
    def kernel(self) -> LabKernel:
        return self.lab.kernel

    @property
    def sandbox_ns(self) -> NsRef:
        return self.kernel.open_namespace(self.sandbox.namespace)

    def vf(self, i: int) -> dict[str, Any]:
        """VF 0 of the ``i``-th PF (0 or 1) of this host's node: from the lab's inventory
        (real PCI addresses on the vm tier), else the example node's."""
        inventory = self.lab.inventory()
        if inventory is None:
            return dict(EXAMPLE_VFS[i])
        want = str(EXAMPLE_VFS[i]["name"])
        device = inventory.device(want)
        if device is None:
            raise LookupError(f"the lab's inventory has no {want} (it lends no VFs?)")
        a = device.networking
        return {
            "name": want,
            "pfName": a["pfName"],
            "vfIndex": a["vfIndex"],
            "pciAddress": a["pciAddress"],
        }


def envelope(hook: Hook, op: str, scope: str, step: str, generation: int = 1) -> OperationEnvelope:
    return OperationEnvelope(op, hook, scope, step, generation, 1)


@dataclass
class Target:
    """One logical plugin under test.

    ``prepare`` returns None for Operation-only plugins. ``connect`` receives the
    prepared state (or None). ``interface`` is the name the connect assigns, where a
    foreign link will be planted for the foreign-object check.
    """

    name: str
    socket: str
    registry: Callable[[], Registry]
    effects: Callable[[Kernel], EffectRegistry]
    connect: Callable[[Host, PreparedState | None, str], ConnectRequest]
    prepare: Callable[[Host, str], PrepareRequest] | None = None
    interface: str = "net9"
    setup: Callable[[Host], None] = field(default=lambda host: None)
    tamper: Callable[[Host], None] | None = None
    """An administrator changing, after connect, a field this plugin set (None: not applicable)."""

    @property
    def operation_only(self) -> bool:
        return self.prepare is None


# -- the five logical plugins of this project ---------------------------------------------------


def _only(registry: Callable[[], Registry], name: str) -> Callable[[], Registry]:
    """One endpoint of a service (the link service registers three)."""

    def make() -> Registry:
        full = registry()
        picked = Registry()
        for ep in full.endpoints:
            if ep.socket_name == f"{name}.sock":
                picked.register(ep)
        return picked

    return make


def _linux_effects(kernel: Kernel) -> EffectRegistry:
    from plugins.effects.linux import linux_effects

    return linux_effects(kernel)


def _connect(
    host: Host,
    config: dict[str, Any],
    *,
    op: str,
    name: str,
    prepared: PreparedState | None = None,
    allocation: AllocationBinding | None = None,
    inputs: dict[str, tuple[ResourceHandle, ...]] | None = None,
    grants: tuple[Grant, ...] = (),
) -> ConnectRequest:
    return ConnectRequest(
        envelope(Hook.CONNECT_NETWORK, op, "att-1", "step-1"),
        host.sandbox,
        json.dumps(config),
        inputs=inputs or {},
        interface_names={"interface": name},
        prepared=prepared,
        allocation=allocation,
        grants=grants,
    )


def _vf_binding(host: Host) -> AllocationBinding:
    vf = host.vf(0)
    attributes = {k: str(vf[k]) for k in ("pfName", "vfIndex", "pciAddress")}
    return AllocationBinding(
        "root-1", "dra.networking", "node", vf["name"], "vf", Sharing.EXCLUSIVE, attributes
    )


def _share(kind: str) -> AllocationBinding:
    capacity = {"macvlan": "dra.networking/macvlans", "ipvlan": "dra.networking/ipvlans"}[kind]
    return AllocationBinding(
        "root-1",
        "dra.networking",
        "node",
        f"enp3s0f2-{kind}",
        "pf",
        Sharing.SHARED,
        {"ifName": "enp3s0f2"},
        {capacity: "1"},
    )


def _sandbox_vf(host: Host, pci: str, name: str) -> None:
    """A VF already realized in the sandbox by this attachment (what the sriov step would do)."""
    link = host.kernel.find_device(pci)
    assert link is not None, f"no netdev at {pci}"
    sandbox = host.sandbox_ns
    link = host.kernel.move_link(link.ns, link.ifindex, sandbox, new_name=name)
    host.kernel.set_link(sandbox, link.ifindex, LinkChanges(up=True))


def _bond_setup(host: Host) -> None:
    _sandbox_vf(host, host.vf(0)["pciAddress"], "net1")
    _sandbox_vf(host, host.vf(1)["pciAddress"], "net2")


def _member(host: Host, pci: str, name: str) -> ResourceHandle:
    """The KernelInterface/v1 handle the sriov step would have exported for a sandbox VF."""
    link = host.kernel.find_device(pci)
    assert link is not None, f"no netdev at {pci}"
    ns = host.sandbox.namespace
    description = {
        "ifName": link.name,
        "ifIndex": link.ifindex,
        "kind": "device",
        "mac": link.mac,
        "mtu": link.mtu,
        "netns": {"path": ns.path, "device": ns.device, "inode": ns.inode, "bootId": ns.boot_id},
        "physical": f"pci:{pci}",
        "pciAddress": pci,
    }
    return ResourceHandle(
        f"rh-{name}",
        "KernelInterface/v1",
        "att-1",
        "vf",
        "att-1",
        ns.boot_id,
        f"root-{name}",
        json.dumps(description),
    )


def _bond_connect(host: Host, prepared: PreparedState | None, op: str) -> ConnectRequest:
    members = (
        _member(host, host.vf(0)["pciAddress"], "net1"),
        _member(host, host.vf(1)["pciAddress"], "net2"),
    )
    config = {"mode": "active-backup", "monitorIntervalMs": 100, "mtu": 1500}
    grants = tuple(Grant("linux/attach-member/v1", m.id) for m in members)
    return _connect(host, config, op=op, name="net9", inputs={"members": members}, grants=grants)


def _vlan_connect(host: Host, prepared: PreparedState | None, op: str) -> ConnectRequest:
    parent = _member(host, host.vf(0)["pciAddress"], "net1")
    return _connect(
        host,
        {"vlanId": 100, "mtu": 1500},
        op=op,
        name="net9",
        inputs={"parent": (parent,)},
        grants=(Grant("linux/create-vlan/v1", parent.id),),
    )


def _vf_tamper(host: Host) -> None:
    """An administrator changes VF 0's trust (we set it to true) and VLAN through its PF."""
    from plugins.kernel import VFChanges

    vf = host.vf(0)
    node = host.kernel.host_namespace()
    pf = host.kernel.get_link(node, name=vf["pfName"])
    assert pf is not None
    host.kernel.set_vf(node, pf.ifindex, vf["vfIndex"], VFChanges(trust=False, vlan=42))


def _vf_prepare(host: Host, op: str) -> PrepareRequest:
    config = {
        "mtu": 1500,
        "vf": {"vlan": 0, "spoofCheck": False, "trust": True},
        "rdmaAccess": False,
    }
    return PrepareRequest(
        envelope(Hook.NODE_PREPARE, op, "prep-1", "step-1"), _vf_binding(host), json.dumps(config)
    )


def _vf_connect(host: Host, prepared: PreparedState | None, op: str) -> ConnectRequest:
    config = {
        "mtu": 1500,
        "vf": {"vlan": 0, "spoofCheck": False, "trust": True},
        "rdmaAccess": False,
    }
    return _connect(
        host, config, op=op, name="net9", prepared=prepared, allocation=_vf_binding(host)
    )


def _share_prepare(kind: str) -> Callable[[Host, str], PrepareRequest]:
    mode = {"macvlan": "bridge", "ipvlan": "l2"}[kind]

    def prepare(host: Host, op: str) -> PrepareRequest:
        return PrepareRequest(
            envelope(Hook.NODE_PREPARE, op, "prep-1", "step-1"),
            _share(kind),
            json.dumps({"mode": mode, "mtu": 1500}),
        )

    return prepare


def _share_connect(kind: str) -> Callable[[Host, PreparedState | None, str], ConnectRequest]:
    mode = {"macvlan": "bridge", "ipvlan": "l2"}[kind]

    def connect(host: Host, prepared: PreparedState | None, op: str) -> ConnectRequest:
        return _connect(
            host,
            {"mode": mode, "mtu": 1500},
            op=op,
            name="net9",
            prepared=prepared,
            allocation=_share(kind),
        )

    return connect


def project_targets() -> list[Target]:
    """The five logical plugins, as their services register them."""
    from plugins import bond, links, vf

    link_registry = partial(Registry.of, links.register)
    return [
        Target(
            "sriov",
            "sriov.sock",
            partial(Registry.of, vf.register),
            _linux_effects,
            _vf_connect,
            prepare=_vf_prepare,
            tamper=_vf_tamper,
        ),
        Target(
            "bond",
            "bond.sock",
            partial(Registry.of, bond.register),
            _linux_effects,
            _bond_connect,
            setup=_bond_setup,
        ),
        Target(
            "vlan",
            "vlan.sock",
            _only(link_registry, "vlan"),
            _linux_effects,
            _vlan_connect,
            setup=_bond_setup,
        ),
        Target(
            "macvlan",
            "macvlan.sock",
            _only(link_registry, "macvlan"),
            _linux_effects,
            _share_connect("macvlan"),
            prepare=_share_prepare("macvlan"),
        ),
        Target(
            "ipvlan",
            "ipvlan.sock",
            _only(link_registry, "ipvlan"),
            _linux_effects,
            _share_connect("ipvlan"),
            prepare=_share_prepare("ipvlan"),
        ),
    ]


def plant_foreign(host: Host, name: str) -> None:
    """An administrator's link with exactly the name our plugin is about to use."""
    foreign_link(host.kernel, host.sandbox_ns, name)


def foreign_link(kernel: Kernel, ns: NsRef, name: str) -> None:
    """A link named ``name`` in ``ns`` that is not ours: a dummy, or a veth pair on a
    kernel without the dummy module (this machine's: EOPNOTSUPP), so the check tests
    the plugin on every lab rather than the kernel's modules."""
    try:
        kernel.create_link(ns, LinkSpec(kind="dummy", name=name, alias="foreign-admin"))
    except KernelError as exc:
        if exc.errno != errno.EOPNOTSUPP:
            raise
        spec = LinkSpec(kind="veth", name=name, alias="foreign-admin", peer_name="foreign-peer")
        kernel.create_link(ns, spec)


def example_target() -> Target:
    """The third-party example plugin in examples/, written only with the public SDK."""
    from examples.dummy_plugin import registry
    from examples.dummy_plugin.effects import dummy_effects

    def connect(host: Host, prepared: PreparedState | None, op: str) -> ConnectRequest:
        return _connect(host, {"mtu": 1500}, op=op, name="net9")

    return Target("dummy", "dummy.sock", registry, dummy_effects, connect)
