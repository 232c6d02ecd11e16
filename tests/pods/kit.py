"""A fake-lab node with the coordinator's pod side over it, and a claim source in memory
(the API server's stand-in for these tests; the k8s rig uses the real client against
``harness.k8s.apiserver``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness.inprocess import in_process_node
from harness.scenarios import compiled, example_inventory
from labs import Node
from plugins.coordinator import (
    Allocator,
    ClaimDevice,
    ClaimProblem,
    KubeClaim,
    PodNetworks,
    PodSandboxInfo,
    load_policies,
)
from plugins.sdk import NamespaceHandle

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = {"sdk-macvlan": "macvlan", "sdk-ipvlan": "ipvlan", "sdk-vf-bond-vlan": "vf-bond-vlan"}


@dataclass
class MemoryClaims:
    """Claims as the API server would answer them."""

    claims: dict[tuple[str, str], KubeClaim] = field(default_factory=dict)
    asked: list[tuple[str, str, str]] = field(default_factory=list)

    def resolve(self, namespace: str, name: str, uid: str) -> KubeClaim:
        self.asked.append((namespace, name, uid))
        claim = self.claims.get((namespace, name))
        if claim is None:
            raise ClaimProblem(f"claim {namespace}/{name} not found")
        if claim.uid != uid:
            raise ClaimProblem(f"claim {namespace}/{name} was replaced: uid {claim.uid}, not {uid}")
        return claim


def scheduled(topology: str, uid: str, pod: str, name: str = "net") -> KubeClaim:
    """A claim of ``topology`` allocated as the scheduler would (the example inventory,
    the project's CEL allocator standing in for it), reserved for ``pod``."""
    policies = load_policies(REPO / "topologies" / "policies.yaml")
    inventory = example_inventory()
    allocations = Allocator(inventory, policies).allocate(compiled(TOPOLOGIES[topology]))
    devices = tuple(ClaimDevice(s, inventory.pool, a.device) for s, a in allocations.items())
    return KubeClaim("default", name, uid, topology, devices, (pod,))


def lab_resolver(node: Node):  # type: ignore[no-untyped-def]
    def resolve(path: str) -> NamespaceHandle | None:
        for ns in node.kernel.namespaces():
            if ns.path == path:
                return NamespaceHandle(ns.path, ns.device, ns.inode, ns.boot_id)
        return None

    return resolve


@contextmanager
def pod_node(
    root: Path, *, answer_within_s: float | None = None
) -> Iterator[tuple[Node, PodNetworks, MemoryClaims]]:
    node = in_process_node(root)
    claims = MemoryClaims()
    policies = load_policies(REPO / "topologies" / "policies.yaml")
    pods = PodNetworks(
        node.journal,
        node.coordinator,
        {t: compiled(f) for t, f in TOPOLOGIES.items()},
        Allocator(example_inventory(), policies),
        claims,
        lab_resolver(node),
        pool=example_inventory().pool,
        answer_within_s=answer_within_s,
    )
    try:
        yield node, pods, claims
    finally:
        pods.close()
        node.close()


def sandbox_of(node: Node, sandbox_id: str, pod_uid: str) -> PodSandboxInfo:
    """The node's pod namespace (it exists before the services start) as a sandbox."""
    handle = node.sandbox()
    return PodSandboxInfo(sandbox_id, pod_uid, "default", "web", handle.namespace.path)
