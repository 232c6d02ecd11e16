"""The handler facade: describe plus the four hooks, each returning a local plan."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ._calls import ConnectCall, PrepareCall, RemoveCall, UnprepareCall
from ._descriptor import DescriptorRef
from ._errors import WrongStepKind
from ._plan import CleanupPlan, Plan
from ._types import Hook


@runtime_checkable
class Handler(Protocol):
    """A logical NetworkPlugin. Hooks plan; they never touch the kernel."""

    def describe(self) -> DescriptorRef: ...

    def node_prepare(self, call: PrepareCall) -> Plan: ...

    def connect_network(self, call: ConnectCall) -> Plan: ...

    def remove_network(self, call: RemoveCall) -> CleanupPlan: ...

    def node_unprepare(self, call: UnprepareCall) -> CleanupPlan: ...


def undo_connect(call: RemoveCall) -> CleanupPlan:
    """Undo the recorded ConnectNetwork plan of this scope, never one rebuilt from config."""
    return CleanupPlan(Hook.CONNECT_NETWORK, call.target_operation_id)


def undo_prepare(call: UnprepareCall) -> CleanupPlan:
    """Undo the recorded NodePrepare plan once attachment cleanup conditions pass."""
    return CleanupPlan(Hook.NODE_PREPARE, call.target_operation_id)


def wrong_step_kind(plugin: str, hook: Hook, kind: str) -> WrongStepKind:
    return WrongStepKind(f"{plugin}: {hook} is not a hook of an {kind}-only plugin")


class OperationOnly:
    """Base for Operation-only plugins: prepare/unprepare fail, never succeed as no-ops."""

    def describe(self) -> DescriptorRef:
        raise NotImplementedError

    def node_prepare(self, call: PrepareCall) -> Plan:
        raise wrong_step_kind(call.descriptor.name, Hook.NODE_PREPARE, "Operation")

    def node_unprepare(self, call: UnprepareCall) -> CleanupPlan:
        raise wrong_step_kind(call.descriptor.name, Hook.NODE_UNPREPARE, "Operation")

    def remove_network(self, call: RemoveCall) -> CleanupPlan:
        return undo_connect(call)


class AllocationRoot:
    """Base for Allocation roots: cleanup hooks undo the recorded plans."""

    def describe(self) -> DescriptorRef:
        raise NotImplementedError

    def remove_network(self, call: RemoveCall) -> CleanupPlan:
        return undo_connect(call)

    def node_unprepare(self, call: UnprepareCall) -> CleanupPlan:
        return undo_prepare(call)
