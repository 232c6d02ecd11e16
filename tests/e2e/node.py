"""The coordinator driving the three real services on the fake lab."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import labs
from harness.report import AllureObserver
from harness.scenarios import lab_inventory
from plugins.coordinator import (
    Allocator,
    CompiledTopology,
    NodeAuthority,
    load_policies,
    load_topology,
    validate_topology,
)

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = REPO / "topologies"


def compiled(name: str) -> CompiledTopology:
    policies = load_policies(TOPOLOGIES / "policies.yaml")
    return validate_topology(
        load_topology(TOPOLOGIES / f"{name}.yaml"), labs.project_descriptors(), policies
    )


class Node(labs.Node):
    """Real service processes on the fake kernel server (or on ``lab``, a lab with a
    ``kernel_url``), a coordinator reporting each call to Allure, and a scheduler
    stand-in (the allocator, over the lab's inventory). No pod until a test asks."""

    def __init__(self, root: Path, lab: labs.Lab | None = None) -> None:
        clients: dict[str, Any] = {}
        super().__init__(
            labs.FakeServerLab() if lab is None else lab,
            root,
            processes=True,
            observer=AllureObserver(self.snapshot, clients),
            pod=None,
        )
        clients.update(self.coordinator.clients)
        self.policies = load_policies(TOPOLOGIES / "policies.yaml")
        # The scheduler allocates from what the lab's node publishes.
        self.allocator = Allocator(lab_inventory(self.lab), self.policies)

    @property
    def authority(self) -> NodeAuthority:
        return self.coordinator.authority
