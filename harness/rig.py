"""The rig's command line: run the conformance rig against one lab, write the summary.

``python -m harness.rig --lab fake:// --alluredir reports/allure-results``

Runs the tests of the lab's tier (``-m fake`` for ``fake://``), writes Allure results with
environment metadata and counters, each topology's crash matrix, and
``reports/summary.json`` with the run's figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from labs import METRICS_DIR_ENV

from .crash_log import read_runs
from .crash_matrix import write_matrices
from .labs import LabSpec, LabURLError, parse_lab_url, summary_path
from .pytest_plugin import SRIOV_GROUP_PROPERTY
from .report import write_environment
from .scenarios import start_state_seed
from .scraped_metrics import HookMetrics, scrape_textfiles
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
    """Counts test outcomes (xdist reports them to the controller too), in total and per
    SR-IOV group of hosts (``groups``: their names; a case's is in its report)."""

    def __init__(self, groups: list[str] | None = None) -> None:
        self.outcomes: Counter[str] = Counter()
        self.group_outcomes: dict[str, Counter[str]] = {name: Counter() for name in groups or []}
        self.stats = Gathered()
        self.metrics = HookMetrics()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.outcomes[report.outcome] += 1
            group = dict(report.user_properties).get(SRIOV_GROUP_PROPERTY)
            if group in self.group_outcomes:
                self.group_outcomes[group][report.outcome] += 1


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
    if collector.group_outcomes:
        # An SR-IOV run of several groups of hosts: each group's own figures (its cases'
        # outcomes; the counts of the worker that ran it).
        by_worker = {
            name: counts
            for groups, counts in collector.stats.sections.items()
            for name in groups.split(", ")
        }
        summary["sriov_sections"] = {
            name: {
                "tests_passed": outcomes["passed"],
                "tests_failed": outcomes["failed"],
                "tests_skipped": outcomes["skipped"],
                **{key: by_worker.get(name, {}).get(key, 0) for key in SUMMARY_COUNTS},
            }
            for name, outcomes in collector.group_outcomes.items()
        }
    # What a scraper read from the service processes' metrics after the run (the test
    # kit's processes publish a textfile each: labs.METRICS_DIR_ENV).
    summary["metrics"] = collector.metrics.summary()
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
        tests_rerun=collector.outcomes["rerun"],
        seconds=round(seconds, 1),
        crash_runs_per_second=round(runs / seconds, 2) if seconds else 0.0,
    )
    return summary


def parallel_args(tier: str, pytest_args: list[str], sriov_groups: int = 1) -> list[str]:
    """The fake tier runs on every core (pytest-xdist): its cases share nothing but the
    CPU (each its own kernel model, journal and sockets under its own tmp_path), and the
    counters each worker leaves are added up by ``gather``. An SR-IOV inventory of
    several groups of hosts (``Inventory.groups``) runs a worker per group, each case on
    its group's (``--dist loadgroup``: the cases carry their group's ``xdist_group``), so
    one worker boots, provisions, drives and tears down each group's hosts while the
    others do theirs. The other tiers share one machine's kernel (the netns lab's
    names, the VM guest) and run in one process. A run that says ``-n`` itself (``-n 0``:
    one process) keeps its choice.

    ``worksteal``: the tier's cases last from milliseconds to minutes, and with xdist's
    default split one worker was left with the last long ones while the other idled."""
    if any(a.startswith(("-n", "--numprocesses")) for a in pytest_args):
        return []
    if tier == "sriov" and sriov_groups > 1:
        return ["-n", str(sriov_groups), "--dist", "loadgroup"]
    if tier != "fake":
        return []
    if any(a.startswith(("--dist", "-d")) for a in pytest_args):
        return ["-n", "auto"]
    return ["-n", "auto", "--dist", "worksteal"]


def lab_reruns(tier: str, pytest_args: list[str]) -> list[str]:
    """The machine tiers' cases get one rerun on a new lab should their lab's agent stop
    answering (``harness.guest_watch``): a real kernel under emulation stalling is the
    lab's failure, not the code's. A run that says ``--lab-reruns`` itself keeps it."""
    if tier not in ("vm", "sriov") or any(a.startswith("--lab-reruns") for a in pytest_args):
        return []
    return ["--lab-reruns=1"]


MEMORY_FS = Path("/dev/shm")


MEMORY_FS_MIN_FREE = 2 << 30
"""Free bytes a RAM file system needs before the fake tier uses it: a container's
/dev/shm is often 64 MiB, which the tier's temporary files would fill (ENOSPC in the
middle of a crash run reads as a product failure)."""


def _free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def scratch_root(
    tier: str,
    pytest_args: list[str],
    mounts: Path = Path("/proc/mounts"),
    free_bytes: Callable[[Path], int] = _free_bytes,
) -> Path | None:
    """Where the fake tier's tests keep their journals and sockets: a RAM file system when
    the machine has one with room (None: another tier, a ``--basetemp`` of the run's own, or none).

    Every journal commit is an fsync (WAL, ``synchronous=FULL``), and the tier commits
    some hundred thousand times: on a disk that was more than half of a crash run's time.
    None of the tier's crashes needs it: an in-process crash or a SIGKILL leaves the page
    cache as it was. The plug pulls that do need it (the vm tier's power-loss runs) keep
    their guest's disk. SQLite, the journal's code and its pragmas are the same."""
    if tier != "fake" or any(a.startswith("--basetemp") for a in pytest_args):
        return None
    try:
        table = mounts.read_text()
    except OSError:
        return None
    for line in table.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[1] == str(MEMORY_FS) and fields[2] == "tmpfs":
            usable = os.access(MEMORY_FS, os.W_OK) and free_bytes(MEMORY_FS) >= MEMORY_FS_MIN_FREE
            return MEMORY_FS if usable else None
    return None


@contextlib.contextmanager
def scratch(root: Path | None) -> Iterator[list[str]]:
    """The pytest arguments that put the run's temporary files under ``root`` (none: where
    they were), and ``tempfile``'s default directory with them for the run."""
    if root is None:
        yield []
        return
    with tempfile.TemporaryDirectory(prefix="rig-", dir=root) as directory:
        saved_env, saved_default = os.environ.get("TMPDIR"), tempfile.tempdir
        os.environ["TMPDIR"] = tempfile.tempdir = directory  # xdist workers read TMPDIR
        try:
            yield [f"--basetemp={directory}/t"]
        finally:
            tempfile.tempdir = saved_default
            if saved_env is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = saved_env


def sriov_groups(spec: LabSpec) -> list[str]:
    """The names of the groups of hosts of the run's ``sriov://`` inventory (none: another
    tier, or an inventory that does not load, which the lab's fixture then reports)."""
    if spec.tier != "sriov":
        return []
    from labs.sriov import InventoryError, load_inventory

    from .sriov_labs import group_name

    try:
        groups = load_inventory(Path(spec.target)).groups()
    except (InventoryError, OSError):
        return []
    return [group_name(g) for g in groups]


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
    groups = sriov_groups(spec)
    collector = _Collector(groups if len(groups) > 1 else None)
    workers = parallel_args(spec.tier, args.pytest_args, len(groups))
    started = time.monotonic()
    root = scratch_root(spec.tier, args.pytest_args)
    if root is not None:
        print(f"rig: the fake tier's temporary files are on {root} (tmpfs)", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="rig-stats-") as stats_dir,
        # A service process that outlived its test may still write a textfile here.
        tempfile.TemporaryDirectory(
            prefix="rig-metrics-", ignore_cleanup_errors=True
        ) as metrics_dir,
        scratch(root) as basetemp,
    ):
        os.environ[STATS_DIR_ENV] = stats_dir
        os.environ[METRICS_DIR_ENV] = metrics_dir
        status = pytest.main(
            [
                "-m",
                spec.tier,
                f"--lab={args.lab}",
                f"--alluredir={results}",
                "-q",
                *workers,
                *lab_reruns(spec.tier, args.pytest_args),
                *basetemp,
                *args.pytest_args,
            ],
            plugins=[collector],
        )
        collector.stats = gather(Path(stats_dir))
        collector.metrics = scrape_textfiles(Path(metrics_dir))
        runs = read_runs(Path(stats_dir))
    # Each topology's crash matrix, from every test process's runs (harness.crash_matrix).
    write_matrices(results, runs)
    summary = summarize(spec.tier, args.lab, collector, time.monotonic() - started)
    # After the run, which knows its facts (the guest's kernel release, its QEMU) and counts.
    write_environment(results, args.lab, collector.stats.facts, summary)
    path = summary_path(Path(args.reports), args.lab)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
