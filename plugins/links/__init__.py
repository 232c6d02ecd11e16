"""The link family: ``vlan``, ``ipvlan`` and ``macvlan`` logical plugins in one service.

They share code and packaging, never contracts: the kind is fixed when the
endpoint is registered, and nothing in a request can switch it.
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


_CAPACITY = {Kind.MACVLAN: "dra.networking/macvlans", Kind.IPVLAN: "dra.networking/ipvlans"}


class Plugin(AllocationRoot):
    def __init__(self, kind: Kind) -> None:
        self.kind = Kind(kind)  # raises ValueError for anything but the three kinds

    def describe(self) -> DescriptorRef:
        step = StepKind.OPERATION if self.kind is Kind.VLAN else StepKind.ALLOCATION
        return DescriptorRef(self.kind.value, "v1alpha1", (step,), f"{self.kind.value}/v1alpha1")

    def node_prepare(self, call: PrepareCall) -> Plan:
        if self.kind is Kind.VLAN:
            raise wrong_step_kind(self.kind.value, Hook.NODE_PREPARE, "Operation")
        cfg = call.config(SharedChildConfig)
        unit = call.require_shared_unit(self.kind.value, _CAPACITY[self.kind])
        plan = new_plan()
        hold = plan.add(
            "hold-parent", effects.hold_shared_parent(unit, self.kind.value, cfg.mode, cfg.mtu)
        )
        plan.export("parent", hold.output("parent"))
        return plan.build()

    def connect_network(self, call: ConnectCall) -> Plan:
        sandbox = call.require_sandbox()
        name = call.interface_name("interface")
        plan = new_plan()
        if self.kind is Kind.VLAN:
            (parent,) = call.require_local_interfaces("parent", 1, 1)
            vlan = call.config(VLANConfig)
            spec = effects.create_vlan(parent, sandbox, name, vlan.vlan_id, vlan.mtu, vlan.protocol)
        else:
            prepared = call.require_prepared_root(self.kind.value)
            shared = call.config(SharedChildConfig)
            spec = effects.create_shared_child(
                prepared, sandbox, name, self.kind.value, shared.mode, shared.mtu
            )
        child = plan.add("create-child", spec)
        plan.add("activate-child", effects.set_link_up(child.output("interface")))
        plan.export("interface", child.output("interface"))
        return plan.build()

    def node_unprepare(self, call: UnprepareCall) -> CleanupPlan:
        if self.kind is Kind.VLAN:
            raise wrong_step_kind(self.kind.value, Hook.NODE_UNPREPARE, "Operation")
        return undo_prepare(call)


def register(registry: Registry) -> None:
    for kind in Kind:
        registry.register(Endpoint(f"{kind.value}.sock", f"{kind.value}/v1alpha1", Plugin(kind)))
