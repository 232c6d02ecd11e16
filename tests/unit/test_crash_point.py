"""``CrashPoint`` is data: it compares, hashes and renames as data; ``str()`` is its one
rendering and ``CrashPoint.parse`` reads exactly that rendering back."""

from __future__ import annotations

import re

import pytest

from plugins.sdk.runner import (
    RECOVERY_HOOK,
    UNSCOPED,
    Commit,
    CrashPoint,
    CrashPoints,
    Owner,
    Phase,
    PhaseKind,
    SimulatedCrash,
)

BEFORE, AFTER = PhaseKind.BEFORE_COMMIT, PhaseKind.AFTER_COMMIT
CONNECT = "att-1:bond0:ConnectNetwork:g1"

POINTS = {
    "ConnectNetwork/att-1:bond0:ConnectNetwork:g1/-/intent.before-commit": CrashPoint(
        "ConnectNetwork", CONNECT, UNSCOPED, Phase.commit(BEFORE, Commit.INTENT)
    ),
    "ConnectNetwork/att-1:bond0:ConnectNetwork:g1/create-bond/kernel#2.set_link.after": (
        CrashPoint(
            "ConnectNetwork",
            CONNECT,
            "create-bond",
            Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, 2, "set_link"),
        )
    ),
    "RemoveNetwork/att-1:bond0:RemoveNetwork:g1/att-1:bond0:ConnectNetwork:g1:create-bond/"
    "undoing.after-commit": CrashPoint(
        "RemoveNetwork",
        "att-1:bond0:RemoveNetwork:g1",
        f"{CONNECT}:create-bond",
        Phase.commit(AFTER, Commit.UNDOING),
    ),
    "Recovery/-/-/recovery.before-commit": CrashPoint(
        RECOVERY_HOOK, UNSCOPED, UNSCOPED, Phase.commit(BEFORE, Commit.RECOVERY)
    ),
    "Coordinator/NodePrepare/claim-1/set_unit:preparing.after-commit": CrashPoint(
        "NodePrepare",
        "claim-1",
        UNSCOPED,
        Phase.commit(AFTER, "set_unit", "preparing"),
        Owner.COORDINATOR,
    ),
    "Pods/-/sandbox:sandbox-1/admit:ctr.1.before-commit": CrashPoint(
        UNSCOPED,
        "sandbox:sandbox-1",
        UNSCOPED,
        Phase.commit(BEFORE, "admit", "ctr.1"),
        Owner.PODS,
    ),
}


@pytest.mark.parametrize("name", POINTS)
def test_the_one_rendering_reads_back_as_the_same_point(name: str) -> None:
    point = POINTS[name]
    assert str(point) == name
    assert CrashPoint.parse(name) == point
    assert hash(CrashPoint.parse(name)) == hash(point)


@pytest.mark.parametrize(
    "name",
    [
        "ConnectNetwork/op/-",  # three parts
        "ConnectNetwork/op/-/intent",  # no side
        "ConnectNetwork/op/-/kernel#0.set_link.after",  # kernel calls count from 1
        "ConnectNetwork//-/intent.after-commit",  # an empty part
    ],
)
def test_what_is_not_a_rendering_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="crash"):
        CrashPoint.parse(name)


def test_other_identities_are_whole_parts_of_the_operation_and_the_effect() -> None:
    point = CrashPoint(
        "RemoveNetwork",
        "att-1:vf0:RemoveNetwork:g1",
        "att-1:vf0:ConnectNetwork:g1:move-vf.move",
        Phase.commit(AFTER, Commit.UNDOING),
    )
    renamed = point.with_identities({"att-1": "att-7", "claim-1": "claim-7"})
    assert renamed == CrashPoint(
        "RemoveNetwork",
        "att-7:vf0:RemoveNetwork:g1",
        "att-7:vf0:ConnectNetwork:g1:move-vf.move",
        point.phase,
    )
    # A longer identity that starts with one to rename is another identity.
    other = CrashPoint("NodePrepare", "claim-10.vf0:vf0:NodePrepare:g1", UNSCOPED, point.phase)
    assert other.with_identities({"claim-1": "claim-7"}) == other


def test_a_name_is_refused_where_a_point_is_armed() -> None:
    with pytest.raises(TypeError, match=re.escape("CrashPoint.parse")):
        CrashPoints(armed="ConnectNetwork/op/-/intent.after-commit")  # type: ignore[arg-type]


def test_the_armed_point_crashes_and_every_point_is_recorded_as_data() -> None:
    before, after = Phase.commit(BEFORE, "write"), Phase.commit(AFTER, "write")
    armed = CrashPoint("Coordinator-like", "op", UNSCOPED, after)
    crash = CrashPoints(armed=armed)
    written: list[str] = []
    with (
        crash.scope("Coordinator-like", "op"),
        pytest.raises(SimulatedCrash, match=re.escape(str(armed))),
    ):
        crash.commit("write", lambda: written.append("row"))
    assert written == ["row"], "the after-commit point is hit once the write returned"
    assert crash.reached == [CrashPoint("Coordinator-like", "op", UNSCOPED, before), armed]
