"""SIGKILL of the coordinator program mid-apply: the same lifecycles, with the coordinator a
real process (``networkplugin-coordinator``) over real service processes.

A run arms one ``Coordinator/NodePrepare/...`` or ``Coordinator/ConnectNetwork/...``
boundary (from ``harness.coordinator_crash.coordinator_reference``) in a fresh coordinator
process, asks it over its socket to apply the topology, and the process SIGKILLs itself
there. The plugin services and the kernel keep running. The coordinator is started again:
before it reports ready it finishes the interrupted apply, or undoes it if it cannot, so
its status must show the attachment ``applied`` or ``removed``; the run then removes it
over the socket, stops the coordinator (SIGTERM) and checks the invariants of
``harness.invariants`` against its journal. The in-process crash enumeration at every
journal boundary (``harness.coordinator_crash``) stays the exhaustive one; this proves a
real process death hides nothing from it.
"""

from __future__ import annotations

import signal
from functools import partial
from pathlib import Path

from labs import SANDBOX, CoordinatorProcess, FakeServerLab, Lab, Node
from plugins.coordinator import CoordinatorCallError, CoordinatorJournal
from plugins.sdk.runner import CrashPoint, Owner

from .crash import RunResult, failure_evidence
from .crash_log import CrashLog
from .invariants import violations, without_namespace
from .scenarios import TOPOLOGIES, TOPOLOGY_DIR, compiled

APPLY_HOOKS = ("NodePrepare", "ConnectNetwork")


def is_apply_boundary(point: CrashPoint) -> bool:
    """A coordinator boundary an apply reaches (prepare or connect)."""
    return point.owner is Owner.COORDINATOR and point.hook in APPLY_HOOKS


def renamed(point: CrashPoint, n: int) -> CrashPoint:
    """A reference point (claim-1, att-1) under run ``n``'s identities (claim-n, att-n)."""
    return point.with_identities({"claim-1": f"claim-{n}", "att-1": f"att-{n}"})


class CoordinatorRig(Node):
    """Real service processes on the fake kernel server (or on ``lab``) and the coordinator
    program over them, reused by many runs with fresh identities."""

    def __init__(self, root: Path, lab: Lab | None = None) -> None:
        self._program: CoordinatorProcess | None = None  # close() may run before it exists
        super().__init__(
            FakeServerLab() if lab is None else lab, root, processes=True, coordinator=False
        )
        # Each run ends with the pod deleted (the invariants delete it): the baseline is
        # the node without one.
        self.baseline = without_namespace(self.snapshot(), SANDBOX)
        self._program = CoordinatorProcess(
            root / "networkplugin-coordinator",
            self.processes,
            topologies=[TOPOLOGY_DIR / f"{t}.yaml" for t in TOPOLOGIES],
            inventory=TOPOLOGY_DIR / "inventory.yaml",
            policies=TOPOLOGY_DIR / "policies.yaml",
        )

    @property
    def program(self) -> CoordinatorProcess:
        """The coordinator program (stopped until a run or a test starts it)."""
        assert self._program is not None
        return self._program

    def run(self, topology: str, point: CrashPoint, n: int) -> RunResult:
        armed = renamed(point, n)
        attachment, claim = f"att-{n}", f"claim-{n}"
        name = compiled(topology).topology.name
        problems: list[str] = []
        self.program.start(crash_at=armed)
        with self.program.coordinator_client() as client:
            try:
                client.apply(attachment, claim, name, self.sandbox())
            except CoordinatorCallError:
                pass  # the process died under the call
            else:
                problems.append(f"{armed} was not reached")
        code = self.program.wait_exit()
        if code != -signal.SIGKILL:
            problems.append(f"the coordinator exited {code}, not by SIGKILL")
        self.program.start()  # finishes (or undoes) the interrupted apply before it is ready
        with self.program.coordinator_client() as client:
            states = {a.attachment: a.state for a in client.status().applications}
            if states.get(attachment) not in ("applied", "removed"):
                problems.append(f"after recovery {attachment} is {states.get(attachment)}")
            removed = client.remove(attachment)
            if removed.state != "removed":
                problems.append(f"{attachment} could not be removed: {removed.receipts}")
        code = self.program.stop()
        if code != 0:
            problems.append(f"the coordinator exited {code} on SIGTERM")
        journal = CoordinatorJournal(self.program.state_dir)  # the program is stopped
        clients = self.clients()
        try:
            problems += violations(self.baseline, self.kernel, journal, clients)
            evidence = failure_evidence(problems, journal)
        finally:
            journal.close()
            for c in clients.values():
                c.close()
        phase = "prepare" if point.hook == "NodePrepare" else "connect"
        return RunResult(point, "recover", 1, phase, problems, evidence=evidence)

    def close(self) -> None:
        if self._program is not None:
            self._program.kill()
        super().close()


def coordinator_kill_runs(
    rig: CoordinatorRig,
    topology: str,
    points: list[CrashPoint],
    log: CrashLog,
    reference: list[CrashPoint],
) -> list[str]:
    """A coordinator SIGKILL run at each of ``points`` (fresh identities each, numbered from
    200), recorded in ``log`` (``reference``: the coordinator reference run's points, which
    order the crash matrix's rows); the failures (empty: all good)."""
    failures = []
    for n, point in enumerate(points, start=200):
        order = reference.index(point)
        result = log.run(
            topology, "SIGKILL", "SIGKILL", order, partial(rig.run, topology, point, n)
        )
        if not result.ok:
            failures.append(f"{topology} {point}: {result.violations}")
    return failures
