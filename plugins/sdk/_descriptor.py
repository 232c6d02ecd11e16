"""Descriptors: the short reference a handler returns and the complete pinned contract."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ._plan import digest, thaw_json
from ._types import StepKind


@dataclass(frozen=True)
class DescriptorRef:
    """What ``Handler.describe()`` returns: a reference into the pinned bundle, not a contract."""

    name: str
    contract_version: str
    step_kinds: tuple[StepKind, ...]
    config_schema_id: str


@dataclass(frozen=True)
class PortSpec:
    name: str
    type: str
    min: int = 1
    max: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "min": self.min, "max": self.max}


@dataclass(frozen=True)
class Preparation:
    """What NodePrepare means for this plugin.

    ``semantics`` is ``exclusive-device`` (an exclusive allocated device, e.g. a VF),
    ``shared-unit`` (one unit of a shared parent's capacity) or ``none`` (Operation-only).
    """

    semantics: str
    device_type: str | None = None
    capacity: str | None = None
    outputs: tuple[PortSpec, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "semantics": self.semantics,
            "deviceType": self.device_type,
            "capacity": self.capacity,
            "outputs": [p.to_json() for p in self.outputs],
        }


@dataclass(frozen=True)
class Descriptor:
    """The complete contract a logical plugin advertises, expanded from its pinned bundle."""

    name: str
    contract_version: str
    step_kinds: tuple[StepKind, ...]
    config_schema_id: str
    profile: str
    config_schema: Mapping[str, Any]
    cross_field_rules: tuple[Mapping[str, Any], ...]
    inputs: tuple[PortSpec, ...]
    outputs: tuple[PortSpec, ...]
    interface_names: tuple[str, ...]
    preparation: Preparation
    allowed_effects: Mapping[str, tuple[str, ...]]
    state_format: str
    bundle_digest: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "config_schema", MappingProxyType(dict(self.config_schema)))
        object.__setattr__(self, "allowed_effects", MappingProxyType(dict(self.allowed_effects)))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "contractVersion": self.contract_version,
            "stepKinds": [str(k) for k in self.step_kinds],
            "configSchemaId": self.config_schema_id,
            "profile": self.profile,
            "configSchema": thaw_json(self.config_schema),
            "crossFieldRules": [dict(r) for r in self.cross_field_rules],
            "inputs": [p.to_json() for p in self.inputs],
            "outputs": [p.to_json() for p in self.outputs],
            "interfaceNames": list(self.interface_names),
            "preparation": self.preparation.to_json(),
            "allowedEffects": {h: list(k) for h, k in sorted(self.allowed_effects.items())},
            "stateFormat": self.state_format,
        }

    @functools.cached_property
    def contract_digest(self) -> str:
        """Digest of everything a peer relies on; a narrower profile gets a different one.

        Cached: the descriptor is immutable, and every new operation record carries this
        digest (re-serialising the whole contract each time was ~2 % of a lifecycle's CPU).
        """
        return digest(self.to_json())

    def input_port(self, name: str) -> PortSpec | None:
        return next((p for p in self.inputs if p.name == name), None)

    def output_port(self, name: str) -> PortSpec | None:
        return next((p for p in self.outputs if p.name == name), None)

    def ref(self) -> DescriptorRef:
        return DescriptorRef(
            self.name, self.contract_version, self.step_kinds, self.config_schema_id
        )
