"""Recovery at startup: observe what a restart interrupted, never repair it.

Every effect left ``Applying`` or ``Undoing`` is probed and the observation recorded;
an operation left ``Running`` becomes ``Failed``. Repair happens only inside a
lifecycle call (a retry resumes, a cleanup undoes), so recovery never mutates the
kernel.

Recovery reads what it needs in one snapshot (the non-terminal operations by the
state index, their effects by their operation's key: two queries, not one per
operation), probes, then writes every observation and interruption in one
transaction: one fsync for the whole journal instead of one per record, which is
what made a start with many operations in flight slow. The probes run inside the
executors' ``shared_reads()``: the probes of one namespace share one open and one
dump of it (``plugins.kernel.ReadSharingKernel`` says why that is sound), not two
kernel requests each. That one transaction is recovery's one boundary, with a crash
point on each side (``Recovery/-/-/recovery.before-commit``, ``.after-commit``): a crash
before it leaves nothing of this recovery behind but kernel reads, and the next start
recovers again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from .._registry import Registration
from .._requests import EffectState, OperationState
from .._types import Hook
from ..store import EffectRecord, JournalUnavailable, OperationRecord, Store, Txn
from . import _transitions as tr
from ._context import load_json, recorded_context, recorded_outputs
from ._crash import RECOVERY_HOOK, UNSCOPED, Commit, CrashPoints
from ._effects import EffectRegistry

T = TypeVar("T")
Committer = Callable[[Commit, Callable[[Txn], T]], T]
DamageNote = Callable[[str, str, JournalUnavailable], None]

_CREATES = (Hook.NODE_PREPARE, Hook.CONNECT_NETWORK)
_UNCERTAIN = (EffectState.APPLYING, EffectState.UNDOING)


_Record = EffectRecord | OperationRecord
"""One record recovery writes: an effect's observation or an operation's interruption."""


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
    records: list[_Record] = []
    touched: dict[str, OperationRecord] = {}  # the operations with records to write
    partitions = {r.endpoint.state_namespace for r in registrations.values()}
    operations, by_operation, damaged = store.read(
        lambda r: (r.nonterminal_operations(), *r.nonterminal_effects())
    )
    with effects.shared_reads():  # the probes of one namespace share its dump
        for op in operations:
            if op.partition not in partitions:
                notes.append(
                    f"{op.partition}/{op.operation_id}: no registration can clean it; kept"
                )
                continue
            key = (op.partition, op.operation_id)
            damage = damaged.get(key)
            if damage is not None:  # a damaged effect record: never acted on
                note_damage(op.partition, op.scope, damage)
                notes.append(f"{op.operation_id}: not recovered, {damage.reason}")
                continue
            written = _recover_operation(effects, op, by_operation.get(key, []), notes)
            if written:
                touched[op.operation_id] = op
                records.extend(written)
    try:
        _write_together(crash, commit, records)
    except JournalUnavailable as exc:  # found damaged when writing: nothing was written
        for op in touched.values():
            note_damage(op.partition, op.scope, exc)
            notes.append(f"{op.operation_id}: not recovered, {exc.reason}")
    return notes


def _recover_operation(
    effects: EffectRegistry,
    op: OperationRecord,
    records: Sequence[EffectRecord],
    notes: list[str],
) -> list[_Record]:
    """Probe the operation's uncertain effects; the records that say what was seen."""
    uncertain = [rec for rec in records if rec.state in _UNCERTAIN]
    # Only a create's plan says what to probe; parsed only when something is uncertain.
    written = (
        _probed(effects, op, records, uncertain, notes)
        if uncertain and op.plan_json and op.hook in _CREATES
        else []
    )
    if op.state is OperationState.RUNNING:
        written.append(tr.interrupted(op))
        notes.append(f"{op.operation_id}: interrupted, marked Failed")
    return written


def _probed(
    effects: EffectRegistry,
    op: OperationRecord,
    records: Sequence[EffectRecord],
    uncertain: Sequence[EffectRecord],
    notes: list[str],
) -> list[_Record]:
    assert op.plan_json is not None
    plan = json.loads(op.plan_json)  # only the uncertain effects' entries are read
    outputs = recorded_outputs(records)
    written: list[_Record] = []
    for rec in uncertain:
        executor = effects.get(rec.kind)
        if executor is None:
            continue
        ctx = recorded_context(op, plan, rec.effect_id, outputs)
        try:
            seen = executor.probe(ctx, load_json(rec.before_json), outputs.get(rec.effect_id))
        except Exception as exc:  # a probe failure is an observation too
            seen_text = f"probe failed: {exc}"
        else:
            seen_text = f"probe at recovery: {seen.value}"
        notes.append(f"{op.operation_id}/{rec.effect_id}: {seen_text}")
        written.append(tr.noted(rec, seen_text))
    return written


def _write_together(
    crash: CrashPoints, commit: Committer[None], records: Sequence[_Record]
) -> None:
    """Every record in one transaction: one commit, so one pair of crash points
    (``Recovery/-/-/recovery.before-commit`` and ``.after-commit``). A crash at the first
    leaves none of these records written, at the second all of them; either way the next
    start recovers again.
    """
    if not records:
        return

    def write_all(t: Txn) -> None:
        for record in records:
            if isinstance(record, EffectRecord):
                t.update_effect(record)
            else:
                t.update_operation(record)

    with crash.scope(RECOVERY_HOOK, UNSCOPED):
        commit(Commit.RECOVERY, write_all)
