"""SIGKILL of the coordinator program serving a Kubernetes node, at a seeded sample of
the adapter boundaries of a pod's life (``harness.k8s.program_kill``), on the netns tier
(root: the program finds a sandbox's namespace by ``stat``, as on a node). The
in-process enumeration at every boundary (tests/rig/test_k8s_lifecycles.py) stays the
exhaustive one; this proves a real process death hides nothing from it, over the real
wires. Counters: ``adapter_crash_runs`` and ``crash_runs_sigkill``, ``k8s_lifecycles``,
``invariant_violations``."""

from __future__ import annotations

import random
from pathlib import Path

import allure
import pytest

from harness.k8s.pod_lifecycle import pod_reference
from harness.k8s.program_kill import K8sProgramRig
from harness.pytest_plugin import RigStats
from harness.scenarios import SEED_ENV, start_state_seed
from labs.netns import NetnsLab

pytestmark = pytest.mark.netns

SEED = start_state_seed()
REPRODUCE = f"starting state seed {SEED}: reproduce with {SEED_ENV}={SEED}"
TOPOLOGY = "sdk-macvlan"  # what every netns lab's kernel runs
SAMPLE = 6


@pytest.mark.timeout(900)
def test_sigkill_of_the_program_at_a_sample_of_adapter_boundaries(
    tmp_path: Path, rig_stats: RigStats
) -> None:
    points = pod_reference(TOPOLOGY, tmp_path / "ref")
    rng = random.Random(f"{SEED}/k8s-sigkill")
    picked = sorted(rng.sample(points, SAMPLE), key=points.index)
    names = [str(p) for p in picked]
    print(f"\nSIGKILL at {len(picked)} of {len(points)} adapter boundaries ({REPRODUCE}): {names}")
    rig = K8sProgramRig(tmp_path / "rig", NetnsLab(randomize=True))
    failures = []
    try:
        plain = rig.run(TOPOLOGY, None, 1)
        failures += [f"uncrashed: {v}" for v in plain.violations]
        for n, point in enumerate(picked, start=2):
            run = rig.run(TOPOLOGY, point, n)
            with allure.step(f"SIGKILL at {run.point} (in {run.killed_in})"):
                for line in run.steps:
                    with allure.step(line):
                        pass
            rig_stats.add("adapter_crash_runs")
            rig_stats.add("crash_runs_sigkill")
            rig_stats.add("k8s_lifecycles")
            rig_stats.add("invariant_violations", len(run.violations))
            failures += [f"{run.point} (killed in {run.killed_in}): {v}" for v in run.violations]
    finally:
        rig.close()
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
