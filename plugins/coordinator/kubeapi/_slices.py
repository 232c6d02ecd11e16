"""Publishing the node's devices as ResourceSlices: one pool per node, named after it.

A device's attributes go out qualified (``dra.networking/type``, ...), with the
standard ``resource.kubernetes.io/pciBusID`` (from our ``pciAddress``) and
``resource.kubernetes.io/pcieRoot`` (from our ``pcieRoot``, when discovery knew it)
beside them, so a claim can align a VF with a GPU on the same PCIe root. Capacity goes
as quantities (``dra.networking/macvlans: 64``).

The pool is cut into slices of at most 128 devices (the API's limit), sorted by name,
named ``<node>-<driver>-<index>``, so a republish finds its own slices again. The
scheduler reads a pool at its highest ``spec.pool.generation`` only, so a changed pool is
written whole at the next generation, then the slices it no longer has are deleted; a
publish that changes nothing writes nothing (and keeps the generation).

A device the API would refuse (over 32 attributes and capacities, a string attribute
over 64 characters) is left out and named in the outcome; the others are published.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from lightkube import Client
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.types import PatchType

from plugins.coordinator import DRIVER_DOMAIN, PublishedDevice
from plugins.sdk import InvalidArgument

from ._client import ApiRefused, api_call

__all__ = [
    "MAX_ATTRIBUTES_AND_CAPACITIES",
    "MAX_DEVICES_PER_SLICE",
    "PCIE_ROOT",
    "PCI_BUS_ID",
    "PublishOutcome",
    "RefusedDevice",
    "SlicePublisher",
    "slice_device",
]

log = logging.getLogger("plugins.coordinator.kubeapi")

MAX_DEVICES_PER_SLICE: Final = 128
MAX_ATTRIBUTES_AND_CAPACITIES: Final = 32
_MAX_STRING_ATTRIBUTE: Final = 64
_MAX_NAME: Final = 253
PCI_BUS_ID: Final = "resource.kubernetes.io/pciBusID"
PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"
# our attribute -> the standard one it also becomes (pciAddress stays: policies select on it)
_STANDARD: Final = {"pciAddress": PCI_BUS_ID}
# our attribute -> the standard one it becomes instead
_RENAMED: Final = {"pcieRoot": PCIE_ROOT}


@dataclass(frozen=True)
class RefusedDevice:
    device: str
    message: str


@dataclass(frozen=True)
class PublishOutcome:
    generation: int
    slices: tuple[str, ...]
    written: bool
    """False: the pool on the server was already this content; nothing was written."""
    deleted: tuple[str, ...] = ()
    refused: tuple[RefusedDevice, ...] = ()


def slice_device(device: PublishedDevice) -> dict[str, Any]:
    """One device as a ResourceSlice holds it (``spec.devices[]``)."""
    attributes: dict[str, dict[str, Any]] = {}
    for domain, group in sorted(device.attributes.items()):
        for name, value in sorted(group.items()):
            renamed = _RENAMED.get(name) if domain == DRIVER_DOMAIN else None
            attributes[renamed or f"{domain}/{name}"] = _attribute(value)
            standard = _STANDARD.get(name) if domain == DRIVER_DOMAIN else None
            if standard:
                attributes[standard] = _attribute(value)
    entry: dict[str, Any] = {"name": device.name, "attributes": attributes}
    if device.capacity:
        entry["capacity"] = {
            name: {"value": str(total)} for name, total in sorted(device.capacity.items())
        }
    if device.shared:
        entry["allowMultipleAllocations"] = True
    return entry


def _attribute(value: object) -> dict[str, Any]:
    # bool first: a bool is an int in Python, not in the API
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": str(value)}


def _refusal(entry: Mapping[str, Any]) -> str | None:
    count = len(entry["attributes"]) + len(entry.get("capacity", {}))
    if count > MAX_ATTRIBUTES_AND_CAPACITIES:
        return (
            f"device {entry['name']!r} has {count} attributes and capacities; "
            f"a ResourceSlice device holds at most {MAX_ATTRIBUTES_AND_CAPACITIES}"
        )
    for name, value in entry["attributes"].items():
        text = value.get("string")
        if text is not None and len(text) > _MAX_STRING_ATTRIBUTE:
            return (
                f"device {entry['name']!r} attribute {name} is {len(text)} characters; "
                f"at most {_MAX_STRING_ATTRIBUTE}"
            )
    return None


class SlicePublisher:
    """Publishes one node's devices (RBAC on ``resource.k8s.io`` ``resourceslices``:
    ``list``, ``create``, ``patch``, ``delete``)."""

    def __init__(self, client: Client, driver: str, node_name: str) -> None:
        if not node_name:
            raise InvalidArgument("node name is empty")
        self._client = client
        self._driver = driver
        self._node = node_name

    def slice_name(self, index: int) -> str:
        name = f"{self._node}-{self._driver}-{index}"
        if len(name) <= _MAX_NAME:
            return name
        digest = hashlib.sha256(f"{self._node}/{self._driver}".encode()).hexdigest()[:16]
        return f"{self._node[: _MAX_NAME - 40]}-{digest}-{index}"

    def publish(self, devices: Sequence[PublishedDevice]) -> PublishOutcome:
        """Make the node's pool exactly ``devices`` (see the module docstring)."""
        names = [d.name for d in devices]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise InvalidArgument(f"devices published twice: {twice}; nothing published")
        entries: list[dict[str, Any]] = []
        refused: list[RefusedDevice] = []
        for device in sorted(devices, key=lambda d: d.name):
            entry = slice_device(device)
            problem = _refusal(entry)
            if problem:
                log.warning("not published: %s", problem)
                refused.append(RefusedDevice(device.name, problem))
            else:
                entries.append(entry)
        chunks = [
            entries[i : i + MAX_DEVICES_PER_SLICE]
            for i in range(0, len(entries), MAX_DEVICES_PER_SLICE)
        ] or [[]]  # an empty pool is one empty slice: the node says it has nothing
        wanted = {self.slice_name(i): chunk for i, chunk in enumerate(chunks)}

        existing = self._existing()
        current = max((_generation(s) for s in existing.values()), default=0)
        if self._unchanged(existing, wanted, current):
            return PublishOutcome(current, tuple(wanted), False, (), tuple(refused))
        generation = current + 1
        for name, chunk in wanted.items():
            self._write(name, self._spec(chunk, generation, len(wanted)), name in existing)
        stale = tuple(sorted(set(existing) - set(wanted)))
        for name in stale:
            self._delete(name)
        return PublishOutcome(generation, tuple(wanted), True, stale, tuple(refused))

    def _spec(self, chunk: list[dict[str, Any]], generation: int, count: int) -> dict[str, Any]:
        return {
            "driver": self._driver,
            "nodeName": self._node,
            "pool": {"name": self._node, "generation": generation, "resourceSliceCount": count},
            "devices": chunk,
        }

    def _existing(self) -> dict[str, dict[str, Any]]:
        """This node's slices of our driver, by name, as plain JSON."""
        selector: dict[str, Any] = {"spec.nodeName": self._node, "spec.driver": self._driver}
        with api_call(f"list ResourceSlices of node {self._node}"):
            found = list(self._client.list(ResourceSlice, fields=selector))
        return {s.metadata.name: s.to_dict() for s in found if s.metadata and s.metadata.name}

    def _unchanged(
        self, existing: Mapping[str, Mapping[str, Any]], wanted: Mapping[str, Any], current: int
    ) -> bool:
        if set(existing) != set(wanted):
            return False
        return all(
            _content(existing[name].get("spec", {}))
            == _content(self._spec(chunk, current, len(wanted)))
            for name, chunk in wanted.items()
        )

    def _write(self, name: str, spec: dict[str, Any], exists: bool) -> None:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": spec,
        }
        if not exists:
            with api_call(f"create ResourceSlice {name}"):
                self._client.create(
                    msgspec.convert(body, type=ResourceSlice), field_manager=self._driver
                )
            return
        with api_call(f"apply ResourceSlice {name}"):
            self._client.patch(
                ResourceSlice,
                name,
                body,
                patch_type=PatchType.APPLY,
                field_manager=self._driver,
                force=True,
            )

    def _delete(self, name: str) -> None:
        try:
            with api_call(f"delete ResourceSlice {name}"):
                self._client.delete(ResourceSlice, name)
        except ApiRefused as e:
            if e.code != 404:  # already gone is what we wanted
                raise


def _generation(slice_json: Mapping[str, Any]) -> int:
    return int(slice_json.get("spec", {}).get("pool", {}).get("generation", 0))


def _content(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The fields we write, as comparable: an empty device list is the same as none (the
    server omits it), and what others may add (a default, another manager's field) is
    not our content."""
    return {
        "driver": spec.get("driver"),
        "nodeName": spec.get("nodeName"),
        "pool": spec.get("pool"),
        "devices": spec.get("devices") or [],
    }
