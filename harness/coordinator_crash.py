"""Crash the coordinator, not a plugin: at every boundary of its journal, then restart it.

The lab's coordinator is replaced by one with its own ``CrashPoints`` (the services keep
theirs, unarmed). For every ``Coordinator/...`` point a topology's lifecycle reaches: run
until the armed point crashes the coordinator, abandon it (its journal connection and
every in-memory object, including the caller's copy of the prepared states), start a new
one from its journal, then either retry the interrupted phase with the same identities
(``retry``: the results must equal an uncrashed run's) or abandon the attachment and
clean up (``cleanup``). The plugin services and the fake kernel keep running, as when
only the coordinator's process dies. Every run ends with the invariants checked.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from labs import Node
from plugins.sdk.runner import NO_CRASH, CrashPoint, CrashPoints, Owner, SimulatedCrash

from .crash import Reference, RunResult, failure_evidence
from .inprocess import in_process_node
from .invariants import violations
from .scenarios import PHASES, Lifecycle

COMPARED_PHASES = ("prepare", "connect")


def is_coordinator_boundary(point: CrashPoint) -> bool:
    return point.owner is Owner.COORDINATOR


def start_coordinator(lab: Node, crash: CrashPoints = NO_CRASH) -> None:
    """Replace the node's coordinator by a new one started from the journal on disk."""
    lab.restart_coordinator(crash)


def coordinator_reference(topology: str, root: Path | None = None) -> Reference:
    """An uncrashed lifecycle: the coordinator boundaries it reaches, in order, and results."""
    crash = CrashPoints()
    # The node's first coordinator has the crash plan: on a journal nothing has used yet,
    # a restart to arm it (a second open of the journal per run) starts the same.
    lab = in_process_node(
        root or Path(tempfile.mkdtemp(prefix="rig-coord-ref-")), coordinator_crash=crash
    )
    try:
        life = Lifecycle(topology, lab)
        life.run()
        return Reference(list(crash.reached), dict(life.results))
    finally:
        lab.close()


def _run_until_crash(life: Lifecycle) -> int | None:
    for index, phase in enumerate(PHASES):
        try:
            life.results[phase] = life.phase(phase)()
        except SimulatedCrash:
            return index
    return None


def _forget_all_but_the_journal(life: Lifecycle, start: int) -> None:
    """The caller after the restart keeps its identities and the scheduler's allocations;
    what the coordinator returned (the prepared states) is read back from its journal."""
    life.results.clear()
    if start > PHASES.index("prepare"):
        life.results["prepare"] = life.lab.coordinator.prepared_states(life.claim)


def coordinator_crash_run(
    topology: str, point: CrashPoint, path: str, root: Path, *, ref: Reference | None = None
) -> RunResult:
    """Crash the coordinator at ``point``, restart it, then retry or clean up; invariants."""
    lab = in_process_node(root, coordinator_crash=CrashPoints(armed=point))  # as the reference's
    before = lab.kernel.snapshot()
    try:
        life = Lifecycle(topology, lab)
        crashed = _run_until_crash(life)
        if crashed is None:
            return RunResult(point, path, 0, "-", [f"{point} was not reached"])
        start_coordinator(lab)
        start = crashed if path == "retry" else max(crashed, PHASES.index("remove"))
        _forget_all_but_the_journal(life, start)
        life.run(start)
        mismatch = ""
        if path == "retry" and ref is not None:
            differing = [
                phase
                for phase in COMPARED_PHASES
                if phase in life.results and life.results[phase] != ref.results[phase]
            ]
            if differing:
                mismatch = f"{differing} after the restart differ from the uncrashed run"
        found = violations(before, lab.kernel, lab.journal, dict(lab.coordinator.clients))
        evidence = failure_evidence(found, lab.journal)
        return RunResult(point, path, 1, PHASES[crashed], found, mismatch, evidence)
    finally:
        lab.close()
