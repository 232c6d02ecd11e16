"""The crash enumerator: list the points a scenario reaches, then crash at each.

For every point: run the lifecycle until the armed point crashes the services,
restart them from their journals (the kernel keeps what happened), then either
retry the interrupted phase and finish (``retry``), or abandon the attachment and
clean up (``cleanup``). Compound runs crash a second time during the recovery or
during the undo that follows. Every run ends with the invariants checked.

Every lab here, the reference's included, starts from the random state of the rig's
seed (``harness.inprocess``): the same devices up, the same MTUs, MACs and VF settings,
so a retry's responses must equal the reference's, and the kernel must come back to
that state, not to the kernel's defaults.

The lab is the fake model by default; ``make_lab`` (a factory, called once per run) puts the
same runs on another tier's lab, e.g. a ``labs.NetnsLab`` on the running kernel, whose
kernel the invariants then read.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from labs import Lab, Node
from plugins.coordinator import CoordinatorJournal
from plugins.sdk import Hook
from plugins.sdk.runner import (
    RECOVERY_HOOK,
    Commit,
    CrashPoint,
    CrashPoints,
    Owner,
    PhaseKind,
    SimulatedCrash,
)

from .inprocess import in_process_node
from .invariants import violations
from .scenarios import PHASES, Lifecycle

if TYPE_CHECKING:
    from .crash_log import CrashLog

LabFactory = Callable[[], Lab]
CLEANUP_HOOKS = (Hook.REMOVE_NETWORK, Hook.NODE_UNPREPARE)
UNDO_COMMITS = (Commit.UNDOING, Commit.CLEANUP)
P = TypeVar("P")


def is_undo_boundary(point: CrashPoint) -> bool:
    """A commit of a service's removal: an effect's Undoing, or the removal's response."""
    return (
        point.owner is Owner.SERVICE
        and point.hook in CLEANUP_HOOKS
        and not point.phase.kind.is_kernel_call
        and point.phase.boundary in UNDO_COMMITS
    )


def is_recovery_boundary(point: CrashPoint) -> bool:
    return point.owner is Owner.SERVICE and point.hook == RECOVERY_HOOK


@dataclass
class Reference:
    points: list[CrashPoint]
    results: dict[str, Any]
    neutral: dict[str, Any] = field(default_factory=dict)  # results, lab identity removed


def lab_neutral(result: Any, before: Mapping[str, Any]) -> Any:
    """``result`` as plain data (dataclasses as their type's name and fields, JSON text
    as what it holds) with what differs between two labs of a real kernel made neutral:
    the namespaces' paths and inodes (by their order in ``before``), the MACs of links of
    ``before`` (by name), and a MAC the kernel chose for a link made during the run (a
    macvlan's address is random on Linux), so a retry compares with another lab's run."""
    paths = {ns["path"]: f"<ns{i}>" for i, ns in enumerate(before["namespaces"])}
    inodes = {ns["inode"]: f"<ns{i}>" for i, ns in enumerate(before["namespaces"])}
    macs = {lk["mac"]: f"<{lk['name']}>" for lk in before["links"] if lk["mac"]}

    def neutral(value: Any, key: str = "") -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return (
                type(value).__name__,
                {
                    f.name: neutral(getattr(value, f.name), f.name)
                    for f in dataclasses.fields(value)
                },
            )
        if isinstance(value, Mapping):
            return {k: neutral(v, str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [neutral(v) for v in value]
        if isinstance(value, str):
            if key.endswith("_json") and value:
                return neutral(json.loads(value))
            if key == "mac" and value:
                return macs.get(value, "<kernel-chosen>")
            return paths.get(value, value)
        if key == "inode" and isinstance(value, int):
            return inodes.get(value, value)
        return value

    return neutral(result)


@dataclass
class RunResult:
    point: CrashPoint
    path: str
    crashes: int
    crashed_phase: str
    violations: list[str] = field(default_factory=list)
    replay_mismatch: str = ""
    evidence: dict[str, str] = field(default_factory=dict)
    """A failed run's evidence for the report, by name (``failure_evidence``); none for a
    run that passed."""

    @property
    def ok(self) -> bool:
        return not self.violations and not self.replay_mismatch


KERNEL_DIFFERS = "kernel differs: "


def failure_evidence(found: list[str], journal: CoordinatorJournal) -> dict[str, str]:
    """What the report attaches to a run that broke an invariant (its step's message
    lists the violations): the kernel's differences from its first snapshot, and the
    coordinator journal's rows (every call with its state, every claim still held). Nothing for a run that passed, so a
    thousand good runs add no attachments. Read once the invariants were checked."""
    if not found:
        return {}
    kernel = [v.removeprefix(KERNEL_DIFFERS) for v in found if v.startswith(KERNEL_DIFFERS)]
    try:
        rows = [
            f"{c.operation_id}  {c.plugin}  {c.hook}  {c.state}"
            + (f"  error: {c.error}" if c.error else "")
            for c in journal.calls()
        ]
        rows += [f"claim {c.resource} held by {c.holder} ({c.mode})" for c in journal.claims()]
    except Exception as exc:  # a journal the run broke: say so instead of its rows
        rows = [f"the coordinator journal could not be read: {exc!r}"]
    return {
        "kernel diff": "\n".join(kernel) or "(the kernel equals its first snapshot)",
        "journal rows": "\n".join(rows) or "(no calls, no claims)",
    }


def node(root: Path, crash: CrashPoints | None = None, make_lab: LabFactory | None = None) -> Node:
    """In-process services on a new lab: ``make_lab()``, or the fake model (None)."""
    if make_lab is None:
        return in_process_node(root, crash=crash)
    return Node(make_lab(), root, crash=crash)


def reference(
    topology: str, root: Path | None = None, *, make_lab: LabFactory | None = None
) -> Reference:
    root = root or Path(tempfile.mkdtemp(prefix="rig-ref-"))
    lab = node(root, make_lab=make_lab)
    try:
        before = lab.kernel.snapshot()
        life = Lifecycle(topology, lab)
        life.run()
        neutral = {p: lab_neutral(r, before) for p, r in life.results.items()}
        return Reference(list(lab.crash_points.reached), dict(life.results), neutral)
    finally:
        lab.close()


def _run_until_crash(life: Lifecycle, start: int = 0) -> int | None:
    for index in range(start, len(PHASES)):
        try:
            life.results[PHASES[index]] = life.phase(PHASES[index])()
        except SimulatedCrash:
            return index
    return None


def _restart(lab: Node, crash: CrashPoints | None = None) -> bool:
    """Restart the services; True if a crash armed for recovery fired during it."""
    try:
        lab.crash_services(crash)
    except SimulatedCrash:
        return True
    return False


def crash_run(
    topology: str,
    point: CrashPoint,
    path: str,
    root: Path,
    *,
    second: Callable[[CrashPoint], bool] | None = None,
    ref: Reference | None = None,
    make_lab: LabFactory | None = None,
) -> RunResult:
    """One crash (two with ``second``) at ``point``, then retry or cleanup, then invariants
    (on a new lab from ``make_lab``; None: the fake model)."""
    lab = node(root, CrashPoints(armed=point), make_lab)
    before = lab.kernel.snapshot()
    try:
        life = Lifecycle(topology, lab)
        crashed = _run_until_crash(life)
        if crashed is None:
            return RunResult(point, path, 0, "-", [f"{point} was not reached"])
        crashes = 1
        start = crashed if path == "retry" else max(crashed, PHASES.index("remove"))
        if second is not None and second is is_recovery_boundary:
            if _restart(lab, CrashPoints(armed_when=second)):
                crashes += 1
            _restart(lab)
        elif second is not None:
            _restart(lab, CrashPoints(armed_when=second))
            again = _run_until_crash(life, start)
            if again is not None:
                crashes += 1
                start = again
            _restart(lab)
        else:
            _restart(lab)
        life.run(start)
        mismatch = ""
        if path == "retry" and ref is not None:
            for phase in ("prepare", "connect"):
                if phase not in life.results:
                    continue
                if make_lab is None:  # the fake model: the same lab state, equal results
                    differs = life.results[phase] != ref.results[phase]
                else:
                    differs = lab_neutral(life.results[phase], before) != ref.neutral[phase]
                if differs:
                    mismatch = f"{phase} result after the crash differs from the uncrashed run"
        found = violations(before, lab.kernel, lab.journal, dict(lab.coordinator.clients))
        evidence = failure_evidence(found, lab.journal)
        return RunResult(point, path, crashes, PHASES[crashed], found, mismatch, evidence)
    finally:
        lab.close()


# -- the crash suites every tier runs (tests/rig/test_*_crashes.py) ----------------------------


class Counters(Protocol):
    """Where the runs are counted (the rig's ``rig_stats``)."""

    def add(self, key: str, n: int = 1) -> None: ...


@dataclass
class CrashSuite:
    """The rig's crash runs of one topology on one tier, counted and reported through
    ``log`` (``harness.crash_log.CrashLog``) the same way on every tier. Each method
    returns the failures (empty: all good) and asserts nothing, so a tier chooses the
    points (all, or a seeded sample) and a test asserts.

    ``make_lab``: a new lab per run (None: the fake model in this process).
    """

    topology: str
    ref: Reference
    log: CrashLog
    make_lab: LabFactory | None = None
    second_crashes: int = 0

    def every_point(
        self,
        path: str,
        root: Path,
        points: list[CrashPoint] | None = None,
        *,
        part: tuple[int, int] = (0, 1),
    ) -> list[str]:
        """A crash at each of ``points`` (None: every point the reference reached), then
        ``path`` (retry or cleanup). ``part`` (k, n): only every n-th of them from the k-th,
        so n cases (on parallel workers) run them all; the first one counts the
        topology's points as enumerated."""
        k, n = part
        if not 0 <= k < n:
            raise ValueError(f"part {k} of {n}")
        chosen = (self.ref.points if points is None else points)[k::n]
        if path == "retry" and k == 0:
            self.log.add("crash_points_enumerated", len(self.ref.points))
        failures = []
        for i, point in enumerate(chosen):
            run = partial(
                crash_run,
                self.topology,
                point,
                path,
                root / f"{i}",
                ref=self.ref,
                make_lab=self.make_lab,
            )
            result = self.log.run(self.topology, "in-process", path, self._order(point), run)
            if not result.ok:
                failures.append(f"{point} [{path}]: {result.violations} {result.replay_mismatch}")
        return failures

    def _order(self, point: CrashPoint) -> int:
        return self.ref.points.index(point)

    def undo_points(self) -> list[CrashPoint]:
        return [p for p in self.ref.points if is_undo_boundary(p)]

    def interrupted_points(self) -> list[CrashPoint]:
        """Points after which recovery has work to do: inside an effect, after a commit."""
        return [
            p for p in self.ref.points if p.in_effect and p.phase.kind is PhaseKind.AFTER_COMMIT
        ]

    def compound(
        self, second: Callable[[CrashPoint], bool], points: list[CrashPoint], root: Path
    ) -> list[str]:
        """A crash at each of ``points``, then a second one wherever ``second`` says
        (``is_undo_boundary``: during the undo; ``is_recovery_boundary``: during recovery);
        ``second_crashes`` counts the runs where it fired."""
        failures = []
        self.second_crashes = 0
        column = "undo crash" if second is is_undo_boundary else "recovery crash"
        for i, point in enumerate(points):
            run = partial(
                crash_run,
                self.topology,
                point,
                "retry",
                root / f"{i}",
                second=second,
                make_lab=self.make_lab,
            )
            result = self.log.run(self.topology, "compound", column, self._order(point), run)
            self.second_crashes += result.crashes == 2
            if not result.ok:
                failures.append(f"{point}: {result.violations}")
        return failures


def every_kth(points: Sequence[P], wanted: int, offset: int = 0) -> list[P]:
    """``wanted`` of ``points`` (all if there are fewer), evenly spread: every k-th from
    the ``offset``-th (taken modulo k, so any seed's draw is valid)."""
    if wanted >= len(points):
        return list(points)
    if wanted <= 0:
        raise ValueError(f"a sample of {wanted} points")
    k = len(points) // wanted
    return list(points[offset % k :: k][:wanted])
