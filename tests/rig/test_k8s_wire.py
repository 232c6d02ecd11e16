"""The rig's ``k8s`` family over every real wire: the coordinator's ``KubernetesNode``
with the kubelet (``KubeletSim``), the API server (``FakeAPIServer`` under the
unmodified client) and the runtime (``NRIRuntimeSim``, fail-open as containerd) as its
peers, on the run's lab, one pod per topology and failure
(``harness.k8s.wire_node.WIRE_SCENARIOS``: a kubelet restart, an NRI timeout and a
dropped connection (what started ungated is evicted, and the recreated container passes
the gate), the pod's namespace deleted before StopPodSandbox, a claim replaced, the API
server unavailable). Every run ends with the invariants of ``wire_node``; the steps and
the API server's request log are attached to the report.

Counters: ``k8s_lifecycles``, ``gate_refusals``, ``evictions``, ``invariant_violations``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import allure
import pytest

from harness.k8s.pod_lifecycle import TOPOLOGY_FILES
from harness.k8s.wire_node import WIRE_SCENARIOS, wire_scenario_run
from harness.pytest_plugin import RigStats
from harness.scenarios import SEED_ENV, start_state_seed
from labs import Lab

from .test_k8s_lifecycles import node_factory, runnable

SEED = start_state_seed()
REPRODUCE = f"starting state seed {SEED}: reproduce with {SEED_ENV}={SEED}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("topology", sorted(TOPOLOGY_FILES))
def test_every_failure_of_the_node_over_the_wire(
    request: pytest.FixtureRequest,
    topology: str,
    lab_factory: Callable[[], Lab],
    tmp_path: Path,
    rig_stats: RigStats,
) -> None:
    runnable(request, topology)
    failures = []
    for index, scenario in enumerate(WIRE_SCENARIOS):
        with allure.step(f"{topology}: {scenario}"):
            run = wire_scenario_run(
                topology, scenario, tmp_path / str(index), node_factory(lab_factory)
            )
            for line in run.steps:
                with allure.step(line):
                    pass
            allure.attach(run.api_requests, "API server requests", allure.attachment_type.TEXT)
        rig_stats.add("k8s_lifecycles")
        rig_stats.add("gate_refusals", run.gate_refusals)
        rig_stats.add("evictions", run.evictions)
        rig_stats.add("invariant_violations", len(run.violations))
        failures += [f"{scenario}: {v}" for v in run.violations]
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
