"""Device health for the kubelet's stream, from the plugins that serve each device."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.scenarios import TOPOLOGY_DIR, compiled, example_inventory
from plugins.coordinator import Allocator, load_policies
from plugins.coordinator._kube_health import PluginHealthWatch, plugins_of
from plugins.coordinator.kubelet import DeviceHealthBoard
from plugins.sdk import EndpointInfo
from plugins.sdk.host import PluginCallError

TOPOLOGIES = {n: compiled(f) for n, f in (("macvlan", "macvlan"), ("vf", "vf-bond-vlan"))}
INFO = EndpointInfo("x", "v1alpha1", (), "sha256:x", "sha256:y", "ns", True, "{}")


class Client:
    def __init__(self, info: EndpointInfo | None) -> None:
        self.info = info

    def get_info(self) -> EndpointInfo:
        if self.info is None:
            raise PluginCallError("UNAVAILABLE", "connection refused")
        return self.info


def devices() -> list:  # type: ignore[type-arg]
    policies = load_policies(TOPOLOGY_DIR / "policies.yaml")
    return list(Allocator(example_inventory(), policies).devices)


def test_each_device_is_served_by_the_plugins_its_type_and_policy_admit() -> None:
    by_name = {d.name: plugins_of(d, TOPOLOGIES) for d in devices()}
    assert by_name["enp3s0f0v0"] == {"sriov"}
    assert by_name["enp3s0f2-macvlan"] == {"macvlan"}


@pytest.mark.parametrize(
    ("sriov", "health"),
    [
        (INFO, "Healthy"),
        (replace(INFO, ready=False), "Unhealthy"),
        (replace(INFO, fault="journal damaged"), "Unhealthy"),
        (None, "Unknown"),
    ],
)
def test_a_devices_health_is_its_plugins(sriov: EndpointInfo | None, health: str) -> None:
    board = DeviceHealthBoard()
    clients = {"sriov": Client(sriov), "macvlan": Client(INFO), "bond": Client(INFO)}
    clients |= {"vlan": Client(INFO)}
    watch = PluginHealthWatch(clients, devices(), TOPOLOGIES, "node-1", board)  # type: ignore[arg-type]
    watch.refresh()
    found = {device: h for _, device, h in board.devices()}
    assert found["enp3s0f0v0"] == health
    assert found["enp3s0f2-macvlan"] == "Healthy"
