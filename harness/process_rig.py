"""SIGKILL runs: the same lifecycles against real service processes on the fake kernel
server (or another lab with a kernel URL, e.g. a ``labs.NetnsLab``), with a real service
killed by SIGKILL at an armed crash point."""

from __future__ import annotations

import math
import signal
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path

from labs import SANDBOX, FakeServerLab, Lab, Node, service_of
from plugins.coordinator import StepFailed
from plugins.sdk import CleanupStatus, SandboxHandle
from plugins.sdk.runner import CrashPoint

from .crash import RunResult, failure_evidence
from .crash_log import CrashLog
from .invariants import violations
from .scenarios import PHASES, Lifecycle, compiled


def sample(
    points_by_topology: dict[str, list[CrashPoint]], share: float = 0.10, minimum: int = 20
) -> list[tuple[str, CrashPoint]]:
    """Every k-th point of every topology, at least ``share`` of all and ``minimum`` in total."""
    total = sum(len(p) for p in points_by_topology.values())
    wanted = max(minimum, math.ceil(total * share))
    stride = max(1, total // wanted)
    flat = [(t, p) for t, points in points_by_topology.items() for p in points]
    chosen = flat[::stride]
    return chosen[: max(wanted, len(chosen))]


Run = tuple[int, str, CrashPoint]
"""One SIGKILL run: (its number, which names its identities claim-n/att-n; topology; point)."""


def shards(
    chosen: Sequence[tuple[str, CrashPoint]], count: int, first: int = 100
) -> list[list[Run]]:
    """``chosen`` (numbered from ``first`` in its order, so a run's identities do not depend
    on the split) in ``count`` cases of nearly equal size for parallel workers, each case's
    runs grouped by the service owning their point: a service then takes one start per run
    (``ProcessRig.runs`` arms its restart at its next point). Every run is in exactly one
    case; none is empty."""
    if not 0 < count <= len(chosen):
        raise ValueError(f"{len(chosen)} runs in {count} cases")
    numbered = [(n, t, p) for n, (t, p) in enumerate(chosen, start=first)]
    grouped = sorted(numbered, key=lambda run: (service_of_point(run[1], run[2]), run[0]))
    size, extra = divmod(len(grouped), count)
    cases, start = [], 0
    for k in range(count):
        end = start + size + (k < extra)
        cases.append(grouped[start:end])
        start = end
    return cases


def service_of_point(topology: str, point: CrashPoint) -> str:
    """Which service process owns a crash point: the plugin of the operation's step."""
    step = point.operation.split(":")[1]  # the coordinator's <scope>:<step>:<hook>:g<n>
    return service_of(compiled(topology).steps[step].plugin).name


def renamed(point: CrashPoint, n: int) -> CrashPoint:
    """The reference point under this run's claim and attachment ids."""
    return point.with_identities({"claim-1": f"claim-{n}", "att-1": f"att-{n}"})


class ProcessRig(Node):
    """A node of real service processes on the fake kernel server (or on ``lab``), reused
    by many runs with fresh identities."""

    def __init__(self, root: Path, lab: Lab | None = None) -> None:
        # Each run's pod is a namespace of its own (``pod-<n>``), deleted by the run's
        # invariants: a pod made again at a dead one's path may get its inode, which a
        # service still holding the dead one refuses (ESTALE: its netns cookie differs).
        self.pod = SANDBOX
        super().__init__(FakeServerLab() if lab is None else lab, root, processes=True, pod=None)
        self.baseline = self.snapshot()  # the node without a pod
        self.armed: dict[str, CrashPoint | None] = dict.fromkeys(self.processes.processes)
        """The point each service process was started armed at (None: started clean)."""

    def sandbox(self, name: str = SANDBOX) -> SandboxHandle:
        """The pod of the run in progress (``name``: another namespace's)."""
        return super().sandbox(self.pod if name == SANDBOX else name)

    def runs(self, plan: Sequence[Run]) -> Iterator[RunResult]:
        """``run`` for each (n, topology, point) of ``plan``, in order; each service's
        restart after its SIGKILL is armed at its next point in ``plan`` (its last one's
        is clean), so a run whose service is already armed starts it no more. Recovery is
        the same either way: the launcher runs the service's own main, and a point named
        for a later run's identities is not reached before that run."""
        for i, (n, topology, point) in enumerate(plan):
            service = service_of_point(topology, point)
            then = next(
                (renamed(p, m) for m, t, p in plan[i + 1 :] if service_of_point(t, p) == service),
                None,
            )
            yield self.run(topology, point, n, then=then)

    def run(
        self, topology: str, point: CrashPoint, n: int, *, then: CrashPoint | None = None
    ) -> RunResult:
        """SIGKILL the service owning ``point`` there (run ``n``'s identities), restart it
        (armed at ``then``, a later run's point: None, clean), finish the lifecycle, check
        the invariants."""
        armed = renamed(point, n)
        name = service_of_point(topology, point)
        service = self.processes.processes[name]
        if self.armed[name] != armed:
            service.kill()
            service.start(crash_at=armed)
            self.armed[name] = armed
            self.reconnect()
        self.pod = f"pod-{n}"
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
            service.kill()
        else:
            code = service.wait_exit()
            if code != -signal.SIGKILL:
                problems.append(f"{service.name} exited {code}, not by SIGKILL")
        service.start(crash_at=then)  # recovers from its journal before it reports ready
        self.armed[name] = then
        self.reconnect()
        start = 0 if crashed is None else crashed
        life.run(start)
        problems += violations(
            self.baseline, self.kernel, self.journal, dict(self.coordinator.clients), self.pod
        )
        crashes = 1 if crashed is not None else 0
        evidence = failure_evidence(problems, self.journal)
        return RunResult(point, "retry", crashes, PHASES[start], problems, evidence=evidence)


def sigkill_runs(
    rig: ProcessRig,
    topology: str,
    points: list[CrashPoint],
    log: CrashLog,
    reference: list[CrashPoint],
) -> list[str]:
    """A SIGKILL run at each of ``points`` on ``rig`` (fresh identities each, numbered from
    100), recorded in ``log`` (``reference``: the reference run's points, which order the
    crash matrix's rows); the failures (empty: all good)."""
    failures = []
    plan = [(n, topology, point) for n, point in enumerate(points, start=100)]
    results = rig.runs(plan)  # each run happens as it is asked for
    for point in points:
        order = reference.index(point)
        result = log.run(topology, "SIGKILL", "SIGKILL", order, partial(next, results))
        if not result.ok:
            failures.append(f"{result.point}: {result.violations}")
    return failures
