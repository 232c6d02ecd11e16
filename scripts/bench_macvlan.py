"""Benchmark: one macvlan ADD+DEL, ours against Debian's CNI plugin and a raw-netlink floor.

Runs in the namespaces of a ``labs.NetnsLab`` (never on the machine's own links), as root:

* the lab's node namespace: the service's approved host namespace, holding the
  parent ``benchparent`` (a veth end, up, MTU 1500; its peer is in the lab's wire
  namespace); ``benchparent`` is the macvlan parent.
* ``bench-pod``: the sandbox every child is created in, always as ``net1`` (added to
  the lab bare: no interface of its own, so after DEL it holds only ``lo``).

Per iteration, in rotating order so drift hits all three alike:

* ours:  ConnectNetwork + RemoveNetwork over the real socket of a real
  ``networkplugin-links`` service (a ``labs.Node`` of processes on the lab: its
  ``linux://`` kernel URL names the node namespace), a new attachment each time on
  one macvlan share prepared once;
* CNI:   ``/usr/lib/cni/macvlan`` exec'd with ADD then DEL (no IPAM), from a thread
  that sits in the node namespace so the plugin resolves ``master`` there;
* floor: the kernel operations our executors perform, as bare pyroute2 requests:
  create the child on ``benchparent`` straight into ``bench-pod`` (IFLA_NET_NS_FD)
  under a temporary name, look up its ifindex, set its alias and final name (one
  message), set it up, delete it; each request waits for the kernel's ack, as every
  netlink client does by default (the CNI plugin too);
* kernel: the same operations through our ``LinuxKernel`` in this process (no
  service, journal or gRPC), whose delete answers at the kernel's announcement that
  the link is unregistered rather than at the ack after an RCU grace period
  (``plugins/kernel/linux/_unregister``): ours minus this row is the service's own cost.

The service runs at ``--log-level INFO`` unless asked otherwise: the level a deployed
service runs at (its default), which writes a line per hook and per effect transition
to its log. ``--log-level WARNING`` measures it without those lines.

Prints medians (and p90/min) in ms and the ratios ours/CNI and ours/floor (medians).
Not a test: nothing here asserts a timing.

    sudo scripts/install-bench    # the CNI plugins (and strace, py-spy), once
    sudo uv run python scripts/bench_macvlan.py [--iterations 50] [--warmup 5]
        [--rows ours,CNI,floor,kernel] [--log-level INFO] [--print-service-pid]

``measure()`` returns the per-iteration samples as data (``Measurement``), for a
caller such as ``scripts/bench``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: _bench_node

from _bench_node import (
    envelope,
    floor_attach,
    floor_names,
    namespace_threads,
    netlink_socket_in,
    start_service,
)

from labs import NetnsLab
from labs.netns import NetnsLabUnavailable
from plugins.coordinator import DRIVER_DOMAIN, root_id
from plugins.kernel import LinkChanges, LinkSpec
from plugins.kernel.linux import LinuxKernel
from plugins.sdk import (
    AllocationBinding,
    CleanupRequest,
    CleanupStatus,
    ConnectRequest,
    Hook,
    NamespaceHandle,
    PreparedState,
    PrepareRequest,
    SandboxHandle,
    Sharing,
)
from plugins.sdk.host import PluginCallError, PluginClient

CNI_DIR = Path("/usr/lib/cni")
CNI_MACVLAN = CNI_DIR / "macvlan"
INSTALL_HINT = (
    f"bench_macvlan: {CNI_MACVLAN} is missing or not executable; "
    "install it with: sudo scripts/install-bench (Debian's containernetworking-plugins)"
)
PARENT, POD, IFNAME, MTU = "benchparent", "bench-pod", "net1", 1500
CLAIM, STEP = "bench-claim", "secondary"
CAPACITY = "dra.networking/macvlans"
PLUGIN_CONFIG = json.dumps({"mode": "bridge", "mtu": MTU})
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
DEPLOYED_LOG_LEVEL = "INFO"  # the service's default (plugins.sdk.service.main)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


# -- namespaces -------------------------------------------------------------------------


def netlink_socket_in_stack(stack: contextlib.ExitStack, path: str) -> socket.socket:
    """``_bench_node.netlink_socket_in``, closed with ``stack``."""
    sock = netlink_socket_in(path)
    stack.callback(sock.close)
    return sock


def attr(msg: Any, name: str) -> Any:
    return msg.get_attr(name)


def kind_of(msg: Any) -> str | None:
    info = msg.get_attr("IFLA_LINKINFO")
    return None if info is None else info.get_attr("IFLA_INFO_KIND")


# -- the three contenders -----------------------------------------------------------------


@dataclass
class Scene:
    """The lab's namespaces as the CNI and floor rows reach them: raw handles."""

    lab: NetnsLab
    pod: NamespaceHandle
    host_ipr: Any  # pyroute2.IPRoute bound to the node namespace
    pod_ipr: Any  # pyroute2.IPRoute bound to bench-pod
    pod_fd: int
    parent_index: int
    host_thread: ThreadPoolExecutor


class Ours:
    name = "ours"
    what = "ConnectNetwork+RemoveNetwork, real service"

    def __init__(self, scene: Scene, client: PluginClient) -> None:
        self.client = client
        self.sandbox = SandboxHandle(POD, scene.pod)
        rid = root_id(CLAIM, STEP)
        self.binding = AllocationBinding(
            rid,
            DRIVER_DOMAIN,
            "bench-node",
            f"{PARENT}-macvlan",
            "pf",
            Sharing.SHARED,
            {"ifName": PARENT},
            {CAPACITY: "1"},
        )
        self.prepare_scope = f"{CLAIM}.{STEP}"
        self.prepared: PreparedState | None = None
        self.live: str | None = None  # an attachment that may exist (for cleanup)

    def prepare(self) -> None:
        request = PrepareRequest(
            envelope(Hook.NODE_PREPARE, self.prepare_scope, STEP), self.binding, PLUGIN_CONFIG
        )
        self.prepared = self.client.node_prepare(request).prepared_state

    def release(self) -> None:
        """Cleanup after any exit: remove a half-done attachment, then the share."""
        try:
            if self.live is not None:
                self.delete(self.live)
            if self.prepared is not None:
                receipt = self.client.node_unprepare(
                    CleanupRequest(envelope(Hook.NODE_UNPREPARE, self.prepare_scope, STEP))
                )
                if receipt.status is not CleanupStatus.CLEANED:
                    raise RuntimeError(f"{receipt.status} {receipt.detail}")
        except (PluginCallError, RuntimeError) as exc:
            # The namespaces and the service's state are deleted next anyway.
            print(f"note: releasing the macvlan share failed: {exc}", file=sys.stderr)

    def add(self, label: str) -> None:
        self.live = label
        self.client.connect_network(
            ConnectRequest(
                envelope(Hook.CONNECT_NETWORK, f"bench-att-{label}", STEP),
                self.sandbox,
                PLUGIN_CONFIG,
                interface_names={"interface": IFNAME},
                prepared=self.prepared,
                allocation=self.binding,
            )
        )

    def delete(self, label: str) -> None:
        receipt = self.client.remove_network(
            CleanupRequest(envelope(Hook.REMOVE_NETWORK, f"bench-att-{label}", STEP))
        )
        if receipt.status is not CleanupStatus.CLEANED:
            raise RuntimeError(f"RemoveNetwork {label}: {receipt.status} {receipt.detail}")
        self.live = None

    def run(self, label: str) -> float:
        start = time.perf_counter()
        self.add(label)
        self.delete(label)
        return time.perf_counter() - start


class CNI:
    name = "CNI"
    what = f"{CNI_MACVLAN} ADD+DEL, exec'd"

    def __init__(self, scene: Scene) -> None:
        self.scene = scene
        self.base_env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "CNI_NETNS": scene.pod.path,
            "CNI_IFNAME": IFNAME,
            "CNI_PATH": str(CNI_DIR),
        }

    def _exec(self, command: str, label: str) -> None:
        env = dict(self.base_env, CNI_COMMAND=command, CNI_CONTAINERID=f"bench-{label}")
        done = subprocess.run(
            [str(CNI_MACVLAN)], input=CNI_CONFIG, env=env, capture_output=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"CNI {command} {label} exited {done.returncode}: "
                f"{done.stdout.decode(errors='replace').strip()} "
                f"{done.stderr.decode(errors='replace').strip()}"
            )

    def _on_host(self, fn: Callable[[], float | None]) -> float | None:
        return self.scene.host_thread.submit(fn).result()

    def add(self, label: str) -> None:
        self._on_host(lambda: self._exec("ADD", label))

    def delete(self, label: str) -> None:
        self._on_host(lambda: self._exec("DEL", label))

    def run(self, label: str) -> float:
        def timed() -> float:  # timed on the worker thread: no thread hand-off inside
            start = time.perf_counter()
            self._exec("ADD", label)
            self._exec("DEL", label)
            return time.perf_counter() - start

        elapsed = self._on_host(timed)
        assert elapsed is not None
        return elapsed


class Floor:
    name = "floor"
    what = "pyroute2: newlink(netns)+get+alias&rename+up, del"

    def __init__(self, scene: Scene) -> None:
        self.scene = scene
        self.index = 0

    def add(self, label: str) -> None:
        scene = self.scene
        self.index = floor_attach(
            scene.host_ipr, scene.pod_ipr, scene.parent_index, scene.pod_fd, label, IFNAME, MTU
        )

    def delete(self, label: str) -> None:
        self.scene.pod_ipr.link("del", index=self.index)

    def run(self, label: str) -> float:
        start = time.perf_counter()
        self.add(label)
        self.delete(label)
        return time.perf_counter() - start


class InProcessKernel:
    name = "kernel"
    what = "LinuxKernel in process: the floor's calls, no service"

    def __init__(self, scene: Scene, stack: contextlib.ExitStack) -> None:
        self.kernel = stack.enter_context(LinuxKernel(scene.lab.kernel.host_namespace().path))
        self.pod = self.kernel.open_namespace(scene.pod)
        self.scene = scene
        self.index = 0

    def add(self, label: str) -> None:
        temp, alias = floor_names(label)
        host = self.kernel.host_namespace()
        spec = LinkSpec(
            kind="macvlan",
            name=temp,
            parent=self.scene.parent_index,
            parent_ns=host,
            mode="bridge",
            mtu=MTU,
        )
        self.index = self.kernel.create_link(self.pod, spec).ifindex
        self.kernel.set_link(self.pod, self.index, LinkChanges(alias=alias, name=IFNAME))
        self.kernel.set_link(self.pod, self.index, LinkChanges(up=True))

    def delete(self, label: str) -> None:
        self.kernel.delete_link(self.pod, self.index)

    def run(self, label: str) -> float:
        start = time.perf_counter()
        self.add(label)
        self.delete(label)
        return time.perf_counter() - start


Contender = Ours | CNI | Floor | InProcessKernel


def pod_links(scene: Scene) -> dict[str, Any]:
    return {attr(m, "IFLA_IFNAME"): m for m in scene.pod_ipr.link("dump")}


def check(scene: Scene, contender: Contender, label: str) -> None:
    """Untimed: after ADD the pod has an up macvlan net1 (MTU 1500); after DEL only lo."""
    contender.add(label)
    try:
        links = pod_links(scene)
        child = links.get(IFNAME)
        if child is None:
            raise RuntimeError(f"{contender.name}: no {IFNAME} in bench-pod after ADD")
        problems = []
        if kind_of(child) != "macvlan":
            problems.append(f"kind {kind_of(child)}")
        if not child["flags"] & IFF_UP:
            problems.append("down")
        if attr(child, "IFLA_MTU") != MTU:
            problems.append(f"MTU {attr(child, 'IFLA_MTU')}")
        if problems:
            raise RuntimeError(f"{contender.name}: {IFNAME} after ADD: {', '.join(problems)}")
    finally:
        contender.delete(label)
    left = sorted(pod_links(scene))
    if left != ["lo"]:
        raise RuntimeError(f"{contender.name}: bench-pod holds {left} after DEL")


# -- setup, measurement, report -----------------------------------------------------------


def preflight(cni: bool = True) -> str | None:
    """Why the benchmark cannot run here (one line), or None."""
    if cni and not (CNI_MACVLAN.is_file() and os.access(CNI_MACVLAN, os.X_OK)):
        return INSTALL_HINT
    if os.geteuid() != 0:
        return "bench_macvlan: needs root (namespaces, veth, macvlan): sudo uv run python ..."
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


def build_scene(stack: contextlib.ExitStack) -> Scene:
    from pyroute2 import IPRoute

    lab = NetnsLab(parents=(PARENT,))
    stack.callback(lab.close)
    pod_ref = lab.kernel.add_namespace(POD)
    pod = NamespaceHandle(pod_ref.path, pod_ref.device, pod_ref.inode, pod_ref.boot_id)
    host_path = lab.kernel.host_namespace().path
    pod_fd = os.open(pod.path, os.O_RDONLY | os.O_CLOEXEC)
    stack.callback(os.close, pod_fd)
    host_ipr = stack.enter_context(IPRoute(use_socket=netlink_socket_in_stack(stack, host_path)))
    pod_ipr = stack.enter_context(IPRoute(use_socket=netlink_socket_in_stack(stack, pod.path)))
    host_thread = namespace_threads(host_path)
    stack.callback(host_thread.shutdown)
    (parent,) = lab.parents
    return Scene(lab, pod, host_ipr, pod_ipr, pod_fd, parent.ifindex, host_thread)


def summarize(samples: list[float]) -> tuple[float, float, float]:
    ms = [s * 1000 for s in samples]
    return statistics.median(ms), statistics.quantiles(ms, n=10)[-1], min(ms)


ROWS = ("ours", "CNI", "floor", "kernel")


@dataclass(frozen=True)
class Measurement:
    """One run's samples, as data: what ``scripts/bench`` (or anyone) reads.

    ``samples[row]`` holds one ADD+DEL wall time in seconds per iteration, in iteration
    order, for each row measured (``ROWS``, or the subset asked for).
    """

    samples: dict[str, list[float]]
    iterations: int
    warmup: int
    load_at_start: float
    kernel: str
    cni_version: str
    service_pid: int | None  # the service's process, for a profiler to attach to
    log_level: str = DEPLOYED_LOG_LEVEL  # the service's --log-level

    def medians_ms(self) -> dict[str, float]:
        return {row: summarize(s)[0] for row, s in self.samples.items()}


def report(measurement: Measurement, rows: list[Contender]) -> None:
    m = measurement
    print(
        f"macvlan ADD+DEL on Linux {m.kernel} ({os.cpu_count()} CPUs), "
        f"containernetworking-plugins {m.cni_version}: {m.iterations} iterations "
        f"after {m.warmup} warm-ups, interleaved; load average {m.load_at_start:.2f} at start; "
        f"service at --log-level {m.log_level}"
    )
    print(f"{'':6} {'median ms':>10} {'p90 ms':>8} {'min ms':>8}  measures")
    medians = m.medians_ms()
    for c in rows:
        median, p90, low = summarize(m.samples[c.name])
        print(f"{c.name:6} {median:10.2f} {p90:8.2f} {low:8.2f}  {c.what}")
    for peer in ("CNI", "floor", "kernel"):
        if "ours" in medians and peer in medians:
            ratio = medians["ours"] / medians[peer]
            print(f"ours/{peer:<5} = {ratio:.2f}  (medians)")
    for peer in ("floor", "kernel"):
        if "ours" in medians and peer in medians:
            print(f"ours-{peer:<6}= {medians['ours'] - medians[peer]:.2f} ms  (medians)")


def measure(
    iterations: int = 50,
    warmup: int = 5,
    rows: tuple[str, ...] = ROWS,
    on_ready: Callable[[Measurement], None] | None = None,
    log_level: str = DEPLOYED_LOG_LEVEL,
) -> tuple[Measurement, list[Contender]]:
    """Set the lab up, run every row ``iterations`` times (after ``warmup``), tear down.

    Needs root and ``/usr/lib/cni/macvlan`` when the CNI row is asked for (see
    ``preflight``). ``on_ready`` is called once the service is up and checked, before
    the warm-ups, with an empty ``Measurement`` naming the service's pid (a profiler
    attaches there). ``log_level``: the service's ``--log-level`` (default: a deployed
    service's, INFO).
    """
    unknown = sorted(set(rows) - set(ROWS))
    if unknown or not rows:
        raise ValueError(f"rows must be a non-empty subset of {ROWS}, not {list(rows)}")
    if log_level not in LOG_LEVELS:
        raise ValueError(f"log_level must be one of {LOG_LEVELS}, not {log_level!r}")
    base = Path(tempfile.mkdtemp(prefix="bench-mv-", dir="/tmp"))  # short socket paths
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        scene = build_scene(stack)
        service = start_service(stack, scene.lab, base, "macvlan")  # bench-pod is the scene's, bare
        if service.log_level != log_level:  # the lab starts it at the rig's level
            service.stop(timeout=10)
            service.log_level = log_level
            service.start()
        client = stack.enter_context(service.client("macvlan.sock"))
        ours = Ours(scene, client)
        stack.callback(ours.release)  # unwound first: before the client and the service
        ours.prepare()
        every: list[Contender] = [ours, CNI(scene), Floor(scene), InProcessKernel(scene, stack)]
        contenders = [c for c in every if c.name in rows]
        for c in contenders:
            check(scene, c, f"check-{c.name}")
        pid = service.proc.pid if service.proc is not None else None

        def result(samples: dict[str, list[float]], load: float) -> Measurement:
            return Measurement(
                samples, iterations, warmup, load, platform.release(), cni_version(), pid, log_level
            )

        if on_ready is not None:
            on_ready(result({c.name: [] for c in contenders}, os.getloadavg()[0]))
        for w in range(warmup):
            for c in contenders:
                c.run(f"warm-{w}")
        samples: dict[str, list[float]] = {c.name: [] for c in contenders}
        load = os.getloadavg()[0]
        for i in range(iterations):
            shift = i % len(contenders)
            for c in contenders[shift:] + contenders[:shift]:
                samples[c.name].append(c.run(str(i)))
        for c in contenders:
            check(scene, c, f"final-{c.name}")
        return result(samples, load), contenders


MAIN_PID = os.getpid()


def _terminate(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != MAIN_PID:  # a forked child must never run this process's cleanup
        os._exit(128 + signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)  # unwinds through the cleanup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--rows",
        default=",".join(ROWS),
        help="comma-separated subset of ours,CNI,floor (default: all three)",
    )
    parser.add_argument(
        "--log-level",
        default=DEPLOYED_LOG_LEVEL,
        type=str.upper,
        choices=LOG_LEVELS,
        help=f"the service's log level (default {DEPLOYED_LOG_LEVEL}, a deployed service's)",
    )
    parser.add_argument(
        "--print-service-pid",
        action="store_true",
        help="print the service's pid to stderr once it is ready (to attach py-spy or strace)",
    )
    args = parser.parse_args()
    rows = tuple(r for r in args.rows.split(",") if r)
    if args.iterations < 2 or args.warmup < 0:
        parser.error("--iterations must be at least 2 and --warmup not negative")
    if not rows or set(rows) - set(ROWS):
        parser.error(f"--rows must name some of {','.join(ROWS)}, not {args.rows!r}")
    problem = preflight(cni="CNI" in rows)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _terminate)

    def announce(ready: Measurement) -> None:
        if args.print_service_pid:
            print(f"bench_macvlan: service pid {ready.service_pid}", file=sys.stderr, flush=True)

    try:
        measurement, contenders = measure(
            args.iterations, args.warmup, rows, announce, log_level=args.log_level
        )
    except NetnsLabUnavailable as exc:  # e.g. no macvlan module: one line, like preflight
        print(f"bench_macvlan: {exc}", file=sys.stderr)
        return 2
    report(measurement, contenders)
    return 0


if __name__ == "__main__":
    sys.exit(main())
