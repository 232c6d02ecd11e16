"""SIGKILL of real service processes at a sample of the crash points (>= 10 %, >= 20)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.crash import reference
from harness.process_rig import ProcessRig, sample
from harness.pytest_plugin import RigStats
from harness.scenarios import TOPOLOGIES


@pytest.mark.timeout(1200)
def test_sigkill_sample(tmp_path: Path, rig_stats: RigStats) -> None:
    points = {t: reference(t, tmp_path / f"ref-{t}").points for t in TOPOLOGIES}
    chosen = sample(points)
    total = sum(len(p) for p in points.values())
    assert len(chosen) >= max(20, total // 10)
    rig = ProcessRig(tmp_path / "rig")
    failures = []
    try:
        for n, (topology, point) in enumerate(chosen, start=100):
            result = rig.run(topology, point, n)
            rig_stats.add("crash_runs_sigkill")
            rig_stats.add("invariant_violations", len(result.violations))
            if not result.ok:
                failures.append(f"{topology} {point}: {result.violations}")
    finally:
        rig.close()
    assert not failures, "\n".join(failures[:10])
