"""Verified requests and responses of the four hooks, as plain values.

The host builds these from protobuf after authentication; the runner consumes
them and returns responses the host turns back into protobuf. Keeping them here
keeps the runner free of gRPC and testable without sockets.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ._types import (
    AllocationBinding,
    Grant,
    OperationEnvelope,
    PreparedState,
    Requirements,
    ResourceHandle,
    SandboxHandle,
)


class CleanupStatus(enum.StrEnum):
    CLEANED = "CLEANED"
    PENDING = "PENDING"
    QUARANTINED = "QUARANTINED"


class EffectState(enum.StrEnum):
    PLANNED = "Planned"
    APPLYING = "Applying"
    APPLIED = "Applied"
    UNDOING = "Undoing"
    UNDONE = "Undone"
    QUARANTINED = "Quarantined"


class OperationState(enum.StrEnum):
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CLEANUP_PENDING = "CleanupPending"
    CLEANED = "Cleaned"
    QUARANTINED = "Quarantined"


@dataclass(frozen=True)
class PrepareRequest:
    envelope: OperationEnvelope
    allocation: AllocationBinding | None
    config_json: str
    requirements: Requirements = field(default_factory=Requirements)


@dataclass(frozen=True)
class ConnectRequest:
    envelope: OperationEnvelope
    sandbox: SandboxHandle | None
    config_json: str
    inputs: Mapping[str, tuple[ResourceHandle, ...]] = field(default_factory=dict)
    interface_names: Mapping[str, str] = field(default_factory=dict)
    prepared: PreparedState | None = None
    allocation: AllocationBinding | None = None
    grants: tuple[Grant, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", MappingProxyType(dict(self.inputs)))
        object.__setattr__(self, "interface_names", MappingProxyType(dict(self.interface_names)))


@dataclass(frozen=True)
class CleanupRequest:
    """RemoveNetwork or NodeUnprepare: the envelope's hook says which."""

    envelope: OperationEnvelope
    target_operation_id: str = ""


@dataclass(frozen=True)
class PrepareResponse:
    prepared_state: PreparedState
    cdi_device_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConnectResponse:
    outputs: Mapping[str, tuple[ResourceHandle, ...]]


@dataclass(frozen=True)
class EffectStatus:
    effect_id: str
    kind: str
    state: EffectState
    detail: str = ""


@dataclass(frozen=True)
class CleanupResponse:
    status: CleanupStatus
    detail: str = ""
    effects: tuple[EffectStatus, ...] = ()


@dataclass(frozen=True)
class InspectResponse:
    found: bool
    operation_id: str = ""
    hook: str = ""
    scope: str = ""
    state: OperationState | None = None
    cleanup: CleanupStatus | None = None
    fenced: bool = False
    generation: int = 0
    effects: tuple[EffectStatus, ...] = ()
    semantic_digest: str = ""


@dataclass(frozen=True)
class EndpointInfo:
    plugin_name: str
    contract_version: str
    step_kinds: tuple[str, ...]
    contract_digest: str
    artifact_digest: str
    state_namespace: str
    ready: bool
    descriptor_json: str
    fault: str = ""
    """Why the endpoint will not become ready by itself (a damaged journal), or ``""``.

    Host-side only (not on the wire): a call while ``fault`` is set is ``DATA_LOSS``
    with this text, not the ``UNAVAILABLE`` of a service that is still recovering."""
    store_format: int = 0
    """The store format of the journal served from (0: none open); the versions are
    docs/file-formats.md's "Versions"."""
    readable_store_formats: tuple[int, ...] = ()
    effect_format: int = 0
    """The effect format this build writes."""
    executable_effect_formats: tuple[int, ...] = ()
    journal_effect_formats: tuple[int, ...] = ()
    """The effect formats of the records the journal holds (() with no journal open)."""
    topology_config_version: str = ""
    """The config schema a topology step's ``config`` is checked against (``vlan/v1alpha1``)."""
