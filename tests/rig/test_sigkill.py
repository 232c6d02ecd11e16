"""SIGKILL of real service processes at a sample of the crash points (>= 10 %, >= 20), and of
the coordinator program at a seeded sample of its apply boundaries."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness.coordinator_crash import coordinator_reference, hook_of
from harness.coordinator_process import APPLY_HOOKS, CoordinatorRig, is_apply_boundary
from harness.crash import reference
from harness.process_rig import ProcessRig, sample
from harness.pytest_plugin import RigStats
from harness.scenarios import SEED_ENV, TOPOLOGIES, start_state_seed

SEED = start_state_seed()
REPRODUCE = f"seed {SEED}: reproduce with {SEED_ENV}={SEED}"


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


COORDINATOR_SAMPLE = 3  # coordinator SIGKILL runs per apply hook on the fake tier (seeded)


@pytest.mark.timeout(900)
def test_sigkill_the_coordinator_mid_apply(tmp_path: Path, rig_stats: RigStats) -> None:
    """The coordinator program SIGKILLed at a seeded sample of its apply boundaries (prepare
    and connect, all three topologies), then restarted: recovery completes or undoes the
    apply, a removal cleans, the invariants hold."""
    points = [
        (t, p)
        for t in TOPOLOGIES
        for p in coordinator_reference(t, tmp_path / f"ref-{t}").points
        if is_apply_boundary(p)
    ]
    rng = random.Random(f"{SEED}/coordinator-sigkill")
    chosen = sorted(
        (
            pick
            for hook in APPLY_HOOKS
            for pick in rng.sample(
                [tp for tp in points if hook_of(tp[1]) == hook], COORDINATOR_SAMPLE
            )
        ),
        key=points.index,
    )
    print(f"coordinator SIGKILL sample ({REPRODUCE}): {chosen}")
    rig = CoordinatorRig(tmp_path / "rig")
    failures = []
    try:
        for n, (topology, point) in enumerate(chosen, start=200):
            result = rig.run(topology, point, n)
            rig_stats.add("crash_runs_sigkill")
            rig_stats.add("invariant_violations", len(result.violations))
            if not result.ok:
                failures.append(f"{topology} {point}: {result.violations}")
    finally:
        rig.close()
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
