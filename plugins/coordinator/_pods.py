"""The node's pods: what the kubelet's claims and the runtime's sandboxes make the
coordinator do, with the readiness gate. Kubernetes-shaped but wire-free: the kubelet DRA
plugin, the NRI adapter and the API client (``kubelet``, ``nri``, ``kubeapi``) translate
their messages into these calls.

The order is the kubelet's: a claim is prepared (``prepare``: NodePrepare of the
topology's roots) before its pod's sandbox exists; the runtime's RunPodSandbox brings the
network namespace (``run_pod_sandbox``: ConnectNetwork); StopPodSandbox removes the
networks (RemoveNetwork), the kubelet's unprepare follows (NodeUnprepare), and the
runtime's RemovePodSandbox comes later, at garbage collection, and cleans whatever is left.

Every decision is journaled before it acts, in the coordinator's journal, as units:
``kube-claim:<uid>`` (the claim as read from the API server at prepare, with the devices
bound to the topology's roots; the kubelet's unprepare carries only uid, namespace and
name, so it is answered from here) and ``sandbox:<id>`` (the pod, the namespace identity
and one attachment per claim). A restarted coordinator finishes what these say was under
way (``recover``).

NRI is fail-open: a plugin that is slow or away is dropped and the sandbox runs without
it. So nothing here trusts that RunPodSandbox was seen: ``create_container`` is the gate.
It lets a container of a pod with our claims be created only when every claim's
topology is connected *in this sandbox's namespace* (its device and inode now equal
those journaled at connect, the boot too); otherwise it refuses (the kubelet retries the
container) and, if nothing is connecting that sandbox, starts connecting it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Final

from plugins.sdk import (
    CleanupStatus,
    FailedPrecondition,
    InvalidArgument,
    NamespaceHandle,
    NetworkPluginError,
    SandboxHandle,
)
from plugins.sdk.runner import NO_CRASH, UNSCOPED, CrashPoints, Owner

from ._allocate import AllocationError, Allocator
from ._compile import CompiledTopology
from ._journal import CoordinatorJournal
from ._pod_values import (
    ClaimDevice,
    ClaimProblem,
    ClaimSource,
    GateRefused,
    KubeClaim,
    NamespaceResolver,
    PodSandboxInfo,
    StatusSink,
    attachment_for,
    device_networks,
)
from ._program_values import allocation_from_json, allocation_to_json, one_line
from ._runtime import Coordinator

__all__ = ["CLAIM_KIND", "SANDBOX_KIND", "PodCounters", "PodNetworks", "claim_unit", "sandbox_unit"]

log = logging.getLogger("plugins.coordinator.pods")

CLAIM_KIND: Final = "kube-claim"
SANDBOX_KIND: Final = "sandbox"
DEFAULT_ANSWER_WITHIN_S: Final = 1.5
"""How long RunPodSandbox and CreateContainer wait for a connect before answering: below
NRI's default 2 s request timeout, so the runtime never drops us for being slow."""


def claim_unit(uid: str) -> str:
    return f"{CLAIM_KIND}:{uid}"


def sandbox_unit(sandbox_id: str) -> str:
    return f"{SANDBOX_KIND}:{sandbox_id}"


def claim_key(detail: Mapping[str, Any]) -> str:
    """The claim's identity in the coordinator's calls: its uid, and a round suffix when
    a later pod prepared it again after an unprepare."""
    return str(detail.get("key") or detail["claim"]["uid"])


@dataclass
class PodCounters:
    """What the adapters did, for metrics and the rig's summaries."""

    prepared: int = 0
    unprepared: int = 0
    connected: int = 0
    removed: int = 0
    gate_refusals: int = 0
    gate_passes: int = 0
    resynchronized: int = 0
    evictions: int = 0
    errors: list[str] = field(default_factory=list)


class PodNetworks:
    """Claims prepared for the kubelet, sandboxes connected for the runtime, and the gate.

    ``answer_within_s`` None runs every connect in the caller's thread (the rig's crash
    enumeration needs the crash to reach it); a number runs it on a worker and answers
    after that long at most, leaving the gate to hold the containers back.
    """

    def __init__(
        self,
        journal: CoordinatorJournal,
        coordinator: Coordinator,
        topologies: Mapping[str, CompiledTopology],
        allocator: Allocator,
        claims: ClaimSource,
        resolve_namespace: NamespaceResolver,
        *,
        pool: str,
        status: StatusSink | None = None,
        answer_within_s: float | None = DEFAULT_ANSWER_WITHIN_S,
        crash: CrashPoints = NO_CRASH,
        lock: threading.RLock | None = None,
    ) -> None:
        """``lock``: shared with whatever else drives ``coordinator`` and ``allocator``
        (the program's ``CoordinatorService``); None: one of its own."""
        self._journal = journal
        self._coordinator = coordinator
        self._topologies = dict(topologies)
        self._allocator = allocator
        self._claims = claims
        self._resolve = resolve_namespace
        self._pool = pool
        self._status = status
        self._answer_within_s = answer_within_s
        self._crash = crash
        self._lock = lock or threading.RLock()
        self._connecting: dict[str, Future[None]] = {}
        self._pending_evictions: set[str] = set()
        self._workers = (
            None
            if answer_within_s is None
            else ThreadPoolExecutor(max_workers=2, thread_name_prefix="pod-connect")
        )
        self.counters = PodCounters()
        for state, detail in journal.units(CLAIM_KIND).values():
            if state in ("preparing", "prepared", "failed", "unpreparing"):
                self._reserve(detail)

    def close(self) -> None:
        if self._workers is not None:
            self._workers.shutdown(wait=True, cancel_futures=False)

    # -- the kubelet ------------------------------------------------------------------------

    def prepare(self, namespace: str, name: str, uid: str) -> tuple[ClaimDevice, ...]:
        """NodePrepareResources for one claim: idempotent; raises a clear error."""
        if not uid or not namespace or not name:
            raise InvalidArgument(
                f"claim {namespace!r}/{name!r} uid {uid!r}: namespace, name and uid are required"
            )
        with self._lock:
            found = self._journal.unit(claim_unit(uid))
            if found is not None and found[0] == "prepared":
                return KubeClaim.from_json(found[1]["claim"]).devices
            if found is not None and found[0] == "unpreparing":
                raise FailedPrecondition(
                    f"claim {namespace}/{name} (uid {uid}) is still being unprepared: "
                    f"{found[1].get('error', '')}; retry once it is done"
                )
            if found is None or found[0] == "unprepared":
                # A claim outlives its pods: the next pod using it prepares it again, as
                # a new round (new operation identities: the last round's are finished).
                rounds = 0 if found is None else int(found[1].get("round", 1))
                claim = self._claims.resolve(namespace, name, uid)
                compiled = self._topology_of(claim)
                chosen = self._chosen(claim, compiled)
                try:
                    allocations = self._allocator.bind(compiled, chosen)
                except AllocationError as exc:
                    raise ClaimProblem(f"claim {claim.ref}: {exc}") from exc
                detail: dict[str, Any] = {
                    "claim": claim.to_json(),
                    "allocations": {s: allocation_to_json(a) for s, a in allocations.items()},
                    "round": rounds + 1,
                    "key": uid if rounds == 0 else f"{uid}-r{rounds + 1}",
                    "error": "",
                }
                try:
                    self._set(claim_unit(uid), CLAIM_KIND, claim.topology, "preparing", detail)
                except BaseException:
                    self._allocator.release(allocations)
                    raise
            else:
                detail = found[1]
                claim = KubeClaim.from_json(detail["claim"])
                compiled = self._topology_of(claim)
            return self._run_prepare(claim, compiled, detail)

    def unprepare(self, namespace: str, name: str, uid: str) -> None:
        """NodeUnprepareResources for one claim, answered from the journal: the sandboxes
        still connected with it are cleaned first; raises while anything is left."""
        with self._lock:
            found = self._journal.unit(claim_unit(uid))
            if found is None or found[0] == "unprepared":
                return  # never prepared here, or done: nothing of it exists
            detail = found[1]
            claim = KubeClaim.from_json(detail["claim"])
            if (namespace, name) != (claim.namespace, claim.name):
                raise InvalidArgument(
                    f"claim uid {uid} was prepared as {claim.namespace}/{claim.name}, "
                    f"not {namespace}/{name}"
                )
            for sandbox_id, (sb_state, sb_detail) in self._journal.units(SANDBOX_KIND).items():
                if uid in sb_detail["attachments"] and sb_state not in ("stopped", "removed"):
                    self._remove_sandbox(sandbox_id.partition(":")[2], sb_state, sb_detail)
                    still = self._journal.unit(sandbox_id)
                    if still is not None and still[0] not in ("stopped", "removed"):
                        raise FailedPrecondition(
                            f"claim {claim.ref}: sandbox {sandbox_id.partition(':')[2]} is "
                            f"still {still[0]}: {still[1].get('error', '')}"
                        )
            self._set(claim_unit(uid), CLAIM_KIND, claim.topology, "unpreparing", detail)
            receipts = self._coordinator.unprepare(claim_key(detail))
            unclean = [
                f"{step}: {r.status.value} {one_line(r.detail)}"
                for step, r in receipts.items()
                if r.status is not CleanupStatus.CLEANED
            ]
            if unclean:
                self._set(
                    claim_unit(uid),
                    CLAIM_KIND,
                    claim.topology,
                    "unpreparing",
                    {**detail, "error": "; ".join(unclean)},
                )
                raise FailedPrecondition(f"claim {claim.ref}: not unprepared yet: {unclean[0]}")
            self._set(claim_unit(uid), CLAIM_KIND, claim.topology, "unprepared", detail)
            self._release(detail)  # in memory only: a restart reserves no unprepared claim
            self.counters.unprepared += 1

    # -- the runtime ------------------------------------------------------------------------

    def run_pod_sandbox(self, sandbox: PodSandboxInfo) -> None:
        """Connect every claim of the pod in the sandbox's namespace. Answers within
        ``answer_within_s``; a connect that takes longer goes on, and the gate holds the
        pod's containers until it is done. A failed connect is undone, then raised."""
        claims = self._claims_of(sandbox.pod_uid)
        if not claims:
            return  # not a pod of ours
        future = self._start_connect(sandbox, claims)
        self._await(future, sandbox)

    def stop_pod_sandbox(self, sandbox: PodSandboxInfo) -> None:
        """Remove the sandbox's networks (its namespace may be gone already: a clean case)."""
        with self._lock:
            found = self._journal.unit(sandbox_unit(sandbox.id))
            if found is None or found[0] in ("stopped", "removed"):
                return
            self._remove_sandbox(sandbox.id, *found)
            self._raise_if_left(sandbox.id)

    def remove_pod_sandbox(self, sandbox: PodSandboxInfo) -> None:
        """Garbage collection: whatever is left of the sandbox is removed, then forgotten."""
        with self._lock:
            found = self._journal.unit(sandbox_unit(sandbox.id))
            if found is None or found[0] == "removed":
                return
            if found[0] != "stopped":
                self._remove_sandbox(sandbox.id, *found)
                self._raise_if_left(sandbox.id)
            detail = (self._journal.unit(sandbox_unit(sandbox.id)) or found)[1]
            self._set(sandbox_unit(sandbox.id), SANDBOX_KIND, "", "removed", detail)

    def create_container(self, sandbox: PodSandboxInfo, container_id: str) -> list[str]:
        """The readiness gate: refuse (:class:`GateRefused`) a container of a pod with our
        claims unless every claim is connected in this very sandbox's namespace. A
        container let through gets the evictions Synchronize found, to answer with.

        A connect in progress is waited for (up to ``answer_within_s``). A sandbox nobody
        is connecting (its RunPodSandbox was missed: we were away, or a crash undid it)
        is refused this time and connected now, so the kubelet's retry finds it ready."""
        claims = self._claims_of(sandbox.pod_uid)
        if not claims:
            return self._take_evictions()
        problem = self._gate_problem(sandbox, claims)
        if problem is not None:
            running = self._connecting.get(sandbox.id)
            if running is not None:
                with contextlib.suppress(FutureTimeout, NetworkPluginError):
                    running.result(timeout=self._answer_within_s)
                problem = self._gate_problem(sandbox, claims)
            elif self._needs_connect(sandbox):
                with contextlib.suppress(NetworkPluginError):
                    self._start_connect(sandbox, claims)
        if problem is not None:
            self.counters.gate_refusals += 1
            log.warning(
                "gate: container %s of pod %s/%s refused: %s",
                container_id,
                sandbox.pod_namespace,
                sandbox.pod_name,
                problem,
            )
            raise GateRefused(
                f"container {container_id} in sandbox {sandbox.id}: pod networking is not "
                f"ready: {problem}; the kubelet retries"
            )
        self._admit(sandbox.id, container_id)
        self.counters.gate_passes += 1
        return self._take_evictions()

    def _take_evictions(self) -> list[str]:
        """The evictions Synchronize found, to carry in the answer to a CreateContainer
        the gate lets through: the one route containerd honours (it drops those of
        UpdateContainers). Given out once; the next Synchronize finds any left."""
        with self._lock:
            taken, self._pending_evictions = sorted(self._pending_evictions), set()
        return taken

    def _admit(self, sandbox_id: str, container_id: str) -> None:
        """Journal that the gate let ``container_id`` through: after a drop, a container
        of ours the gate never admitted started ungated (``synchronize`` evicts it)."""
        with self._lock:
            found = self._journal.unit(sandbox_unit(sandbox_id))
            if found is None or container_id in found[1].get("admitted", []):
                return
            state, detail = found
            admitted = [*detail.get("admitted", []), container_id]
            self._set(
                sandbox_unit(sandbox_id),
                SANDBOX_KIND,
                "",
                state,
                {**detail, "admitted": admitted},
                admitted=container_id,
            )

    def synchronize(
        self, sandboxes: Sequence[PodSandboxInfo], containers: Sequence[tuple[str, str]] = ()
    ) -> list[str]:
        """The runtime's view after (re)registration, with its containers as
        ``(container id, sandbox id)``: connect the sandboxes that started while we were
        away, remove the networks of sandboxes the runtime no longer has, and return the
        containers to evict: those of our pods the gate never admitted (they started
        while we were away; the kubelet recreates them, and the gate then holds)."""
        present = {s.id: s for s in sandboxes}
        evict: list[str] = []
        for sandbox in sandboxes:
            claims = self._claims_of(sandbox.pod_uid)
            found = self._journal.unit(sandbox_unit(sandbox.id))
            if not claims or (found is not None and found[0] in ("removing", "stopped", "removed")):
                continue  # not ours, or stopping: nothing in it may run any more
            admitted = set() if found is None else set(found[1].get("admitted", []))
            evict += [c for c, sid in containers if sid == sandbox.id and c not in admitted]
            if self._needs_connect(sandbox):
                self.counters.resynchronized += 1
                try:
                    self._start_connect(sandbox, claims)
                except NetworkPluginError as exc:
                    log.error("synchronize: sandbox %s: %s", sandbox.id, exc)
        for unit, (state, detail) in self._journal.units(SANDBOX_KIND).items():
            sandbox_id = unit.partition(":")[2]
            if sandbox_id not in present and state not in ("stopped", "removed"):
                with self._lock:
                    self._remove_sandbox(sandbox_id, state, detail)
        self.counters.evictions += len(evict)
        with self._lock:
            self._pending_evictions.update(evict)
        if evict:
            log.warning("synchronize: evicting containers that started ungated: %s", evict)
        return evict

    # -- recovery ---------------------------------------------------------------------------

    def recover(self) -> list[str]:
        """Finish what a crash interrupted: prepares and unprepares, connects and removals."""
        notes: list[str] = []
        with self._lock:
            for state, detail in self._journal.units(CLAIM_KIND).values():
                claim = KubeClaim.from_json(detail["claim"])
                try:
                    if state == "preparing":
                        self._run_prepare(claim, self._topology_of(claim), detail)
                        notes.append(f"claim {claim.ref}: the interrupted prepare completed")
                    elif state == "unpreparing":
                        self.unprepare(claim.namespace, claim.name, claim.uid)
                        notes.append(f"claim {claim.ref}: the interrupted unprepare completed")
                except NetworkPluginError as exc:
                    notes.append(f"claim {claim.ref}: left {state}: {one_line(str(exc))}")
            for unit, (state, detail) in self._journal.units(SANDBOX_KIND).items():
                sandbox_id = unit.partition(":")[2]
                if state == "removing":
                    self._remove_sandbox(sandbox_id, state, detail)
                    after = self._journal.unit(unit)
                    notes.append(f"sandbox {sandbox_id}: removal resumed: {after and after[0]}")
                elif state == "connecting":
                    # Left for the runtime's Synchronize (connect it if it still runs,
                    # remove it if not) or the gate; the kubelet's unprepare removes it too.
                    notes.append(f"sandbox {sandbox_id}: connect interrupted; awaiting the runtime")
        return notes

    # -- the work ---------------------------------------------------------------------------

    def _run_prepare(
        self, claim: KubeClaim, compiled: CompiledTopology, detail: dict[str, Any]
    ) -> tuple[ClaimDevice, ...]:
        allocations = self._allocations(detail)
        try:
            self._coordinator.prepare(claim_key(detail), compiled, allocations)
        except NetworkPluginError as exc:
            self._set(
                claim_unit(claim.uid),
                CLAIM_KIND,
                claim.topology,
                "failed",
                {**detail, "error": one_line(str(exc))},
            )
            raise
        self._set(
            claim_unit(claim.uid), CLAIM_KIND, claim.topology, "prepared", {**detail, "error": ""}
        )
        self.counters.prepared += 1
        return claim.devices

    def _start_connect(
        self, sandbox: PodSandboxInfo, claims: Sequence[KubeClaim]
    ) -> Future[None] | None:
        if self._workers is None:
            self._connect(sandbox, claims)
            return None
        with self._lock:
            running = self._connecting.get(sandbox.id)
            if running is not None and not running.done():
                return running
            future = self._workers.submit(self._connect, sandbox, claims)
            self._connecting[sandbox.id] = future
            future.add_done_callback(functools.partial(self._forget, sandbox.id))
            return future

    def _forget(self, sandbox_id: str, future: Future[None]) -> None:
        with self._lock:
            if self._connecting.get(sandbox_id) is future:
                del self._connecting[sandbox_id]

    def _await(self, future: Future[None] | None, sandbox: PodSandboxInfo) -> None:
        if future is None:
            return
        try:
            future.result(timeout=self._answer_within_s)
        except FutureTimeout:
            log.info(
                "sandbox %s: still connecting after %.1fs; answered, the gate holds its containers",
                sandbox.id,
                self._answer_within_s,
            )

    def _connect(self, sandbox: PodSandboxInfo, claims: Sequence[KubeClaim]) -> None:
        with self._lock:
            namespace = self._namespace(sandbox)
            unit = sandbox_unit(sandbox.id)
            found = self._journal.unit(unit)
            if found is not None and found[0] == "connected":
                return
            if found is not None and found[0] in ("removing", "stopped", "removed"):
                raise FailedPrecondition(f"sandbox {sandbox.id} is {found[0]}")
            self._finish_removals_holding(sandbox.id, {c.uid for c in claims})
            attachments = {c.uid: attachment_for(sandbox.id, c.uid) for c in claims}
            detail: dict[str, Any] = {
                "pod": {
                    "uid": sandbox.pod_uid,
                    "namespace": sandbox.pod_namespace,
                    "name": sandbox.pod_name,
                },
                "netns": {
                    "path": namespace.path,
                    "device": namespace.device,
                    "inode": namespace.inode,
                    "bootId": namespace.boot_id,
                },
                "attachments": attachments,
                "error": "",
            }
            self._set(unit, SANDBOX_KIND, "", "connecting", detail)
            handle = SandboxHandle(sandbox.id, namespace)
            try:
                for claim in claims:
                    self._connect_claim(claim, attachments[claim.uid], handle)
            except NetworkPluginError as exc:
                log.error("sandbox %s: connect failed: %s; undoing", sandbox.id, exc)
                self._set(unit, SANDBOX_KIND, "", "removing", {**detail, "error": str(exc)})
                self._remove_sandbox(sandbox.id, "removing", detail)
                self.counters.errors.append(f"sandbox {sandbox.id}: {one_line(str(exc))}")
                raise
            self._set(unit, SANDBOX_KIND, "", "connected", detail)
            self.counters.connected += 1

    def _connect_claim(self, claim: KubeClaim, attachment: str, handle: SandboxHandle) -> None:
        found = self._journal.unit(claim_unit(claim.uid))
        if found is None or found[0] != "prepared":
            state = "never prepared" if found is None else found[0]
            raise FailedPrecondition(f"claim {claim.ref} is {state}, not prepared")
        compiled = self._topology_of(claim)
        key = claim_key(found[1])
        attached = self._coordinator.connect(
            attachment,
            key,
            compiled,
            self._allocations(found[1]),
            self._coordinator.prepared_states(key),
            handle,
        )
        status = self._status
        if status is not None:
            networks = device_networks(claim, attached.outputs)
            self._report(status.connected, claim, networks)

    def _remove_sandbox(self, sandbox_id: str, state: str, detail: dict[str, Any]) -> None:
        unit = sandbox_unit(sandbox_id)
        if state != "removing":
            self._set(unit, SANDBOX_KIND, "", "removing", detail)
        left: list[str] = []
        for claim_uid, attachment in sorted(detail["attachments"].items()):
            receipts = self._coordinator.remove(attachment)
            left += [
                f"{step}: {r.status.value} {one_line(r.detail)}"
                for step, r in receipts.items()
                if r.status is not CleanupStatus.CLEANED
            ]
            status = self._status
            found = self._journal.unit(claim_unit(claim_uid))
            if not left and status is not None and found is not None:
                claim = KubeClaim.from_json(found[1]["claim"])
                self._report(status.disconnected, claim)
        if left:
            self._set(unit, SANDBOX_KIND, "", "removing", {**detail, "error": "; ".join(left)})
            return
        self._set(unit, SANDBOX_KIND, "", "stopped", {**detail, "error": ""})
        self.counters.removed += 1

    def _finish_removals_holding(self, sandbox_id: str, claim_uids: set[str]) -> None:
        """Remove again every other sandbox still ``removing`` one of these claims.

        A connect that failed because its service died is undone at once, and that undo
        fails too while the service is down: the sandbox stays ``removing``, its claim's
        root still attached, and the plugin refuses the root to any other attachment.
        The kubelet's next sandbox of the pod finishes the removal first, so it connects
        once the service is back (and is refused, naming what is left, while it is not).
        """
        # Only the removing units are read: removed sandboxes stay in the journal.
        for unit, (state, detail) in self._journal.units(SANDBOX_KIND, "removing").items():
            other = unit.partition(":")[2]
            if other == sandbox_id:
                continue
            if not claim_uids & set(detail["attachments"]):
                continue
            log.info("sandbox %s: finishing the removal of sandbox %s first", sandbox_id, other)
            self._remove_sandbox(other, state, detail)
            self._raise_if_left(other)

    def _raise_if_left(self, sandbox_id: str) -> None:
        found = self._journal.unit(sandbox_unit(sandbox_id))
        if found is not None and found[0] == "removing":
            raise FailedPrecondition(
                f"sandbox {sandbox_id}: networks not removed yet: {found[1].get('error', '')}"
            )

    def _gate_problem(self, sandbox: PodSandboxInfo, claims: Sequence[KubeClaim]) -> str | None:
        found = self._journal.unit(sandbox_unit(sandbox.id))
        if found is None:
            return "its networks were never connected"
        state, detail = found
        if state != "connected":
            why = detail.get("error") or ""
            return f"its networks are {state}" + (f" ({why})" if why else "")
        missing = [c.ref for c in claims if c.uid not in detail["attachments"]]
        if missing:
            return f"claims not connected in it: {', '.join(missing)}"
        now = self._resolve(sandbox.netns_path) if sandbox.netns_path else None
        journaled = detail["netns"]
        if now is None:
            return f"its network namespace {sandbox.netns_path!r} is gone"
        if (now.device, now.inode, now.boot_id) != (
            journaled["device"],
            journaled["inode"],
            journaled["bootId"],
        ):
            return (
                f"its network namespace {sandbox.netns_path!r} is not the one connected "
                f"(device/inode {now.device}/{now.inode}, connected "
                f"{journaled['device']}/{journaled['inode']})"
            )
        return None

    def _needs_connect(self, sandbox: PodSandboxInfo) -> bool:
        found = self._journal.unit(sandbox_unit(sandbox.id))
        return found is None or found[0] == "connecting"

    # -- helpers ----------------------------------------------------------------------------

    def _namespace(self, sandbox: PodSandboxInfo) -> NamespaceHandle:
        if not sandbox.netns_path:
            raise InvalidArgument(
                f"sandbox {sandbox.id} of pod {sandbox.pod_namespace}/{sandbox.pod_name} has "
                "no network namespace, and the pod has network claims"
            )
        if not sandbox.netns_path.startswith("/"):
            raise InvalidArgument(
                f"sandbox {sandbox.id}: network namespace path {sandbox.netns_path!r} is not "
                "absolute"
            )
        handle = self._resolve(sandbox.netns_path)
        if handle is None:
            raise FailedPrecondition(
                f"sandbox {sandbox.id}: network namespace {sandbox.netns_path} does not exist"
            )
        return handle

    def _claims_of(self, pod_uid: str) -> list[KubeClaim]:
        found = []
        for state, detail in self._journal.units(CLAIM_KIND).values():
            claim = KubeClaim.from_json(detail["claim"])
            if pod_uid in claim.pods and state in ("preparing", "prepared", "failed"):
                found.append(claim)
        return found

    def _topology_of(self, claim: KubeClaim) -> CompiledTopology:
        compiled = self._topologies.get(claim.topology)
        if compiled is None:
            known = ", ".join(sorted(self._topologies))
            raise ClaimProblem(
                f"claim {claim.ref}: topology {claim.topology!r} is not configured on this "
                f"node (known: {known})"
            )
        return compiled

    def _chosen(self, claim: KubeClaim, compiled: CompiledTopology) -> dict[str, str]:
        roots = list(compiled.prepare_order)
        chosen: dict[str, str] = {}
        for device in claim.devices:
            request = device.request.partition("/")[0]  # a prioritized list's subrequest
            if device.pool != self._pool:
                raise ClaimProblem(
                    f"claim {claim.ref}: request {device.request} was allocated {device.device} "
                    f"from pool {device.pool!r}; this node publishes pool {self._pool!r}"
                )
            if request not in roots:
                raise ClaimProblem(
                    f"claim {claim.ref}: request {device.request!r} is not a root of topology "
                    f"{compiled.topology.name} (roots: {', '.join(roots)})"
                )
            if request in chosen:
                raise ClaimProblem(
                    f"claim {claim.ref}: request {request!r} has more than one device; each "
                    "root of the topology takes exactly one"
                )
            chosen[request] = device.device
        missing = [r for r in roots if r not in chosen]
        if missing:
            raise ClaimProblem(
                f"claim {claim.ref}: topology {compiled.topology.name} needs a device for "
                f"{', '.join(missing)}; the claim allocated none"
            )
        return chosen

    @staticmethod
    def _allocations(detail: Mapping[str, Any]) -> dict[str, Any]:
        return {s: allocation_from_json(a) for s, a in detail["allocations"].items()}

    def _reserve(self, detail: Mapping[str, Any]) -> None:
        try:
            self._allocator.reserve(self._allocations(detail).values())
        except ValueError as exc:
            log.warning("claim %s: its devices cannot be reserved: %s", detail["claim"]["uid"], exc)

    def _release(self, detail: Mapping[str, Any]) -> None:
        try:
            self._allocator.release(self._allocations(detail).values())
        except ValueError as exc:
            log.warning("claim %s: releasing its devices: %s", detail["claim"]["uid"], exc)

    def _set(
        self,
        unit: str,
        kind: str,
        topology: str,
        state: str,
        detail: dict[str, Any],
        admitted: str = "",
    ) -> None:
        """One journal commit between two crash points (``Owner.PODS``, in the unit): the
        commit ``set`` of ``state``, or ``admit`` of the container ``admitted``."""
        commit, written = ("admit", admitted) if admitted else ("set", state)
        with self._crash.scope(UNSCOPED, unit, owner=Owner.PODS):
            self._crash.commit(
                commit,
                lambda: self._journal.set_unit(unit, kind, topology, state, detail),
                written,
            )

    @staticmethod
    def _report(write: Callable[..., None], *args: Any) -> None:
        """Claim status is a report, not a step: a failed write is logged, never fatal."""
        try:
            write(*args)
        except Exception as exc:  # any client failure is only logged
            log.warning("claim status not written: %s", exc)
