"""Every coordinator call ends closed, on every path: a coordinator killed mid-call either
re-sends the call under the same operation id (the plugin replays or runs it) or cleans up,
and the CLEANED receipt closes what never finished. Every journal commit is bracketed by
crash points."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fakekernel.model import diff
from harness.coordinator_crash import coordinator_reference, start_coordinator
from harness.inprocess import in_process_node
from harness.scenarios import PHASES, Lifecycle
from labs import Node
from plugins.coordinator._journal import (
    CLOSED_CALL_STATES,
    OPEN_CALL_STATES,
    Call,
    CoordinatorJournal,
)
from plugins.coordinator._runtime import StepFailed
from plugins.sdk import ConnectRequest, OperationState
from plugins.sdk.host import PluginCallError
from plugins.sdk.runner import (
    NO_CRASH,
    UNSCOPED,
    CrashPoint,
    CrashPoints,
    Owner,
    Phase,
    PhaseKind,
    SimulatedCrash,
)

CONNECT = "att-1:secondary:ConnectNetwork:g1"
REMOVE = "att-1:secondary:RemoveNetwork:g1"


def connect_point(phase: Phase) -> CrashPoint:
    return CrashPoint("ConnectNetwork", CONNECT, UNSCOPED, phase, Owner.COORDINATOR)


BETWEEN_RECORD_AND_RPC = connect_point(Phase.commit(PhaseKind.AFTER_COMMIT, "record_call"))
BETWEEN_RPC_AND_FINISH = connect_point(
    Phase.commit(PhaseKind.BEFORE_COMMIT, "finish_call", "succeeded")
)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Node]:
    lab = in_process_node(tmp_path / "lab")
    yield lab
    lab.close()


def killed_during_connect(lab: Node, point: CrashPoint) -> Lifecycle:
    """Prepare, then connect with the coordinator dying at ``point``; a new one starts
    from the journal (the services and the kernel keep running)."""
    start_coordinator(lab, CrashPoints(armed=point))
    life = Lifecycle("macvlan", lab)
    life.run(stop=PHASES.index("connect"))
    with pytest.raises(SimulatedCrash):
        life.phase("connect")()
    start_coordinator(lab)
    return life


def plugin_state(lab: Node, operation_id: str) -> OperationState | None:
    call = lab.journal.call(operation_id)
    assert call is not None
    seen = lab.coordinator.clients[call.plugin].inspect(operation_id, "")
    return seen.state if seen.found else None


def state(lab: Node, operation_id: str) -> str:
    call = lab.journal.call(operation_id)
    assert call is not None
    return call.state


def left_open(journal: CoordinatorJournal) -> list[str]:
    return [f"{c.operation_id} {c.state}" for c in journal.calls() if c.state in OPEN_CALL_STATES]


@pytest.mark.parametrize(
    ("point", "plugin_saw"),
    [(BETWEEN_RECORD_AND_RPC, None), (BETWEEN_RPC_AND_FINISH, OperationState.SUCCEEDED)],
    ids=str,
)
def test_cleanup_after_a_coordinator_killed_mid_call_closes_the_call(
    lab: Node, point: CrashPoint, plugin_saw: OperationState | None
) -> None:
    life = killed_during_connect(lab, point)
    assert state(lab, CONNECT) == "requested"
    assert plugin_state(lab, CONNECT) is plugin_saw

    life.run(PHASES.index("remove"))  # abandon the attachment, then unprepare

    call = lab.journal.call(CONNECT)
    assert call is not None
    assert call.state == "abandoned"
    assert call.response is not None
    assert (call.response["was"], call.response["cleanup"]) == ("requested", REMOVE)
    assert call.response["receipt"]["status"] == "CLEANED"
    assert state(lab, REMOVE) == "cleaned"
    # The plugin's journal agrees: it cleaned what it ran, or never saw the call.
    assert plugin_state(lab, CONNECT) is (None if plugin_saw is None else OperationState.CLEANED)
    assert left_open(lab.journal) == []


@pytest.mark.parametrize(
    ("point", "plugin_saw"),
    [(BETWEEN_RECORD_AND_RPC, None), (BETWEEN_RPC_AND_FINISH, OperationState.SUCCEEDED)],
    ids=str,
)
def test_retry_after_a_coordinator_killed_mid_call_resends_the_same_operation(
    lab: Node, tmp_path: Path, point: CrashPoint, plugin_saw: OperationState | None
) -> None:
    life = killed_during_connect(lab, point)
    assert plugin_state(lab, CONNECT) is plugin_saw
    sent: list[str] = []
    client = lab.coordinator.clients["macvlan"]
    real_connect = client.connect_network

    def spy(request: ConnectRequest) -> Any:
        sent.append(request.envelope.operation_id)
        return real_connect(request)

    client.connect_network = spy  # type: ignore[method-assign]
    before = lab.kernel.snapshot()
    prepared = lab.coordinator.prepared_states(life.claim)  # the caller's copy died too
    assert prepared == life.results["prepare"]

    attachment = lab.coordinator.connect(
        life.attachment, life.claim, life.compiled, life.allocations, prepared, lab.sandbox()
    )

    assert sent == [CONNECT]
    assert attachment == coordinator_reference("macvlan", tmp_path / "reference").results["connect"]
    assert state(lab, CONNECT) == "succeeded"
    assert plugin_state(lab, CONNECT) is OperationState.SUCCEEDED
    # A call the plugin had finished is replayed: the kernel is not touched again.
    assert (diff(before, lab.kernel.snapshot()) == []) is (plugin_saw is not None)
    assert left_open(lab.journal) == []


def test_a_failed_create_is_abandoned_by_its_steps_clean_removal(lab: Node) -> None:
    start_coordinator(lab)
    life = Lifecycle("macvlan", lab)
    life.run(stop=PHASES.index("connect"))
    client = lab.coordinator.clients["macvlan"]
    real_connect = client.connect_network

    def unavailable(request: ConnectRequest) -> Any:
        raise PluginCallError("UNAVAILABLE", "the service is restarting")

    client.connect_network = unavailable  # type: ignore[method-assign]
    with pytest.raises(StepFailed):
        life.phase("connect")()
    assert state(lab, CONNECT) == "failed"
    client.connect_network = real_connect  # type: ignore[method-assign]

    life.run(PHASES.index("remove"))

    call = lab.journal.call(CONNECT)
    assert call is not None
    assert call.state == "abandoned"
    assert call.error == "UNAVAILABLE: the service is restarting"  # kept as history
    assert call.response is not None
    assert (call.response["was"], call.response["cleanup"]) == ("failed", REMOVE)
    assert left_open(lab.journal) == []


def _call(operation_id: str, step: str, hook: str) -> Call:
    return Call(operation_id, "att-1", step, "p", hook, 1, {}, "requested", None, None)


def test_journal_resend_reopens_only_open_calls(tmp_path: Path) -> None:
    journal = CoordinatorJournal(tmp_path)
    try:
        journal.record_call(_call("a", "s1", "ConnectNetwork"))
        journal.finish_call("a", "failed", error="boom")
        journal.record_call(_call("b", "s2", "ConnectNetwork"))
        journal.finish_call("b", "succeeded", {"outputs": {}})

        journal.record_call(_call("a", "s1", "ConnectNetwork"))  # re-sent: outcome unknown again
        journal.record_call(_call("b", "s2", "ConnectNetwork"))  # re-sent: the plugin replays

        a, b = journal.call("a"), journal.call("b")
        assert a is not None
        assert b is not None
        assert (a.state, a.error) == ("requested", "boom")
        assert (b.state, b.response) == ("succeeded", {"outputs": {}})
        assert [c.operation_id for c in journal.calls()] == ["a", "b"]  # same records, same order
    finally:
        journal.close()


def test_journal_finish_cleanup_closes_only_its_steps_unfinished_calls(tmp_path: Path) -> None:
    journal = CoordinatorJournal(tmp_path)
    try:
        journal.record_call(_call("s1-connect", "s1", "ConnectNetwork"))  # left requested
        journal.record_call(_call("s2-connect", "s2", "ConnectNetwork"))  # another step
        journal.record_call(_call("s1-remove", "s1", "RemoveNetwork"))

        closed = journal.finish_cleanup("s1-remove", {"status": "CLEANED"})

        assert closed == ["s1-connect"]
        assert {c.operation_id: c.state for c in journal.calls()} == {
            "s1-connect": "abandoned",
            "s2-connect": "requested",
            "s1-remove": "cleaned",
        }
    finally:
        journal.close()


def test_every_coordinator_journal_commit_is_between_two_crash_points(lab: Node) -> None:
    crash = CrashPoints()
    start_coordinator(lab, crash)
    before = lab.journal.commits
    Lifecycle("macvlan", lab).run()
    commits = lab.journal.commits - before

    befores, afters = crash.reached[::2], crash.reached[1::2]
    assert commits > 0
    assert len(crash.reached) == 2 * commits
    assert all(b.owner is Owner.COORDINATOR for b in crash.reached)
    assert all(b.phase.kind is PhaseKind.BEFORE_COMMIT for b in befores)
    assert all(a.phase.kind is PhaseKind.AFTER_COMMIT for a in afters)
    assert [replace(b, phase=a.phase) for b, a in zip(befores, afters, strict=True)] == afters
    assert [(b.phase.boundary, b.phase.detail) for b in befores] == [
        (a.phase.boundary, a.phase.detail) for a in afters
    ]
    assert {c.state for c in lab.journal.calls()} <= set(CLOSED_CALL_STATES)


def test_production_coordinator_has_no_crash_points(lab: Node) -> None:
    assert lab.coordinator.crash is NO_CRASH  # the do-nothing default
    Lifecycle("macvlan", lab).run()
    assert not [p for p in lab.crash_points.reached if p.owner is not Owner.SERVICE]
