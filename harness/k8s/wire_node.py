"""A Kubernetes node with every peer on its real wire, on any lab, and a pod's life on it
under the node's failures.

``WiredNode`` runs the coordinator's ``KubernetesNode`` (the kubelet's DRA plugin, the
NRI plugin, the API client, the pod side) over a ``labs.Node`` (the lab's kernel and the
services), with ``KubeletSim``, ``FakeAPIServer`` (under the unmodified client) and
``NRIRuntimeSim`` as its peers. ``wire_scenario_run`` drives one pod through it in the
kubelet's order with one failure (``WIRE_SCENARIOS``), then checks the invariants: the
kernel equals its first snapshot, every call and pod unit closed, no claim held, every
container the runtime ran was admitted by the gate (or evicted), and while the pod ran
the claim's status named an interface the kernel had in the pod's namespace.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from labs import Node
from plugins.coordinator import (
    Allocator,
    KubernetesConfig,
    KubernetesNode,
    load_policies,
    sandbox_unit,
)
from plugins.coordinator.nri import NRIPlugin
from plugins.sdk.runner import CrashPoints

from ..invariants import without_namespace
from ..scenarios import TOPOLOGY_DIR, compiled, lab_inventory
from .apiserver import FakeAPIServer
from .kubelet import KubeletSim, PodClaim
from .nri_runtime import NRIRuntimeSim, SimSandbox
from .pod_lifecycle import (
    TOPOLOGY_FILES,
    NodeFactory,
    fake_node,
    lab_resolver,
    node_violations,
    scheduled_claim,
    unfinished_pod_units,
)

__all__ = ["DRIVER", "WIRE_SCENARIOS", "WireRun", "WiredNode", "claim_object", "wire_scenario_run"]

DRIVER: Final = "dra.networking"
DEADLINE_S: Final = 10.0
WIRE_SCENARIOS = (
    "order",
    "kubelet-restart",
    "nri-timeout",
    "nri-timeout-containerd",
    "nri-disconnect",
    "netns-deleted",
    "claim-replaced",
    "api-unavailable",
)


def claim_object(
    topology: str, uid: str, pod_uid: str, inventory: Any = None, name: str = "net"
) -> dict[str, Any]:
    """The ResourceClaim as the scheduler leaves it: allocated on this node for our
    driver, with the opaque config naming the topology, reserved for the pod."""
    claim = scheduled_claim(topology, uid, pod_uid, name, inventory)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": claim.name, "namespace": claim.namespace, "uid": uid},
        "spec": {"devices": {"requests": [{"name": d.request} for d in claim.devices]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": d.request, "driver": DRIVER, "pool": d.pool, "device": d.device}
                        for d in claim.devices
                    ],
                    "config": [
                        {
                            "source": "FromClaim",
                            "opaque": {
                                "driver": DRIVER,
                                "parameters": {
                                    "apiVersion": "dra.networking/v1alpha1",
                                    "kind": "NetworkAttachment",
                                    "topology": topology,
                                },
                            },
                        }
                    ],
                }
            },
            "reservedFor": [{"resource": "pods", "name": "web", "uid": pod_uid}],
        },
    }


@dataclass
class WiredNode:
    node: Node
    api: FakeAPIServer
    kubelet: KubeletSim
    runtime: NRIRuntimeSim
    k8s: KubernetesNode
    registry: Path
    checkpoint: Path

    def restart_kubelet(self) -> None:
        """The kubelet restarts: a new one over the same checkpoint finds the plugin's
        registration socket again and prepares its claims again."""
        self.kubelet.stop()
        self.kubelet = KubeletSim(self.registry, self.checkpoint)
        self.kubelet.wait_registered(DRIVER, DEADLINE_S)

    def admitted(self, sandbox_id: str) -> set[str]:
        found = self.node.journal.unit(sandbox_unit(sandbox_id))
        return set() if found is None else set(found[1].get("admitted", []))


@contextmanager
def wired_node(
    root: Path,
    make_node: NodeFactory = fake_node,
    *,
    answer_within_s: float = 1.5,
    honour_update_evictions: bool = True,
) -> Iterator[WiredNode]:
    """The node and its three peers, started; everything stopped at exit."""
    short = Path(tempfile.mkdtemp(prefix="k8s-", dir="/tmp"))  # sun_path holds 107 bytes
    node = make_node(root / "node", CrashPoints())
    inventory = lab_inventory(node.lab)
    policies = load_policies(TOPOLOGY_DIR / "policies.yaml")
    kubelet: KubeletSim | None = None
    try:
        with (
            FakeAPIServer() as api,
            NRIRuntimeSim(
                short / "nri.sock", honour_update_evictions=honour_update_evictions
            ) as runtime,
        ):
            config = KubernetesConfig(
                node_name=inventory.pool,
                api_server=api.url,
                plugins_dir=short / "plugins",
                registry_dir=short / "registry",
                nri_socket=short / "nri.sock",
                answer_within_seconds=answer_within_s,
            )
            k8s = KubernetesNode(
                config,
                node.journal,
                node.coordinator,
                {t: compiled(f) for t, f in TOPOLOGY_FILES.items()},
                Allocator(inventory, policies),
                resolve_namespace=lab_resolver(node),
                nri_plugin=NRIPlugin,
            )
            try:
                k8s.start()
                kubelet = KubeletSim(short / "registry", root / "checkpoint.json")
                wired = WiredNode(
                    node, api, kubelet, runtime, k8s, short / "registry", root / "checkpoint.json"
                )
                wired.kubelet.wait_registered(DRIVER, DEADLINE_S)
                runtime.wait_for_plugin(DRIVER, DEADLINE_S)
                yield wired
                kubelet = wired.kubelet
            finally:
                k8s.stop()
                if kubelet is not None:
                    kubelet.stop()
    finally:
        node.close()
        shutil.rmtree(short, ignore_errors=True)


@dataclass
class WireRun:
    topology: str
    scenario: str
    violations: list[str]
    gate_refusals: int
    evictions: int
    steps: list[str] = field(default_factory=list)
    api_requests: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class _Pod:
    """One pod with one claim on a wired node, and what the scenario saw."""

    wired: WiredNode
    topology: str
    scenario: str
    uid: str = "0d6f3c1e-1111-4a2b-8c3d-000000000001"
    pod_uid: str = "pod-uid-1"
    sandbox_id: str = "sandbox-1"
    steps: list[str] = field(default_factory=list)
    found: list[str] = field(default_factory=list)
    ungated: list[str] = field(default_factory=list)
    """Containers the runtime created while we were away (no gate answered for them)."""

    def __post_init__(self) -> None:
        node = self.wired.node
        self.inventory = lab_inventory(node.lab)
        self.before = node.kernel.snapshot()
        handle = node.sandbox()
        self.pod_ns = handle.namespace.path.rsplit("/", 1)[1]
        self.sandbox = SimSandbox(
            self.sandbox_id, "web", "default", self.pod_uid, handle.namespace.path
        )
        self.claims = [PodClaim(DRIVER, self.uid, "default", "net")]
        self.wired.api.put_claim(
            claim_object(self.topology, self.uid, self.pod_uid, self.inventory)
        )

    def step(self, text: str) -> None:
        self.steps.append(text)

    def prepare(self, *, expect_error: str = "") -> None:
        self.step("kubelet: NodePrepareResources" + (" (refused)" if expect_error else ""))
        result = self.wired.kubelet.prepare(self.pod_uid, self.claims)[self.uid]
        if expect_error:
            if expect_error not in result.error:
                self.found.append(f"prepare: expected an error with {expect_error!r}: {result}")
            else:
                self.step(f"  -> {result.error}")
        elif result.error:
            self.found.append(f"prepare failed: {result.error}")

    def run_sandbox(self) -> None:
        self.step("runtime: RunPodSandbox")
        outcome = self.wired.runtime.run_pod_sandbox(self.sandbox)
        if outcome.refusal is not None or not outcome.proceeded:
            self.found.append(f"RunPodSandbox: {outcome}")
        if outcome.dropped:
            self.step(f"  -> the runtime dropped us: {outcome.dropped[0].reason}; it went on")

    def create_container(self, name: str = "app") -> None:
        """The kubelet creates the container, retrying a refusal with back-off."""
        runtime = self.wired.runtime
        for attempt in range(3):
            self.step(f"runtime: CreateContainer {name} (attempt {attempt + 1})")
            outcome = runtime.create_container(self.sandbox_id, name)
            if outcome.refusal is None:
                if outcome.dropped or not outcome.answered:
                    self.step("  -> created while we were away (ungated)")
                    assert outcome.container is not None
                    self.ungated.append(outcome.container.id)
                self.check_status_names_a_pod_interface()
                return
            self.step(f"  -> refused: {outcome.refusal}")
        self.found.append(f"container {name} never created")

    def check_status_names_a_pod_interface(self) -> None:
        """Claim status agrees with the kernel: each device's interface is in the pod."""
        claim = self.wired.api.claim("default", "net") or {}
        devices = claim.get("status", {}).get("devices", [])
        kernel = self.wired.node.kernel
        present = {lk.name for lk in kernel.list_links(kernel.namespace(self.pod_ns))}
        if not devices and self.wired.admitted(self.sandbox_id):
            self.found.append("claim status has no devices while the pod runs")
        for device in devices:
            name = device.get("networkData", {}).get("interfaceName", "")
            if name not in present:
                self.found.append(
                    f"claim status names {name!r}, not in the pod ({sorted(present)})"
                )

    def wait_reregistered(self, connections_before: int) -> None:
        """The runtime dropped us at the event: the plugin it synchronizes next is our
        new connection."""
        self.step("the plugin reconnects, registers again and is synchronized")
        plugin = self.wired.runtime.wait_for_plugin(DRIVER, DEADLINE_S)
        if plugin.connection <= connections_before:
            self.found.append(f"the NRI plugin did not register again: {plugin}")

    def wait_evicted(self) -> bool:
        """Every container that started while we were away is evicted (deadline)."""
        try:
            for container_id in self.ungated:
                self.wired.runtime.wait_for_eviction(container_id, DEADLINE_S)
        except TimeoutError:
            return False
        return not self.ungated_containers()

    def connection(self) -> int:
        return max(
            (p.connection for p in self.wired.runtime.plugins if p.base == DRIVER), default=0
        )

    def ungated_containers(self) -> list[str]:
        # An evicted container is gone from the runtime's list.
        running = {c.id for c in self.wired.runtime.containers if c.sandbox_id == self.sandbox_id}
        return sorted(running - self.wired.admitted(self.sandbox_id))

    def stop_and_clean(self) -> None:
        runtime = self.wired.runtime
        self.step("runtime: StopPodSandbox")
        runtime.stop_pod_sandbox(self.sandbox_id)
        self.step("kubelet: NodeUnprepareResources")
        errors = {
            u: e for u, e in self.wired.kubelet.unprepare(self.pod_uid, self.claims).items() if e
        }
        if errors:
            self.found.append(f"unprepare: {errors}")
        self.step("runtime: RemovePodSandbox (garbage collection)")
        runtime.remove_pod_sandbox(self.sandbox_id)

    def checked(self) -> WireRun:
        wired = self.wired
        journal = wired.node.journal
        self.found += unfinished_pod_units(journal)
        status = (wired.api.claim("default", "net") or {}).get("status", {})
        if status.get("devices"):
            self.found.append(
                f"claim status still lists devices after the pod: {status['devices']}"
            )
        self.found += node_violations(wired.node, self.before, self.pod_ns)
        counters = wired.k8s.pods.counters
        self.step(f"gate refusals {counters.gate_refusals}, evictions {counters.evictions}")
        return WireRun(
            self.topology,
            self.scenario,
            self.found,
            counters.gate_refusals,
            counters.evictions,
            self.steps,
            wired.api.request_log_text(),
        )


def _play(pod: _Pod) -> None:
    wired, scenario = pod.wired, pod.scenario
    if scenario == "claim-replaced":
        pod.step("the claim is deleted and created again under its name: a new uid")
        new_uid = wired.api.swap_claim_uid("default", "net")
        pod.prepare(expect_error="replaced")
        wired.api.put_claim(claim_object(pod.topology, pod.uid, pod.pod_uid, pod.inventory))
        pod.step(f"  (the kubelet's next pod takes the claim as it is now; {new_uid} dropped)")
    if scenario == "api-unavailable":
        pod.step("the API server answers 503")
        wired.api.set_unavailable(True)
        pod.prepare(expect_error="UNAVAILABLE")
        wired.api.set_unavailable(False)
    pod.prepare()
    if scenario == "kubelet-restart":
        pod.step("the kubelet restarts and prepares its checkpointed claims again")
        wired.restart_kubelet()
        again = wired.kubelet.restart_recovery(DEADLINE_S)
        if again.get(pod.uid) is None or again[pod.uid].error:
            pod.found.append(f"re-prepare after the kubelet's restart: {again}")
    connections = pod.connection()
    away = scenario in ("nri-timeout", "nri-timeout-containerd", "nri-disconnect")
    if away:
        # Our plugin reconnects within 0.1 s: held (registered, not configured) until the
        # container below started, it is away for certain while the runtime goes on.
        wired.runtime.hold_new_plugins()
    if scenario.startswith("nri-timeout"):
        pod.step("the runtime will time out on our RunPodSandbox answer")
        wired.runtime.stall_next(DRIVER, "RunPodSandbox")
    if scenario == "nri-disconnect":
        pod.step("the runtime drops our connection before the sandbox")
        wired.runtime.disconnect(DRIVER)
    pod.run_sandbox()
    pod.create_container()
    if away:
        wired.runtime.admit_new_plugins()
        pod.wait_reregistered(connections)
        if scenario == "nri-timeout-containerd":
            # containerd drops UpdateContainers' evictions: the next container the gate
            # lets through carries it in its answer (the pod's sidecar, here).
            pod.step("containerd ignores the eviction after Synchronize")
            pod.create_container("sidecar")
        if not pod.wait_evicted():
            pod.found.append(
                f"containers ran without the gate and were not evicted: {pod.ungated_containers()}"
            )
        elif not any(
            (c.sandbox_id, c.name) == (pod.sandbox_id, "app") for c in wired.runtime.containers
        ):
            pod.step("evicted; the kubelet recreates the container")
            pod.create_container()
    if scenario == "netns-deleted":
        pod.step("the runtime deletes the pod's network namespace before StopPodSandbox")
        wired.node.kernel.delete_namespace(pod.pod_ns)
        pod.before = without_namespace(pod.before, pod.pod_ns)
    pod.stop_and_clean()


def wire_scenario_run(
    topology: str, scenario: str, root: Path, make_node: NodeFactory = fake_node
) -> WireRun:
    """One pod's life over every real wire with one of ``WIRE_SCENARIOS``; invariants."""
    containerd = scenario.endswith("-containerd")
    with wired_node(root, make_node, honour_update_evictions=not containerd) as wired:
        pod = _Pod(wired, topology, scenario)
        try:
            _play(pod)
        except Exception as exc:  # a peer's failure is a finding, reported with the steps
            pod.found.append(f"{scenario}: {type(exc).__name__}: {exc} (after {pod.steps[-1:]})")
        return pod.checked()
