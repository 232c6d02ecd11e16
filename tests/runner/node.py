"""A toy node: store + runner + toy kernel, restartable like a real service."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from plugins.sdk import (
    AllocationBinding,
    CleanupRequest,
    ConnectRequest,
    Hook,
    NamespaceHandle,
    OperationEnvelope,
    OperationState,
    PrepareRequest,
    SandboxHandle,
    Sharing,
)
from plugins.sdk.runner import CrashPoints, EndpointRunner, Runner, SimulatedCrash
from plugins.sdk.store import NO_FAULTS, StorageFaults, Store

from .toy import ToyKernel, toy_effects, toy_registry

SANDBOX = SandboxHandle("pod-a", NamespaceHandle("/run/netns/pod-a", 4, 4026532000, "boot-1"))
ALLOCATION = AllocationBinding(
    "root-1", "dra.networking", "node-1", "toy0", "toy", Sharing.EXCLUSIVE
)
CONFIG = json.dumps({"value": 7, "mtu": 1500})


def envelope(
    hook: Hook, op: str, scope: str, generation: int = 1, epoch: int = 1
) -> OperationEnvelope:
    return OperationEnvelope(op, hook, scope, "step-1", generation, epoch, trace_id="t")


def prepare(op: str = "op-prepare", scope: str = "prep-1", config: str = CONFIG) -> PrepareRequest:
    return PrepareRequest(envelope(Hook.NODE_PREPARE, op, scope), ALLOCATION, config)


def connect(
    op: str = "op-connect", scope: str = "att-1", name: str = "data0", **over: Any
) -> ConnectRequest:
    fields: dict[str, Any] = {
        "envelope": envelope(Hook.CONNECT_NETWORK, op, scope),
        "sandbox": SANDBOX,
        "config_json": CONFIG,
        "interface_names": {"interface": name},
        "allocation": ALLOCATION,
    }
    fields.update(over)
    return ConnectRequest(**fields)


def remove(op: str = "op-remove", scope: str = "att-1", generation: int = 1) -> CleanupRequest:
    return CleanupRequest(envelope(Hook.REMOVE_NETWORK, op, scope, generation))


def unprepare(op: str = "op-unprepare", scope: str = "prep-1") -> CleanupRequest:
    return CleanupRequest(envelope(Hook.NODE_UNPREPARE, op, scope))


class ToyNode:
    """What a service process holds in memory; ``crash()`` abandons all of it.

    The runner's own fixture: one runner over the toy plugin's file-backed objects, no
    Linux kernel and no services table, so it is not a ``labs.Node`` (docs/test-kit.md).
    """

    def __init__(
        self,
        root: Path,
        crash: CrashPoints | None = None,
        faults: StorageFaults = NO_FAULTS,
        *,
        kernel_in_memory: bool = False,
    ) -> None:
        """``kernel_in_memory``: the toy kernel keeps its state in this process, not in
        ``toy_path`` (``ToyKernel``); it outlives ``crash()`` and ``restart()`` all the same."""
        self.root = root
        self.faults = faults
        self.kernel_in_memory = kernel_in_memory
        self._memory_kernel: ToyKernel | None = None
        root.mkdir(parents=True, exist_ok=True)
        self.state_dir = root / "state"
        self.toy_path = root / "toy.json"
        self.notes: list[str] = []
        self.start(crash)

    def start(self, crash: CrashPoints | None = None) -> None:
        self.crash_points = crash or CrashPoints()
        if not self.kernel_in_memory:
            self.toy = ToyKernel(self.toy_path, self.crash_points)
        else:
            self._memory_kernel = self._memory_kernel or ToyKernel(None)
            self._memory_kernel.crash = self.crash_points
            self.toy = self._memory_kernel
        self.runner = Runner.open(
            self.state_dir,
            toy_registry(),
            toy_effects(self.toy),
            artifact_digest="sha256:toy-artifact",
            boot_id="boot-1",
            crash=self.crash_points,
            faults=self.faults,
        )
        self.store: Store | None = self.runner.store
        self.notes = self.runner.recover()
        self.endpoint: EndpointRunner = self.runner.endpoint("toy.sock")

    def crash(self) -> None:
        """An in-process crash: drop every in-memory object without a clean shutdown."""
        self.runner.abandon()
        self.start()

    def restart(self) -> None:
        self.runner.close()
        self.start()

    def close(self) -> None:
        self.runner.close()

    def operations(self) -> int:
        assert self.store is not None
        return len(self.store.read(lambda r: r.operations("toy/v1alpha1")))


__all__ = [
    "Hook",
    "OperationState",
    "SimulatedCrash",
    "ToyNode",
    "connect",
    "prepare",
    "remove",
    "unprepare",
]
