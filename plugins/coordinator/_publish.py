"""Publication: the devices the scheduler sees, after the exposure policies.

Each inventory device selected by ``expose`` policies is published once per policy, as
``<name><deviceNameSuffix>`` with the policy's capacity (qualified in
``dra.networking``) and a ``supportedNetworkPlugins`` attribute (comma-separated); a
device no policy selects is published unchanged, as an exclusive device.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from plugins.sdk import InvalidArgument

from ._cel import cel_device, compile_selector
from ._inventory import AttributeValue, Device, Inventory, freeze_groups
from ._policy import DRIVER_DOMAIN, DeviceExposurePolicy, qualify
from ._yaml import DNS_LABEL

__all__ = ["PublishedDevice", "publish"]


@dataclass(frozen=True)
class PublishedDevice:
    """A device as the scheduler sees it: raw, or exposed through one policy."""

    name: str
    source: Device
    policy: DeviceExposurePolicy | None
    attributes: Mapping[str, Mapping[str, AttributeValue]]
    capacity: Mapping[str, int]
    """Qualified capacity name -> total (``dra.networking/macvlans`` -> 64)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", freeze_groups(self.attributes))
        object.__setattr__(self, "capacity", MappingProxyType(dict(self.capacity)))

    @property
    def shared(self) -> bool:
        return self.policy is not None and self.policy.exposure.allow_multiple_allocations

    @property
    def device_type(self) -> str:
        value = self.attributes.get(DRIVER_DOMAIN, {}).get("type", "")
        return value if isinstance(value, str) else ""

    @functools.cached_property
    def cel(self) -> Any:
        nested: dict[str, dict[str, int]] = {}
        for qualified, total in self.capacity.items():
            domain, _, name = qualified.partition("/")
            nested.setdefault(domain, {})[name] = total
        return cel_device(self.name, self.attributes, nested)


def publish(
    inventory: Inventory, policies: Sequence[DeviceExposurePolicy] = ()
) -> tuple[PublishedDevice, ...]:
    """Apply the exposure policies to the inventory (see the module docstring)."""
    selectors = [compile_selector(p.selector.cel, policy=p.name) for p in policies]
    published: list[PublishedDevice] = []
    for device in inventory.devices:
        chosen = [p for p, s in zip(policies, selectors, strict=True) if s.matches(device)]
        if not chosen:
            capacity = {
                f"{domain}/{name}": total
                for domain, group in device.capacity.items()
                for name, total in group.items()
            }
            published.append(
                PublishedDevice(device.name, device, None, device.attributes, capacity)
            )
        for policy in chosen:
            published.append(_expose(device, policy))
    names = [d.name for d in published]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidArgument(f"exposure policies publish duplicate device names {duplicates}")
    return tuple(published)


def _expose(device: Device, policy: DeviceExposurePolicy) -> PublishedDevice:
    exposure = policy.exposure
    attributes = {domain: dict(group) for domain, group in device.attributes.items()}
    plugins = ",".join(p.name for p in exposure.supported_network_plugins)
    attributes.setdefault(DRIVER_DOMAIN, {})["supportedNetworkPlugins"] = plugins
    capacity = {qualify(k): int(v.value) for k, v in exposure.capacity.items()}
    name = device.name + exposure.device_name_suffix
    if not DNS_LABEL.match(name):
        raise InvalidArgument(f"policy {policy.name!r} publishes invalid device name {name!r}")
    return PublishedDevice(name, device, policy, attributes, capacity)
