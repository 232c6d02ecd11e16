"""P3 for scripts/bench: fsyncs and latency per hook against the number of clients.

The toy plugin (five effects per ConnectNetwork, its resource in memory so only the
journal touches the disk) behind the real gRPC host on a Unix socket, as
``scripts/bench_runner.py`` runs it, at 1, 2, 4, 8 and 16 concurrent clients. Each
repetition measures the raw 4 KiB write+fdatasync floor of the same file system first,
then every client count, so the floor and the hooks alternate (ABAB). Per hook it keeps
the latency (each call timed on its client thread) and counts the journal's commits,
which are its fsyncs (``Store.commits``: one WAL fsync per COMMIT under
``synchronous=FULL``). Not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_runner import memory_toy

from plugins.sdk.host import Host, PluginClient
from plugins.sdk.runner import Runner
from plugins.sdk.store import Store
from tests.runner import node as toy
from tests.runner.toy import toy_effects, toy_registry

CLIENTS = (1, 2, 4, 8, 16)
TOY_EFFECTS = 5  # the toy's ConnectNetwork plan: effects + 1 commits is the budget


@dataclass(frozen=True)
class ClientRun:
    """One run at ``clients``: every hook's latency (s) and the commits it took."""

    clients: int
    latencies: list[float]
    fsyncs: int
    hooks: int
    connect_fsyncs: float | None  # per ConnectNetwork, exact at one client only
    remove_fsyncs: float | None


@dataclass(frozen=True)
class JournalMeasurement:
    runs: list[ClientRun] = field(default_factory=list)
    floor_latencies: list[float] = field(default_factory=list)  # one fdatasync each, s

    def at(self, clients: int) -> list[ClientRun]:
        return [r for r in self.runs if r.clients == clients]


def floor_samples(directory: Path, count: int) -> list[float]:
    """``count`` 4 KiB append+fdatasync latencies on one file, each timed by itself."""
    path = directory / "floor.bin"
    block = os.urandom(4096)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    samples = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            samples.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()
    return samples


def run_clients(directory: Path, hooks: int, clients: int) -> ClientRun:
    store = Store.open(directory / "state")
    runner = Runner(
        store,
        toy_registry().seal(),
        toy_effects(memory_toy()),
        artifact_digest="bench",
        boot_id="b",
    )
    runner.recover()
    host = Host(directory / "sock", "bench-token", max_workers=max(8, clients))
    host.start(runner.endpoints())
    socket = host.socket_paths["toy.sock"]
    pairs = max(hooks // 2, clients)
    errors: list[BaseException] = []
    latencies: list[float] = []
    by_kind = {"connect": 0, "remove": 0}
    lock = threading.Lock()
    gate = threading.Barrier(clients)

    def timed(kind: str, call: Any, request: Any) -> None:
        before = store.commits
        start = time.perf_counter()
        call(request)
        took = time.perf_counter() - start
        with lock:
            latencies.append(took)
            by_kind[kind] += store.commits - before

    def work(indexes: range) -> None:
        try:
            with PluginClient(socket, "bench-token") as client:
                gate.wait()
                for i in indexes:
                    root = dataclasses.replace(toy.ALLOCATION, root_id=f"root-{i}")
                    request = toy.connect(
                        op=f"c-{i}", scope=f"att-{i}", name=f"n{i}", allocation=root
                    )
                    timed("connect", client.connect_network, request)
                    timed(
                        "remove", client.remove_network, toy.remove(op=f"r-{i}", scope=f"att-{i}")
                    )
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=work, args=(range(c, pairs, clients),)) for c in range(clients)
    ]
    commits = store.commits
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fsyncs = store.commits - commits
    host.stop(5)
    store.close()
    if errors:
        raise errors[0]
    one = clients == 1
    return ClientRun(
        clients,
        latencies,
        fsyncs,
        2 * pairs,
        by_kind["connect"] / pairs if one else None,
        by_kind["remove"] / pairs if one else None,
    )


def measure(
    hooks: int = 200, repeat: int = 3, clients: Sequence[int] = CLIENTS
) -> JournalMeasurement:
    base = Path(tempfile.mkdtemp(prefix="bench-journal-"))
    result = JournalMeasurement()
    # Concurrent pairs all set the toy's one shared setting, so a removal often finds it
    # changed by another pair and quarantines that effect (bench_runner.py's runs do the
    # same): one warning line per removal, which would bury the run's output.
    runner_log = logging.getLogger("plugins.sdk.runner")
    level = runner_log.level
    runner_log.setLevel(logging.ERROR)
    try:
        for r in range(repeat):
            result.floor_latencies.extend(floor_samples(base, hooks // 2))
            for c in clients:
                result.runs.append(run_clients(base / f"run-{r}-{c}", hooks, c))
    finally:
        runner_log.setLevel(level)
        shutil.rmtree(base, ignore_errors=True)
    return result


def fsyncs_per_hook(m: JournalMeasurement, clients: int) -> float:
    return statistics.median(r.fsyncs / r.hooks for r in m.at(clients))
