"""The link family: ``vlan``, ``ipvlan`` and ``macvlan`` logical plugins in one service.

They share code and packaging, never contracts: the kind is fixed when the
endpoint is registered, and nothing in a request can switch it. The kind picks the
kernel link and the effects; everything the contract says (name, step kinds, the
capacity a share consumes, port and interface names) is read from the pinned
descriptor, never repeated here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from plugins import effects
from plugins.sdk import (
    AllocationRoot,
    CleanupPlan,
    ConnectCall,
    DescriptorRef,
    Endpoint,
    Hook,
    Plan,
    PrepareCall,
    Registry,
    StepKind,
    UnprepareCall,
    new_plan,
    pinned_bundles,
    undo_prepare,
    wrong_step_kind,
)


class Kind(enum.StrEnum):
    VLAN = "vlan"
    IPVLAN = "ipvlan"
    MACVLAN = "macvlan"


@dataclass(frozen=True)
class VLANConfig:
    vlan_id: int
    mtu: int
    protocol: Literal["802.1Q", "802.1ad"] = "802.1Q"


@dataclass(frozen=True)
class SharedChildConfig:
    mode: Literal["bridge", "l2"]
    mtu: int


CONTRACT_VERSION = "v1alpha1"
"""The one contract version this code implements; its bundle holds everything else."""


class Plugin(AllocationRoot):
    def __init__(self, kind: Kind) -> None:
        self.kind = Kind(kind)  # raises ValueError for anything but the three kinds

    @property
    def schema_id(self) -> str:
        return f"{self.kind.value}/{CONTRACT_VERSION}"

    def describe(self) -> DescriptorRef:
        return pinned_bundles().load(self.schema_id).descriptor.ref()

    def node_prepare(self, call: PrepareCall) -> Plan:
        contract = call.descriptor
        if StepKind.ALLOCATION not in contract.step_kinds:
            raise wrong_step_kind(contract.name, Hook.NODE_PREPARE, "Operation")
        cfg = call.config(SharedChildConfig)
        # A contract without a capacity prepares no shares: the check names that.
        unit = call.require_shared_unit(contract.name, contract.preparation.capacity or "")
        (parent,) = contract.preparation.outputs
        plan = new_plan()
        hold = plan.add(
            "hold-parent", effects.hold_shared_parent(unit, self.kind.value, cfg.mode, cfg.mtu)
        )
        plan.export(parent.name, hold.output("parent"))
        return plan.build()

    def connect_network(self, call: ConnectCall) -> Plan:
        contract = call.descriptor
        (interface,) = contract.outputs
        sandbox = call.require_sandbox()
        name = call.interface_name(interface.name)
        plan = new_plan()
        if self.kind is Kind.VLAN:
            (port,) = contract.inputs
            # One parent is what a VLAN has; the descriptor may only narrow that.
            (parent,) = call.require_local_interfaces(port.name, 1, 1)
            vlan = call.config(VLANConfig)
            spec = effects.create_vlan(parent, sandbox, name, vlan.vlan_id, vlan.mtu, vlan.protocol)
        else:
            prepared = call.require_prepared_root(contract.name)
            shared = call.config(SharedChildConfig)
            spec = effects.create_shared_child(
                prepared, sandbox, name, self.kind.value, shared.mode, shared.mtu
            )
        child = plan.add("create-child", spec)
        plan.add("activate-child", effects.set_link_up(child.output("interface")))
        plan.export(interface.name, child.output("interface"))
        return plan.build()

    def node_unprepare(self, call: UnprepareCall) -> CleanupPlan:
        contract = call.descriptor
        if StepKind.ALLOCATION not in contract.step_kinds:
            raise wrong_step_kind(contract.name, Hook.NODE_UNPREPARE, "Operation")
        return undo_prepare(call)


def register(registry: Registry) -> None:
    for kind in Kind:
        plugin = Plugin(kind)
        # The state namespace is the plugin's name and contract version, as its schema id is.
        registry.register(Endpoint(f"{kind.value}.sock", plugin.schema_id, plugin))
