"""What every benchmark of ``scripts/bench`` shares: summaries, the machine, the results file.

A benchmark produces an ``Outcome``: table rows (ours against a peer, the goal, whether
it is met), the raw samples a plot draws, and scaling curves. ``scripts/bench`` writes
every outcome of one run into one JSON file; ``_bench_render.py`` turns that file into
the table in docs/benchmarks.md and the PNGs under docs/benchmarks/. Nothing here
asserts a timing: a goal's verdict is printed and written, never raised.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Stat:
    """Median and p90 of one contender's samples, in ``unit``."""

    median: float
    p90: float
    n: int
    unit: str


def stat(samples: list[float], unit: str) -> Stat:
    """Median and p90 (the 9th decile, inclusive method so small n stays in range)."""
    if not samples:
        raise ValueError("no samples to summarize")
    if len(samples) == 1:
        return Stat(samples[0], samples[0], 1, unit)
    p90 = statistics.quantiles(samples, n=10, method="inclusive")[-1]
    return Stat(statistics.median(samples), p90, len(samples), unit)


@dataclass(frozen=True)
class Row:
    """One line of the table: ours against a peer, and the goal it answers."""

    goal_id: str
    what: str
    ours: Stat | None
    peer_name: str = ""
    peer: Stat | None = None
    ratio: float | None = None  # ours / peer, medians
    goal: str = ""
    met: bool | None = None  # None: the goal is not a number this row can settle
    note: str = ""


@dataclass(frozen=True)
class Curve:
    """A scaling curve: y (median, and p90 where there is one) against x, per series."""

    key: str  # the PNG's name: <goal>-<key>.png
    title: str
    x_label: str
    y_label: str
    x: list[float]
    series: dict[str, list[float]]
    guides: dict[str, list[float]] = field(default_factory=dict)  # dashed: goals, floors


@dataclass(frozen=True)
class Outcome:
    """One benchmark's result; ``skipped`` is the one line saying why it did not run."""

    goal_id: str
    title: str
    rows: list[Row] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)  # contender -> samples
    sample_unit: str = "ms"
    curves: list[Curve] = field(default_factory=list)
    skipped: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)


def skipped(goal_id: str, title: str, why: str) -> Outcome:
    why = (why.strip().splitlines() or ["no reason given"])[0]  # one line, in a table cell
    print(f"{goal_id} skipped: {why}", flush=True)
    return Outcome(goal_id, title, skipped=why)


def ratio(ours: Stat, peer: Stat) -> float:
    return ours.median / peer.median


def ms(seconds: list[float]) -> list[float]:
    return [s * 1000 for s in seconds]


# -- the machine -------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def loadavg() -> str:
    """/proc/loadavg's three averages and running/total tasks, as the kernel writes them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:4])


def package_version(name: str) -> str:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", name],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return "not installed"
    return out.stdout.strip() or "not installed"


def machine() -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "cni": package_version("containernetworking-plugins"),
    }


def git_head() -> str:
    out = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or "unknown"


# -- the results file --------------------------------------------------------------------


def outcome_to_json(outcome: Outcome) -> dict[str, Any]:
    return asdict(outcome)


def outcome_from_json(data: dict[str, Any]) -> Outcome:
    def stat_of(value: dict[str, Any] | None) -> Stat | None:
        return None if value is None else Stat(**value)

    rows = [
        Row(**{**r, "ours": stat_of(r["ours"]), "peer": stat_of(r["peer"])}) for r in data["rows"]
    ]
    curves = [Curve(**c) for c in data["curves"]]
    return Outcome(**{**data, "rows": rows, "curves": curves})


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps(data, indent=1) + "\n")
    staging.replace(path)
