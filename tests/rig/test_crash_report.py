"""The report shows the crashes: a step per crash run (a failed one with its evidence), a
crash matrix per topology, and each test under its lab and family with a true host label."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.coordinator_crash import coordinator_crash_run
from harness.crash import CrashSuite
from harness.crash_log import CrashLog, CrashRun, read_runs
from harness.crash_matrix import matrix_csv, matrix_html, write_matrices
from harness.pytest_plugin import RigStats
from harness.report_labels import family_of
from harness.scenarios import TOPOLOGIES
from plugins.coordinator import CoordinatorJournal
from plugins.sdk.runner import UNSCOPED, CrashPoint, Owner, Phase, PhaseKind

from .conftest import References


def results_in(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*-result.json"))]


def labels(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(label["name"], label["value"]) for label in result["labels"]]


def test_a_run_that_breaks_an_invariant_carries_its_kernel_diff_and_journal_rows(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    point = CrashPoint(
        "ConnectNetwork",
        "att-1:secondary:ConnectNetwork:g1",
        UNSCOPED,
        Phase.commit(PhaseKind.AFTER_COMMIT, "record_call"),
        Owner.COORDINATOR,
    )
    good = coordinator_crash_run("macvlan", point, "cleanup", tmp_path / "good")
    assert good.ok
    assert good.evidence == {}, "a run that passed attaches nothing"

    def cleaned_without_closing(
        self: CoordinatorJournal, operation_id: str, receipt: object
    ) -> list[str]:
        self.finish_call(operation_id, "cleaned", receipt)
        return []

    monkeypatch.setattr(CoordinatorJournal, "finish_cleanup", cleaned_without_closing)
    bad = coordinator_crash_run("macvlan", point, "cleanup", tmp_path / "bad")
    assert not bad.ok
    assert set(bad.evidence) == {"kernel diff", "journal rows"}
    rows = bad.evidence["journal rows"].splitlines()
    assert "att-1:secondary:ConnectNetwork:g1  macvlan  ConnectNetwork  requested" in rows
    assert bad.evidence["kernel diff"] == "(the kernel equals its first snapshot)"


RECORDING_TEST = """
import pytest
from harness.crash import RunResult
from harness.crash_log import CrashLog

class Counts:
    def __init__(self):
        self.counts = {}
    def add(self, key, n=1):
        self.counts[key] = self.counts.get(key, 0) + n

def test_two_runs():
    counts = Counts()
    log = CrashLog(counts, "fake", "t")
    log.record("macvlan", "in-process", "retry", 0, RunResult("P/one", "retry", 1, "prepare"), 0.1)
    bad = RunResult(
        "P/two", "cleanup", 1, "connect", ["kernel differs: ~ link eth1: mtu"], "",
        {"kernel diff": "~ link eth1: mtu", "journal rows": "op-1  links  ConnectNetwork  requested"},
    )
    log.record("macvlan", "in-process", "cleanup", 1, bad, 0.2)
    assert counts.counts == {"crash_runs_inprocess": 2, "invariant_violations": 1}

@pytest.mark.netns
def test_on_the_running_kernel():
    pass
"""


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """A repository of two tests run with an Allure directory: one records two crash runs
    (one failed), one is of the netns tier."""
    root = tmp_path_factory.mktemp("repo")
    (root / "tests" / "conformance").mkdir(parents=True)
    (root / "tests" / "conformance" / "test_recording.py").write_text(RECORDING_TEST)
    results = root / "allure-results"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"),
            *("-m", "fake or netns", f"--alluredir={results}", "tests"),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return results_in(results)


def test_each_crash_run_is_a_step_and_a_failed_one_carries_its_evidence(
    small_run: list[dict[str, Any]],
) -> None:
    (recording,) = [r for r in small_run if r["name"] == "test_two_runs"]
    ok, bad = recording["steps"]
    params = {p["name"]: p["value"] for p in ok["parameters"]}
    assert (params["point"], params["path"], params["outcome"]) == ("P/one", "retry", "ok")
    assert ok["status"] == "passed"
    assert not ok.get("attachments"), "a run that passed attaches nothing"
    assert bad["status"] == "failed"
    assert {p["name"]: p["value"] for p in bad["parameters"]}["outcome"] == "1 invariant violation"
    assert "kernel differs: ~ link eth1: mtu" in bad["statusDetails"]["message"]
    assert [a["name"] for a in bad["attachments"]] == ["kernel diff", "journal rows"]


def test_the_tree_is_lab_then_family_then_file_and_the_host_is_the_tiers(
    small_run: list[dict[str, Any]],
) -> None:
    by_name = {r["name"]: labels(r) for r in small_run}
    fake, netns = by_name["test_two_runs"], by_name["test_on_the_running_kernel"]
    for name in ("parentSuite", "suite", "subSuite", "host"):
        assert [n for n, _ in fake].count(name) == 1, f"{name} labelled twice: {fake}"
    assert ("parentSuite", "fake") in fake
    assert ("parentSuite", "netns") in netns
    assert ("suite", "conformance") in fake
    assert ("subSuite", "test_recording") in fake
    assert ("host", "fakekernel (model)") in fake, "a fake-tier case names the model"
    assert ("host", f"{socket.gethostname()} (netns)") in netns


@pytest.mark.parametrize(
    ("path", "family"),
    [
        ("tests/conformance/test_suite.py", "conformance"),
        ("tests/rig/test_topology_crashes.py", "crashes"),
        ("tests/rig/test_rig_stats.py", "rig"),
        ("tests/e2e/test_topologies.py", "topologies"),
        ("tests/differential/test_differential.py", "differential"),
        ("tests/unit/test_plan.py", "unit"),
        ("suite/test_mine.py", "suite"),
    ],
)
def test_families(path: str, family: str) -> None:
    assert family_of(path) == family


def run(name: str, column: str, order: int, ok: bool = True, topology: str = "macvlan") -> CrashRun:
    """A run at the point ``name`` renders (as the run log holds it)."""
    outcome = "ok" if ok else "2 invariant violations"
    return CrashRun("fake", topology, CrashPoint.parse(name), order, column, outcome, ok, 0.1, "t")


def test_the_matrix_has_a_row_per_point_in_the_lifecycles_order_and_a_column_per_path() -> None:
    runs = [
        run("RemoveNetwork/att-1:x/-/intent.after-commit", "retry", 2),
        run("NodePrepare/claim-1.x/-/intent.before-commit", "cleanup", 0),
        run("NodePrepare/claim-1.x/-/intent.before-commit", "retry", 0),
        run("ConnectNetwork/att-1:x/-/intent.before-commit", "SIGKILL", 1, ok=False),
        run("Coordinator/NodePrepare/claim-1/claim.after-commit", "retry", 0),
    ]
    lines = matrix_csv(runs).splitlines()
    assert lines[0] == "crash point,retry,cleanup,SIGKILL"
    assert [line.split(",")[0] for line in lines[1:]] == [
        "NodePrepare/claim-1.x/-/intent.before-commit",
        "ConnectNetwork/att-1:x/-/intent.before-commit",
        "RemoveNetwork/att-1:x/-/intent.after-commit",
        "Coordinator/NodePrepare/claim-1/claim.after-commit",
    ], "the services' points in order, then the coordinator's"
    assert lines[1].split(",")[1:] == ["ok", "ok", ""], "a blank cell: not run there"
    assert lines[2].split(",")[1:] == ["", "", "2 invariant violations"]
    page = matrix_html("fake", "macvlan", runs)
    assert '<td class="bad">2 invariant violations</td>' in page
    assert "5 runs at 4 points" in page
    assert "<b>1 failed</b>" in page


def test_a_matrix_with_a_failed_run_is_a_failed_result(tmp_path: Path) -> None:
    runs = [
        run("NodePrepare/a/-/intent.after-commit", "retry", 0),
        run("NodePrepare/a/-/intent.after-commit", "cleanup", 0, ok=False),
    ]
    runs.append(run("NodePrepare/b/-/intent.after-commit", "retry", 0, topology="ipvlan"))
    write_matrices(tmp_path, runs)
    status = {r["name"]: r["status"] for r in results_in(tmp_path)}
    assert status == {"crash matrix: macvlan": "failed", "crash matrix: ipvlan": "passed"}
    (failed,) = [r for r in results_in(tmp_path) if r["status"] == "failed"]
    assert (
        failed["statusDetails"]["message"]
        == "cleanup at NodePrepare/a/-/intent.after-commit: 2 invariant violations"
    )


def test_every_topology_the_rig_crashed_gets_a_crash_matrix(
    references: References, tmp_path: Path
) -> None:
    """The rig's path: crash runs logged by test processes, matrices drawn after them."""
    log = CrashLog(RigStats(), "fake", "t", tmp_path / "log")
    log.directory.mkdir()  # type: ignore[union-attr]
    firsts = {}
    for topology in TOPOLOGIES:
        ref = references.plugin(topology)
        firsts[topology] = ref.points[0]
        for path in ("retry", "cleanup"):
            suite = CrashSuite(topology, ref, log)
            assert suite.every_point(path, tmp_path / topology / path, ref.points[:1]) == []
    results = tmp_path / "results"
    names = write_matrices(results, read_runs(tmp_path / "log"))
    assert sorted(names) == sorted(f"crash matrix: {t}" for t in TOPOLOGIES)
    for result in results_in(results):
        topology = result["name"].removeprefix("crash matrix: ")
        assert ("parentSuite", "fake") in labels(result)
        assert ("suite", "crashes") in labels(result)
        kinds = {a["type"]: results / a["source"] for a in result["attachments"]}
        assert set(kinds) == {"text/html", "text/csv"}
        assert kinds["text/csv"].read_text().splitlines() == [
            "crash point,retry,cleanup",
            f"{firsts[topology]},ok,ok",
        ]
