"""Benchmark: exec to ready of each service, and recovery of in-flight operations at start.

Every sample is one real service process started from nothing but its command line,
``python -m plugins.services NAME --config FILE`` (what ``labs.ServiceProcess`` runs),
with a fresh state dir, config and token, against the fake kernel behind its server
(``labs.FakeServerLab``, ``fake://``). The clock starts just before the exec and stops
when every socket of the service has answered an authenticated GetInfo with
``ready=true``. The probe is our own and polls without back-off: the socket's path
first (a service links its socket into place only once it listens), then a GetInfo
over a fresh channel every millisecond while it answers ``ready=false``.

Rows, interleaved (the starting row rotates every iteration):

* ``networkplugin-vf``, ``networkplugin-bond``, ``networkplugin-links``: an empty journal;
* ``floor``: ``python -c 'import grpc ...'``, a bare gRPC server that binds a Unix socket
  and answers the same authenticated GetInfo with precomputed bytes: the interpreter,
  grpc and a socket, nothing of ours;
* ``recovery``: ``networkplugin-links`` over a copy of a journal holding ``--in-flight``
  ConnectNetworks left mid-flight (each ``Running``, its first effect ``Applying``
  with its before-image: a SIGKILL after the intent's commit, before the first
  mutation), so start to ready includes their recovery: a probe and two records each.

The in-flight journal is built once per run with the SDK's public API: one real
macvlan NodePrepare + ConnectNetwork through an in-process ``labs.Node`` on the same
fake lab, whose ConnectNetwork records are then copied under new operation ids and
attachment scopes in one ``Store.write``.

Prints median, p90 and min per row, the median CPU time of the process to ready (user +
system, every thread: it moves far less with the machine's load than the wall time), and
the ratios of medians against the floor (and recovery against the empty links start).
``--tree LABEL=DIR`` (twice or more) is an A/B of checkouts in the same interleaved run:
each row but the floor runs once per tree as ``LABEL:row``, with each row's ratio to the
first tree's. Not a test: nothing here asserts a timing. ``measure()`` returns the
samples as data (``StartupMeasurement``) for ``scripts/bench``.

    uv run python scripts/bench_startup.py [--runs 15] [--in-flight 1000]
    uv run python scripts/bench_startup.py --tree before=/tmp/old --tree after=.   # A/B
    uv run python scripts/bench_startup.py --profile networkplugin-links   # cProfile to ready
    uv run python scripts/bench_startup.py --profile recovery   # links over the journal
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import pstats
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import grpc  # noqa: E402

from labs import FakeServerLab, Lab, NetnsLab, Node, ServiceProcess, service_of  # noqa: E402
from plugins.api.networkplugin.v1alpha1 import pb, pb_grpc  # noqa: E402
from plugins.sdk import EffectState, Hook, NamespaceHandle, OperationState  # noqa: E402
from plugins.sdk.store import EffectRecord, OperationRecord, Reader, Store, Txn  # noqa: E402

T = TypeVar("T")

SERVICES = ("networkplugin-vf", "networkplugin-bond", "networkplugin-links")
FLOOR = "floor"
RECOVERY = "recovery"
ROWS = (*SERVICES, FLOOR, RECOVERY)
RECOVERING_SERVICE = "networkplugin-links"
READY_TIMEOUT_S = 120.0
POLL_S = 0.001
_PARTITION = "macvlan/v1alpha1"  # the macvlan plugin's state namespace

# The floor: an interpreter, grpc, one Unix socket and the GetInfo a probe asks for.
_FLOOR_PROGRAM = """
import sys
from concurrent import futures
import grpc
path, token, reply = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
def get_info(request, context):
    if dict(context.invocation_metadata()).get("authorization") != "Bearer " + token:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
    return reply
server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
    sys.argv[4], {"GetInfo": grpc.unary_unary_rpc_method_handler(get_info)}),))
server.add_insecure_port("unix:" + path)
server.start()
server.wait_for_termination()
"""


@dataclass(frozen=True)
class StartupMeasurement:
    """One run's samples, as data: what ``scripts/bench`` (or anyone) reads.

    ``samples[row]`` holds one exec-to-ready time in seconds per iteration, in iteration
    order, for each row measured (``ROWS``, or the subset asked for).
    """

    samples: dict[str, list[float]]
    runs: int
    in_flight: int
    load_at_start: float
    kernel: str
    python: str
    bytecode: bool  # run from compiled modules (else compiled from source at every exec)
    tier: str = "fake"  # the services' kernel: "fake" (fake://) or "netns" (linux://)
    load_at_end: float | None = None  # /proc/loadavg's 1-minute figure when the run ended
    cpu: dict[str, list[float]] = field(default_factory=dict)  # CPU s to ready, as samples

    def median_ms(self, row: str) -> float:
        return statistics.median(self.samples[row]) * 1000

    def summary_ms(self, row: str) -> tuple[float, float, float]:
        """Median, p90 and minimum of a row, in ms."""
        ms = sorted(s * 1000 for s in self.samples[row])
        p90 = statistics.quantiles(ms, n=10)[-1] if len(ms) > 1 else ms[0]
        return statistics.median(ms), p90, ms[0]


# ---------------------------------------------------------------------- readiness probe


def _service_name() -> str:
    return pb.DESCRIPTOR.services_by_name["NetworkPlugin"].full_name


def _get_info(path: Path, token: str) -> pb.GetInfoResponse:
    with grpc.insecure_channel(f"unix://{path}", options=[("grpc.enable_retries", 0)]) as channel:
        return pb_grpc.NetworkPluginStub(channel).GetInfo(
            pb.GetInfoRequest(),
            metadata=(("authorization", f"Bearer {token}"),),
            timeout=READY_TIMEOUT_S,
            wait_for_ready=True,
        )


def _listening(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def wait_ready(
    proc: subprocess.Popen[bytes], paths: Sequence[Path], token: str, deadline: float
) -> float:
    """Poll until every socket answers an authenticated GetInfo with ready=true; the time."""
    poll = threading.Event()  # never set: its wait() is the bounded pause between polls
    pending = list(paths)
    while pending:
        if proc.poll() is not None:
            raise RuntimeError(f"the process exited with {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise RuntimeError(f"not ready within {READY_TIMEOUT_S}s: {pending[0]}")
        path = pending[0]
        if _listening(path) and _get_info(path, token).ready:
            pending.pop(0)
            continue
        poll.wait(POLL_S)
    return time.perf_counter()


# ---------------------------------------------------------------------- the rows


@dataclass
class Contender:
    """Starts one row's process once per sample and times it to ready."""

    name: str
    lab: Lab
    base: Path
    env: dict[str, str]
    journal: Path | None = None  # a state dir copied in before each start (recovery)
    repo: Path = REPO  # the tree whose services run (another checkout, to compare two)
    count: int = 0
    cpu: list[float] = field(default_factory=list)  # CPU seconds to ready, one per sample
    label: str = ""  # the row's name in the samples ("" : ``name``; "before:recovery")

    @property
    def row(self) -> str:
        return self.label or self.name

    def sample(self) -> float:
        self.count += 1
        root = Path(tempfile.mkdtemp(prefix=f"{self.name[:8]}-", dir=self.base))
        sockets = root / "s"  # short: Unix socket paths are at most 107 bytes
        try:
            if self.name == FLOOR:
                return self._floor(root, sockets)
            return self._service(root, sockets)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def _service(self, root: Path, sockets: Path) -> float:
        name = RECOVERING_SERVICE if self.name == RECOVERY else self.name
        spec = service_of(service_plugin(name))
        service = ServiceProcess(
            name, spec.command, root, sockets, _kernel_url(self.lab), spec.sockets
        )
        if self.journal is not None:
            shutil.copytree(self.journal, root / "state", copy_function=shutil.copy2)
        command = [*spec.command, "--config", str(service.config), "--log-level", "WARNING"]
        paths = [sockets / s for s in spec.sockets]
        with service.log.open("ab") as log:
            start = time.perf_counter()
            proc = subprocess.Popen(
                [sys.executable, "-m", *command],
                cwd=self.repo,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            service.proc = proc
            try:
                ready = wait_ready(proc, paths, service.token, time.monotonic() + READY_TIMEOUT_S)
                self.cpu.append(cpu_seconds(proc.pid))
            except RuntimeError as exc:
                raise RuntimeError(f"{self.name}: {exc}; its log: {_tail(service.log)}") from None
            finally:
                _stop(proc)
        if self.journal is not None:
            _check_recovered(root / "state")
        return ready - start

    def _floor(self, root: Path, sockets: Path) -> float:
        sockets.mkdir(mode=0o700)
        token = os.urandom(16).hex()
        reply = pb.GetInfoResponse(plugin_name="floor", ready=True).SerializeToString()
        path = sockets / "floor.sock"
        argv = [sys.executable, "-c", _FLOOR_PROGRAM, str(path), token, reply.hex()]
        start = time.perf_counter()
        proc = subprocess.Popen([*argv, _service_name()], env=self.env, stderr=subprocess.PIPE)
        try:
            ready = wait_ready(proc, [path], token, time.monotonic() + READY_TIMEOUT_S)
            self.cpu.append(cpu_seconds(proc.pid))
        finally:
            _stop(proc)
        return ready - start


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far, every thread (10 ms steps).

    Read the moment the process is ready: unlike the wall time, it barely moves with the
    machine's load, so an A/B of two trees on a shared machine compares it too."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def service_plugin(service: str) -> str:
    """One logical plugin the service serves (how ``labs.service_of`` finds it)."""
    return {"networkplugin-vf": "sriov", "networkplugin-bond": "bond"}.get(service, "macvlan")


LABS = ("fake", "netns")


def open_lab(tier: str) -> Lab:
    """``fake``: the kernel model behind its server; ``netns``: this machine's kernel (root)."""
    if tier == "fake":
        return FakeServerLab()
    if tier == "netns":
        return NetnsLab()
    raise ValueError(f"lab must be one of {LABS}, not {tier!r}")


def _kernel_url(lab: Lab) -> str:
    url = lab.kernel_url
    if url is None:
        raise ValueError(f"a {type(lab).__name__} has no kernel URL for service processes")
    return url


def child_env(bytecode: bool, base: Path) -> dict[str, str]:
    """The environment of every process started: with ``bytecode``, compiled modules.

    An installed service runs from bytecode (pip and apt compile it at install time);
    this machine sets PYTHONDONTWRITEBYTECODE and the venv holds no bytecode, so each
    exec would compile every module from source. With ``bytecode`` the processes write
    and read it under a pycache prefix of this run (the warm-up round compiles);
    without, they get this environment as it is.
    """
    env = dict(os.environ)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
    return env


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


def _tail(log: Path) -> str:
    return " | ".join(log.read_text(errors="replace").splitlines()[-5:])


# ---------------------------------------------------------------------- the in-flight journal


def build_in_flight_journal(
    lab: Lab, root: Path, count: int, *, own_namespaces: bool = False
) -> Path:
    """A links journal holding ``count`` ConnectNetworks left mid-flight; its state dir.

    One real macvlan NodePrepare and ConnectNetwork (in-process, the same registrations
    and executors as the service, on the same fake kernel), then the ConnectNetwork's
    records copied under new operation ids and attachments: each ``Running``, its
    first effect ``Applying`` with the recorded before-image, the rest ``Planned``.

    The copies share the seed's pod namespace, unless ``own_namespaces``: then each
    copy names a pod namespace of its own, created in the lab (as 1,000 pods attached
    at once would), so recovery's probes cannot share one namespace's reads.
    """
    from harness.scenarios import Lifecycle

    spec = service_of("macvlan")
    node = Node(lab, root / "seed", services=[spec], processes=False, coordinator=True)
    try:
        Lifecycle("macvlan", node).run(0, 2)  # prepare, connect
        store = node.services.stores[spec.name]
        connect, effects = store.read(_completed_connect)
        pods = (
            [lab.sandbox(f"inflight-{i:05d}").namespace for i in range(count)]
            if own_namespaces
            else []
        )
        store.write(lambda t: _copy_in_flight(t, connect, effects, count, pods))
    finally:
        # Not node.close(): that closes the lab too, whose kernel the runs go on using.
        node.services.close()
        node.journal.close()
    return node.services.state_dir(spec.name)


def _completed_connect(r: Reader) -> tuple[OperationRecord, list[EffectRecord]]:
    for op in r.operations(_PARTITION, hook=Hook.CONNECT_NETWORK):
        return op, r.effects(op.partition, op.operation_id)
    raise RuntimeError("the seed lifecycle recorded no ConnectNetwork")


def _copy_in_flight(
    t: Txn,
    connect: OperationRecord,
    effects: Sequence[EffectRecord],
    count: int,
    pods: Sequence[NamespaceHandle] = (),
) -> None:
    scope = t.scope(connect.partition, connect.scope)
    for i in range(count):
        op_id = f"inflight-{i:05d}"
        attachment = f"att-inflight-{i:05d}"
        if scope is not None:
            t.put_scope(replace(scope, scope=attachment))
        op = replace(
            connect,
            operation_id=op_id,
            scope=attachment,
            state=OperationState.RUNNING,
            response_json=None,
            error_json=None,
        )
        if pods:  # the copy's own pod namespace wherever the seed's plan and request name it
            seed = json.loads(connect.request_json)["sandbox"]["namespace"]
            op = replace(
                op,
                request_json=_renamespaced(connect.request_json, seed, pods[i]),
                plan_json=_renamespaced(connect.plan_json, seed, pods[i]),
            )
        copies = [
            replace(
                e,
                operation_id=op_id,
                state=EffectState.APPLYING if e.position == 0 else EffectState.PLANNED,
                before_json=e.before_json if e.position == 0 else None,
                outputs_json=None,
                detail="",
                attempts=1 if e.position == 0 else 0,
            )
            for e in effects
        ]
        t.insert_operation(op, copies)


def _renamespaced(text: str | None, seed: dict[str, Any], pod: NamespaceHandle) -> str | None:
    """``text`` (JSON) with every namespace handle equal to ``seed``'s naming ``pod``."""
    if text is None:
        return None
    keys = {"path": pod.path, "device": pod.device, "inode": pod.inode}

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            if all(value.get(k) == seed.get(k) for k in keys) and "path" in value:
                return {**value, **keys}
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    renamed = json.dumps(walk(json.loads(text)), sort_keys=True, separators=(",", ":"))
    if renamed == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")):
        raise RuntimeError("the seed's namespace handle was not found to rename")
    return renamed


def _check_recovered(state_dir: Path) -> None:
    """Untimed: the start did recover (every copied operation is Failed, none Running)."""
    with Store.open(state_dir) as store:
        ops = store.read(lambda r: r.operations(_PARTITION, hook=Hook.CONNECT_NETWORK))
    running = [op.operation_id for op in ops if op.state is OperationState.RUNNING]
    failed = [op for op in ops if op.state is OperationState.FAILED]
    if running or len(failed) != len(ops) - 1:
        raise RuntimeError(
            f"recovery left {len(running)} operations Running and {len(failed)} of "
            f"{len(ops) - 1} Failed"
        )


# ---------------------------------------------------------------------- the run


def _rotated(items: Sequence[T], i: int) -> list[T]:
    """The rows in the order of iteration ``i``: each one starts a round in turn."""
    k = i % len(items)
    return [*items[k:], *items[:k]]


def measure(
    runs: int = 15,
    in_flight: int = 1000,
    rows: Sequence[str] = ROWS,
    warmup: int = 1,
    *,
    bytecode: bool = True,
    tier: str = "fake",
    trees: Sequence[tuple[str, Path]] = (),
    own_namespaces: bool = False,
) -> StartupMeasurement:
    """Start every row ``runs`` times (after ``warmup`` untimed rounds), interleaved.

    ``trees``: ``(label, checkout)`` pairs to compare in one run (an A/B of two trees):
    every row but the floor runs once per tree, as ``label:row``, the services from
    that checkout (with this run's interpreter and venv). Empty: this tree, rows as named.

    ``own_namespaces``: each in-flight operation of the recovery row names a pod
    namespace of its own (``build_in_flight_journal``), not the seed's.

    ``tier``: the services' kernel, ``fake`` (the model behind its server) or ``netns``
    (this machine's kernel, in a ``labs.NetnsLab``: root; the services then import
    pyroute2, as a deployment does).

    ``bytecode``: run from compiled modules, as an installed service does (``child_env``).
    """
    if bytecode and warmup < 1:
        raise ValueError("bytecode=True needs a warm-up round (it compiles the modules)")
    unknown = sorted(set(rows) - set(ROWS))
    if unknown or not rows:
        raise ValueError(f"rows must be a non-empty subset of {ROWS}, not {list(rows)}")
    load = os.getloadavg()[0]
    base = Path(tempfile.mkdtemp(prefix="bench-st-", dir="/tmp"))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        lab = open_lab(tier)
        stack.callback(lab.close)
        journal = (
            build_in_flight_journal(lab, base, in_flight, own_namespaces=own_namespaces)
            if RECOVERY in rows
            else None
        )
        env = child_env(bytecode, base)
        contenders = []
        for row in rows:
            journal_of = journal if row == RECOVERY else None
            if not trees or row == FLOOR:
                contenders.append(Contender(row, lab, base, env, journal_of))
                continue
            for label, tree in trees:
                contenders.append(
                    Contender(row, lab, base, env, journal_of, tree, label=f"{label}:{row}")
                )
        samples: dict[str, list[float]] = {c.row: [] for c in contenders}
        cpu: dict[str, list[float]] = {c.row: [] for c in contenders}
        for i in range(warmup + runs):
            for c in _rotated(contenders, i):
                seconds = c.sample()
                if i >= warmup:
                    samples[c.row].append(seconds)
                    cpu[c.row].append(c.cpu[-1])
    return StartupMeasurement(
        samples,
        runs,
        in_flight,
        load,
        platform.release(),
        platform.python_version(),
        bytecode,
        tier,
        os.getloadavg()[0],
        cpu,
    )


def report(m: StartupMeasurement) -> None:
    print(
        f"start to ready on Linux {m.kernel} ({os.cpu_count()} CPUs), Python {m.python}: "
        f"{m.runs} runs per row on the {m.tier} lab, interleaved, "
        f"{'from bytecode' if m.bytecode else 'in this environment (no bytecode written)'}; "
        f"load average {m.load_at_start:.2f} at start"
        + (f", {m.load_at_end:.2f} at the end" if m.load_at_end is not None else "")
    )
    width = max(20, *(len(row) + 7 for row in m.samples))
    print(f"{'':{width}} {'median ms':>10} {'p90 ms':>8} {'min ms':>8} {'CPU ms':>8}")
    for row in m.samples:
        median, p90, low = m.summary_ms(row)
        label = f"{row} ({m.in_flight})" if row.endswith(RECOVERY) else row
        cpu = f"{statistics.median(m.cpu[row]) * 1000:8.0f}" if m.cpu.get(row) else f"{'-':>8}"
        print(f"{label:{width}} {median:10.1f} {p90:8.1f} {low:8.1f} {cpu}")
    if FLOOR in m.samples:
        floor = m.median_ms(FLOOR)
        for row in m.samples:
            if row != FLOOR:
                print(f"{row}/floor = {m.median_ms(row) / floor:.2f}  (medians)")
    # The trees in the order given (the first is the reference of each ratio).
    prefixes = list(dict.fromkeys(row.rpartition(":")[0] for row in m.samples if ":" in row))
    for prefix in prefixes or [""]:
        recovery, links = (f"{prefix}:{r}" if prefix else r for r in (RECOVERY, RECOVERING_SERVICE))
        if recovery in m.samples and links in m.samples:
            extra = m.median_ms(recovery) - m.median_ms(links)
            print(f"{recovery} - {links} = {extra:.1f} ms  (medians: the recovery itself)")
    for prefix in prefixes[1:]:
        for row in m.samples:
            label, _, base = row.partition(":")
            reference = f"{prefixes[0]}:{base}"
            if label == prefix and reference in m.samples:
                ratio = m.median_ms(row) / m.median_ms(reference)
                print(f"{row} / {reference} = {ratio:.2f}  (medians)")


# ---------------------------------------------------------------------- profile


def profile(
    service: str,
    top: int = 30,
    *,
    bytecode: bool = True,
    callers: str = "",
    keep: Path | None = None,
    tier: str = "fake",
    in_flight: int = 1000,
    own_namespaces: bool = False,
) -> None:
    """cProfile one start of ``service`` to serving, top by cumulative.

    ``service`` is a service (an empty journal) or ``recovery`` (``networkplugin-links``
    over a fresh copy of the ``in_flight`` journal each start).
    """
    base = Path(tempfile.mkdtemp(prefix="bench-st-", dir="/tmp"))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        lab = open_lab(tier)
        stack.callback(lab.close)
        journal = (
            build_in_flight_journal(lab, base, in_flight, own_namespaces=own_namespaces)
            if service == RECOVERY
            else None
        )
        name = RECOVERING_SERVICE if service == RECOVERY else service
        spec = service_of(service_plugin(name))
        sockets = base / "s"
        svc = ServiceProcess(
            name, spec.command, base / "svc", sockets, _kernel_url(lab), spec.sockets
        )
        out = base / "startup.prof"
        command = [*spec.command, "--config", str(svc.config), "--log-level", "WARNING"]
        env = child_env(bytecode, base)
        for _ in range(2 if bytecode else 1):  # the first compiles
            out.unlink(missing_ok=True)
            if journal is not None:
                shutil.copytree(journal, svc.root / "state", copy_function=shutil.copy2)
            proc = subprocess.Popen(
                [sys.executable, "-c", _PROFILED, str(out), *command], cwd=REPO, env=env
            )
            try:
                proc.wait(READY_TIMEOUT_S)  # it exits as soon as it serves
            finally:
                _stop(proc)
            # A fresh start each time: no journal, no lease naming one.
            shutil.rmtree(svc.root / "state", ignore_errors=True)
            shutil.rmtree(sockets, ignore_errors=True)
        if not out.exists():
            raise RuntimeError(f"{service} did not get to serving; its log: {_tail(svc.log)}")
        stats = pstats.Stats(str(out))
        stats.sort_stats("cumulative").print_stats(top)
        if callers:
            stats.print_callers(callers)
        if keep is not None:
            shutil.copy(out, keep)


# Profiles the service's main until its log says it serves (every socket bound,
# recovery done): the stats are written and the process ends there.
_PROFILED = """
import cProfile, logging, os, runpy, sys
out, module, *argv = sys.argv[1:]
profiler = cProfile.Profile()
class Served(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith("serving "):
            profiler.disable()
            profiler.dump_stats(out)
            os._exit(0)
sys.argv = [module, *argv]
logging.getLogger("plugins.sdk.service").addHandler(Served())
logging.getLogger("plugins.sdk.service").setLevel(logging.INFO)
profiler.enable()
runpy.run_module(module, run_name="__main__")
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--in-flight", type=int, default=1000)
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument("--lab", choices=LABS, default="fake", help="the services' kernel")
    parser.add_argument(
        "--own-namespaces",
        action="store_true",
        help="recovery: each in-flight operation in a pod namespace of its own (else one shared)",
    )
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="compare checkouts in one interleaved run (repeat: --tree before=/tmp/a "
        "--tree after=/tmp/b); each row but the floor runs once per tree as LABEL:row",
    )
    parser.add_argument(
        "--profile",
        choices=(*SERVICES, RECOVERY),
        help="cProfile one start to serving (recovery: links over the --in-flight journal)",
    )
    parser.add_argument("--callers", default="", help="with --profile: who calls this function")
    parser.add_argument("--top", type=int, default=30, help="with --profile: how many rows")
    parser.add_argument("--profile-out", type=Path, help="with --profile: keep the stats here")
    parser.add_argument(
        "--no-bytecode",
        dest="bytecode",
        action="store_false",
        help="run in this environment as it is (here: every module compiled at every exec)",
    )
    args = parser.parse_args(argv)
    if args.profile:
        profile(
            args.profile,
            args.top,
            bytecode=args.bytecode,
            callers=args.callers,
            keep=args.profile_out,
            tier=args.lab,
            in_flight=args.in_flight,
            own_namespaces=args.own_namespaces,
        )
        return 0
    if args.runs < 2:
        parser.error("--runs must be at least 2 (a p90 needs two samples)")
    trees = []
    for spec in args.tree:
        label, sep, tree = spec.partition("=")
        if not sep or not label or ":" in label or not (Path(tree) / "plugins").is_dir():
            parser.error(f"--tree {spec!r}: LABEL=DIR, DIR a checkout of this repository")
        trees.append((label, Path(tree).resolve()))
    m = measure(
        args.runs,
        args.in_flight,
        args.rows,
        args.warmup,
        bytecode=args.bytecode,
        tier=args.lab,
        trees=trees,
        own_namespaces=args.own_namespaces,
    )
    report(m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
