"""The blueprint's first gate, in-process: a VF/bond/VLAN attachment crashed at every
boundary, restarted, then retried or removed, without losing ownership of anything."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fakekernel.model import diff
from plugins.sdk._requests import CleanupStatus
from plugins.sdk.runner import CrashPoints, SimulatedCrash

from .node import VF0, VF1, FakeNode


class Lifecycle:
    """The twelve calls of blueprint 10.1, replayable from any step with the same identities."""

    def __init__(self, node: FakeNode) -> None:
        self.node = node
        self.results: dict[str, Any] = {}

    def steps(self) -> list[tuple[str, Callable[[], Any]]]:
        n, r = self.node, self.results
        return [
            ("prepare-vf0", lambda: n.prepare_vf("vf0", VF0)),
            ("prepare-vf1", lambda: n.prepare_vf("vf1", VF1)),
            ("connect-vf0", lambda: n.connect_vf("vf0", VF0, r["prepare-vf0"], "net1")),
            ("connect-vf1", lambda: n.connect_vf("vf1", VF1, r["prepare-vf1"], "net2")),
            ("connect-bond", lambda: n.connect_bond((r["connect-vf0"], r["connect-vf1"]))),
            ("connect-vlan", lambda: n.connect_vlan(r["connect-bond"])),
            ("remove-vlan", lambda: n.remove("vlan", "data-vlan")),
            ("remove-bond", lambda: n.remove("bond", "bond0")),
            ("remove-vf1", lambda: n.remove("sriov", "vf1")),
            ("remove-vf0", lambda: n.remove("sriov", "vf0")),
            ("unprepare-vf1", lambda: n.unprepare_vf("vf1")),
            ("unprepare-vf0", lambda: n.unprepare_vf("vf0")),
        ]

    def run(self, start: int = 0) -> None:
        for name, call in self.steps()[start:]:
            self.results[name] = call()


CREATES = 6  # the first six steps create; the rest clean up


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, Any]]:
    node = FakeNode(tmp_path_factory.mktemp("reference"))
    life = Lifecycle(node)
    life.run()
    node.close()
    return list(node.crash_points.reached), life.results


def crashed(root: Path, point: str) -> tuple[FakeNode, Lifecycle, int, dict[str, Any]]:
    node = FakeNode(root, crash=CrashPoints(armed=point))
    before = node.model.snapshot()
    life = Lifecycle(node)
    for index, (name, call) in enumerate(life.steps()):
        try:
            life.results[name] = call()
        except SimulatedCrash:
            node.crash()
            return node, life, index, before
    raise AssertionError(f"{point} was never reached")


def test_every_boundary_is_named_once(reference: tuple[list[str], dict[str, Any]]) -> None:
    points = reference[0]
    assert len(points) == len(set(points))
    assert len(points) > 300
    hooks = {p.split("/", 1)[0] for p in points}
    assert hooks == {"NodePrepare", "ConnectNetwork", "RemoveNetwork", "NodeUnprepare"}


def test_crash_anywhere_then_retry_gives_the_same_result(
    reference: tuple[list[str], dict[str, Any]], tmp_path: Path
) -> None:
    points, results = reference
    started = time.monotonic()
    for i, point in enumerate(points):
        node, life, index, before = crashed(tmp_path / f"r{i}", point)
        life.run(index)
        for name in [n for n, _ in life.steps()][index:CREATES]:
            assert life.results[name] == results[name], (point, name)
        for name in [n for n, _ in life.steps()][max(index, CREATES) :]:
            assert life.results[name].status is CleanupStatus.CLEANED, (
                point,
                name,
                life.results[name],
            )
        assert diff(before, node.model.snapshot()) == [], point
        node.close()
    print(f"{len(points)} crash points, retry path, {time.monotonic() - started:.1f}s")


def test_crash_anywhere_then_cleanup_removes_everything(
    reference: tuple[list[str], dict[str, Any]], tmp_path: Path
) -> None:
    points, _ = reference
    for i, point in enumerate(points):
        node, life, index, before = crashed(tmp_path / f"c{i}", point)
        start = max(index, CREATES)  # abandon the attachment: go straight to cleanup
        life.run(start)
        for name in [n for n, _ in life.steps()][start:]:
            assert life.results[name].status is CleanupStatus.CLEANED, (
                point,
                name,
                life.results[name],
            )
        assert diff(before, node.model.snapshot()) == [], point
        node.close()
