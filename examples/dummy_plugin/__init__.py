"""A third-party Operation plugin written only with the public SDK.

It plans one dummy link in the sandbox and brings it up. Its contract bundle
lives beside it and is pinned by its own pins.json; its one new effect kind,
``linux/create-dummy/v1``, has its executor in ``effects.py``.
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
    mac: str | None = None


class DummyPlugin(OperationOnly):
    def describe(self) -> DescriptorRef:
        return DescriptorRef("dummy", "v1alpha1", (StepKind.OPERATION,), "dummy/v1alpha1")

    def connect_network(self, call: ConnectCall) -> Plan:
        cfg = call.config(Config)
        name = call.interface_name("interface")
        ns = call.require_sandbox().namespace
        namespace = {"path": ns.path, "device": ns.device, "inode": ns.inode, "bootId": ns.boot_id}
        plan = new_plan()
        link = plan.add(
            "create-dummy",
            effect(
                "linux/create-dummy/v1",
                {"name": name, "mtu": cfg.mtu, "mac": cfg.mac, "namespace": namespace},
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
    reg.register(Endpoint("dummy.sock", "dummy/v1alpha1", DummyPlugin()))
    return reg
