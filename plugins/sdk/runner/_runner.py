"""The durable operation runner (blueprint 5.2 and 5.5): the sequence, and the journal's I/O.

Order of a lifecycle call: (authentication happened in the host) -> validate the
envelope, locked contract, config and grants -> join a duplicate in flight ->
scope serialization -> terminal fence and generation/epoch checks -> replay a
matching completed operation, resume a matching interrupted one, or plan a new
intent -> commit the intent -> per effect: capture the before-image, persist it with
Applying (and the previous effect's result), apply -> validate exports -> persist the
last result with the replayable response -> return.

Cleanup marks the unit quiescing (running work stops, new work is refused), takes its
lock, then undoes the recorded plan in reverse from the journal alone (``_cleanup``);
its terminal fence rides with its first commit, before any compensation.

The parts: which state may follow which (``_transitions``), fencing and ordering
(``_fencing``), bounded per-unit locks and joins (``_locks``), checks before the
intent (``_validation``), recovery (``_recovery``), responses (``_codec``), the
endpoint view (``_endpoint``). This module sequences them and commits each boundary.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from .._errors import (
    Aborted,
    DataLoss,
    FailedPrecondition,
    NetworkPluginError,
    RegistrationError,
    Unavailable,
)
from .._plan import CleanupPlan, Plan, PlannedEffect, canonical_json
from .._registry import Registration, Registry
from .._requests import (
    CleanupRequest,
    CleanupResponse,
    CleanupStatus,
    ConnectRequest,
    ConnectResponse,
    EffectState,
    EffectStatus,
    EndpointInfo,
    InspectResponse,
    OperationState,
    PrepareRequest,
    PrepareResponse,
)
from .._types import Hook
from ..store import (
    NO_FAULTS,
    PLUGIN_JOURNAL,
    EffectRecord,
    JournalUnavailable,
    OperationRecord,
    Reader,
    ScopeRecord,
    StorageFaults,
    Store,
    Txn,
    WriterLock,
)
from ..telemetry import NO_METRICS, JournalGauges, Metrics
from . import _transitions as tr
from ._cleanup import Removal, Undo
from ._codec import cleanup_response, replay, response_json
from ._context import effect_context, load_json, recorded_outputs
from ._crash import NO_CRASH, Commit, CrashPoints
from ._effects import EffectContext, EffectExecutor, EffectRegistry
from ._endpoint import EndpointRunner
from ._fencing import (
    Quiescing,
    advance,
    check_fence,
    check_generation,
    check_same,
    check_single_attachment,
    fenced,
    unit_key,
)
from ._locks import Joins, UnitLocks
from ._observe import effect_transition
from ._recovery import recover
from ._semantic import Request, Semantics, semantics
from ._validation import output_problem, validate_plan

log = logging.getLogger(__name__)
T = TypeVar("T")

Respond = Callable[[Plan, Mapping[str, Mapping[str, Any]]], PrepareResponse | ConnectResponse]


_CLEANUP_HOOKS = (Hook.REMOVE_NETWORK, Hook.NODE_UNPREPARE)
_RESUMABLE = (EffectState.PLANNED, EffectState.APPLYING, EffectState.APPLIED)


def _write(t: Txn, effects: Sequence[EffectRecord], op: OperationRecord | None = None) -> None:
    """One commit's records: effects first, then the operation they complete (if any)."""
    for e in effects:
        t.update_effect(e)
    if op is not None:
        t.update_operation(op)


def _effect_message(planned: PlannedEffect, exc: BaseException) -> str:
    """What the journal records of an effect's failure."""
    if isinstance(exc, OSError):
        return f"{planned.id} ({planned.kind}): {exc}"
    return str(exc)


def _error_json(message: str, exc: BaseException | None) -> str:
    error = {"message": message}
    if isinstance(exc, OSError) and exc.errno:
        error["errno"] = str(exc.errno)
    return canonical_json(error)


def _raise_effect_error(planned: PlannedEffect, exc: Exception) -> NoReturn:
    """What the caller gets: a plugin's own error as is, a kernel error with its errno."""
    if isinstance(exc, OSError):
        raise FailedPrecondition(
            f"effect {planned.id} ({planned.kind}) failed: {exc}",
            details={"errno": str(exc.errno or 0), "effect": planned.id},
        ) from exc
    raise exc


class Runner:
    """Executes the hooks of one service's registrations over its single-writer store."""

    def __init__(
        self,
        store: Store | None,
        registrations: Sequence[Registration],
        effects: EffectRegistry,
        *,
        artifact_digest: str,
        boot_id: str,
        crash: CrashPoints = NO_CRASH,
        unavailable_reason: str = "",
        metrics: Metrics = NO_METRICS,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._unavailable = unavailable_reason or ("" if store is not None else "no journal")
        self._effects = effects
        self._artifact_digest = artifact_digest
        self._boot_id = boot_id
        self._crash = crash
        self._regs = {r.endpoint.socket_name: r for r in registrations}
        self._descriptors_json: dict[str, str] = {}  # socket name -> its descriptor, encoded
        self._ready = False
        self._lock = threading.Lock()
        # Each bounded by the work in flight, not by the scopes ever served.
        self._units = UnitLocks()
        self._joins = Joins()
        self._quiescing = Quiescing()
        # Records that failed their checksum, by (partition, stored scope or unit): those
        # scopes stay unavailable, and no unknown scope can be proven absent.
        self._damaged: dict[tuple[str, str], str] = {}
        for record in store.damaged if store is not None else ():
            self._damaged[(record.partition, record.scope)] = record.describe()
            log.error(
                "journal %s fails its checksum; its scope stays unavailable", record.describe()
            )
        self._undo = Undo(self._require_store, effects, crash, self._commit, metrics)
        self._check_effects()
        metrics.watch_journal(JournalGauges(self._fsyncs, self._quarantined_scopes))
        if effects.stuck_calls is not None:
            metrics.watch_kernel(effects.stuck_calls)

    @classmethod
    def open(
        cls,
        state_dir: Path,
        registrations: Registry | Sequence[Registration],
        effects: EffectRegistry,
        *,
        artifact_digest: str,
        boot_id: str,
        crash: CrashPoints = NO_CRASH,
        runtime_dir: Path | None = None,
        faults: StorageFaults = NO_FAULTS,
        metrics: Metrics = NO_METRICS,
        writer_wait_s: float = 0.0,
        writer_lock: WriterLock | None = None,
    ) -> Runner:
        """Open the journal in ``state_dir`` and build the runner that owns it.

        ``writer_wait_s`` and ``writer_lock``: ``Store.open``'s (a writer lock held by
        another process waited for, or one the caller took already).

        A journal that is damaged, lost or rolled back (``JournalUnavailable``) does not
        stop the service: the runner serves without a store, every scope answers
        ``DATA_LOSS`` with the reason (``unavailable_reason``), nothing is recreated.
        Anything else that prevents opening (another writer holds the lock, the disk is
        read-only or full) propagates: the caller cannot serve at all.
        An unsealed ``Registry`` is sealed first, so an invalid registration fails
        before the journal is touched.
        """
        if isinstance(registrations, Registry):
            registrations = registrations.seal()
        try:
            store: Store | None = Store.open(
                state_dir,
                runtime_dir=runtime_dir,
                faults=faults,
                writer_wait_s=writer_wait_s,
                lock=writer_lock,
            )
            reason = ""
        except JournalUnavailable as exc:
            store, reason = None, " ".join(str(exc).split())
        try:
            return cls(
                store,
                registrations,
                effects,
                artifact_digest=artifact_digest,
                boot_id=boot_id,
                crash=crash,
                unavailable_reason=reason,
                metrics=metrics,
            )
        except BaseException:
            if store is not None:
                store.close()
            raise

    def close(self) -> None:
        """A clean stop: commit what is queued and release the journal."""
        if self._store is not None:
            self._store.close()

    def abandon(self) -> None:
        """A simulated crash: release the journal without committing anything pending."""
        if self._store is not None:
            self._store.abandon()

    @property
    def unavailable_reason(self) -> str:
        """Why there is no journal to serve from ("" when there is one)."""
        return self._unavailable

    def _check_effects(self) -> None:
        for reg in self._regs.values():
            for hook, kinds in reg.descriptor.allowed_effects.items():
                missing = sorted(set(kinds) - self._effects.kinds)
                if missing:
                    raise RegistrationError(
                        f"plugin {reg.name!r}: {hook} effects {missing} have no registered executor"
                    )

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def store(self) -> Store | None:
        return self._store

    @property
    def metrics(self) -> Metrics:
        """Where this runner reports hooks, effects, recovery and commits."""
        return self._metrics

    def serving(self) -> bool:
        """Recovered, and the journal intact and writable: what the health service says.

        Narrower than ``ready`` (which GetInfo reports): a journal with damaged records
        still serves its other scopes, but it is not healthy until an operator looks.
        """
        store = self._store
        return self._ready and store is not None and not self._damaged and store.failure is None

    def _fsyncs(self) -> int:
        return self._store.commits if self._store is not None else 0

    def _quarantined_scopes(self) -> dict[str, int]:
        """Per state namespace: scopes whose latest finished cleanup said QUARANTINED."""
        store = self._store
        if store is None:
            return {}
        counts: dict[str, int] = {}
        for reg in self._regs.values():
            partition = reg.endpoint.state_namespace
            latest: dict[str, CleanupStatus] = {}
            for op in store.read(lambda r, p=partition: r.operations(p)):  # type: ignore[misc]
                if op.cleanup_status is not None and op.hook in _CLEANUP_HOOKS:
                    latest[op.scope] = op.cleanup_status
            counts[partition] = sum(s is CleanupStatus.QUARANTINED for s in latest.values())
        return counts

    @property
    def boot_id(self) -> str:
        """The node's boot id, stamped on every handle this runner mints."""
        return self._boot_id

    def in_memory_sizes(self) -> dict[str, int]:
        """How many entries each in-memory table holds: all bounded by the work in flight."""
        return {
            "unit_locks": len(self._units),
            "joins": len(self._joins),
            "quiescing": len(self._quiescing),
            "damaged": len(self._damaged),
        }

    def endpoint(self, socket_name: str) -> EndpointRunner:
        return EndpointRunner(self, self._regs[socket_name])

    def endpoints(self) -> list[tuple[str, EndpointRunner]]:
        return [(name, self.endpoint(name)) for name in self._regs]

    def recover(self) -> list[str]:
        """Reconcile every non-terminal record before serving; never mutates the kernel.

        Uncertain effects are probed and the observation recorded; interrupted
        operations become Failed so that a retry resumes them or a cleanup undoes
        them (repair only happens inside a lifecycle intent or its cleanup).
        """
        if self._store is None:
            return [f"journal unavailable: {self._unavailable}"]
        started = time.perf_counter()
        notes = recover(
            self._store, self._regs, self._effects, self._crash, self._commit, self._note_damage
        )
        self._ready = True
        seconds = time.perf_counter() - started
        self._metrics.recovery_finished(seconds)
        log.info("recovery done in %.3fs: %d observation(s)", seconds, len(notes))
        return notes

    # -- shared plumbing -----------------------------------------------------------------

    def _require_store(self) -> Store:
        if self._store is None:
            raise DataLoss(self._journal_fault())
        if not self._ready:
            raise Unavailable("recovering: not ready")
        self._store.ensure_writable()
        return self._store

    def _journal_fault(self) -> str:
        """Why no scope can be served, for good: the journal could not be opened."""
        if self._store is not None:
            return ""
        return (
            f"journal unavailable: {self._unavailable}; every scope stays unavailable "
            "until an operator restores the journal or reconciles the node"
        )

    def _check_intact(self, partition: str, scope: str, step: str) -> None:
        """A scope with a damaged record is never served: nothing in it can be trusted."""
        for key in (scope, unit_key(scope, step)):
            damage = self._damaged.get((partition, key))
            if damage is not None:
                raise JournalUnavailable(
                    self._require_store().state_dir,
                    f"{damage} fails its checksum; scope {scope} stays unavailable",
                )

    def _note_damage(self, partition: str, scope: str, error: JournalUnavailable) -> None:
        with self._lock:
            self._damaged.setdefault((partition, scope), error.reason)

    def _commit(self, commit: Commit, fn: Callable[[Txn], T]) -> T:
        """One journal write, bracketed by its before- and after-commit crash points."""
        # Recovery commits too, before the runner is ready: only the journal must exist.
        store = self._store
        if store is None:
            raise DataLoss(f"journal unavailable: {self._unavailable}")

        def timed() -> T:
            started = time.perf_counter()
            result = store.write(fn)
            self._metrics.journal_committed(commit, time.perf_counter() - started)
            return result

        return self._crash.commit(commit, timed)

    # -- create hooks ----------------------------------------------------------------------

    def run_create(
        self,
        reg: Registration,
        request: PrepareRequest | ConnectRequest,
        build_plan: Callable[[], Plan],
        respond: Respond,
    ) -> PrepareResponse | ConnectResponse:
        env = request.envelope
        partition = reg.endpoint.state_namespace
        self._require_store()
        self._check_intact(partition, env.scope, env.step)
        reg.validator.check(request.config_json)  # strict config before anything else
        meaning = semantics(partition, request)
        return self._joins.join_or_lead(
            (partition, env.operation_id),
            meaning.digest,
            lambda: self._create(reg, request, meaning, build_plan, respond),
        )

    def _create(
        self,
        reg: Registration,
        request: PrepareRequest | ConnectRequest,
        meaning: Semantics,
        build_plan: Callable[[], Plan],
        respond: Respond,
    ) -> PrepareResponse | ConnectResponse:
        env = request.envelope
        partition = reg.endpoint.state_namespace
        store = self._require_store()
        unit = unit_key(env.scope, env.step)
        # Reads shared until the next mutation (``EffectRegistry.shared_reads``): an
        # effect's apply asks again what its capture just read, with only our own commit
        # in between (e.g. the VF's netdev and the sandbox: over the VM lab's agent, a TCG
        # round trip each). Every mutation forgets, so each effect's capture, and what
        # follows a change of ours, reads the kernel; a resumed apply has no capture.
        with self._units.hold(partition, unit), self._effects.shared_reads():
            existing, scope = store.read(
                lambda r: (r.operation(partition, env.operation_id), r.scope(partition, unit))
            )
            check_fence(scope, env.scope)  # before replay: a removed scope never resurrects
            # Nor one a removal is waiting for: its fence rides with its first commit.
            self._quiescing.check(partition, unit, env.scope)
            if existing is not None:
                check_same(existing, env.hook, meaning.digest)
                if existing.state is OperationState.SUCCEEDED and existing.response_json:
                    return replay(existing.response_json, request)
                if (
                    existing.state is not OperationState.FAILED
                    and existing.state is not OperationState.RUNNING
                ):
                    raise Aborted(
                        f"operation {env.operation_id} is {existing.state.value}; it cannot resume"
                    )
                plan = Plan.from_json(json.loads(existing.plan_json or "{}"))
                with self._crash.scope(env.hook.value, env.operation_id):
                    return self._execute(existing, plan, respond)
            check_generation(scope, env.generation, env.coordinator_epoch, env.scope)
            plan = build_plan()
            validate_plan(reg, self._effects, env.hook, plan, request)
            record = self._new_record(reg, request, meaning, plan.canonical())
            effects = [
                EffectRecord(
                    partition=partition,
                    operation_id=env.operation_id,
                    effect_id=e.id,
                    position=i,
                    kind=e.kind,
                    state=EffectState.PLANNED,
                    before_json=None,
                    outputs_json=None,
                    detail="",
                    attempts=0,
                )
                for i, e in enumerate(plan.effects)
            ]

            # The first effect's before-image and Applying ride with the intent: capture
            # only reads, so nothing is mutated before that record is durable. A refusal
            # is recorded with the intent, as if the capture had run after it.
            refusal: tuple[str, Exception] | None = None
            if plan.effects:
                first = plan.effects[0]
                executor = self._effects.get(first.kind)
                assert executor is not None  # validated above
                ctx = effect_context(record, plan, first.id, {})
                try:
                    effects[0] = tr.start_applying(
                        effects[0], canonical_json(executor.capture(ctx))
                    )
                except (NetworkPluginError, OSError) as exc:
                    refusal = (_effect_message(first, exc), exc)
                    effects[0] = tr.noted(effects[0], refusal[0])

            def intent(t: Txn) -> OperationRecord:
                current = t.scope(partition, unit)
                # The single writer is the true serialization point: check the fence again,
                # and the mark of a removal that arrived meanwhile and waits for this lock.
                check_fence(current, env.scope)
                self._quiescing.check(partition, unit, env.scope)
                check_generation(current, env.generation, env.coordinator_epoch, env.scope)
                if isinstance(request, ConnectRequest) and request.allocation is not None:
                    check_single_attachment(t, partition, request.allocation.root_id, env.scope)
                t.put_scope(
                    advance(current, partition, unit, env.generation, env.coordinator_epoch)
                )
                inserted = t.insert_operation(record, effects)
                if refusal is not None:
                    t.update_operation(tr.failed(inserted, _error_json(*refusal)))
                return inserted

            with self._crash.scope(env.hook.value, env.operation_id):
                inserted = self._commit(Commit.INTENT, intent)
                if refusal is not None:
                    effect_transition(
                        self._metrics, inserted, effects[0], "capture_failed", refusal[0]
                    )
                    _raise_effect_error(plan.effects[0], refusal[1])
                if effects:
                    effect_transition(self._metrics, inserted, effects[0])  # its Applying
                # The effects as just committed (the intent wrote them as they are):
                # reading them back was a snapshot read per create for what is in hand.
                return self._execute(inserted, plan, respond, effects)

    def _execute(
        self,
        op: OperationRecord,
        plan: Plan,
        respond: Respond,
        recorded: Sequence[EffectRecord] | None = None,
    ) -> PrepareResponse | ConnectResponse:
        """Run the plan's unapplied effects, committing once per effect and once at the end.

        The record durable before an effect's first mutation (its before-image and
        Applying) also carries the previous effect's Applied; the last Applied goes with
        the response. Every way out of the loop writes the carried Applied too: a finished
        mutation is never left for recovery to rediscover.
        """
        if recorded is None:
            store = self._require_store()
            recorded = store.read(lambda r: r.effects(op.partition, op.operation_id))
        records = {r.effect_id: r for r in recorded}
        for planned in plan.effects:
            state = records[planned.id].state
            if state not in _RESUMABLE:
                # Checked before anything runs: a refusal changes nothing.
                raise Aborted(f"effect {planned.id} is {state.value}; operation cannot resume")
        outputs = recorded_outputs(records.values())
        carried: list[EffectRecord] = []  # Applied of the effect that just ran, not yet durable
        for planned in plan.effects:
            rec = records[planned.id]
            if rec.state is EffectState.APPLIED:
                continue
            if self._quiescing.is_removing(op.partition, unit_key(op.scope, op.step)):
                self._fail(
                    op, f"quiesced by a removal of scope {op.scope} before {planned.id}", carried
                )
                raise Aborted(
                    f"scope {op.scope} is being removed; "
                    f"{op.operation_id} stopped before {planned.id}"
                )
            executor = self._effects.get(planned.kind)
            assert executor is not None  # validated before the intent was committed
            ctx = effect_context(op, plan, planned.id, outputs)
            with self._crash.scope(op.hook.value, op.operation_id, planned.id):
                try:
                    was = rec.state
                    rec = self._start(rec, executor, ctx, carried)
                    if rec.state is not was:
                        effect_transition(self._metrics, op, rec)  # its Applying
                    carried = []
                    result = dict(executor.apply(ctx, load_json(rec.before_json)))
                except (NetworkPluginError, OSError) as exc:
                    message = _effect_message(planned, exc)
                    self._fail(op, message, carried, rec, exc)
                    applying = rec.state is EffectState.APPLYING  # else its capture refused
                    outcome = "apply_failed" if applying else "capture_failed"
                    effect_transition(self._metrics, op, rec, outcome, message)
                    _raise_effect_error(planned, exc)
                problem = output_problem(planned.outputs, result)
                if problem:
                    # Mutation happened but its result is unusable: uncertain, never forgotten.
                    self._fail(op, f"{planned.id}: {problem}", (), rec)
                    effect_transition(self._metrics, op, rec, "invalid_outputs", problem)
                    raise FailedPrecondition(
                        f"effect {planned.id} returned invalid outputs: {problem}"
                    )
                carried = [tr.applied(rec, canonical_json(result))]
                # Logged once the kernel changed; durable with the next commit.
                effect_transition(self._metrics, op, carried[0], "applied")
                outputs[planned.id] = result
        try:
            response = respond(plan, outputs)
        except Exception as exc:
            self._fail(op, f"no response: {exc}", carried)
            raise
        done = tr.succeeded(op, response_json(response))
        self._commit(Commit.RESPONSE, lambda t: _write(t, carried, done))
        return response

    def _start(
        self,
        rec: EffectRecord,
        executor: EffectExecutor,
        ctx: EffectContext,
        carried: Sequence[EffectRecord],
    ) -> EffectRecord:
        """Make ``rec`` Applying with its before-image durable, with ``carried``, in one commit.

        Capture only reads, so capturing before the commit mutates nothing: Applying is
        still durable before the effect's first mutation. An effect already Applying (a
        resumed attempt) has its before-image; only what is carried is written.
        """
        if rec.state is EffectState.PLANNED:
            started = tr.start_applying(rec, canonical_json(executor.capture(ctx)))
        else:
            started = rec
        writes = [*carried, started] if started is not rec else list(carried)
        if writes:
            name = Commit.ADVANCE if carried else Commit.APPLYING
            self._commit(name, lambda t: _write(t, writes))
        return started

    def _fail(
        self,
        op: OperationRecord,
        message: str,
        carried: Sequence[EffectRecord] = (),
        rec: EffectRecord | None = None,
        exc: BaseException | None = None,
    ) -> None:
        """Record the failure, with the carried Applied and ``rec`` noted, in one commit."""
        self._require_store()
        failed = tr.failed(op, _error_json(message, exc))
        noted = [tr.noted(rec, message)] if rec is not None else []
        self._commit(Commit.FAILURE, lambda t: _write(t, [*carried, *noted], failed))

    def _new_record(
        self,
        reg: Registration,
        request: Request,
        meaning: Semantics,
        plan_json: str,
        target: str = "",
    ) -> OperationRecord:
        """A new operation's journal record (its plan, or for cleanups the target it undoes)."""
        env = request.envelope
        partition = reg.endpoint.state_namespace
        return OperationRecord(
            partition=partition,
            operation_id=env.operation_id,
            hook=env.hook,
            scope=env.scope,
            step=env.step,
            semantic_digest=meaning.digest,
            artifact_digest=self._artifact_digest,
            contract_digest=reg.contract_digest,
            generation=env.generation,
            epoch=env.coordinator_epoch,
            request_json=meaning.request_json,
            plan_json=plan_json,
            state=OperationState.RUNNING,
            target_operation_id=target,
        )

    # -- cleanup hooks ---------------------------------------------------------------------

    def run_cleanup(
        self, reg: Registration, request: CleanupRequest, cleanup_plan: Callable[[], CleanupPlan]
    ) -> CleanupResponse:
        env = request.envelope
        partition = reg.endpoint.state_namespace
        self._require_store()
        self._check_intact(partition, env.scope, env.step)
        meaning = semantics(partition, request)
        return self._joins.join_or_lead(
            (partition, env.operation_id),
            meaning.digest,
            lambda: self._cleanup(reg, request, meaning, cleanup_plan),
        )

    def _cleanup(
        self,
        reg: Registration,
        request: CleanupRequest,
        meaning: Semantics,
        cleanup_plan: Callable[[], CleanupPlan],
    ) -> CleanupResponse:
        env = request.envelope
        partition = reg.endpoint.state_namespace
        unit = unit_key(env.scope, env.step)
        store = self._require_store()
        target = cleanup_plan()
        existing, accepted = store.read(
            lambda r: (r.operation(partition, env.operation_id), r.scope(partition, unit))
        )
        if existing is not None:
            check_same(existing, env.hook, meaning.digest)
            if existing.state is OperationState.CLEANED and existing.response_json:
                return cleanup_response(existing.response_json)
        record = existing or self._new_record(
            reg, request, meaning, canonical_json(target.to_json()), target.target_operation_id
        )

        def fence(t: Txn) -> OperationRecord:
            """The removal's opening, in the transaction of its first commit (``Removal``)."""
            current = t.scope(partition, unit)
            check_generation(current, env.generation, env.coordinator_epoch, env.scope)
            advanced = advance(current, partition, unit, env.generation, env.coordinator_epoch)
            t.put_scope(fenced(advanced, env.operation_id))
            return record if existing is not None else t.insert_operation(record, [])

        if self._damaged and not self._undo.targets(partition, env.scope, env.step, target):
            # A damaged record may be this scope's (its scope column may be what changed).
            raise JournalUnavailable(
                store.state_dir,
                f"scope {env.scope} has no record, but the journal has damaged records "
                f"({'; '.join(sorted(self._damaged.values())[:3])}), so absence proves nothing",
            )
        if target.target_hook is Hook.NODE_PREPARE:
            # A refusal must change nothing: check attachments before anything is written.
            self._undo.check_no_attachments(
                reg, partition, self._undo.targets(partition, env.scope, env.step, target)
            )
        # A stale removal is refused before it marks the unit (which would stop running
        # work): generation and epoch only grow, so what is stale now stays stale. The
        # check that decides is in the first commit's transaction, with the fence.
        check_generation(accepted, env.generation, env.coordinator_epoch, env.scope)
        removal = Removal(fence)
        # Running work on this unit stops at its next effect boundary, and new work is
        # refused (``Quiescing``) until the fence, in the first commit, is durable.
        with (
            self._crash.scope(env.hook.value, env.operation_id),
            self._quiescing.removing(partition, unit),
            self._units.hold(partition, unit),
            # Held, the unit's objects change only by this removal: an undo's re-read of
            # what the one before it read (with no mutation of ours between) is shared.
            self._effects.shared_reads(),
        ):
            response = self._undo.scope(reg, record, target, removal)
            answer = response_json(response)

            def finish(t: Txn) -> None:
                # What is carried (the fence, if nothing was committed before; the last
                # target's finish with its last result), then the response.
                cleanup_op = removal.write(t) or removal.opened
                assert cleanup_op is not None  # written now or by an earlier commit
                t.update_operation(tr.cleanup_finished(cleanup_op, response.status, answer))

            self._commit(Commit.CLEANUP, finish)
        return response

    # -- inspection --------------------------------------------------------------------------

    def inspect(self, reg: Registration, operation_id: str, scope: str) -> InspectResponse:
        store = self._require_store()
        partition = reg.endpoint.state_namespace

        def read(
            r: Reader,
        ) -> tuple[OperationRecord | None, list[EffectRecord], ScopeRecord | None]:
            op = r.operation(partition, operation_id) if operation_id else None
            if op is None and scope and not operation_id:
                ops = r.operations(partition, scope=scope)
                op = ops[-1] if ops else None
            effects = r.effects(partition, op.operation_id) if op else []
            fence_key = unit_key(op.scope, op.step) if op else scope
            return op, effects, r.scope(partition, fence_key)

        op, effects, scope_rec = store.read(read)
        if op is None and self._damaged:
            raise JournalUnavailable(
                store.state_dir,
                f"operation {operation_id or scope} has no record, but the journal has damaged "
                "records, so absence proves nothing",
            )
        if op is None:
            return InspectResponse(
                found=False, fenced=bool(scope_rec and scope_rec.fence_operation_id)
            )
        return InspectResponse(
            found=True,
            operation_id=op.operation_id,
            hook=op.hook.value,
            scope=op.scope,
            state=op.state,
            cleanup=CleanupStatus(op.cleanup_status) if op.cleanup_status else None,
            fenced=bool(scope_rec and scope_rec.fence_operation_id),
            generation=op.generation,
            effects=tuple(EffectStatus(e.effect_id, e.kind, e.state, e.detail) for e in effects),
            semantic_digest=op.semantic_digest,
        )

    def _descriptor_json(self, reg: Registration) -> str:
        """The registration's descriptor, encoded once: the host asks ``info()`` before
        every hook (its readiness gate), and the descriptor never changes."""
        encoded = self._descriptors_json.get(reg.endpoint.socket_name)
        if encoded is None:
            encoded = self._descriptors_json[reg.endpoint.socket_name] = canonical_json(
                reg.descriptor.to_json()
            )
        return encoded

    def info(self, reg: Registration) -> EndpointInfo:
        d = reg.descriptor
        return EndpointInfo(
            plugin_name=d.name,
            contract_version=d.contract_version,
            step_kinds=tuple(k.value for k in d.step_kinds),
            contract_digest=d.contract_digest,
            artifact_digest=self._artifact_digest,
            state_namespace=reg.endpoint.state_namespace,
            ready=self._ready and self._store is not None,
            descriptor_json=self._descriptor_json(reg),
            fault=self._journal_fault(),
            store_format=self._store.store_format if self._store is not None else 0,
            readable_store_formats=PLUGIN_JOURNAL.readable,
            effect_format=PLUGIN_JOURNAL.effect_format,
            executable_effect_formats=PLUGIN_JOURNAL.effect_formats,
            journal_effect_formats=self._store.effect_formats if self._store is not None else (),
            topology_config_version=d.config_schema_id,
        )
