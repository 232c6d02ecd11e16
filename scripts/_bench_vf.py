"""P6 for scripts/bench: a VF moved into a sandbox and back on the VM lab's emulated igb.

Boots the VM lab's guest (``labs.VmLab``: QEMU TCG, Debian's kernel, two igb PFs with
real igbvf VFs; about a minute or more), opens one session that lends the guest's PFs
and their VF 0 to the session's node (``lend_vfs(1)``), and a pod namespace in it.
Per iteration, in alternating order (ABAB), after warm-ups:

* ours:  ``ConnectNetwork`` of the ``sriov`` plugin (MoveVF: moved in under its final
  name with our alias in one message, ``linux/move-link/v2``, then up) plus
  ``RemoveNetwork`` (home under its name and alias, its admin state back), over the
  real Unix socket of a real
  ``networkplugin-vf`` service process whose kernel is the session (``kernel_url``:
  the relay to the guest's kernel agent); its NodePrepare is done once, untimed;
* floor: the fewest kernel calls with the same outcome, through the same relay and
  agent (pyroute2 in the guest): the VF moved into the pod under its final name in one
  message and set up, then moved home under its own name in one message.

Before the timed iterations, one untimed run of each counts its round trips to the
guest (the relay's exchanges, by method: each costs milliseconds under TCG), ours per
hook, into ``round_trips`` of the output.

Run as its own process, under ``flock /tmp/dranp-guest.lock`` (one QEMU guest per
machine), by scripts/bench: ``python scripts/_bench_vf.py OUT.json [--iterations N]``.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: _bench_node

from _bench_node import envelope, start_service

from labs import AgentSession, VmLab
from labs.netns import PARENTS
from labs.vm import VmLabUnavailable, missing
from plugins.coordinator import DRIVER_DOMAIN, root_id
from plugins.kernel import LinkChanges
from plugins.sdk import (
    AllocationBinding,
    CleanupRequest,
    CleanupStatus,
    ConnectRequest,
    Hook,
    PrepareRequest,
    Sharing,
)
from plugins.sdk.host import PluginClient

# The lab's own deadline (300 s) is for tests; a guest on a machine busy with other
# work took longer (seen: not ready after 300 s at load 15), and a benchmark can wait.
BOOT_DEADLINE_S = 900.0
POD, IFNAME, STEP, CLAIM = "bench-pod", "net1", "vf", "bench-vf"
VF_CONFIG = json.dumps(
    {"mtu": 1500, "vf": {"vlan": 0, "spoofCheck": False, "trust": True}, "rdmaAccess": False}
)


def vf_attributes(session: AgentSession, name: str) -> dict[str, str]:
    inventory = session.inventory()
    device = inventory.device(name) if inventory is not None else None
    if device is None:
        raise RuntimeError(f"{name} is not in the session's inventory")
    return {key: str(device.networking[key]) for key in ("pfName", "vfIndex", "pciAddress")}


class Ours:
    def __init__(self, client: PluginClient, session: AgentSession, vf: str) -> None:
        self.client = client
        self.pod = session.sandbox(POD)  # made by the Node before its service started
        self.binding = AllocationBinding(
            root_id(CLAIM, STEP),
            DRIVER_DOMAIN,
            "bench-node",
            vf,
            "vf",
            Sharing.EXCLUSIVE,
            vf_attributes(session, vf),
        )
        self.scope = f"{CLAIM}.{STEP}"
        self.prepared = client.node_prepare(
            PrepareRequest(envelope(Hook.NODE_PREPARE, self.scope, STEP), self.binding, VF_CONFIG)
        ).prepared_state
        self.live: str | None = None

    def run(self, label: str) -> float:
        start = time.perf_counter()
        self.connect(label)
        self.remove(label)
        return time.perf_counter() - start

    def connect(self, label: str) -> None:
        self.live = label
        self.client.connect_network(
            ConnectRequest(
                envelope(Hook.CONNECT_NETWORK, label, STEP),
                self.pod,
                VF_CONFIG,
                interface_names={"interface": IFNAME},
                prepared=self.prepared,
                allocation=self.binding,
            )
        )

    def remove(self, label: str) -> None:
        receipt = self.client.remove_network(
            CleanupRequest(envelope(Hook.REMOVE_NETWORK, label, STEP))
        )
        if receipt.status is not CleanupStatus.CLEANED:
            raise RuntimeError(f"RemoveNetwork {label}: {receipt.status} {receipt.detail}")
        self.live = None

    def release(self) -> None:
        if self.live is not None:
            self.remove(self.live)
        receipt = self.client.node_unprepare(
            CleanupRequest(envelope(Hook.NODE_UNPREPARE, self.scope, STEP))
        )
        if receipt.status is not CleanupStatus.CLEANED:
            print(f"note: NodeUnprepare: {receipt.status} {receipt.detail}", file=sys.stderr)


class Floor:
    def __init__(self, session: AgentSession, vf: str) -> None:
        self.kernel = session.kernel
        self.host = self.kernel.host_namespace()
        self.pod = self.kernel.namespace(POD)
        self.home = vf

    def run(self, label: str, counted: Callable[[], object] = lambda: None) -> float:
        """``counted`` is called once the untimed lookup is done: the timed part starts."""
        k = self.kernel
        found = k.get_link(self.host, name=self.home)  # untimed: the floor knows its VF
        if found is None:
            raise RuntimeError(f"floor: {self.home} is not in the session's node")
        counted()
        start = time.perf_counter()
        moved = k.move_link(self.host, found.ifindex, self.pod, new_name=IFNAME)
        k.set_link(self.pod, moved.ifindex, LinkChanges(up=True))
        k.move_link(self.pod, moved.ifindex, self.host, new_name=self.home)
        return time.perf_counter() - start


def check_home(session: AgentSession, vf: str, who: str) -> None:
    k = session.kernel
    if k.get_link(k.host_namespace(), name=vf) is None:
        raise RuntimeError(f"{who}: {vf} is not back in the session's node")
    left = sorted(link.name for link in k.list_links(k.namespace(POD)))
    if IFNAME in left:
        raise RuntimeError(f"{who}: the pod still holds {IFNAME}: {left}")


def round_trips(lab: VmLab, ours: Ours, floor: Floor) -> dict[str, list[str]]:
    """The methods each contender's run sends to the guest, in order (untimed)."""
    relay = lab.relay
    if relay is None:
        raise RuntimeError("the VM lab's relay is closed")
    found: dict[str, list[str]] = {}

    def since(mark: int) -> list[str]:  # the exchanges since the count was ``mark``
        latest = list(relay.methods)
        return [method for _, method in latest[len(latest) - (relay.exchanges - mark) :]]

    for hook, call in (("ConnectNetwork", ours.connect), ("RemoveNetwork", ours.remove)):
        mark = relay.exchanges
        call("round-trips")
        found[hook] = since(mark)
    marks: list[int] = []
    floor.run("round-trips", lambda: marks.append(relay.exchanges))
    found["floor"] = since(marks[0])
    return found


def measure(iterations: int, warmup: int) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="bench-vf-", dir="/tmp"))
    samples: dict[str, list[float]] = {"ours": [], "floor": []}
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        booted = time.monotonic()
        lab = VmLab(boot_deadline_s=BOOT_DEADLINE_S)
        stack.callback(lab.close)
        boot_s = time.monotonic() - booted
        lend = lab.lend_vfs(1)
        session = lab.session(lend=lend)
        stack.callback(session.close)
        vf = f"{PARENTS[0]}v0"
        service = start_service(stack, session, base, "sriov", pod=POD)
        client = stack.enter_context(service.client("sriov.sock"))
        ours = Ours(client, session, vf)
        stack.callback(ours.release)
        floor = Floor(session, vf)
        rows: list[tuple[str, Ours | Floor]] = [("ours", ours), ("floor", floor)]
        for name, contender in rows:
            contender.run(f"check-{name}")
            check_home(session, vf, name)
        trips = round_trips(lab, ours, floor)
        check_home(session, vf, "round trips")
        for w in range(warmup):
            for name, contender in rows:
                contender.run(f"warm-{w}-{name}")
        for i in range(iterations):
            order = rows if i % 2 == 0 else rows[::-1]
            for name, contender in order:
                samples[name].append(contender.run(f"it-{i}-{name}"))
        for name, _ in rows:
            check_home(session, vf, name)
        release = lab.kernel.release()
    return {
        "samples": samples,
        "iterations": iterations,
        "warmup": warmup,
        "guest_kernel": release,
        "boot_seconds": round(boot_s, 1),
        "vf": vf,
        "round_trips": trips,
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
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        result = measure(args.iterations, args.warmup)
    except VmLabUnavailable as exc:
        print(f"the VM lab is not available: {exc}", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
