"""Builders for verified call views, so tests state only what they vary."""

from __future__ import annotations

import json
from typing import Any

from plugins.sdk import (
    KERNEL_INTERFACE,
    AllocationBinding,
    ConnectCall,
    Grant,
    Hook,
    NamespaceHandle,
    OperationEnvelope,
    PrepareCall,
    PreparedState,
    Registration,
    ResourceHandle,
    SandboxHandle,
    Sharing,
)

BOOT = "boot-1"
SANDBOX = SandboxHandle("pod-a", NamespaceHandle("/run/netns/pod-a", 4, 4026532000, BOOT))
OTHER_NS = NamespaceHandle("/run/netns/pod-b", 4, 4026532999, BOOT)


def registrations() -> dict[str, Registration]:
    from labs import project_descriptors

    return project_descriptors()


def envelope(
    hook: Hook, scope: str = "att-1", step: str = "step", op: str = "op-1"
) -> OperationEnvelope:
    return OperationEnvelope(op, hook, scope, step, generation=1, coordinator_epoch=1)


def vf_allocation(root: str = "vf0", index: int = 0, **over: Any) -> AllocationBinding:
    fields: dict[str, Any] = {
        "root_id": root,
        "driver": "dra.networking",
        "pool": "node-1",
        "device": f"pf0-vf{index}",
        "device_type": "vf",
        "sharing": Sharing.EXCLUSIVE,
        "attributes": {
            "pfName": "enp3s0f0",
            "vfIndex": str(index),
            "pciAddress": f"0000:03:00.{index + 2}",
        },
        "capacity": {},
    }
    fields.update(over)
    return AllocationBinding(**fields)


def parent_allocation(
    root: str = "mv0", capacity_name: str = "dra.networking/macvlans", **over: Any
) -> AllocationBinding:
    fields: dict[str, Any] = {
        "root_id": root,
        "driver": "dra.networking",
        "pool": "node-1",
        "device": "enp3s0f2-macvlan",
        "device_type": "pf",
        "sharing": Sharing.SHARED,
        "attributes": {"ifName": "enp3s0f2"},
        "capacity": {capacity_name: "1"},
    }
    fields.update(over)
    return AllocationBinding(**fields)


def interface(
    hid: str,
    physical: str,
    *,
    ns: NamespaceHandle = SANDBOX.namespace,
    attachment: str = "att-1",
    type_: str = KERNEL_INTERFACE,
    name: str = "net1",
) -> ResourceHandle:
    desc = {"ifName": name, "netns": {"device": ns.device, "inode": ns.inode}, "physical": physical}
    return ResourceHandle(
        hid, type_, attachment, "vf0", attachment, ns.boot_id, "vf0", json.dumps(desc)
    )


def prepare_call(plugin: str, config: Any, allocation: AllocationBinding | None) -> PrepareCall:
    reg = registrations()[plugin]
    return PrepareCall(
        envelope(Hook.NODE_PREPARE, scope=f"prep-{plugin}"),
        reg.descriptor,
        reg.validator,
        json.dumps(config),
        allocation,
    )


def connect_call(plugin: str, config: Any, **over: Any) -> ConnectCall:
    reg = registrations()[plugin]
    fields: dict[str, Any] = {
        "sandbox": SANDBOX,
        "interface_names": {"interface": "data0"},
    }
    fields.update(over)
    return ConnectCall(
        envelope(Hook.CONNECT_NETWORK), reg.descriptor, reg.validator, json.dumps(config), **fields
    )


def prepared(plugin: str, root: str, handle_type: str) -> PreparedState:
    h = ResourceHandle(
        f"{root}-prepared", handle_type, f"prep-{plugin}", root, "", BOOT, root, "{}"
    )
    return PreparedState(root, plugin, f"prep-{plugin}", (h,))


def grants(effect: str, *handles: ResourceHandle) -> tuple[Grant, ...]:
    return tuple(Grant(effect, h.id) for h in handles)
