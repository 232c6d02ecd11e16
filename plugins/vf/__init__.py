"""The ``sriov`` logical plugin: an exclusive kernel SR-IOV VF moved into the sandbox."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from plugins import effects
from plugins.sdk import (
    AllocationRoot,
    ConnectCall,
    DescriptorRef,
    Endpoint,
    Plan,
    PrepareCall,
    Registry,
    StepKind,
    new_plan,
)


@dataclass(frozen=True)
class VFSettings:
    vlan: int
    qos: int | None = None
    vlan_proto: Literal["802.1Q", "802.1ad"] | None = None
    mac: str | None = None
    spoof_check: bool | None = None  # None: leave the VF's current setting alone
    trust: bool | None = None
    min_tx_rate_mbps: int | None = None
    max_tx_rate_mbps: int | None = None
    link_state: Literal["auto", "enable", "disable"] | None = None

    def changes(self) -> dict[str, Any]:
        """Only the fields the administrator set: the effect changes exactly these."""
        names = {
            "vlan": self.vlan,
            "qos": self.qos,
            "vlanProto": self.vlan_proto,
            "mac": self.mac,
            "spoofCheck": self.spoof_check,
            "trust": self.trust,
            "minTxRateMbps": self.min_tx_rate_mbps,
            "maxTxRateMbps": self.max_tx_rate_mbps,
            "linkState": self.link_state,
        }
        return {k: v for k, v in names.items() if v is not None}


@dataclass(frozen=True)
class Config:
    mtu: int
    vf: VFSettings
    rdma_access: Literal[False]


class Plugin(AllocationRoot):
    def describe(self) -> DescriptorRef:
        return DescriptorRef("sriov", "v1alpha1", (StepKind.ALLOCATION,), "sriov-kernel/v1alpha1")

    def node_prepare(self, call: PrepareCall) -> Plan:
        vf = call.require_exclusive_vf()
        cfg = call.config(Config)  # the pinned schema already rejects rdmaAccess: true
        plan = new_plan()
        prepared = plan.add(
            "prepare-vf", effects.prepare_vf(vf, cfg.vf.changes(), call.requirements, cfg.mtu)
        )
        plan.export("vf", prepared.output("vf"))
        return plan.build()

    def connect_network(self, call: ConnectCall) -> Plan:
        prepared = call.require_prepared_root("sriov")
        sandbox = call.require_sandbox()
        name = call.interface_name("interface")
        plan = new_plan()
        moved = plan.add("move-vf", effects.move_vf(prepared, sandbox, name))
        plan.export("interface", moved.output("interface"))
        return plan.build()


def register(registry: Registry) -> None:
    registry.register(Endpoint("sriov.sock", "sriov/v1alpha1", Plugin()))
