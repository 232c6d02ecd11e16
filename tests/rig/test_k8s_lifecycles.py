"""The rig's ``k8s`` family: a pod's life on the node in the kubelet's order (claim
prepared, RunPodSandbox, CreateContainer through the readiness gate, StopPodSandbox,
NodeUnprepareResources, RemovePodSandbox) for the three topologies, on the run's lab,
under the Kubernetes node's failures (harness.k8s.pod_lifecycle.POD_SCENARIOS) and with
the coordinator crashed at every adapter boundary (its pod units' commits and its calls'
journal commits), in-process. Every run ends with the invariants: no container let
through without its networking in the pod (read from the kernel), nothing leaked or
foreign touched, every call and pod unit closed, no claim held.

Counters: ``k8s_lifecycles``, ``adapter_crash_runs``, ``gate_refusals``, ``evictions``
and ``invariant_violations``. A topology a tier's labs cannot run skips with one line:
on netns the kernel may lack ipvlan, and vf-bond-vlan needs VFs that neither a NetnsLab
nor a vm session from ``lab_factory`` lends; the NIC hosts are not run yet."""

from __future__ import annotations

import random
import subprocess
from collections.abc import Callable
from pathlib import Path

import allure
import pytest

from harness.k8s.pod_lifecycle import (
    POD_SCENARIOS,
    TOPOLOGY_FILES,
    NodeFactory,
    pod_crash_run,
    pod_reference,
    pod_scenario_run,
)
from harness.pytest_plugin import RigStats
from harness.scenarios import SEED_ENV, start_state_seed
from labs import Lab, Node
from plugins.sdk.runner import CrashPoints, Owner

SEED = start_state_seed()
REPRODUCE = f"starting state seed {SEED}: reproduce with {SEED_ENV}={SEED}"
# Crash runs per topology on the tiers whose labs are slow to make (seeded, logged);
# the fake tier crashes at every point.
SAMPLE = 8
NO_VFS = dict.fromkeys(
    ("sdk-vf-bond-vlan", "sdk-vf-bond"),
    "needs SR-IOV VFs, which this tier's labs do not lend (tests/rig/test_k8s_nic_lab.py)",
)


def node_factory(lab_factory: Callable[[], Lab]) -> NodeFactory:
    def make(root: Path, crash: CrashPoints) -> Node:
        return Node(lab_factory(), root, coordinator_crash=crash)

    return make


def kernel_has(module: str) -> bool:
    """The running kernel has (or can load) ``module``."""
    if Path(f"/sys/module/{module}").exists():
        return True
    loaded = subprocess.run(["modprobe", module], capture_output=True, check=False)
    return loaded.returncode == 0


def runnable(request: pytest.FixtureRequest, topology: str) -> None:
    tier = str(request.node.callspec.params["lab_factory"]).partition("/")[0]
    if tier in ("netns", "vm") and topology in NO_VFS:
        # A NetnsLab has no VFs; a vm session from lab_factory lends none (the vm tier's
        # VF runs go through nic_lab).
        pytest.skip(f"{tier} tier: {topology} {NO_VFS[topology]}")
    if tier == "netns" and topology == "sdk-ipvlan" and not kernel_has("ipvlan"):
        pytest.skip("netns tier: sdk-ipvlan needs the ipvlan module (the vm tier has it)")
    if tier.startswith("sriov"):
        pytest.skip("sriov tier: the k8s family is not yet run on NIC hosts (issue 27's notes)")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("topology", sorted(TOPOLOGY_FILES))
def test_every_scenario_of_the_pods_life(
    request: pytest.FixtureRequest,
    topology: str,
    lab_factory: Callable[[], Lab],
    tmp_path: Path,
    rig_stats: RigStats,
) -> None:
    runnable(request, topology)
    print(f"\nk8s lifecycles of {topology}: {REPRODUCE}")
    failures = []
    for index, scenario in enumerate(POD_SCENARIOS):
        with allure.step(f"{topology}: {scenario}"):
            run = pod_scenario_run(
                topology, scenario, tmp_path / str(index), node_factory(lab_factory)
            )
            for line in run.steps:  # the pod's life as the report's steps
                with allure.step(line):
                    pass
        rig_stats.add("k8s_lifecycles")
        rig_stats.add("gate_refusals", run.gate_refusals)
        rig_stats.add("evictions", run.evictions)
        rig_stats.add("invariant_violations", len(run.violations))
        failures += [f"{scenario}: {v}" for v in run.violations]
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])


@pytest.mark.timeout(900)
@pytest.mark.parametrize("topology", sorted(TOPOLOGY_FILES))
def test_a_coordinator_crash_at_every_adapter_boundary(
    request: pytest.FixtureRequest,
    topology: str,
    lab_factory: Callable[[], Lab],
    tmp_path: Path,
    rig_stats: RigStats,
) -> None:
    runnable(request, topology)
    make = node_factory(lab_factory)
    points = pod_reference(topology, tmp_path / "ref", make)
    assert len(points) == len(set(points)), "crash points must be unique"
    assert {p.owner for p in points} == {Owner.PODS, Owner.COORDINATOR}
    tier = str(request.node.callspec.params["lab_factory"]).partition("/")[0]
    if tier != "fake":
        rng = random.Random(SEED)
        points = sorted(rng.sample(points, min(SAMPLE, len(points))), key=points.index)
        print(
            f"\n{tier}: {len(points)} adapter boundaries of {topology} (seed {SEED}): {[str(p) for p in points]}"
        )
    failures = []
    for index, point in enumerate(points):
        run = pod_crash_run(topology, point, tmp_path / str(index), make)
        rig_stats.add("adapter_crash_runs")
        rig_stats.add("k8s_lifecycles")
        rig_stats.add("gate_refusals", run.gate_refusals)
        rig_stats.add("invariant_violations", len(run.violations))
        failures += [f"{point} (crashed in {run.crashed_in}): {v}" for v in run.violations]
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
