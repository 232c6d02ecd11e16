"""scripts/bench's measuring half: every benchmark in one run, its outcomes into one JSON file.

Each benchmark interleaves ours and its peer per iteration (see its own module) and
returns data; this module turns that data into ``Outcome``s (table rows against the
goals of issue 13, samples and curves for the plots) and writes them, with the machine
and the load before and after, to ``reports/bench/results.json``. ``_bench_render.py``
draws from that file. A benchmark that cannot run here is skipped with one line saying
what is missing. Nothing here asserts a timing: a goal's verdict is data.

    uv run --locked --group bench python scripts/_bench_run.py [--skip P4,P6] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _bench_common import (
    REPO,
    Curve,
    Outcome,
    Row,
    git_head,
    loadavg,
    machine,
    ms,
    outcome_to_json,
    ratio,
    skipped,
    stat,
    write_json,
)

if TYPE_CHECKING:
    from _bench_journal import JournalMeasurement

TITLES = {
    "P1": "macvlan attach+detach vs CNI ADD+DEL (real kernel, netns)",
    "P2": "burst: 64 sandboxes attached then detached concurrently vs 64 CNI ADD/DEL execs",
    "P3": "fsyncs per hook, 1 and 16 clients, 5-effect plan (toy plugin, real gRPC host)",
    "P4": "fake tier (the rig on fake://), same crash coverage",
    "P5": "start to ready (fake kernel); recovery of 1,000 in-flight operations",
    "P6": "VF move into a sandbox + restore, VM lab's emulated igb, vs a pyroute2 floor",
    "P7": "pod network ready through NRI (RunPodSandbox to its answer, connected): macvlan "
    "on a NetnsLab vs CNI ADD and a pyroute2 floor; one VF on the VM lab's guest vs P6's floor",
    "P8": "memory: RSS and threads of each process idle after ready and after 10,000 "
    "operations (on linux:// as a node runs them, as root; else the fake kernel), vs P5's "
    "bare gRPC server",
}
GOALS = tuple(TITLES)
GUEST_LOCK = "/tmp/dranp-guest.lock"
RIG_TIMEOUT_S = 40 * 60
VM_TIMEOUT_S = 30 * 60  # after the lock is ours: a boot under load, the runs
GUEST_LOCK_WAIT_S = 30 * 60  # flock gives up (exit 1) if another guest holds it longer


class Sizes:
    """How many iterations each benchmark runs; ``--quick`` for trying the command out."""

    def __init__(self, quick: bool) -> None:
        self.macvlan = (10, 2) if quick else (40, 5)
        self.burst = (2, 1, (8, 64)) if quick else (5, 1, (8, 16, 32, 64))
        self.journal = (60, 1) if quick else (200, 3)
        self.startup = (3, 1) if quick else (15, 1)
        self.vf = (4, 1) if quick else (20, 2)
        self.pod_ready = (10, 2) if quick else (40, 5)
        self.pod_vf = (4, 1) if quick else (20, 2)  # P7's VF row, on the guest as P6
        self.memory = (1, 1000) if quick else (3, 10_000)  # P8: rounds, operations


def needs_root(goal_id: str, title: str) -> Outcome | None:
    if os.geteuid() != 0:
        return skipped(goal_id, title, "needs root (network namespaces on the real kernel)")
    return None


def run_in_session(command: list[str], log: Path, timeout: float) -> int | None:
    """Run ``command`` in a session of its own, its output into ``log``; None if it ran
    past ``timeout``, when the whole session is stopped (SIGTERM: the rig and the VM
    benchmark close their labs on the way out), so nothing of it is left running."""
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return None


# -- P1 ----------------------------------------------------------------------------------


def p1_macvlan(sizes: Sizes) -> Outcome:
    title = TITLES["P1"]
    refused = needs_root("P1", title)
    if refused is not None:
        return refused
    import bench_macvlan

    measure = getattr(bench_macvlan, "measure", None)
    if measure is None:
        return skipped("P1", title, "bench_macvlan.measure() is not available yet")
    problem = bench_macvlan.preflight()
    if problem is not None:
        return skipped("P1", title, problem)
    iterations, warmup = sizes.macvlan
    m, _ = measure(iterations, warmup)
    samples = {row: ms(s) for row, s in m.samples.items()}
    ours, cni, floor, kernel = (stat(samples[r], "ms") for r in ("ours", "CNI", "floor", "kernel"))
    over_floor = ours.median - floor.median
    over_kernel = ours.median - kernel.median
    what = f"ConnectNetwork+RemoveNetwork (service at {m.log_level})"
    rows = [
        Row("P1", what, ours, "CNI ADD+DEL", cni, ratio(ours, cni),
            "<= 0.8x CNI", ratio(ours, cni) <= 0.8),
        Row("P1", what, ours, "pyroute2 floor", floor,
            ratio(ours, floor), "<= floor + 2 ms", over_floor <= 2.0,
            f"floor {over_floor:+.1f} ms; the floor waits for each ack, the delete's "
            "after an RCU grace period"),
        Row("P1", what, ours, "LinuxKernel in process", kernel,
            ratio(ours, kernel), "", None,
            f"the service's own cost: {over_kernel:+.1f} ms; the same calls, the delete "
            "answered at the kernel's announcement, as ours"),
    ]  # fmt: skip
    facts = {"iterations": iterations, "warmup": warmup, "cni": m.cni_version}
    facts["log_level"] = m.log_level  # the service's: INFO, as deployed
    return Outcome("P1", title, rows, samples, facts=facts)


# -- P2 ----------------------------------------------------------------------------------


def p2_burst(sizes: Sizes) -> Outcome:
    title = TITLES["P2"]
    refused = needs_root("P2", title)
    if refused is not None:
        return refused
    import bench_burst

    problem = bench_burst.preflight()
    if problem is not None:
        return skipped("P2", title, problem)
    rounds, warmup, curve_sizes = sizes.burst
    m = bench_burst.measure(64, rounds, warmup, curve_sizes)
    walls = {c: ms(m.walls(c, m.size)) for c in bench_burst.CONTENDERS}
    ours, cni, floor = (stat(walls[c], "ms") for c in ("ours", "CNI", "floor"))
    rows = [
        Row("P2", f"wall time, {m.size} attach + {m.size} detach", ours, "CNI", cni,
            ratio(ours, cni), "<= 0.5x CNI", ratio(ours, cni) <= 0.5),
        Row("P2", f"wall time, {m.size} attach + {m.size} detach", ours, "pyroute2 floor",
            floor, ratio(ours, floor), "", None,
            f"CNI/floor {ratio(cni, floor):.2f}x: the goal is 0.5x CNI = "
            f"{0.5 * ratio(cni, floor):.2f}x the floor"),
        Row("P2", f"wall time, {m.size} attach + {m.size} detach (CNI)", cni, "pyroute2 floor",
            floor, ratio(cni, floor), "", None),
    ]  # fmt: skip
    for f in m.fsyncs:
        rows.append(
            Row("P2", f"fsyncs, {f.hooks} {f.phase}es at once",
                stat([float(f.fsyncs)], "fsyncs"), "commit batches",
                stat([float(f.commit_batches)], "batches"),
                f.fsyncs / f.commit_batches if f.commit_batches else None,
                "fsyncs <= commit batches", f.fsyncs <= f.commit_batches,
                f"{f.fsyncs / f.hooks:.2f} fsyncs per hook; by file: "
                + ", ".join(f"{n} {c}" for n, c in sorted(f.by_file.items())))
        )  # fmt: skip
    samples = {
        "ours ConnectNetwork": ms(m.calls("ours", "attach", m.size)),
        "ours RemoveNetwork": ms(m.calls("ours", "detach", m.size)),
        "CNI ADD": ms(m.calls("CNI", "attach", m.size)),
        "CNI DEL": ms(m.calls("CNI", "detach", m.size)),
        "floor create": ms(m.calls("floor", "attach", m.size)),
        "floor delete": ms(m.calls("floor", "detach", m.size)),
    }
    curve = Curve(
        "burst-scaling",
        "Burst wall time (attach + detach) vs burst size",
        "sandboxes attached, then detached, at once",
        "wall time, ms (median; p90 dashed)",
        [float(n) for n in m.sizes],
        {
            f"{c} {q}": [getattr(stat(ms(m.walls(c, n)), "ms"), q) for n in m.sizes]
            for c in bench_burst.CONTENDERS
            for q in ("median", "p90")
        },
    )
    facts = {"rounds": rounds, "warmup": warmup, "note": m.fsync_note}
    return Outcome("P2", title, rows, samples, curves=[curve], facts=facts)


# -- P3 ----------------------------------------------------------------------------------


def p3_journal(sizes: Sizes) -> Outcome:
    import _bench_journal as journal

    title = TITLES["P3"]
    hooks, repeat = sizes.journal
    m = journal.measure(hooks, repeat)
    budget = float(journal.TOY_EFFECTS + 1)
    one, sixteen = journal.fsyncs_per_hook(m, 1), journal.fsyncs_per_hook(m, 16)
    connect = statistics.median(r.connect_fsyncs or 0.0 for r in m.at(1))
    remove = statistics.median(r.remove_fsyncs or 0.0 for r in m.at(1))
    lat1, lat16 = stat(hook_latencies(m, 1), "ms"), stat(hook_latencies(m, 16), "ms")
    floor = stat(ms(m.floor_latencies), "ms")
    rows = [
        Row("P3", "fsyncs per ConnectNetwork, 1 client", stat([connect], "fsyncs"),
            "effects + 1", stat([budget], "fsyncs"), connect / budget,
            "<= effects + 1 = 6", connect <= budget, f"per hook {one:.2f}"),
        # A removal's own verdict: its fence and its targets' finish ride with its
        # Undoing and response commits (docs/runner.md, "The record sequence").
        Row("P3", "fsyncs per RemoveNetwork, 1 client", stat([remove], "fsyncs"),
            "effects + 1", stat([budget], "fsyncs"), remove / budget,
            "<= effects + 1 = 6", remove <= budget,
            "the fence with the first Undoing, the target's finish with the response"),
        Row("P3", "fsyncs per hook, 16 clients", stat([sixteen], "fsyncs"),
            "1 client", stat([one], "fsyncs"), sixteen / one,
            "group commit: < 1-client figure", sixteen < one),
        Row("P3", "hook latency, 1 client", lat1, "one 4 KiB fdatasync", floor,
            ratio(lat1, floor), "", None),
        Row("P3", "hook latency, 16 clients", lat16, "hook latency, 1 client", lat1,
            ratio(lat16, lat1), "", None),
    ]  # fmt: skip
    clients = sorted({r.clients for r in m.runs})
    fsync_curve = Curve(
        "fsyncs-scaling",
        "Journal fsyncs per hook vs concurrent clients",
        "concurrent clients",
        "fsyncs per hook (median of repetitions)",
        [float(c) for c in clients],
        {"ours": [journal.fsyncs_per_hook(m, c) for c in clients]},
        {
            f"1 client ({one:.2f}: ConnectNetwork {connect:.0f}, RemoveNetwork {remove:.0f})": [one]
            * len(clients)
        },
    )
    latency_curve = Curve(
        "latency-scaling",
        "Hook latency vs concurrent clients",
        "concurrent clients",
        "latency per hook, ms (median; p90 dashed)",
        [float(c) for c in clients],
        {
            f"ours {q}": [getattr(stat(hook_latencies(m, c), "ms"), q) for c in clients]
            for q in ("median", "p90")
        },
        {"one fdatasync (median)": [floor.median] * len(clients)},
    )
    samples = {
        "hook, 1 client": hook_latencies(m, 1),
        "hook, 16 clients": hook_latencies(m, 16),
        "4 KiB fdatasync": ms(m.floor_latencies),
    }
    facts = {"hooks": hooks, "repeat": repeat}
    return Outcome("P3", title, rows, samples, curves=[fsync_curve, latency_curve], facts=facts)


def hook_latencies(m: JournalMeasurement, clients: int) -> list[float]:
    return ms([x for r in m.at(clients) for x in r.latencies])


# -- P4 ----------------------------------------------------------------------------------


def p4_rig(summary: Path | None, log: Path) -> Outcome:
    title = TITLES["P4"]
    from harness.labs import summary_path

    if summary is None:
        with tempfile.TemporaryDirectory(prefix="bench-rig-") as tmp:
            print(f"P4: running the rig on fake:// (minutes; its output in {log})", flush=True)
            code = run_in_session(
                [sys.executable, "-m", "harness.rig", "--lab", "fake://",
                 "--alluredir", f"{tmp}/allure", "--reports", tmp],
                log, RIG_TIMEOUT_S,
            )  # fmt: skip
            if code is None:
                why = (
                    f"the rig did not finish within {RIG_TIMEOUT_S // 60} min (stopped; see {log})"
                )
                return skipped("P4", title, why)
            path = summary_path(Path(tmp), "fake://")
            if not path.is_file():
                return skipped("P4", title, f"the rig wrote no summary (exit {code}; see {log})")
            data = json.loads(path.read_text())
    else:
        data = json.loads(summary.read_text())
    seconds = float(data["seconds"])
    runs = sum(
        int(data.get(k, 0))
        for k in (
            "crash_runs_inprocess",
            "crash_runs_sigkill",
            "compound_crash_runs",
            "coordinator_crash_runs",
        )
    )
    violations = int(data.get("invariant_violations", 0))
    rows = [
        Row("P4", "fake tier wall time", stat([seconds], "s"), "", None, None, "<= 180 s",
            seconds <= 180,
            f"{runs} crash runs, {runs / seconds:.2f} crash runs/s, {violations} violations, "
            f"{data.get('tests_failed', 0)} failed"),
    ]  # fmt: skip
    facts = {
        "source": str(summary) if summary else "this run",
        "crash_runs": runs,
        "crash_runs_per_second": round(runs / seconds, 2),
        **{k: data[k] for k in ("crash_points_enumerated", "tests_passed") if k in data},
    }
    return Outcome("P4", title, rows, facts=facts)


# -- P5 ----------------------------------------------------------------------------------


def p5_startup(sizes: Sizes) -> Outcome:
    title = TITLES["P5"]
    try:
        import bench_startup
    except ImportError as exc:
        return skipped("P5", title, f"scripts/bench_startup.py is not available yet ({exc})")
    measure = getattr(bench_startup, "measure", None)
    if measure is None:
        return skipped("P5", title, "bench_startup.measure() is not available yet")
    runs, warmup = sizes.startup
    m = measure(runs=runs, in_flight=1000, warmup=warmup)
    samples = {row: ms(s) for row, s in m.samples.items()}
    floor = stat(samples["floor"], "ms")
    rows = []
    for service in bench_startup.SERVICES:
        s = stat(samples[service], "ms")
        rows.append(
            Row("P5", f"{service} start to ready", s, "bare gRPC server", floor,
                ratio(s, floor), "<= 0.5 s", s.median <= 500)
        )  # fmt: skip
    rec = stat(samples["recovery"], "ms")
    empty = stat(samples[bench_startup.RECOVERING_SERVICE], "ms")
    rows.append(
        Row("P5", f"recovery of {m.in_flight} in flight, start to ready", rec,
            "empty journal", empty, ratio(rec, empty), "<= 2 s", rec.median <= 2000)
    )  # fmt: skip
    return Outcome("P5", title, rows, samples, facts={"runs": runs, "in_flight": m.in_flight})


# -- P6 ----------------------------------------------------------------------------------


def on_the_guest(
    goal_id: str, script: str, sizes: tuple[int, int], log: Path
) -> dict[str, Any] | str:
    """Run ``scripts/<script> OUT.json`` as its own process under the guest lock (one
    QEMU guest per machine); its JSON, or why it did not run (one line)."""
    if os.geteuid() != 0:
        return "needs root (the VM lab's guest)"
    if shutil.which("flock") is None:
        return "flock(1) is missing (util-linux)"
    iterations, warmup = sizes
    with tempfile.TemporaryDirectory(prefix="bench-guest-") as tmp:
        out = Path(tmp) / "out.json"
        print(
            f"{goal_id}: waiting for {GUEST_LOCK}, then booting the VM lab (log: {log})",
            flush=True,
        )
        command = [
            "flock", "--wait", str(GUEST_LOCK_WAIT_S), GUEST_LOCK, sys.executable,
            str(REPO / "scripts" / script), str(out),
            "--iterations", str(iterations), "--warmup", str(warmup),
        ]  # fmt: skip
        code = run_in_session(command, log, GUEST_LOCK_WAIT_S + VM_TIMEOUT_S)
        if code is None:
            return f"the VM lab run did not finish in time (see {log})"
        if code != 0 or not out.is_file():
            tail = log.read_text(errors="replace").strip().splitlines()[-1:]
            if not tail:  # flock gave up before the benchmark started
                return f"another guest held {GUEST_LOCK} too long"
            return f"the VM lab run failed (exit {code}): {tail[0]}"
        data: dict[str, Any] = json.loads(out.read_text())
        return data


def p6_vf(sizes: Sizes, log: Path) -> Outcome:
    title = TITLES["P6"]
    data = on_the_guest("P6", "_bench_vf.py", sizes.vf, log)
    if isinstance(data, str):
        return skipped("P6", title, data)
    samples = {row: ms(s) for row, s in data["samples"].items()}
    ours, floor = stat(samples["ours"], "ms"), stat(samples["floor"], "ms")
    rows = [
        Row("P6", "ConnectNetwork+RemoveNetwork of a VF", ours, "floor through the agent",
            floor, ratio(ours, floor), "<= 1.2x floor", ratio(ours, floor) <= 1.2,
            f"guest {data['guest_kernel']}, boot {data['boot_seconds']} s; round trips "
            + ", ".join(f"{k} {len(v)}" for k, v in data.get("round_trips", {}).items())),
    ]  # fmt: skip
    facts = {k: v for k, v in data.items() if k != "samples"}
    return Outcome("P6", title, rows, samples, facts=facts)


# -- P7 ----------------------------------------------------------------------------------

P7_VF = "a VF on P6's emulated host"


def p7_vf(
    sizes: Sizes, log: Path, guest: bool
) -> tuple[list[Row], dict[str, list[float]], dict[str, Any]]:
    """P7's VF rows (``scripts/_bench_pod_vf.py`` on the guest), its samples and facts; a
    row saying why when it did not run (``guest`` False: ``--skip-vm``)."""
    if not guest:
        return [Row("P7", f"{P7_VF}: skipped: --skip-vm", None)], {}, {}
    data = on_the_guest("P7", "_bench_pod_vf.py", sizes.pod_vf, log)
    if isinstance(data, str):
        return [Row("P7", f"{P7_VF}: skipped: {data}", None)], {}, {}
    ready = {row: ms(s) for row, s in data["ready"].items()}
    down = {row: ms(s) for row, s in data["teardown"].items()}
    iterations = data["iterations"]
    if not ready["ours"]:
        why = f"every one of {iterations} RunPodSandbox answers came before the connect"
        return [Row("P7", f"{P7_VF}: skipped: {why}", None)], {}, {}
    ours, floor = stat(ready["ours"], "ms"), stat(ready["floor"], "ms")
    stop, home = stat(down["ours"], "ms"), stat(down["floor"], "ms")
    trips = ", ".join(f"{k} {v}" for k, v in data["round_trips"].items())
    rows = [
        Row("P7", f"RunPodSandbox to its answer, connected ({P7_VF}: one sriov VF)", ours,
            "floor through the agent", floor, ratio(ours, floor), "", None,
            f"{data['answered_before_ready']} of {iterations} answered before ready; guest "
            f"{data['guest_kernel']}, boot {data['boot_seconds']} s; round trips {trips}; "
            f"{data['cni']}"),
        Row("P7", f"StopPodSandbox to its answer ({P7_VF}, teardown, timed apart)", stop,
            "floor's move home", home, ratio(stop, home), "", None),
    ]  # fmt: skip
    samples = {"VF ours RunPodSandbox": ready["ours"], "VF floor move in": ready["floor"]}
    facts = {k: v for k, v in data.items() if k not in ("ready", "teardown", "early_answers")}
    facts["early_answers_ms"] = ms(data["early_answers"])
    facts["teardown_ms"] = down
    return rows, samples, facts


def p7_pod_ready(sizes: Sizes, log: Path, guest: bool) -> Outcome:
    title = TITLES["P7"]
    refused = needs_root("P7", title)
    if refused is not None:
        return refused
    import bench_pod_ready

    problem = bench_pod_ready.preflight()
    if problem is not None:
        return skipped("P7", title, problem)
    iterations, warmup = sizes.pod_ready
    m = bench_pod_ready.measure(iterations, warmup)
    ready = {row: ms(s) for row, s in m.ready.items()}
    down = {row: ms(s) for row, s in m.teardown.items()}
    if not ready["ours"]:
        why = f"every one of {iterations} RunPodSandbox answers came before the connect"
        return skipped("P7", title, why)
    ours, cni, floor = (stat(ready[r], "ms") for r in ("ours", "CNI", "floor"))
    stop, delete, floor_del = (stat(down[r], "ms") for r in ("ours", "CNI", "floor"))
    what = "RunPodSandbox to its answer, connected (macvlan)"
    early = (
        f"{m.answered_before_ready} of {iterations} answered before ready (left out); the "
        "claim's status applied to the test kit's API server inside it"
    )
    rows = [
        Row("P7", what, ours, "CNI ADD", cni, ratio(ours, cni), "", None, early),
        Row("P7", what, ours, "pyroute2 floor", floor, ratio(ours, floor), "", None,
            f"floor {ours.median - floor.median:+.1f} ms"),
        Row("P7", "StopPodSandbox to its answer (teardown, timed apart)", stop, "CNI DEL",
            delete, ratio(stop, delete), "", None),
        Row("P7", "StopPodSandbox to its answer (teardown, timed apart)", stop,
            "pyroute2 floor delete", floor_del, ratio(stop, floor_del), "", None,
            "the floor's delete waits for its ack, after an RCU grace period"),
    ]  # fmt: skip
    vf_rows, vf_samples, vf_facts = p7_vf(sizes, log, guest)
    rows += vf_rows
    samples = {
        "ours RunPodSandbox": ready["ours"],
        "CNI ADD": ready["CNI"],
        "floor attach": ready["floor"],
        **vf_samples,
    }
    facts = {
        "iterations": iterations,
        "warmup": warmup,
        "answered_before_ready": m.answered_before_ready,
        "early_answers_ms": ms(m.early_answers),
        "answer_within_s": m.answer_within_s,
        "cni": m.cni_version,
        "log_level": m.service_log_level,  # the service's and the coordinator's: INFO
        "teardown_ms": down,
        "pod_side": m.notes,
        **({"vf": vf_facts} if vf_facts else {}),
    }
    return Outcome("P7", title, rows, samples, facts=facts)


# -- P8 ----------------------------------------------------------------------------------


def p8_memory(sizes: Sizes) -> Outcome:
    title = TITLES["P8"]
    import bench_memory as memory

    runs, ops = sizes.memory
    # As a node runs them (linux://, the netns lab) when root; the fake kernel's test kit
    # URL is an entry point, whose lookup imports importlib.metadata (docs/benchmarks.md).
    m = memory.measure(runs, ops, lab="netns" if os.geteuid() == 0 else "fake")
    memory.report(m)  # the whole table (anon, file, threads) in the run's output
    idle = {r: [memory.mb(x.rss_kb) for x in m.idle[r]] for r in m.idle}
    after = {r: [memory.mb(x.rss_kb) for x in m.after[r]] for r in m.after}
    floor_idle, floor_after = stat(idle[memory.FLOOR], "MB"), stat(after[memory.FLOOR], "MB")
    floor_growth = statistics.median(m.growth_pct(memory.FLOOR))
    rows = []
    for row in m.idle:
        if row == memory.FLOOR:
            continue
        ours_idle, ours_after = stat(idle[row], "MB"), stat(after[row], "MB")
        growth = statistics.median(m.growth_pct(row))
        anon, file = (memory.mb(m.median(row, "idle", f)) for f in ("anon_kb", "file_kb"))
        threads = [m.median(row, w, "threads") for w in ("idle", "after")]
        rows += [
            Row("P8", f"{row} RSS, idle after ready", ours_idle, "bare gRPC server",
                floor_idle, ratio(ours_idle, floor_idle), f"<= {memory.IDLE_RSS_GOAL_MB:g} MB",
                ours_idle.median <= memory.IDLE_RSS_GOAL_MB,
                f"anon {anon:.1f} MB, file {file:.1f} MB, {threads[0]:.0f} threads"),
            Row("P8", f"{row} RSS after {m.ops[row]}", ours_after, "bare gRPC server",
                floor_after, ratio(ours_after, floor_after),
                f"growth <= {memory.GROWTH_GOAL_PCT:g} %", growth <= memory.GROWTH_GOAL_PCT,
                f"growth {growth:+.1f} % (floor {floor_growth:+.1f} % after "
                f"{m.ops[memory.FLOOR]}), {threads[1]:.0f} threads"),
        ]  # fmt: skip
    facts: dict[str, Any] = {
        "runs": runs,
        "lab": m.lab,
        "ops": m.ops,
        "settle_s": m.settle_s,
        "load_at_start": m.load_at_start,
        "load_at_end": m.load_at_end,
        "idle_kb": {r: [vars(x) for x in v] for r, v in m.idle.items()},
        "after_kb": {r: [vars(x) for x in v] for r, v in m.after.items()},
        "ops_seconds": m.seconds,
    }
    return Outcome("P8", title, rows, sample_unit="MB", facts=facts)


# -- the run -----------------------------------------------------------------------------


def print_rows(outcome: Outcome) -> None:
    """One line per row: ours, its peer and the ratio of medians, the goal's verdict."""
    for row in outcome.rows:
        verdict = {True: "met", False: "NOT met", None: "-"}[row.met]
        ours = f"{row.ours.median:.2f} {row.ours.unit}" if row.ours else "-"
        peer = ""
        if row.peer is not None and row.ratio is not None:
            peer = f" vs {row.peer_name} {row.peer.median:.2f} {row.peer.unit} ({row.ratio:.2f}x)"
        print(f"  {row.what}: {ours}{peer}; goal {row.goal or '-'}: {verdict}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "reports/bench/results.json")
    parser.add_argument("--only", default="", help="comma-separated goals to run (P1,...)")
    parser.add_argument("--skip", default="", help="comma-separated goals to leave out")
    parser.add_argument("--skip-rig", action="store_true", help="leave out P4 (minutes)")
    parser.add_argument(
        "--skip-vm", action="store_true", help="leave out P6 and P7's VF row (boot a guest)"
    )
    parser.add_argument(
        "--rig-summary", type=Path, help="P4 from this summary.json instead of running the rig"
    )
    parser.add_argument("--quick", action="store_true", help="few iterations: a trial run")
    args = parser.parse_args()
    only = {g for g in args.only.upper().split(",") if g}
    skip = {g for g in args.skip.upper().split(",") if g}
    unknown = sorted((only | skip) - set(GOALS))
    if unknown:
        parser.error(f"unknown goal(s) {', '.join(unknown)}: choose from {', '.join(GOALS)}")
    if args.rig_summary is not None and not args.rig_summary.is_file():
        parser.error(f"--rig-summary {args.rig_summary}: no such file")
    if args.skip_rig:
        skip.add("P4")
    if args.skip_vm:
        skip.add("P6")
    wanted = [g for g in GOALS if (not only or g in only) and g not in skip]
    sizes = Sizes(args.quick)
    logs = args.out.parent
    logs.mkdir(parents=True, exist_ok=True)
    benchmarks: dict[str, Callable[[], Outcome]] = {
        "P1": lambda: p1_macvlan(sizes),
        "P2": lambda: p2_burst(sizes),
        "P3": lambda: p3_journal(sizes),
        "P4": lambda: p4_rig(args.rig_summary, logs / "rig.log"),
        "P5": lambda: p5_startup(sizes),
        "P6": lambda: p6_vf(sizes, logs / "vf.log"),
        "P7": lambda: p7_pod_ready(sizes, logs / "pod-vf.log", not args.skip_vm),
        "P8": lambda: p8_memory(sizes),
    }
    started = time.time()
    load_before = loadavg()
    print(f"bench: {', '.join(wanted) or 'nothing'}; load before: {load_before}", flush=True)
    outcomes: list[Outcome] = []
    for goal in GOALS:
        if goal not in wanted:
            outcomes.append(Outcome(goal, TITLES[goal], skipped="not asked for in this run"))
            continue
        t0 = time.monotonic()
        print(f"{goal}: running", flush=True)
        try:
            outcome = benchmarks[goal]()
        except Exception as exc:  # one benchmark's failure costs its row, not the run
            traceback.print_exc()
            outcome = skipped(goal, TITLES[goal], f"failed: {type(exc).__name__}: {exc}")
        outcome.facts.setdefault("seconds", round(time.monotonic() - t0, 1))
        outcomes.append(outcome)
        print_rows(outcome)
    load_after = loadavg()
    print(f"bench: load after: {load_after}", flush=True)
    write_json(
        args.out,
        {
            "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "minutes": round((time.time() - started) / 60, 1),
            "commit": git_head(),
            "machine": machine(),
            "load_before": load_before,
            "load_after": load_after,
            "outcomes": [outcome_to_json(o) for o in outcomes],
        },
    )
    print(f"bench: results in {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
