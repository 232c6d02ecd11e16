"""Recovery at startup: observe what a restart interrupted, never repair it.

Every effect left ``Applying`` or ``Undoing`` is probed and the observation recorded;
an operation left ``Running`` becomes ``Failed``. Repair happens only inside a
lifecycle call (a retry resumes, a cleanup undoes), so recovery never mutates the
kernel.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TypeVar

from .._plan import Plan
from .._registry import Registration
from .._requests import EffectState, OperationState
from .._types import Hook
from ..store import JournalUnavailable, OperationRecord, Store, Txn
from . import _transitions as tr
from ._context import effect_context, load_json, recorded_outputs
from ._crash import Commit, CrashPoints
from ._effects import EffectRegistry

T = TypeVar("T")
Committer = Callable[[Commit, Callable[[Txn], T]], T]
DamageNote = Callable[[str, str, JournalUnavailable], None]

RECOVERY_HOOK = "Recovery"
_CREATES = (Hook.NODE_PREPARE, Hook.CONNECT_NETWORK)
_UNCERTAIN = (EffectState.APPLYING, EffectState.UNDOING)


def recover(
    store: Store,
    registrations: Mapping[str, Registration],
    effects: EffectRegistry,
    crash: CrashPoints,
    commit: Committer[None],
    note_damage: DamageNote,
) -> list[str]:
    """Reconcile every non-terminal record before serving; return what was observed."""
    notes: list[str] = []
    partitions = {r.endpoint.state_namespace for r in registrations.values()}
    for op in store.read(lambda r: r.nonterminal_operations()):
        if op.partition not in partitions:
            notes.append(f"{op.partition}/{op.operation_id}: no registration can clean it; kept")
            continue
        try:
            notes.extend(_recover_operation(store, effects, crash, commit, op))
        except JournalUnavailable as exc:  # a damaged effect record: never acted on
            note_damage(op.partition, op.scope, exc)
            notes.append(f"{op.operation_id}: not recovered, {exc.reason}")
    return notes


def _recover_operation(
    store: Store,
    effects: EffectRegistry,
    crash: CrashPoints,
    commit: Committer[None],
    op: OperationRecord,
) -> list[str]:
    notes = []
    records = store.read(lambda r: r.effects(op.partition, op.operation_id))
    plan = (
        Plan.from_json(json.loads(op.plan_json)) if op.plan_json and op.hook in _CREATES else None
    )
    outputs = recorded_outputs(records)
    for rec in records:
        if rec.state not in _UNCERTAIN or plan is None:
            continue
        executor = effects.get(rec.kind)
        if executor is None:
            continue
        ctx = effect_context(op, plan, rec.effect_id, outputs)
        try:
            seen = executor.probe(ctx, load_json(rec.before_json), outputs.get(rec.effect_id))
        except Exception as exc:  # a probe failure is an observation too
            seen_text = f"probe failed: {exc}"
        else:
            seen_text = f"probe at recovery: {seen.value}"
        notes.append(f"{op.operation_id}/{rec.effect_id}: {seen_text}")
        observed = tr.noted(rec, seen_text)
        with crash.scope(RECOVERY_HOOK, op.operation_id, rec.effect_id):
            commit(Commit.PROBE, lambda t, o=observed: t.update_effect(o))  # type: ignore[misc]
    if op.state is OperationState.RUNNING:
        failed = tr.interrupted(op)
        with crash.scope(RECOVERY_HOOK, op.operation_id):
            commit(Commit.INTERRUPTED, lambda t: t.update_operation(failed))
        notes.append(f"{op.operation_id}: interrupted, marked Failed")
    return notes
