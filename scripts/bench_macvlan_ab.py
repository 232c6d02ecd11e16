"""A/B of ``networkplugin-links`` services in one ``bench_macvlan`` lab: trees and log levels.

Each variant is ``NAME=TREE:LEVEL``: a service started from the source tree ``TREE`` (a
``git archive`` of a commit, or the working tree) at ``--log-level LEVEL``, with its own
state, socket and macvlan share on ``benchparent``. The variants, the CNI plugin and
the pyroute2 floor rotate every iteration like ``bench_macvlan``'s rows, so the load of
a shared machine hits all alike; run the same tree twice (an A/A) to see how far two
identical services drift apart in one run. Also prints each service's CPU time per
ConnectNetwork+RemoveNetwork (user + system from ``/proc/<pid>/stat``), which the
machine's load disturbs less than wall time. Not a test: nothing here asserts a timing.

    git archive 7f3eef8 | (mkdir -p /tmp/before && tar -x -C /tmp/before)
    sudo uv run python scripts/bench_macvlan_ab.py --iterations 60 \\
        before=/tmp/before:INFO after=.:INFO before2=/tmp/before:INFO after2=.:INFO
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_macvlan as bm
from _bench_node import start_service

from labs import ServiceProcess

READY_TIMEOUT_S = 60.0


def restart_from(service: ServiceProcess, tree: Path, level: str) -> None:
    """Stop the lab's service and start the same command from ``tree`` at ``level``."""
    service.stop(timeout=10)
    with service.log.open("ab") as log:
        command = [*service.command, "--config", str(service.config), "--log-level", level]
        service.proc = subprocess.Popen(
            [sys.executable, "-m", *command],
            cwd=tree,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    for name in service.sockets:
        with service.client(name) as client:
            client.wait_ready(READY_TIMEOUT_S)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("variants", nargs="+", metavar="NAME=TREE:LEVEL")
    args = parser.parse_args()
    variants = []
    for spec in args.variants:
        name, _, rest = spec.partition("=")
        tree, _, level = rest.rpartition(":")
        if not name or not tree or level.upper() not in bm.LOG_LEVELS:
            parser.error(f"{spec!r} is not NAME=TREE:LEVEL")
        variants.append((name, Path(tree).resolve(), level.upper()))
    problem = bm.preflight()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="bench-ab-", dir="/tmp"))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        scene = bm.build_scene(stack)
        rows: list[bm.Contender] = []
        pids: dict[str, int] = {}
        for name, tree, level in variants:
            service = start_service(stack, scene.lab, base / name, "macvlan")
            restart_from(service, tree, level)
            assert service.proc is not None
            client = stack.enter_context(service.client("macvlan.sock"))
            ours = bm.Ours(scene, client)
            ours.name = name
            stack.callback(ours.release)
            ours.prepare()
            rows.append(ours)
            pids[name] = service.proc.pid
            print(f"{name}: pid {service.proc.pid}, {tree}, {level}", file=sys.stderr)
        rows += [bm.CNI(scene), bm.Floor(scene)]
        for c in rows:
            bm.check(scene, c, f"check-{c.name}")
        for w in range(args.warmup):
            for c in rows:
                c.run(f"{c.name}-w{w}")
        samples: dict[str, list[float]] = {c.name: [] for c in rows}
        load0 = Path("/proc/loadavg").read_text().strip()
        cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
        for i in range(args.iterations):
            shift = i % len(rows)
            for c in rows[shift:] + rows[:shift]:
                samples[c.name].append(c.run(f"{c.name}-{i}") * 1000)
        cpu1 = {n: cpu_seconds(p) for n, p in pids.items()}
        load1 = Path("/proc/loadavg").read_text().strip()
        for c in rows:
            bm.check(scene, c, f"final-{c.name}")
    when = time.strftime("%H:%M", time.gmtime())
    print(f"{args.iterations} iterations, {when} UTC; load at start {load0}, at end {load1}")
    cpu = {n: (cpu1[n] - cpu0[n]) * 1000 / args.iterations for n in pids}
    report(samples, cpu, [name for name, _, _ in variants])
    return 0


def report(samples: dict[str, list[float]], cpu: dict[str, float], names: list[str]) -> None:
    med = {k: statistics.median(v) for k, v in samples.items()}
    for k, v in samples.items():
        used = f"  service CPU {cpu[k]:6.2f} ms/pair" if k in cpu else ""
        print(
            f"{k:10} median {med[k]:7.2f}  p90 {statistics.quantiles(v, n=10)[-1]:7.2f}  "
            f"min {min(v):7.2f}  /CNI {med[k] / med['CNI']:.2f}  "
            f"-floor {med[k] - med['floor']:6.2f}{used}"
        )
    first = names[0]
    for name in names[1:]:
        ratios = [b / a for a, b in zip(samples[first], samples[name], strict=True)]
        print(
            f"{name}/{first}: medians {med[name] / med[first]:.3f}, per-iteration ratios' "
            f"median {statistics.median(ratios):.3f}, min/min "
            f"{min(samples[name]) / min(samples[first]):.3f}"
        )


if __name__ == "__main__":
    sys.exit(main())
