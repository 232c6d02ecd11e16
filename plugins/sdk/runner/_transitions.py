"""The effect and operation state machines as tables: which state follows which, on what.

Pure: no I/O, no locks. The runner decides *when* an event happens (after a capture,
before a mutation, after an undo) and journals the record these functions return;
the tables decide *whether* the event may happen in the recorded state. A refused
transition is a bug in the runner (``IllegalTransition``), never a client error:
the runner checks resumability itself and answers a client before asking for one.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from .._plan import canonical_json
from .._requests import CleanupStatus, EffectState, OperationState
from ..store import EffectRecord, OperationRecord


class IllegalTransition(Exception):
    """The runner asked for a transition its tables do not allow."""


class EffectEvent(enum.StrEnum):
    # The before-image and Applying in one record, durable before the first mutation
    # (counts an attempt). Capture is read-only, so nothing was mutated before it.
    CAPTURE_AND_START = "capture-and-start-apply"
    FINISH_APPLY = "finish-apply"  # apply returned the outputs
    NEVER_APPLIED = "never-applied"  # cleanup: Applying was never durable, so nothing ran
    START_UNDO = "start-undo"  # durable before the first compensation
    FINISH_UNDO = "finish-undo"  # undo verified absence or restoration
    QUARANTINE = "quarantine"  # ownership or state cannot be verified: left alone
    NOTE = "note"  # only the detail changes (a probe's observation, a failure)


_E = EffectState
_ANY_EFFECT = tuple(EffectState)

EFFECT_TRANSITIONS: Final[Mapping[tuple[EffectState, EffectEvent], EffectState]] = MappingProxyType(
    {
        (_E.PLANNED, EffectEvent.CAPTURE_AND_START): _E.APPLYING,
        (_E.APPLYING, EffectEvent.FINISH_APPLY): _E.APPLIED,
        (_E.PLANNED, EffectEvent.NEVER_APPLIED): _E.UNDONE,
        (_E.APPLYING, EffectEvent.START_UNDO): _E.UNDOING,
        (_E.APPLIED, EffectEvent.START_UNDO): _E.UNDOING,
        (_E.UNDOING, EffectEvent.FINISH_UNDO): _E.UNDONE,
        # With no executor left to undo it, an applied effect goes straight to quarantine.
        (_E.APPLYING, EffectEvent.QUARANTINE): _E.QUARANTINED,
        (_E.APPLIED, EffectEvent.QUARANTINE): _E.QUARANTINED,
        (_E.UNDOING, EffectEvent.QUARANTINE): _E.QUARANTINED,
        **{(state, EffectEvent.NOTE): state for state in _ANY_EFFECT},
    }
)


class OperationEvent(enum.StrEnum):
    SUCCEED = "succeed"  # the response is recorded (a resumed failure may succeed)
    FAIL = "fail"  # an effect failed, or a removal stopped the run
    INTERRUPT = "interrupt"  # recovery: a restart interrupted it
    START_CLEANUP = "start-cleanup"  # a target's undo begins (visible to InspectOperation)
    CLEANED = "cleaned"  # cleanup finished: every effect undone or verified absent
    PENDING = "pending"  # cleanup finished with an undo to retry later
    QUARANTINED = "quarantined"  # cleanup finished with something left for an operator


_O = OperationState
_CLEANUP_FINISHES = (OperationEvent.CLEANED, OperationEvent.PENDING, OperationEvent.QUARANTINED)
_FINISHED_STATE = {
    OperationEvent.CLEANED: _O.CLEANED,
    OperationEvent.PENDING: _O.CLEANUP_PENDING,
    OperationEvent.QUARANTINED: _O.QUARANTINED,
}
# A cleanup operation is finished from wherever the previous attempt left it; a target
# is finished only after its undo started.
_CLEANUP_RECORD_STATES = (_O.RUNNING, _O.FAILED, _O.CLEANUP_PENDING, _O.QUARANTINED, _O.CLEANED)

OPERATION_TRANSITIONS: Final[Mapping[tuple[OperationState, OperationEvent], OperationState]] = (
    MappingProxyType(
        {
            (_O.RUNNING, OperationEvent.SUCCEED): _O.SUCCEEDED,
            (_O.FAILED, OperationEvent.SUCCEED): _O.SUCCEEDED,
            (_O.RUNNING, OperationEvent.FAIL): _O.FAILED,
            (_O.FAILED, OperationEvent.FAIL): _O.FAILED,
            (_O.RUNNING, OperationEvent.INTERRUPT): _O.FAILED,
            **{
                (state, OperationEvent.START_CLEANUP): _O.CLEANUP_PENDING
                for state in (_O.RUNNING, _O.SUCCEEDED, _O.FAILED, _O.QUARANTINED)
            },
            **{
                (state, event): _FINISHED_STATE[event]
                for state in _CLEANUP_RECORD_STATES
                for event in _CLEANUP_FINISHES
            },
        }
    )
)


def effect_next(state: EffectState, event: EffectEvent) -> EffectState:
    target = EFFECT_TRANSITIONS.get((state, event))
    if target is None:
        raise IllegalTransition(f"effect {state.value} does not allow {event.value}")
    return target


def operation_next(state: OperationState, event: OperationEvent) -> OperationState:
    target = OPERATION_TRANSITIONS.get((state, event))
    if target is None:
        raise IllegalTransition(f"operation {state.value} does not allow {event.value}")
    return target


def cleanup_event(status: CleanupStatus) -> OperationEvent:
    """How a cleanup's overall status finishes an operation."""
    return {
        CleanupStatus.CLEANED: OperationEvent.CLEANED,
        CleanupStatus.PENDING: OperationEvent.PENDING,
        CleanupStatus.QUARANTINED: OperationEvent.QUARANTINED,
    }[status]


# -- the records each event produces -------------------------------------------------------


def _effect(rec: EffectRecord, event: EffectEvent, **changes: Any) -> EffectRecord:
    return dataclasses.replace(rec, state=effect_next(rec.state, event), **changes)


def start_applying(rec: EffectRecord, before_json: str) -> EffectRecord:
    """Planned -> Applying with the before-image the capture just read."""
    return _effect(
        rec, EffectEvent.CAPTURE_AND_START, before_json=before_json, attempts=rec.attempts + 1
    )


def applied(rec: EffectRecord, outputs_json: str) -> EffectRecord:
    return _effect(rec, EffectEvent.FINISH_APPLY, outputs_json=outputs_json)


def never_applied(rec: EffectRecord) -> EffectRecord:
    return _effect(rec, EffectEvent.NEVER_APPLIED, detail="never applied")


def undoing(rec: EffectRecord) -> EffectRecord:
    return _effect(rec, EffectEvent.START_UNDO)


def undone(rec: EffectRecord, detail: str) -> EffectRecord:
    return _effect(rec, EffectEvent.FINISH_UNDO, detail=detail)


def quarantined(rec: EffectRecord, detail: str) -> EffectRecord:
    return _effect(rec, EffectEvent.QUARANTINE, detail=detail)


def noted(rec: EffectRecord, detail: str) -> EffectRecord:
    return _effect(rec, EffectEvent.NOTE, detail=detail)


def _operation(op: OperationRecord, event: OperationEvent, **changes: Any) -> OperationRecord:
    return dataclasses.replace(op, state=operation_next(op.state, event), **changes)


def succeeded(op: OperationRecord, response_json: str) -> OperationRecord:
    return _operation(op, OperationEvent.SUCCEED, response_json=response_json, error_json=None)


def failed(op: OperationRecord, error_json: str) -> OperationRecord:
    return _operation(op, OperationEvent.FAIL, error_json=error_json)


INTERRUPTED_ERROR: Final = canonical_json(
    {"message": "interrupted by a restart; retry resumes, cleanup undoes"}
)


def interrupted(op: OperationRecord) -> OperationRecord:
    return _operation(op, OperationEvent.INTERRUPT, error_json=INTERRUPTED_ERROR)


def cleanup_started(op: OperationRecord) -> OperationRecord:
    return _operation(op, OperationEvent.START_CLEANUP)


def cleanup_finished(
    op: OperationRecord, status: CleanupStatus, response_json: str | None = None
) -> OperationRecord:
    """A target (no response of its own) or the cleanup operation itself (its response)."""
    if response_json is None:
        return _operation(op, cleanup_event(status), cleanup_status=status)
    return _operation(op, cleanup_event(status), cleanup_status=status, response_json=response_json)
