"""The coordinator as a Kubernetes node, every peer on its real wire: the kubelet
(``KubeletSim``: plugin watcher, registration, DRA v1 over the advertised socket), the API
server (``FakeAPIServer`` under the unmodified lightkube client) and the runtime
(``NRIRuntimeSim``: mux + ttrpc of its own), over the fake lab's kernel. A pod's life in
the kubelet's order for each topology: the claim's status says where its interface is,
the gate admits the container, and everything is back as it was at the end."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import allure
import pytest

from harness.inprocess import in_process_node
from harness.k8s.apiserver import FakeAPIServer
from harness.k8s.kubelet import KubeletSim, PodClaim
from harness.k8s.nri_runtime import NRIRuntimeSim, SimSandbox
from harness.k8s.pod_lifecycle import TOPOLOGY_FILES, lab_resolver, scheduled_claim
from harness.scenarios import TOPOLOGY_DIR, compiled, example_inventory
from labs import Node
from plugins.coordinator import Allocator, KubernetesConfig, KubernetesNode, load_policies
from plugins.coordinator.nri import NRIPlugin

pytestmark = pytest.mark.fake

DRIVER = "dra.networking"
DEADLINE_S = 10.0


@dataclass
class Wired:
    node: Node
    api: FakeAPIServer
    kubelet: KubeletSim
    runtime: NRIRuntimeSim
    k8s: KubernetesNode


@pytest.fixture
def wired(tmp_path: Path) -> Iterator[Wired]:
    short = Path(tempfile.mkdtemp(prefix="k8s-", dir="/tmp"))  # sun_path holds 107 bytes
    node = in_process_node(tmp_path / "node")
    pool = example_inventory().pool
    config = KubernetesConfig(
        node_name=pool,
        plugins_dir=short / "plugins",
        registry_dir=short / "registry",
        nri_socket=short / "nri.sock",
        answer_within_seconds=1.5,
    )
    policies = load_policies(TOPOLOGY_DIR / "policies.yaml")
    try:
        with (
            FakeAPIServer() as api,
            NRIRuntimeSim(short / "nri.sock") as runtime,
            KubeletSim(short / "registry", tmp_path / "checkpoint.json") as kubelet,
        ):
            k8s = KubernetesNode(
                KubernetesConfig(**{**config.__dict__, "api_server": api.url}),
                node.journal,
                node.coordinator,
                {t: compiled(f) for t, f in TOPOLOGY_FILES.items()},
                Allocator(example_inventory(), policies),
                resolve_namespace=lab_resolver(node),
                nri_plugin=NRIPlugin,
            )
            try:
                k8s.start()
                kubelet.wait_registered(DRIVER, DEADLINE_S)
                runtime.wait_for_plugin(DRIVER, DEADLINE_S)
                yield Wired(node, api, kubelet, runtime, k8s)
            finally:
                k8s.stop()
                # What the client library asked of the API server, for the report.
                allure.attach(
                    api.request_log_text(), "API server requests", allure.attachment_type.TEXT
                )
    finally:
        node.close()
        shutil.rmtree(short, ignore_errors=True)


def claim_object(topology: str, uid: str, pod_uid: str) -> dict[str, Any]:
    """The ResourceClaim as the scheduler leaves it: allocated, reserved for the pod."""
    claim = scheduled_claim(topology, uid, pod_uid)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": claim.name, "namespace": claim.namespace, "uid": uid},
        "spec": {"devices": {"requests": [{"name": d.request} for d in claim.devices]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": d.request, "driver": DRIVER, "pool": d.pool, "device": d.device}
                        for d in claim.devices
                    ],
                    "config": [
                        {
                            "source": "FromClaim",
                            "opaque": {
                                "driver": DRIVER,
                                "parameters": {
                                    "apiVersion": "dra.networking/v1alpha1",
                                    "kind": "NetworkAttachment",
                                    "topology": topology,
                                },
                            },
                        }
                    ],
                }
            },
            "reservedFor": [{"resource": "pods", "name": "web", "uid": pod_uid}],
        },
    }


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
