"""A pod's life on one node in the kubelet's order, driven into the coordinator's pod side
(``plugins.coordinator.PodNetworks``), and the coordinator crashed at every adapter
boundary of it.

The order: the claim is prepared (NodePrepareResources), the runtime runs the sandbox
(RunPodSandbox), the kubelet creates a container (CreateContainer: the gate), stops the
sandbox (StopPodSandbox), unprepares the claim once the pod's containers and sandbox are
stopped (NodeUnprepareResources), and the runtime removes the sandbox later, at garbage
collection (RemovePodSandbox).

After a crash the callers behave as theirs do: the kubelet retries its own calls
(prepare, unprepare, the container); the runtime retries nothing (NRI is fail-open: the
event went on without us) but synchronizes the plugin when it registers again, with its
sandboxes and containers. The invariants: nothing leaked or foreign touched (the
kernel equals its first snapshot), every coordinator call closed, no claim held, every
pod unit finished, and no container was let through the gate while its networking was
not in the pod's namespace (checked against the kernel, not the coordinator's word).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labs import Node
from plugins.coordinator import (
    CLAIM_KIND,
    SANDBOX_KIND,
    Allocator,
    ClaimDevice,
    ClaimProblem,
    ClaimSourceUnavailable,
    CoordinatorJournal,
    GateRefused,
    Inventory,
    KubeClaim,
    PodNetworks,
    PodSandboxInfo,
    load_policies,
)
from plugins.sdk import NamespaceHandle, NetworkPluginError
from plugins.sdk.runner import NO_CRASH, CrashPoint, CrashPoints, Owner, SimulatedCrash

from ..inprocess import in_process_node
from ..invariants import violations, without_namespace
from ..scenarios import TOPOLOGY_DIR, compiled, example_inventory, lab_inventory

__all__ = [
    "POD_PHASES",
    "POD_SCENARIOS",
    "TOPOLOGY_FILES",
    "MemoryClaims",
    "PodLifecycle",
    "PodRun",
    "ScenarioRun",
    "fake_node",
    "lab_resolver",
    "node_violations",
    "pod_crash_run",
    "pod_reference",
    "pod_scenario_run",
    "scheduled_claim",
    "unfinished_pod_units",
]

POD_PHASES = (
    "prepare",
    "run_sandbox",
    "create_container",
    "stop_sandbox",
    "unprepare",
    "remove_sandbox",
)
TOPOLOGY_FILES = {
    "sdk-macvlan": "macvlan",
    "sdk-ipvlan": "ipvlan",
    "sdk-vf-bond-vlan": "vf-bond-vlan",
    # vf-bond-vlan without the VLAN: what igb's VFs can do (their VLAN filters refuse a
    # VLAN on a bond of them), so the NIC labs run this one
    "sdk-vf-bond": "vf-bond",
}
KUBELET_RETRIES = ("prepare", "create_container", "unprepare")
ADAPTERS = (Owner.PODS, Owner.COORDINATOR)
"""Whose crash points a pod's life crashes: the node's adapter and the coordinator."""
CONTAINER_ATTEMPTS = 3


@dataclass
class MemoryClaims:
    """Claims as the API server answers them (a ``ClaimSource`` without the wire; the
    wire is ``harness.k8s.apiserver`` under the real client)."""

    claims: dict[tuple[str, str], KubeClaim] = field(default_factory=dict)
    asked: list[tuple[str, str, str]] = field(default_factory=list)

    unavailable: bool = False

    def resolve(self, namespace: str, name: str, uid: str) -> KubeClaim:
        self.asked.append((namespace, name, uid))
        if self.unavailable:
            raise ClaimSourceUnavailable("the API server did not answer (503)")
        claim = self.claims.get((namespace, name))
        if claim is None:
            raise ClaimProblem(f"claim {namespace}/{name} not found")
        if claim.uid != uid:
            raise ClaimProblem(f"claim {namespace}/{name} was replaced: uid {claim.uid}, not {uid}")
        return claim


def scheduled_claim(
    topology: str, uid: str, pod: str, name: str = "net", inventory: Inventory | None = None
) -> KubeClaim:
    """A claim of ``topology`` allocated as the scheduler would on the node of
    ``inventory`` (None: the example node; the project's CEL allocator stands in for the
    scheduler), reserved for pod ``pod``."""
    inventory = inventory or example_inventory()
    policies = load_policies(TOPOLOGY_DIR / "policies.yaml")
    allocations = Allocator(inventory, policies).allocate(compiled(TOPOLOGY_FILES[topology]))
    devices = tuple(ClaimDevice(s, inventory.pool, a.device) for s, a in allocations.items())
    return KubeClaim("default", name, uid, topology, devices, (pod,))


def lab_resolver(node: Node) -> Callable[[str], NamespaceHandle | None]:
    """Namespace identity as the lab's kernel reports it (the fake model's nsfs)."""

    def resolve(path: str) -> NamespaceHandle | None:
        for ns in node.kernel.namespaces():
            if ns.path == path:
                return NamespaceHandle(ns.path, ns.device, ns.inode, ns.boot_id)
        return None

    return resolve


def node_violations(node: Node, before: dict[str, Any], sandbox: str | None = None) -> list[str]:
    """``harness.invariants.violations`` of ``node`` against ``before``, less what no
    plugin and no lab can give back on a NIC lab's machine: an igbvf VF's permanent
    address, which it takes anew from its PF at each reset (``AgentLab.changes_since``
    leaves it out for the same reason; docs/fake-kernel-fidelity.md)."""
    found = violations(
        before,
        node.kernel,
        node.journal,
        dict(node.coordinator.clients),
        **({} if sandbox is None else {"sandbox": sandbox}),
    )
    if getattr(node.lab, "tier", "") in ("vm", "sriov"):
        found = [line for line in found if ": perm_mac: " not in line]
    return found


def pod_networks(node: Node, claims: MemoryClaims, crash: CrashPoints = NO_CRASH) -> PodNetworks:
    """The coordinator's pod side over ``node``'s coordinator and journal; every connect
    in the caller's thread (a crash must reach the caller, as it would end the process)."""
    policies = load_policies(TOPOLOGY_DIR / "policies.yaml")
    inventory = lab_inventory(node.lab)
    return PodNetworks(
        node.journal,
        node.coordinator,
        {t: compiled(f) for t, f in TOPOLOGY_FILES.items()},
        Allocator(inventory, policies),
        claims,
        lab_resolver(node),
        pool=inventory.pool,
        answer_within_s=None,
        crash=crash,
    )


@dataclass
class PodLifecycle:
    """One pod with one claim of ``topology`` on ``node``, in the kubelet's order."""

    topology: str
    node: Node
    pods: PodNetworks
    claims: MemoryClaims
    uid: str = "5f1c0a2e-7d41-4c55-9a36-0c9d2b6e1f01"
    pod_uid: str = "pod-uid-1"
    sandbox_id: str = "sandbox-1"
    container_id: str = "container-1"
    results: dict[str, Any] = field(default_factory=dict)
    gate_refusals: int = 0
    gate_violations: list[str] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.claims.claims[("default", "net")] = scheduled_claim(
            self.topology, self.uid, self.pod_uid, inventory=lab_inventory(self.node.lab)
        )
        handle = self.node.sandbox()
        self.sandbox = PodSandboxInfo(
            self.sandbox_id, self.pod_uid, "default", "web", handle.namespace.path
        )

    def phase(self, name: str) -> Callable[[], Any]:
        pods = self.pods
        return {
            "prepare": lambda: pods.prepare("default", "net", self.uid),
            "run_sandbox": lambda: pods.run_pod_sandbox(self.sandbox),
            "create_container": self._create_container,
            "stop_sandbox": lambda: pods.stop_pod_sandbox(self.sandbox),
            "unprepare": lambda: pods.unprepare("default", "net", self.uid),
            "remove_sandbox": lambda: pods.remove_pod_sandbox(self.sandbox),
        }[name]

    def run(self, start: int = 0) -> int | None:
        """Run from phase ``start``; the index of the phase a crash ended, or None."""
        for index, name in enumerate(POD_PHASES[start:], start):
            try:
                self.results[name] = self.phase(name)()
            except SimulatedCrash:
                return index
            except NetworkPluginError as exc:
                self.failures.append(f"{name} failed: {exc}")
                return None
        return None

    def _create_container(self) -> str:
        """The kubelet creates the container, retrying a refusal as it does (backoff)."""
        for _ in range(CONTAINER_ATTEMPTS):
            try:
                self.pods.create_container(self.sandbox, self.container_id)
            except GateRefused:
                self.gate_refusals += 1
                continue
            self.gate_violations += self._networking_missing()
            self.containers.append(self.container_id)
            return "created"
        return "refused"

    def _networking_missing(self) -> list[str]:
        """The gate let a container through: the topology's interfaces must be in the
        pod's namespace now (read from the kernel)."""
        kernel = self.node.kernel
        pod = kernel.namespace(self.node.sandbox().namespace.path.rsplit("/", 1)[1])
        present = {link.name for link in kernel.list_links(pod)}
        wanted = {
            name
            for step in compiled(TOPOLOGY_FILES[self.topology]).steps.values()
            for name in step.interface_names.values()
        }
        missing = sorted(wanted - present)
        return [f"container let through without {missing} in the pod"] if missing else []

    def restarted(self, crashed: int, crash: CrashPoints = NO_CRASH) -> int:
        """The coordinator died in phase ``crashed``: start it again from its journal,
        let it recover, let the runtime synchronize it, and say where the callers go on."""
        self.node.restart_coordinator(crash)
        self.pods = pod_networks(self.node, self.claims, crash)
        self.pods.recover()
        # The runtime made the sandbox before telling us, and removes it even when we
        # do not answer; containers run from their creation until the sandbox stops.
        exists = POD_PHASES.index("run_sandbox") <= crashed < POD_PHASES.index("remove_sandbox")
        running = crashed < POD_PHASES.index("stop_sandbox")
        sandboxes = [self.sandbox] if exists else []
        containers = [(c, self.sandbox_id) for c in self.containers] if running else []
        for evicted in self.pods.synchronize(sandboxes, containers):
            self.containers.remove(evicted)
        phase = POD_PHASES[crashed]
        return crashed if phase in KUBELET_RETRIES else crashed + 1

    def leftovers(self) -> list[str]:
        """Pod units not finished once the pod is gone."""
        return unfinished_pod_units(self.node.journal)


def unfinished_pod_units(
    journal: CoordinatorJournal, claim_uid: str | None = None, sandbox_id: str | None = None
) -> list[str]:
    """The pod side's units a finished pod leaves unfinished: a claim not unprepared, a
    sandbox not stopped (only ``claim_uid``'s and ``sandbox_id``'s when given)."""
    claims = [
        f"{unit} left {state}"
        for unit, (state, detail) in journal.units(CLAIM_KIND).items()
        if state != "unprepared" and claim_uid in (None, detail["claim"]["uid"])
    ]
    return claims + [
        f"{unit} left {state}"
        for unit, (state, _) in journal.units(SANDBOX_KIND).items()
        if state not in ("stopped", "removed") and sandbox_id in (None, unit.partition(":")[2])
    ]


@dataclass
class PodRun:
    point: CrashPoint
    crashed_in: str
    violations: list[str]
    gate_refusals: int

    @property
    def ok(self) -> bool:
        return not self.violations


NodeFactory = Callable[[Path, CrashPoints], Node]
"""``(root, the coordinator's crash plan) -> a node`` (the fake lab's by default)."""


def fake_node(root: Path, crash: CrashPoints) -> Node:
    return in_process_node(root, coordinator_crash=crash)


def _lifecycle(
    topology: str, root: Path, crash: CrashPoints, make_node: NodeFactory = fake_node
) -> PodLifecycle:
    node = make_node(root, crash)
    claims = MemoryClaims()
    return PodLifecycle(topology, node, pod_networks(node, claims, crash), claims)


def pod_reference(
    topology: str, root: Path | None = None, make_node: NodeFactory = fake_node
) -> list[CrashPoint]:
    """The adapter boundaries an uncrashed pod's life reaches, in order."""
    crash = CrashPoints()
    life = _lifecycle(
        topology, root or Path(tempfile.mkdtemp(prefix="rig-pod-ref-")), crash, make_node
    )
    try:
        assert life.run() is None
        problems = life.failures + life.gate_violations + life.leftovers()
        assert not problems, problems
        return [p for p in crash.reached if p.owner in ADAPTERS]
    finally:
        life.pods.close()
        life.node.close()


def pod_crash_run(
    topology: str, point: CrashPoint, root: Path, make_node: NodeFactory = fake_node
) -> PodRun:
    """Crash the coordinator at ``point`` of the pod's life, restart it, let the kubelet
    and the runtime go on as theirs do, then check every invariant."""
    life = _lifecycle(topology, root, CrashPoints(armed=point), make_node)
    before = life.node.kernel.snapshot()
    try:
        crashed = life.run()
        if crashed is None:
            return PodRun(point, "-", [f"{point} was not reached"], life.gate_refusals)
        go_on = life.restarted(crashed)
        finished = life.run(go_on)
        found = [f"crashed again in {POD_PHASES[finished]}"] if finished is not None else []
        if life.results.get("create_container") != "created":
            found.append(f"the container was never created: {life.results}")
        found += life.failures + life.gate_violations + life.leftovers()
        found += node_violations(life.node, before)
        return PodRun(point, POD_PHASES[crashed], found, life.gate_refusals)
    finally:
        life.pods.close()
        life.node.close()


# -- the scenarios of the Kubernetes node's failures -------------------------------------

POD_SCENARIOS = (
    "order",
    "kubelet-restart",
    "nri-timeout",
    "sync-while-pending",
    "netns-deleted",
    "claim-replaced",
    "api-unavailable",
)


@dataclass
class ScenarioRun:
    topology: str
    scenario: str
    violations: list[str]
    gate_refusals: int
    evictions: int
    steps: list[str]

    @property
    def ok(self) -> bool:
        return not self.violations


def pod_scenario_run(
    topology: str, scenario: str, root: Path, make_node: NodeFactory = fake_node
) -> ScenarioRun:
    """One pod's life with one of the node's failures (``POD_SCENARIOS``), then every
    invariant. ``steps`` says what happened, in order, for the report."""
    run = _Scenario(scenario, _lifecycle(topology, root, CrashPoints(), make_node))
    try:
        try:
            run.before_the_sandbox()
            run.the_sandbox()
        except NetworkPluginError as exc:
            run.found.append(f"{scenario}: {run.steps[-1]} failed: {exc}")
        return run.checked(topology)
    finally:
        run.life.pods.close()
        run.life.node.close()


@dataclass
class _Scenario:
    scenario: str
    life: PodLifecycle
    steps: list[str] = field(default_factory=list)
    found: list[str] = field(default_factory=list)
    evictions: int = 0

    def __post_init__(self) -> None:
        self.before = self.life.node.kernel.snapshot()
        self.pod_ns = self.life.node.sandbox().namespace.path.rsplit("/", 1)[1]

    def do(self, name: str) -> None:
        self.steps.append(name)
        self.life.results[name] = self.life.phase(name)()

    def refused(self, name: str, error: type[NetworkPluginError]) -> None:
        """A call that must fail with ``error`` and change nothing."""
        self.steps.append(f"{name} (refused)")
        snapshot, units = self.life.node.kernel.snapshot(), _units(self.life)
        try:
            self.life.phase(name)()
        except error as exc:
            self.steps.append(f"  -> {type(exc).__name__}: {exc}")
        else:
            self.found.append(f"{self.scenario}: {name} was not refused")
        if self.life.node.kernel.snapshot() != snapshot or _units(self.life) != units:
            self.found.append(f"{self.scenario}: the refused {name} changed something")

    def before_the_sandbox(self) -> None:
        life, scenario = self.life, self.scenario
        if scenario == "claim-replaced":
            claim = life.claims.claims[("default", "net")]
            life.claims.claims[("default", "net")] = KubeClaim(
                claim.namespace, claim.name, "uid-of-the-new-claim", *_rest(claim)
            )
            self.refused("prepare", ClaimProblem)
            life.claims.claims[("default", "net")] = claim  # the kubelet's next pod, same uid
        if scenario == "api-unavailable":
            life.claims.unavailable = True
            self.refused("prepare", ClaimSourceUnavailable)
            life.claims.unavailable = False
        self.do("prepare")
        if scenario == "kubelet-restart":
            self.steps.append("kubelet restarts: prepares its checkpointed claims again")
            if life.phase("prepare")() != life.results["prepare"]:
                self.found.append("the re-prepare after a kubelet restart answered differently")

    def the_sandbox(self) -> None:
        life, scenario = self.life, self.scenario
        if scenario in ("nri-timeout", "sync-while-pending"):
            self.steps.append("RunPodSandbox: the runtime drops us (timeout), starts the sandbox")
        else:
            self.do("run_sandbox")
        if scenario == "nri-timeout":
            self.steps.append("CreateContainer while we are away: the container starts ungated")
            self.steps.append("we register again: Synchronize with the sandbox and its container")
            evicted = life.pods.synchronize([life.sandbox], [("ungated-1", life.sandbox_id)])
            self.evictions += len(evicted)
            if evicted != ["ungated-1"]:
                self.found.append(f"the container that started ungated was not evicted: {evicted}")
        if scenario == "sync-while-pending":
            self.steps.append("we register again: Synchronize before the sandbox is listed")
            life.pods.synchronize([], [])
        self.do("create_container")
        if scenario == "sync-while-pending" and life.gate_refusals == 0:
            self.found.append("the gate let a container of a sandbox never connected through")
        if scenario == "netns-deleted":
            self.steps.append("the runtime deletes the pod's namespace before StopPodSandbox")
            life.node.kernel.delete_namespace(self.pod_ns)
            self.before = without_namespace(self.before, self.pod_ns)
        for name in ("stop_sandbox", "unprepare", "remove_sandbox"):
            self.do(name)

    def checked(self, topology: str) -> ScenarioRun:
        life = self.life
        self.found += life.gate_violations + life.leftovers()
        self.found += node_violations(life.node, self.before, self.pod_ns)
        self.steps.append(f"gate refusals {life.gate_refusals}, evictions {self.evictions}")
        return ScenarioRun(
            topology, self.scenario, self.found, life.gate_refusals, self.evictions, self.steps
        )


def _units(life: PodLifecycle) -> dict[str, Any]:
    journal = life.node.journal
    return {**journal.units(CLAIM_KIND), **journal.units(SANDBOX_KIND)}


def _rest(claim: KubeClaim) -> tuple[str, tuple[ClaimDevice, ...], tuple[str, ...]]:
    return claim.topology, claim.devices, claim.pods
