"""The rig's ``k8s`` family on a NIC lab's real kernel (the sriov tier's hosts; the vm
tier's guest): a pod whose claim is a VF topology, with real igbvf VFs moved into a
real pod namespace, in the kubelet's order, through the coordinator's pod side and over
every real wire (``KubeletSim``, ``FakeAPIServer``, ``NRIRuntimeSim``); and the
coordinator crashed at a seeded sample of the adapter boundaries.

vf-bond is vf-bond-vlan without the VLAN (igb's VFs refuse a VLAN on their bond; see
tests/rig/test_nic_lab_crashes.py). Each session lends the machine's PFs and VF 0 of
each; the machine's own namespace and its PFs' VF tables must end as they began."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import allure
import pytest

from harness.k8s.pod_lifecycle import (
    NodeFactory,
    pod_crash_run,
    pod_reference,
    pod_scenario_run,
)
from harness.k8s.wire_node import wire_scenario_run
from harness.pytest_plugin import RigStats
from harness.scenarios import SEED_ENV, start_state_seed
from labs import AgentLab, Node
from plugins.sdk.runner import CrashPoints

SEED = start_state_seed()
REPRODUCE = f"starting state seed {SEED}: reproduce with {SEED_ENV}={SEED}"
TOPOLOGY = "sdk-vf-bond"
SCENARIOS = ("order", "kubelet-restart", "nri-timeout")
WIRE = ("order", "nri-timeout")
# Not "netns-deleted": a lab session's node is a namespace of the machine, and a VF whose
# pod namespace is deleted goes back to the machine's root namespace, out of the
# session (on a node it comes back to the node's); the fake and netns tiers run it.
CRASH_SAMPLE = 4
TIMEOUT_S = 900


@pytest.fixture(scope="module")
def lend(nic_lab: AgentLab) -> dict[str, str]:
    return nic_lab.lend_vfs(1)


@pytest.fixture(scope="module")
def root_unchanged(nic_lab: AgentLab, lend: dict[str, str]) -> Iterator[None]:
    before, tables = nic_lab.kernel.snapshot(), nic_lab.vf_tables()
    yield
    assert nic_lab.changes_since(before) == [], "the k8s runs changed the machine"
    assert nic_lab.vf_tables() == tables, "the k8s runs left a PF's VF table changed"


@pytest.fixture(scope="module")
def make_node(nic_lab: AgentLab, lend: dict[str, str], root_unchanged: None) -> NodeFactory:
    def make(root: Path, crash: CrashPoints) -> Node:
        return Node(nic_lab.session(lend=lend), root, coordinator_crash=crash)

    return make


def record(rig_stats: RigStats, steps: list[str], violations: list[str], title: str) -> None:
    with allure.step(title):
        for line in steps:
            with allure.step(line):
                pass
    rig_stats.add("k8s_lifecycles")
    rig_stats.add("invariant_violations", len(violations))


@pytest.mark.timeout(TIMEOUT_S)
def test_the_vf_pods_life_with_the_nodes_failures(
    make_node: NodeFactory, tmp_path: Path, rig_stats: RigStats
) -> None:
    failures = []
    for index, scenario in enumerate(SCENARIOS):
        run = pod_scenario_run(TOPOLOGY, scenario, tmp_path / str(index), make_node)
        record(rig_stats, run.steps, run.violations, f"{TOPOLOGY}: {scenario}")
        rig_stats.add("gate_refusals", run.gate_refusals)
        rig_stats.add("evictions", run.evictions)
        failures += [f"{scenario}: {v}" for v in run.violations]
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])


@pytest.mark.timeout(TIMEOUT_S)
def test_the_vf_pod_over_every_wire(
    make_node: NodeFactory, tmp_path: Path, rig_stats: RigStats
) -> None:
    failures = []
    for index, scenario in enumerate(WIRE):
        run = wire_scenario_run(TOPOLOGY, scenario, tmp_path / str(index), make_node)
        record(rig_stats, run.steps, run.violations, f"{TOPOLOGY} over the wire: {scenario}")
        allure.attach(run.api_requests, "API server requests", allure.attachment_type.TEXT)
        rig_stats.add("gate_refusals", run.gate_refusals)
        rig_stats.add("evictions", run.evictions)
        failures += [f"{scenario}: {v}" for v in run.violations]
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])


@pytest.mark.timeout(TIMEOUT_S)
def test_a_coordinator_crash_at_a_sample_of_adapter_boundaries(
    make_node: NodeFactory, tmp_path: Path, rig_stats: RigStats
) -> None:
    points = pod_reference(TOPOLOGY, tmp_path / "ref", make_node)
    picked = sorted(random.Random(f"{SEED}/k8s").sample(points, CRASH_SAMPLE), key=points.index)
    names = [str(p) for p in picked]
    print(f"\n{len(picked)} of {len(points)} adapter boundaries ({REPRODUCE}): {names}")
    failures = []
    for index, point in enumerate(picked):
        run = pod_crash_run(TOPOLOGY, point, tmp_path / str(index), make_node)
        rig_stats.add("adapter_crash_runs")
        rig_stats.add("k8s_lifecycles")
        rig_stats.add("invariant_violations", len(run.violations))
        failures += [f"{point} (crashed in {run.crashed_in}): {v}" for v in run.violations]
    assert not failures, "\n".join([REPRODUCE, *failures[:10]])
