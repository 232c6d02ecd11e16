"""Value types the SDK shares with the wire contract, independent of protobuf.

The host converts protobuf messages to and from these in one place, so the pure
core (plans, descriptors, call views, the runner's decisions) never imports gRPC.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


class StepKind(enum.StrEnum):
    ALLOCATION = "Allocation"
    OPERATION = "Operation"


class Hook(enum.StrEnum):
    NODE_PREPARE = "NodePrepare"
    CONNECT_NETWORK = "ConnectNetwork"
    REMOVE_NETWORK = "RemoveNetwork"
    NODE_UNPREPARE = "NodeUnprepare"


class Sharing(enum.StrEnum):
    EXCLUSIVE = "Exclusive"
    SHARED = "Shared"


# Handle types of the initial profile.
KERNEL_INTERFACE = "KernelInterface/v1"
SHARED_PARENT = "SharedParent/v1"
PREPARED_VF = "PreparedVF/v1"


def _frozen_map(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


@dataclass(frozen=True)
class NamespaceHandle:
    """A network namespace identified by its mount path, nsfs device/inode and boot."""

    path: str
    device: int
    inode: int
    boot_id: str

    def same_namespace(self, other: NamespaceHandle) -> bool:
        # The path is only where it is mounted; identity is (device, inode, boot).
        return (self.device, self.inode, self.boot_id) == (other.device, other.inode, other.boot_id)


@dataclass(frozen=True)
class SandboxHandle:
    sandbox_id: str
    namespace: NamespaceHandle


@dataclass(frozen=True, eq=True)
class AllocationBinding:
    """The DRA allocation of one root, as verified by the coordinator."""

    root_id: str
    driver: str
    pool: str
    device: str
    device_type: str
    sharing: Sharing
    attributes: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", _frozen_map(self.attributes))
        object.__setattr__(self, "capacity", _frozen_map(self.capacity))

    def __hash__(self) -> int:
        return hash((self.root_id, self.driver, self.pool, self.device))


@dataclass(frozen=True)
class ResourceHandle:
    """A typed, provenance-carrying reference to a realized resource (blueprint 4.4)."""

    id: str
    type: str
    owner_scope: str
    owner_step: str
    attachment_id: str
    boot_id: str
    root_provenance: str
    description_json: str = "{}"

    def description(self) -> dict[str, Any]:
        value = json.loads(self.description_json)
        if not isinstance(value, dict):
            raise ValueError(f"handle {self.id}: description is not a JSON object")
        return value


@dataclass(frozen=True)
class Grant:
    """Permission for one effect kind on one resource handle."""

    effect: str
    resource_id: str


@dataclass(frozen=True)
class Requirements:
    """Downstream requirements the topology compiler propagated to a root."""

    mtu: int | None = None


@dataclass(frozen=True)
class PreparedState:
    """What a root's NodePrepare returned; passed back to that root's ConnectNetwork."""

    root_id: str
    plugin: str
    preparation_id: str
    handles: tuple[ResourceHandle, ...] = ()


@dataclass(frozen=True)
class OperationEnvelope:
    """Identity and ordering of one lifecycle call.

    ``trace_id`` is carried for logs only and is never part of the semantic digest.
    """

    operation_id: str
    hook: Hook
    scope: str
    step: str
    generation: int
    coordinator_epoch: int
    trace_id: str = ""
