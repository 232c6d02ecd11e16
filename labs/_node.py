"""A node: a lab's kernel, the services on it, and (optionally) the coordinator driving them.

Built from three things, the same way on every tier: the ``Lab`` (where the kernel is),
the services (in this process, to crash them at any boundary; or as their real programs,
to SIGKILL them), and the crash plan (``CrashPoints`` for in-process services; an armed
point name for a process). Everything else in the repository that needs "a kernel, some
services, a node" builds one of these.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from fakekernel import LabKernel
from plugins.coordinator import Coordinator, CoordinatorJournal
from plugins.sdk import SandboxHandle
from plugins.sdk.runner import NO_CRASH, CrashPoints, EndpointRunner

from ._lab import SANDBOX, Lab
from ._services import PROJECT_SERVICES, InProcessServices, ProcessServices, ServiceSpec


class Node:
    """``lab`` + services + crash plan (+ a coordinator with its journal).

    ``processes=False``: the services' runners live in this process (``endpoints``,
    ``stores``, ``crash_services()`` abandons them); ``processes=True``: they are real
    processes on the lab's ``kernel_url`` (``processes``, ``crash_services()`` SIGKILLs).
    The pod's namespace (``SANDBOX``, by default) exists before any service starts.
    """

    def __init__(
        self,
        lab: Lab,
        root: Path,
        *,
        services: Sequence[ServiceSpec] = PROJECT_SERVICES,
        processes: bool = False,
        crash: CrashPoints | None = None,
        coordinator: bool = True,
        observer: Any = None,
        pod: str | None = SANDBOX,
        coordinator_crash: CrashPoints = NO_CRASH,
    ) -> None:
        """``pod``: the pod namespace that exists before any service starts (None: none).
        ``coordinator_crash``: the coordinator's own crash plan (``NO_CRASH``: none), as
        ``restart_coordinator(crash)`` would give it, without opening its journal twice."""
        self.lab = lab
        self.root = root
        self._socket_dir: Path | None = None
        self.in_process: InProcessServices | None = None
        self.out_of_process: ProcessServices | None = None
        self._journal: CoordinatorJournal | None = None
        self._coordinator: Coordinator | None = None
        self._observer = observer
        try:
            root.mkdir(parents=True, exist_ok=True)
            if pod is not None:
                self.sandbox(pod)
            if processes:
                # Unix socket paths are short (107 bytes): sockets live in a short /tmp dir.
                self._socket_dir = Path(tempfile.mkdtemp(prefix="node-", dir="/tmp"))
                self.out_of_process = lab.process_services(root, services, self._socket_dir)
                self.out_of_process.start()
            else:
                self.in_process = InProcessServices(lab, root, services)
                self.in_process.start(crash)
            if coordinator:
                self._journal = CoordinatorJournal(root / "coordinator")
                self._coordinator = Coordinator(
                    self._journal, self.clients(), crash=coordinator_crash, observer=observer
                )
        except BaseException:
            # A node that did not come up leaves nothing running: processes, lab, sockets.
            self.close()
            raise

    def __enter__(self) -> Node:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the kernel --------------------------------------------------------------------------

    @property
    def kernel(self) -> LabKernel:
        return self.lab.kernel

    def snapshot(self) -> dict[str, Any]:
        return self.lab.snapshot()

    def sandbox(self, name: str = SANDBOX) -> SandboxHandle:
        return self.lab.sandbox(name)

    # -- the services ------------------------------------------------------------------------

    @property
    def services(self) -> InProcessServices:
        """The in-process services (their runners, stores and crash points)."""
        assert self.in_process is not None, "this node runs its services as processes"
        return self.in_process

    @property
    def processes(self) -> ProcessServices:
        assert self.out_of_process is not None, "this node runs its services in-process"
        return self.out_of_process

    @property
    def endpoints(self) -> dict[str, EndpointRunner]:
        return self.services.endpoints

    @property
    def crash_points(self) -> CrashPoints:
        return self.services.crash_points

    def clients(self) -> dict[str, Any]:
        """One client per logical plugin (in-process or over the real socket)."""
        if self.in_process is not None:
            return dict(self.in_process.clients())
        return dict(self.processes.clients())

    def crash_services(self, crash: CrashPoints | None = None) -> None:
        """Every service dies without a clean shutdown and starts again from its journal
        (in-process: with ``crash`` as its new crash plan)."""
        if self.in_process is not None:
            self.in_process.crash(crash)
        else:
            self.processes.crash()
            self.reconnect()

    def reconnect(self) -> None:
        """Fresh channels to restarted service processes (a coordinator noticing a restart)."""
        if self._coordinator is None:
            return
        for client in self._coordinator.clients.values():
            client.close()
        self._coordinator.clients.update(self.clients())

    # -- the coordinator ---------------------------------------------------------------------

    @property
    def coordinator(self) -> Coordinator:
        assert self._coordinator is not None, "this node has no coordinator"
        return self._coordinator

    @property
    def journal(self) -> CoordinatorJournal:
        """The coordinator's journal."""
        assert self._journal is not None, "this node has no coordinator"
        return self._journal

    def restart_coordinator(self, crash: CrashPoints = NO_CRASH) -> None:
        """Replace the coordinator by a new one started from its journal on disk.

        The old one is abandoned as a crash would leave it: no clean shutdown, and
        nothing it held in memory (clients, locks, results) is handed to the new one.
        """
        assert self._journal is not None, "this node has no coordinator"
        state_dir = self._journal.state_dir
        self._journal.abandon()
        self._journal = CoordinatorJournal(state_dir)
        self._coordinator = Coordinator(
            self._journal, self.clients(), crash=crash, observer=self._observer
        )

    def close(self) -> None:
        if self._coordinator is not None:
            for client in self._coordinator.clients.values():
                client.close()
        if self._journal is not None:
            self._journal.close()
        if self.in_process is not None:
            self.in_process.close()
        if self.out_of_process is not None:
            self.out_of_process.close()
        self.lab.close()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
