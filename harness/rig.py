"""The rig's command line: run the conformance rig against one lab, write the summary.

``python -m harness.rig --lab fake:// --alluredir reports/allure-results``

Runs the tests of the lab's tier (``-m fake`` for ``fake://``), writes Allure results with
environment metadata, and ``reports/summary.json`` with the run's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from .labs import LabURLError, parse_lab_url, summary_path
from .report import write_environment
from .scenarios import start_state_seed
from .stats import STATS_DIR_ENV, Gathered, gather

SUMMARY_COUNTS = (
    "crash_points_enumerated",
    "crash_runs_inprocess",
    "crash_runs_sigkill",
    "compound_crash_runs",
    "coordinator_crash_runs",
    "random_schedules",
    "invariant_violations",
    "io_faults_injected",
    "io_fault_violations",
)


class _Collector:
    """Counts test outcomes (xdist reports them to the controller too)."""

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.stats = Gathered()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.outcomes[report.outcome] += 1


def summarize(tier: str, lab: str, collector: _Collector, seconds: float) -> dict[str, Any]:
    # Every test process reads the same RIG_SEED (or the same default), so the seed the
    # labs' random starting states came from is known here without asking them.
    summary: dict[str, Any] = {"tier": tier, "lab": lab, "start_state_seed": start_state_seed()}
    counts = collector.stats.counts
    summary.update({key: counts.get(key, 0) for key in SUMMARY_COUNTS})
    # A tier's own figures (the vm tier's differential agreement, its power-loss runs)
    # and facts (the guest's kernel release, its boot seconds) follow the common ones.
    summary.update({key: counts[key] for key in sorted(counts) if key not in summary})
    summary.update(collector.stats.facts)
    runs = (
        summary["crash_runs_inprocess"]
        + summary["crash_runs_sigkill"]
        + summary["compound_crash_runs"]
        + summary["coordinator_crash_runs"]
    )
    summary.update(
        tests_passed=collector.outcomes["passed"],
        tests_failed=collector.outcomes["failed"],
        tests_skipped=collector.outcomes["skipped"],
        seconds=round(seconds, 1),
        crash_runs_per_second=round(runs / seconds, 2) if seconds else 0.0,
    )
    return summary


def parallel_args(tier: str, pytest_args: list[str]) -> list[str]:
    """The fake tier runs on every core (pytest-xdist): its cases share nothing but the
    CPU (each its own kernel model, journal and sockets under its own tmp_path), and the
    counters each worker leaves are added up by ``gather``. The other tiers share one
    machine's kernel (the netns lab's names, the VM guest, a lab host) and run in one
    process. A run that says ``-n`` itself (``-n 0``: one process) keeps its choice."""
    if tier != "fake" or any(a.startswith(("-n", "--numprocesses")) for a in pytest_args):
        return []
    return ["-n", "auto"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness.rig", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lab", default="fake://", help="fake://, netns://, vm://, sriov://INVENTORY"
    )
    parser.add_argument("--alluredir", default="reports/allure-results")
    parser.add_argument(
        "--reports", default="reports", help="where summary-<lab>.json goes (harness.summaries)"
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    try:
        spec = parse_lab_url(args.lab)
    except LabURLError as exc:
        parser.error(str(exc))
    results = Path(args.alluredir)
    collector = _Collector()
    workers = parallel_args(spec.tier, args.pytest_args)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rig-stats-") as stats_dir:
        os.environ[STATS_DIR_ENV] = stats_dir
        status = pytest.main(
            [
                "-m",
                spec.tier,
                f"--lab={args.lab}",
                f"--alluredir={results}",
                "-q",
                *workers,
                *args.pytest_args,
            ],
            plugins=[collector],
        )
        collector.stats = gather(Path(stats_dir))
    # After the run, which knows its facts (the guest's kernel release, its QEMU).
    write_environment(results, args.lab, collector.stats.facts)
    summary = summarize(spec.tier, args.lab, collector, time.monotonic() - started)
    path = summary_path(Path(args.reports), args.lab)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
