"""scripts/bench's page: the generated section of docs/benchmarks.md, as text.

Pure: outcomes in, Markdown out, and ``splice``, which replaces what lies between the
markers (or inserts the pair after the page's title and first paragraph) and leaves
every other line of the page, written by hand, as it was. No plotting here, so the
tests import it without the ``bench`` dependency group.
"""

from __future__ import annotations

from typing import Any

from _bench_common import Outcome, Row, Stat

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
HOW = """\
`scripts/bench` (root, on a clean clone) installs what it needs (`scripts/install-bench`:
the CNI plugins and strace; the `bench` dependency group: matplotlib), runs every
benchmark below into `reports/bench/results.json`, then writes this section and the
PNGs under `docs/benchmarks/`. `--skip-rig` leaves out P4 (minutes), `--rig-summary
reports/summary.json` takes P4 from an earlier rig run instead, `--skip-vm` leaves out
P6 and P7's VF row (they boot a guest), `--only P1,P3` / `--skip P2` choose, `--quick` is a trial with few
iterations. It asserts no timing: a verdict below is data.

| goal | what runs | ours | peer |
|---|---|---|---|
| P1 | `scripts/bench_macvlan.py` (`measure()`): a `NetnsLab`, one macvlan share prepared once | ConnectNetwork+RemoveNetwork over the real `networkplugin-links` socket | `/usr/lib/cni/macvlan` ADD+DEL exec'd; bare pyroute2 requests, each waiting for its ack (floor); the same calls through `LinuxKernel` in process, no service (its delete answers at the kernel's announcement, as ours) |
| P2 | `scripts/bench_burst.py`: 64 pods, each its own claim prepared once; N calls released by one barrier on N threads in the node namespace; wall time from the release to the last return; then one untimed round under `strace -f -y -e trace=fsync,fdatasync` on the service, against the journals' `meta.commits` (one per group-commit batch) | N ConnectNetwork, then N RemoveNetwork | N CNI ADD execs, then N DEL; the floor: the same N creates, then N deletes, as bare pyroute2 requests from the same N threads |
| P3 | `scripts/_bench_journal.py`: the toy plugin (5 effects, its resource in memory) behind the real gRPC host, 1 to 16 client threads; fsyncs are the store's commits | each hook's latency and commits | one 4 KiB write+fdatasync on the same file system |
| P4 | the rig on `fake://` (`python -m harness.rig`, its reports in a temp dir: `reports/` is left alone) | its `seconds` and crash runs | the goal |
| P5 | `scripts/bench_startup.py` (`measure()`): each service exec'd on the fake kernel, until an authenticated GetInfo says ready; links over a journal of 1,000 in-flight ConnectNetworks | the three services; recovery | a bare gRPC server (`import grpc`, a Unix socket) |
| P6 | `scripts/_bench_vf.py` under `flock /tmp/dranp-guest.lock`: the VM lab's guest (TCG), a session lending igb PF 0 and its VF 0 | ConnectNetwork+RemoveNetwork of the `sriov` plugin over the real `networkplugin-vf` socket (its kernel: the guest's agent) | the VF moved in under its final name and set up, then moved home, through the same relay and agent |
| P7 | `scripts/bench_pod_ready.py` (`measure()`): a `NetnsLab`; `KubernetesNode` in process (journal on disk, log at INFO) with its real NRI plugin on `NRIRuntimeSim`'s socket, its API client on `FakeAPIServer`, `networkplugin-links` as a process; the `sdk-macvlan` claim prepared once through `KubeletSim`; teardown timed apart | RunPodSandbox, send to answer, counted only if the sandbox is `connected` in the journal at the answer; StopPodSandbox | `/usr/lib/cni/macvlan` ADD, then DEL; P1's pyroute2 floor: the attach, then the delete |
| P7 (VF) | `scripts/_bench_pod_vf.py` under `flock /tmp/dranp-guest.lock`: P6's guest and session (igb PF 0 and its VF 0 lent), the same `KubernetesNode` and peers with `networkplugin-vf` as a process; the claim of a one-step `sriov` topology (`bench-vf`, VF 0 as `net1`) on the session's inventory | RunPodSandbox and StopPodSandbox, as above | P6's floor split at the pod: the VF moved in under its final name and set up, then moved home, through the same relay and agent; no CNI peer (Debian's plugins have no sriov; host-device would have to run inside the guest) |
| P8 | `scripts/bench_memory.py` (`measure()`): every process started as P5 starts it (fresh state dir, config and token), all at once, as root on `linux://` in a `NetnsLab` as a node runs them (the hooks row's macvlans on this machine's kernel), else on the fake kernel; `/proc/PID/status` read 2 s after ready (idle) and 2 s after its own operations; 3 rounds of fresh processes, medians | VmRSS (RssAnon, RssFile) and Threads of the three services after 10,000 authenticated GetInfo each; a second `networkplugin-links` after 10,000 hooks (2,500 apply+remove cycles of `sdk-macvlan` through the `networkplugin-coordinator` program); that coordinator after 10,000 calls | P5's bare gRPC server after 10,000 GetInfo |
"""


def fmt(s: Stat | None) -> str:
    if s is None:
        return "-"
    if s.n == 1:
        return f"{s.median:.2f} {s.unit}"
    return f"{s.median:.2f} ({s.p90:.2f}) {s.unit}"


def verdict(row: Row) -> str:
    return {True: "met", False: "**not met**", None: "-"}[row.met]


def table(outcomes: list[Outcome]) -> list[str]:
    lines = [
        "| goal | measure | ours: median (p90) | peer | peer: median (p90) | ours/peer | goal | |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        if o.skipped is not None:
            lines.append(f"| {o.goal_id} | {o.title} | skipped: {o.skipped} | | | | | - |")
            continue
        for r in o.rows:
            ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
            what = f"{r.what} ({r.note})" if r.note else r.what
            lines.append(
                f"| {r.goal_id} | {what} | {fmt(r.ours)} | {r.peer_name or '-'} | "
                f"{fmt(r.peer)} | {ratio} | {r.goal or '-'} | {verdict(r)} |"
            )
    return lines


def section(
    results: dict[str, Any], outcomes: list[Outcome], drawn: dict[str, list[tuple[str, str]]]
) -> str:
    m = results["machine"]
    lines = [
        BEGIN,
        "<!-- Generated by scripts/bench (scripts/_bench_render.py): edits here are overwritten. -->",
        "",
        "## All benchmarks, one run (`scripts/bench`)",
        "",
        f"Run {results['started']} at commit `{results['commit']}`, {results['minutes']} min: "
        f"{m['cpu']}, {m['cores']} cores, Linux {m['kernel']}, Python {m['python']}, "
        f"containernetworking-plugins {m['cni']}. Load (`/proc/loadavg`) before: "
        f"`{results['load_before']}`; after: `{results['load_after']}`.",
        "",
        HOW,
        "Ours and its peer alternate every iteration (ABAB) after warm-ups; medians, p90 in "
        "parentheses; a ratio is of medians. P8 measures memory, not time: each of its "
        "rounds runs every process at once, floor included. The goals are issue 13's (P8's, "
        "issue 31's). A verdict is what this run measured, on a machine shared with other "
        "work, and never a test.",
        "",
        *table(outcomes),
        "",
    ]
    for o in outcomes:
        for caption, name in drawn.get(o.goal_id, []):
            lines.append(f"![{caption}](benchmarks/{name})")
            lines.append("")
    lines.append(END)
    return "\n".join(lines)


def splice(page: str, generated: str) -> str:
    if BEGIN in page and END in page:
        head, rest = page.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        return head + generated + tail
    # No markers yet: after the title and its first paragraph, near the top.
    parts = page.split("\n\n", 2)
    if len(parts) == 3:
        return f"{parts[0]}\n\n{parts[1]}\n\n{generated}\n\n{parts[2]}"
    return f"{page.rstrip()}\n\n{generated}\n"
