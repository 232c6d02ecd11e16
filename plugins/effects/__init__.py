"""Effect builders: typed, pure descriptions of kernel effects. No syscalls here.

Each builder returns an ``EffectSpec`` or a ``Subplan`` naming a versioned effect
kind; the runner's registered executors give those kinds meaning. Multi-call
effects (PrepareVF, MoveVF) are subplans so that every kernel call has its own
durable progress boundary.
"""

from __future__ import annotations

from typing import Any

from plugins.sdk import (
    EffectSpec,
    OutputRef,
    PreparedState,
    Requirements,
    ResourceHandle,
    SandboxHandle,
    SharedUnit,
    Subplan,
    VFAllocation,
    effect,
)

SET_VF_CONFIG = "linux/set-vf-config/v1"
SET_LINK_MTU = "linux/set-link-mtu/v1"
MOVE_LINK = "linux/move-link/v1"  # before v2: under a temporary name, then RENAME_LINK
MOVE_LINK_NAMED = "linux/move-link/v2"
RENAME_LINK = "linux/rename-link/v1"
SET_LINK_UP = "linux/set-link-up/v1"
CREATE_BOND = "linux/create-bond/v1"
ATTACH_MEMBER = "linux/attach-member/v1"
CREATE_VLAN = "linux/create-vlan/v1"
CREATE_SHARED_CHILD = "linux/create-shared-child/v1"
HOLD_SHARED_PARENT = "node/hold-shared-parent/v1"


def handle_json(h: ResourceHandle) -> dict[str, Any]:
    return {
        "id": h.id,
        "type": h.type,
        "ownerScope": h.owner_scope,
        "ownerStep": h.owner_step,
        "attachmentId": h.attachment_id,
        "bootId": h.boot_id,
        "rootProvenance": h.root_provenance,
        "description": h.description(),
    }


def namespace_json(sandbox: SandboxHandle) -> dict[str, Any]:
    ns = sandbox.namespace
    return {
        "sandboxId": sandbox.sandbox_id,
        "path": ns.path,
        "device": ns.device,
        "inode": ns.inode,
        "bootId": ns.boot_id,
    }


def prepare_vf(
    vf: VFAllocation, vf_settings: dict[str, Any], requirements: Requirements, mtu: int
) -> Subplan:
    """Set only VF-scoped attributes through the PF, then the VF netdev's MTU."""
    target = {"pf": vf.pf_name, "vfIndex": vf.vf_index, "pciAddress": vf.pci_address}
    want_mtu = max(mtu, requirements.mtu or 0)
    return Subplan(
        steps=(
            (
                "vf-config",
                effect(SET_VF_CONFIG, {**target, "settings": vf_settings}, outputs=["vf"]),
            ),
            (
                "mtu",
                effect(
                    SET_LINK_MTU,
                    {"mtu": want_mtu},
                    inputs={"link": OutputRef(".vf-config", "vf")},
                    outputs=["vf"],
                ),
            ),
        ),
        outputs={"vf": ("mtu", "vf")},
    )


def move_vf(prepared: PreparedState, sandbox: SandboxHandle, name: str) -> Subplan:
    """Move the prepared VF into the sandbox under its final name and marked, set it up.

    One message moves, names and marks it (``linux/move-link/v2``); compensation returns
    the VF to its original namespace and name, and never deletes it. (Before v2: a move
    under a temporary name, then a rename, ``MOVE_LINK`` and ``RENAME_LINK``, still
    executed and undone for the journals that hold them.)
    """
    vf = next(h for h in prepared.handles)
    return Subplan(
        steps=(
            (
                "move",
                effect(
                    MOVE_LINK_NAMED,
                    {"link": handle_json(vf), "to": namespace_json(sandbox), "name": name},
                    outputs=["link"],
                ),
            ),
            ("up", effect(SET_LINK_UP, {}, inputs={"link": OutputRef(".move", "link")})),
        ),
        outputs={"interface": ("move", "link")},
    )


def create_bond(
    sandbox: SandboxHandle,
    name: str,
    mode: str,
    monitor_interval_ms: int,
    mtu: int,
    up_delay_ms: int | None = None,
    down_delay_ms: int | None = None,
) -> EffectSpec:
    payload: dict[str, Any] = {
        "namespace": namespace_json(sandbox),
        "name": name,
        "mode": mode,
        "monitorIntervalMs": monitor_interval_ms,
        "mtu": mtu,
    }
    if up_delay_ms is not None:
        payload["upDelayMs"] = up_delay_ms
    if down_delay_ms is not None:
        payload["downDelayMs"] = down_delay_ms
    return effect(CREATE_BOND, payload, outputs=["interface"])


def attach_member(bond: OutputRef, member: ResourceHandle) -> EffectSpec:
    """Enslave one owned member; the executor captures what enslaving changes on it."""
    return effect(ATTACH_MEMBER, {"member": handle_json(member)}, inputs={"bond": bond})


def set_link_up(link: OutputRef) -> EffectSpec:
    """An update-only effect: the link keeps its identity, no new handle is minted."""
    return effect(SET_LINK_UP, {}, inputs={"link": link})


def create_vlan(
    parent: ResourceHandle,
    sandbox: SandboxHandle,
    name: str,
    vlan_id: int,
    mtu: int,
    protocol: str = "802.1Q",
) -> EffectSpec:
    payload = {
        "parent": handle_json(parent),
        "namespace": namespace_json(sandbox),
        "name": name,
        "vlanId": vlan_id,
        "protocol": protocol,
        "mtu": mtu,
    }
    return effect(CREATE_VLAN, payload, outputs=["interface"])


def hold_shared_parent(unit: SharedUnit, kind: str, mode: str, mtu: int) -> EffectSpec:
    """Record one share of the allocated parent; mutates nothing on the host."""
    payload = {
        "rootId": unit.root_id,
        "parent": unit.parent_name,
        "capacity": unit.capacity,
        "quantity": unit.quantity,
        "kind": kind,
        "mode": mode,
        "mtu": mtu,
    }
    return effect(HOLD_SHARED_PARENT, payload, outputs=["parent"])


def create_shared_child(
    prepared: PreparedState, sandbox: SandboxHandle, name: str, kind: str, mode: str, mtu: int
) -> EffectSpec:
    """A macvlan/ipvlan child of the prepared parent, realized in the sandbox."""
    payload = {
        "parent": handle_json(prepared.handles[0]),
        "namespace": namespace_json(sandbox),
        "name": name,
        "kind": kind,
        "mode": mode,
        "mtu": mtu,
    }
    return effect(CREATE_SHARED_CHILD, payload, outputs=["interface"])
