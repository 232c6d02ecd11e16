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
kernel requests each. Each record keeps its own
crash points (``probe``, ``interrupted``); a crash at any of them leaves nothing of
this recovery behind but kernel reads, and the next start recovers again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TypeVar

from .._registry import Registration
from .._requests import EffectState, OperationState
from .._types import Hook
from ..store import EffectRecord, JournalUnavailable, OperationRecord, Store, Txn
from . import _transitions as tr
from ._context import load_json, recorded_context, recorded_outputs
from ._crash import Commit, CrashPoints, Phase, PhaseKind
from ._effects import EffectRegistry

T = TypeVar("T")
Committer = Callable[[Commit, Callable[[Txn], T]], T]
DamageNote = Callable[[str, str, JournalUnavailable], None]

RECOVERY_HOOK = "Recovery"
_CREATES = (Hook.NODE_PREPARE, Hook.CONNECT_NETWORK)
_UNCERTAIN = (EffectState.APPLYING, EffectState.UNDOING)


@dataclass(frozen=True)
class _Record:
    """One record recovery writes: an effect's observation or an operation's interruption."""

    commit: Commit
    operation_id: str
    effect_id: str | None
    record: EffectRecord | OperationRecord

    def scope(self, crash: CrashPoints) -> AbstractContextManager[None]:
        if self.effect_id is None:
            return crash.scope(RECOVERY_HOOK, self.operation_id)
        return crash.scope(RECOVERY_HOOK, self.operation_id, self.effect_id)

    def write(self, t: Txn) -> None:
        if isinstance(self.record, EffectRecord):
            t.update_effect(self.record)
        else:
            t.update_operation(self.record)


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
        written.append(_Record(Commit.INTERRUPTED, op.operation_id, None, tr.interrupted(op)))
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
        written.append(
            _Record(Commit.PROBE, op.operation_id, rec.effect_id, tr.noted(rec, seen_text))
        )
    return written


def _write_together(
    crash: CrashPoints, commit: Committer[None], records: Sequence[_Record]
) -> None:
    """Every record in one transaction, each between its own before- and after-commit points.

    The runner's committer brackets the one write with the last record's points; the
    others' are hit around it, so the points reached are the same names as when every
    record had a commit of its own, in this order: each before-commit, the write, each
    after-commit. A crash at any of them leaves none of these records written (before)
    or all of them (after).
    """
    if not records:
        return
    *others, last = records

    def write_all(t: Txn) -> None:
        for record in records:
            record.write(t)

    for record in others:
        with record.scope(crash):
            crash.at(Phase.commit(PhaseKind.BEFORE_COMMIT, record.commit))
    with last.scope(crash):
        commit(last.commit, write_all)
    for record in others:
        with record.scope(crash):
            crash.at(Phase.commit(PhaseKind.AFTER_COMMIT, record.commit))
