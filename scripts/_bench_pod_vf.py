"""P7's VF row for scripts/bench: a pod's network ready through NRI when its claim is one
VF, on the VM lab's emulated igb, against P6's floor.

Boots the VM lab's guest as P6 does (``labs.VmLab``: QEMU TCG, Debian's kernel, igb PFs
with real igbvf VFs), opens one session that lends the guest's PFs and their VF 0 to the
session's node (``lend_vfs(1)``), and serves that node as on Kubernetes, every peer on its
wire, as ``scripts/bench_pod_ready.py`` does for the macvlan row: ``KubernetesNode`` in
this process (journal on disk, log at INFO), its NRI plugin on ``NRIRuntimeSim``'s socket,
its API client on ``FakeAPIServer``, the real ``networkplugin-vf`` service as a process
whose kernel is the session (the relay to the guest's kernel agent). The claim is of
``bench-vf``, a topology of one Allocation step of the ``sriov`` plugin (written into the
run's temp dir and validated by ``plugins.coordinator.validate_topology``: no topology
under ``topologies/`` moves a single VF), allocated on the session's inventory, and
prepared once, untimed, through ``KubeletSim``.

Per iteration, in alternating order (ABAB) after warm-ups, each contender brings the VF
up in the pod as ``net1`` (the readiness sample), then takes it home (timed apart):

* ours:  RunPodSandbox, send to answer, counted only if the sandbox's journal unit is
  ``connected`` at the answer (else *answered before ready*, left out); teardown:
  StopPodSandbox (RemovePodSandbox follows untimed);
* floor: P6's: the VF moved into the pod under its final name in one message and set
  up, through the same relay and agent; teardown: moved home under its own name.

No CNI peer: Debian's containernetworking-plugins has no sriov plugin, and its
host-device (which can move a VF) would have to be exec'd inside the guest, where the
lab's agent serves kernel calls only.

Run as its own process, under ``flock /tmp/dranp-guest.lock`` (one QEMU guest per
machine), by scripts/bench: ``python scripts/_bench_pod_vf.py OUT.json [--iterations N]``.
Writes the samples (seconds) as JSON; exit status 2 with one line when the VM lab is
not installed. Not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: bench_pod_ready

from bench_pod_ready import (
    ANSWER_WITHIN_S,
    SERVICE_LOG_LEVEL,
    Ours,
    _terminate,
    start_node,
    wire_node,
)

from harness.scenarios import TOPOLOGY_DIR
from labs import AgentSession, VmLab, project_descriptors
from labs.netns import PARENTS
from labs.vm import VmLabUnavailable, missing
from plugins.coordinator import (
    CompiledTopology,
    load_policies,
    load_topology,
    validate_topology,
)
from plugins.kernel import LinkChanges

# As P6: a guest on a machine busy with other work can take long to boot.
BOOT_DEADLINE_S = 900.0
POD, IFNAME, PLUGIN = "bench-pod", "net1", "sriov"
TOPOLOGY = "bench-vf"
# One exclusive VF of PF 0 as net1, with P6's VF settings (VF_CONFIG in _bench_vf.py).
TOPOLOGY_YAML = """\
apiVersion: networking.dra.io/v1alpha1
kind: NetworkTopology
metadata:
  name: bench-vf
spec:
  runtimeProfile: nri-secondary-v1
  attachmentPolicy: SinglePod
  execution:
    maxParallelSteps: 1
    primaryNetworkPolicy: Preserve
  steps:
  - name: vf
    kind: Allocation
    pluginRef:
      name: sriov
      contractVersion: v1alpha1
    allocation:
      sharing: Exclusive
      selector:
        cel: >-
          device.attributes["dra.networking"].type == "vf" &&
          device.attributes["dra.networking"].pfName == "enp3s0f0"
    interfaceName: net1
    config:
      mtu: 1500
      rdmaAccess: false
      vf:
        vlan: 0
        spoofCheck: false
        trust: true
  exports:
    data:
      from: {step: vf, output: interface}
"""
NO_CNI = (
    "no CNI peer: Debian's containernetworking-plugins has no sriov plugin; its "
    "host-device could move a VF but would have to run inside the guest, and the lab's "
    "agent serves kernel calls only"
)
ROWS = ("ours", "floor")


def vf_topology(base: Path) -> CompiledTopology:
    """``bench-vf``, written to ``base`` and validated against the project's plugins."""
    path = base / f"{TOPOLOGY}.yaml"
    path.write_text(TOPOLOGY_YAML)
    policies = load_policies(TOPOLOGY_DIR / "policies.yaml")
    return validate_topology(load_topology(path), project_descriptors(), policies)


class Floor:
    """P6's floor, split at the pod: the move in (timed: ready), the move home (teardown)."""

    name = "floor"

    def __init__(self, session: AgentSession, vf: str) -> None:
        self.kernel = session.kernel
        self.host = self.kernel.host_namespace()
        self.pod = self.kernel.namespace(POD)
        self.home = vf
        self.index = 0

    def up(self, label: str) -> float:
        k = self.kernel
        found = k.get_link(self.host, name=self.home)  # untimed: the floor knows its VF
        if found is None:
            raise RuntimeError(f"floor: {self.home} is not in the session's node")
        start = time.perf_counter()
        moved = k.move_link(self.host, found.ifindex, self.pod, new_name=IFNAME)
        k.set_link(self.pod, moved.ifindex, LinkChanges(up=True))
        elapsed = time.perf_counter() - start
        self.index = moved.ifindex
        return elapsed

    def down(self, label: str) -> float:
        start = time.perf_counter()
        self.kernel.move_link(self.pod, self.index, self.host, new_name=self.home)
        return time.perf_counter() - start


Contender = Ours | Floor


def check(session: AgentSession, contender: Contender, vf: str, label: str) -> None:
    """Untimed: after bring-up the pod holds the VF, up, as net1 (and ours passes the gate
    and has written the claim's status); after teardown the VF is home under its name."""
    k = session.kernel
    home = k.get_link(k.host_namespace(), name=vf)
    contender.up(label)
    try:
        child = k.get_link(k.namespace(POD), name=IFNAME)
        if child is None:
            raise RuntimeError(f"{contender.name}: no {IFNAME} in {POD} after bring-up")
        problems = [] if child.up else ["down"]
        if home is None or child.pci_address != home.pci_address or child.vf_of is None:
            problems.append(f"not the VF {vf} (PCI {child.pci_address})")
        if problems:
            raise RuntimeError(f"{contender.name}: {IFNAME}: {', '.join(problems)}")
        if isinstance(contender, Ours):
            contender.extra_check(label)
    finally:
        contender.down(label)
    check_home(session, vf, contender.name)


def check_home(session: AgentSession, vf: str, who: str) -> None:
    k = session.kernel
    if k.get_link(k.host_namespace(), name=vf) is None:
        raise RuntimeError(f"{who}: {vf} is not back in the session's node")
    left = sorted(link.name for link in k.list_links(k.namespace(POD)))
    if IFNAME in left:
        raise RuntimeError(f"{who}: the pod still holds {IFNAME}: {left}")


def round_trips(lab: VmLab, contenders: list[Contender]) -> dict[str, int]:
    """How many exchanges with the guest each bring-up and teardown costs (untimed)."""
    relay = lab.relay
    if relay is None:
        raise RuntimeError("the VM lab's relay is closed")
    found: dict[str, int] = {}
    for c in contenders:
        mark = relay.exchanges
        c.up(f"round-trips-{c.name}")
        found[f"{c.name} up"] = relay.exchanges - mark
        mark = relay.exchanges
        c.down(f"round-trips-{c.name}")
        found[f"{c.name} down"] = relay.exchanges - mark
    return found


def measure(iterations: int, warmup: int) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="bench-pv-", dir="/tmp"))  # short socket paths
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        topology = vf_topology(base)
        booted = time.monotonic()
        lab = VmLab(boot_deadline_s=BOOT_DEADLINE_S)
        stack.callback(lab.close)
        boot_s = time.monotonic() - booted
        session = lab.session(lend=lab.lend_vfs(1))
        stack.callback(session.close)
        vf = f"{PARENTS[0]}v0"
        node, pid = start_node(stack, session, base, PLUGIN, pod=POD)
        wire = wire_node(stack, node, base, base / "coordinator.log", (TOPOLOGY, topology))
        wire.prepare()
        devices = [r["device"] for r in wire.claim["status"]["allocation"]["devices"]["results"]]
        if devices != [vf]:
            raise RuntimeError(f"the claim was allocated {devices}, not {vf}")
        ours = Ours(wire, session.sandbox(POD).namespace.path, IFNAME)
        stack.callback(ours.release)
        contenders: list[Contender] = [ours, Floor(session, vf)]
        for c in contenders:
            check(session, c, vf, f"check-{c.name}")
        trips = round_trips(lab, contenders)
        check_home(session, vf, "round trips")
        for w in range(warmup):
            for c in contenders:
                c.up(f"warm-{w}-{c.name}")
                c.down(f"warm-{w}-{c.name}")
        ours.early.clear()  # a warm-up's early answer is not a sample's
        ready: dict[str, list[float]] = {c.name: [] for c in contenders}
        teardown: dict[str, list[float]] = {c.name: [] for c in contenders}
        for i in range(iterations):
            for c in contenders if i % 2 == 0 else contenders[::-1]:
                label = f"{i}-{c.name}"
                sample = c.up(label)
                teardown[c.name].append(c.down(label))
                if sample is not None:
                    ready[c.name].append(sample)
        for c in contenders:
            check(session, c, vf, f"final-{c.name}")
        counters = wire.k8s.pods.counters
        pod_side = {"connected": counters.connected, "removed": counters.removed,
                    "gate_passes": counters.gate_passes, "errors": list(counters.errors)}  # fmt: skip
        release = lab.kernel.release()
    return {
        "ready": ready,
        "teardown": teardown,
        "iterations": iterations,
        "warmup": warmup,
        "answered_before_ready": len(ours.early),
        "early_answers": list(ours.early),
        "answer_within_s": ANSWER_WITHIN_S,
        "log_level": SERVICE_LOG_LEVEL,
        "service_pid": pid,
        "guest_kernel": release,
        "boot_seconds": round(boot_s, 1),
        "vf": vf,
        "topology": TOPOLOGY,
        "round_trips": trips,
        "pod_side": pod_side,
        "cni": NO_CNI,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where the samples go (JSON)")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    if args.iterations < 2 or args.warmup < 0:
        parser.error("--iterations must be at least 2 and --warmup not negative")
    problem = missing()
    if problem is not None:
        print(f"the VM lab is not installed: {problem}", file=sys.stderr)
        return 2
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _terminate)  # unwinds through the cleanup (lab, session)
    try:
        result = measure(args.iterations, args.warmup)
    except VmLabUnavailable as exc:
        print(f"the VM lab is not available: {exc}", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
