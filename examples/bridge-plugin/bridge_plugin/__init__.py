"""A third-party Operation plugin in a repository of its own, on the installed SDK.

It plans one Linux bridge in the sandbox and brings it up: the dummy example's shape
(docs/writing-a-plugin.md) with a link every kernel has (a kernel without the dummy
module, as in many containers, still runs its suite on ``--lab netns://``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from plugins.sdk import (
    BundleStore,
    ConnectCall,
    DescriptorRef,
    Endpoint,
    OperationOnly,
    Plan,
    Registry,
    StepKind,
    effect,
    new_plan,
)

CONTRACTS = Path(__file__).parent / "contracts"


@dataclass(frozen=True)
class Config:
    mtu: int


class BridgePlugin(OperationOnly):
    def describe(self) -> DescriptorRef:
        return DescriptorRef("bridge", "v1alpha1", (StepKind.OPERATION,), "bridge/v1alpha1")

    def connect_network(self, call: ConnectCall) -> Plan:
        cfg = call.config(Config)
        name = call.interface_name("interface")
        ns = call.require_sandbox().namespace
        namespace = {"path": ns.path, "device": ns.device, "inode": ns.inode, "bootId": ns.boot_id}
        plan = new_plan()
        link = plan.add(
            "create-bridge",
            effect(
                "example/create-bridge/v1",
                {"name": name, "mtu": cfg.mtu, "namespace": namespace},
                outputs=["interface"],
            ),
        )
        plan.add(
            "activate", effect("linux/set-link-up/v1", inputs={"link": link.output("interface")})
        )
        plan.export("interface", link.output("interface"))
        return plan.build()


def registry() -> Registry:
    reg = Registry(BundleStore(CONTRACTS))
    reg.register(Endpoint("bridge.sock", "bridge/v1alpha1", BridgePlugin()))
    return reg
