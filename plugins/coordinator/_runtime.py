"""The coordinator runtime: drives a compiled topology through the four hooks.

Order (blueprint 10.1): NodePrepare every root; ConnectNetwork in topology order;
commit the attachment Ready only after every step; RemoveNetwork in reverse, each
dependent's CLEANED receipt before its ancestors (failed and uncertain steps
included); NodeUnprepare after cleanup, then release the node-authority claims.
Every call is journaled here before it is sent, under the operation id both sides
share, and ends closed: succeeded, cleaned, or abandoned by its step's CLEANED cleanup.

A step that never ran needs no cleanup, and a removal never waits for one: a root whose
NodePrepare was never sent is not unprepared (its claims are released), and a step
whose cleanup the plugin refuses while it has no record of any call that would have
created something is closed as never run (``CoordinatorJournal.abandon_unrun``), so
an application whose plugin refused everything (an Operation-only plugin behind a root's
socket) can still be removed. A client that checks its peer (``CheckedPluginClient``)
is asked before a call is journaled: a refusal there sends nothing and journals nothing.
Every journal commit is bracketed by crash points (``CrashPoint`` of ``Owner.COORDINATOR``:
the hook, the operation, unit or scope the commit is about, the commit's two sides).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from plugins.sdk import (
    CleanupRequest,
    CleanupResponse,
    CleanupStatus,
    ConnectRequest,
    FailedPrecondition,
    Grant,
    Hook,
    OperationEnvelope,
    PreparedState,
    PrepareRequest,
    PrepareResponse,
    ResourceHandle,
    SandboxHandle,
    from_json_value,
    to_json_value,
)
from plugins.sdk.host import PluginCallError, PluginClient
from plugins.sdk.runner import NO_CRASH, CrashPoints, Owner

from ._allocate import AllocatedDevice
from ._authority import NodeAuthority, ResourceClaim
from ._compile import CompiledTopology
from ._journal import OPEN_CALL_STATES, Call, CoordinatorJournal
from ._peers import CheckedPluginClient

T = TypeVar("T")

_CREATE_OF = {Hook.REMOVE_NETWORK: Hook.CONNECT_NETWORK, Hook.NODE_UNPREPARE: Hook.NODE_PREPARE}


class StepFailed(FailedPrecondition):
    def __init__(self, step: str, hook: str, cause: str) -> None:
        super().__init__(
            f"step {step}: {hook} failed: {cause}", details={"step": step, "hook": hook}
        )
        self.step = step


@dataclass
class Attachment:
    attachment_id: str
    ready: bool
    outputs: dict[str, dict[str, tuple[ResourceHandle, ...]]] = field(default_factory=dict)


def resource_claims(plugin: str, allocation: AllocatedDevice) -> list[ResourceClaim]:
    """Physical identity of an allocation: the PCI function when known, else the netdev."""
    pci = allocation.attributes.get("pciAddress")
    key = (
        f"pci:{pci}"
        if isinstance(pci, str) and pci
        else f"netdev:{allocation.attributes.get('ifName')}"
    )
    if allocation.sharing.value == "Shared":
        return [ResourceClaim(key, "shared", plugin)]
    return [ResourceClaim(key, "exclusive")]


class Coordinator:
    def __init__(
        self,
        journal: CoordinatorJournal,
        clients: Mapping[str, PluginClient],
        *,
        epoch: int = 1,
        observer: CallObserver | None = None,
        crash: CrashPoints = NO_CRASH,
    ) -> None:
        self.observer: CallObserver = observer or no_observer
        self.journal = journal
        self.authority = NodeAuthority(journal)
        self.clients = dict(clients)
        self.epoch = epoch
        self.crash = crash  # NO_CRASH in production: no point is recorded or armed

    # -- preparation -----------------------------------------------------------------------

    def prepare(
        self, claim: str, compiled: CompiledTopology, allocations: Mapping[str, AllocatedDevice]
    ) -> dict[str, PreparedState]:
        detail = {
            "roots": list(compiled.prepare_order),
            "plugins": {n: compiled.steps[n].plugin for n in compiled.prepare_order},
        }
        # The roots are recorded before the first call, so an interrupted prepare can be undone.
        self._set_unit(
            Hook.NODE_PREPARE, claim, "preparation", compiled.topology.name, "preparing", detail
        )
        prepared: dict[str, PreparedState] = {}
        for name in compiled.prepare_order:
            step = compiled.steps[name]
            allocation = allocations[name]
            scope = prep_scope(claim, name)
            claims = resource_claims(step.plugin, allocation)
            # Refused before any plugin is asked.
            self._commit(
                Hook.NODE_PREPARE, scope, "claim", partial(self.authority.claim, scope, claims)
            )
            request = PrepareRequest(
                self._envelope(Hook.NODE_PREPARE, scope, name),
                allocation.binding(root_id(claim, name)),
                step.config_json,
            )
            with self.authority.mutating([c.resource for c in claims]):
                response = self._call(
                    scope, name, step.plugin, request, lambda c, r=request: c.node_prepare(r)
                )
            prepared[name] = response.prepared_state
        self._set_unit(
            Hook.NODE_PREPARE, claim, "preparation", compiled.topology.name, "prepared", detail
        )
        return prepared

    def prepared_states(self, claim: str) -> dict[str, PreparedState]:
        """What each root's NodePrepare returned, read back from the journal.

        A restarted coordinator has lost the caller's copy; ``connect`` needs it. Only the
        roots whose NodePrepare succeeded are listed.
        """
        unit = self.journal.unit(claim)
        prepared: dict[str, PreparedState] = {}
        for name in [] if unit is None else unit[1].get("roots", []):
            call = self.journal.call(operation_id(prep_scope(claim, name), name, Hook.NODE_PREPARE))
            if call is not None and call.state == "succeeded" and call.response is not None:
                response: PrepareResponse = from_json_value(PrepareResponse, call.response)
                prepared[name] = response.prepared_state
        return prepared

    # -- attachment ------------------------------------------------------------------------

    def connect(
        self,
        attachment: str,
        claim: str,
        compiled: CompiledTopology,
        allocations: Mapping[str, AllocatedDevice],
        prepared: Mapping[str, PreparedState],
        sandbox: SandboxHandle,
    ) -> Attachment:
        detail = {
            "claim": claim,
            "order": list(compiled.connect_order),
            "plugins": {n: s.plugin for n, s in compiled.steps.items()},
        }
        self._set_unit(
            Hook.CONNECT_NETWORK,
            attachment,
            "attachment",
            compiled.topology.name,
            "connecting",
            detail,
        )
        result = Attachment(attachment, ready=False)
        for name in compiled.connect_order:
            step = compiled.steps[name]
            inputs = {
                port: tuple(h for src in sources for h in result.outputs[src.step][src.output])
                for port, sources in step.inputs.items()
                if sources
            }
            allowed = step.descriptor.allowed_effects.get(Hook.CONNECT_NETWORK.value, ())
            grants = tuple(
                Grant(kind, h.id) for hs in inputs.values() for h in hs for kind in allowed
            )
            request = ConnectRequest(
                self._envelope(Hook.CONNECT_NETWORK, attachment, name),
                sandbox,
                step.config_json,
                inputs=inputs,
                interface_names=dict(step.interface_names),
                prepared=prepared.get(name),
                allocation=allocations[name].binding(root_id(claim, name))
                if step.is_root
                else None,
                grants=grants,
            )
            try:
                response = self._call(
                    attachment,
                    name,
                    step.plugin,
                    request,
                    lambda c, r=request: c.connect_network(r),
                )
            except StepFailed:
                self._set_unit(
                    Hook.CONNECT_NETWORK,
                    attachment,
                    "attachment",
                    compiled.topology.name,
                    "failed",
                    detail,
                )
                raise
            result.outputs[name] = dict(response.outputs)
        self._set_unit(
            Hook.CONNECT_NETWORK, attachment, "attachment", compiled.topology.name, "ready", detail
        )
        result.ready = True
        return result

    def remove(self, attachment: str) -> dict[str, CleanupResponse]:
        """Remove every requested step, dependents first; stop at the first unclean receipt.

        A step that never ran has no receipt (it was never requested, or the plugin has
        no record of it).
        """
        unit = self.journal.unit(attachment)
        if unit is None:
            return {}
        _, detail = unit
        requested = {
            c.step for c in self.journal.calls(attachment) if c.hook == Hook.CONNECT_NETWORK.value
        }
        receipts: dict[str, CleanupResponse] = {}
        self._set_unit(Hook.REMOVE_NETWORK, attachment, "attachment", "", "removing", detail)
        for name in reversed(detail["order"]):
            if name not in requested:
                continue
            request = CleanupRequest(self._envelope(Hook.REMOVE_NETWORK, attachment, name))
            plugin = detail["plugins"][name]
            receipt = self._cleanup(attachment, name, plugin, request, remove=True)
            if receipt is None:
                continue  # it never ran: nothing of it to remove
            receipts[name] = receipt
            if receipt.status is not CleanupStatus.CLEANED:
                return receipts  # ancestors wait for this dependent's receipt
        self._set_unit(Hook.REMOVE_NETWORK, attachment, "attachment", "", "removed", detail)
        return receipts

    def unprepare(self, claim: str) -> dict[str, CleanupResponse]:
        """Unprepare every root in reverse, releasing its claims on a CLEANED receipt; stop
        at the first unclean one. A root that was never prepared (its NodePrepare never
        sent, or the plugin has no record of it) has no receipt; its claims are released."""
        unit = self.journal.unit(claim)
        if unit is None:
            return {}
        _, detail = unit
        receipts: dict[str, CleanupResponse] = {}
        for name in reversed(detail.get("roots", [])):
            scope = prep_scope(claim, name)
            sent = any(c.hook == Hook.NODE_PREPARE.value for c in self.journal.calls(scope))
            receipt = None
            if sent:
                request = CleanupRequest(self._envelope(Hook.NODE_UNPREPARE, scope, name))
                plugin = detail["plugins"][name]
                receipt = self._cleanup(scope, name, plugin, request, remove=False)
            if receipt is not None:
                receipts[name] = receipt
                if receipt.status is not CleanupStatus.CLEANED:
                    return receipts
            # Only a CLEANED receipt, or a root that never ran, frees the resource.
            self._commit(
                Hook.NODE_UNPREPARE, scope, "release", partial(self.authority.release, scope)
            )
        self._set_unit(Hook.NODE_UNPREPARE, claim, "preparation", "", "unprepared", detail)
        return receipts

    # -- plumbing --------------------------------------------------------------------------

    def _envelope(self, hook: Hook, scope: str, step: str) -> OperationEnvelope:
        return OperationEnvelope(operation_id(scope, step, hook), hook, scope, step, 1, self.epoch)

    def _commit(
        self, hook: Hook, subject: str, commit: str, write: Callable[[], T], detail: str = ""
    ) -> T:
        """One journal commit (writing the state ``detail``, where the commit writes one of
        several), between two crash points (a crash on either side is survivable)."""
        with self.crash.scope(hook.value, subject, owner=Owner.COORDINATOR):
            return self.crash.commit(commit, write, detail)

    def _set_unit(
        self, hook: Hook, unit: str, kind: str, topology: str, state: str, detail: dict[str, Any]
    ) -> None:
        self._commit(
            hook,
            unit,
            "set_unit",
            lambda: self.journal.set_unit(unit, kind, topology, state, detail),
            state,
        )

    def _finish(
        self, env: OperationEnvelope, state: str, response: Any = None, error: str | None = None
    ) -> None:
        self._commit(
            env.hook,
            env.operation_id,
            "finish_call",
            lambda: self.journal.finish_call(env.operation_id, state, response, error),
            state,
        )

    def _record(self, unit: str, step: str, plugin: str, request: Any) -> OperationEnvelope:
        """Journal the intent to call, before the call leaves this process."""
        env: OperationEnvelope = request.envelope
        call = Call(
            env.operation_id,
            unit,
            step,
            plugin,
            env.hook.value,
            env.generation,
            to_json_value(request),
            "requested",
            None,
            None,
        )
        self._commit(
            env.hook, env.operation_id, "record_call", lambda: self.journal.record_call(call)
        )
        return env

    def _admit(self, plugin: str) -> PluginClient:
        """The plugin's client, once it says the call may leave (its peer checked)."""
        client = self.clients[plugin]
        if isinstance(client, CheckedPluginClient):
            client.admit()
        return client

    def _call(self, unit: str, step: str, plugin: str, request: Any, send: Any) -> Any:
        hook: Hook = request.envelope.hook
        try:
            client = self._admit(plugin)
        except PluginCallError as exc:  # nothing journaled, nothing sent: the step never ran
            raise StepFailed(step, hook.value, f"{exc.code}: {exc.message}") from exc
        env = self._record(unit, step, plugin, request)
        with self.observer(env.hook.value, step, plugin, request) as seen:
            try:
                response = send(client)
            except PluginCallError as exc:
                error = f"{exc.code}: {exc.message}"
                self._finish(env, "failed", error=error)
                seen(error)
                raise StepFailed(step, env.hook.value, error) from exc
            self._finish(env, "succeeded", to_json_value(response))
            seen(response)
        return response

    def _cleanup(
        self, unit: str, step: str, plugin: str, request: CleanupRequest, *, remove: bool
    ) -> CleanupResponse | None:
        """The step's cleanup receipt; None when the step never ran (nothing to clean)."""
        try:
            client = self._admit(plugin)
        except PluginCallError as exc:  # nothing journaled, nothing sent
            return CleanupResponse(CleanupStatus.PENDING, f"{exc.code}: {exc.message}")
        send = client.remove_network if remove else client.node_unprepare
        env = self._record(unit, step, plugin, request)
        with self.observer(env.hook.value, step, plugin, request) as seen:
            try:
                receipt = send(request)
            except PluginCallError as exc:
                # Not proof of anything: the step stays pending until a receipt says CLEANED,
                # or the plugin says it never ran.
                error = f"{exc.code}: {exc.message}"
                self._finish(env, "pending", error=error)
                receipt = CleanupResponse(CleanupStatus.PENDING, error)
                seen(receipt)
                return None if self._never_ran(client, env, error) else receipt
            if receipt.status is CleanupStatus.CLEANED:
                # The receipt proves nothing of this step is left: every call of it that
                # never succeeded (requested, failed) is closed in the same commit.
                self._commit(
                    env.hook,
                    env.operation_id,
                    "finish_cleanup",
                    lambda: self.journal.finish_cleanup(env.operation_id, to_json_value(receipt)),
                )
            else:
                state = {"PENDING": "pending", "QUARANTINED": "quarantined"}
                self._finish(env, state[receipt.status.value], to_json_value(receipt))
            seen(receipt)
        return receipt

    def _never_ran(self, client: PluginClient, cleanup: OperationEnvelope, refusal: str) -> bool:
        """After a refused cleanup: True, and the step's open calls closed, if no call of
        the step that creates something ever succeeded and the plugin has no record of
        any of them (its journal records an operation before its first effect)."""
        create = _CREATE_OF[cleanup.hook].value
        calls = self.journal.calls(cleanup.scope)
        creates = [c for c in calls if c.step == cleanup.step and c.hook == create]
        if any(c.state not in OPEN_CALL_STATES for c in creates):
            return False  # one succeeded (or was cleaned up): it ran
        try:
            if any(client.inspect(c.operation_id, cleanup.scope).found for c in creates):
                return False
        except PluginCallError:
            return False  # no answer is no evidence
        evidence = {
            "noRecord": [c.operation_id for c in creates],
            "cleanup": cleanup.operation_id,
            "refusal": refusal,
        }
        self._commit(
            cleanup.hook,
            cleanup.operation_id,
            "abandon_unrun",
            lambda: self.journal.abandon_unrun(cleanup.scope, cleanup.step, evidence),
        )
        return True


CallObserver = Callable[[str, str, str, Any], AbstractContextManager[Callable[[Any], None]]]
"""``observer(hook, step, plugin, request)`` wraps one plugin call; the callable it yields
receives the response (or the error text). The rig uses it for report steps."""


@contextmanager
def no_observer(hook: str, step: str, plugin: str, request: Any) -> Iterator[Callable[[Any], None]]:
    yield lambda outcome: None


def prep_scope(claim: str, step: str) -> str:
    return f"{claim}.{step}"


def root_id(claim: str, step: str) -> str:
    """The allocation root's identity: one per (claim, step), like its preparation scope."""
    return prep_scope(claim, step)


def operation_id(scope: str, step: str, hook: Hook, generation: int = 1) -> str:
    """Deterministic: a retry after a coordinator crash reuses the same identity."""
    return f"{scope}:{step}:{hook.value}:g{generation}"
