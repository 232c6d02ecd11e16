"""The durable operation runner (blueprint 5.2 and 5.5).

Order of a lifecycle call: (authentication happened in the host) -> validate the
envelope, locked contract, config and grants -> join a duplicate in flight ->
scope serialization -> terminal fence and generation/epoch checks -> replay a
matching completed operation, resume a matching interrupted one, or plan a new
intent -> commit the intent -> per effect: capture and persist the before-image,
persist Applying, apply, persist the observed result -> validate exports ->
persist the replayable response -> return.

Cleanup writes a durable terminal fence first, quiesces work on the scope, then
undoes the recorded plan in reverse from the journal alone.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from .._calls import ConnectCall, PrepareCall, RemoveCall, UnprepareCall
from .._descriptor import PortSpec
from .._errors import (
    Aborted,
    AlreadyExists,
    DataLoss,
    FailedPrecondition,
    InvalidArgument,
    NetworkPluginError,
    PlanError,
    RegistrationError,
    Unavailable,
    WrongStepKind,
)
from .._plan import CleanupPlan, Plan, canonical_json, digest, thaw_json
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
from .._types import Hook, PreparedState, ResourceHandle, StepKind
from ..store import (
    NO_FAULTS,
    EffectRecord,
    JournalUnavailable,
    OperationRecord,
    Reader,
    ScopeRecord,
    StorageFaults,
    Store,
    Txn,
)
from ._crash import NO_CRASH, CrashPoints
from ._effects import EffectContext, EffectRegistry, UndoOutcome, scope_evidence
from ._semantic import Request, request_semantics, semantic_digest, to_json_value

log = logging.getLogger(__name__)
T = TypeVar("T")

_ROOT_HOOKS = (Hook.NODE_PREPARE, Hook.NODE_UNPREPARE)
_UNDO_NEEDED = (EffectState.APPLYING, EffectState.APPLIED, EffectState.UNDOING)


class _InFlight:
    """A running operation that duplicates of the same identity join."""

    def __init__(self, semantic: str) -> None:
        self.semantic = semantic
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


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
    ) -> None:
        self._store = store
        self._unavailable = unavailable_reason or ("" if store is not None else "no journal")
        self._effects = effects
        self._artifact_digest = artifact_digest
        self._boot_id = boot_id
        self._crash = crash
        self._regs = {r.endpoint.socket_name: r for r in registrations}
        self._ready = False
        self._lock = threading.Lock()
        self._scope_locks: dict[tuple[str, str], threading.Lock] = {}
        self._inflight: dict[tuple[str, str], _InFlight] = {}
        self._fenced: set[tuple[str, str]] = set()
        # Records that failed their checksum, by (partition, stored scope or unit): those
        # scopes stay unavailable, and no unknown scope can be proven absent.
        self._damaged: dict[tuple[str, str], str] = {}
        for record in store.damaged if store is not None else ():
            self._damaged[(record.partition, record.scope)] = record.describe()
            log.error(
                "journal %s fails its checksum; its scope stays unavailable", record.describe()
            )
        self._check_effects()

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
    ) -> Runner:
        """Open the journal in ``state_dir`` and build the runner that owns it.

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
            store: Store | None = Store.open(state_dir, runtime_dir=runtime_dir, faults=faults)
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
        notes: list[str] = []
        partitions = {r.endpoint.state_namespace: r for r in self._regs.values()}
        for op in self._store.read(lambda r: r.nonterminal_operations()):
            if op.partition not in partitions:
                notes.append(
                    f"{op.partition}/{op.operation_id}: no registration can clean it; kept"
                )
                continue
            try:
                notes.extend(self._recover_operation(op))
            except JournalUnavailable as exc:  # a damaged effect record: never acted on
                self._note_damage(op.partition, op.scope, exc)
                notes.append(f"{op.operation_id}: not recovered, {exc.reason}")
        self._ready = True
        return notes

    def _recover_operation(self, op: OperationRecord) -> list[str]:
        assert self._store is not None
        notes = []
        records = self._store.read(lambda r: r.effects(op.partition, op.operation_id))
        creates = (Hook.NODE_PREPARE, Hook.CONNECT_NETWORK)
        plan = (
            Plan.from_json(json.loads(op.plan_json))
            if op.plan_json and op.hook in creates
            else None
        )
        outputs = _recorded_outputs(records)
        for rec in records:
            if rec.state not in (EffectState.APPLYING, EffectState.UNDOING) or plan is None:
                continue
            executor = self._effects.get(rec.kind)
            if executor is None:
                continue
            ctx = _context(op, plan, rec.effect_id, outputs)
            try:
                seen = executor.probe(ctx, _load(rec.before_json), outputs.get(rec.effect_id))
            except Exception as exc:  # a probe failure is an observation too
                seen_text = f"probe failed: {exc}"
            else:
                seen_text = f"probe at recovery: {seen.value}"
            notes.append(f"{op.operation_id}/{rec.effect_id}: {seen_text}")
            updated = dataclasses.replace(rec, detail=seen_text)
            with self._crash.scope("Recovery", op.operation_id, rec.effect_id):
                self._commit("probe", lambda t, u=updated: t.update_effect(u))  # type: ignore[misc]
        if op.state is OperationState.RUNNING:
            failed = dataclasses.replace(
                op,
                state=OperationState.FAILED,
                error_json=canonical_json(
                    {"message": "interrupted by a restart; retry resumes, cleanup undoes"}
                ),
            )
            with self._crash.scope("Recovery", op.operation_id):
                self._commit("interrupted", lambda t: t.update_operation(failed))
            notes.append(f"{op.operation_id}: interrupted, marked Failed")
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

    @contextmanager
    def _scope(self, partition: str, scope: str) -> Iterator[None]:
        with self._lock:
            lock = self._scope_locks.setdefault((partition, scope), threading.Lock())
        with lock:
            yield

    def _join_or_lead(self, key: tuple[str, str], semantic: str, work: Callable[[], T]) -> T:
        with self._lock:
            running = self._inflight.get(key)
            leader = running is None
            if running is None:
                running = self._inflight[key] = _InFlight(semantic)
        if not leader:
            if running.semantic != semantic:
                raise AlreadyExists(f"operation {key[1]} is running with different semantics")
            running.done.wait()
            if running.error is not None:
                raise running.error
            return running.result  # type: ignore[no-any-return]
        try:
            result = work()
            running.result = result
            return result
        except BaseException as exc:
            running.error = exc
            raise
        finally:
            with self._lock:
                del self._inflight[key]
            running.done.set()

    def _commit(self, phase: str, fn: Callable[[Txn], T]) -> T:
        # Recovery commits too, before the runner is ready: only the journal must exist.
        store = self._store
        if store is None:
            raise DataLoss(f"journal unavailable: {self._unavailable}")
        self._crash.hit(f"{phase}.before-commit")
        result = store.write(fn)
        self._crash.hit(f"{phase}.after-commit")
        return result

    # -- create hooks ----------------------------------------------------------------------

    def run_create(
        self,
        reg: Registration,
        request: PrepareRequest | ConnectRequest,
        build_plan: Callable[[], Plan],
        respond: Callable[
            [Plan, Mapping[str, Mapping[str, Any]]], PrepareResponse | ConnectResponse
        ],
    ) -> PrepareResponse | ConnectResponse:
        env = request.envelope
        partition = reg.endpoint.state_namespace
        self._require_store()
        self._check_intact(partition, env.scope, env.step)
        reg.validator.validate(request.config_json)  # strict config before anything else
        semantic = semantic_digest(partition, request)
        return self._join_or_lead(
            (partition, env.operation_id),
            semantic,
            lambda: self._create(reg, request, semantic, build_plan, respond),
        )

    def _create(
        self,
        reg: Registration,
        request: PrepareRequest | ConnectRequest,
        semantic: str,
        build_plan: Callable[[], Plan],
        respond: Callable[
            [Plan, Mapping[str, Mapping[str, Any]]], PrepareResponse | ConnectResponse
        ],
    ) -> PrepareResponse | ConnectResponse:
        env = request.envelope
        partition = reg.endpoint.state_namespace
        store = self._require_store()
        unit = unit_key(env.scope, env.step)
        with self._scope(partition, unit):
            existing, scope = store.read(
                lambda r: (r.operation(partition, env.operation_id), r.scope(partition, unit))
            )
            _check_fence(scope, env.scope)  # before replay: a removed scope never resurrects
            if existing is not None:
                _check_same(existing, env.hook, semantic)
                if existing.state is OperationState.SUCCEEDED and existing.response_json:
                    return _replay(existing.response_json, request)
                if (
                    existing.state is not OperationState.FAILED
                    and existing.state is not OperationState.RUNNING
                ):
                    raise Aborted(
                        f"operation {env.operation_id} is {existing.state.value}; it cannot resume"
                    )
                plan = Plan.from_json(json.loads(existing.plan_json or "{}"))
                with self._crash.scope(env.hook.value, env.operation_id):
                    return self._execute(reg, existing, plan, respond)
            _check_generation(scope, env.generation, env.coordinator_epoch, env.scope)
            plan = build_plan()
            self._validate_plan(reg, env.hook, plan, request)
            record = self._new_record(reg, request, semantic, plan.canonical())
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

            def intent(t: Txn) -> OperationRecord:
                current = t.scope(partition, unit)
                # The single writer is the true serialization point: check the fence again.
                _check_fence(current, env.scope)
                _check_generation(current, env.generation, env.coordinator_epoch, env.scope)
                if isinstance(request, ConnectRequest) and request.allocation is not None:
                    _check_single_attachment(t, partition, request.allocation.root_id, env.scope)
                t.put_scope(
                    _advance(current, partition, unit, env.generation, env.coordinator_epoch)
                )
                return t.insert_operation(record, effects)

            with self._crash.scope(env.hook.value, env.operation_id):
                inserted = self._commit("intent", intent)
                return self._execute(reg, inserted, plan, respond)

    def _execute(
        self,
        reg: Registration,
        op: OperationRecord,
        plan: Plan,
        respond: Callable[
            [Plan, Mapping[str, Mapping[str, Any]]], PrepareResponse | ConnectResponse
        ],
    ) -> PrepareResponse | ConnectResponse:
        store = self._require_store()
        records = {
            r.effect_id: r for r in store.read(lambda r: r.effects(op.partition, op.operation_id))
        }
        outputs = _recorded_outputs(records.values())
        for planned in plan.effects:
            rec = records[planned.id]
            if rec.state is EffectState.APPLIED:
                continue
            if (op.partition, unit_key(op.scope, op.step)) in self._fenced:
                self._fail(op, f"quiesced by a removal of scope {op.scope} before {planned.id}")
                raise Aborted(
                    f"scope {op.scope} is being removed; "
                    f"{op.operation_id} stopped before {planned.id}"
                )
            if rec.state not in (EffectState.PLANNED, EffectState.CAPTURED, EffectState.APPLYING):
                raise Aborted(f"effect {planned.id} is {rec.state.value}; operation cannot resume")
            executor = self._effects.get(planned.kind)
            assert executor is not None  # validated before the intent was committed
            ctx = _context(op, plan, planned.id, outputs)
            with self._crash.scope(op.hook.value, op.operation_id, planned.id):
                try:
                    if rec.state is EffectState.PLANNED:
                        before = executor.capture(ctx)
                        rec = dataclasses.replace(
                            rec, state=EffectState.CAPTURED, before_json=canonical_json(before)
                        )
                        self._commit("captured", lambda t, r=rec: t.update_effect(r))  # type: ignore[misc]
                    if rec.state is EffectState.CAPTURED:
                        rec = dataclasses.replace(
                            rec, state=EffectState.APPLYING, attempts=rec.attempts + 1
                        )
                        self._commit("applying", lambda t, r=rec: t.update_effect(r))  # type: ignore[misc]
                    result = dict(executor.apply(ctx, _load(rec.before_json)))
                except NetworkPluginError as exc:
                    self._fail(op, str(exc), rec, exc)
                    raise
                except OSError as exc:
                    self._fail(op, f"{planned.id} ({planned.kind}): {exc}", rec, exc)
                    raise FailedPrecondition(
                        f"effect {planned.id} ({planned.kind}) failed: {exc}",
                        details={"errno": str(exc.errno or 0), "effect": planned.id},
                    ) from exc
                problem = _output_problem(planned.outputs, result)
                if problem:
                    # Mutation happened but its result is unusable: uncertain, never forgotten.
                    self._fail(op, f"{planned.id}: {problem}", rec)
                    raise FailedPrecondition(
                        f"effect {planned.id} returned invalid outputs: {problem}"
                    )
                rec = dataclasses.replace(
                    rec, state=EffectState.APPLIED, outputs_json=canonical_json(result)
                )
                self._commit("applied", lambda t, r=rec: t.update_effect(r))  # type: ignore[misc]
                outputs[planned.id] = result
        response = respond(plan, outputs)
        done = dataclasses.replace(
            op,
            state=OperationState.SUCCEEDED,
            response_json=canonical_json(to_json_value(response)),
            error_json=None,
        )
        self._commit("response", lambda t: t.update_operation(done))
        return response

    def _fail(
        self,
        op: OperationRecord,
        message: str,
        rec: EffectRecord | None = None,
        exc: BaseException | None = None,
    ) -> None:
        store = self._require_store()
        error = {"message": message}
        if isinstance(exc, OSError) and exc.errno:
            error["errno"] = str(exc.errno)
        failed = dataclasses.replace(
            op, state=OperationState.FAILED, error_json=canonical_json(error)
        )

        def write(t: Txn) -> None:
            t.update_operation(failed)
            if rec is not None:
                t.update_effect(dataclasses.replace(rec, detail=message))

        store.write(write)

    def _validate_plan(
        self, reg: Registration, hook: Hook, plan: Plan, request: PrepareRequest | ConnectRequest
    ) -> None:
        """Every effect kind, payload, permission and export checked before the intent exists."""
        problems = []
        allowed = set(reg.descriptor.allowed_effects.get(hook.value, ()))
        for e in plan.effects:
            executor = self._effects.get(e.kind)
            if e.kind not in allowed:
                problems.append(
                    f"effect {e.id!r}: kind {e.kind} is not allowed for {reg.name} {hook}"
                )
            elif executor is None:
                problems.append(f"effect {e.id!r}: no executor for {e.kind}")
            else:
                if tuple(e.outputs) != tuple(executor.outputs):
                    problems.append(
                        f"effect {e.id!r}: declares ports {list(e.outputs)}, "
                        f"{e.kind} has {list(executor.outputs)}"
                    )
                payload_problem = self._effects.payload_problem(e.kind, thaw_json(e.payload))
                if payload_problem:
                    problems.append(f"effect {e.id!r}: payload {payload_problem}")
        ports = _export_ports(reg, hook)
        for port, refs in plan.exports.items():
            spec = ports.get(port)
            if spec is None:
                problems.append(f"export {port!r} is not a declared output of {reg.name} {hook}")
            elif not spec.min <= len(refs) <= spec.max:
                problems.append(
                    f"export {port!r} has {len(refs)} references, "
                    f"contract says {spec.min}..{spec.max}"
                )
        for port, spec in ports.items():
            if spec.min > 0 and port not in plan.exports:
                problems.append(f"declared output {port!r} is not exported")
        if problems:
            raise PlanError(problems)
        if isinstance(request, ConnectRequest):
            handle_ids = {h.id for hs in request.inputs.values() for h in hs}
            for g in request.grants:
                if g.resource_id not in handle_ids or g.effect not in allowed:
                    raise InvalidArgument(
                        f"grant {g.effect} on {g.resource_id!r} names no input of this call"
                    )

    def _new_record(
        self, reg: Registration, request: Request, semantic: str, plan_json: str, target: str = ""
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
            semantic_digest=semantic,
            artifact_digest=self._artifact_digest,
            contract_digest=reg.contract_digest,
            generation=env.generation,
            epoch=env.coordinator_epoch,
            request_json=canonical_json(request_semantics(partition, request)),
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
        semantic = semantic_digest(partition, request)
        return self._join_or_lead(
            (partition, env.operation_id),
            semantic,
            lambda: self._cleanup(reg, request, semantic, cleanup_plan),
        )

    def _cleanup(
        self,
        reg: Registration,
        request: CleanupRequest,
        semantic: str,
        cleanup_plan: Callable[[], CleanupPlan],
    ) -> CleanupResponse:
        env = request.envelope
        partition = reg.endpoint.state_namespace
        unit = unit_key(env.scope, env.step)
        store = self._require_store()
        target = cleanup_plan()
        existing = store.read(lambda r: r.operation(partition, env.operation_id))
        if existing is not None:
            _check_same(existing, env.hook, semantic)
            if existing.state is OperationState.CLEANED and existing.response_json:
                return _cleanup_from_json(existing.response_json)
        record = existing or self._new_record(
            reg, request, semantic, canonical_json(target.to_json()), target.target_operation_id
        )

        def fence(t: Txn) -> OperationRecord:
            current = t.scope(partition, unit)
            _check_generation(current, env.generation, env.coordinator_epoch, env.scope)
            fenced_by = (
                current.fence_operation_id
                if current and current.fence_operation_id
                else env.operation_id
            )
            advanced = _advance(current, partition, unit, env.generation, env.coordinator_epoch)
            t.put_scope(dataclasses.replace(advanced, fence_operation_id=fenced_by))
            return record if existing is not None else t.insert_operation(record, [])

        if self._damaged and not self._targets(partition, env.scope, env.step, target):
            # A damaged record may be this scope's (its scope column may be what changed).
            raise JournalUnavailable(
                store.state_dir,
                f"scope {env.scope} has no record, but the journal has damaged records "
                f"({'; '.join(sorted(self._damaged.values())[:3])}), so absence proves nothing",
            )
        if target.target_hook is Hook.NODE_PREPARE:
            # A refusal must change nothing: check attachments before the fence is written.
            self._check_no_attachments(
                reg, partition, self._targets(partition, env.scope, env.step, target)
            )
        with self._crash.scope(env.hook.value, env.operation_id):
            cleanup_op = self._commit("fence", fence)
            with self._lock:
                self._fenced.add((partition, unit))  # quiesce running work on this unit
            with self._scope(partition, unit):
                response = self._undo_scope(reg, cleanup_op, target)
                state = {
                    CleanupStatus.CLEANED: OperationState.CLEANED,
                    CleanupStatus.PENDING: OperationState.CLEANUP_PENDING,
                    CleanupStatus.QUARANTINED: OperationState.QUARANTINED,
                }[response.status]
                finished = dataclasses.replace(
                    cleanup_op,
                    state=state,
                    cleanup_status=response.status,
                    response_json=canonical_json(to_json_value(response)),
                )
                self._commit("cleanup", lambda t: t.update_operation(finished))
        return response

    def _targets(
        self, partition: str, scope: str, step: str, target: CleanupPlan
    ) -> list[OperationRecord]:
        """The recorded operations a cleanup undoes: its unit's, of the target hook."""
        store = self._require_store()
        return [
            op
            for op in store.read(
                lambda r: r.operations(partition, scope=scope, hook=target.target_hook)
            )
            if op.step == step
            and (not target.target_operation_id or op.operation_id == target.target_operation_id)
        ]

    def _undo_scope(
        self, reg: Registration, cleanup_op: OperationRecord, target: CleanupPlan
    ) -> CleanupResponse:
        partition, scope = cleanup_op.partition, cleanup_op.scope
        targets = self._targets(partition, scope, cleanup_op.step, target)
        if target.target_hook is Hook.NODE_PREPARE:
            # Checked again under the unit's lock: an attachment may have raced the first check.
            self._check_no_attachments(reg, partition, targets)
        statuses: list[EffectStatus] = []
        overall = CleanupStatus.CLEANED
        for op in reversed(targets):
            if op.state is OperationState.CLEANED:
                continue
            op_status, effect_statuses = self._undo_operation(cleanup_op, op)
            statuses.extend(effect_statuses)
            overall = _worse(overall, op_status)
        if not targets:
            return self._cleanup_unrecorded(partition, scope, target.target_hook)
        return CleanupResponse(overall, "", tuple(statuses))

    def _cleanup_unrecorded(self, partition: str, scope: str, hook: Hook) -> CleanupResponse:
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
        store = self._require_store()

        def recorded(r: Reader) -> set[str]:
            markers = set()
            for op in r.operations(partition, scope=scope):
                for e in r.effects(partition, op.operation_id):
                    ctx = EffectContext(partition, op.operation_id, e.effect_id, scope, op.step, {})
                    markers.add(ctx.marker)
            return markers

        known = store.read(recorded)
        return [
            what for marker, what in scan(scope_evidence(partition, scope)) if marker not in known
        ]

    def _check_no_attachments(
        self, reg: Registration, partition: str, prepares: list[OperationRecord]
    ) -> None:
        store = self._require_store()
        roots = {
            json.loads(op.request_json).get("allocation", {}).get("root_id") for op in prepares
        }
        for op in store.read(lambda r: r.operations(partition, hook=Hook.CONNECT_NETWORK)):
            if op.state is OperationState.CLEANED:
                continue
            root = (json.loads(op.request_json).get("allocation") or {}).get("root_id")
            if root in roots:
                raise FailedPrecondition(
                    f"{reg.name}: attachment {op.scope} of root {root} is not cleaned up yet"
                )

    def _undo_operation(
        self, cleanup_op: OperationRecord, op: OperationRecord
    ) -> tuple[CleanupStatus, list[EffectStatus]]:
        store = self._require_store()
        records = store.read(lambda r: r.effects(op.partition, op.operation_id))
        plan = Plan.from_json(json.loads(op.plan_json or "{}"))
        outputs = _recorded_outputs(records)
        if op.state is not OperationState.CLEANUP_PENDING:
            # Visible to InspectOperation (and recovery) until every effect is undone.
            op = dataclasses.replace(op, state=OperationState.CLEANUP_PENDING)
            self._commit(f"pending:{op.operation_id}", lambda t, o=op: t.update_operation(o))  # type: ignore[misc]
        status = CleanupStatus.CLEANED
        result: list[EffectStatus] = []
        for rec in reversed(records):
            after, outcome = self._undo_effect(cleanup_op, op, plan, rec, outputs)
            status = _worse(status, outcome)
            result.append(EffectStatus(after.effect_id, after.kind, after.state, after.detail))
        result.reverse()
        final = {
            CleanupStatus.CLEANED: OperationState.CLEANED,
            CleanupStatus.PENDING: OperationState.CLEANUP_PENDING,
            CleanupStatus.QUARANTINED: OperationState.QUARANTINED,
        }[status]
        updated = dataclasses.replace(op, state=final, cleanup_status=status)
        self._commit(f"target:{op.operation_id}", lambda t: t.update_operation(updated))
        return status, result

    def _undo_effect(
        self,
        cleanup_op: OperationRecord,
        op: OperationRecord,
        plan: Plan,
        rec: EffectRecord,
        outputs: Mapping[str, Mapping[str, Any]],
    ) -> tuple[EffectRecord, CleanupStatus]:
        if rec.state is EffectState.UNDONE:
            return rec, CleanupStatus.CLEANED
        if rec.state is EffectState.QUARANTINED:
            return rec, CleanupStatus.QUARANTINED
        if rec.state in (EffectState.PLANNED, EffectState.CAPTURED):
            # Applying is made durable before any mutation, so nothing was applied.
            done = dataclasses.replace(rec, state=EffectState.UNDONE, detail="never applied")
            with self._crash.scope(
                cleanup_op.hook.value, cleanup_op.operation_id, f"{op.operation_id}:{rec.effect_id}"
            ):
                self._commit("undone", lambda t: t.update_effect(done))
            return done, CleanupStatus.CLEANED
        executor = self._effects.get(rec.kind)
        if executor is None:
            q = dataclasses.replace(
                rec, state=EffectState.QUARANTINED, detail=f"no executor for {rec.kind}"
            )
            self._require_store().write(lambda t: t.update_effect(q))
            return q, CleanupStatus.QUARANTINED
        ctx = _context(op, plan, rec.effect_id, outputs)
        with self._crash.scope(
            cleanup_op.hook.value, cleanup_op.operation_id, f"{op.operation_id}:{rec.effect_id}"
        ):
            if rec.state is not EffectState.UNDOING:
                rec = dataclasses.replace(rec, state=EffectState.UNDOING)
                self._commit("undoing", lambda t, r=rec: t.update_effect(r))  # type: ignore[misc]
            try:
                undone = executor.undo(ctx, _load(rec.before_json), outputs.get(rec.effect_id))
            except Exception as exc:  # stays Undoing: a later cleanup retries it
                pending = dataclasses.replace(rec, detail=f"undo failed: {exc}")
                self._require_store().write(lambda t: t.update_effect(pending))
                return pending, CleanupStatus.PENDING
            if undone.outcome is UndoOutcome.QUARANTINED:
                q = dataclasses.replace(rec, state=EffectState.QUARANTINED, detail=undone.detail)
                self._commit("quarantined", lambda t: t.update_effect(q))
                return q, CleanupStatus.QUARANTINED
            done = dataclasses.replace(
                rec, state=EffectState.UNDONE, detail=undone.detail or undone.outcome.value
            )
            self._commit("undone", lambda t: t.update_effect(done))
            return done, CleanupStatus.CLEANED

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
            descriptor_json=canonical_json(d.to_json()),
            fault=self._journal_fault(),
        )

    # -- responses -------------------------------------------------------------------------

    def handles(
        self,
        reg: Registration,
        request: PrepareRequest | ConnectRequest,
        plan: Plan,
        outputs: Mapping[str, Mapping[str, Any]],
    ) -> dict[str, tuple[ResourceHandle, ...]]:
        env = request.envelope
        partition = reg.endpoint.state_namespace
        ports = _export_ports(reg, env.hook)
        attachment = env.scope if env.hook is Hook.CONNECT_NETWORK else ""
        root = _root_provenance(request)
        result: dict[str, tuple[ResourceHandle, ...]] = {}
        for port, refs in plan.exports.items():
            handles = []
            for i, ref in enumerate(refs):
                description = outputs[ref.effect_id][ref.port]
                hid = "rh-" + digest([partition, env.scope, env.step, port, i])[7:31]
                handles.append(
                    ResourceHandle(
                        hid,
                        ports[port].type,
                        env.scope,
                        env.step,
                        attachment,
                        self._boot_id,
                        root,
                        canonical_json(description),
                    )
                )
            result[port] = tuple(handles)
        return result


class EndpointRunner:
    """The runner as seen through one logical endpoint (the host's EndpointService)."""

    def __init__(self, runner: Runner, reg: Registration) -> None:
        self._runner = runner
        self.registration = reg

    def info(self) -> EndpointInfo:
        return self._runner.info(self.registration)

    def _check_hook(self, hook: Hook) -> None:
        reg = self.registration
        if hook in _ROOT_HOOKS and StepKind.ALLOCATION not in reg.descriptor.step_kinds:
            raise WrongStepKind(
                f"{reg.name}: {hook.value} is not a hook of an Operation-only plugin"
            )

    def node_prepare(self, req: PrepareRequest) -> PrepareResponse:
        reg = self.registration
        _check_envelope(req, Hook.NODE_PREPARE)
        self._check_hook(Hook.NODE_PREPARE)
        call = PrepareCall(
            req.envelope,
            reg.descriptor,
            reg.validator,
            req.config_json,
            req.allocation,
            req.requirements,
        )

        def respond(plan: Plan, outputs: Mapping[str, Mapping[str, Any]]) -> PrepareResponse:
            handles = self._runner.handles(reg, req, plan, outputs)
            root = req.allocation.root_id if req.allocation else ""
            state = PreparedState(
                root, reg.name, req.envelope.scope, tuple(h for hs in handles.values() for h in hs)
            )
            return PrepareResponse(state)

        result = self._runner.run_create(
            reg, req, lambda: reg.endpoint.handler.node_prepare(call), respond
        )
        assert isinstance(result, PrepareResponse)
        return result

    def connect_network(self, req: ConnectRequest) -> ConnectResponse:
        reg = self.registration
        _check_envelope(req, Hook.CONNECT_NETWORK)
        call = ConnectCall(
            req.envelope,
            reg.descriptor,
            reg.validator,
            req.config_json,
            req.sandbox,
            req.inputs,
            req.interface_names,
            req.prepared,
            req.allocation,
            req.grants,
        )

        def respond(plan: Plan, outputs: Mapping[str, Mapping[str, Any]]) -> ConnectResponse:
            return ConnectResponse(self._runner.handles(reg, req, plan, outputs))

        result = self._runner.run_create(
            reg, req, lambda: reg.endpoint.handler.connect_network(call), respond
        )
        assert isinstance(result, ConnectResponse)
        return result

    def remove_network(self, req: CleanupRequest) -> CleanupResponse:
        reg = self.registration
        _check_envelope(req, Hook.REMOVE_NETWORK)
        call = RemoveCall(req.envelope, reg.descriptor, reg.validator, req.target_operation_id)
        return self._runner.run_cleanup(
            reg,
            req,
            lambda: _cleanup_plan(reg.endpoint.handler.remove_network(call), Hook.CONNECT_NETWORK),
        )

    def node_unprepare(self, req: CleanupRequest) -> CleanupResponse:
        reg = self.registration
        _check_envelope(req, Hook.NODE_UNPREPARE)
        self._check_hook(Hook.NODE_UNPREPARE)
        call = UnprepareCall(req.envelope, reg.descriptor, reg.validator, req.target_operation_id)
        return self._runner.run_cleanup(
            reg,
            req,
            lambda: _cleanup_plan(reg.endpoint.handler.node_unprepare(call), Hook.NODE_PREPARE),
        )

    def inspect(self, operation_id: str, scope: str) -> InspectResponse:
        return self._runner.inspect(self.registration, operation_id, scope)


# -- pure helpers ---------------------------------------------------------------------------


def unit_key(scope: str, step: str) -> str:
    """What scope records, locks and fences are keyed by: one step of one prep/attachment.

    One attachment may use a logical plugin more than once (two VFs of a bond), so the
    step is part of the unit: removing vf1 must neither fence nor undo vf0.
    """
    return f"{scope}/{step}"


def _check_envelope(request: Request, hook: Hook) -> None:
    env = request.envelope
    if env.hook is not hook:
        raise InvalidArgument(f"envelope.hook is {env.hook.value}, this call is {hook.value}")
    for name in ("operation_id", "scope", "step"):
        if not getattr(env, name):
            raise InvalidArgument(f"envelope.{name} is empty")
    if env.generation < 1:
        raise InvalidArgument("envelope.generation must be >= 1")


def _cleanup_plan(plan: CleanupPlan, expected: Hook) -> CleanupPlan:
    if not isinstance(plan, CleanupPlan) or plan.target_hook is not expected:
        raise PlanError([f"cleanup must undo the recorded {expected.value} plan"])
    return plan


def _check_single_attachment(t: Reader, partition: str, root: str, attachment: str) -> None:
    """SinglePod: one allocation root realizes at most one attachment at a time."""
    active = set(OperationState) - {OperationState.CLEANED}
    for op in t.operations(partition, hook=Hook.CONNECT_NETWORK, states=active):
        if op.scope == attachment:
            continue
        other = (json.loads(op.request_json).get("allocation") or {}).get("root_id")
        if other == root:
            raise FailedPrecondition(
                f"root {root} is still attached as {op.scope} ({op.state.value}); "
                "remove that attachment before connecting it again"
            )


def _check_fence(scope: ScopeRecord | None, name: str) -> None:
    if scope is not None and scope.fence_operation_id:
        raise Aborted(
            f"scope {name} was removed by {scope.fence_operation_id}; "
            "earlier work cannot start or replay"
        )


def _check_generation(scope: ScopeRecord | None, generation: int, epoch: int, name: str) -> None:
    if scope is None:
        return
    if generation < scope.generation:
        raise Aborted(
            f"scope {name}: generation {generation} is older than accepted {scope.generation}"
        )
    if epoch < scope.epoch:
        raise Aborted(
            f"scope {name}: coordinator epoch {epoch} is older than accepted {scope.epoch}"
        )


def _advance(
    scope: ScopeRecord | None, partition: str, name: str, generation: int, epoch: int
) -> ScopeRecord:
    if scope is None:
        return ScopeRecord(
            partition=partition,
            scope=name,
            generation=generation,
            epoch=epoch,
            fence_operation_id="",
        )
    return dataclasses.replace(
        scope, generation=max(scope.generation, generation), epoch=max(scope.epoch, epoch)
    )


def _check_same(existing: OperationRecord, hook: Hook, semantic: str) -> None:
    if existing.hook is not hook or existing.semantic_digest != semantic:
        raise AlreadyExists(
            f"operation id {existing.operation_id} was already used for a different request "
            f"({existing.hook.value}, {existing.semantic_digest[:19]}...)"
        )


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _recorded_outputs(records: Any) -> dict[str, Mapping[str, Any]]:
    return {r.effect_id: json.loads(r.outputs_json) for r in records if r.outputs_json}


def _context(
    op: OperationRecord, plan: Plan, effect_id: str, outputs: Mapping[str, Mapping[str, Any]]
) -> EffectContext:
    planned = plan.effect(effect_id)
    inputs = {
        name: outputs[ref.effect_id][ref.port]
        for name, ref in planned.inputs.items()
        if ref.effect_id in outputs and ref.port in outputs[ref.effect_id]
    }
    return EffectContext(
        op.partition,
        op.operation_id,
        effect_id,
        op.scope,
        op.step,
        thaw_json(planned.payload),
        inputs,
    )


def _output_problem(declared: tuple[str, ...], result: Mapping[str, Any]) -> str:
    if set(result) != set(declared):
        return f"ports {sorted(result)} != declared {sorted(declared)}"
    for port, description in result.items():
        if not isinstance(description, dict):
            return f"port {port!r} description is not a JSON object"
    return ""


def _export_ports(reg: Registration, hook: Hook) -> dict[str, PortSpec]:
    ports = (
        reg.descriptor.preparation.outputs if hook is Hook.NODE_PREPARE else reg.descriptor.outputs
    )
    return {p.name: p for p in ports}


def _root_provenance(request: PrepareRequest | ConnectRequest) -> str:
    if request.allocation is not None:
        return request.allocation.root_id
    if isinstance(request, ConnectRequest):
        return ",".join(sorted({h.root_provenance for hs in request.inputs.values() for h in hs}))
    return ""


def _worse(a: CleanupStatus, b: CleanupStatus) -> CleanupStatus:
    order = [CleanupStatus.CLEANED, CleanupStatus.PENDING, CleanupStatus.QUARANTINED]
    return max(a, b, key=order.index)


def _replay(
    response_json: str, request: PrepareRequest | ConnectRequest
) -> PrepareResponse | ConnectResponse:
    data = json.loads(response_json)
    if isinstance(request, PrepareRequest):
        ps = data["prepared_state"]
        return PrepareResponse(
            PreparedState(
                ps["root_id"],
                ps["plugin"],
                ps["preparation_id"],
                tuple(ResourceHandle(**h) for h in ps["handles"]),
            ),
            tuple(data["cdi_device_ids"]),
        )
    return ConnectResponse(
        {port: tuple(ResourceHandle(**h) for h in hs) for port, hs in data["outputs"].items()}
    )


def _cleanup_from_json(response_json: str) -> CleanupResponse:
    data = json.loads(response_json)
    return CleanupResponse(
        CleanupStatus(data["status"]),
        data["detail"],
        tuple(
            EffectStatus(e["effect_id"], e["kind"], EffectState(e["state"]), e["detail"])
            for e in data["effects"]
        ),
    )
