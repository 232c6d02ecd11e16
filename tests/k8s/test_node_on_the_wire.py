"""The coordinator as a Kubernetes node, every peer on its real wire: the kubelet
(``KubeletSim``: plugin watcher, registration, DRA v1 over the advertised socket), the API
server (``FakeAPIServer`` under the unmodified lightkube client) and the runtime
(``NRIRuntimeSim``: mux + ttrpc of its own), over the fake lab's kernel. A pod's life in
the kubelet's order for each topology: the claim's status says where its interface is,
the gate admits the container, and everything is back as it was at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import allure
import pytest

from harness.k8s.kubelet import PodClaim
from harness.k8s.nri_runtime import SimSandbox
from harness.k8s.pod_lifecycle import TOPOLOGY_FILES, scheduled_claim
from harness.k8s.wire_node import DEADLINE_S, DRIVER, claim_object, wired_node
from harness.k8s.wire_node import WiredNode as Wired

__all__ = ["DEADLINE_S", "DRIVER", "Wired", "claim_object", "wired"]

pytestmark = pytest.mark.fake


@pytest.fixture
def wired(tmp_path: Path) -> Iterator[Wired]:
    """The coordinator's Kubernetes node on the fake lab, its three peers on their wires."""
    with wired_node(tmp_path) as node:
        try:
            yield node
        finally:
            # What the client library asked of the API server, for the report.
            allure.attach(
                node.api.request_log_text(), "API server requests", allure.attachment_type.TEXT
            )


@pytest.mark.parametrize("topology", sorted(TOPOLOGY_FILES))
def test_a_pods_life_over_the_wire(wired: Wired, topology: str) -> None:
    published = {d["name"] for s in wired.api.slices() for d in s["spec"]["devices"]}
    assert {d.device for d in scheduled_claim(topology, "u", "p").devices} <= published
    before = wired.node.snapshot()
    uid, pod_uid = "0d6f3c1e-1111-4a2b-8c3d-000000000001", "pod-uid-1"
    wired.api.put_claim(claim_object(topology, uid, pod_uid))
    pod_claims = [PodClaim(DRIVER, uid, "default", "net")]

    prepared = wired.kubelet.prepare(pod_uid, pod_claims)
    assert prepared[uid].error == "", prepared
    netns = wired.node.sandbox().namespace.path
    sandbox = SimSandbox("sandbox-1", "web", "default", pod_uid, netns)
    ran = wired.runtime.run_pod_sandbox(sandbox)
    assert ran.refusal is None, ran
    created = wired.runtime.create_container("sandbox-1", "app")
    assert created.refusal is None, created

    status = (wired.api.claim("default", "net") or {}).get("status", {})
    devices = status.get("devices", [])
    assert devices, status
    assert all(d["driver"] == DRIVER for d in devices), status
    assert all(d.get("networkData", {}).get("interfaceName") for d in devices), devices

    wired.runtime.stop_pod_sandbox("sandbox-1")
    assert wired.kubelet.unprepare(pod_uid, pod_claims) == {uid: ""}
    wired.runtime.remove_pod_sandbox("sandbox-1")
    assert wired.node.snapshot() == before
    assert not (wired.api.claim("default", "net") or {}).get("status", {}).get("devices")
    assert wired.k8s.pods.counters.gate_passes == 1


def test_the_kubelet_streams_the_devices_health(wired: Wired) -> None:
    """Every device a configured topology can use is reported, healthy while its
    plugins are ready."""
    with wired.kubelet.watch_health(DRIVER) as watch:
        update = watch.next_update(DEADLINE_S)
    devices = {(pool, device): health for pool, device, health in update}
    assert devices, "no device in the health stream"
    assert set(devices.values()) == {"Healthy"}, devices
    assert ("fake-node-1", "enp3s0f0v0") in devices
