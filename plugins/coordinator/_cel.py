"""CEL device selectors, a lab device inventory, and a stand-in for the scheduler.

Selectors are evaluated with ``cel-python`` (``celpy``). A device is visible to CEL as
the map ``device``, shaped like a DRA device::

    device.name                                  # the published device name
    device.attributes["dra.networking"].type     # "vf" | "pf"
    device.attributes["dra.networking"].pfName   # string, int and bool attributes
    device.capacity["dra.networking"].macvlans   # whole-number capacity, as int

Every expression is parsed once (cached by its text). A syntax error, a result that is
not a bool, or an evaluation error (for example a missing attribute without a ``has()``
guard) raises :class:`SelectorError` naming the step or policy and, when evaluating,
the device: as with DRA, a selector that errors on a device fails the allocation
rather than silently skipping the device.

The allocation stand-in (:class:`Allocator`, :func:`allocate`) models what the
scheduler and the discovery compiler do together, deliberately small:

1. **publish**: each inventory device selected by ``expose`` policies is published once
   per policy, as ``<name><deviceNameSuffix>`` with the policy's capacity (qualified in
   ``dra.networking``) and a ``supportedNetworkPlugins`` attribute (comma-separated);
   a device no policy selects is published unchanged, as an exclusive device;
2. **filter** (the selectors the controller adds on its own): a device serves a step
   only if its ``type`` attribute is the plugin's prepared device type, its sharing
   matches the step's, and (for a device published by a policy) the policy lists the
   plugin;
3. **choose**: the first device in inventory order that also matches the step's own
   selector and still fits: an exclusive device is allocated once; a shared device up to
   its capacity (each allocation consumes the step's capacity request); a source device
   is never exclusive and shared at the same time; and a shared allocation must share a
   compatibility group with every live allocation in the same scope and domain
   (macvlan and ipvlan never meet on one interface).

Allocation of one topology is all or nothing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from plugins.sdk import AllocationBinding, FailedPrecondition, InvalidArgument, Sharing

from ._policy import DRIVER_DOMAIN, DeviceExposurePolicy, qualify
from ._yaml import (
    DNS_LABEL,
    FieldProblem,
    Fields,
    ManifestError,
    Problems,
    child_path,
    kind_of,
    load_yaml_file,
    parse_quantity,
)

if TYPE_CHECKING:
    from ._compile import CompiledStep, CompiledTopology

__all__ = [
    "AllocatedDevice",
    "AllocationError",
    "Allocator",
    "AttributeValue",
    "CompiledSelector",
    "Device",
    "Inventory",
    "PublishedDevice",
    "SelectorError",
    "allocate",
    "compile_selector",
    "load_inventory",
    "parse_inventory",
    "publish",
]

AttributeValue: TypeAlias = str | int | bool
_DOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_ATTRIBUTE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,62}$")
_ACTIVATION = re.compile(r" \(in activation .*", re.DOTALL)


class SelectorError(InvalidArgument):
    """A selector that cannot be used: syntax, a non-bool result, or an evaluation error."""

    def __init__(
        self,
        owner: str,
        expression: str,
        reason: str,
        *,
        step: str | None = None,
        policy: str | None = None,
        device: str | None = None,
    ) -> None:
        on = f" on device {device!r}" if device else ""
        prefix = f"{owner}: " if owner else ""
        super().__init__(
            f"{prefix}selector {expression!r}{on}: {reason}",
            details={"step": step or "", "policy": policy or "", "device": device or ""},
        )
        self.owner = owner
        self.expression = expression
        self.reason = reason
        self.step = step
        self.policy = policy
        self.device = device


class AllocationError(FailedPrecondition):
    """No published device fits an Allocation step (the scheduler would not schedule)."""

    def __init__(self, step: str, selector: str, reasons: Sequence[str]) -> None:
        why = "; ".join(reasons) if reasons else "no device matches the selector"
        super().__init__(
            f"step {step!r}: no device fits selector {selector!r}: {why}",
            details={"step": step},
        )
        self.step = step
        self.selector = selector
        self.reasons = tuple(reasons)


# --- selectors -----------------------------------------------------------------------------


@functools.cache
def _environment() -> Any:
    # Created on first use: celpy.Environment() raises the interpreter's recursion limit.
    return celpy.Environment()


@functools.lru_cache(maxsize=512)
def _program(expression: str) -> Any:
    env = _environment()
    return env.program(env.compile(expression))


def _describe_parse_error(exc: Exception) -> str:
    line, column = getattr(exc, "line", None), getattr(exc, "column", None)
    where = f" at line {line} column {column}" if line is not None else ""
    first = str(exc).strip().splitlines()
    return f"syntax error{where}" + (f": {first[0]}" if first else "")


def _describe_eval_error(exc: BaseException) -> str:
    text = str(exc.args[0]) if exc.args else type(exc).__name__
    return _ACTIVATION.sub("", text)


@dataclass(frozen=True)
class CompiledSelector:
    expression: str
    owner: str
    step: str | None = None
    policy: str | None = None
    _runner: Any = field(default=None, repr=False, compare=False)

    def matches(self, device: PublishedDevice | Device) -> bool:
        """Evaluate on one device; raise :class:`SelectorError` unless the result is a bool."""
        try:
            result = self._runner.evaluate({"device": device.cel})
        except CELEvalError as exc:
            raise self._error(f"evaluation failed: {_describe_eval_error(exc)}", device) from None
        except Exception as exc:  # celpy surfaces some failures as plain Python errors
            reason = f"evaluation failed: {type(exc).__name__}: {_describe_eval_error(exc)}"
            raise self._error(reason, device) from None
        if isinstance(result, CELEvalError):
            raise self._error(f"evaluation failed: {_describe_eval_error(result)}", device)
        if not isinstance(result, celtypes.BoolType):
            got = type(result).__name__.removesuffix("Type").lower()
            raise self._error(f"must evaluate to a bool, got {got} {result!s}", device)
        return bool(result)

    def _error(self, reason: str, device: PublishedDevice | Device) -> SelectorError:
        return SelectorError(
            self.owner,
            self.expression,
            reason,
            step=self.step,
            policy=self.policy,
            device=device.name,
        )


def compile_selector(
    expression: str, *, step: str | None = None, policy: str | None = None
) -> CompiledSelector:
    """Parse ``expression`` once (cached); raise :class:`SelectorError` on a syntax error."""
    owner = f"step {step!r}" if step else f"policy {policy!r}" if policy else ""
    try:
        runner = _program(expression)
    except Exception as exc:  # CELParseError, and lark errors it does not wrap
        raise SelectorError(
            owner, expression, _describe_parse_error(exc), step=step, policy=policy
        ) from None
    return CompiledSelector(expression, owner, step, policy, runner)


# --- inventory -----------------------------------------------------------------------------


def _cel_view(
    name: str,
    attributes: Mapping[str, Mapping[str, AttributeValue]],
    capacity: Mapping[str, Mapping[str, int]],
) -> Any:
    return json_to_cel(
        {
            "name": name,
            "attributes": {d: dict(a) for d, a in attributes.items()},
            "capacity": {d: dict(c) for d, c in capacity.items()},
        }
    )


def _freeze2(value: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Mapping[str, Any]]:
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
        object.__setattr__(self, "attributes", _freeze2(self.attributes))
        object.__setattr__(self, "capacity", _freeze2(self.capacity))

    @property
    def networking(self) -> Mapping[str, AttributeValue]:
        return self.attributes.get(DRIVER_DOMAIN, MappingProxyType({}))

    @functools.cached_property
    def cel(self) -> Any:
        return _cel_view(self.name, self.attributes, self.capacity)


@dataclass(frozen=True)
class Inventory:
    pool: str
    driver: str
    devices: tuple[Device, ...]

    def device(self, name: str) -> Device | None:
        return next((d for d in self.devices if d.name == name), None)


def _read_attributes(problems: Problems, dev: Fields) -> dict[str, dict[str, AttributeValue]]:
    view = dev.mapping("attributes")
    out: dict[str, dict[str, AttributeValue]] = {}
    for domain, value in view.data.items():
        group = Fields(problems, view.at(domain), value)
        if not _DOMAIN.match(domain):
            problems.add(group.path, f"{domain!r} is not a valid attribute domain")
        attrs: dict[str, AttributeValue] = {}
        for key, item in group.data.items():
            if not _ATTRIBUTE.match(key):
                problems.add(group.at(key), f"{key!r} is not a valid attribute name")
            elif isinstance(item, str | bool | int) and not isinstance(item, float):
                attrs[key] = item
            else:
                problems.add(
                    group.at(key), f"must be a string, integer or bool, not {kind_of(item)}"
                )
        out[domain] = attrs
    if DRIVER_DOMAIN in out and not isinstance(out[DRIVER_DOMAIN].get("type"), str):
        problems.add(child_path(view.at(DRIVER_DOMAIN), "type"), "required string attribute")
    return out


def _read_capacity(problems: Problems, dev: Fields) -> dict[str, dict[str, int]]:
    view = dev.mapping("capacity", required=False)
    out: dict[str, dict[str, int]] = {}
    for domain, value in view.data.items():
        group = Fields(problems, view.at(domain), value)
        out[domain] = {
            key: int(parse_quantity(problems, group.at(key), item) or 0)
            for key, item in group.data.items()
        }
    return out


def parse_inventory(doc: object, source: str = "<inventory>") -> Inventory:
    """Parse a ``DeviceInventory`` document (see ``topologies/inventory.yaml``)."""
    problems = Problems()
    top = Fields(problems, "", doc)
    top.only("kind", "pool", "driver", "devices")
    top.string("kind", choices=("DeviceInventory",))
    pool = top.string("pool", pattern=DNS_LABEL, what="pool name")
    driver = top.string("driver", required=False) or DRIVER_DOMAIN
    devices: list[Device] = []
    seen: set[str] = set()
    for index, item in enumerate(top.items("devices")):
        dev = Fields(problems, child_path("devices", index), item)
        dev.only("name", "attributes", "capacity")
        name = dev.string("name", pattern=DNS_LABEL, what="device name (DNS label)")
        if name in seen:
            problems.add(dev.at("name"), f"duplicate device {name!r}")
        seen.add(name)
        devices.append(Device(name, _read_attributes(problems, dev), _read_capacity(problems, dev)))
    problems.raise_if_any(source)
    return Inventory(pool, driver, tuple(devices))


def load_inventory(path: str | Path) -> Inventory:
    documents = load_yaml_file(path)
    if len(documents) != 1:
        message = f"expected exactly one DeviceInventory document, found {len(documents)}"
        raise ManifestError(str(path), [FieldProblem("$", message)])
    return parse_inventory(documents[0], str(path))


# --- publication -------------------------------------------------------------------------


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
        object.__setattr__(self, "attributes", _freeze2(self.attributes))
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
        return _cel_view(self.name, self.attributes, nested)


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


# --- allocation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllocatedDevice:
    """The device chosen for one Allocation step."""

    step: str
    device: str
    """The published name (``enp3s0f2-macvlan``)."""
    source_device: str
    """The inventory device behind it (``enp3s0f2``)."""
    device_type: str
    sharing: Sharing
    attributes: Mapping[str, AttributeValue]
    """The device's ``dra.networking`` attributes."""
    consumed: Mapping[str, int]
    """Capacity this allocation consumes (qualified name -> count); empty when exclusive."""
    policy: str | None
    pool: str
    driver: str = DRIVER_DOMAIN

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", MappingProxyType(dict(self.attributes)))
        object.__setattr__(self, "consumed", MappingProxyType(dict(self.consumed)))

    def binding(self, root_id: str) -> AllocationBinding:
        """The :class:`~plugins.sdk.AllocationBinding` a plugin's NodePrepare receives."""
        attrs = {
            k: ("true" if v else "false") if isinstance(v, bool) else str(v)
            for k, v in self.attributes.items()
        }
        return AllocationBinding(
            root_id,
            self.driver,
            self.pool,
            self.device,
            self.device_type,
            self.sharing,
            attrs,
            {k: str(v) for k, v in self.consumed.items()},
        )


@dataclass
class _State:
    exclusive: dict[str, str] = field(default_factory=dict)  # source device -> published
    shared_count: dict[str, int] = field(default_factory=dict)  # source device -> live shares
    used: dict[str, dict[str, int]] = field(default_factory=dict)  # published -> consumed
    groups: dict[tuple[str, str, str], list[frozenset[str]]] = field(default_factory=dict)

    def copy(self) -> _State:
        return _State(
            dict(self.exclusive),
            dict(self.shared_count),
            {k: dict(v) for k, v in self.used.items()},
            {k: list(v) for k, v in self.groups.items()},
        )


def _scope_key(device: PublishedDevice, scope: str) -> str:
    if scope == "interface":
        value = device.source.networking.get("ifName")
        if isinstance(value, str) and value:
            return value
    return device.source.name


def _group_keys(device: PublishedDevice) -> list[tuple[tuple[str, str, str], frozenset[str]]]:
    """((scope, scope value, domain), groups) for each compatibility rule of the device."""
    rules = device.policy.exposure.compatibility if device.policy is not None else ()
    return [((r.scope, _scope_key(device, r.scope), r.domain), frozenset(r.groups)) for r in rules]


class Allocator:
    """Allocates devices for compiled topologies, remembering what is in use."""

    def __init__(self, inventory: Inventory, policies: Sequence[DeviceExposurePolicy] = ()) -> None:
        self.inventory = inventory
        self.devices = publish(inventory, policies)
        self._state = _State()

    def allocate(self, compiled: CompiledTopology) -> dict[str, AllocatedDevice]:
        """One device per Allocation step, in ``prepare_order``; all or nothing."""
        state = self._state.copy()
        result: dict[str, AllocatedDevice] = {}
        for step in compiled.roots():
            result[step.name] = self._allocate_step(state, step)
        self._state = state
        return result

    def release(
        self, allocations: Mapping[str, AllocatedDevice] | Iterable[AllocatedDevice]
    ) -> None:
        """Return devices to the pool (after NodeUnprepare); all or nothing."""
        items = allocations.values() if isinstance(allocations, Mapping) else allocations
        by_name = {d.name: d for d in self.devices}
        state = self._state.copy()
        for alloc in items:
            device = by_name.get(alloc.device)
            if device is None:
                raise ValueError(f"{alloc.device!r} is not a device of this allocator")
            if alloc.sharing is Sharing.EXCLUSIVE:
                if state.exclusive.get(alloc.source_device) != alloc.device:
                    raise ValueError(f"{alloc.device!r} is not allocated")
                del state.exclusive[alloc.source_device]
                continue
            used = state.used.setdefault(alloc.device, {})
            for cap, count in alloc.consumed.items():
                if used.get(cap, 0) < count:
                    raise ValueError(f"{alloc.device!r} has fewer than {count} {cap} in use")
                used[cap] -= count
            state.shared_count[alloc.source_device] -= 1
            for key, groups in _group_keys(device):
                state.groups[key].remove(groups)
        self._state = state

    def _allocate_step(self, state: _State, step: CompiledStep) -> AllocatedDevice:
        alloc = step.step.allocation
        assert alloc is not None  # validated: every root has an allocation
        selector = compile_selector(alloc.selector.cel, step=step.name)
        reasons: list[str] = []
        for device in self.devices:
            if not self._eligible(device, step, alloc.sharing) or not selector.matches(device):
                continue
            reason = self._unavailable(state, device, step)
            if reason is None:
                return self._take(state, device, step, alloc.sharing)
            reasons.append(f"{device.name}: {reason}")
        raise AllocationError(step.name, alloc.selector.cel, reasons)

    @staticmethod
    def _eligible(device: PublishedDevice, step: CompiledStep, sharing: Sharing) -> bool:
        wanted_type = step.descriptor.preparation.device_type
        if wanted_type is not None and device.device_type != wanted_type:
            return False
        if device.shared != (sharing is Sharing.SHARED):
            return False
        return device.policy is None or device.policy.supports(step.plugin) is not None

    def _unavailable(
        self, state: _State, device: PublishedDevice, step: CompiledStep
    ) -> str | None:
        source = device.source.name
        if source in state.exclusive:
            return f"in exclusive use (as {state.exclusive[source]})"
        if not device.shared:
            return "shared allocations are live on it" if state.shared_count.get(source) else None
        used = state.used.get(device.name, {})
        for cap, count in step.capacity_requests.items():
            total = device.capacity.get(cap, 0)
            if used.get(cap, 0) + count > total:
                return f"{cap} exhausted ({used.get(cap, 0)} of {total} in use)"
        for key, mine in _group_keys(device):
            clash = next((g for g in state.groups.get(key, []) if not g & mine), None)
            if clash is not None:
                scope, where, domain = key
                return (
                    f"{domain} on {scope} {where!r} is held by {sorted(clash)}, "
                    f"incompatible with {sorted(mine)}"
                )
        return None

    def _take(
        self, state: _State, device: PublishedDevice, step: CompiledStep, sharing: Sharing
    ) -> AllocatedDevice:
        source = device.source.name
        consumed: dict[str, int] = {}
        if sharing is Sharing.EXCLUSIVE:
            state.exclusive[source] = device.name
        else:
            consumed = dict(step.capacity_requests)
            used = state.used.setdefault(device.name, {})
            for cap, count in consumed.items():
                used[cap] = used.get(cap, 0) + count
            state.shared_count[source] = state.shared_count.get(source, 0) + 1
            for key, groups in _group_keys(device):
                state.groups.setdefault(key, []).append(groups)
        return AllocatedDevice(
            step.name,
            device.name,
            source,
            device.device_type,
            sharing,
            device.attributes.get(DRIVER_DOMAIN, {}),
            consumed,
            device.policy.name if device.policy is not None else None,
            self.inventory.pool,
            self.inventory.driver,
        )


def allocate(
    compiled: CompiledTopology,
    inventory: Inventory,
    policies: Sequence[DeviceExposurePolicy] = (),
) -> dict[str, AllocatedDevice]:
    """Allocate one topology on a fresh inventory (nothing else in use)."""
    return Allocator(inventory, policies).allocate(compiled)
