"""The rig adds up what every test process counted (harness.stats.gather): a run spread
over workers reports the same counts as one process that ran every case."""

from __future__ import annotations

import json
from pathlib import Path

from harness.stats import gather

CASES = [
    {"crash_points_enumerated": 66, "crash_runs_inprocess": 66},
    {"crash_runs_inprocess": 66, "invariant_violations": 0},
    {"crash_runs_sigkill": 32, "compound_crash_runs": 14},
    {"random_schedules": 244, "invariant_violations": 1},
]


def write(directory: Path, worker: str, counts: dict[str, int], facts: dict[str, object]) -> None:
    directory.mkdir(exist_ok=True)
    (directory / f"stats-{worker}.json").write_text(json.dumps({"counts": counts, "facts": facts}))


def summed(cases: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for case in cases:
        for key, n in case.items():
            total[key] = total.get(key, 0) + n
    return total


def test_workers_counts_add_up_to_the_serial_runs(tmp_path: Path) -> None:
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    write(serial, "main", summed(CASES), {"kernel_release": "fake"})
    # xdist: the controller runs no case; each worker ran its share.
    write(parallel, "main", {}, {})
    write(parallel, "gw0", summed(CASES[::2]), {"kernel_release": "fake"})
    write(parallel, "gw1", summed(CASES[1::2]), {"kernel_release": "fake"})
    one, spread = gather(serial), gather(parallel)
    assert spread.counts == one.counts == summed(CASES)
    assert spread.facts == one.facts == {"kernel_release": "fake"}


def test_other_files_in_the_directory_are_not_counted(tmp_path: Path) -> None:
    write(tmp_path, "gw0", {"crash_runs_inprocess": 3}, {})
    (tmp_path / "notes.json").write_text(json.dumps({"counts": {"crash_runs_inprocess": 9}}))
    assert gather(tmp_path).counts == {"crash_runs_inprocess": 3}
