"""The effect and operation state machines, table-driven: every allowed transition and
a sample of refused ones, each as a record the runner would journal."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from plugins.sdk import CleanupStatus, EffectState, Hook, OperationState
from plugins.sdk.runner import _transitions as tr
from plugins.sdk.store import EffectRecord, OperationRecord

E, Op = EffectState, OperationState
EV, OV = tr.EffectEvent, tr.OperationEvent

ALLOWED_EFFECT = [
    (E.PLANNED, EV.CAPTURE_AND_START, E.APPLYING),  # the before-image rides with Applying
    (E.APPLYING, EV.FINISH_APPLY, E.APPLIED),
    (E.PLANNED, EV.NEVER_APPLIED, E.UNDONE),
    (E.APPLYING, EV.START_UNDO, E.UNDOING),
    (E.APPLIED, EV.START_UNDO, E.UNDOING),
    (E.UNDOING, EV.FINISH_UNDO, E.UNDONE),
    (E.APPLYING, EV.QUARANTINE, E.QUARANTINED),
    (E.APPLIED, EV.QUARANTINE, E.QUARANTINED),
    (E.UNDOING, EV.QUARANTINE, E.QUARANTINED),
    *[(state, EV.NOTE, state) for state in E],
]

REFUSED_EFFECT = [
    (E.PLANNED, EV.FINISH_APPLY),
    (E.APPLYING, EV.CAPTURE_AND_START),  # a resumed effect keeps its first before-image
    (E.APPLIED, EV.CAPTURE_AND_START),
    (E.APPLIED, EV.NEVER_APPLIED),  # it was applied: undo it
    (E.APPLYING, EV.NEVER_APPLIED),
    (E.UNDONE, EV.START_UNDO),
    (E.UNDONE, EV.CAPTURE_AND_START),
    (E.QUARANTINED, EV.START_UNDO),  # quarantine is never overwritten
    (E.QUARANTINED, EV.FINISH_UNDO),
    (E.PLANNED, EV.QUARANTINE),
    (E.APPLIED, EV.FINISH_UNDO),  # Undoing must be durable first
]

CLEANUP_RECORD = (Op.RUNNING, Op.FAILED, Op.CLEANUP_PENDING, Op.QUARANTINED, Op.CLEANED)
FINISHES = [
    (OV.CLEANED, Op.CLEANED),
    (OV.PENDING, Op.CLEANUP_PENDING),
    (OV.QUARANTINED, Op.QUARANTINED),
]

ALLOWED_OPERATION = [
    (Op.RUNNING, OV.SUCCEED, Op.SUCCEEDED),
    (Op.FAILED, OV.SUCCEED, Op.SUCCEEDED),  # a resumed failure completes
    (Op.RUNNING, OV.FAIL, Op.FAILED),
    (Op.FAILED, OV.FAIL, Op.FAILED),
    (Op.RUNNING, OV.INTERRUPT, Op.FAILED),
    *[
        (state, OV.START_CLEANUP, Op.CLEANUP_PENDING)
        for state in (Op.RUNNING, Op.SUCCEEDED, Op.FAILED, Op.QUARANTINED)
    ],
    *[(state, event, target) for state in CLEANUP_RECORD for event, target in FINISHES],
]

REFUSED_OPERATION = [
    (Op.SUCCEEDED, OV.SUCCEED),  # a success is replayed, never rewritten
    (Op.SUCCEEDED, OV.FAIL),
    (Op.CLEANED, OV.SUCCEED),  # a cleaned operation never resurrects
    (Op.CLEANED, OV.START_CLEANUP),
    (Op.CLEANUP_PENDING, OV.SUCCEED),
    (Op.FAILED, OV.INTERRUPT),  # only Running is interrupted
    (Op.SUCCEEDED, OV.INTERRUPT),
    (Op.QUARANTINED, OV.FAIL),
    (Op.SUCCEEDED, OV.CLEANED),  # a target finishes only after its undo started
]


def effect(state: EffectState) -> EffectRecord:
    return EffectRecord(
        partition="p",
        operation_id="op-1",
        effect_id="e-1",
        position=0,
        kind="k/v1",
        state=state,
        before_json='{"b":1}',
        attempts=2,
    )


def operation(state: OperationState) -> OperationRecord:
    return OperationRecord(
        partition="p",
        operation_id="op-1",
        hook=Hook.CONNECT_NETWORK,
        scope="s",
        step="st",
        semantic_digest="d",
        artifact_digest="a",
        contract_digest="c",
        generation=1,
        epoch=1,
        request_json="{}",
        state=state,
    )


def test_the_tables_hold_exactly_the_listed_transitions() -> None:
    assert dict(tr.EFFECT_TRANSITIONS) == {(s, e): t for s, e, t in ALLOWED_EFFECT}
    assert dict(tr.OPERATION_TRANSITIONS) == {(s, e): t for s, e, t in ALLOWED_OPERATION}


@pytest.mark.parametrize(("state", "event", "target"), ALLOWED_EFFECT)
def test_allowed_effect_transition(state: EffectState, event: str, target: EffectState) -> None:
    assert tr.effect_next(state, tr.EffectEvent(event)) is target


@pytest.mark.parametrize(("state", "event"), REFUSED_EFFECT)
def test_refused_effect_transition(state: EffectState, event: str) -> None:
    with pytest.raises(tr.IllegalTransition, match=state.value):
        tr.effect_next(state, tr.EffectEvent(event))


@pytest.mark.parametrize(("state", "event", "target"), ALLOWED_OPERATION)
def test_allowed_operation_transition(
    state: OperationState, event: str, target: OperationState
) -> None:
    assert tr.operation_next(state, tr.OperationEvent(event)) is target


@pytest.mark.parametrize(("state", "event"), REFUSED_OPERATION)
def test_refused_operation_transition(state: OperationState, event: str) -> None:
    with pytest.raises(tr.IllegalTransition, match=state.value):
        tr.operation_next(state, tr.OperationEvent(event))


@pytest.mark.parametrize(
    ("make", "state", "expected"),
    [
        (
            lambda r: tr.start_applying(r, '{"x":1}'),
            E.PLANNED,
            {"state": E.APPLYING, "before_json": '{"x":1}', "attempts": 3},
        ),
        (
            lambda r: tr.applied(r, '{"p":{}}'),
            E.APPLYING,
            {"state": E.APPLIED, "outputs_json": '{"p":{}}'},
        ),
        (tr.never_applied, E.PLANNED, {"state": E.UNDONE, "detail": "never applied"}),
        (tr.undoing, E.APPLIED, {"state": E.UNDOING}),
        (lambda r: tr.undone(r, "gone"), E.UNDOING, {"state": E.UNDONE, "detail": "gone"}),
        (lambda r: tr.quarantined(r, "x"), E.UNDOING, {"state": E.QUARANTINED, "detail": "x"}),
        (lambda r: tr.noted(r, "seen"), E.APPLYING, {"state": E.APPLYING, "detail": "seen"}),
    ],
)
def test_effect_records(
    make: Callable[[EffectRecord], EffectRecord], state: EffectState, expected: dict[str, object]
) -> None:
    after = make(effect(state))
    assert {k: getattr(after, k) for k in expected} == expected
    assert (after.effect_id, after.kind) == ("e-1", "k/v1")  # identity never changes


def test_operation_records() -> None:
    done = tr.succeeded(operation(Op.FAILED), '{"r":1}')
    assert (done.state, done.response_json, done.error_json) == (Op.SUCCEEDED, '{"r":1}', None)
    assert tr.failed(operation(Op.RUNNING), '{"m":"x"}').error_json == '{"m":"x"}'
    assert tr.interrupted(operation(Op.RUNNING)).error_json == tr.INTERRUPTED_ERROR
    target = tr.cleanup_finished(tr.cleanup_started(operation(Op.SUCCEEDED)), CleanupStatus.PENDING)
    assert (target.state, target.cleanup_status) == (Op.CLEANUP_PENDING, CleanupStatus.PENDING)
    own = tr.cleanup_finished(operation(Op.RUNNING), CleanupStatus.CLEANED, '{"s":1}')
    assert (own.state, own.response_json) == (Op.CLEANED, '{"s":1}')
    with pytest.raises(tr.IllegalTransition):
        tr.succeeded(operation(Op.CLEANED), "{}")
