"""SIGKILL runs: the same lifecycles against real service processes on the fake kernel
server (or another lab with a kernel URL, e.g. a ``labs.NetnsLab``), with a real service
killed by SIGKILL at an armed crash point."""

from __future__ import annotations

import math
import signal
from pathlib import Path

from labs import SANDBOX, FakeServerLab, Lab, Node, service_of
from plugins.coordinator import StepFailed
from plugins.sdk import CleanupStatus
from plugins.sdk.runner import CrashPoint

from .crash import Counters, RunResult
from .invariants import violations, without_namespace
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
    step = CrashPoint.parse(point).operation.split(":")[1]
    return service_of(compiled(topology).steps[step].plugin).name


def renamed(point: str, n: int) -> str:
    """The reference point's name under this run's claim and attachment ids."""
    return point.replace("claim-1.", f"claim-{n}.").replace("att-1:", f"att-{n}:")


class ProcessRig(Node):
    """A node of real service processes on the fake kernel server (or on ``lab``), reused
    by many runs with fresh identities."""

    def __init__(self, root: Path, lab: Lab | None = None) -> None:
        super().__init__(FakeServerLab() if lab is None else lab, root, processes=True)
        # Each run ends with the pod deleted (the invariants delete it) and the next run's
        # pod is a new namespace: the baseline is the node without one.
        self.baseline = without_namespace(self.snapshot(), SANDBOX)

    def run(self, topology: str, point: str, n: int) -> RunResult:
        armed = renamed(point, n)
        service = self.processes.processes[service_of_point(topology, point)]
        service.kill()
        service.start(crash_at=armed)
        self.reconnect()
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
        self.reconnect()
        start = 0 if crashed is None else crashed
        life.run(start)
        problems += violations(
            self.baseline, self.kernel, self.journal, dict(self.coordinator.clients)
        )
        return RunResult(point, "retry", 1 if crashed is not None else 0, PHASES[start], problems)


def sigkill_runs(rig: ProcessRig, topology: str, points: list[str], stats: Counters) -> list[str]:
    """A SIGKILL run at each of ``points`` on ``rig`` (fresh identities each, numbered from
    100), counted into ``stats``; the failures (empty: all good)."""
    failures = []
    for n, point in enumerate(points, start=100):
        result = rig.run(topology, point, n)
        stats.add("crash_runs_sigkill")
        stats.add("invariant_violations", len(result.violations))
        if not result.ok:
            failures.append(f"{point}: {result.violations}")
    return failures
