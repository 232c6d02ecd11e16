"""The journal's durability budget: a hook commits at most once per effect plus once.

One record is the minimum before each mutation (or compensation); every other record
rides with one of those (docs/runner.md, "The record sequence"). Counted at one client,
so group commit cannot merge anything: ``store.commits`` is the number of WAL fsyncs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from plugins.sdk import Aborted, CleanupStatus, EffectState, FailedPrecondition, OperationState
from plugins.sdk.runner import CrashPoint, CrashPoints, Phase, PhaseKind, _runner

from . import node as n
from .node import ToyNode
from .toy import SetSetting

CONNECT_EFFECTS = ("create-object", "set-mtu", "create-peer", "link", "set-state")


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[ToyNode]:
    node = ToyNode(tmp_path)
    yield node
    node.close()


def after(hook: str, operation: str, effect: str, commit: str) -> CrashPoint:
    return CrashPoint(hook, operation, effect, Phase.commit(PhaseKind.AFTER_COMMIT, commit))


def commits_of(toy: ToyNode, call: Callable[[], Any]) -> tuple[int, list[CrashPoint]]:
    """How many commits ``call`` made, and the after-commit points of the boundaries they were."""
    assert toy.store is not None
    before, seen = toy.store.commits, len(toy.crash_points.reached)
    call()
    names = [p for p in toy.crash_points.reached[seen:] if p.phase.kind is PhaseKind.AFTER_COMMIT]
    return toy.store.commits - before, names


def test_a_five_effect_connect_commits_effects_plus_one(toy: ToyNode) -> None:
    toy.endpoint.node_prepare(n.prepare())
    count, names = commits_of(toy, lambda: toy.endpoint.connect_network(n.connect()))
    assert count == len(CONNECT_EFFECTS) + 1
    assert (
        names
        == [
            after(
                "ConnectNetwork", "op-connect", "-", "intent"
            ),  # with create-object's before-image and Applying
            *(after("ConnectNetwork", "op-connect", e, "advance") for e in CONNECT_EFFECTS[1:]),
            after("ConnectNetwork", "op-connect", "-", "response"),  # with set-state's Applied
        ]
    )


def test_a_one_effect_prepare_commits_twice(toy: ToyNode) -> None:
    count, names = commits_of(toy, lambda: toy.endpoint.node_prepare(n.prepare()))
    assert count == 2
    assert names == [
        after("NodePrepare", "op-prepare", "-", "intent"),
        after("NodePrepare", "op-prepare", "-", "response"),
    ]


def test_a_five_effect_removal_commits_effects_plus_one(toy: ToyNode) -> None:
    toy.endpoint.node_prepare(n.prepare())
    toy.endpoint.connect_network(n.connect())
    count, names = commits_of(toy, lambda: toy.endpoint.remove_network(n.remove()))
    assert count == len(CONNECT_EFFECTS) + 1  # it was 8: the fence and the target's finish
    assert names == [
        # set-state's Undoing with the fence, the removal's record, op-connect's start
        *(
            after("RemoveNetwork", "op-remove", f"op-connect:{e}", "undoing")
            for e in reversed(CONNECT_EFFECTS)
        ),
        after(
            "RemoveNetwork", "op-remove", "-", "cleanup"
        ),  # create-object's Undone, op-connect's finish
    ]


def test_a_removal_with_nothing_to_undo_commits_once(toy: ToyNode) -> None:
    # No record of the scope: the fence rides with the response (it was 2 commits).
    count, names = commits_of(toy, lambda: toy.endpoint.remove_network(n.remove()))
    assert (count, names) == (1, [after("RemoveNetwork", "op-remove", "-", "cleanup")])
    assert toy.endpoint.inspect("op-remove", "").cleanup is CleanupStatus.CLEANED
    with pytest.raises(Aborted, match="was removed by op-remove"):
        toy.endpoint.connect_network(n.connect())


def test_the_first_undoing_carries_the_fence_and_the_removal_record(tmp_path: Path) -> None:
    seen: dict[PhaseKind, Any] = {}
    first = after("RemoveNetwork", "op-remove", "op-connect:set-state", "undoing")

    class Witness(CrashPoints):
        """What the committed journal holds on each side of the removal's first commit."""

        def hit(self, phase: Phase | str) -> None:
            super().hit(phase)
            point = self.reached[-1]
            if replace(point, phase=first.phase) == first:
                assert toy.store is not None
                seen[point.phase.kind] = toy.store.read(
                    lambda r: (
                        r.scope("toy/v1alpha1", "att-1/step-1"),
                        r.operation("toy/v1alpha1", "op-remove"),
                        r.operation("toy/v1alpha1", "op-connect"),
                    )
                )

    toy = ToyNode(tmp_path, Witness())
    toy.endpoint.connect_network(n.connect())
    assert toy.endpoint.remove_network(n.remove()).status is CleanupStatus.CLEANED
    toy.close()
    scope, removal, target = seen[PhaseKind.BEFORE_COMMIT]
    assert not scope.fenced
    assert removal is None
    assert target.state is OperationState.SUCCEEDED
    scope, removal, target = seen[PhaseKind.AFTER_COMMIT]
    assert scope.fence_operation_id == "op-remove"
    assert removal is not None
    assert removal.state is OperationState.RUNNING
    assert target.state is OperationState.CLEANUP_PENDING


def test_a_target_finish_rides_with_the_next_targets_first_undoing(toy: ToyNode) -> None:
    # Two targets on one unit: op-connect applied all five effects; op-connect-2 found
    # data0 (op-connect's) not its own, so nothing of it was applied. Undone in reverse:
    # op-connect-2 first (no compensation), its finish with op-connect's first Undoing.
    toy.endpoint.connect_network(n.connect())
    with pytest.raises(FailedPrecondition, match="not ours"):
        toy.endpoint.connect_network(n.connect(op="op-connect-2"))
    count, names = commits_of(toy, lambda: toy.endpoint.remove_network(n.remove()))
    assert count == len(CONNECT_EFFECTS) + 1
    assert names == [
        *(
            after("RemoveNetwork", "op-remove", f"op-connect:{e}", "undoing")
            for e in reversed(CONNECT_EFFECTS)
        ),
        after("RemoveNetwork", "op-remove", "-", "cleanup"),
    ]
    for op in ("op-connect", "op-connect-2"):
        seen = toy.endpoint.inspect(op, "")
        assert (seen.state, seen.cleanup) == (OperationState.CLEANED, CleanupStatus.CLEANED)
        assert {e.state for e in seen.effects} == {EffectState.UNDONE}
    # The response is built from both targets' effects.
    response = toy.endpoint.remove_network(n.remove())
    assert len(response.effects) == 2 * len(CONNECT_EFFECTS)
    assert toy.toy.observable() == {"objects": {}, "settings": {}}


def test_a_crash_before_the_first_undoing_leaves_no_fence_and_no_removal(
    tmp_path: Path,
) -> None:
    reference = ToyNode(tmp_path / "reference")
    initial = reference.toy.observable()
    expected = reference.endpoint.connect_network(n.connect())
    reference.close()
    first = after("RemoveNetwork", "op-remove", "op-connect:set-state", "undoing")
    point = replace(first, phase=Phase.commit(PhaseKind.BEFORE_COMMIT, "undoing"))
    toy = ToyNode(tmp_path / "node", CrashPoints(armed=point))
    assert toy.endpoint.connect_network(n.connect()) == expected
    mutations = toy.toy.mutations()
    with pytest.raises(n.SimulatedCrash):
        toy.endpoint.remove_network(n.remove())
    toy.crash()
    assert toy.store is not None
    scope, removal = toy.store.read(
        lambda r: (
            r.scope("toy/v1alpha1", "att-1/step-1"),
            r.operation("toy/v1alpha1", "op-remove"),
        )
    )
    assert scope is not None
    assert not scope.fenced
    assert removal is None
    assert not toy.endpoint.inspect("op-remove", "").found
    seen = toy.endpoint.inspect("op-connect", "")
    assert seen.state is OperationState.SUCCEEDED
    assert {e.state for e in seen.effects} == {EffectState.APPLIED}
    assert toy.toy.mutations() == mutations  # nothing undone
    # The removal was lost, unanswered: until it is retried the connect still replays.
    assert toy.endpoint.connect_network(n.connect()) == expected
    count, names = commits_of(toy, lambda: toy.endpoint.remove_network(n.remove()))
    assert count == len(CONNECT_EFFECTS) + 1
    assert names[0] == first
    assert toy.toy.observable() == initial
    with pytest.raises(Aborted, match="was removed by op-remove"):
        toy.endpoint.connect_network(n.connect())
    toy.close()


def test_a_stale_removal_refused_in_its_first_commit_changes_nothing(
    toy: ToyNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    newer = n.envelope(n.Hook.CONNECT_NETWORK, "op-connect", "att-1", generation=5)
    toy.endpoint.connect_network(n.connect(envelope=newer))
    observed = toy.toy.observable()
    assert toy.store is not None
    commits = toy.store.commits
    # Refused before it marks the unit, by the scope record it read first ...
    with pytest.raises(Aborted, match="generation 1 is older than accepted 5"):
        toy.endpoint.remove_network(n.remove())
    assert toy.store.commits == commits
    # ... and, had the generation been accepted only after that read, by its first
    # commit's transaction: before any compensation, so nothing changes either.
    real, skipped = _runner.check_generation, []

    def late(*args: Any) -> None:
        if not skipped:  # the early check, outside any transaction
            skipped.append(args)
            return
        real(*args)

    monkeypatch.setattr(_runner, "check_generation", late)
    with pytest.raises(Aborted, match="generation 1 is older than accepted 5"):
        toy.endpoint.remove_network(n.remove())
    assert len(skipped) == 1
    assert toy.store.commits == commits
    assert not toy.endpoint.inspect("op-remove", "").found
    assert not toy.endpoint.inspect("", "att-1").fenced
    seen = toy.endpoint.inspect("op-connect", "")
    assert seen.state is OperationState.SUCCEEDED
    assert {e.state for e in seen.effects} == {EffectState.APPLIED}
    assert toy.toy.observable() == observed


def test_every_effect_is_applying_with_its_before_image_before_it_mutates(tmp_path: Path) -> None:
    seen: dict[str, tuple[str, str | None]] = {}

    class Witness(CrashPoints):
        """At each effect's first kernel call, what the committed journal says of it."""

        def hit(self, phase: Phase | str) -> None:
            super().hit(phase)
            point = self.reached[-1]
            op, effect = point.operation, point.effect
            first_call = point.phase.kind.is_kernel_call and point.phase.call == 1
            if point.hook == "ConnectNetwork" and first_call and effect not in seen:
                assert toy.store is not None
                rec = next(
                    e
                    for e in toy.store.read(lambda r: r.effects("toy/v1alpha1", op))
                    if e.effect_id == effect
                )
                seen[effect] = (rec.state.value, rec.before_json)

    toy = ToyNode(tmp_path, Witness())
    toy.endpoint.connect_network(n.connect())
    toy.close()
    assert set(seen) == set(CONNECT_EFFECTS)
    assert all(state == "Applying" and before for state, before in seen.values()), seen


def test_a_refused_capture_after_an_applied_effect_records_both(toy: ToyNode) -> None:
    # create-peer's target is someone else's: set-mtu's Applied must not be forgotten.
    toy.toy.create("data0-peer", "someone-else", 99)
    foreign = toy.toy.get("data0-peer")
    assert toy.store is not None
    before = toy.store.commits
    with pytest.raises(FailedPrecondition, match="not ours"):
        toy.endpoint.connect_network(n.connect())
    assert toy.store.commits - before == 3  # the intent, set-mtu's Advance, the failure
    seen = toy.endpoint.inspect("op-connect", "")
    assert seen.state is OperationState.FAILED
    states = {e.effect_id: (e.state, e.detail) for e in seen.effects}
    assert states["create-object"][0] is EffectState.APPLIED
    assert states["set-mtu"][0] is EffectState.APPLIED
    assert states["create-peer"][0] is EffectState.PLANNED
    assert "not ours" in states["create-peer"][1]
    # The administrator frees the name; the retry resumes with create-peer's own Applying.
    toy.toy.delete("data0-peer")
    count, names = commits_of(toy, lambda: toy.endpoint.connect_network(n.connect()))
    assert names == [
        after("ConnectNetwork", "op-connect", "create-peer", "applying"),
        after("ConnectNetwork", "op-connect", "link", "advance"),
        after("ConnectNetwork", "op-connect", "set-state", "advance"),
        after("ConnectNetwork", "op-connect", "-", "response"),
    ]
    assert count == len(names)
    assert toy.endpoint.remove_network(n.remove()).status is CleanupStatus.CLEANED
    assert toy.toy.get("data0-peer") is None
    assert foreign is not None


def test_a_refused_first_capture_is_recorded_with_the_intent(toy: ToyNode) -> None:
    toy.toy.create("data0", "someone-else", 99)
    assert toy.store is not None
    before = toy.store.commits
    with pytest.raises(FailedPrecondition, match="not ours"):
        toy.endpoint.connect_network(n.connect())
    assert toy.store.commits - before == 1
    seen = toy.endpoint.inspect("op-connect", "")
    assert seen.state is OperationState.FAILED
    assert [e.state for e in seen.effects] == [EffectState.PLANNED] * len(CONNECT_EFFECTS)
    assert "not ours" in seen.effects[0].detail
    assert toy.toy.mutations() == {"create:object:data0": 1}  # only the foreign object's


def test_a_removal_between_effects_keeps_the_applied_effect(
    toy: ToyNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The removal is seen before create-peer (the third check): set-mtu's Applied rides
    # with the failure, not with an Applying that never comes.
    checks = iter([False, False, True])
    monkeypatch.setattr(toy.runner._quiescing, "is_removing", lambda *_: next(checks))
    assert toy.store is not None
    before = toy.store.commits
    with pytest.raises(Aborted, match="stopped before create-peer"):
        toy.endpoint.connect_network(n.connect())
    assert toy.store.commits - before == 3  # the intent, set-mtu's Advance, the failure
    seen = toy.endpoint.inspect("op-connect", "")
    assert seen.state is OperationState.FAILED
    assert [e.state for e in seen.effects] == [
        EffectState.APPLIED,
        EffectState.APPLIED,
        EffectState.PLANNED,
        EffectState.PLANNED,
        EffectState.PLANNED,
    ]
    monkeypatch.undo()
    assert toy.endpoint.remove_network(n.remove()).status is CleanupStatus.CLEANED
    assert toy.toy.observable() == {"objects": {}, "settings": {}}


def test_a_failed_undo_is_noted_with_the_next_undoing_and_retried(
    toy: ToyNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    initial = toy.toy.observable()
    toy.endpoint.connect_network(n.connect())
    real = SetSetting.undo
    failures = iter([OSError(5, "the setting is busy")])

    def undo_once(self: SetSetting, ctx: Any, before: Any, outputs: Any) -> Any:
        if ctx.effect_id == "set-mtu":
            exc = next(failures, None)
            if exc is not None:
                raise exc
        return real(self, ctx, before, outputs)

    monkeypatch.setattr(SetSetting, "undo", undo_once)
    count, names = commits_of(toy, lambda: toy.endpoint.remove_network(n.remove()))
    assert count == len(CONNECT_EFFECTS) + 1  # the note needs no commit of its own
    assert names[-2:] == [
        after(
            "RemoveNetwork", "op-remove", "op-connect:create-object", "undoing"
        ),  # with set-mtu's note
        after("RemoveNetwork", "op-remove", "-", "cleanup"),
    ]
    seen = {e.effect_id: e for e in toy.endpoint.inspect("op-connect", "").effects}
    assert seen["set-mtu"].state is EffectState.UNDOING
    assert "undo failed: [Errno 5] the setting is busy" in seen["set-mtu"].detail
    assert {e.state for k, e in seen.items() if k != "set-mtu"} == {EffectState.UNDONE}
    # The retry undoes it again; its Undoing is durable already, so the record before it
    # holds only the retry's fence (a fence comes before every compensation).
    count, names = commits_of(toy, lambda: toy.endpoint.remove_network(n.remove()))
    assert names == [
        after("RemoveNetwork", "op-remove", "op-connect:set-mtu", "undoing"),
        after(
            "RemoveNetwork", "op-remove", "-", "cleanup"
        ),  # with set-mtu's Undone and op-connect's finish
    ]
    assert count == 2
    assert toy.toy.observable() == initial
