"""Undo of a recorded plan, in reverse, from the journal alone (docs/runner.md, Cleanup).

The runner marks the unit quiescing and holds its lock; this module decides, per
recorded effect, what its state allows (``_transitions``) and runs the executor's
``undo``, each commit carrying what came before it (``Removal``: the fence among them).
An unrecorded scope is answered by the intact journal and the node's evidence scan.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .._errors import FailedPrecondition
from .._plan import CleanupPlan, Plan
from .._registry import Registration
from .._requests import CleanupResponse, CleanupStatus, EffectState, EffectStatus, OperationState
from .._types import Hook
from ..store import EffectRecord, OperationRecord, Reader, Store, Txn
from ..telemetry import NO_METRICS, Metrics
from . import _transitions as tr
from ._context import effect_context, load_json, recorded_outputs
from ._crash import Commit, CrashPoints
from ._effects import EffectContext, EffectRegistry, UndoOutcome, scope_evidence
from ._fencing import allocation_root
from ._observe import effect_transition

T = TypeVar("T")

_SEVERITY = (CleanupStatus.CLEANED, CleanupStatus.PENDING, CleanupStatus.QUARANTINED)


def _outcome(before: EffectRecord, after: EffectRecord) -> str:
    """What one undo counts as in the metrics (an effect left Undoing: its undo failed)."""
    if after.state is EffectState.QUARANTINED:
        return "quarantined"
    if after.state is EffectState.UNDONE:
        return "never_applied" if before.state is EffectState.PLANNED else "undone"
    return "undo_failed"


def worse(a: CleanupStatus, b: CleanupStatus) -> CleanupStatus:
    return max(a, b, key=_SEVERITY.index)


class Undo:
    """Undoes recorded operations through the approved executors, one durable step at a time."""

    def __init__(
        self,
        store: Callable[[], Store],
        effects: EffectRegistry,
        crash: CrashPoints,
        commit: Callable[[Commit, Callable[[Txn], Any]], Any],
        metrics: Metrics = NO_METRICS,
    ) -> None:
        # Asked for each read and write: it re-checks readiness and clears a storage fault.
        self._store = store
        self._effects = effects
        self._crash = crash
        self._commit = commit
        self._metrics = metrics

    def targets(
        self, partition: str, scope: str, step: str, target: CleanupPlan
    ) -> list[OperationRecord]:
        """The recorded operations a cleanup undoes: its unit's, of the target hook."""
        return self._store().read(lambda r: _targets(r, partition, scope, step, target))

    def check_no_attachments(
        self, reg: Registration, partition: str, prepares: list[OperationRecord]
    ) -> None:
        roots = {
            json.loads(op.request_json).get("allocation", {}).get("root_id") for op in prepares
        }
        live = set(OperationState) - {OperationState.CLEANED}  # asked by state: not the history
        for op in self._store().read(
            lambda r: r.operations(partition, hook=Hook.CONNECT_NETWORK, states=live)
        ):
            root = allocation_root(op)
            if root in roots:
                raise FailedPrecondition(
                    f"{reg.name}: attachment {op.scope} of root {root} is not cleaned up yet"
                )

    def scope(
        self,
        reg: Registration,
        cleanup_op: OperationRecord,
        target: CleanupPlan,
        carried: Removal,
    ) -> CleanupResponse:
        """Undo every target; what is left to write is in ``carried``, for the cleanup's
        own final commit (``cleanup_op`` may not be recorded yet: it names the points)."""
        partition, scope = cleanup_op.partition, cleanup_op.scope

        def read(r: Reader) -> tuple[list[OperationRecord], dict[str, list[EffectRecord]]]:
            ops = _targets(r, partition, scope, cleanup_op.step, target)
            live = (op for op in ops if op.state is not OperationState.CLEANED)
            return ops, {op.operation_id: r.effects(partition, op.operation_id) for op in live}

        # The targets' effects are read in the same snapshot (it was one per target):
        # under the unit's lock only this cleanup writes them, and a target's commits
        # touch only its own effects, so a later snapshot would read the same records.
        targets, recorded = self._store().read(read)
        if target.target_hook is Hook.NODE_PREPARE:
            # Checked again under the unit's lock: an attachment may have raced the first check.
            self.check_no_attachments(reg, partition, targets)
        statuses: list[EffectStatus] = []
        overall = CleanupStatus.CLEANED
        for op in reversed(targets):
            if op.state is OperationState.CLEANED:
                continue
            op_status, effect_statuses = self._operation(
                cleanup_op, op, recorded[op.operation_id], carried
            )
            statuses.extend(effect_statuses)
            overall = worse(overall, op_status)
        if not targets:
            return self._unrecorded(partition, scope, target.target_hook)
        return CleanupResponse(overall, "", tuple(statuses))

    def _unrecorded(self, partition: str, scope: str, hook: Hook) -> CleanupResponse:
        """A scope this intact journal never recorded: CLEANED only if the node agrees.

        Intent is durable before every mutation, so an intact journal's silence proves no
        call of ours changed the kernel for this scope. The scan is the second witness,
        for what the journal cannot see (a journal lost together with its lease): an object
        carrying this plugin's evidence for the scope is never deleted on a guess.
        """
        missing = f"no recorded {hook.value} for scope {scope} in this journal"
        intact = "the journal is intact (every record verified; no acknowledged commit lost)"
        if self._effects.evidence is None:
            return CleanupResponse(
                CleanupStatus.CLEANED,
                f"{missing}; {intact}; these executors leave no evidence to scan for",
            )
        try:
            found = self._unrecorded_evidence(partition, scope)
        except Exception as exc:  # unknown is not absent
            return CleanupResponse(
                CleanupStatus.PENDING,
                f"{missing}, and the node could not be scanned for this plugin's ownership "
                f"evidence ({exc}); retry",
            )
        if found:
            return CleanupResponse(
                CleanupStatus.QUARANTINED,
                f"{missing}, but the node holds objects carrying this plugin's ownership "
                f"evidence for it: {'; '.join(found)}; left for an operator to reconcile",
            )
        return CleanupResponse(
            CleanupStatus.CLEANED,
            f"{missing}; {intact}, and no object on the node carries this plugin's "
            "ownership evidence for it",
        )

    def _unrecorded_evidence(self, partition: str, scope: str) -> list[str]:
        """Objects marked for ``scope`` whose marker no recorded effect of the scope owns."""
        scan = self._effects.evidence
        assert scan is not None

        def recorded(r: Reader) -> set[str]:
            markers = set()
            for op in r.operations(partition, scope=scope):
                for e in r.effects(partition, op.operation_id):
                    ctx = EffectContext(partition, op.operation_id, e.effect_id, scope, op.step, {})
                    markers.add(ctx.marker)
            return markers

        known = self._store().read(recorded)
        return [
            what for marker, what in scan(scope_evidence(partition, scope)) if marker not in known
        ]

    def _operation(
        self,
        cleanup_op: OperationRecord,
        op: OperationRecord,
        records: list[EffectRecord],
        carried: Removal,
    ) -> tuple[CleanupStatus, list[EffectStatus]]:
        self._store()  # re-checks readiness and clears a storage fault, as a read did
        plan = Plan.from_json(json.loads(op.plan_json or "{}"))
        outputs = recorded_outputs(records)
        if op.state is not OperationState.CLEANUP_PENDING:
            # Visible to InspectOperation (and recovery) until every effect is undone; durable
            # with the first Undoing, so before any compensation of this target.
            op = carried.operation(tr.cleanup_started(op))
        status = CleanupStatus.CLEANED
        result: list[EffectStatus] = []
        for rec in reversed(records):
            after, outcome = self._effect(cleanup_op, op, plan, rec, outputs, carried)
            status = worse(status, outcome)
            result.append(EffectStatus(after.effect_id, after.kind, after.state, after.detail))
        result.reverse()
        # With its last result, in the next target's first Undoing or the cleanup's response.
        carried.operation(tr.cleanup_finished(op, status))
        return status, result

    def _effect(
        self,
        cleanup_op: OperationRecord,
        op: OperationRecord,
        plan: Plan,
        rec: EffectRecord,
        outputs: Mapping[str, Mapping[str, Any]],
        carried: Removal,
    ) -> tuple[EffectRecord, CleanupStatus]:
        """Undo one effect; its result is carried to the next commit (``Removal``)."""
        after, status = self._undo_effect(cleanup_op, op, plan, rec, outputs, carried)
        if after is not rec:  # an effect already Undone or Quarantined is left as it is
            reason = after.detail if status is not CleanupStatus.CLEANED else ""
            effect_transition(self._metrics, op, after, _outcome(rec, after), reason)
        return after, status

    def _undo_effect(
        self,
        cleanup_op: OperationRecord,
        op: OperationRecord,
        plan: Plan,
        rec: EffectRecord,
        outputs: Mapping[str, Mapping[str, Any]],
        carried: Removal,
    ) -> tuple[EffectRecord, CleanupStatus]:
        if rec.state is EffectState.UNDONE:
            return rec, CleanupStatus.CLEANED
        if rec.state is EffectState.QUARANTINED:
            return rec, CleanupStatus.QUARANTINED
        if rec.state is EffectState.PLANNED:
            # Applying is made durable before any mutation, so nothing was applied.
            return carried.add(tr.never_applied(rec)), CleanupStatus.CLEANED
        executor = self._effects.get(rec.kind)
        if executor is None:
            q = tr.quarantined(rec, f"no executor for {rec.kind}")
            return carried.add(q), CleanupStatus.QUARANTINED
        ctx = effect_context(op, plan, rec.effect_id, outputs)
        named = self._crash.scope(
            cleanup_op.hook.value, cleanup_op.operation_id, f"{op.operation_id}:{rec.effect_id}"
        )
        with named:
            starting = rec.state is not EffectState.UNDOING
            if starting:
                rec = carried.add(tr.undoing(rec))
            if carried:
                # Undoing durable before the first compensation, with what came before it
                # (the removal's fence and record, if this is its first commit).
                carried.committed(self._commit(Commit.UNDOING, carried.write))
            if starting:
                effect_transition(self._metrics, op, rec)  # its Undoing, now durable
            try:
                result = executor.undo(ctx, load_json(rec.before_json), outputs.get(rec.effect_id))
            except Exception as exc:  # stays Undoing: a later cleanup retries it
                return carried.add(tr.noted(rec, f"undo failed: {exc}")), CleanupStatus.PENDING
            if result.outcome is UndoOutcome.QUARANTINED:
                return carried.add(tr.quarantined(rec, result.detail)), CleanupStatus.QUARANTINED
            done = tr.undone(rec, result.detail or result.outcome.value)
            return carried.add(done), CleanupStatus.CLEANED


def _targets(
    r: Reader, partition: str, scope: str, step: str, target: CleanupPlan
) -> list[OperationRecord]:
    return [
        op
        for op in r.operations(partition, scope=scope, hook=target.target_hook)
        if op.step == step
        and (not target.target_operation_id or op.operation_id == target.target_operation_id)
    ]


class Removal:
    """What a removal's next commit carries: none of it needs a commit of its own.

    The commits of a removal are the ones durable before a compensation (an effect's
    Undoing) and its final record (its response). Everything else rides with the next:

    * its opening (the fence, the generation/epoch check, the cleanup's record), with its
      first commit. Until then it has changed nothing in the kernel: a crash before it
      loses only a removal nobody was answered, which the coordinator retries; while the
      process lives, the unit's quiescing mark refuses what the fence would.
    * a target's start of cleanup, with its first Undoing.
    * an effect's Undone (or Quarantined, or a failed undo's note), with the next Undoing
      or the cleanup's response: a crash before that commit leaves the effect Undoing (a
      retry undoes it again: undo verifies and is idempotent), or Applied/Planned with
      nothing done.
    * a target's finish, likewise: nothing mutates between it and the next commit.
    """

    def __init__(self, opening: Callable[[Txn], OperationRecord]) -> None:
        self._opening: Callable[[Txn], OperationRecord] | None = opening
        self.opened: OperationRecord | None = None  # the cleanup's record, once durable
        self.effects: list[EffectRecord] = []
        self.operations: dict[str, OperationRecord] = {}  # the targets', latest by id

    def __bool__(self) -> bool:
        return self._opening is not None or bool(self.effects) or bool(self.operations)

    def add(self, rec: EffectRecord) -> EffectRecord:
        self.effects.append(rec)
        return rec

    def operation(self, op: OperationRecord) -> OperationRecord:
        self.operations[op.operation_id] = op
        return op

    def write(self, t: Txn) -> OperationRecord | None:
        """Everything carried, the opening first; the cleanup's record if it opened now.

        The opening's refusal (a stale generation or epoch) raises before anything is
        written, so the whole transaction changes nothing.
        """
        opened = self._opening(t) if self._opening is not None else None
        for e in self.effects:
            t.update_effect(e)
        for op in self.operations.values():
            t.update_operation(op)
        return opened

    def committed(self, opened: OperationRecord | None) -> None:
        """What the last ``write`` returned is durable: nothing it carried is carried now."""
        if self._opening is not None:
            assert opened is not None
            self._opening, self.opened = None, opened
        self.effects, self.operations = [], {}
