"""The fake lab in one process: the kernel model, the three services' runners and the
coordinator, so the rig can crash a service at any boundary thousands of times a run.

The coordinator talks to the runners through ``LocalClient``, which behaves like the
gRPC client (errors arrive as ``PluginCallError`` with the status code), so the code
under test is the same as over real sockets; ``SimulatedCrash`` passes straight through.

The node starts from a random state (every device's admin state, MTU, MAC and VF
settings, foreign links in the host and in the pod), the same for the same seed, so the
reference run and every crash run of a topology start alike, and a restore bug cannot
hide behind the kernel's defaults.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from fakekernel.lab import load_lab, plant_pod_interface, randomize_start_state
from fakekernel.model import FakeKernelModel
from plugins import bond, links, vf
from plugins.coordinator import Coordinator, CoordinatorJournal
from plugins.effects.linux import linux_effects
from plugins.kernel import CrashingKernel
from plugins.sdk import (
    CleanupRequest,
    CleanupResponse,
    ConnectRequest,
    ConnectResponse,
    EndpointInfo,
    InspectResponse,
    NamespaceHandle,
    NetworkPluginError,
    PrepareRequest,
    PrepareResponse,
    Registry,
    SandboxHandle,
)
from plugins.sdk.host import PluginCallError
from plugins.sdk.runner import CrashPoints, EndpointRunner, Runner
from plugins.sdk.store import JournalUnavailable, Store

from .scenarios import start_state_seed

REPO = Path(__file__).resolve().parent.parent
DEFAULT_LAB = REPO / "fakekernel" / "labs" / "default.yaml"
SERVICES: dict[str, Callable[[Registry], None]] = {
    "networkplugin-vf": vf.register,
    "networkplugin-bond": bond.register,
    "networkplugin-links": links.register,
}
T = TypeVar("T")
SANDBOX = "pod-a"
log = logging.getLogger(__name__)


class LocalClient:
    """The PluginClient surface over whichever runner currently serves a plugin."""

    def __init__(self, lab: InProcessLab, plugin: str) -> None:
        self._lab = lab
        self._plugin = plugin

    def _call(self, fn: Callable[[EndpointRunner], T]) -> T:
        try:
            return fn(self._lab.endpoints[self._plugin])
        except NetworkPluginError as exc:
            raise PluginCallError(exc.code.value, exc.message) from exc

    def get_info(self) -> EndpointInfo:
        return self._call(lambda e: e.info())

    def node_prepare(self, req: PrepareRequest) -> PrepareResponse:
        return self._call(lambda e: e.node_prepare(req))

    def connect_network(self, req: ConnectRequest) -> ConnectResponse:
        return self._call(lambda e: e.connect_network(req))

    def remove_network(self, req: CleanupRequest) -> CleanupResponse:
        return self._call(lambda e: e.remove_network(req))

    def node_unprepare(self, req: CleanupRequest) -> CleanupResponse:
        return self._call(lambda e: e.node_unprepare(req))

    def inspect(self, operation_id: str, scope: str) -> InspectResponse:
        return self._call(lambda e: e.inspect(operation_id, scope))

    def close(self) -> None:
        """Nothing to close: the runner belongs to the lab."""


class InProcessLab:
    def __init__(
        self,
        root: Path,
        lab: Path = DEFAULT_LAB,
        crash: CrashPoints | None = None,
        *,
        start_seed: int | None = None,
    ) -> None:
        """``start_seed``: the seed of the starting state (None: the rig's, RIG_SEED)."""
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.model: FakeKernelModel = load_lab(lab)
        self.start_seed = start_state_seed() if start_seed is None else start_seed
        randomize_start_state(self.model, self.start_seed)
        # The pod exists before anything of ours runs, with an interface of its own.
        self.sandbox(SANDBOX)
        log.info("lab %s starts from random state seed %d", lab.name, self.start_seed)
        self.stores: dict[str, Store] = {}
        self.endpoints: dict[str, EndpointRunner] = {}
        self.recovery_notes: list[str] = []
        self.start_services(crash)
        self.journal = CoordinatorJournal(root / "coordinator")
        clients: dict[str, Any] = {name: LocalClient(self, name) for name in self.endpoints}
        self.coordinator = Coordinator(self.journal, clients)

    def start_services(self, crash: CrashPoints | None = None) -> None:
        self.crash_points = crash or CrashPoints()
        kernel = CrashingKernel(self.model, self.crash_points)
        self.recovery_notes = []
        for service, register in SERVICES.items():
            registry = Registry()
            register(registry)
            try:
                store: Store | None = Store.open(self.root / service)
                reason = ""
            except JournalUnavailable as exc:
                store, reason = None, str(exc)
            runner = Runner(
                store,
                registry.seal(),
                linux_effects(kernel),
                artifact_digest=f"sha256:{service}",
                boot_id=self.model.boot_id(),
                crash=self.crash_points,
                unavailable_reason=reason,
            )
            if store is not None:
                self.stores[service] = store
            self.recovery_notes += runner.recover()
            for socket, endpoint in runner.endpoints():
                self.endpoints[socket.removesuffix(".sock")] = endpoint

    def crash_services(self, crash: CrashPoints | None = None) -> None:
        """Every service dies at once without a clean shutdown; the kernel keeps its state."""
        for store in self.stores.values():
            store.abandon()
        self.stores = {}
        self.start_services(crash)

    def sandbox(self, name: str = SANDBOX) -> SandboxHandle:
        ns = next((n for n in self.model.namespaces() if n.path.endswith(f"/{name}")), None)
        if ns is None:
            ns = self.model.add_namespace(name)
            plant_pod_interface(self.model, ns, self.start_seed)
        return SandboxHandle(name, NamespaceHandle(ns.path, ns.device, ns.inode, ns.boot_id))

    def close(self) -> None:
        for store in self.stores.values():
            store.close()
        self.journal.close()
