"""Call views: what a handler sees of a request the host already authenticated and validated.

The ``require_*`` methods are the prerequisite checks of blueprint 4.2. They are
pure: they read the verified request and raise ``PrerequisiteError`` naming the
check. They complement, never replace, the effect executors' own revalidation
right before mutation: names, ifindexes and PCI addresses are observations only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ._config import ConfigValidator
from ._descriptor import Descriptor
from ._errors import PrerequisiteError
from ._linux_names import PCI_ADDRESS, kernel_name_problem
from ._types import (
    KERNEL_INTERFACE,
    AllocationBinding,
    Grant,
    OperationEnvelope,
    PreparedState,
    Requirements,
    ResourceHandle,
    SandboxHandle,
    Sharing,
)

T = TypeVar("T")


def check_interface_name(name: str) -> str | None:
    """Why ``name`` is not a usable interface name, or None if it is: the kernel's rule
    (``kernel_name_problem``) and printable ASCII, so a name shows the same in every log
    and tool, and no ``%``: the kernel takes ``net%d`` as a template and chooses the
    name itself (the Kernel protocol passes templates on, for the fake kernel's
    differential), where a plugin must know the name it asked for."""
    problem = kernel_name_problem(name)
    if problem is None and not (name.isprintable() and name.isascii()):
        problem = f"{name!r} must be printable ASCII"
    if problem is None and "%" in name:
        problem = f"{name!r} is a name template ('%'): the kernel would choose the name"
    return problem


def _is_pci_address(text: str) -> bool:
    return PCI_ADDRESS.match(text) is not None


@dataclass(frozen=True)
class VFAllocation:
    root_id: str
    pf_name: str
    vf_index: int
    pci_address: str


@dataclass(frozen=True)
class SharedUnit:
    root_id: str
    parent_name: str
    capacity: str
    quantity: int


@dataclass(frozen=True)
class _CallBase:
    envelope: OperationEnvelope
    descriptor: Descriptor
    validator: ConfigValidator = field(repr=False, compare=False)

    def _fail(self, check: str, message: str) -> PrerequisiteError:
        return PrerequisiteError(check, f"{self.descriptor.name}: {message}")


@dataclass(frozen=True)
class _ConfiguredCall(_CallBase):
    config_json: str = "{}"

    def config(self, cls: type[T]) -> T:
        """Strictly decode this call's config against the pinned schema into ``cls``."""
        return self.validator.decode(self.config_json, cls)


@dataclass(frozen=True)
class PrepareCall(_ConfiguredCall):
    allocation: AllocationBinding | None = None
    requirements: Requirements = field(default_factory=Requirements)

    def _allocation(self, check: str) -> AllocationBinding:
        if self.allocation is None:
            raise self._fail(check, "the request carries no allocation binding")
        return self.allocation

    def require_exclusive_vf(self) -> VFAllocation:
        check = "exclusive-vf"
        a = self._allocation(check)
        if self.descriptor.preparation.semantics != "exclusive-device":
            raise self._fail(check, "this plugin does not prepare exclusive devices")
        if a.sharing is not Sharing.EXCLUSIVE:
            raise self._fail(check, f"allocation {a.root_id} is {a.sharing}, not Exclusive")
        if a.device_type != "vf":
            raise self._fail(check, f"allocation {a.root_id} is a {a.device_type!r}, not a VF")
        pf, index, pci = (a.attributes.get(k, "") for k in ("pfName", "vfIndex", "pciAddress"))
        if check_interface_name(pf) is not None:
            raise self._fail(check, f"allocation {a.root_id} has no valid pfName")
        if not index.isdigit():
            raise self._fail(check, f"allocation {a.root_id} has no valid vfIndex")
        if not _is_pci_address(pci):
            raise self._fail(check, f"allocation {a.root_id} has no valid pciAddress")
        return VFAllocation(a.root_id, pf, int(index), pci)

    def require_shared_unit(self, plugin: str, capacity: str) -> SharedUnit:
        check = "shared-unit"
        a = self._allocation(check)
        prep = self.descriptor.preparation
        if plugin != self.descriptor.name or prep.semantics != "shared-unit":
            raise self._fail(check, f"this endpoint does not prepare {plugin!r} shares")
        if capacity != prep.capacity:
            raise self._fail(check, f"capacity {capacity!r} is not this plugin's {prep.capacity!r}")
        if a.sharing is not Sharing.SHARED:
            raise self._fail(check, f"allocation {a.root_id} is {a.sharing}, not Shared")
        if a.device_type != prep.device_type:
            raise self._fail(check, f"allocation {a.root_id} is a {a.device_type!r}")
        consumed = a.capacity.get(capacity)
        if consumed != "1":
            raise self._fail(
                check, f"allocation {a.root_id} consumes {consumed!r} of {capacity}, not exactly 1"
            )
        parent = a.attributes.get("ifName", "")
        if check_interface_name(parent) is not None:
            raise self._fail(check, f"allocation {a.root_id} has no valid parent ifName")
        return SharedUnit(a.root_id, parent, capacity, 1)


@dataclass(frozen=True)
class ConnectCall(_ConfiguredCall):
    sandbox: SandboxHandle | None = None
    inputs: Mapping[str, tuple[ResourceHandle, ...]] = field(default_factory=dict)
    interface_names: Mapping[str, str] = field(default_factory=dict)
    prepared: PreparedState | None = None
    allocation: AllocationBinding | None = None
    grants: tuple[Grant, ...] = ()

    def require_sandbox(self) -> SandboxHandle:
        if self.sandbox is None:
            raise self._fail("sandbox", "the request carries no sandbox")
        return self.sandbox

    def require_prepared_root(self, plugin: str) -> PreparedState:
        check = "prepared-root"
        p = self.prepared
        if p is None or self.allocation is None:
            raise self._fail(check, "no prepared state and allocation for this root")
        if plugin != self.descriptor.name or p.plugin != plugin:
            raise self._fail(check, f"prepared state belongs to {p.plugin!r}, not {plugin!r}")
        if p.root_id != self.allocation.root_id:
            raise self._fail(
                check, f"prepared root {p.root_id} is not allocation {self.allocation.root_id}"
            )
        expected = {port.type for port in self.descriptor.preparation.outputs}
        if not p.handles:
            raise self._fail(check, "prepared state has no handles")
        for h in p.handles:
            if h.root_provenance != p.root_id or h.type not in expected:
                raise self._fail(
                    check, f"prepared handle {h.id} is not a {expected} of root {p.root_id}"
                )
        return p

    def require_local_interfaces(
        self, port: str, min_count: int, max_count: int
    ) -> tuple[ResourceHandle, ...]:
        check = "local-interfaces"
        spec = self.descriptor.input_port(port)
        if spec is None or spec.type != KERNEL_INTERFACE:
            raise self._fail(check, f"port {port!r} is not a declared {KERNEL_INTERFACE} input")
        lo, hi = max(min_count, spec.min), min(max_count, spec.max)
        handles = self.inputs.get(port, ())
        if not lo <= len(handles) <= hi:
            raise self._fail(check, f"port {port!r} has {len(handles)} handles, needs {lo}..{hi}")
        sandbox = self.require_sandbox()
        for h in handles:
            self._check_local(check, port, h, sandbox)
        return handles

    def _check_local(
        self, check: str, port: str, h: ResourceHandle, sandbox: SandboxHandle
    ) -> None:
        if h.type != KERNEL_INTERFACE:
            raise self._fail(check, f"port {port!r} handle {h.id} is a {h.type}")
        if h.attachment_id != self.envelope.scope:
            raise self._fail(check, f"handle {h.id} belongs to attachment {h.attachment_id!r}")
        try:
            netns: Any = h.description().get("netns")
        except ValueError as exc:
            raise self._fail(check, f"handle {h.id}: {exc}") from exc
        ns = sandbox.namespace
        if (
            not isinstance(netns, dict)
            or (netns.get("device"), netns.get("inode")) != (ns.device, ns.inode)
            or h.boot_id != ns.boot_id
        ):
            raise self._fail(
                check, f"handle {h.id} is not in sandbox {sandbox.sandbox_id}'s namespace"
            )

    def require_distinct_resources(self, handles: Sequence[ResourceHandle]) -> None:
        """Distinct by id and by physical identity, not just by user-visible name."""
        check = "distinct-resources"
        seen_ids: set[str] = set()
        seen_physical: dict[str, str] = {}
        for h in handles:
            if h.id in seen_ids:
                raise self._fail(check, f"handle {h.id} is given twice")
            seen_ids.add(h.id)
            try:
                physical = h.description().get("physical")
            except ValueError as exc:
                raise self._fail(check, f"handle {h.id}: {exc}") from exc
            if not isinstance(physical, str) or not physical:
                raise self._fail(check, f"handle {h.id} has no physical identity")
            if physical in seen_physical:
                raise self._fail(
                    check, f"handles {seen_physical[physical]} and {h.id} are the same {physical}"
                )
            seen_physical[physical] = h.id

    def interface_name(self, port: str) -> str:
        check = "interface-name"
        if port not in self.descriptor.interface_names:
            raise self._fail(check, f"output {port!r} takes no assigned name")
        name = self.interface_names.get(port)
        if name is None:
            raise self._fail(check, f"no name assigned for output {port!r}")
        problem = check_interface_name(name)
        if problem is not None:
            raise self._fail(check, problem)
        return name


@dataclass(frozen=True)
class RemoveCall(_CallBase):
    target_operation_id: str = ""


@dataclass(frozen=True)
class UnprepareCall(_CallBase):
    target_operation_id: str = ""
