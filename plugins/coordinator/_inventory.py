"""``DeviceInventory`` documents: the devices discovery found on a node.

Shape (see ``topologies/inventory.yaml``)::

    kind: DeviceInventory
    pool: <dns-label>
    driver: dra.networking                      # optional, this by default
    devices:
    - name: <dns-label>
      attributes:                               # domain -> name -> string, int or bool
        dra.networking: {type: vf, pfName: enp3s0f0, vfIndex: 0}
      capacity:                                 # optional: domain -> name -> whole number
        dra.networking: {macvlans: 64}

The shape is ``plugins/coordinator/schemas/device-inventory.schema.json``, checked by the
SDK's document validator; :func:`parse_inventory` adds what a schema cannot say: device
names are unique in the inventory.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeAlias

from ._cel import cel_device
from ._policy import DRIVER_DOMAIN
from ._yaml import FieldProblem, ManifestError, Problems, check_shape, child_path, load_yaml_file

__all__ = [
    "INVENTORY_SCHEMA",
    "AttributeValue",
    "Device",
    "Inventory",
    "freeze_groups",
    "load_inventory",
    "parse_inventory",
]

INVENTORY_SCHEMA = "device-inventory.schema.json"

AttributeValue: TypeAlias = str | int | bool


def freeze_groups(value: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Mapping[str, Any]]:
    """A read-only copy of a domain -> name -> value mapping."""
    return MappingProxyType({k: MappingProxyType(dict(v)) for k, v in value.items()})


@dataclass(frozen=True)
class Device:
    """A discovered device, before any exposure policy."""

    name: str
    attributes: Mapping[str, Mapping[str, AttributeValue]]
    """Domain -> attribute -> value (``{"dra.networking": {"type": "vf", ...}}``)."""
    capacity: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Domain -> capacity name -> whole-number quantity."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", freeze_groups(self.attributes))
        object.__setattr__(self, "capacity", freeze_groups(self.capacity))

    @property
    def networking(self) -> Mapping[str, AttributeValue]:
        return self.attributes.get(DRIVER_DOMAIN, MappingProxyType({}))

    @functools.cached_property
    def cel(self) -> Any:
        return cel_device(self.name, self.attributes, self.capacity)


@dataclass(frozen=True)
class Inventory:
    pool: str
    driver: str
    devices: tuple[Device, ...]

    def device(self, name: str) -> Device | None:
        return next((d for d in self.devices if d.name == name), None)


def _check_unique_names(source: str, devices: Sequence[Mapping[str, Any]]) -> None:
    problems = Problems()
    seen: set[str] = set()
    for index, device in enumerate(devices):
        name = device["name"]
        if name in seen:
            problems.add(
                child_path(child_path("devices", index), "name"), f"duplicate device {name!r}"
            )
        seen.add(name)
    problems.raise_if_any(source)


def _device(entry: Mapping[str, Any]) -> Device:
    capacity = {
        domain: {name: int(total) for name, total in group.items()}  # "64" and 64 alike
        for domain, group in entry.get("capacity", {}).items()
    }
    return Device(entry["name"], entry["attributes"], capacity)


def parse_inventory(doc: object, source: str = "<inventory>") -> Inventory:
    """Check one loaded document against the schema (plugins/coordinator/schemas/
    device-inventory.schema.json), then its device names; raise :class:`ManifestError`
    listing every problem."""
    check_shape(INVENTORY_SCHEMA, doc, source)
    assert isinstance(doc, dict)  # the schema says so
    _check_unique_names(source, doc["devices"])
    devices = tuple(_device(entry) for entry in doc["devices"])
    return Inventory(doc["pool"], doc.get("driver", DRIVER_DOMAIN), devices)


def load_inventory(path: str | Path) -> Inventory:
    """The one ``DeviceInventory`` document of a file, through the strict YAML loader."""
    documents = load_yaml_file(path)
    if len(documents) != 1:
        message = f"expected exactly one DeviceInventory document, found {len(documents)}"
        raise ManifestError(str(path), [FieldProblem("$", message)])
    return parse_inventory(documents[0], str(path))
