"""Benchmark P2: a burst of sandboxes attached, then detached, all at once: ours against CNI.

In the namespaces of a ``labs.NetnsLab`` (never on the machine's own links), as root:
a parent ``benchparent`` (a veth end, up) in the lab's node namespace, and one bare
sandbox namespace per pod (64 by default). Each pod has its own macvlan claim, prepared
once before anything is timed (NodePrepare), as a node would hold 64 pods' claims.

One round of a contender at burst size N, every one of the N calls started together
(a barrier) on N threads that sit in the node namespace:

* ours: N ``ConnectNetwork`` (one per pod, ``net1``) over the real Unix socket of a real
  ``networkplugin-links`` service process, then N ``RemoveNetwork``;
* CNI: N execs of ``/usr/lib/cni/macvlan`` with ``CNI_COMMAND=ADD`` (no IPAM), then N
  with ``DEL``, each from its thread in the node namespace (where ``master`` resolves);
* floor: the kernel's own bound, the same N creates then N deletes as bare pyroute2
  requests, one pair of netlink sockets per pod (node namespace, sandbox), from the same
  N threads: ``RTM_NEWLINK`` born in the sandbox under a temporary name, a ``GETLINK``,
  one ``SETLINK`` (alias and ``net1``), one ``SETLINK`` up; then ``DELLINK`` while up.
  Deletes take RTNL and each unregister waits for RCU grace periods, so this is about
  the least that N attaches and detaches cost on this kernel however they are issued.

The wall time of a phase runs from the barrier's release to the last call's return.
Contenders alternate first place every round (ABAB), after warm-up rounds; every
round is checked untimed (after the attach every pod holds an up macvlan ``net1``,
after the detach only ``lo``). Then one more round of ours, untimed, under
``strace -f -e trace=fsync,fdatasync`` attached to the service, counts its fsyncs per
phase against the journal's own commit counter (``meta.commits``: one per group-commit
batch). Not a test: nothing here asserts a timing.

    sudo uv run python scripts/bench_burst.py [--size 64] [--rounds 5] [--warmup 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: _bench_node

from _bench_node import (
    envelope,
    floor_attach,
    namespace_threads,
    netlink_socket_in,
    start_service,
)

from labs import NetnsLab, ServiceProcess
from labs.netns import NetnsLabUnavailable
from plugins.coordinator import DRIVER_DOMAIN, root_id
from plugins.kernel import NsRef
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
from plugins.sdk.host import PluginCallError

CNI_DIR = Path("/usr/lib/cni")
CNI_MACVLAN = CNI_DIR / "macvlan"
PARENT, IFNAME, MTU, STEP = "benchparent", "net1", 1500, "secondary"
CAPACITY = "dra.networking/macvlans"
PLUGIN_CONFIG = json.dumps({"mode": "bridge", "mtu": MTU})
CNI_CONFIG = json.dumps(
    {
        "cniVersion": "1.0.0",
        "name": "burst",
        "type": "macvlan",
        "master": PARENT,
        "mode": "bridge",
        "mtu": MTU,
    }
).encode()
BARRIER_TIMEOUT_S = 120.0
STRACE_ATTACH_DEADLINE_S = 30.0
# With -y strace names each descriptor's file: "fsync(5</.../journal.db-wal>) = 0".
FSYNC_CALL = re.compile(r"\b(?:fsync|fdatasync)\((?:\d+<(?P<path>[^>]*)>)?")
CONTENDERS = ("ours", "CNI", "floor")
PHASES = ("attach", "detach")


@dataclass(frozen=True)
class Phase:
    """One phase of one round: its wall time and each call's own latency, in seconds."""

    contender: str
    phase: str  # attach | detach
    size: int
    wall: float
    calls: list[float]


@dataclass(frozen=True)
class FsyncCount:
    """ours, one phase of one untimed round under strace."""

    phase: str
    fsyncs: int
    commit_batches: int
    hooks: int
    by_file: dict[str, int]  # fsyncs per file name (journal.db-wal, journal.db, ...)


@dataclass(frozen=True)
class BurstMeasurement:
    """Every timed phase of the run, in order, and the fsync counts, as data."""

    size: int
    sizes: list[int]
    rounds: int
    warmup: int
    phases: list[Phase] = field(default_factory=list)
    fsyncs: list[FsyncCount] = field(default_factory=list)
    fsync_note: str = ""

    def walls(self, contender: str, size: int) -> list[float]:
        """Attach+detach wall time of each round of ``contender`` at ``size``."""
        pairs: dict[int, float] = {}
        rows = [p for p in self.phases if p.contender == contender and p.size == size]
        for i, p in enumerate(rows):
            pairs[i // 2] = pairs.get(i // 2, 0.0) + p.wall
        return list(pairs.values())

    def calls(self, contender: str, phase: str, size: int) -> list[float]:
        return [
            c
            for p in self.phases
            if (p.contender, p.phase, p.size) == (contender, phase, size)
            for c in p.calls
        ]


# -- the lab -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    name: str
    handle: NamespaceHandle
    ref: NsRef
    binding: AllocationBinding
    prepare_scope: str


def burst(
    pool: ThreadPoolExecutor, calls: Sequence[Callable[[], None]]
) -> tuple[float, list[float]]:
    """Run every call at once (each on its own thread, released by one barrier); return
    the wall time from the release to the last return, and each call's own time."""
    return staged_burst(pool, [partial(lambda c: c, c) for c in calls])


def staged_burst(
    pool: ThreadPoolExecutor, stages: Sequence[Callable[[], Callable[[], None]]]
) -> tuple[float, list[float]]:
    """``burst``, where each thread first runs its stage (untimed, before the barrier)
    and then times the call the stage returned."""
    released: list[float] = []
    gate = threading.Barrier(
        len(stages), timeout=BARRIER_TIMEOUT_S, action=lambda: released.append(time.perf_counter())
    )

    def timed(stage: Callable[[], Callable[[], None]]) -> tuple[float, float]:
        call = stage()
        gate.wait()
        start = time.perf_counter()
        call()
        end = time.perf_counter()
        return end - start, end

    results = [f.result() for f in [pool.submit(timed, s) for s in stages]]
    return max(end for _, end in results) - released[0], [took for took, _ in results]


class Scene:
    """The lab, the pods, the service and its client, set up once; closed by ``stack``."""

    def __init__(self, stack: contextlib.ExitStack, base: Path, size: int) -> None:
        self.lab = NetnsLab(parents=(PARENT,))
        stack.callback(self.lab.close)
        k = self.lab.kernel
        self.pods: list[Pod] = []
        for i in range(size):
            name = f"burst-{i:02d}"
            ref = k.add_namespace(name)
            claim = f"burst-claim-{i:02d}"
            binding = AllocationBinding(
                root_id(claim, STEP),
                DRIVER_DOMAIN,
                "bench-node",
                f"{PARENT}-macvlan",
                "pf",
                Sharing.SHARED,
                {"ifName": PARENT},
                {CAPACITY: "1"},
            )
            handle = NamespaceHandle(ref.path, ref.device, ref.inode, ref.boot_id)
            self.pods.append(Pod(name, handle, ref, binding, f"{claim}.{STEP}"))
        self.pool = namespace_threads(k.host_namespace().path, size)
        stack.callback(self.pool.shutdown)
        self.service = start_service(stack, self.lab, base, "macvlan")
        self.client = stack.enter_context(self.service.client("macvlan.sock"))
        self.prepared: dict[str, PreparedState] = {}
        stack.callback(self.release)  # unwound before the client and the service
        for pod in self.pods:
            self.prepared[pod.name] = self.client.node_prepare(
                PrepareRequest(
                    envelope(Hook.NODE_PREPARE, pod.prepare_scope, STEP), pod.binding, PLUGIN_CONFIG
                )
            ).prepared_state
        self.cni_env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "CNI_IFNAME": IFNAME,
            "CNI_PATH": str(CNI_DIR),
        }
        self.live: set[str] = set()  # attachments that may exist, for cleanup
        (parent,) = self.lab.parents
        self.parent_index = parent.ifindex
        self.pod_fds: dict[str, int] = {}  # for IFLA_NET_NS_FD (the floor)
        for pod in self.pods:
            self.pod_fds[pod.name] = os.open(pod.handle.path, os.O_RDONLY | os.O_CLOEXEC)
            stack.callback(os.close, self.pod_fds[pod.name])
        self.floor_index: dict[str, int] = {}  # the floor's child in each pod

    # -- ours ------------------------------------------------------------------------

    def connect(self, pod: Pod, label: str) -> None:
        self.live.add(label)
        self.client.connect_network(
            ConnectRequest(
                envelope(Hook.CONNECT_NETWORK, label, STEP),
                SandboxHandle(pod.name, pod.handle),
                PLUGIN_CONFIG,
                interface_names={"interface": IFNAME},
                prepared=self.prepared[pod.name],
                allocation=pod.binding,
            )
        )

    def remove(self, label: str) -> None:
        receipt = self.client.remove_network(
            CleanupRequest(envelope(Hook.REMOVE_NETWORK, label, STEP))
        )
        if receipt.status is not CleanupStatus.CLEANED:
            raise RuntimeError(f"RemoveNetwork {label}: {receipt.status} {receipt.detail}")
        self.live.discard(label)

    def ours(self, pods: Sequence[Pod], round_label: str) -> tuple[Phase, Phase]:
        labels = [f"burst-att-{round_label}-{p.name}" for p in pods]
        wall, calls = burst(
            self.pool,
            [partial(self.connect, p, a) for p, a in zip(pods, labels, strict=True)],
        )
        attach = Phase("ours", "attach", len(pods), wall, calls)
        self.check_attached(pods, "ours")
        wall, calls = burst(self.pool, [partial(self.remove, a) for a in labels])
        detach = Phase("ours", "detach", len(pods), wall, calls)
        self.check_detached(pods, "ours")
        return attach, detach

    # -- CNI -------------------------------------------------------------------------

    def cni(self, command: str, pod: Pod, label: str) -> None:
        env = dict(
            self.cni_env, CNI_COMMAND=command, CNI_NETNS=pod.handle.path, CNI_CONTAINERID=label
        )
        done = subprocess.run(
            [str(CNI_MACVLAN)], input=CNI_CONFIG, env=env, capture_output=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"CNI {command} {pod.name} exited {done.returncode}: "
                f"{done.stdout.decode(errors='replace').strip()} "
                f"{done.stderr.decode(errors='replace').strip()}"
            )

    def cni_round(self, pods: Sequence[Pod], round_label: str) -> tuple[Phase, Phase]:
        phases = []
        for command, phase in (("ADD", "attach"), ("DEL", "detach")):
            wall, calls = burst(
                self.pool,
                [partial(self.cni, command, p, f"burst-{round_label}-{p.name}") for p in pods],
            )
            phases.append(Phase("CNI", phase, len(pods), wall, calls))
            if phase == "attach":
                self.check_attached(pods, "CNI")
            else:
                self.check_detached(pods, "CNI")
        return phases[0], phases[1]

    # -- floor -----------------------------------------------------------------------

    def floor_stage(
        self, pod: Pod, work: Callable[[Any, Any, Pod], None]
    ) -> Callable[[], Callable[[], None]]:
        """Run before the barrier, on the thread that then makes the timed call: its
        two pyroute2 ``IPRoute``s (pyroute2 ties each to the thread that made it), one on
        a socket of this thread (the node namespace), one on a socket made in the pod's."""

        def stage() -> Callable[[], None]:
            from pyroute2 import IPRoute

            host_ipr = IPRoute()
            pod_ipr = IPRoute(use_socket=netlink_socket_in(pod.handle.path))

            def timed() -> None:
                try:
                    work(host_ipr, pod_ipr, pod)
                finally:
                    host_ipr.close()
                    pod_ipr.close()

            return timed

        return stage

    def floor_add(self, host_ipr: Any, pod_ipr: Any, pod: Pod) -> None:
        self.floor_index[pod.name] = floor_attach(
            host_ipr, pod_ipr, self.parent_index, self.pod_fds[pod.name], pod.name, IFNAME, MTU
        )

    def floor_delete(self, host_ipr: Any, pod_ipr: Any, pod: Pod) -> None:
        pod_ipr.link("del", index=self.floor_index[pod.name])

    def floor_round(self, pods: Sequence[Pod], round_label: str) -> tuple[Phase, Phase]:
        phases = []
        for phase, work in (("attach", self.floor_add), ("detach", self.floor_delete)):
            wall, calls = staged_burst(self.pool, [self.floor_stage(p, work) for p in pods])
            phases.append(Phase("floor", phase, len(pods), wall, calls))
            if phase == "attach":
                self.check_attached(pods, "floor")
            else:
                self.check_detached(pods, "floor")
        return phases[0], phases[1]

    # -- checks and cleanup ----------------------------------------------------------

    def check_attached(self, pods: Sequence[Pod], who: str) -> None:
        k = self.lab.kernel
        for pod in pods:
            child = k.get_link(pod.ref, name=IFNAME)
            if child is None or child.kind != "macvlan" or not child.up or child.mtu != MTU:
                raise RuntimeError(f"{who}: {pod.name} after attach: {IFNAME} is {child}")

    def check_detached(self, pods: Sequence[Pod], who: str) -> None:
        k = self.lab.kernel
        for pod in pods:
            left = sorted(link.name for link in k.list_links(pod.ref))
            if left != ["lo"]:
                raise RuntimeError(f"{who}: {pod.name} holds {left} after detach")

    def release(self) -> None:
        """After any exit: remove half-done attachments, then every pod's share."""
        try:
            for label in sorted(self.live):
                self.remove(label)
            for pod in self.pods:
                if pod.name in self.prepared:
                    receipt = self.client.node_unprepare(
                        CleanupRequest(envelope(Hook.NODE_UNPREPARE, pod.prepare_scope, STEP))
                    )
                    if receipt.status is not CleanupStatus.CLEANED:
                        raise RuntimeError(f"{pod.name}: {receipt.status} {receipt.detail}")
        except (PluginCallError, RuntimeError) as exc:
            # The namespaces and the service's state are deleted next anyway.
            print(f"note: releasing the macvlan shares failed: {exc}", file=sys.stderr)


# -- fsyncs and commit batches -------------------------------------------------------------


def commit_batches(service: ServiceProcess) -> int:
    """The sum of every journal's ``meta.commits`` under the service's state: each
    COMMIT of the store (one group-commit batch) increments it in the same transaction."""
    total = 0
    for db in sorted(service.root.glob("state/**/journal.db")):
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            (value,) = conn.execute("SELECT value FROM meta WHERE key = 'commits'").fetchone()
        finally:
            conn.close()
        total += int(value)
    return total


def traced(pid: int) -> bool:
    """Every thread of ``pid`` has a tracer (strace attached to all of them)."""
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:  # a thread that just ended
            continue
        match = re.search(r"^TracerPid:\s+(\d+)$", text, re.MULTILINE)
        if match is None or match.group(1) == "0":
            return False
    return True


@contextlib.contextmanager
def strace_fsyncs(pid: int, out: Path) -> Iterator[None]:
    proc = subprocess.Popen(
        [
            "strace",
            "-f",
            "-qq",
            "-y",
            "-e",
            "trace=fsync,fdatasync",
            "-o",
            str(out),
            "-p",
            str(pid),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + STRACE_ATTACH_DEADLINE_S
        while not traced(pid):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"strace did not attach to the service (pid {pid})")
            time.sleep(0.01)  # polling /proc for a condition with a deadline, not a wait
        yield
    finally:
        proc.send_signal(signal.SIGINT)  # detaches, leaving the service running
        proc.wait(30)


def count_fsyncs(scene: Scene, pods: Sequence[Pod], base: Path) -> list[FsyncCount]:
    pid = scene.service.proc.pid if scene.service.proc is not None else 0
    labels = [f"burst-att-strace-{p.name}" for p in pods]
    counts = []
    for phase in PHASES:
        out = base / f"strace-{phase}.txt"
        before = commit_batches(scene.service)
        with strace_fsyncs(pid, out):
            if phase == "attach":
                burst(
                    scene.pool,
                    [partial(scene.connect, p, a) for p, a in zip(pods, labels, strict=True)],
                )
            else:
                burst(scene.pool, [partial(scene.remove, a) for a in labels])
        by_file: dict[str, int] = {}
        for line in out.read_text().splitlines():
            call = FSYNC_CALL.search(line)
            if call is not None:
                name = Path(call.group("path") or "?").name
                by_file[name] = by_file.get(name, 0) + 1
        batches = commit_batches(scene.service) - before
        counts.append(FsyncCount(phase, sum(by_file.values()), batches, len(pods), by_file))
    return counts


# -- the run -------------------------------------------------------------------------------


def preflight() -> str | None:
    if os.geteuid() != 0:
        return "bench_burst: needs root (namespaces, veth, macvlan)"
    if not (CNI_MACVLAN.is_file() and os.access(CNI_MACVLAN, os.X_OK)):
        return f"bench_burst: {CNI_MACVLAN} is missing: run scripts/install-bench"
    return None


def measure(
    size: int = 64, rounds: int = 5, warmup: int = 1, sizes: Sequence[int] = (8, 16, 32, 64)
) -> BurstMeasurement:
    """Set the lab up, run ``rounds`` ABAB rounds at every burst size, count fsyncs, tear down."""
    every = sorted({*sizes, size})
    if size < 1 or rounds < 1 or warmup < 0 or every[0] < 1:
        raise ValueError("size, rounds and every burst size must be positive, warmup not negative")
    result = BurstMeasurement(size, every, rounds, warmup)
    base = Path(tempfile.mkdtemp(prefix="bench-burst-", dir="/tmp"))  # short socket paths
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        scene = Scene(stack, base, every[-1])
        runs = {"ours": scene.ours, "CNI": scene.cni_round, "floor": scene.floor_round}
        for w in range(warmup):
            for name in CONTENDERS:
                runs[name](scene.pods[:size], f"warm{w}")
        for n in every:
            pods = scene.pods[:n]
            for r in range(rounds):
                k = r % len(CONTENDERS)  # each contender goes first in turn
                order = CONTENDERS[k:] + CONTENDERS[:k]
                for name in order:
                    result.phases.extend(runs[name](pods, f"{n}-{r}"))
        if shutil.which("strace") is None:
            note = "strace is missing (scripts/install-bench): fsyncs not counted"
            return BurstMeasurement(size, every, rounds, warmup, result.phases, [], note)
        fsyncs = count_fsyncs(scene, scene.pods[:size], base)
    return BurstMeasurement(size, every, rounds, warmup, result.phases, fsyncs)


def report(m: BurstMeasurement) -> None:
    import statistics

    print(
        f"burst of {m.size} sandboxes, {m.rounds} interleaved rounds after {m.warmup} "
        f"warm-up(s); wall ms, medians"
    )
    print(
        f"{'size':>5} {'ours':>9} {'CNI':>9} {'floor':>9} {'ours/CNI':>9} {'CNI/floor':>9}"
        f" {'ours/floor':>10}"
    )
    for n in m.sizes:
        ours, cni, floor = (statistics.median(m.walls(c, n)) * 1000 for c in CONTENDERS)
        print(
            f"{n:>5} {ours:9.1f} {cni:9.1f} {floor:9.1f} {ours / cni:9.2f} {cni / floor:9.2f}"
            f" {ours / floor:10.2f}"
        )
    for c in CONTENDERS:
        att, det = (statistics.median(p.wall for p in m.phases
                    if (p.contender, p.phase, p.size) == (c, ph, m.size)) * 1000
                    for ph in PHASES)  # fmt: skip
        print(f"{c} at {m.size}: attach {att:.1f} ms, detach {det:.1f} ms (medians)")
    for f in m.fsyncs:
        print(
            f"ours {f.phase} of {f.hooks}: {f.fsyncs} fsyncs, {f.commit_batches} commit "
            f"batches ({f.fsyncs / f.hooks:.2f} fsyncs/hook; by file: {f.by_file})"
        )
    if m.fsync_note:
        print(m.fsync_note)


MAIN_PID = os.getpid()


def _terminate(signum: int, frame: object) -> None:
    if os.getpid() != MAIN_PID:  # a forked child must never run this process's cleanup
        os._exit(128 + signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)  # unwinds through the cleanup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--sizes", default="8,16,32,64", help="burst sizes of the scaling curve (comma-separated)"
    )
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes must be comma-separated integers, not {args.sizes!r}")
    problem = preflight()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _terminate)
    try:
        report(measure(args.size, args.rounds, args.warmup, sizes))
    except NetnsLabUnavailable as exc:
        print(f"bench_burst: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
