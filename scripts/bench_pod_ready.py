"""Benchmark (P7): a pod's network ready through NRI, against the CNI plugin's ADD and a floor.

Runs in the namespaces of a ``labs.NetnsLab`` (never on the machine's own links), as root.
The lab's node namespace holds the parents (``enp3s0f0``-``enp3s0f2``, veth ends, up, MTU
1500); ``bench-pod`` (added bare: after a teardown it holds only ``lo``) is the sandbox
every child is made in, always as ``secondary0`` on ``enp3s0f2``, mode bridge, MTU 1500:
what the ``sdk-macvlan`` topology asks for (``topologies/macvlan.yaml``).

The coordinator serves the node as it does on Kubernetes, every peer on its wire:
``KubernetesNode`` in this process (its journal on disk, the namespace resolver reading
the lab's kernel as ``harness.k8s.pod_lifecycle.lab_resolver`` does), its real NRI plugin
dialled into ``NRIRuntimeSim``'s socket, its API client on ``FakeAPIServer``, and the real
``networkplugin-links`` service as a process (a ``labs.Node``; the service at INFO, as
deployed; the coordinator's own log at INFO to a file through the program's background
handler). The claim is prepared once, untimed, through ``KubeletSim`` (DRA over the
advertised socket) against the claim the fake API server holds.

Per iteration, in rotating order so drift hits all three alike, each contender brings
``secondary0`` up in the pod (timed: the readiness sample), then takes it down (timed
apart: the teardown sample):

* ours:  the runtime's RunPodSandbox for a new sandbox of the pod, from the send to the
  answer (the coordinator journals the sandbox, runs ConnectNetwork over the service's
  socket, applies the claim's status to the API server, then answers). It answers after
  at most ``answer_within_s`` even if the connect goes on (``docs/kubernetes.md``); set
  high here (1.9 s, under the runtime's 2 s), and a sample counts only if the sandbox's
  journal unit is ``connected`` when the answer arrives (and the coordinator did not log
  that it answered early): otherwise it is *answered before ready*, counted and left out
  of the samples. Teardown: StopPodSandbox, send to answer (RemoveNetwork, the status
  cleared); RemovePodSandbox (the runtime's garbage collection) follows, untimed;
* CNI:   ``/usr/lib/cni/macvlan`` exec'd with ADD (no IPAM), from a thread in the node
  namespace (as P1); teardown: DEL;
* floor: the kernel calls the macvlan plugin makes, as bare pyroute2 requests (P1's
  floor): the child born in the pod under a temporary name, looked up, alias and final
  name in one message, up; teardown: its delete (which waits for the ack, after an RCU
  grace period; the service's delete answers at the kernel's announcement).

Untimed checks before and after: after each bring-up the pod has an up macvlan
``secondary0`` of MTU 1500; ours also passes the readiness gate (CreateContainer) and has
written the claim's status; after each teardown the pod holds only ``lo``.

Prints medians (and p90/min) in ms and the ratios ours/CNI and ours/floor (medians).
Not a test: nothing here asserts a timing.

    sudo scripts/install-bench    # the CNI plugins, once
    sudo uv run --locked python scripts/bench_pod_ready.py [--iterations 40] [--warmup 5]

``measure()`` returns the samples as data (``Measurement``), for ``scripts/bench``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: _bench_node

from _bench_node import floor_attach, namespace_threads, netlink_socket_in

from harness.k8s.apiserver import FakeAPIServer
from harness.k8s.kubelet import KubeletSim, PodClaim
from harness.k8s.nri_runtime import NRIRuntimeSim, SimSandbox
from harness.k8s.pod_lifecycle import TOPOLOGY_FILES, lab_resolver
from harness.scenarios import TOPOLOGY_DIR, compiled, lab_inventory
from labs import Lab, NetnsLab, Node, ServiceProcess, service_of
from labs.netns import NetnsLabUnavailable
from plugins.coordinator import (
    DRIVER_DOMAIN,
    Allocator,
    CompiledTopology,
    Inventory,
    KubernetesConfig,
    KubernetesNode,
    load_policies,
    sandbox_unit,
)
from plugins.coordinator.nri import NRIPlugin
from plugins.sdk.telemetry import BackgroundHandler

CNI_DIR = Path("/usr/lib/cni")
CNI_MACVLAN = CNI_DIR / "macvlan"
INSTALL_HINT = (
    f"bench_pod_ready: {CNI_MACVLAN} is missing or not executable; "
    "install it with: sudo scripts/install-bench (Debian's containernetworking-plugins)"
)
TOPOLOGY = "sdk-macvlan"
PARENT, POD, IFNAME, MTU = "enp3s0f2", "bench-pod", "secondary0", 1500  # the topology's
CLAIM_UID, POD_UID = "7b0e5d2c-5a1f-4e8b-9c3d-000000000007", "bench-pod-uid"
CNI_CONFIG = json.dumps(
    {
        "cniVersion": "1.0.0",
        "name": "bench",
        "type": "macvlan",
        "master": PARENT,
        "mode": "bridge",
        "mtu": MTU,
    }
).encode()
IFF_UP = 0x1
ANSWER_WITHIN_S = 1.9  # under the runtime's request timeout (2 s): never a drop
SERVICE_LOG_LEVEL = "INFO"  # the service's and the coordinator program's default
WIRE_DEADLINE_S = 30.0
ROWS = ("ours", "CNI", "floor")
EARLY_ANSWER = "sandbox %s: still connecting after"  # PodNetworks' note when it answers early


# -- the node, every peer on its wire ------------------------------------------------------


def claim_object(
    topology: str, compiled_topology: CompiledTopology, inventory: Inventory
) -> dict[str, Any]:
    """The ResourceClaim of ``topology`` as the scheduler leaves it: allocated on the node
    of ``inventory`` (the project's CEL allocator stands in for the scheduler), reserved
    for the pod."""
    policies = load_policies(TOPOLOGY_DIR / "policies.yaml")
    allocations = Allocator(inventory, policies).allocate(compiled_topology)
    devices = [(step, inventory.pool, a.device) for step, a in allocations.items()]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "net", "namespace": "default", "uid": CLAIM_UID},
        "spec": {"devices": {"requests": [{"name": step} for step, _, _ in devices]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": step, "driver": DRIVER_DOMAIN, "pool": pool,
                         "device": device}
                        for step, pool, device in devices
                    ],
                    "config": [
                        {
                            "source": "FromClaim",
                            "opaque": {
                                "driver": DRIVER_DOMAIN,
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
            "reservedFor": [{"resource": "pods", "name": "web", "uid": POD_UID}],
        },
    }  # fmt: skip


class EarlyAnswers(logging.Handler):
    """The sandboxes PodNetworks answered for while their connect went on (its log note)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.sandboxes: set[str] = set()
        self._lock_ = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, str) and record.msg.startswith(EARLY_ANSWER) and record.args:
            with self._lock_:
                self.sandboxes.add(str(record.args[0]))  # type: ignore[index]

    def saw(self, sandbox_id: str) -> bool:
        with self._lock_:
            return sandbox_id in self.sandboxes


def coordinator_log(stack: contextlib.ExitStack, path: Path) -> EarlyAnswers:
    """The coordinator's log at INFO into ``path`` through the program's background
    handler (as deployed), and the early-answer watch; both undone with ``stack``."""
    logger = logging.getLogger("plugins.coordinator")
    early = EarlyAnswers()
    writer = BackgroundHandler(logging.FileHandler(path))
    writer.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(writer)
    logger.addHandler(early)

    def restore() -> None:
        logger.removeHandler(early)
        logger.removeHandler(writer)
        writer.close()
        logger.setLevel(level)

    stack.callback(restore)
    return early


def start_node(
    stack: contextlib.ExitStack,
    lab: Lab,
    base: Path,
    plugin: str = "macvlan",
    pod: str | None = None,
) -> tuple[Node, int | None]:
    """A ``labs.Node`` with its coordinator and journal, the service of ``plugin`` as a
    process at ``SERVICE_LOG_LEVEL`` (``pod``: the namespace made before it starts);
    ``stack`` stops the service cleanly before the node closes."""
    node = Node(lab, base / "node", services=[service_of(plugin)], processes=True, pod=pod)
    stack.callback(node.close)
    service = node.processes.of(plugin)
    stack.callback(stop_service, service)  # unwound before node.close, which would SIGKILL
    if service.log_level != SERVICE_LOG_LEVEL:  # the lab starts it at the rig's level
        service.stop(timeout=10)
        service.log_level = SERVICE_LOG_LEVEL
        service.start()
        node.reconnect()
    return node, service.proc.pid if service.proc is not None else None


def stop_service(service: ServiceProcess) -> None:
    if service.proc is None:
        return
    try:
        code = service.stop(timeout=10)
    except subprocess.TimeoutExpired:
        service.kill()
        code = -signal.SIGKILL
    if code != 0:  # its log is deleted with the temp dir: show its end now
        print(f"note: the service exited with {code}; its log ends:", file=sys.stderr)
        for line in service.log.read_text(errors="replace").splitlines()[-5:]:
            print(f"  {line}", file=sys.stderr)


@dataclass
class Wire:
    """The node served as on Kubernetes; the claim prepared (``prepare``)."""

    node: Node
    api: FakeAPIServer
    kubelet: KubeletSim
    runtime: NRIRuntimeSim
    k8s: KubernetesNode
    early: EarlyAnswers
    lock: threading.RLock  # the pod side's (KubernetesNode's ``lock``)
    claim: dict[str, Any]  # the allocated claim the API server holds (``claim_object``)
    prepared: bool = False

    def prepare(self) -> None:
        self.api.put_claim(self.claim)
        results = self.kubelet.prepare(POD_UID, [self.pod_claim()])
        if results[CLAIM_UID].error:
            raise RuntimeError(f"the kubelet's prepare failed: {results[CLAIM_UID].error}")
        self.prepared = True

    def release(self) -> None:
        if not self.prepared:
            return
        errors = self.kubelet.unprepare(POD_UID, [self.pod_claim()])
        if errors != {CLAIM_UID: ""}:  # the namespaces and the journal go next anyway
            print(f"note: the kubelet's unprepare failed: {errors}", file=sys.stderr)
        self.prepared = False

    @staticmethod
    def pod_claim() -> PodClaim:
        return PodClaim(DRIVER_DOMAIN, CLAIM_UID, "default", "net")

    def claim_devices(self) -> list[dict[str, Any]]:
        found = self.api.claim("default", "net") or {}
        devices: list[dict[str, Any]] = found.get("status", {}).get("devices", [])
        return devices


def wire_node(
    stack: contextlib.ExitStack,
    node: Node,
    base: Path,
    log: Path,
    topology: tuple[str, CompiledTopology] = (TOPOLOGY, compiled(TOPOLOGY_FILES[TOPOLOGY])),
) -> Wire:
    """``node`` served as on Kubernetes, with ``topology`` (its name, compiled) the one
    the coordinator knows and the claim's, allocated on the lab's inventory."""
    early = coordinator_log(stack, log)
    inventory = lab_inventory(node.lab)
    name, compiled_topology = topology
    api = stack.enter_context(FakeAPIServer())
    runtime = stack.enter_context(NRIRuntimeSim(base / "nri.sock"))
    kubelet = stack.enter_context(KubeletSim(base / "registry", base / "checkpoint.json"))
    config = KubernetesConfig(
        node_name=inventory.pool,
        api_server=api.url,
        plugins_dir=base / "plugins",
        registry_dir=base / "registry",
        nri_socket=base / "nri.sock",
        answer_within_seconds=ANSWER_WITHIN_S,
    )
    lock = threading.RLock()
    k8s = KubernetesNode(
        config,
        node.journal,
        node.coordinator,
        {name: compiled_topology},
        Allocator(inventory, load_policies(TOPOLOGY_DIR / "policies.yaml")),
        resolve_namespace=lab_resolver(node),
        nri_plugin=NRIPlugin,
        lock=lock,
    )
    stack.callback(k8s.stop)
    k8s.start()
    kubelet.wait_registered(DRIVER_DOMAIN, WIRE_DEADLINE_S)
    runtime.wait_for_plugin(DRIVER_DOMAIN, WIRE_DEADLINE_S)
    claim = claim_object(name, compiled_topology, inventory)
    wire = Wire(node, api, kubelet, runtime, k8s, early, lock, claim)
    stack.callback(wire.release)  # unwound before the node's peers and the node
    return wire


# -- the pod namespace, as the peers reach it ----------------------------------------------


@dataclass
class Scene:
    pod_path: str
    pod_fd: int
    host_ipr: Any  # pyroute2.IPRoute bound to the node namespace
    pod_ipr: Any  # pyroute2.IPRoute bound to bench-pod
    parent_index: int
    host_thread: ThreadPoolExecutor


def netlink_in(stack: contextlib.ExitStack, path: str) -> socket.socket:
    sock = netlink_socket_in(path)
    stack.callback(sock.close)
    return sock


def build_scene(stack: contextlib.ExitStack, lab: NetnsLab) -> Scene:
    from pyroute2 import IPRoute

    pod = lab.kernel.add_namespace(POD)
    host_path = lab.kernel.host_namespace().path
    pod_fd = os.open(pod.path, os.O_RDONLY | os.O_CLOEXEC)
    stack.callback(os.close, pod_fd)
    host_ipr = stack.enter_context(IPRoute(use_socket=netlink_in(stack, host_path)))
    pod_ipr = stack.enter_context(IPRoute(use_socket=netlink_in(stack, pod.path)))
    host_thread = namespace_threads(host_path)
    stack.callback(host_thread.shutdown)
    parent = next((p for p in lab.parents if p.name == PARENT), None)
    if parent is None:
        raise RuntimeError(f"the lab has no parent {PARENT}: {[p.name for p in lab.parents]}")
    return Scene(pod.path, pod_fd, host_ipr, pod_ipr, parent.ifindex, host_thread)


# -- the three contenders -------------------------------------------------------------------


class Ours:
    """RunPodSandbox (send to answer) and StopPodSandbox, a new sandbox each time."""

    name = "ours"

    def __init__(self, wire: Wire, netns: str, ifname: str = IFNAME) -> None:
        self.wire = wire
        self.netns = netns  # the pod's namespace path, as the runtime names it
        self.ifname = ifname
        self.live: str | None = None  # a sandbox the runtime may still hold (for cleanup)
        self.early: list[float] = []  # the answer times of samples answered before ready

    def state(self, sandbox_id: str) -> str | None:
        found = self.wire.node.journal.unit(sandbox_unit(sandbox_id))
        return None if found is None else found[0]

    def up(self, label: str) -> float | None:
        """The readiness sample, or None: answered before the connect completed."""
        sandbox = SimSandbox(f"bench-{label}", "web", "default", POD_UID, self.netns)
        self.live = sandbox.id
        start = time.perf_counter()
        outcome = self.wire.runtime.run_pod_sandbox(sandbox)
        elapsed = time.perf_counter() - start
        state = self.state(sandbox.id)  # at the answer, before anything else runs
        if outcome.refused or outcome.dropped or not outcome.answered:
            raise RuntimeError(f"RunPodSandbox {sandbox.id}: {outcome}")
        if state == "connected" and not self.wire.early.saw(sandbox.id):
            return elapsed
        self.early.append(elapsed)
        # The connect holds the pod side's lock from start to end: once it is ours, the
        # connect is over (and the teardown finds the sandbox connected).
        if not self.wire.lock.acquire(timeout=WIRE_DEADLINE_S):
            raise RuntimeError(f"sandbox {sandbox.id}: still connecting after {WIRE_DEADLINE_S} s")
        self.wire.lock.release()
        if self.state(sandbox.id) != "connected":
            raise RuntimeError(f"sandbox {sandbox.id} not connected: {self.state(sandbox.id)}")
        return None

    def down(self, label: str) -> float:
        sandbox_id = f"bench-{label}"
        start = time.perf_counter()
        outcome = self.wire.runtime.stop_pod_sandbox(sandbox_id)
        elapsed = time.perf_counter() - start
        if outcome.refused or outcome.dropped or self.state(sandbox_id) != "stopped":
            raise RuntimeError(f"StopPodSandbox {sandbox_id}: {outcome}, {self.state(sandbox_id)}")
        removed = self.wire.runtime.remove_pod_sandbox(sandbox_id)  # GC: untimed
        if removed.refused or removed.dropped:
            raise RuntimeError(f"RemovePodSandbox {sandbox_id}: {removed}")
        self.live = None
        return elapsed

    def extra_check(self, label: str) -> None:
        """The gate admits a container, and the claim's status says where its network is."""
        created = self.wire.runtime.create_container(f"bench-{label}", "app")
        if created.refused or not created.proceeded:
            raise RuntimeError(f"ours: the gate refused the container: {created.refusal}")
        devices = self.wire.claim_devices()
        if not any(d.get("networkData", {}).get("interfaceName") == self.ifname for d in devices):
            raise RuntimeError(f"ours: the claim's status names no {self.ifname}: {devices}")

    def release(self) -> None:
        """Cleanup after any exit: stop and remove a sandbox left running."""
        if self.live is None:
            return
        try:
            self.down(self.live.removeprefix("bench-"))
        except (RuntimeError, ValueError) as exc:  # the namespaces go next anyway
            print(f"note: removing sandbox {self.live} failed: {exc}", file=sys.stderr)


class CNI:
    name = "CNI"

    def __init__(self, scene: Scene) -> None:
        self.scene = scene
        self.base_env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "CNI_NETNS": scene.pod_path,
            "CNI_IFNAME": IFNAME,
            "CNI_PATH": str(CNI_DIR),
        }

    def _timed(self, command: str, label: str) -> float:
        env = dict(self.base_env, CNI_COMMAND=command, CNI_CONTAINERID=f"bench-{label}")

        def run() -> float:  # timed on the node-namespace thread: no hand-off inside
            start = time.perf_counter()
            done = subprocess.run(
                [str(CNI_MACVLAN)], input=CNI_CONFIG, env=env, capture_output=True, check=False
            )
            elapsed = time.perf_counter() - start
            if done.returncode != 0:
                raise RuntimeError(
                    f"CNI {command} {label} exited {done.returncode}: "
                    f"{done.stdout.decode(errors='replace').strip()} "
                    f"{done.stderr.decode(errors='replace').strip()}"
                )
            return elapsed

        return self.scene.host_thread.submit(run).result()

    def up(self, label: str) -> float:
        return self._timed("ADD", label)

    def down(self, label: str) -> float:
        return self._timed("DEL", label)


class Floor:
    name = "floor"

    def __init__(self, scene: Scene) -> None:
        self.scene = scene
        self.index = 0

    def up(self, label: str) -> float:
        s = self.scene
        start = time.perf_counter()
        self.index = floor_attach(
            s.host_ipr, s.pod_ipr, s.parent_index, s.pod_fd, label, IFNAME, MTU
        )
        return time.perf_counter() - start

    def down(self, label: str) -> float:
        start = time.perf_counter()
        self.scene.pod_ipr.link("del", index=self.index)
        return time.perf_counter() - start


Contender = Ours | CNI | Floor


def pod_links(scene: Scene) -> dict[str, Any]:
    return {m.get_attr("IFLA_IFNAME"): m for m in scene.pod_ipr.link("dump")}


def check(scene: Scene, contender: Contender, label: str) -> None:
    """Untimed: after bring-up the pod has an up macvlan secondary0 (MTU 1500), and ours
    passes the gate; after teardown the pod holds only lo."""
    contender.up(label)
    try:
        child = pod_links(scene).get(IFNAME)
        if child is None:
            raise RuntimeError(f"{contender.name}: no {IFNAME} in {POD} after bring-up")
        info = child.get_attr("IFLA_LINKINFO")
        kind = None if info is None else info.get_attr("IFLA_INFO_KIND")
        problems = [f"kind {kind}"] if kind != "macvlan" else []
        problems += [] if child["flags"] & IFF_UP else ["down"]
        mtu = child.get_attr("IFLA_MTU")
        problems += [] if mtu == MTU else [f"MTU {mtu}"]
        if problems:
            raise RuntimeError(f"{contender.name}: {IFNAME}: {', '.join(problems)}")
        if isinstance(contender, Ours):
            contender.extra_check(label)
    finally:
        contender.down(label)
    left = sorted(pod_links(scene))
    if left != ["lo"]:
        raise RuntimeError(f"{contender.name}: {POD} holds {left} after teardown")


# -- setup, measurement, report ---------------------------------------------------------------


def preflight() -> str | None:
    """Why the benchmark cannot run here (one line), or None."""
    if not (CNI_MACVLAN.is_file() and os.access(CNI_MACVLAN, os.X_OK)):
        return INSTALL_HINT
    if os.geteuid() != 0:
        return "bench_pod_ready: needs root (namespaces, veth, macvlan): sudo uv run python ..."
    return None


def cni_version() -> str:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", "containernetworking-plugins"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


@dataclass(frozen=True)
class Measurement:
    """One run's samples, in seconds, in iteration order, by contender (``ROWS``).

    ``ready``: ours's RunPodSandbox send-to-answer with the sandbox connected, CNI's ADD,
    the floor's attach; ``teardown``: StopPodSandbox, DEL, the floor's delete.
    ``answered_before_ready``: ours's answers that came before the connect completed
    (left out of ``ready``; their answer times in ``early_answers``).
    """

    ready: dict[str, list[float]]
    teardown: dict[str, list[float]]
    iterations: int
    warmup: int
    answered_before_ready: int
    early_answers: list[float]
    load: float
    kernel: str
    cni_version: str
    answer_within_s: float
    service_log_level: str
    service_pid: int | None
    notes: dict[str, Any] = field(default_factory=dict)


def measure(iterations: int, warmup: int) -> Measurement:
    """Build the lab and the node, check each contender, warm up, then ``iterations``
    rotating rounds of bring-up and teardown per contender."""
    if iterations < 1 or warmup < 0:
        raise ValueError(f"iterations must be >= 1 and warmup >= 0, not {iterations}, {warmup}")
    base = Path(tempfile.mkdtemp(prefix="bench-pr-", dir="/tmp"))  # short socket paths
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        lab = NetnsLab()
        stack.callback(lab.close)
        scene = build_scene(stack, lab)  # bench-pod exists before the services start
        node, pid = start_node(stack, lab, base)
        wire = wire_node(stack, node, base, base / "coordinator.log")
        wire.prepare()
        ours = Ours(wire, scene.pod_path)
        stack.callback(ours.release)
        contenders: list[Contender] = [ours, CNI(scene), Floor(scene)]
        for c in contenders:
            check(scene, c, f"check-{c.name}")
        for w in range(warmup):
            for c in contenders:
                c.up(f"warm-{w}-{c.name}")
                c.down(f"warm-{w}-{c.name}")
        ours.early.clear()  # a warm-up's early answer is not a sample's
        ready: dict[str, list[float]] = {c.name: [] for c in contenders}
        teardown: dict[str, list[float]] = {c.name: [] for c in contenders}
        load = os.getloadavg()[0]
        for i in range(iterations):
            shift = i % len(contenders)
            for c in contenders[shift:] + contenders[:shift]:
                label = f"{i}-{c.name}"
                sample = c.up(label)
                teardown[c.name].append(c.down(label))
                if sample is not None:
                    ready[c.name].append(sample)
        for c in contenders:
            check(scene, c, f"final-{c.name}")
        counters = wire.k8s.pods.counters
        notes = {"connected": counters.connected, "removed": counters.removed,
                 "gate_passes": counters.gate_passes, "errors": list(counters.errors)}  # fmt: skip
        return Measurement(
            ready,
            teardown,
            iterations,
            warmup,
            len(ours.early),
            list(ours.early),
            load,
            platform.release(),
            cni_version(),
            ANSWER_WITHIN_S,
            SERVICE_LOG_LEVEL,
            pid,
            notes,
        )


def summarize(samples: list[float]) -> str:
    if not samples:
        return "no samples"
    ms = [s * 1000 for s in samples]
    p90 = statistics.quantiles(ms, n=10, method="inclusive")[-1] if len(ms) > 1 else ms[0]
    return f"median {statistics.median(ms):7.2f}  p90 {p90:7.2f}  min {min(ms):7.2f} ms"


def report(m: Measurement) -> None:
    print(
        f"P7 pod network readiness, {m.iterations} iterations after {m.warmup} warm-ups, "
        f"kernel {m.kernel}, CNI plugins {m.cni_version}, load {m.load:.2f}; service at "
        f"{m.service_log_level}; answer within {m.answer_within_s} s"
    )
    for title, data in (("ready", m.ready), ("teardown", m.teardown)):
        print(f"{title}:")
        for name in ROWS:
            print(f"  {name:6} {summarize(data[name])}")
    print(f"answered before ready: {m.answered_before_ready}")
    ours = m.ready["ours"]
    if ours:
        for peer in ("CNI", "floor"):
            for title, data in (("ready", m.ready), ("teardown", m.teardown)):
                if data[peer] and data["ours"]:
                    r = statistics.median(data["ours"]) / statistics.median(data[peer])
                    print(f"{title} ours/{peer}: {r:.2f}x (medians)")


MAIN_PID = os.getpid()


def _terminate(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != MAIN_PID:  # a forked child must never run this process's cleanup
        os._exit(128 + signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)  # unwinds through the cleanup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    if args.iterations < 2 or args.warmup < 0:
        parser.error("--iterations must be at least 2 and --warmup not negative")
    problem = preflight()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _terminate)
    try:
        measurement = measure(args.iterations, args.warmup)
    except NetnsLabUnavailable as exc:  # e.g. no macvlan module: one line, like preflight
        print(f"bench_pod_ready: {exc}", file=sys.stderr)
        return 2
    report(measurement)
    return 0


if __name__ == "__main__":
    sys.exit(main())
