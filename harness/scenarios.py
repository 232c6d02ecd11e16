"""The example topologies as runnable lifecycles with fixed identities.

A lifecycle is four phases (prepare, connect, remove, unprepare). Each phase is
idempotent under the same identities, so after a crash the rig simply runs the
interrupted phase again, then the rest.

The node a lifecycle runs on starts from a random state (``fakekernel.lab``): the seed
is the rig's, ``RIG_SEED=<n>`` or the fixed default, so a failure reproduces.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from labs import DEFAULT_SEED, SEED_ENV, Lab, project_descriptors, start_state_seed
from plugins.coordinator import (
    AllocatedDevice,
    Allocator,
    CompiledTopology,
    Coordinator,
    Inventory,
    load_inventory,
    load_policies,
    load_topology,
    validate_topology,
)
from plugins.sdk import PreparedState, SandboxHandle

REPO = Path(__file__).resolve().parent.parent
TOPOLOGY_DIR = REPO / "topologies"
TOPOLOGIES = ("vf-bond-vlan", "macvlan", "ipvlan")
PHASES = ("prepare", "connect", "remove", "unprepare")
__all__ = ["DEFAULT_SEED", "SEED_ENV", "start_state_seed"]


@cache
def compiled(name: str) -> CompiledTopology:
    policies = load_policies(TOPOLOGY_DIR / "policies.yaml")
    return validate_topology(
        load_topology(TOPOLOGY_DIR / f"{name}.yaml"), project_descriptors(), policies
    )


@cache
def example_inventory() -> Inventory:
    """The example node's devices (``topologies/inventory.yaml``): what a lab without an
    inventory of its own (``Lab.inventory()`` None) publishes."""
    return load_inventory(TOPOLOGY_DIR / "inventory.yaml")


def lab_inventory(lab: Lab | None) -> Inventory:
    """What device discovery publishes on ``lab``'s node (None: the example node)."""
    own = lab.inventory() if lab is not None else None
    return example_inventory() if own is None else own


def allocate(name: str, inventory: Inventory | None = None) -> dict[str, AllocatedDevice]:
    """The scheduler's choice of devices for ``name`` from ``inventory`` (None: the
    example node's, ``topologies/inventory.yaml``)."""
    if inventory is None or inventory is example_inventory():
        return dict(_example_allocation(name))
    return _allocate(name, inventory)


@cache
def _example_allocation(name: str) -> dict[str, AllocatedDevice]:
    # Every fake lab publishes the example node, and its CEL selectors took a third of a
    # crash run's time when evaluated again for each of the rig's thousand runs.
    return _allocate(name, example_inventory())


def _allocate(name: str, inventory: Inventory) -> dict[str, AllocatedDevice]:
    policies = load_policies(TOPOLOGY_DIR / "policies.yaml")
    return Allocator(inventory, policies).allocate(compiled(name))


class HasCoordinator(Protocol):
    @property
    def coordinator(self) -> Coordinator: ...

    def sandbox(self, name: str = ...) -> SandboxHandle: ...


@dataclass
class Lifecycle:
    """One topology's prepare/connect/remove/unprepare under fixed claim and attachment ids."""

    topology: str
    lab: HasCoordinator
    claim: str = "claim-1"
    attachment: str = "att-1"
    results: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.compiled = compiled(self.topology)
        # Allocated from what the node's lab publishes (a labs.Node's ``lab``).
        lab = getattr(self.lab, "lab", None)
        self.allocations = allocate(
            self.topology, lab_inventory(lab if isinstance(lab, Lab) else None)
        )

    def phase(self, name: str) -> Callable[[], Any]:
        c = self.lab.coordinator
        return {
            "prepare": lambda: c.prepare(self.claim, self.compiled, self.allocations),
            "connect": lambda: c.connect(
                self.attachment,
                self.claim,
                self.compiled,
                self.allocations,
                self._prepared(),
                self.lab.sandbox(),
            ),
            "remove": lambda: c.remove(self.attachment),
            "unprepare": lambda: c.unprepare(self.claim),
        }[name]

    def _prepared(self) -> dict[str, PreparedState]:
        prepared = self.results.get("prepare")
        assert isinstance(prepared, dict), "connect needs a completed prepare"
        return prepared

    def run(self, start: int = 0, stop: int = len(PHASES)) -> None:
        for name in PHASES[start:stop]:
            self.results[name] = self.phase(name)()
