"""Each crash run as a CI reader sees it: counted, one Allure step, one line of the run log.

``CrashLog.record`` is the one place a crash run is accounted for, whoever ran it
(``harness.crash.CrashSuite``, the SIGKILL rigs, the coordinator's crash tests):

- the rig's counter of its kind (``crash_runs_inprocess``, ``compound_crash_runs``,
  ``coordinator_crash_runs``, ``crash_runs_sigkill``) and ``invariant_violations``;
- an Allure step in the running test, titled with the column, the point and the
  outcome, with those as parameters; a failed run's step is failed and carries the
  run's evidence (``RunResult.evidence``: the violations, the kernel diff, the journal
  rows). A run that passed attaches nothing: the fake tier makes about a thousand runs,
  and the report stays small;
- a JSON line in ``<directory>/crash-runs-<pid>.jsonl`` (the rig's statistics directory,
  ``harness.stats``), from which ``harness.crash_matrix`` draws each topology's matrix
  once every test process has finished.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from uuid import uuid4

import allure
from allure_commons import plugin_manager

from plugins.sdk.runner import CrashPoint

from .crash import Counters, RunResult

COUNTERS = {
    "in-process": "crash_runs_inprocess",
    "compound": "compound_crash_runs",
    "coordinator": "coordinator_crash_runs",
    "SIGKILL": "crash_runs_sigkill",
}
"""The kinds of crash run, each with the rig's counter of it."""

LOG_GLOB = "crash-runs-*.jsonl"


@dataclass(frozen=True)
class CrashRun:
    """One crash run, as the matrix shows it."""

    lab: str  # the report's lab (harness.report.lab_label): the tree's first level
    topology: str
    point: CrashPoint
    order: int  # the point's place in its reference run (rows follow the lifecycle)
    column: str  # retry, cleanup, undo crash, recovery crash, SIGKILL
    outcome: str
    ok: bool
    seconds: float
    test: str  # the pytest node id that ran it


def outcome(result: RunResult) -> str:
    """A run's outcome in a few words: ``ok`` or what went wrong first."""
    if result.crashes == 0 and result.violations:
        return "not reached"
    if result.violations:
        n = len(result.violations)
        return f"{n} invariant violation{'s' if n > 1 else ''}"
    if result.replay_mismatch:
        return "replay differs"
    return "ok" if result.crashes < 2 else "ok (crashed twice)"


class CrashRunFailed(AssertionError):
    """What fails a crash run's step (an AssertionError: Allure shows it as failed)."""


@dataclass
class CrashLog:
    """Where a test's crash runs are accounted for: ``stats`` (the rig's counters),
    ``lab`` and ``test`` (the running test's lab and node id) and ``directory`` (the run
    log's; None: no log, as outside the rig). It counts like ``stats`` (``add``), so it
    goes wherever a ``Counters`` does."""

    stats: Counters
    lab: str = ""
    test: str = ""
    directory: Path | None = None

    def add(self, key: str, n: int = 1) -> None:
        self.stats.add(key, n)

    def run(
        self, topology: str, kind: str, column: str, order: int, call: Callable[[], RunResult]
    ) -> RunResult:
        """``call()``, timed and recorded."""
        started = time.monotonic()
        result = call()
        self.record(topology, kind, column, order, result, time.monotonic() - started)
        return result

    def record(
        self,
        topology: str,
        kind: str,
        column: str,
        order: int,
        result: RunResult,
        seconds: float,
    ) -> None:
        """A run of ``kind`` (a key of ``COUNTERS``) shown in the matrix's ``column``;
        ``order`` is its point's place in the reference run."""
        self.stats.add(COUNTERS[kind])
        self.stats.add("invariant_violations", len(result.violations))
        run = CrashRun(
            lab=self.lab,
            topology=topology,
            point=result.point,
            order=order,
            column=column,
            outcome=outcome(result),
            ok=result.ok,
            seconds=round(seconds, 3),
            test=self.test,
        )
        _step(run, kind, result)
        if self.directory is not None:
            with (self.directory / f"crash-runs-{os.getpid()}.jsonl").open("a") as log:
                log.write(json.dumps(to_json(run)) + "\n")


def _step(run: CrashRun, kind: str, result: RunResult) -> None:
    """The run's Allure step (nothing when no Allure report is being written).

    Emitted once the run is over, as its parameters include the outcome (the step's own
    duration is then nil; ``seconds`` says how long the run took). Allure's step API
    takes parameters only through its hooks (``allure.step`` as a context takes a
    title alone)."""
    uuid = uuid4().hex
    params = {
        "topology": run.topology,
        "point": str(run.point),
        "path": run.column,
        "kind": kind,
        "outcome": run.outcome,
        "crashes": str(result.crashes),
        "crashed in": result.crashed_phase,
        "seconds": f"{run.seconds:.2f}",
    }
    plugin_manager.hook.start_step(
        uuid=uuid, title=f"{run.column}: {run.point} -> {run.outcome}", params=params
    )
    failure = None
    if not run.ok:
        problems = [*result.violations, *filter(None, [result.replay_mismatch])]
        failure = CrashRunFailed("\n".join(problems))
        for name, text in result.evidence.items():
            allure.attach(text, name, allure.attachment_type.TEXT)
    plugin_manager.hook.stop_step(
        uuid=uuid,
        exc_type=None if failure is None else type(failure),
        exc_val=failure,
        exc_tb=None,
    )


def to_json(run: CrashRun) -> dict[str, Any]:
    """A run as a line of the log: its point by its name (``CrashPoint.parse`` reads it)."""
    return {f.name: getattr(run, f.name) for f in fields(run)} | {"point": str(run.point)}


def from_json(line: dict[str, Any]) -> CrashRun:
    return CrashRun(**{**line, "point": CrashPoint.parse(line["point"])})


def read_runs(directory: Path) -> list[CrashRun]:
    """Every run the test processes logged in ``directory``."""
    runs = []
    for path in sorted(directory.glob(LOG_GLOB)):
        for line in path.read_text().splitlines():
            if line:
                runs.append(from_json(json.loads(line)))
    return runs
