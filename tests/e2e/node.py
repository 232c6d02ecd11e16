"""The coordinator driving the three real services on the fake lab."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.report import AllureObserver
from labs.fake import FakeLab
from plugins import bond, links, vf
from plugins.coordinator import (
    CompiledTopology,
    load_inventory,
    load_policies,
    load_topology,
    validate_topology,
)
from plugins.coordinator._authority import NodeAuthority
from plugins.coordinator._cel import Allocator
from plugins.coordinator._journal import CoordinatorJournal
from plugins.coordinator._runtime import Coordinator
from plugins.sdk import Registry

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = REPO / "topologies"


def descriptors() -> dict[str, Any]:
    registry = Registry()
    for register in (vf.register, bond.register, links.register):
        register(registry)
    return {r.name: r for r in registry.seal()}


def compiled(name: str) -> CompiledTopology:
    policies = load_policies(TOPOLOGIES / "policies.yaml")
    return validate_topology(load_topology(TOPOLOGIES / f"{name}.yaml"), descriptors(), policies)


class Node:
    """A lab, a coordinator with its journal, and a scheduler stand-in."""

    def __init__(self, root: Path) -> None:
        self.lab = FakeLab(root / "lab")
        self.lab.start()
        self.journal = CoordinatorJournal(root / "coordinator")
        clients = self.lab.clients()
        self.coordinator = Coordinator(
            self.journal, clients, observer=AllureObserver(self.snapshot, clients)
        )
        self.policies = load_policies(TOPOLOGIES / "policies.yaml")
        self.allocator = Allocator(load_inventory(TOPOLOGIES / "inventory.yaml"), self.policies)

    @property
    def authority(self) -> NodeAuthority:
        return self.coordinator.authority

    def snapshot(self) -> dict[str, Any]:
        assert self.lab.kernel is not None
        return self.lab.kernel.snapshot()

    def close(self) -> None:
        for client in self.coordinator.clients.values():
            client.close()
        self.journal.close()
        self.lab.close()
