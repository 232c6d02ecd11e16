"""A crash at every listed crash point, then restart: retry completes identically, or
cleanup removes everything. The toy resource proves no leak and no double apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plugins.sdk import CleanupStatus, FailedPrecondition, OperationState
from plugins.sdk.runner import (
    RECOVERY_HOOK,
    UNSCOPED,
    Commit,
    CrashPoint,
    CrashPoints,
    Phase,
    PhaseKind,
    SimulatedCrash,
)

from . import node as n
from .node import ToyNode

LIFECYCLE = ("prepare", "connect", "remove", "unprepare")


def run_lifecycle(toy: ToyNode) -> list[Any]:
    return [run_lifecycle_step(toy, name) for name in LIFECYCLE]


Recorded = tuple[list[CrashPoint], list[Any], dict[str, Any], dict[str, int]]


def reference(tmp_path: Path) -> Recorded:
    """One uncrashed lifecycle: its crash points, responses, initial state, mutations."""
    toy = ToyNode(tmp_path / "reference")
    initial = toy.toy.observable()
    responses = run_lifecycle(toy)
    points = list(toy.crash_points.reached)
    mutations = toy.toy.mutations()
    toy.close()
    return points, responses, initial, mutations


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    return reference(tmp_path_factory.mktemp("reference"))


def test_the_run_reaches_every_kind_of_boundary(recorded: Recorded) -> None:
    points = recorded[0]
    commits = {(p.phase.boundary, p.phase.kind) for p in points if not p.phase.kind.is_kernel_call}
    # A first run commits no Applying of its own (that is a resumed attempt's record), and
    # the fence and each target's finish ride with the removal's other commits.
    assert {boundary for boundary, _ in commits} == {
        Commit.INTENT,  # with the first effect's before-image and Applying
        Commit.ADVANCE,
        Commit.RESPONSE,
        Commit.UNDOING,  # the first of a removal's with its fence
        Commit.CLEANUP,  # with the last target's finish
    }
    for boundary, _ in commits:
        assert (boundary, PhaseKind.BEFORE_COMMIT) in commits, boundary
        assert (boundary, PhaseKind.AFTER_COMMIT) in commits, boundary
    assert any(p.phase.kind is PhaseKind.BEFORE_KERNEL_CALL for p in points)
    assert len(points) == len(set(points)), "crash points must be unique within a run"
    assert len(points) >= 56  # 16 commits and 12 mutating kernel calls, two points each


def crash_at(tmp_path: Path, point: CrashPoint) -> tuple[ToyNode, int]:
    """Run the lifecycle until the armed point crashes it; return the restarted node."""
    toy = ToyNode(tmp_path, CrashPoints(armed=point))
    crashed_in = -1
    for i, name in enumerate(LIFECYCLE):
        try:
            run_lifecycle_step(toy, name)
        except SimulatedCrash:
            crashed_in = i
            break
    assert crashed_in >= 0, f"{point} was not reached"
    toy.crash()
    return toy, crashed_in


def run_lifecycle_step(toy: ToyNode, name: str) -> Any:
    return {
        "prepare": lambda: toy.endpoint.node_prepare(n.prepare()),
        "connect": lambda: toy.endpoint.connect_network(n.connect()),
        "remove": lambda: toy.endpoint.remove_network(n.remove()),
        "unprepare": lambda: toy.endpoint.node_unprepare(n.unprepare()),
    }[name]()


def assert_no_double_apply(toy: ToyNode, reference: dict[str, int], point: CrashPoint) -> None:
    """No kernel mutation happened more often than in the uncrashed run."""
    extra = {k: v for k, v in toy.toy.mutations().items() if v > reference.get(k, 0)}
    assert not extra, f"{point}: mutations beyond the uncrashed run: {extra}"


def test_crash_at_every_point_then_retry_completes_identically(
    recorded: Recorded, tmp_path: Path
) -> None:
    points, responses, initial, mutations = recorded
    for i, point in enumerate(points):
        toy, crashed_in = crash_at(tmp_path / f"retry-{i}", point)
        # Retry the interrupted call and the rest of the lifecycle with the same identities.
        for j in range(crashed_in, len(LIFECYCLE)):
            result = run_lifecycle_step(toy, LIFECYCLE[j])
            if LIFECYCLE[j] in ("prepare", "connect"):
                assert result == responses[j], f"{point}: replayed response differs"
            else:
                assert result.status is CleanupStatus.CLEANED, f"{point}: {result}"
        assert toy.toy.observable() == initial, point
        assert_no_double_apply(toy, mutations, point)
        toy.close()


def test_crash_at_every_point_then_cleanup_removes_everything(
    recorded: Recorded, tmp_path: Path
) -> None:
    points, _, initial, mutations = recorded
    for i, point in enumerate(points):
        toy, crashed_in = crash_at(tmp_path / f"cleanup-{i}", point)
        # Abandon the creation; clean up whatever the journal says was attempted.
        if crashed_in <= LIFECYCLE.index("remove"):
            assert toy.endpoint.remove_network(n.remove()).status is CleanupStatus.CLEANED, point
        assert toy.endpoint.node_unprepare(n.unprepare()).status is CleanupStatus.CLEANED, point
        assert toy.toy.observable() == initial, point
        assert_no_double_apply(toy, mutations, point)
        toy.close()


FAILURE_AT_CREATE_PEER = [
    CrashPoint("ConnectNetwork", "op-connect", "create-peer", Phase.commit(side, Commit.FAILURE))
    for side in (PhaseKind.BEFORE_COMMIT, PhaseKind.AFTER_COMMIT)
]


def connect_refused_at_create_peer(toy: ToyNode) -> None:
    """create-peer's target is someone else's: the connect fails after two applied effects."""
    toy.toy.create("data0-peer", "someone-else", 99)
    with pytest.raises(FailedPrecondition, match="not ours"):
        toy.endpoint.connect_network(n.connect())


def test_the_failure_commit_is_a_boundary_with_its_two_points(tmp_path: Path) -> None:
    toy = ToyNode(tmp_path)
    connect_refused_at_create_peer(toy)
    failure = [p for p in toy.crash_points.reached if p.phase.boundary == Commit.FAILURE]
    assert failure == FAILURE_AT_CREATE_PEER
    toy.close()


@pytest.mark.parametrize("point", FAILURE_AT_CREATE_PEER, ids=str)
def test_a_crash_at_the_failure_commit_then_retry_completes_identically(
    tmp_path: Path, point: CrashPoint
) -> None:
    reference = ToyNode(tmp_path / "reference")
    expected = reference.endpoint.connect_network(n.connect())
    reference.close()
    toy = ToyNode(tmp_path / "node", CrashPoints(armed=point))
    toy.toy.create("data0-peer", "someone-else", 99)
    with pytest.raises(SimulatedCrash):
        toy.endpoint.connect_network(n.connect())
    toy.crash()
    toy.toy.delete("data0-peer")
    assert toy.endpoint.connect_network(n.connect()) == expected, point
    assert toy.endpoint.remove_network(n.remove()).status is CleanupStatus.CLEANED
    assert toy.toy.observable() == {"objects": {}, "settings": {}}
    toy.close()


def test_recovery_is_one_boundary_however_many_records_it_writes(tmp_path: Path) -> None:
    created = Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, 1, "create")
    armed = CrashPoint("ConnectNetwork", "op-connect", "create-peer", created)
    toy = ToyNode(tmp_path, CrashPoints(armed=armed))
    with pytest.raises(SimulatedCrash):
        toy.endpoint.connect_network(n.connect())
    toy.crash()
    # create-peer's observation and op-connect's interruption, in one transaction.
    assert len(toy.notes) == 2, toy.notes
    assert toy.crash_points.reached == RECOVERY_POINTS
    toy.close()


RECOVERY_POINTS = [
    CrashPoint(RECOVERY_HOOK, UNSCOPED, UNSCOPED, Phase.commit(side, Commit.RECOVERY))
    for side in (PhaseKind.BEFORE_COMMIT, PhaseKind.AFTER_COMMIT)
]


@pytest.mark.parametrize("point", RECOVERY_POINTS, ids=str)
def test_a_crash_at_recovery_then_the_next_start_recovers_and_a_retry_completes(
    tmp_path: Path, point: CrashPoint
) -> None:
    reference = ToyNode(tmp_path / "reference")
    expected = reference.endpoint.connect_network(n.connect())
    reference.close()
    created = Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, 1, "create")
    armed = CrashPoint("ConnectNetwork", "op-connect", "create-peer", created)
    toy = ToyNode(tmp_path / "node", CrashPoints(armed=armed))
    with pytest.raises(SimulatedCrash):
        toy.endpoint.connect_network(n.connect())
    toy.runner.abandon()
    with pytest.raises(SimulatedCrash):
        toy.start(CrashPoints(armed=point))  # recovery crashes at its commit
    toy.crash()
    # Before its commit nothing of that recovery was written: this one recovers it all.
    interrupted = [note for note in toy.notes if "interrupted" in note]
    assert len(interrupted) == (point.phase.kind is PhaseKind.BEFORE_COMMIT), toy.notes
    assert toy.endpoint.inspect("op-connect", "").state is OperationState.FAILED
    assert toy.endpoint.connect_network(n.connect()) == expected
    assert toy.endpoint.remove_network(n.remove()).status is CleanupStatus.CLEANED
    assert toy.toy.observable() == {"objects": {}, "settings": {}}
    toy.close()
