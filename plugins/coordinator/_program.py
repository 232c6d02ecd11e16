"""What the coordinator program does for its clients: apply a topology for a sandbox, remove
it, and say where everything stands. No gRPC here (``_server`` is the wire).

An application is one attachment of one configured topology to one sandbox, under one
claim. Its request (the sandbox and the devices allocated to it) is journaled before the
first call to a plugin and is fixed from then on, so every retry, and the recovery after
a restart, drives the very same identities: the plugins replay what they finished and
resume what they were doing. Requests run one at a time (the node authority's claims and
the allocator are node-wide).

States (``APPLICATION_STATES``): ``applying`` -> ``applied`` | ``failed``; ``failed`` ->
``applying`` (an apply again) | ``removing``; ``applied`` -> ``removing`` -> ``removed``.
At start, before it reports ready, the program finishes what a crash interrupted: an
``applying`` one is applied again and, if that fails, undone (nobody is waiting for it
any more); a ``removing`` one is removed again. A ``failed`` one waits for its client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

from plugins.sdk import (
    CleanupResponse,
    CleanupStatus,
    ConnectResponse,
    DataLoss,
    FailedPrecondition,
    Hook,
    InvalidArgument,
    NetworkPluginError,
    NotFound,
    ResourceHandle,
    Unavailable,
    from_json_value,
    to_json_value,
)
from plugins.sdk.host import PluginCallError, PluginClient
from plugins.sdk.runner import NO_CRASH, CrashPoints

from ._allocate import Allocator
from ._compile import CompiledTopology
from ._journal import OPEN_CALL_STATES, Application, CoordinatorJournal
from ._program_values import (
    NOT_RUN,
    ApplicationStatus,
    ApplyRequest,
    ApplyResult,
    CoordinatorStatus,
    OpenCall,
    OutputHandle,
    RemoveResult,
    StepReceipt,
    allocation_to_json,
    allocations_of,
    check_name,
    check_sandbox,
    flatten,
    one_line,
    sandbox_of,
)
from ._runtime import Coordinator, operation_id, prep_scope
from ._telemetry import (
    NO_METRICS,
    CoordinatorGauges,
    CoordinatorMetrics,
    call_observer,
    request_line,
)

log = logging.getLogger("plugins.coordinator")

_NOT_READY: Final = "recovering; not ready to accept requests, retry later"
_CLEANUP_HOOKS: Final = (Hook.REMOVE_NETWORK.value, Hook.NODE_UNPREPARE.value)


class CoordinatorService:
    """The program's requests over one coordinator journal and the plugins' clients.

    ``journal`` None: the journal could not be opened (``fault`` says why); every request
    but ``status`` is refused with ``DATA_LOSS``, as a plugin service with a damaged
    journal does. Until ``recover`` has run, apply and remove are ``UNAVAILABLE``.
    """

    def __init__(
        self,
        journal: CoordinatorJournal | None,
        clients: Mapping[str, PluginClient],
        topologies: Mapping[str, CompiledTopology],
        allocator: Allocator,
        *,
        epoch: int = 1,
        crash: CrashPoints = NO_CRASH,
        fault: str = "",
        plugin_wait_seconds: float = 30.0,
        metrics: CoordinatorMetrics = NO_METRICS,
    ) -> None:
        self._journal = journal
        self._fault = fault if journal is None else ""
        self._clients = dict(clients)
        self._topologies = dict(topologies)
        self._allocator = allocator
        self._plugin_wait_s = plugin_wait_seconds
        self._metrics = metrics
        # Reentrant: the pod side (``PodNetworks``) shares it, and calls back into the
        # journal's units while it holds it.
        self._lock = threading.RLock()
        self._ready = threading.Event()
        observer = None if metrics is NO_METRICS else call_observer(metrics)
        self._coordinator = (
            None
            if journal is None
            else Coordinator(journal, self._clients, epoch=epoch, crash=crash, observer=observer)
        )
        if journal is not None:
            metrics.watch(CoordinatorGauges(journal.open_call_count, journal.application_counts))
        for app in journal.applications() if journal is not None else ():
            if app.state != "removed":
                self._reserve(app)

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    @property
    def fault(self) -> str:
        return self._fault

    @property
    def coordinator(self) -> Coordinator | None:
        """The plugins' caller (None when the journal could not be opened)."""
        return self._coordinator

    @property
    def lock(self) -> threading.RLock:
        """Held by every request: the pod side takes it too (the allocator is shared)."""
        return self._lock

    def busy(self) -> bool:
        """True while a request (or recovery) is running in another thread."""
        if self._lock.acquire(blocking=False):
            self._lock.release()
            return False
        return True

    # -- requests ---------------------------------------------------------------------------

    def apply(self, request: ApplyRequest) -> ApplyResult:
        """Allocate, prepare and connect; idempotent under the same attachment id. One
        log line with its ids and outcome, however it ends."""
        with request_line(
            self._metrics,
            "apply",
            attachment=request.attachment,
            claim=request.claim,
            sandbox=request.sandbox.sandbox_id,
            topology=request.topology,
        ) as line:
            result = self._apply(request)
            line.state = result.state
            return result

    def _apply(self, request: ApplyRequest) -> ApplyResult:
        check_name(request.attachment, "attachment id")
        check_name(request.claim, "claim id")
        compiled = self._topologies.get(request.topology)
        if compiled is None:
            known = ", ".join(sorted(self._topologies))
            raise InvalidArgument(
                f"topology {request.topology!r} is not configured (known: {known})"
            )
        check_sandbox(request.sandbox)
        journal = self._usable()
        with self._lock:
            app = self._application(request.attachment)
            if app is None:
                app = self._new_application(request, compiled)
            else:
                if app.state in ("removing", "removed"):
                    raise FailedPrecondition(
                        f"attachment {app.attachment} is {app.state}; apply the topology under "
                        "a new attachment id"
                    )
                self._same_request(app, request)
                if app.state == "applied":
                    return ApplyResult(
                        app.attachment, "applied", self._journaled_outputs(app, compiled)
                    )
                app = replace(app, state="applying", error="")
                journal.put_application(app)
            return self._run_apply(app, compiled)

    def remove(self, attachment: str) -> RemoveResult:
        """Remove every requested step, then unprepare the roots; idempotent. One log line
        with its ids and outcome, however it ends."""
        with request_line(self._metrics, "remove", attachment=attachment) as line:
            check_name(attachment, "attachment id")
            self._usable()
            with self._lock:
                app = self._application(attachment)
                if app is None:
                    raise NotFound(f"attachment {attachment}: this coordinator never applied it")
                line.ids.update(
                    claim=app.claim,
                    sandbox=str(app.request["sandbox"]["sandbox_id"]),
                    topology=app.topology,
                )
                if app.state == "removed":
                    result = RemoveResult(attachment, "removed", self._journaled_receipts(app))
                else:
                    result = self._run_remove(app)
            line.state = result.state
            if result.state != "removed":
                line.reason = _waiting_for(result.receipts[-1])
            return result

    def status(self) -> CoordinatorStatus:
        journal = self._journal
        if journal is None:
            return CoordinatorStatus(False, self._fault, (), (), ())
        applications = tuple(
            ApplicationStatus(
                a.attachment,
                a.claim,
                a.topology,
                str(a.request["sandbox"]["sandbox_id"]),
                a.state,
                a.error,
            )
            for a in journal.applications()
        )
        calls = tuple(
            OpenCall(c.operation_id, c.plugin, c.hook, c.state, c.error or "")
            for c in journal.calls()
            if c.state in OPEN_CALL_STATES
        )
        return CoordinatorStatus(self.ready, "", applications, calls, tuple(journal.claims()))

    def recover(self) -> list[str]:
        """Finish what a crash interrupted, then report ready; one note per application."""
        notes: list[str] = []
        journal = self._journal
        if journal is None:
            return notes
        started = time.monotonic()
        with self._lock:
            interrupted = [a for a in journal.applications() if a.state in ("applying", "removing")]
            notes += self._wait_for_plugins(interrupted)
            for app in interrupted:
                try:
                    notes.append(self._resume(app))
                except NetworkPluginError as exc:
                    notes.append(f"{app.attachment}: left {app.state}: {one_line(str(exc))}")
            self._ready.set()
        self._metrics.recovery_finished(time.monotonic() - started)
        return notes

    # -- the work ---------------------------------------------------------------------------

    def _usable(self) -> CoordinatorJournal:
        if self._journal is None:
            raise DataLoss(self._fault)
        if not self._ready.is_set():
            raise Unavailable(_NOT_READY)
        return self._journal

    def _application(self, attachment: str) -> Application | None:
        assert self._journal is not None
        found = self._journal.applications(attachment)
        return found[0] if found else None

    def _new_application(self, request: ApplyRequest, compiled: CompiledTopology) -> Application:
        assert self._journal is not None
        for other in self._journal.applications(claim=request.claim):
            if other.state != "removed":
                raise FailedPrecondition(
                    f"claim {request.claim} is already applied by attachment {other.attachment}"
                )
        allocations = self._allocator.allocate(compiled)  # AllocationError: nothing changed
        app = Application(
            request.attachment,
            request.claim,
            request.topology,
            {
                "sandbox": to_json_value(request.sandbox),
                "allocations": {s: allocation_to_json(a) for s, a in allocations.items()},
            },
            "applying",
            "",
        )
        try:
            self._journal.put_application(app)
        except BaseException:
            self._allocator.release(allocations)
            raise
        return app

    @staticmethod
    def _same_request(app: Application, request: ApplyRequest) -> None:
        asked = (request.claim, request.topology, to_json_value(request.sandbox))
        if asked != (app.claim, app.topology, app.request["sandbox"]):
            raise FailedPrecondition(
                f"attachment {app.attachment} was applied as topology {app.topology} for claim "
                f"{app.claim} in sandbox {app.request['sandbox']['sandbox_id']}; a request under "
                "the same attachment id must be the same request"
            )

    def _run_apply(self, app: Application, compiled: CompiledTopology) -> ApplyResult:
        assert self._journal is not None
        assert self._coordinator is not None
        allocations = allocations_of(app)
        try:
            prepared = self._coordinator.prepare(app.claim, compiled, allocations)
            attached = self._coordinator.connect(
                app.attachment, app.claim, compiled, allocations, prepared, sandbox_of(app)
            )
        except NetworkPluginError as exc:
            self._journal.put_application(replace(app, state="failed", error=one_line(str(exc))))
            raise
        self._journal.put_application(replace(app, state="applied", error=""))
        return ApplyResult(app.attachment, "applied", flatten(attached.outputs))

    def _run_remove(self, app: Application) -> RemoveResult:
        assert self._journal is not None
        assert self._coordinator is not None
        self._journal.put_application(replace(app, state="removing"))
        receipts = self._receipts(Hook.REMOVE_NETWORK, self._coordinator.remove(app.attachment))
        if all(r.status == CleanupStatus.CLEANED.value for r in receipts):
            receipts += self._receipts(Hook.NODE_UNPREPARE, self._coordinator.unprepare(app.claim))
        unclean = [r for r in receipts if r.status != CleanupStatus.CLEANED.value]
        if unclean:
            error = _waiting_for(unclean[0])
            self._journal.put_application(replace(app, state="removing", error=error))
            return RemoveResult(app.attachment, "removing", tuple(receipts))
        # Removed: what went wrong before is history (the log has it), not its state.
        self._journal.put_application(replace(app, state="removed", error=""))
        self._allocator.release(allocations_of(app).values())
        return RemoveResult(app.attachment, "removed", self._with_not_run(app, receipts))

    @staticmethod
    def _receipts(hook: Hook, receipts: Mapping[str, CleanupResponse]) -> list[StepReceipt]:
        return [StepReceipt(s, hook.value, r.status.value, r.detail) for s, r in receipts.items()]

    def _resume(self, app: Application) -> str:
        if app.state == "removing":
            return f"{app.attachment}: removal resumed: {self._run_remove(app).state}"
        compiled = self._topologies.get(app.topology)
        if compiled is None:
            return (
                f"{app.attachment}: left applying: topology {app.topology} is no longer configured"
            )
        try:
            self._run_apply(app, compiled)
        except NetworkPluginError as exc:
            undone = self._run_remove(self._application(app.attachment) or app)
            return (
                f"{app.attachment}: the interrupted apply failed ({one_line(str(exc))}); "
                f"undone: {undone.state}"
            )
        return f"{app.attachment}: the interrupted apply completed"

    def _wait_for_plugins(self, apps: Sequence[Application]) -> list[str]:
        """The plugins recovery needs, given up to ``plugin_wait_seconds`` to be ready."""
        needed = sorted(
            {
                step.plugin
                for a in apps
                if a.topology in self._topologies
                for step in self._topologies[a.topology].steps.values()
            }
        )
        deadline = time.monotonic() + self._plugin_wait_s
        notes = []
        for plugin in needed:
            try:
                self._clients[plugin].wait_ready(max(deadline - time.monotonic(), 0.001))
            except PluginCallError as exc:
                notes.append(f"plugin {plugin} is not ready for recovery: {exc}")
        return notes

    def _reserve(self, app: Application) -> None:
        try:
            self._allocator.reserve(allocations_of(app).values())
        except ValueError as exc:
            log.warning(
                "attachment %s: its devices are no longer in the inventory: %s", app.attachment, exc
            )

    # -- answers read back from the journal -------------------------------------------------

    def _journaled_outputs(
        self, app: Application, compiled: CompiledTopology
    ) -> tuple[OutputHandle, ...]:
        assert self._journal is not None
        outputs: dict[str, dict[str, tuple[ResourceHandle, ...]]] = {}
        for step in compiled.connect_order:
            call = self._journal.call(operation_id(app.attachment, step, Hook.CONNECT_NETWORK))
            assert call is not None, "an applied step was called"
            assert call.response is not None, "an applied step has a response"
            response: ConnectResponse = from_json_value(ConnectResponse, call.response)
            outputs[step] = dict(response.outputs)
        return flatten(outputs)

    def _journaled_receipts(self, app: Application) -> tuple[StepReceipt, ...]:
        assert self._journal is not None
        unit = self._journal.unit(app.claim)
        roots = [] if unit is None else unit[1].get("roots", [])
        calls = [*self._journal.calls(app.attachment)]
        for root in reversed(roots):
            calls += self._journal.calls(prep_scope(app.claim, root))
        receipts = []
        for call in calls:
            if call.hook in _CLEANUP_HOOKS and call.state == "cleaned":
                assert call.response is not None, "a cleaned call has its receipt"
                receipt: CleanupResponse = from_json_value(CleanupResponse, call.response)
                receipts.append(
                    StepReceipt(call.step, call.hook, receipt.status.value, receipt.detail)
                )
        return self._with_not_run(app, receipts)

    def _with_not_run(
        self, app: Application, receipts: Sequence[StepReceipt]
    ) -> tuple[StepReceipt, ...]:
        """A finished removal's receipts, one per step and hook in the removal's order:
        ``NOT_RUN`` for a step that never ran (never sent, or unknown to its plugin)."""
        order, roots = self._steps_of(app)
        found = {(r.step, r.hook): r for r in receipts}
        complete = [
            found.pop((step, hook))
            if (step, hook) in found
            else StepReceipt(step, hook, NOT_RUN, why)
            for hook, steps, why in (
                (Hook.REMOVE_NETWORK.value, order, "never connected: nothing to remove"),
                (Hook.NODE_UNPREPARE.value, roots, "never prepared: nothing to unprepare"),
            )
            for step in reversed(steps)
        ]
        return (*complete, *found.values())

    def _steps_of(self, app: Application) -> tuple[list[str], list[str]]:
        """The connect order and the roots, as journaled when the apply got that far."""
        assert self._journal is not None
        compiled = self._topologies.get(app.topology)
        attachment = self._journal.unit(app.attachment)
        preparation = self._journal.unit(app.claim)
        order = (
            attachment[1]["order"]
            if attachment is not None
            else list(compiled.connect_order if compiled is not None else ())
        )
        roots = (
            preparation[1]["roots"]
            if preparation is not None
            else list(compiled.prepare_order if compiled is not None else ())
        )
        return list(order), list(roots)


def _waiting_for(receipt: StepReceipt) -> str:
    """Why a removal is still ``removing``: the receipt it stopped at."""
    return f"step {receipt.step}: {receipt.hook} {receipt.status}: {one_line(receipt.detail)}"
