"""A stand-in for the scheduler: one device per Allocation step.

It models what the scheduler and the discovery compiler do together, deliberately small.
The devices are the published ones (``_publish``); then, per step:

1. **filter** (the selectors the controller adds on its own): a device serves a step
   only if its ``type`` attribute is the plugin's prepared device type, its sharing
   matches the step's, and (for a device published by a policy) the policy lists the
   plugin;
2. **choose**: the first device in inventory order that also matches the step's own
   selector and still fits: an exclusive device is allocated once; a shared device up to
   its capacity (each allocation consumes the step's capacity request); a source device
   is never exclusive and shared at the same time; and a shared allocation must share a
   compatibility group with every live allocation in the same scope and domain
   (macvlan and ipvlan never meet on one interface).

Allocation of one topology is all or nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from plugins.sdk import AllocationBinding, FailedPrecondition, Sharing

from ._cel import compile_selector
from ._inventory import AttributeValue, Inventory
from ._policy import DRIVER_DOMAIN, DeviceExposurePolicy
from ._publish import PublishedDevice, publish

if TYPE_CHECKING:
    from ._compile import CompiledStep, CompiledTopology

__all__ = ["AllocatedDevice", "AllocationError", "Allocator", "allocate"]


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

    def bind(
        self, compiled: CompiledTopology, chosen: Mapping[str, str]
    ) -> dict[str, AllocatedDevice]:
        """The devices a scheduler chose (Allocation step -> published device name), checked
        as ``allocate`` would pick them: the device exists, its type, sharing and policy suit
        the step, the step's selector matches it, and it is free; all or nothing."""
        by_name = {d.name: d for d in self.devices}
        state = self._state.copy()
        result: dict[str, AllocatedDevice] = {}
        for step in compiled.roots():
            alloc = step.step.allocation
            assert alloc is not None  # validated: every root has an allocation
            name = chosen.get(step.name)
            if name is None:
                raise AllocationError(step.name, alloc.selector.cel, ["no device was allocated"])
            device = by_name.get(name)
            problem = (
                f"{name}: not a device of pool {self.inventory.pool}"
                if device is None
                else f"{name}: its type, sharing or policy does not suit the step"
                if not self._eligible(device, step, alloc.sharing)
                else f"{name}: the step's selector does not match it"
                if not compile_selector(alloc.selector.cel, step=step.name).matches(device)
                else None
            )
            if problem is None:
                assert device is not None
                unavailable = self._unavailable(state, device, step)
                problem = None if unavailable is None else f"{name}: {unavailable}"
            if problem is not None:
                raise AllocationError(step.name, alloc.selector.cel, [problem])
            assert device is not None
            result[step.name] = self._take(state, device, step, alloc.sharing)
        unknown = sorted(set(chosen) - set(result))
        if unknown:
            raise AllocationError(
                unknown[0], "", [f"the topology {compiled.topology.name} has no root {unknown[0]}"]
            )
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

    def reserve(self, allocations: Iterable[AllocatedDevice]) -> None:
        """Mark allocations made earlier as in use again (a restarted coordinator reads them
        from its journal); all or nothing, refused if one no longer fits."""
        by_name = {d.name: d for d in self.devices}
        state = self._state.copy()
        for alloc in allocations:
            device = by_name.get(alloc.device)
            if device is None:
                raise ValueError(f"{alloc.device!r} is not a device of this allocator")
            source = device.source.name
            if source in state.exclusive or (
                alloc.sharing is Sharing.EXCLUSIVE and state.shared_count.get(source)
            ):
                raise ValueError(f"{alloc.device!r} is already in use")
            if alloc.sharing is Sharing.EXCLUSIVE:
                state.exclusive[source] = device.name
                continue
            used = state.used.setdefault(device.name, {})
            for cap, count in alloc.consumed.items():
                used[cap] = used.get(cap, 0) + count
            state.shared_count[source] = state.shared_count.get(source, 0) + 1
            for key, groups in _group_keys(device):
                state.groups.setdefault(key, []).append(groups)
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
