"""scripts/bench's drawing half: results.json -> the table in docs/benchmarks.md and PNGs.

Replaces what lies between ``<!-- bench:begin -->`` and ``<!-- bench:end -->`` in
docs/benchmarks.md (``_bench_table``) and leaves the rest of the page, written by hand,
as it is. The PNGs go to
docs/benchmarks/: per benchmark the distribution of its samples (ours against its peer,
as empirical CDFs, the median marked) and its scaling curves. The section describes
one run, so PNGs of benchmarks that did not run in it are removed.

    uv run --locked --group bench python scripts/_bench_render.py [RESULTS] [--docs DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server
import matplotlib.pyplot as plt
from _bench_common import REPO, Curve, Outcome, outcome_from_json
from _bench_table import section, splice, table
from matplotlib.ticker import FuncFormatter

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
        median = statistics.median(xs)
        ax.step(xs, ys, where="post", color=color, linewidth=1.8,
                label=f"{name}: median {median:.1f} {outcome.sample_unit} (n={len(xs)})")  # fmt: skip
        ax.axvline(median, color=color, linestyle=":", linewidth=1)
    medians = [statistics.median(v) for v in outcome.samples.values() if v]
    # Contenders an order of magnitude apart (a hook at 16 clients against one fdatasync)
    # would squeeze the fast ones against the axis: a log scale keeps each one's shape.
    spread = min(medians) > 0 and max(medians) / min(medians) > 10
    if spread:
        ax.set_xscale("log")
        # Plain numbers (1, 2, 5, 10, 20...), not matplotlib's "2 x 10^0" on the minor ticks.
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(
            FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.1g}"[0] in "25" else "")
        )
    ax.axhline(0.5, color="0.6", linewidth=0.6)
    ax.axhline(0.9, color="0.6", linewidth=0.6, linestyle="--")
    scale = ", log scale" if spread else ""
    ax.set_xlabel(f"time per sample, {outcome.sample_unit}{scale} (dotted: medians)")
    ax.set_ylabel("fraction of samples at or below")
    ax.set_ylim(0, 1.02)
    if not spread:
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
