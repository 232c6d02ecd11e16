"""The rig's command line: run the conformance suite against one lab, write the summary.

``python -m harness.rig --lab fake:// --alluredir reports/allure-results``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

TIER_MARKERS = {"fake": "fake", "netns": "netns", "vm": "vm", "sriov": "sriov"}


class _Outcomes:
    """Counts test outcomes (the call phase, or setup when it failed or skipped)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.counts[report.outcome] += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness.rig")
    parser.add_argument(
        "--lab", default="fake://", help="lab URL: fake://, netns://, vm://, sriov://INVENTORY"
    )
    parser.add_argument("--alluredir", default="reports/allure-results")
    parser.add_argument("--summary", default="reports/summary.json")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(argv)
    tier = args.lab.split("://", 1)[0]
    if tier not in TIER_MARKERS:
        parser.error(f"unknown lab URL scheme {tier!r}; expected one of {', '.join(TIER_MARKERS)}")
    outcomes = _Outcomes()
    started = time.monotonic()
    status = pytest.main(
        ["-m", TIER_MARKERS[tier], f"--alluredir={args.alluredir}", "-q", *args.pytest_args],
        plugins=[outcomes],
    )
    summary = {
        "tier": tier,
        "lab": args.lab,
        "crash_points_enumerated": 0,
        "crash_runs_inprocess": 0,
        "crash_runs_sigkill": 0,
        "compound_crash_runs": 0,
        "random_schedules": 0,
        "invariant_violations": 0,
        "tests_passed": outcomes.counts["passed"],
        "tests_failed": outcomes.counts["failed"],
        "tests_skipped": outcomes.counts["skipped"],
        "seconds": round(time.monotonic() - started, 2),
    }
    path = Path(args.summary)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
