"""The values the node's Kubernetes side hands the coordinator (``_pods``), and what it needs
from outside: a claim source (the API server), a namespace resolver (the host's nsfs, or a
lab's kernel) and a status sink (claim status write-back). No Kubernetes client here: the
adapters (``kubeapi``, ``kubelet``, ``nri``) translate into these."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from plugins.sdk import FailedPrecondition, NamespaceHandle, ResourceHandle, Unavailable

__all__ = [
    "ClaimDevice",
    "ClaimProblem",
    "ClaimSource",
    "ClaimSourceUnavailable",
    "DeviceNetwork",
    "GateRefused",
    "KubeClaim",
    "NamespaceResolver",
    "PodSandboxInfo",
    "StatusSink",
    "attachment_for",
    "device_networks",
]


@dataclass(frozen=True)
class ClaimDevice:
    """One allocation result for our driver: the claim's request (the topology's root step)
    and the device the scheduler chose for it."""

    request: str
    pool: str
    device: str
    share_id: str = ""


@dataclass(frozen=True)
class KubeClaim:
    """A ResourceClaim as the coordinator needs it, read from the API server at prepare."""

    namespace: str
    name: str
    uid: str
    topology: str
    devices: tuple[ClaimDevice, ...]
    pods: tuple[str, ...]
    """UIDs of the pods the claim is reserved for (``status.reservedFor``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "topology": self.topology,
            "devices": [
                {"request": d.request, "pool": d.pool, "device": d.device, "shareId": d.share_id}
                for d in self.devices
            ],
            "pods": list(self.pods),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> KubeClaim:
        return cls(
            d["namespace"],
            d["name"],
            d["uid"],
            d["topology"],
            tuple(
                ClaimDevice(x["request"], x["pool"], x["device"], x["shareId"])
                for x in d["devices"]
            ),
            tuple(d["pods"]),
        )

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name} (uid {self.uid})"


class ClaimProblem(FailedPrecondition):
    """The claim cannot be prepared as it is (replaced, not allocated for us, bad config)."""


class ClaimSourceUnavailable(Unavailable):
    """The API server did not answer; the kubelet retries."""


class ClaimSource(Protocol):
    def resolve(self, namespace: str, name: str, uid: str) -> KubeClaim:
        """The claim, checked to be the one with ``uid`` and allocated for our driver;
        :class:`ClaimProblem` or :class:`ClaimSourceUnavailable` otherwise."""
        ...


@dataclass(frozen=True)
class PodSandboxInfo:
    """A pod sandbox as the runtime announced it."""

    id: str
    pod_uid: str
    pod_namespace: str
    pod_name: str
    netns_path: str
    """The sandbox's network namespace (``""``: it has none: host network)."""


class GateRefused(FailedPrecondition):
    """A container whose sandbox's networking is not complete may not be created."""


NamespaceResolver = Callable[[str], NamespaceHandle | None]
"""A namespace path -> its identity now (device, inode, boot id); None when it is gone."""


@dataclass(frozen=True)
class DeviceNetwork:
    """What claim status reports for one device (KEP-4817 ``networkData``)."""

    request: str
    pool: str
    device: str
    share_id: str
    interface_name: str
    hardware_address: str
    ips: tuple[str, ...] = ()


class StatusSink(Protocol):
    def connected(self, claim: KubeClaim, networks: Sequence[DeviceNetwork]) -> None: ...

    def disconnected(self, claim: KubeClaim) -> None: ...


def attachment_for(sandbox_id: str, claim_uid: str) -> str:
    """The attachment id of one claim's topology in one sandbox: deterministic, so a
    restarted coordinator drives the very same operations; a DNS label."""
    digest = hashlib.sha256(f"{sandbox_id}/{claim_uid}".encode()).hexdigest()
    return f"k{digest[:24]}"


def device_networks(
    claim: KubeClaim, outputs: Mapping[str, Mapping[str, Sequence[ResourceHandle]]]
) -> list[DeviceNetwork]:
    """Per claim device, the interface its root step's subtree put in the pod: the last
    kernel interface the topology produced (the pod-facing one), its name and address."""
    pod_facing = _last_interface(outputs)
    return [
        DeviceNetwork(
            d.request,
            d.pool,
            d.device,
            d.share_id,
            pod_facing.get("name", ""),
            pod_facing.get("mac", ""),
        )
        for d in claim.devices
    ]


def _last_interface(
    outputs: Mapping[str, Mapping[str, Sequence[ResourceHandle]]],
) -> dict[str, str]:
    found: dict[str, str] = {}
    for ports in outputs.values():
        for handles in ports.values():
            for handle in handles:
                if handle.type.startswith("KernelInterface"):
                    try:
                        description = json.loads(handle.description_json or "{}")
                    except ValueError:
                        continue
                    # The KernelInterface/v1 description (plugins.effects: ``describe``).
                    found = {
                        "name": str(description.get("ifName") or ""),
                        "mac": str(description.get("mac") or ""),
                    }
    return found
