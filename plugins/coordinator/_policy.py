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

from ._topology import Selector, read_header, read_metadata, read_selector
from ._yaml import (
    DNS_LABEL,
    FieldProblem,
    Fields,
    ManifestError,
    Problems,
    child_path,
    load_yaml_file,
    parse_quantity,
)

__all__ = [
    "ACTIONS",
    "COMPATIBILITY_SCOPES",
    "DRIVER_DOMAIN",
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
ACTIONS = ("expose",)
COMPATIBILITY_SCOPES = ("interface", "device")
_SUFFIX = DNS_LABEL  # "-macvlan" is not a label on its own; checked with a leading "x"


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


def _read_capacity(problems: Problems, exposure: Fields) -> dict[str, CapacitySpec]:
    view = exposure.mapping("capacity", required=False)
    out: dict[str, CapacitySpec] = {}
    for name, value in view.data.items():
        path = view.at(name)
        if not DNS_LABEL.match(name):
            problems.add(path, f"{name!r} is not a valid capacity name (DNS label)")
            continue
        spec = Fields(problems, path, value)
        spec.only("value", "requestPolicy")
        total = parse_quantity(problems, spec.at("value"), spec.data.get("value", ""))
        policy = None
        if spec.has("requestPolicy"):
            rp = spec.mapping("requestPolicy")
            rp.only("default", "validValues")
            default = None
            if rp.has("default"):
                default = parse_quantity(problems, rp.at("default"), rp.data["default"])
            valid = tuple(
                parse_quantity(problems, child_path(rp.at("validValues"), i), v)
                for i, v in enumerate(rp.items("validValues", required=False))
            )
            if default and valid and default not in valid:
                problems.add(rp.at("default"), f"{default!r} is not one of validValues")
            policy = RequestPolicy(default, valid)
        out[name] = CapacitySpec(total, policy)
    return out


def _read_plugins(
    problems: Problems, exposure: Fields, capacity: Mapping[str, CapacitySpec], shared: bool
) -> tuple[SupportedPlugin, ...]:
    path = exposure.at("supportedNetworkPlugins")
    plugins: list[SupportedPlugin] = []
    for index, item in enumerate(exposure.items("supportedNetworkPlugins")):
        entry = Fields(problems, child_path(path, index), item)
        entry.only("name", "consumePerAllocation")
        name = entry.string("name", pattern=DNS_LABEL, what="plugin name")
        if name and any(p.name == name for p in plugins):
            problems.add(entry.at("name"), f"plugin {name!r} is listed twice")
        consume_view = entry.mapping("consumePerAllocation", required=False)
        consume: dict[str, str] = {}
        for cap, value in consume_view.data.items():
            at = consume_view.at(cap)
            quantity = parse_quantity(problems, at, value)
            consume[cap] = quantity
            _check_consumption(problems, at, cap, quantity, capacity.get(cap))
        if shared and not consume and entry.valid:
            problems.add(
                entry.at("consumePerAllocation"),
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
    if not quantity or not spec.value:
        return
    if quantity == "0":
        problems.add(path, "an allocation must consume at least 1")
    elif int(quantity) > int(spec.value):
        problems.add(path, f"consumes {quantity} but the device has only {spec.value}")
    rp = spec.request_policy
    if rp is not None and rp.valid_values and quantity not in rp.valid_values:
        problems.add(path, f"{quantity!r} is not one of the requestPolicy validValues")


def _read_compatibility(problems: Problems, exposure: Fields) -> tuple[CompatibilityRule, ...]:
    path = exposure.at("compatibility")
    rules: list[CompatibilityRule] = []
    for index, item in enumerate(exposure.items("compatibility", required=False)):
        rule = Fields(problems, child_path(path, index), item)
        rule.only("scope", "domain", "groups")
        scope = rule.string("scope", choices=COMPATIBILITY_SCOPES)
        domain = rule.string("domain", pattern=DNS_LABEL, what="domain name (DNS label)")
        groups = rule.strings("groups")
        for i, group in enumerate(groups):
            if not DNS_LABEL.match(group):
                problems.add(child_path(rule.at("groups"), i), f"{group!r} is not a DNS label")
        if any((r.scope, r.domain) == (scope, domain) for r in rules):
            problems.add(rule.path, f"a second rule for scope {scope!r} domain {domain!r}")
        rules.append(CompatibilityRule(scope, domain, groups))
    return tuple(rules)


def parse_policy(doc: object, source: str = "<policy>") -> DeviceExposurePolicy:
    """Parse one loaded YAML document; raise :class:`ManifestError` listing every problem."""
    problems = Problems()
    meta, spec = read_header(problems, doc, "DeviceExposurePolicy")
    name, labels, annotations = read_metadata(meta)
    spec.only("action", "selector", "exposure")
    action = spec.string("action", choices=ACTIONS)
    selector = read_selector(spec)
    ex = spec.mapping("exposure")
    ex.only(
        "deviceNameSuffix",
        "allowMultipleAllocations",
        "capacity",
        "supportedNetworkPlugins",
        "compatibility",
    )
    suffix = ex.string("deviceNameSuffix", required=False)
    if suffix and not _SUFFIX.match("x" + suffix):
        problems.add(ex.at("deviceNameSuffix"), f"{suffix!r} must be lowercase a-z, 0-9 and '-'")
    shared = ex.boolean("allowMultipleAllocations", required=False)
    capacity = _read_capacity(problems, ex)
    plugins = _read_plugins(problems, ex, capacity, shared)
    compatibility = _read_compatibility(problems, ex)
    problems.raise_if_any(source)
    exposure = Exposure(suffix, shared, capacity, plugins, compatibility)
    return DeviceExposurePolicy(name, action, selector, exposure, labels, annotations)


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
