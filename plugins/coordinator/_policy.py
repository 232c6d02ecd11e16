"""``DeviceExposurePolicy`` manifests: how a discovered device is published, per plugin.

Shape, with the field names of the manifest::

    apiVersion: networking.dra.io/v1alpha1
    kind: DeviceExposurePolicy
    metadata: {name: <dns-subdomain>}
    spec:
      action: expose
      selector: {cel: <CEL over the discovered device>}
      exposure:
        deviceNameSuffix: -macvlan            # published name = device name + suffix
        allowMultipleAllocations: true        # a shared device
        capacity:                             # countable capacity in dra.networking
          <name>: {value: "64", requestPolicy: {default: "1", validValues: ["1"]}}
        supportedNetworkPlugins:              # the logical plugins this device serves
          - {name: macvlan, consumePerAllocation: {<name>: "1"}}
        compatibility:                        # who may coexist on the same scope
          - {scope: interface, domain: interface-mode, groups: [macvlan]}

The shape is ``plugins/coordinator/schemas/device-exposure-policy.schema.json``.
Capacity names are local to the driver domain ``dra.networking``: ``macvlans`` here is
``dra.networking/macvlans`` in a topology's ``capacityRequests``. Parsing also checks the
policy against itself: consumed capacities exist, quantities respect the request policy
and the total, and a device allowing multiple allocations bounds them by consuming
capacity on every allocation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ._topology import Selector, read_metadata
from ._yaml import (
    FieldProblem,
    ManifestError,
    Problems,
    check_shape,
    child_path,
    load_yaml_file,
)

__all__ = [
    "DRIVER_DOMAIN",
    "POLICY_SCHEMA",
    "CapacitySpec",
    "CompatibilityRule",
    "DeviceExposurePolicy",
    "Exposure",
    "RequestPolicy",
    "SupportedPlugin",
    "load_policies",
    "parse_policy",
    "qualify",
]

DRIVER_DOMAIN = "dra.networking"


def qualify(capacity: str) -> str:
    """``macvlans`` -> ``dra.networking/macvlans``."""
    return f"{DRIVER_DOMAIN}/{capacity}"


@dataclass(frozen=True)
class RequestPolicy:
    default: str | None
    valid_values: tuple[str, ...]


@dataclass(frozen=True)
class CapacitySpec:
    value: str
    request_policy: RequestPolicy | None = None


@dataclass(frozen=True)
class SupportedPlugin:
    name: str
    consume_per_allocation: Mapping[str, str] = field(default_factory=dict)
    """Local capacity name -> whole-number quantity each allocation consumes."""

    def __post_init__(self) -> None:
        frozen = MappingProxyType(dict(self.consume_per_allocation))
        object.__setattr__(self, "consume_per_allocation", frozen)

    def consumes(self) -> dict[str, str]:
        """The consumption with qualified capacity names (``dra.networking/macvlans``)."""
        return {qualify(k): v for k, v in self.consume_per_allocation.items()}


@dataclass(frozen=True)
class CompatibilityRule:
    scope: str
    domain: str
    groups: tuple[str, ...]


@dataclass(frozen=True)
class Exposure:
    device_name_suffix: str
    allow_multiple_allocations: bool
    capacity: Mapping[str, CapacitySpec]
    supported_network_plugins: tuple[SupportedPlugin, ...]
    compatibility: tuple[CompatibilityRule, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "capacity", MappingProxyType(dict(self.capacity)))

    def plugin(self, name: str) -> SupportedPlugin | None:
        return next((p for p in self.supported_network_plugins if p.name == name), None)

    def qualified_capacity(self) -> dict[str, CapacitySpec]:
        return {qualify(k): v for k, v in self.capacity.items()}


@dataclass(frozen=True)
class DeviceExposurePolicy:
    name: str
    action: str
    selector: Selector
    exposure: Exposure
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        object.__setattr__(self, "annotations", MappingProxyType(dict(self.annotations)))

    def supports(self, plugin: str) -> SupportedPlugin | None:
        return self.exposure.plugin(plugin)

    def groups_naming(self, plugin: str) -> tuple[CompatibilityRule, ...]:
        """The compatibility rules with a group named after ``plugin``."""
        return tuple(r for r in self.exposure.compatibility if plugin in r.groups)


# --- parsing ---------------------------------------------------------------------------

POLICY_SCHEMA = "device-exposure-policy.schema.json"


def _read_capacity(exposure: Mapping[str, Any]) -> dict[str, CapacitySpec]:
    out: dict[str, CapacitySpec] = {}
    for name, spec in exposure.get("capacity", {}).items():
        policy = None
        if "requestPolicy" in spec:
            rp = spec["requestPolicy"]
            default = str(rp["default"]) if "default" in rp else None
            policy = RequestPolicy(default, tuple(str(v) for v in rp.get("validValues", ())))
        out[name] = CapacitySpec(str(spec["value"]), policy)
    return out


def _check_capacity(problems: Problems, path: str, capacity: Mapping[str, CapacitySpec]) -> None:
    for name, spec in capacity.items():
        rp = spec.request_policy
        if rp is not None and rp.default and rp.valid_values and rp.default not in rp.valid_values:
            at = child_path(child_path(child_path(path, name), "requestPolicy"), "default")
            problems.add(at, f"{rp.default!r} is not one of validValues")


def _read_plugins(
    problems: Problems,
    path: str,
    entries: Sequence[Mapping[str, Any]],
    capacity: Mapping[str, CapacitySpec],
    shared: bool,
) -> tuple[SupportedPlugin, ...]:
    plugins: list[SupportedPlugin] = []
    for index, entry in enumerate(entries):
        at = child_path(path, index)
        name = entry["name"]
        if any(p.name == name for p in plugins):
            problems.add(child_path(at, "name"), f"plugin {name!r} is listed twice")
        consume = {cap: str(q) for cap, q in entry.get("consumePerAllocation", {}).items()}
        for cap, quantity in consume.items():
            where = child_path(child_path(at, "consumePerAllocation"), cap)
            _check_consumption(problems, where, cap, quantity, capacity.get(cap))
        if shared and not consume:
            problems.add(
                child_path(at, "consumePerAllocation"),
                "a device that allows multiple allocations must consume capacity per allocation",
            )
        plugins.append(SupportedPlugin(name, consume))
    return tuple(plugins)


def _check_consumption(
    problems: Problems, path: str, cap: str, quantity: str, spec: CapacitySpec | None
) -> None:
    if spec is None:
        problems.add(path, f"capacity {cap!r} is not declared in exposure.capacity")
        return
    if quantity == "0":
        problems.add(path, "an allocation must consume at least 1")
    elif int(quantity) > int(spec.value):
        problems.add(path, f"consumes {quantity} but the device has only {spec.value}")
    rp = spec.request_policy
    if rp is not None and rp.valid_values and quantity not in rp.valid_values:
        problems.add(path, f"{quantity!r} is not one of the requestPolicy validValues")


def _read_compatibility(
    problems: Problems, path: str, entries: Sequence[Mapping[str, Any]]
) -> tuple[CompatibilityRule, ...]:
    rules: list[CompatibilityRule] = []
    for index, entry in enumerate(entries):
        scope, domain = entry["scope"], entry["domain"]
        if any((r.scope, r.domain) == (scope, domain) for r in rules):
            problems.add(
                child_path(path, index), f"a second rule for scope {scope!r} domain {domain!r}"
            )
        rules.append(CompatibilityRule(scope, domain, tuple(entry["groups"])))
    return tuple(rules)


def parse_policy(doc: object, source: str = "<policy>") -> DeviceExposurePolicy:
    """Check one loaded YAML document against the schema (plugins/coordinator/schemas/
    device-exposure-policy.schema.json), then the policy against itself; raise
    :class:`ManifestError` listing every problem."""
    check_shape(POLICY_SCHEMA, doc, source)
    assert isinstance(doc, dict)  # the schema says so
    problems = Problems()
    name, labels, annotations = read_metadata(doc["metadata"])
    spec = doc["spec"]
    ex = spec["exposure"]
    shared = ex.get("allowMultipleAllocations", False)
    capacity = _read_capacity(ex)
    _check_capacity(problems, "spec.exposure.capacity", capacity)
    plugins = _read_plugins(
        problems,
        "spec.exposure.supportedNetworkPlugins",
        ex["supportedNetworkPlugins"],
        capacity,
        shared,
    )
    compatibility = _read_compatibility(
        problems, "spec.exposure.compatibility", ex.get("compatibility", ())
    )
    problems.raise_if_any(source)
    exposure = Exposure(ex.get("deviceNameSuffix", ""), shared, capacity, plugins, compatibility)
    selector = Selector(spec["selector"]["cel"])
    return DeviceExposurePolicy(name, spec["action"], selector, exposure, labels, annotations)


def load_policies(path: str | Path) -> tuple[DeviceExposurePolicy, ...]:
    """Load every ``DeviceExposurePolicy`` document of a file; names must be unique."""
    documents = load_yaml_file(path)
    policies = [parse_policy(doc, f"{path} (document {i + 1})") for i, doc in enumerate(documents)]
    check_unique_names(str(path), policies)
    return tuple(policies)


def check_unique_names(source: str, policies: Sequence[DeviceExposurePolicy]) -> None:
    seen: set[str] = set()
    for index, policy in enumerate(policies):
        if policy.name in seen:
            problem = FieldProblem(f"[{index}].metadata.name", f"duplicate {policy.name!r}")
            raise ManifestError(source, [problem])
        seen.add(policy.name)
