"""SIGKILL of real service processes at a sample of the crash points (>= 10 %, >= 20), and of
the coordinator program at a seeded sample of its apply boundaries.

Each sample is spread over several cases, each on a node of its own, so the fake tier's
workers share them out: the services' in ``SHARDS`` cases, the coordinator's in one per
apply hook. In one case the services' sample alone was the tier's longest test (30 runs,
two service starts each, one after another).
"""

from __future__ import annotations

import random
from functools import partial
from pathlib import Path

import pytest

from harness.coordinator_process import APPLY_HOOKS, CoordinatorRig, is_apply_boundary
from harness.crash_log import CrashLog
from harness.process_rig import ProcessRig, Run, sample, shards
from harness.scenarios import SEED_ENV, TOPOLOGIES, start_state_seed
from plugins.sdk.runner import CrashPoint

from .conftest import References

SEED = start_state_seed()
REPRODUCE = f"seed {SEED}: reproduce with {SEED_ENV}={SEED}"
SHARDS = 5  # cases the service sample is run in (each starts a fake kernel and 3 services)


def service_sample(references: References) -> list[tuple[str, CrashPoint]]:
    points = {t: references.plugin(t).points for t in TOPOLOGIES}
    chosen = sample(points)
    total = sum(len(p) for p in points.values())
    assert len(chosen) >= max(20, total // 10)
    return chosen


def test_the_service_sample_is_run_once_whole(references: References) -> None:
    chosen = service_sample(references)
    cases = shards(chosen, SHARDS)
    runs = sorted(run for case in cases for run in case)
    assert runs == [(n, t, p) for n, (t, p) in enumerate(chosen, start=100)]
    assert all(cases), "an empty case"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_sigkill_sample(
    shard: int, references: References, tmp_path: Path, crash_log: CrashLog
) -> None:
    plan: list[Run] = shards(service_sample(references), SHARDS)[shard]
    print(f"SIGKILL runs {[n for n, _, _ in plan]} of the sample ({REPRODUCE})")
    rig = ProcessRig(tmp_path / "rig")
    failures = []
    try:
        results = rig.runs(plan)  # each run happens as it is asked for
        for _, topology, point in plan:
            order = references.plugin(topology).points.index(point)
            result = crash_log.run(topology, "SIGKILL", "SIGKILL", order, partial(next, results))
            if not result.ok:
                failures.append(f"{topology} {point}: {result.violations}")
    finally:
        rig.close()
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])


COORDINATOR_SAMPLE = 3  # coordinator SIGKILL runs per apply hook on the fake tier (seeded)


def coordinator_sample(references: References) -> list[tuple[str, CrashPoint]]:
    points = [
        (t, p) for t in TOPOLOGIES for p in references.coordinator(t).points if is_apply_boundary(p)
    ]
    rng = random.Random(f"{SEED}/coordinator-sigkill")
    return sorted(
        (
            pick
            for hook in APPLY_HOOKS
            for pick in rng.sample([tp for tp in points if tp[1].hook == hook], COORDINATOR_SAMPLE)
        ),
        key=points.index,
    )


@pytest.mark.timeout(600)
@pytest.mark.parametrize("hook", APPLY_HOOKS)
def test_sigkill_the_coordinator_mid_apply(
    hook: str, references: References, tmp_path: Path, crash_log: CrashLog
) -> None:
    """The coordinator program SIGKILLed at a seeded sample of its apply boundaries (prepare
    and connect, all three topologies), then restarted: recovery completes or undoes the
    apply, a removal cleans, the invariants hold. One case per hook, each numbering its
    runs as the whole sample does."""
    chosen = coordinator_sample(references)
    plan = [(n, t, p) for n, (t, p) in enumerate(chosen, start=200) if p.hook == hook]
    assert len(plan) == COORDINATOR_SAMPLE
    names = [(t, str(p)) for t, p in chosen]
    print(
        f"coordinator SIGKILL sample ({REPRODUCE}): {names}; this case: {[n for n, _, _ in plan]}"
    )
    rig = CoordinatorRig(tmp_path / "rig")
    failures = []
    try:
        for n, topology, point in plan:
            order = references.coordinator(topology).points.index(point)
            run = partial(rig.run, topology, point, n)
            result = crash_log.run(topology, "SIGKILL", "SIGKILL", order, run)
            if not result.ok:
                failures.append(f"{topology} {point}: {result.violations}")
    finally:
        rig.close()
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
