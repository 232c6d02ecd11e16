"""Storage faults at every store call of the four hooks of a five-effect plan.

SQLite's own discipline, applied to our journal: fail the n-th storage call (a BEGIN,
a write statement, a COMMIT and its fsync, the check that clears a fault) with EIO,
ENOSPC or EROFS, for every n a lifecycle reaches, and keep the storage failing until
the test clears it. Each run proves:

* no kernel mutation without durable intent: before every mutating kernel call, an
  independent reader of the journal file sees its effect ``Applying`` (or ``Undoing``);
* while the fault lasts the service refuses with ``UNAVAILABLE`` (retry later, nothing
  acknowledged was lost) and the refused call changes nothing in the kernel;
* once it clears, retrying the same call and finishing the lifecycle gives the
  uncrashed run's responses, applies no mutation more often, and leaves the toy
  kernel exactly as it started.
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from harness.pytest_plugin import RigStats
from plugins.sdk import CleanupStatus, Unavailable
from plugins.sdk.runner import CrashPoints, Phase, PhaseKind
from plugins.sdk.store import SITES, JournalFault, storage_failure

from .node import ToyNode
from .test_crash_points import LIFECYCLE, assert_no_double_apply, run_lifecycle_step

CODES = (errno.EIO, errno.ENOSPC, errno.EROFS)


class Fault:
    """Fails the ``at``-th storage call and every one after it until ``clear()``."""

    def __init__(self, at: int | None, code: int = errno.EIO) -> None:
        self.at = at
        self.code = code
        self.calls = 0
        self.injected = 0
        self.cleared = False

    def check(self, site: str) -> None:
        assert site in SITES, f"the store asked about an undeclared site {site!r}"
        self.calls += 1
        if self.at is not None and not self.cleared and self.calls >= self.at:
            self.injected += 1
            raise storage_failure(self.code, site)

    def clear(self) -> None:
        self.cleared = True


class DurableIntent(CrashPoints):
    """Before each mutating kernel call, read the journal file as a crash would leave it."""

    def __init__(self) -> None:
        super().__init__()
        self.db: Path | None = None
        self.violations: list[str] = []

    def hit(self, phase: Phase | str) -> None:
        super().hit(phase)
        point = self.reached[-1]
        if point.phase.kind is not PhaseKind.BEFORE_KERNEL_CALL or self.db is None:
            return
        cleanup = point.hook in ("RemoveNetwork", "NodeUnprepare")
        # A cleanup's effect is <target-operation>:<effect>.
        split = point.effect.partition(":")
        op, effect_id = (split[0], split[2]) if cleanup else (point.operation, point.effect)
        expected = "Undoing" if cleanup else "Applying"
        state = self._committed_state(op, effect_id)
        if state != expected:
            self.violations.append(f"{self.reached[-1]}: journal says {state}, not {expected}")

    def _committed_state(self, operation_id: str, effect_id: str) -> str | None:
        assert self.db is not None
        conn = sqlite3.connect(f"{self.db.as_uri()}?mode=ro", uri=True)
        try:
            row = conn.execute(
                "SELECT state FROM effects WHERE operation_id = ? AND effect_id = ?",
                (operation_id, effect_id),
            ).fetchone()
        finally:
            conn.close()
        return None if row is None else str(row[0])


def node(root: Path, fault: Fault) -> tuple[ToyNode, DurableIntent]:
    intent = DurableIntent()
    toy = ToyNode(root, intent, faults=fault)
    intent.db = toy.state_dir / "journal.db"
    return toy, intent


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list[Any], Any, Any]:
    counting = Fault(None)
    toy, intent = node(tmp_path_factory.mktemp("io-reference"), counting)
    initial = toy.toy.observable()
    responses = [run_lifecycle_step(toy, step) for step in LIFECYCLE]
    mutations = toy.toy.mutations()
    toy.close()
    assert not intent.violations, intent.violations
    return counting.calls, responses, initial, mutations


def test_a_fault_at_every_storage_call(
    reference: tuple[int, list[Any], Any, Any], tmp_path: Path, rig_stats: RigStats
) -> None:
    calls, responses, initial, mutations = reference
    assert calls >= 40, "the lifecycle reaches fewer storage calls than a 5-effect plan makes"
    injected, violations = 0, []
    for at in range(1, calls + 1):
        fault = Fault(at, CODES[at % len(CODES)])
        toy, intent = node(tmp_path / f"fault-{at}", fault)
        label = f"fault {errno.errorcode[fault.code]} at storage call {at}"
        try:
            violations.extend(f"{label}: {v}" for v in _run(toy, fault, responses, initial))
            violations.extend(f"{label}: {v}" for v in intent.violations)
            assert_no_double_apply(toy, mutations, label)
        finally:
            toy.close()
        injected += fault.injected
    rig_stats.add("io_faults_injected", injected)
    rig_stats.add("io_fault_violations", len(violations))
    assert not violations, "\n".join(violations[:20])
    assert injected >= calls


def _run(toy: ToyNode, fault: Fault, responses: list[Any], initial: Any) -> list[str]:
    problems: list[str] = []
    for i, step in enumerate(LIFECYCLE):
        try:
            result = run_lifecycle_step(toy, step)
        except Unavailable as exc:
            if fault.cleared:
                return [f"{step}: refused after the fault cleared: {exc}"]
            if not isinstance(exc, JournalFault) or not exc.retryable:
                problems.append(f"{step}: {type(exc).__name__} is not a transient fault")
            before = toy.toy.observable()
            try:  # the fault lasts: the same call is refused again and changes nothing
                run_lifecycle_step(toy, step)
                problems.append(f"{step}: served while the storage was failing")
            except Unavailable:
                pass
            if toy.toy.observable() != before:
                problems.append(f"{step}: a refused call changed the kernel")
            fault.clear()
            result = run_lifecycle_step(toy, step)
        if step in ("prepare", "connect") and result != responses[i]:
            problems.append(f"{step}: response differs from the uncrashed run")
        if step in ("remove", "unprepare") and result.status is not CleanupStatus.CLEANED:
            problems.append(f"{step}: {result}")
    if not fault.injected:
        problems.append("the fault was never reached")
    if toy.toy.observable() != initial:
        problems.append("the toy kernel did not return to its initial state")
    return problems
