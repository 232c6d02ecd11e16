"""Benchmark: what a hook costs in fsyncs and time, against a raw fdatasync floor.

Runs the toy plugin through the real gRPC host over a Unix socket (in-memory
resource, so only the journal touches the disk), at 1 and 16 concurrent clients,
and measures a raw write+fdatasync loop on the same file system in the same run.
Prints medians over repetitions. Not a test: nothing here asserts a timing.

    uv run python scripts/bench_runner.py [--hooks 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plugins.sdk.host import Host, PluginClient
from plugins.sdk.runner import Runner
from plugins.sdk.store import Store
from tests.runner import node as n
from tests.runner.toy import ToyKernel, toy_effects, toy_registry


def memory_toy() -> ToyKernel:
    """The toy resource in memory (no file, so no fsyncs of its own): only the journal's
    durability is measured. ``ToyKernel(None)``'s own mode: a subclass that replaced the
    toy's file I/O broke when the toy learned to keep its state in memory (P3 failed
    with ``/nonexistent``)."""
    return ToyKernel(None)


def fdatasync_floor(directory: Path, count: int) -> float:
    """Raw 4 KiB append + fdatasync per iteration: the file system's durable-write rate."""
    path = directory / "floor.bin"
    block = os.urandom(4096)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        start = time.perf_counter()
        for _ in range(count):
            os.write(fd, block)
            os.fdatasync(fd)
        return count / (time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()


def run_hooks(directory: Path, hooks: int, clients: int) -> tuple[float, float, dict[str, float]]:
    """Connect+remove pairs spread over ``clients`` threads; returns (hooks/s, fsyncs/hook,
    fsyncs per hook kind). The split by kind is exact at one client only: with more,
    group commit shares one fsync between hooks of both kinds, so it is left empty."""
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
    pairs = hooks // 2
    per_client = [range(c, pairs, clients) for c in range(clients)]
    errors: list[BaseException] = []
    by_kind: dict[str, int] = {"ConnectNetwork": 0, "RemoveNetwork": 0}

    def counted(kind: str, call: Any, request: Any) -> None:
        before = store.commits
        call(request)
        by_kind[kind] += store.commits - before

    def work(indexes: range) -> None:
        try:
            with PluginClient(socket, "bench-token") as client:
                for i in indexes:
                    scope, name = f"att-{i}", f"n{i}"
                    root = dataclasses.replace(
                        n.ALLOCATION, root_id=f"root-{i}"
                    )  # one pod per root
                    connect = n.connect(op=f"c-{i}", scope=scope, name=name, allocation=root)
                    counted("ConnectNetwork", client.connect_network, connect)
                    remove = n.remove(op=f"r-{i}", scope=scope)
                    counted("RemoveNetwork", client.remove_network, remove)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(idx,)) for idx in per_client]
    commits = store.commits
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    fsyncs = store.commits - commits
    host.stop(5)
    store.close()
    if errors:
        raise errors[0]
    kinds = {k: v / pairs for k, v in by_kind.items()} if clients == 1 else {}
    return 2 * pairs / elapsed, fsyncs / (2 * pairs), kinds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--hooks", type=int, default=200, help="hooks per measurement (connect+remove pairs x2)"
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--dir", type=Path, default=None, help="file system to measure (default: a temp dir)"
    )
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-", dir=args.dir))
    floors: list[float] = []
    results: dict[int, tuple[list[float], list[float]]] = {1: ([], []), 16: ([], [])}
    kinds: dict[str, list[float]] = {}
    try:
        for r in range(args.repeat):
            floors.append(fdatasync_floor(base, args.hooks))
            for clients in (1, 16):
                rate, fsyncs, by_kind = run_hooks(base / f"run-{r}-{clients}", args.hooks, clients)
                results[clients][0].append(rate)
                results[clients][1].append(fsyncs)
                for kind, per_hook in by_kind.items():
                    kinds.setdefault(kind, []).append(per_hook)
    finally:
        shutil.rmtree(base, ignore_errors=True)  # its journals: nothing of a run is kept
    floor = statistics.median(floors)
    print(f"file system: {base} ({args.repeat} repetitions, medians)")
    print(f"fdatasync floor: {floor:,.0f} durable writes/s")
    for clients, (rates, fsyncs) in results.items():
        rate, per_hook = statistics.median(rates), statistics.median(fsyncs)
        bound = floor / per_hook
        print(
            f"{clients:>2} client(s): {rate:,.0f} hooks/s, {per_hook:.2f} fsyncs/hook; "
            f"floor-bound {bound:,.0f} hooks/s; ours/floor-bound = {rate / bound:.2f}; "
            f"hook rate / fdatasync rate = {rate / floor:.2f}"
        )
    # The journal's budget (docs/runner.md, "The record sequence"): the toy's connect has
    # five effects, so effects + 1 = 6 per ConnectNetwork.
    split = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in kinds.items())
    print(f" 1 client: fsyncs per hook by kind: {split}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
