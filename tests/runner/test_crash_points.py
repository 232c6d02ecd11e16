"""A crash at every listed crash point, then restart: retry completes identically, or
cleanup removes everything. The toy resource proves no leak and no double apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plugins.sdk import CleanupStatus
from plugins.sdk.runner import CrashPoints, SimulatedCrash

from . import node as n
from .node import ToyNode

LIFECYCLE = ("prepare", "connect", "remove", "unprepare")


def run_lifecycle(toy: ToyNode) -> list[Any]:
    return [run_lifecycle_step(toy, name) for name in LIFECYCLE]


Recorded = tuple[list[str], list[Any], dict[str, Any], dict[str, int]]


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
    phases = {p.rsplit("/", 1)[1] for p in points}
    for phase in (
        "intent",  # with the first effect's before-image and Applying
        "advance",
        "response",
        "undoing",  # the first of a removal's with its fence
        "cleanup",  # with the last target's finish
    ):
        assert {f"{phase}.before-commit", f"{phase}.after-commit"} <= phases, phase
    # The fence and each target's finish ride with the removal's other commits.
    assert not any(p.rsplit("/", 1)[1].startswith(("fence.", "target:")) for p in points)
    # A first run commits no Applying of its own: that is a resumed attempt's record.
    assert not any("/applying." in p for p in points)
    assert any(".before" in p and "kernel#" in p for p in points)
    assert len(points) == len(set(points)), "crash point names must be unique within a run"
    assert len(points) >= 56  # 16 commits and 12 mutating kernel calls, two points each


def crash_at(tmp_path: Path, point: str) -> tuple[ToyNode, int]:
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


def assert_no_double_apply(toy: ToyNode, reference: dict[str, int], point: str) -> None:
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
