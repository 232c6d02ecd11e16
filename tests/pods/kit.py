"""A fake-lab node with the coordinator's pod side over it and a claim source in memory
(``harness.k8s.pod_lifecycle``: the API server's stand-in for these tests; the k8s rig's
wire runs use the real client against ``harness.k8s.apiserver``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.inprocess import in_process_node
from harness.k8s.pod_lifecycle import MemoryClaims, pod_networks
from harness.k8s.pod_lifecycle import scheduled_claim as scheduled
from labs import Node
from plugins.coordinator import PodNetworks, PodSandboxInfo

__all__ = ["pod_node", "sandbox_of", "scheduled"]


@contextmanager
def pod_node(root: Path) -> Iterator[tuple[Node, PodNetworks, MemoryClaims]]:
    node = in_process_node(root)
    claims = MemoryClaims()
    pods = pod_networks(node, claims)
    try:
        yield node, pods, claims
    finally:
        pods.close()
        node.close()


def sandbox_of(node: Node, sandbox_id: str, pod_uid: str) -> PodSandboxInfo:
    """The node's pod namespace (it exists before the services start) as a sandbox."""
    handle = node.sandbox()
    return PodSandboxInfo(sandbox_id, pod_uid, "default", "web", handle.namespace.path)
