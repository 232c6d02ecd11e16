"""The ``bond`` logical plugin: an active-backup bond over interfaces the sandbox already owns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from plugins import effects
from plugins.sdk import (
    ConnectCall,
    DescriptorRef,
    Endpoint,
    OperationOnly,
    Plan,
    Registry,
    new_plan,
    pinned_bundles,
)


@dataclass(frozen=True)
class Config:
    mode: Literal["active-backup"]
    monitor_interval_ms: int
    mtu: int
    up_delay_ms: int | None = None
    down_delay_ms: int | None = None


SCHEMA_ID = "bond/v1alpha1"
"""The one contract this code implements; its bundle holds the name, kinds and ports."""


class Plugin(OperationOnly):
    def describe(self) -> DescriptorRef:
        return pinned_bundles().load(SCHEMA_ID).descriptor.ref()

    def connect_network(self, call: ConnectCall) -> Plan:
        (port,) = call.descriptor.inputs
        (interface,) = call.descriptor.outputs
        # Two to eight members is what an active-backup bond of ours takes; the descriptor
        # may only narrow that.
        members = call.require_local_interfaces(port.name, 2, 8)
        call.require_distinct_resources(members)  # physical identity, not just names
        cfg = call.config(Config)
        sandbox = call.require_sandbox()
        name = call.interface_name(interface.name)
        plan = new_plan()
        bond = plan.add(
            "create-bond",
            effects.create_bond(
                sandbox,
                name,
                cfg.mode,
                cfg.monitor_interval_ms,
                cfg.mtu,
                cfg.up_delay_ms,
                cfg.down_delay_ms,
            ),
        )
        for i, member in enumerate(members):
            plan.add_indexed(
                "attach-member", i, effects.attach_member(bond.output("interface"), member)
            )
        plan.add("activate-bond", effects.set_link_up(bond.output("interface")))
        plan.export(interface.name, bond.output("interface"))
        return plan.build()


def register(registry: Registry) -> None:
    registry.register(Endpoint("bond.sock", SCHEMA_ID, Plugin()))
