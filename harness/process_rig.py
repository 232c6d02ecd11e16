"""SIGKILL runs: the same lifecycles against real service processes on the fake kernel
server, with a real service killed by SIGKILL at an armed crash point."""

from __future__ import annotations

import math
import signal
from pathlib import Path

from labs.fake import FakeLab
from plugins.coordinator import Coordinator, CoordinatorJournal, StepFailed
from plugins.sdk import CleanupStatus, SandboxHandle

from .crash import RunResult
from .invariants import violations
from .scenarios import PHASES, Lifecycle, compiled


def sample(
    points_by_topology: dict[str, list[str]], share: float = 0.10, minimum: int = 20
) -> list[tuple[str, str]]:
    """Every k-th point of every topology, at least ``share`` of all and ``minimum`` in total."""
    total = sum(len(p) for p in points_by_topology.values())
    wanted = max(minimum, math.ceil(total * share))
    stride = max(1, total // wanted)
    flat = [(t, p) for t, points in points_by_topology.items() for p in points]
    chosen = flat[::stride]
    return chosen[: max(wanted, len(chosen))]


def service_of_point(topology: str, point: str) -> str:
    """Which service process owns a crash point: the plugin of the operation's step."""
    operation = point.split("/")[1]
    step = operation.split(":")[1]
    plugin = compiled(topology).steps[step].plugin
    return {"sriov": "networkplugin-vf", "bond": "networkplugin-bond"}.get(
        plugin, "networkplugin-links"
    )


def renamed(point: str, n: int) -> str:
    """The reference point's name under this run's claim and attachment ids."""
    return point.replace("claim-1.", f"claim-{n}.").replace("att-1:", f"att-{n}:")


class ProcessRig:
    """One fake lab of real processes, reused by many runs with fresh identities."""

    def __init__(self, root: Path) -> None:
        self.lab = FakeLab(root / "lab")
        self.lab.start()
        self.journal = CoordinatorJournal(root / "coordinator")
        self.coordinator = Coordinator(self.journal, self.lab.clients())
        self._sandbox: SandboxHandle | None = None
        assert self.lab.kernel is not None
        self.baseline = self.lab.kernel.snapshot()

    def sandbox(self, name: str = "pod-a") -> SandboxHandle:
        if self._sandbox is None:
            self._sandbox = self.lab.sandbox(name)
        return self._sandbox

    def run(self, topology: str, point: str, n: int) -> RunResult:
        armed = renamed(point, n)
        service = self.lab.services[service_of_point(topology, point)]
        service.kill()
        service.start(crash_at=armed)
        self._reconnect()
        life = Lifecycle(topology, self, claim=f"claim-{n}", attachment=f"att-{n}")
        crashed = None
        for index, phase in enumerate(PHASES):
            try:
                result = life.phase(phase)()
            except StepFailed:
                crashed = index  # the service died under the call; the coordinator journaled it
                break
            life.results[phase] = result
            if phase in ("remove", "unprepare") and any(
                r.status is CleanupStatus.PENDING for r in result.values()
            ):
                crashed = index  # no receipt: the service died under the cleanup
                break
        problems: list[str] = []
        if crashed is None:
            problems.append(f"{armed} was not reached")
        else:
            code = service.wait_exit()
            if code != -signal.SIGKILL:
                problems.append(f"{service.name} exited {code}, not by SIGKILL")
        service.start()  # recovers from its journal before it reports ready
        self._reconnect()
        start = 0 if crashed is None else crashed
        life.run(start)
        assert self.lab.kernel is not None
        self._sandbox = None
        problems += violations(
            self.baseline, self.lab.kernel, self.journal, dict(self.coordinator.clients)
        )
        return RunResult(point, "retry", 1 if crashed is not None else 0, PHASES[start], problems)

    def _reconnect(self) -> None:
        """Fresh channels to the restarted service (like a coordinator noticing the restart)."""
        for client in self.coordinator.clients.values():
            client.close()
        self.coordinator.clients.update(self.lab.clients())

    def close(self) -> None:
        for client in self.coordinator.clients.values():
            client.close()
        self.journal.close()
        self.lab.close()
