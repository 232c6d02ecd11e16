"""The durable runner over a toy resource: replay, joining, fencing, cleanup, recovery."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from plugins.sdk import (
    Aborted,
    AlreadyExists,
    CleanupStatus,
    ConfigError,
    DataLoss,
    EffectState,
    FailedPrecondition,
    OperationState,
)
from plugins.sdk.runner import Commit, CrashPoint, CrashPoints, Phase, PhaseKind
from plugins.sdk.runner._fencing import Quiescing
from plugins.sdk.runner._locks import UnitLocks
from plugins.sdk.store import StoreLocked

from . import node as n
from .node import ToyNode


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[ToyNode]:
    node = ToyNode(tmp_path)
    yield node
    node.close()


def test_full_lifecycle_returns_the_resource_to_its_initial_state(toy: ToyNode) -> None:
    initial = toy.toy.observable()
    prepared = toy.endpoint.node_prepare(n.prepare())
    assert [h.type for h in prepared.prepared_state.handles] == ["ToyObject/v1"]
    connected = toy.endpoint.connect_network(n.connect())
    (handle,) = connected.outputs["interface"]
    assert (handle.owner_scope, handle.attachment_id, handle.root_provenance) == (
        "att-1",
        "att-1",
        "root-1",
    )
    assert toy.toy.get("data0") is not None
    assert toy.toy.setting("shared.state") == "up"
    assert toy.endpoint.remove_network(n.remove()).status is CleanupStatus.CLEANED
    assert toy.endpoint.node_unprepare(n.unprepare()).status is CleanupStatus.CLEANED
    assert toy.toy.observable() == initial


def test_replay_returns_the_identical_response_without_reapplying(toy: ToyNode) -> None:
    first = toy.endpoint.connect_network(n.connect())
    mutations = toy.toy.mutations()
    commits = toy.store.commits if toy.store else 0
    again = toy.endpoint.connect_network(n.connect())
    assert again == first
    assert toy.toy.mutations() == mutations
    assert toy.store is not None
    assert toy.store.commits == commits


def test_a_retry_with_a_new_trace_id_and_epoch_still_replays(toy: ToyNode) -> None:
    first = toy.endpoint.connect_network(n.connect())
    env = n.envelope(n.Hook.CONNECT_NETWORK, "op-connect", "att-1", epoch=2)
    retry = n.connect(envelope=env.__class__(**{**env.__dict__, "trace_id": "other"}))
    assert toy.endpoint.connect_network(retry) == first


def test_reused_operation_id_with_different_semantics_is_rejected(toy: ToyNode) -> None:
    toy.endpoint.connect_network(n.connect())
    before = toy.operations()
    with pytest.raises(AlreadyExists, match="op-connect"):
        toy.endpoint.connect_network(n.connect(name="other0"))
    assert toy.operations() == before
    assert toy.toy.get("other0") is None


def test_stale_generation_is_refused(toy: ToyNode) -> None:
    newer = n.envelope(n.Hook.CONNECT_NETWORK, "op-new", "att-1", generation=5)
    toy.endpoint.connect_network(n.connect(envelope=newer))
    stale = n.envelope(n.Hook.CONNECT_NETWORK, "op-old", "att-1", generation=4)
    with pytest.raises(Aborted, match="generation 4 is older than accepted 5"):
        toy.endpoint.connect_network(
            n.connect(envelope=stale, interface_names={"interface": "old0"})
        )
    assert toy.toy.get("old0") is None


def test_stale_epoch_is_refused(toy: ToyNode) -> None:
    toy.endpoint.connect_network(
        n.connect(envelope=n.envelope(n.Hook.CONNECT_NETWORK, "a", "att-1", epoch=3))
    )
    old = n.envelope(n.Hook.CONNECT_NETWORK, "b", "att-1", epoch=2)
    with pytest.raises(Aborted, match="epoch 2 is older than accepted 3"):
        toy.endpoint.connect_network(n.connect(envelope=old, interface_names={"interface": "b0"}))


def test_removal_fence_stops_a_delayed_connect(toy: ToyNode) -> None:
    initial = toy.toy.observable()
    response = toy.endpoint.remove_network(n.remove())
    assert response.status is CleanupStatus.CLEANED
    assert "no recorded ConnectNetwork" in response.detail
    with pytest.raises(Aborted, match="was removed by op-remove"):
        toy.endpoint.connect_network(n.connect())
    assert toy.toy.observable() == initial


def test_replay_after_cleanup_does_not_resurrect(toy: ToyNode) -> None:
    toy.endpoint.connect_network(n.connect())
    toy.endpoint.remove_network(n.remove())
    with pytest.raises(Aborted, match="removed"):
        toy.endpoint.connect_network(n.connect())
    assert toy.toy.get("data0") is None


def test_repeated_cleanup(toy: ToyNode) -> None:
    toy.endpoint.connect_network(n.connect())
    first = toy.endpoint.remove_network(n.remove())
    assert first.status is CleanupStatus.CLEANED
    assert toy.endpoint.remove_network(n.remove()) == first  # same id: replayed
    again = toy.endpoint.remove_network(n.remove(op="op-remove-2"))
    assert again.status is CleanupStatus.CLEANED
    assert again.effects == ()


def test_cleanup_without_the_original_response(tmp_path: Path) -> None:
    """The connect's response was never persisted (crash), yet removal finds and undoes it."""
    response = Phase.commit(PhaseKind.BEFORE_COMMIT, Commit.RESPONSE)
    toy = ToyNode(
        tmp_path, CrashPoints(armed=CrashPoint("ConnectNetwork", "op-connect", "-", response))
    )
    initial = toy.toy.observable()
    with pytest.raises(n.SimulatedCrash):
        toy.endpoint.connect_network(n.connect())
    toy.crash()
    assert toy.endpoint.remove_network(n.remove()).status is CleanupStatus.CLEANED
    assert toy.toy.observable() == initial
    toy.close()


def test_interrupted_operation_is_marked_failed_and_a_retry_resumes(tmp_path: Path) -> None:
    created = Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, 1, "create")
    toy = ToyNode(
        tmp_path,
        CrashPoints(armed=CrashPoint("ConnectNetwork", "op-connect", "create-peer", created)),
    )
    with pytest.raises(n.SimulatedCrash):
        toy.endpoint.connect_network(n.connect())
    toy.crash()
    assert any("interrupted, marked Failed" in note for note in toy.notes)
    assert any("create-peer: probe at recovery: ours" in note for note in toy.notes)
    inspected = toy.endpoint.inspect("op-connect", "")
    assert inspected.state is OperationState.FAILED
    response = toy.endpoint.connect_network(n.connect())
    assert response.outputs["interface"][0].owner_scope == "att-1"
    assert all(count == 1 for count in toy.toy.mutations().values())
    toy.close()


def test_duplicate_in_progress_request_joins(tmp_path: Path) -> None:
    entered, release = threading.Event(), threading.Event()

    class Gate(CrashPoints):
        def hit(self, phase: Phase | str) -> None:
            super().hit(phase)
            if (
                self.reached[-1].phase == Phase.kernel(PhaseKind.BEFORE_KERNEL_CALL, 1, "create")
                and not entered.is_set()
            ):
                entered.set()
                assert release.wait(30)

    toy = ToyNode(tmp_path, Gate())
    results: list[object] = []
    first = threading.Thread(
        target=lambda: results.append(toy.endpoint.connect_network(n.connect()))
    )
    first.start()
    assert entered.wait(30)
    second = threading.Thread(
        target=lambda: results.append(toy.endpoint.connect_network(n.connect()))
    )
    second.start()
    release.set()
    first.join(30)
    second.join(30)
    assert len(results) == 2
    assert results[0] == results[1]
    assert toy.toy.mutations()["create:object:data0"] == 1
    toy.close()


def test_foreign_object_with_the_expected_name_is_never_touched(toy: ToyNode) -> None:
    toy.toy.create("data0", "someone-else", 99)
    foreign = toy.toy.get("data0")
    with pytest.raises(FailedPrecondition, match="not ours"):
        toy.endpoint.connect_network(n.connect())
    assert toy.endpoint.remove_network(n.remove()).status is CleanupStatus.CLEANED
    assert toy.toy.get("data0") == foreign


def test_external_change_is_quarantined_not_overwritten(toy: ToyNode) -> None:
    toy.endpoint.connect_network(n.connect())
    toy.toy.set_setting("data0.mtu", 9000)  # an administrator changed what we set
    response = toy.endpoint.remove_network(n.remove())
    assert response.status is CleanupStatus.QUARANTINED
    assert toy.toy.setting("data0.mtu") == 9000
    states = {e.effect_id: e.state for e in response.effects}
    assert states["set-mtu"] is EffectState.QUARANTINED
    assert states["create-object"] is EffectState.UNDONE
    inspected = toy.endpoint.inspect("op-remove", "")
    assert inspected.cleanup is CleanupStatus.QUARANTINED


def test_inspect_is_read_only(toy: ToyNode) -> None:
    toy.endpoint.connect_network(n.connect())
    assert toy.store is not None
    commits, state = toy.store.commits, toy.toy.state()
    seen = toy.endpoint.inspect("op-connect", "")
    assert seen.found
    assert seen.state is OperationState.SUCCEEDED
    assert [e.state for e in seen.effects] == [EffectState.APPLIED] * 5
    assert not toy.endpoint.inspect("nope", "").found
    assert toy.store.commits == commits
    assert toy.toy.state() == state


def test_invalid_config_writes_nothing(toy: ToyNode) -> None:
    with pytest.raises(ConfigError) as info:
        toy.endpoint.connect_network(n.connect(config_json='{"value": 1, "mtu": 1}'))
    assert (info.value.path, info.value.rule) == ("$.mtu", "range")
    assert toy.operations() == 0
    assert toy.toy.mutations() == {}


def test_unprepare_waits_for_attachment_cleanup(toy: ToyNode) -> None:
    toy.endpoint.node_prepare(n.prepare())
    toy.endpoint.connect_network(n.connect())
    with pytest.raises(FailedPrecondition, match="attachment att-1"):
        toy.endpoint.node_unprepare(n.unprepare())
    toy.endpoint.remove_network(n.remove())
    assert (
        toy.endpoint.node_unprepare(n.unprepare(op="op-unprepare-2")).status
        is CleanupStatus.CLEANED
    )


def test_an_unprepare_refused_under_the_lock_writes_nothing(
    toy: ToyNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attachment that raced the first check is seen under the lock, before the
    removal's first commit: the refusal leaves no fence and no cleanup record."""
    prepared = toy.endpoint.node_prepare(n.prepare())
    toy.endpoint.connect_network(n.connect())
    real, skipped = toy.runner._undo.check_no_attachments, []

    def late(*args: Any) -> None:
        if not skipped:  # the check before the unit is marked: as if the connect came later
            skipped.append(args)
            return
        real(*args)

    monkeypatch.setattr(toy.runner._undo, "check_no_attachments", late)
    assert toy.store is not None
    commits = toy.store.commits
    with pytest.raises(FailedPrecondition, match="attachment att-1"):
        toy.endpoint.node_unprepare(n.unprepare())
    assert len(skipped) == 1
    assert toy.store.commits == commits
    assert not toy.endpoint.inspect("op-unprepare", "").found
    assert not toy.endpoint.inspect("", "prep-1").fenced
    assert toy.endpoint.node_prepare(n.prepare()) == prepared  # still replays


def test_a_second_writer_is_refused(toy: ToyNode) -> None:
    with pytest.raises(StoreLocked, match="writer"):
        ToyNode(toy.root)


@pytest.mark.parametrize("damage", ["truncate", "garble", "delete"])
def test_damaged_journal_keeps_scopes_unavailable_and_is_not_recreated(
    tmp_path: Path, damage: str
) -> None:
    toy = ToyNode(tmp_path)
    toy.endpoint.connect_network(n.connect())
    toy.close()
    db = toy.state_dir / "journal.db"
    for sidecar in (db.with_name("journal.db-wal"), db.with_name("journal.db-shm")):
        sidecar.unlink(missing_ok=True)
    if damage == "truncate":
        with db.open("r+b") as f:
            f.truncate(100)
    elif damage == "garble":
        with db.open("r+b") as f:
            f.write(b"garbage-garbage!")
    else:
        db.unlink()
    before = sorted(p.name for p in toy.state_dir.iterdir())
    toy.start()
    assert not toy.endpoint.info().ready
    # Permanent (DATA_LOSS), not "recovering, retry": an operator must act.
    with pytest.raises(DataLoss, match="journal unavailable"):
        toy.endpoint.remove_network(n.remove())
    assert sorted(p.name for p in toy.state_dir.iterdir()) == before
    assert toy.toy.get("data0") is not None  # nothing claimed absent, nothing touched


class Marking(Quiescing):
    """Says when a removal has marked its unit: it then waits for the unit's lock."""

    def __init__(self) -> None:
        super().__init__()
        self.marked = threading.Event()

    @contextmanager
    def removing(self, partition: str, unit: str) -> Iterator[None]:
        with super().removing(partition, unit):
            self.marked.set()
            yield


class WaitingLocks(UnitLocks):
    """Holds a removal back on its way to the unit's lock until ``go`` is set, the lock
    left free meanwhile: as if it waited behind a holder that a create then outran."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    @contextmanager
    def hold(self, partition: str, unit: str) -> Iterator[None]:
        if threading.current_thread().name == "removal":
            assert self.go.wait(30)
        with super().hold(partition, unit):
            yield


class HeldConnect:
    """A toy whose ConnectNetwork, on its own thread, stops at ``stop_at`` (holding the
    unit's lock) until ``release`` is set, and a removal started against it."""

    def __init__(self, tmp_path: Path, stop_at: Phase) -> None:
        self.reached, self.release = threading.Event(), threading.Event()
        reached, release = self.reached, self.release

        class Gate(CrashPoints):
            def hit(self, phase: Phase | str) -> None:
                super().hit(phase)
                if self.reached[-1].phase == stop_at and not reached.is_set():
                    reached.set()
                    assert release.wait(30)

        self.toy = ToyNode(tmp_path, Gate())
        self.marking = Marking()
        self.toy.runner._quiescing = self.marking
        self.initial = self.toy.toy.observable()
        self.outcome: list[BaseException] = []
        self.removed: list[object] = []
        self.connecting = threading.Thread(target=self._connect)
        self.removing = threading.Thread(
            target=lambda: self.removed.append(self.toy.endpoint.remove_network(n.remove()))
        )

    def _connect(self) -> None:
        try:
            self.toy.endpoint.connect_network(n.connect())
        except Aborted as exc:
            self.outcome.append(exc)

    def start(self) -> None:
        """The connect up to its phase, then the removal up to its mark of the unit."""
        self.connecting.start()
        assert self.reached.wait(30), "the connect never reached its phase"
        self.removing.start()
        assert self.marking.marked.wait(30), "the removal never marked the unit"

    def finish(self) -> None:
        self.release.set()
        self.connecting.join(30)
        self.removing.join(30)


def test_removal_quiesces_an_executing_connect(tmp_path: Path) -> None:
    # Inside its second effect.
    held = HeldConnect(tmp_path, Phase.kernel(PhaseKind.BEFORE_KERNEL_CALL, 1, "set"))
    toy, outcome, removed, initial = held.toy, held.outcome, held.removed, held.initial
    held.start()
    # It waits for the connect's lock; its fence rides with its first commit, not yet made.
    assert not toy.endpoint.inspect("", "att-1").fenced
    held.finish()
    assert len(outcome) == 1
    assert "stopped before create-peer" in str(outcome[0])
    assert removed[0].status is CleanupStatus.CLEANED  # type: ignore[attr-defined]
    assert toy.endpoint.inspect("", "att-1").fenced
    assert toy.toy.observable() == initial
    toy.close()


@pytest.mark.parametrize("create", ["new", "replay"])
def test_a_create_that_outruns_a_waiting_removal_is_refused_and_writes_nothing(
    toy: ToyNode, create: str
) -> None:
    """The removal has marked the unit and waits for its lock, its fence not durable yet;
    a create that takes the lock first (a new one, or the replay of an old success) is
    refused as the durable fence would refuse it, before it writes or mutates anything."""
    initial = toy.toy.observable()
    if create == "replay":
        toy.endpoint.connect_network(n.connect())
    marking, locks = Marking(), WaitingLocks()
    toy.runner._quiescing, toy.runner._units = marking, locks
    assert toy.store is not None
    commits, state, mutations = toy.store.commits, toy.toy.state(), toy.toy.mutations()
    removed: list[object] = []
    removing = threading.Thread(
        target=lambda: removed.append(toy.endpoint.remove_network(n.remove())), name="removal"
    )
    removing.start()
    try:
        assert marking.marked.wait(30), "the removal never marked the unit"
        with pytest.raises(Aborted, match="scope att-1 is being removed"):
            toy.endpoint.connect_network(n.connect())
        assert toy.store.commits == commits
        assert (toy.toy.state(), toy.toy.mutations()) == (state, mutations)
        assert not toy.endpoint.inspect("", "att-1").fenced
        assert not toy.endpoint.inspect("op-remove", "").found
    finally:
        locks.go.set()
        removing.join(30)
    assert removed[0].status is CleanupStatus.CLEANED  # type: ignore[attr-defined]
    assert toy.toy.observable() == initial
    with pytest.raises(Aborted, match="was removed by op-remove"):
        toy.endpoint.connect_network(n.connect())


def test_a_create_planned_before_a_removal_arrived_is_refused_in_its_intent(
    tmp_path: Path,
) -> None:
    """A create holds the lock, past its checks, when a removal marks the unit: its intent's
    transaction sees the mark, so nothing of it is written and nothing is left to undo."""
    # Past its checks, about to commit its intent, holding the lock:
    held = HeldConnect(tmp_path, Phase.commit(PhaseKind.BEFORE_COMMIT, Commit.INTENT))
    toy, outcome, removed, initial = held.toy, held.outcome, held.removed, held.initial
    held.start()
    held.finish()
    assert len(outcome) == 1
    assert "scope att-1 is being removed" in str(outcome[0])
    assert not toy.endpoint.inspect("op-connect", "").found
    assert toy.toy.mutations() == {}
    response = removed[0]
    assert response.status is CleanupStatus.CLEANED  # type: ignore[attr-defined]
    assert "no recorded ConnectNetwork" in response.detail  # type: ignore[attr-defined]
    assert toy.toy.observable() == initial
    toy.close()


# -- a scope the journal has no record of ------------------------------------------------------


def _lose_the_journal(toy: ToyNode) -> None:
    """Journal gone (and no lease to notice it): the node must be the second witness."""
    toy.close()
    for name in ("journal.db", "journal.db-wal", "journal.db-shm", "journal.id"):
        (toy.state_dir / name).unlink(missing_ok=True)
    toy.start()


def test_unrecorded_scope_with_our_objects_on_the_node_is_quarantined_not_cleaned(
    tmp_path: Path,
) -> None:
    toy = ToyNode(tmp_path)
    toy.endpoint.node_prepare(n.prepare())
    toy.endpoint.connect_network(n.connect())
    attached = toy.toy.observable()
    _lose_the_journal(toy)

    removed = toy.endpoint.remove_network(n.remove())
    assert removed.status is CleanupStatus.QUARANTINED
    assert "object data0" in removed.detail
    assert "ownership evidence" in removed.detail
    assert toy.toy.observable() == attached  # never deleted on a guess
    assert toy.endpoint.inspect("op-remove", "att-1").state is OperationState.QUARANTINED
    toy.close()


def test_unrecorded_scope_with_nothing_on_the_node_is_cleaned_saying_why(tmp_path: Path) -> None:
    toy = ToyNode(tmp_path)
    toy.endpoint.node_prepare(n.prepare())
    toy.endpoint.connect_network(n.connect())
    # Another attachment's objects do not count: the scan is per scope.
    removed = toy.endpoint.remove_network(n.remove(op="op-r9", scope="att-9"))
    assert removed.status is CleanupStatus.CLEANED
    assert "no object on the node carries" in removed.detail
    toy.close()


def test_unrecorded_scope_on_a_node_that_cannot_be_scanned_is_pending(tmp_path: Path) -> None:
    toy = ToyNode(tmp_path)

    def unreachable(prefix: str) -> list[tuple[str, str]]:
        raise OSError(5, "the kernel did not answer")

    toy.runner._effects.evidence = unreachable
    removed = toy.endpoint.remove_network(n.remove(op="op-r9", scope="att-9"))
    assert removed.status is CleanupStatus.PENDING
    assert "could not be scanned" in removed.detail
    toy.close()
