"""scripts/bench's drawing half: results.json -> the table in docs/benchmarks.md and PNGs.

Replaces what lies between ``<!-- bench:begin -->`` and ``<!-- bench:end -->`` in
docs/benchmarks.md (inserting the pair after the page's title and first paragraph if it
has none) and leaves the rest of the page, written by hand, as it is. The PNGs go to
docs/benchmarks/: per benchmark the distribution of its samples (ours against its peer,
as empirical CDFs, the median marked) and its scaling curves. The section describes
one run, so PNGs of benchmarks that did not run in it are removed.

    uv run --locked --group bench python scripts/_bench_render.py [RESULTS] [--docs DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server
import matplotlib.pyplot as plt
from _bench_common import REPO, Curve, Outcome, Row, Stat, outcome_from_json

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
HOW = """\
`scripts/bench` (root, on a clean clone) installs what it needs (`scripts/install-bench`:
the CNI plugins and strace; the `bench` dependency group: matplotlib), runs every
benchmark below into `reports/bench/results.json`, then writes this section and the
PNGs under `docs/benchmarks/`. `--skip-rig` leaves out P4 (minutes), `--rig-summary
reports/summary.json` takes P4 from an earlier rig run instead, `--skip-vm` leaves out
P6 (boots a guest), `--only P1,P3` / `--skip P2` choose, `--quick` is a trial with few
iterations. It asserts no timing: a verdict below is data.

| goal | what runs | ours | peer |
|---|---|---|---|
| P1 | `scripts/bench_macvlan.py` (`measure()`): a `NetnsLab`, one macvlan share prepared once | ConnectNetwork+RemoveNetwork over the real `networkplugin-links` socket | `/usr/lib/cni/macvlan` ADD+DEL exec'd; bare pyroute2 requests (floor) |
| P2 | `scripts/bench_burst.py`: 64 pods, each its own claim prepared once; N calls released by one barrier on N threads in the node namespace; wall time from the release to the last return; then one untimed round under `strace -f -y -e trace=fsync,fdatasync` on the service, against the journals' `meta.commits` (one per group-commit batch) | N ConnectNetwork, then N RemoveNetwork | N CNI ADD execs, then N DEL |
| P3 | `scripts/_bench_journal.py`: the toy plugin (5 effects, its resource in memory) behind the real gRPC host, 1 to 16 client threads; fsyncs are the store's commits | each hook's latency and commits | one 4 KiB write+fdatasync on the same file system |
| P4 | the rig on `fake://` (`python -m harness.rig`, its reports in a temp dir: `reports/` is left alone) | its `seconds` and crash runs | the goal |
| P5 | `scripts/bench_startup.py` (`measure()`): each service exec'd on the fake kernel, until an authenticated GetInfo says ready; links over a journal of 1,000 in-flight ConnectNetworks | the three services; recovery | a bare gRPC server (`import grpc`, a Unix socket) |
| P6 | `scripts/_bench_vf.py` under `flock /tmp/dranp-guest.lock`: the VM lab's guest (TCG), a session lending igb PF 0 and its VF 0 | ConnectNetwork+RemoveNetwork of the `sriov` plugin over the real `networkplugin-vf` socket (its kernel: the guest's agent) | the VF moved in under its final name and set up, then moved home, through the same relay and agent |
"""
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
DPI = 110


# -- plots ---------------------------------------------------------------------------------


def distribution(outcome: Outcome, path: Path) -> None:
    """Empirical CDF per contender: read across at 0.5 for the medians, at 0.9 for p90."""
    fig, ax = plt.subplots(figsize=(8, 4.6), dpi=DPI)
    for i, (name, values) in enumerate(outcome.samples.items()):
        if not values:
            continue
        xs = sorted(values)
        ys = [(k + 1) / len(xs) for k in range(len(xs))]
        color = PALETTE[i % len(PALETTE)]
        median = (
            xs[(len(xs) - 1) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2
        )
        ax.step(xs, ys, where="post", color=color, linewidth=1.8,
                label=f"{name}: median {median:.1f} {outcome.sample_unit} (n={len(xs)})")  # fmt: skip
        ax.axvline(median, color=color, linestyle=":", linewidth=1)
    ax.axhline(0.5, color="0.6", linewidth=0.6)
    ax.axhline(0.9, color="0.6", linewidth=0.6, linestyle="--")
    ax.set_xlabel(f"time per sample, {outcome.sample_unit} (dotted: medians)")
    ax.set_ylabel("fraction of samples at or below")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    ax.set_title(f"{outcome.goal_id}: " + "\n".join(textwrap.wrap(outcome.title, 70)), fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def curve_plot(goal_id: str, curve: Curve, path: Path) -> None:
    """Medians solid with markers, a series named '... p90' dashed in its median's colour,
    guides (goals, floors) dashed grey."""
    fig, ax = plt.subplots(figsize=(8, 4.6), dpi=DPI)
    colors: dict[str, str] = {}
    for name, ys in curve.series.items():
        base = name.removesuffix(" p90").removesuffix(" median")
        color = colors.setdefault(base, PALETTE[len(colors) % len(PALETTE)])
        dashed = name.endswith(" p90")
        ax.plot(curve.x, ys, color=color, marker="o", markersize=4,
                linestyle="--" if dashed else "-", linewidth=1.2 if dashed else 1.8, label=name)  # fmt: skip
    for name, ys in curve.guides.items():
        ax.plot(curve.x, ys, color="0.45", linestyle="--", linewidth=1, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(curve.x, [f"{x:g}" for x in curve.x])
    ax.set_xlabel(curve.x_label)
    ax.set_ylabel(curve.y_label)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{goal_id}: {curve.title}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def draw(outcomes: list[Outcome], images: Path) -> dict[str, list[tuple[str, str]]]:
    """Every PNG of this run; returns, per goal, (caption, file name) in drawing order."""
    images.mkdir(parents=True, exist_ok=True)
    for old in images.glob("p[0-9]-*.png"):
        old.unlink()
    drawn: dict[str, list[tuple[str, str]]] = {}
    for o in outcomes:
        if o.skipped is not None:
            continue
        files = drawn.setdefault(o.goal_id, [])
        if any(o.samples.values()):
            name = f"{o.goal_id.lower()}-distribution.png"
            distribution(o, images / name)
            files.append((f"{o.goal_id}: distribution of the samples", name))
        for c in o.curves:
            name = f"{o.goal_id.lower()}-{c.key}.png"
            curve_plot(o.goal_id, c, images / name)
            files.append((f"{o.goal_id}: {c.title}", name))
    return drawn


# -- the table -----------------------------------------------------------------------------


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
        "parentheses; a ratio is of medians. The goals are issue 13's. A verdict is what "
        "this run measured, on a machine shared with other work, and never a test.",
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "results", type=Path, nargs="?", default=REPO / "reports/bench/results.json"
    )
    parser.add_argument("--docs", type=Path, default=REPO / "docs")
    args = parser.parse_args()
    if not args.results.is_file():
        parser.error(f"{args.results}: no such results file (run scripts/bench first)")
    results = json.loads(args.results.read_text())
    outcomes = [outcome_from_json(o) for o in results["outcomes"]]
    drawn = draw(outcomes, args.docs / "benchmarks")
    page_path = args.docs / "benchmarks.md"
    page = page_path.read_text() if page_path.is_file() else "# Benchmarks\n"
    generated = section(results, outcomes, drawn)
    page_path.write_text(splice(page, generated))
    print("\n".join(table(outcomes)))
    for files in drawn.values():
        for _, name in files:
            print(f"plot: {args.docs / 'benchmarks' / name}")
    print(f"table: {page_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
