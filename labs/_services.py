"""Which services a node runs, and how the kit hosts them: in this process or as processes.

``InProcessServices`` holds each service's runner in the test process: ``crash()``
abandons every in-memory object without a clean shutdown (the kernel keeps what
happened), which the rig does thousands of times a run. ``ProcessServices`` runs the
real service programs against the lab's ``kernel_url``: ``crash()`` is a SIGKILL.
``CoordinatorProcess`` runs the coordinator program over a ``ProcessServices``' sockets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import yaml

from plugins.coordinator import CoordinatorCallError, CoordinatorClient
from plugins.effects.linux import linux_effects
from plugins.kernel import CrashingKernel, Kernel
from plugins.sdk import (
    CleanupRequest,
    CleanupResponse,
    ConnectRequest,
    ConnectResponse,
    EndpointInfo,
    InspectResponse,
    NetworkPluginError,
    PrepareRequest,
    PrepareResponse,
    Registration,
    Registry,
)
from plugins.sdk.host import PluginCallError, PluginClient
from plugins.sdk.runner import CrashPoint, CrashPoints, EffectRegistry, EndpointRunner, Runner
from plugins.sdk.store import Store
from plugins.services import SERVICES

from ._lab import Lab
from ._process import ServiceProcess

T = TypeVar("T")


@dataclass(frozen=True)
class ServiceSpec:
    """One service: its registrations, its executors over a kernel, how to run it."""

    name: str
    registry: Callable[[], Registry]
    effects: Callable[[Kernel], EffectRegistry] = linux_effects
    command: tuple[str, ...] = ()  # ``python -m`` arguments; () for in-process only
    sockets: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.sockets:
            names = tuple(ep.socket_name for ep in self.registry().endpoints)
            object.__setattr__(self, "sockets", names)

    @property
    def plugins(self) -> tuple[str, ...]:
        """The logical plugins this service serves (one per socket)."""
        return tuple(s.removesuffix(".sock") for s in self.sockets)

    @property
    def artifact_digest(self) -> str:
        return f"sha256:{self.name}"


# The project's three services, from the product's one table (plugins.services.SERVICES).
PROJECT_SERVICES: tuple[ServiceSpec, ...] = tuple(
    ServiceSpec(name, partial(Registry.of, register), command=("plugins.services", name))
    for name, register in SERVICES.items()
)


def project_descriptors(
    services: Sequence[ServiceSpec] = PROJECT_SERVICES,
) -> dict[str, Registration]:
    """Every logical plugin's sealed registration, by plugin name (what a topology names)."""
    return {r.name: r for spec in services for r in spec.registry().seal()}


def service_of(plugin: str, services: Sequence[ServiceSpec] = PROJECT_SERVICES) -> ServiceSpec:
    """The service that serves a logical plugin (``sriov`` -> networkplugin-vf)."""
    for spec in services:
        if plugin in spec.plugins:
            return spec
    raise KeyError(f"no service serves plugin {plugin!r}")


class LocalClient:
    """The PluginClient surface over whichever runner currently serves a plugin.

    Errors arrive as ``PluginCallError`` with the status code, like over gRPC, so the
    coordinator's code is the same as over real sockets; ``SimulatedCrash`` passes
    straight through.
    """

    def __init__(self, endpoints: Mapping[str, EndpointRunner], plugin: str) -> None:
        self._endpoints = endpoints
        self._plugin = plugin

    def _call(self, fn: Callable[[EndpointRunner], T]) -> T:
        try:
            return fn(self._endpoints[self._plugin])
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
        """Nothing to close: the runner belongs to the node."""


class InProcessServices:
    """Every service's runner in this process, over the lab's kernel through crash points."""

    def __init__(self, lab: Lab, root: Path, specs: Sequence[ServiceSpec]) -> None:
        self.lab = lab
        self.root = root
        self.specs = tuple(specs)
        self.runners: dict[str, Runner] = {}
        self.endpoints: dict[str, EndpointRunner] = {}
        self.recovery_notes: list[str] = []
        self.crash_points = CrashPoints()

    @property
    def stores(self) -> dict[str, Store]:
        """Each running service's journal (a service whose journal is unusable has none)."""
        return {name: r.store for name, r in self.runners.items() if r.store is not None}

    def start(self, crash: CrashPoints | None = None) -> None:
        """Start every service from its journal (recovery runs before this returns)."""
        self.crash_points = crash or CrashPoints()
        kernel = CrashingKernel(self.lab.kernel, self.crash_points)
        self.recovery_notes = []
        for spec in self.specs:
            runner = Runner.open(
                self.state_dir(spec.name),
                spec.registry(),
                spec.effects(kernel),
                artifact_digest=spec.artifact_digest,
                boot_id=self.lab.boot_id(),
                crash=self.crash_points,
            )
            self.runners[spec.name] = runner
            self.recovery_notes += runner.recover()
            for socket, endpoint in runner.endpoints():
                self.endpoints[socket.removesuffix(".sock")] = endpoint

    def crash(self, crash: CrashPoints | None = None) -> None:
        """Every service dies at once without a clean shutdown, then starts again."""
        for runner in self.runners.values():
            runner.abandon()
        self.runners = {}
        self.start(crash)

    def clients(self) -> dict[str, LocalClient]:
        return {plugin: LocalClient(self.endpoints, plugin) for plugin in self.endpoints}

    def state_dir(self, service: str) -> Path:
        return self.root / service

    def close(self) -> None:
        for runner in self.runners.values():
            runner.close()
        self.runners = {}


class ProcessServices:
    """Every service as its real program, reaching the lab's kernel over ``kernel_url``."""

    def __init__(
        self, lab: Lab, root: Path, specs: Sequence[ServiceSpec], socket_dir: Path
    ) -> None:
        url = lab.kernel_url
        if url is None:
            raise ValueError(f"a {type(lab).__name__} has no kernel URL for service processes")
        self.specs = tuple(specs)
        self.socket_dir = socket_dir
        self.processes: dict[str, ServiceProcess] = {
            spec.name: ServiceProcess(
                spec.name,
                spec.command,
                root / spec.name,
                socket_dir / f"{spec.name}.sock.d",
                url,
                spec.sockets,
            )
            for spec in self.specs
        }

    def start(self) -> None:
        """Start every service at once, as systemd starts a node's units, and wait until
        each is ready: one after another, a node took the sum of the three start-ups
        (about 1.5 s of a test's setup) with a core idle. The first failure is raised
        once all have settled; the caller kills whatever did start."""
        if len(self.processes) < 2:
            for process in self.processes.values():
                process.start()
            return
        with ThreadPoolExecutor(len(self.processes), thread_name_prefix="start") as pool:
            starts = [pool.submit(process.start) for process in self.processes.values()]
        for started in starts:
            started.result()

    def of(self, plugin: str) -> ServiceProcess:
        """The process serving a logical plugin."""
        return self.processes[service_of(plugin, self.specs).name]

    def crash(self, crash_at: CrashPoint | None = None, *, service: str | None = None) -> None:
        """SIGKILL one service (or all), then start it again (armed at ``crash_at``)."""
        for name, process in self.processes.items():
            if service is None or name == service:
                process.kill()
                process.start(crash_at=crash_at)

    def clients(self) -> dict[str, PluginClient]:
        """One authenticated client per logical plugin, by plugin name."""
        return {
            sock.removesuffix(".sock"): process.client(sock)
            for process in self.processes.values()
            for sock in process.sockets
        }

    def close(self) -> None:
        for process in self.processes.values():
            process.kill()


class CoordinatorProcess(ServiceProcess):
    """``networkplugin-coordinator`` over the sockets of ``services``, with a journal and a
    token of its own under ``root``; started, SIGKILLed (``kill``, or ``start(crash_at=``
    a ``Coordinator/...`` point``)``) and restarted like a plugin service.

    ``topologies``, ``inventory`` and ``policies`` are the files its config lists. Ready
    means its status says so (recovery finished), asked over its own socket.
    """

    # Its metrics (docs/observability.md) are not the rig's: the rig's summary adds up
    # the services' hook histograms (harness.scraped_metrics).
    publishes_metrics = False

    def __init__(
        self,
        root: Path,
        services: ProcessServices,
        *,
        topologies: Sequence[Path],
        inventory: Path,
        policies: Path | None = None,
        kubernetes: Mapping[str, Any] | None = None,
    ) -> None:
        """``kubernetes``: the config's ``kubernetes`` section (None: not a Kubernetes
        node)."""
        socket_dir = services.socket_dir / "coordinator.sock.d"
        super().__init__(
            "networkplugin-coordinator", ("plugins.coordinator",), root, socket_dir, "", ()
        )
        (root / "service.yaml").unlink()  # the plugin services' config; this one has its own
        self.socket = socket_dir / "coordinator.sock"
        plugins = {
            sock.removesuffix(".sock"): {
                "socket": str(process.socket_dir / sock),
                "tokenFile": str(process.root / "token"),
            }
            for process in services.processes.values()
            for sock in process.sockets
        }
        self.config = root / "coordinator.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "stateDir": str(root / "state"),
                    "socket": str(self.socket),
                    "tokenFile": str(root / "token"),
                    "topologies": [str(t) for t in topologies],
                    "inventory": str(inventory),
                    "policies": None if policies is None else str(policies),
                    "plugins": plugins,
                    "shutdownGraceSeconds": 5,
                    # The rig's fake tier keeps journals on /dev/shm (harness.rig.scratch_root),
                    # which a deployment's coordinator refuses.
                    "allowVolatileStateDir": True,
                    **({} if kubernetes is None else {"kubernetes": dict(kubernetes)}),
                }
            )
        )

    @property
    def state_dir(self) -> Path:
        """The coordinator journal's directory (open it only while the process is stopped)."""
        return self.root / "state"

    def coordinator_client(self, timeout: float = 120) -> CoordinatorClient:
        return CoordinatorClient(self.socket, self.token, timeout=timeout)

    def start(
        self,
        crash_at: CrashPoint | None = None,
        trace: Path | None = None,
        timeout: float = 30,
        *,
        wait_ready: bool = True,
    ) -> None:
        """Start the program; wait until its status reports ready (or until it answers)."""
        super().start(crash_at, trace, timeout, wait_ready=wait_ready)  # no plugin sockets
        with self.coordinator_client() as client:
            try:
                if wait_ready:
                    client.wait_ready(timeout)
                else:
                    client.wait_answering(timeout)
            except CoordinatorCallError as exc:
                raise RuntimeError(f"{self.name} did not become ready: see {self.log}") from exc
