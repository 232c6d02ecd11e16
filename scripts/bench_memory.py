"""Benchmark: the memory of each process idle after ready, and after 10,000 operations.

Every process is started as ``scripts/bench_startup.py`` starts its rows (its helpers,
imported: ``open_lab``, ``child_env``, ``wait_ready``, the floor's program): a service is
``python -m plugins.services NAME --config FILE`` with a fresh state dir, config and
token, against the fake kernel behind its server (``labs.FakeServerLab``, ``fake://``),
from bytecode (a warm-up round compiles it). Rows, all started in one round:

* ``networkplugin-vf``, ``networkplugin-bond``, ``networkplugin-links``: ``--ops``
  authenticated GetInfo calls over the real Unix socket (one channel, as a client that
  keeps it);
* ``networkplugin-links (hooks)``: another ``networkplugin-links``, driven by real hook
  traffic: ``networkplugin-coordinator`` (configured as the tests' ``CoordinatorRig``
  does, ``labs.CoordinatorProcess``, over this links service's sockets, with the
  ``sdk-macvlan`` topology; started as ``python -m plugins.coordinator --config FILE``)
  applies and removes one macvlan attachment over its socket, fresh attachment and claim
  ids each cycle; a cycle is NodePrepare, ConnectNetwork, RemoveNetwork and NodeUnprepare
  on the service; read after ``--ops`` hooks (``--ops / 4`` cycles);
* ``networkplugin-coordinator``: that coordinator, read after as many cycles again
  (two calls each, ApplyTopology and RemoveTopology: ``--ops`` calls in all);
* ``floor``: P5's bare gRPC server (``python -c 'import grpc ...'``, a Unix socket, the
  same authenticated GetInfo answered with precomputed bytes), ``--ops`` GetInfo calls.

Each process is read from ``/proc/PID/status`` (VmRSS, RssAnon, RssFile, Threads) once
``--settle`` seconds after every one is ready (idle), and again ``--settle`` seconds
after its own operations (after; the rows' operations run one row at a time). Growth is
after / idle - 1 of VmRSS. Prints the medians over ``--runs`` rounds (each a fresh set of
processes), each row's ratio to the floor of the same rounds, and the goals beside the
figures (idle RSS <= 40 MB per process, growth <= 5 % after 10,000 operations):
printed, never asserted. MB here is 10^6 bytes.
``--mappings`` also prints, for one idle process of each row, ``/proc/PID/smaps_rollup``
and its largest mappings by RSS (what holds the memory). ``measure()`` returns the
figures as data (``MemoryMeasurement``) for ``scripts/bench``.

    uv run --locked --group bench python scripts/bench_memory.py [--runs 3] [--ops 10000]
    uv run --locked --group bench python scripts/bench_memory.py --quick --mappings
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc
from bench_startup import (
    _FLOOR_PROGRAM,
    LABS,
    READY_TIMEOUT_S,
    REPO,
    SERVICES,
    _kernel_url,
    _service_name,
    _stop,
    _tail,
    child_env,
    open_lab,
    service_plugin,
    wait_ready,
)

from labs import CoordinatorProcess, Lab, ProcessServices, ServiceProcess, service_of
from plugins.api.networkplugin.v1alpha1 import pb, pb_grpc

FLOOR = "floor"
LINKS = "networkplugin-links"
HOOKS = f"{LINKS} (hooks)"
COORDINATOR = "networkplugin-coordinator"
ROWS = (*SERVICES, HOOKS, COORDINATOR, FLOOR)
TOPOLOGY_DIR = REPO / "topologies"
TOPOLOGY = "sdk-macvlan"  # topologies/macvlan.yaml: one macvlan child, four hooks a cycle
HOOKS_PER_CYCLE = 4
CALLS_PER_CYCLE = 2  # ApplyTopology, RemoveTopology
IDLE_RSS_GOAL_MB = 40.0
GROWTH_GOAL_PCT = 5.0
STATUS_FIELDS = ("VmRSS", "RssAnon", "RssFile", "Threads")


@dataclass(frozen=True)
class Memory:
    """One process's ``/proc/PID/status`` figures: sizes in kB (KiB), as the kernel writes."""

    rss_kb: int
    anon_kb: int
    file_kb: int
    threads: int

    @staticmethod
    def of(pid: int) -> Memory:
        values: dict[str, int] = {}
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in STATUS_FIELDS:
                values[key] = int(value.split()[0])
        return Memory(values["VmRSS"], values["RssAnon"], values["RssFile"], values["Threads"])


def mb(kb: float) -> float:
    """KiB (``/proc``'s kB) to MB (10^6 bytes)."""
    return kb * 1024 / 1e6


@dataclass
class MemoryMeasurement:
    """One run's figures, as data: ``idle[row]`` and ``after[row]`` hold one ``Memory``
    per round, in round order; ``ops[row]`` is what that row's after follows."""

    idle: dict[str, list[Memory]]
    after: dict[str, list[Memory]]
    ops: dict[str, str]
    runs: int
    settle_s: float
    load_at_start: str
    kernel: str
    python: str
    load_at_end: str = ""
    seconds: dict[str, list[float]] = field(default_factory=dict)  # the operations' wall time
    mappings: dict[str, str] = field(default_factory=dict)  # row -> text (--mappings)
    lab: str = "fake"  # bench_startup.LABS: the fake kernel's server, or this machine's

    def median(self, row: str, when: str, what: str) -> float:
        """Median over the rounds of ``what`` (a ``Memory`` field) ``idle`` or ``after``."""
        memories = self.idle[row] if when == "idle" else self.after[row]
        return statistics.median(float(getattr(m, what)) for m in memories)

    def growth_pct(self, row: str) -> list[float]:
        """VmRSS after / idle - 1, in percent, one per round."""
        return [
            (a.rss_kb / i.rss_kb - 1) * 100
            for i, a in zip(self.idle[row], self.after[row], strict=True)
        ]


# ---------------------------------------------------------------------- the processes


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class GetInfoLoad:
    """``count`` authenticated GetInfo calls over one channel to a Unix socket."""

    def __init__(self, path: Path, token: str) -> None:
        self.path = path
        self.metadata = (("authorization", f"Bearer {token}"),)

    def __call__(self, count: int) -> None:
        with grpc.insecure_channel(f"unix://{self.path}") as channel:
            stub = pb_grpc.NetworkPluginStub(channel)
            request = pb.GetInfoRequest()
            for _ in range(count):
                if not stub.GetInfo(request, metadata=self.metadata, timeout=30).ready:
                    raise RuntimeError(f"{self.path}: GetInfo answered ready=false")


@dataclass
class Started:
    """A row's running process and what drives its operations."""

    row: str
    proc: subprocess.Popen[bytes]
    load: Callable[[int], None] | None  # None: driven by another row's load (the coordinator)
    log: Path | None = None


def start_service(
    name: str, lab: Lab, root: Path, env: dict[str, str], row: str = ""
) -> tuple[Started, ServiceProcess]:
    """``python -m plugins.services NAME --config FILE``, as bench_startup's rows; ready."""
    spec = service_of(service_plugin(name))
    sockets = root / "s"  # short: Unix socket paths are at most 107 bytes
    service = ServiceProcess(name, spec.command, root, sockets, _kernel_url(lab), spec.sockets)
    started = _launch_service(service, env, row or name)
    first = spec.sockets[0]
    started.load = GetInfoLoad(sockets / first, service.token)
    return started, service


def _start_module(
    command: Sequence[str], config: Path, log_path: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """``python -m COMMAND --config CONFIG`` from the repository, its output to the log."""
    argv = [sys.executable, "-m", *command, "--config", str(config), "--log-level", "WARNING"]
    with log_path.open("ab") as log:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


def _launch_service(service: ServiceProcess, env: dict[str, str], row: str) -> Started:
    proc = _start_module(service.command, service.config, service.log, env)
    service.proc = proc
    paths = [service.socket_dir / s for s in service.sockets]
    try:
        wait_ready(proc, paths, service.token, time.monotonic() + READY_TIMEOUT_S)
    except RuntimeError as exc:
        _stop(proc)
        raise RuntimeError(f"{row}: {exc}; its log: {_tail(service.log)}") from None
    return Started(row, proc, None, service.log)


def start_floor(root: Path, env: dict[str, str]) -> Started:
    """bench_startup's floor: a bare gRPC server answering the same GetInfo; ready."""
    sockets = root / "s"
    sockets.mkdir(parents=True, mode=0o700)
    token = os.urandom(16).hex()
    reply = pb.GetInfoResponse(plugin_name="floor", ready=True).SerializeToString()
    path = sockets / "floor.sock"
    argv = [sys.executable, "-c", _FLOOR_PROGRAM, str(path), token, reply.hex()]
    proc = subprocess.Popen([*argv, _service_name()], env=env, stderr=subprocess.DEVNULL)
    try:
        wait_ready(proc, [path], token, time.monotonic() + READY_TIMEOUT_S)
    except RuntimeError:
        _stop(proc)
        raise
    return Started(FLOOR, proc, GetInfoLoad(path, token))


class CoordinatorCycles:
    """``ApplyTopology`` + ``RemoveTopology`` of the macvlan topology through the coordinator,
    fresh attachment and claim ids each cycle: four hooks on the links service behind it."""

    def __init__(self, program: CoordinatorProcess, lab: Lab) -> None:
        self.program = program
        self.sandbox = lab.sandbox()
        self.done = 0

    def __call__(self, hooks: int) -> None:
        with self.program.coordinator_client(timeout=60) as client:
            for _ in range(max(1, hooks // HOOKS_PER_CYCLE)):
                n = self.done
                applied = client.apply(f"att-{n}", f"claim-{n}", TOPOLOGY, self.sandbox)
                if applied.state != "applied":
                    raise RuntimeError(f"att-{n} was not applied: {applied}")
                removed = client.remove(f"att-{n}")
                if removed.state != "removed":
                    raise RuntimeError(f"att-{n} was not removed: {removed}")
                self.done += 1


def start_hook_pair(lab: Lab, root: Path, env: dict[str, str]) -> list[Started]:
    """A links service and the coordinator program over it (as the tests' ``CoordinatorRig``
    configures it: ``labs.CoordinatorProcess``), each started from its command line."""
    spec = service_of("macvlan")
    services = ProcessServices(lab, root, [spec], root / "s")
    links = services.processes[spec.name]
    started = _launch_service(links, env, HOOKS)
    program = CoordinatorProcess(
        root / "c",
        services,
        topologies=[TOPOLOGY_DIR / "macvlan.yaml"],
        inventory=TOPOLOGY_DIR / "inventory.yaml",
        policies=TOPOLOGY_DIR / "policies.yaml",
    )
    try:
        proc = _start_module(program.command, program.config, program.log, env)
        program.proc = proc
        try:
            with program.coordinator_client() as client:
                client.wait_ready(READY_TIMEOUT_S)
        except Exception as exc:
            _stop(proc)
            raise RuntimeError(f"{COORDINATOR}: {exc}; its log: {_tail(program.log)}") from None
    except BaseException:
        _stop(started.proc)
        raise
    started.load = CoordinatorCycles(program, lab)
    return [started, Started(COORDINATOR, proc, None, program.log)]


def start_round(rows: Sequence[str], lab: Lab, root: Path, env: dict[str, str]) -> list[Started]:
    """Every row's process, started one after another, each ready before the next."""
    started: list[Started] = []
    try:
        for row in rows:
            if row == FLOOR:
                started.append(start_floor(root / "floor", env))
            elif row in SERVICES:
                started.append(
                    start_service(row, lab, root / row.removeprefix("networkplugin-"), env)[0]
                )
            elif row == HOOKS:
                started += start_hook_pair(lab, root / "hooks", env)
    except BaseException:
        stop_all(started)
        raise
    return started


def stop_all(started: Sequence[Started]) -> None:
    for s in reversed(started):  # the coordinator before the service it drives
        _stop(s.proc)


# ---------------------------------------------------------------------- what holds it


def mappings(pid: int, top: int = 12) -> str:
    """``/proc/PID/smaps_rollup``'s sizes and the largest mappings by RSS, by file."""
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
    keep = ("Rss", "Pss", "Pss_Anon", "Pss_File", "Shared_Clean", "Private_Dirty", "Anonymous")
    lines = [" ".join(line.split()) for line in rollup if line.split(":")[0] in keep]
    by_name: dict[str, int] = {}
    name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        parts = line.split()
        if "-" in parts[0] and not parts[0].endswith(":"):  # a mapping's header line
            name = parts[5] if len(parts) > 5 else "[anon]"
            name = name.rsplit("/", 1)[-1] if "/" in name else name
        elif parts[0] == "Rss:":
            by_name[name] = by_name.get(name, 0) + int(parts[1])
    biggest = sorted(by_name.items(), key=lambda kv: -kv[1])[:top]
    lines.append("largest by RSS: " + ", ".join(f"{n} {kb} kB" for n, kb in biggest))
    return "\n    ".join(lines)


# ---------------------------------------------------------------------- the run


def _rotated(items: Sequence[Started], i: int) -> list[Started]:
    k = i % len(items)
    return [*items[k:], *items[:k]]


def _settled(
    started: Sequence[Started], row: str, pause: threading.Event, settle_s: float
) -> Memory:
    """``row``'s memory ``settle_s`` after its operations (every process still running)."""
    pause.wait(settle_s)
    for s in started:
        if s.proc.poll() is not None:
            raise RuntimeError(f"{s.row} exited with {s.proc.returncode}; its log: {s.log}")
    return next(Memory.of(s.proc.pid) for s in started if s.row == row)


def measure(
    runs: int = 3,
    ops: int = 10_000,
    rows: Sequence[str] = ROWS,
    *,
    settle_s: float = 2.0,
    show_mappings: bool = False,
    lab: str = "fake",
) -> MemoryMeasurement:
    """``runs`` rounds, each every row's process fresh: idle, ``ops`` operations, after.

    A warm-up round (every process started once and stopped) compiles the bytecode the
    measured rounds run from. ``rows``: a subset of ``ROWS`` (the coordinator's row comes
    with the hooks row: it is what drives it).
    """
    rows = [r for r in ROWS if r in rows]
    if HOOKS in rows and COORDINATOR not in rows:
        rows.append(COORDINATOR)
    if COORDINATOR in rows and HOOKS not in rows:
        rows.insert(rows.index(COORDINATOR), HOOKS)
    load = loadavg()
    base = Path(tempfile.mkdtemp(prefix="bench-mem-", dir="/tmp"))
    ops_of = dict.fromkeys(rows, f"{ops} GetInfo")
    cycles = max(1, ops // HOOKS_PER_CYCLE)
    ops_of[HOOKS] = f"{cycles * HOOKS_PER_CYCLE} hooks ({cycles} apply+remove cycles)"
    ops_of[COORDINATOR] = f"{2 * cycles * CALLS_PER_CYCLE} calls ({2 * cycles} apply+remove cycles)"
    idle: dict[str, list[Memory]] = {r: [] for r in rows}
    after: dict[str, list[Memory]] = {r: [] for r in rows}
    seconds: dict[str, list[float]] = {r: [] for r in rows}
    shown: dict[str, str] = {}
    pause = threading.Event()  # never set: its wait() is the settle time
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        kernel_lab = open_lab(lab)
        stack.callback(kernel_lab.close)
        env = child_env(True, base)
        stop_all(start_round(rows, kernel_lab, base / "warmup", env))  # compiles the bytecode
        for i in range(runs):
            started = start_round(rows, kernel_lab, base / f"r{i}", env)
            try:
                pause.wait(settle_s)
                for s in started:
                    idle[s.row].append(Memory.of(s.proc.pid))
                    if show_mappings and i == 0:
                        shown[s.row] = mappings(s.proc.pid)
                for s in _rotated([s for s in started if s.load is not None], i):
                    assert s.load is not None
                    t0 = time.perf_counter()
                    s.load(ops)
                    seconds[s.row].append(time.perf_counter() - t0)
                    after[s.row].append(_settled(started, s.row, pause, settle_s))
                    if s.row == HOOKS:  # as many cycles again: the coordinator's ``ops`` calls
                        s.load(ops)
                        seconds[COORDINATOR].append(time.perf_counter() - t0)
                        after[COORDINATOR].append(_settled(started, COORDINATOR, pause, settle_s))
            finally:
                stop_all(started)
    return MemoryMeasurement(
        idle,
        after,
        ops_of,
        runs,
        settle_s,
        load,
        platform.release(),
        platform.python_version(),
        loadavg(),
        {r: s for r, s in seconds.items() if r in rows},
        shown,
        lab,
    )


def report(m: MemoryMeasurement) -> None:
    print(
        f"memory on Linux {m.kernel} ({os.cpu_count()} CPUs), Python {m.python}: medians of "
        f"{m.runs} rounds, each a fresh process per row on the {m.lab} lab, from bytecode; idle = "
        f"{m.settle_s:g} s after ready, after = {m.settle_s:g} s after its operations; "
        f"MB = 10^6 bytes; load average {m.load_at_start} at start, {m.load_at_end} at the end"
    )
    rows = list(m.idle)
    width = max(len(r) for r in rows) + 1
    print(
        f"{'':{width}} {'idle RSS':>8} {'anon':>6} {'file':>6} {'thr':>4} | "
        f"{'after RSS':>9} {'anon':>6} {'file':>6} {'thr':>4} | {'growth':>7} | "
        f"{'idle/floor':>10} {'after/floor':>11} | operations"
    )
    floor = FLOOR in m.idle
    for row in rows:
        idle = [mb(m.median(row, "idle", f)) for f in ("rss_kb", "anon_kb", "file_kb")]
        after = [mb(m.median(row, "after", f)) for f in ("rss_kb", "anon_kb", "file_kb")]
        growth = statistics.median(m.growth_pct(row))
        ratios = "" if not floor else (
            f"{m.median(row, 'idle', 'rss_kb') / m.median(FLOOR, 'idle', 'rss_kb'):10.2f} "
            f"{m.median(row, 'after', 'rss_kb') / m.median(FLOOR, 'after', 'rss_kb'):11.2f}"
        )  # fmt: skip
        took = f", {statistics.median(m.seconds[row]):.1f} s" if m.seconds.get(row) else ""
        print(
            f"{row:{width}} {idle[0]:8.1f} {idle[1]:6.1f} {idle[2]:6.1f} "
            f"{m.median(row, 'idle', 'threads'):4.0f} | {after[0]:9.1f} {after[1]:6.1f} "
            f"{after[2]:6.1f} {m.median(row, 'after', 'threads'):4.0f} | {growth:+6.1f}% | "
            f"{ratios or '-':>22} | {m.ops[row]}{took}"
        )
    print(
        f"goals (printed, not asserted): idle RSS <= {IDLE_RSS_GOAL_MB:g} MB per process; "
        f"growth <= {GROWTH_GOAL_PCT:g} % after 10,000 operations"
    )
    for row in rows:
        if row == FLOOR:
            continue
        rss = mb(m.median(row, "idle", "rss_kb"))
        growth = statistics.median(m.growth_pct(row))
        print(
            f"  {row}: idle {rss:.1f} MB ({'met' if rss <= IDLE_RSS_GOAL_MB else 'NOT met'}), "
            f"growth {growth:+.1f} % ({'met' if growth <= GROWTH_GOAL_PCT else 'NOT met'})"
        )
    for row, text in m.mappings.items():
        print(f"{row}, idle (round 1):\n    {text}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds, each fresh processes")
    parser.add_argument("--ops", type=int, default=10_000, help="operations per process")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds before each reading")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument(
        "--quick", action="store_true", help="a trial: 1 round, 1,000 operations, 1 s settle"
    )
    parser.add_argument(
        "--mappings", action="store_true", help="print what holds each idle process's memory"
    )
    parser.add_argument(
        "--lab",
        choices=LABS,
        default="fake",
        help="fake: the kernel model's server (kernel+unix://, an entry point: the services "
        "import importlib.metadata to find it); netns: this machine's kernel (linux://, as "
        "a node runs them; root)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.ops, args.settle = 1, 1000, 1.0
    if args.runs < 1 or args.ops < HOOKS_PER_CYCLE:
        parser.error(f"--runs must be at least 1 and --ops at least {HOOKS_PER_CYCLE}")
    m = measure(
        args.runs,
        args.ops,
        args.rows,
        settle_s=args.settle,
        show_mappings=args.mappings,
        lab=args.lab,
    )
    report(m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
