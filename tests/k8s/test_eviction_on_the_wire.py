"""A container that started while the coordinator's NRI plugin was away is evicted, over
every real wire (the node of ``test_node_on_the_wire``: KubeletSim, FakeAPIServer,
NRIRuntimeSim, the fake lab's kernel).

NRI is fail-open: while the plugin is not in the runtime, sandboxes and containers go on
without it. When it is back, the runtime's Synchronize lists them; the coordinator connects
the pod's networks and has the runtime stop (``Runtime.UpdateContainers``) the container
its gate never admitted. The kubelet's recreation of that container then passes the gate,
and its answer asks for the same eviction again (the route containerd honours; it drops
UpdateContainers' evictions, the simulator by default does not): the runtime no longer
has the container and skips it.
"""

from __future__ import annotations

import pytest

from harness.k8s.kubelet import PodClaim
from harness.k8s.nri_runtime import IGNORED_UNKNOWN_CONTAINER, Eviction, SimSandbox
from harness.k8s.pod_lifecycle import TOPOLOGY_FILES
from plugins.coordinator.nri import EVICTION_REASON, NRIPlugin

# The fixture is the other module's, imported rather than copied: one node under test.
from .test_node_on_the_wire import (  # noqa: F401
    DEADLINE_S,
    DRIVER,
    Wired,
    claim_object,
    wired,
)

pytestmark = pytest.mark.fake


@pytest.mark.parametrize("topology", sorted(TOPOLOGY_FILES))
def test_a_container_started_while_the_plugin_was_away_is_evicted_then_gated(
    wired: Wired,  # noqa: F811
    topology: str,
) -> None:
    before = wired.node.snapshot()
    uid, pod_uid = "0d6f3c1e-2222-4a2b-8c3d-000000000002", "pod-uid-2"
    wired.api.put_claim(claim_object(topology, uid, pod_uid))
    pod_claims = [PodClaim(DRIVER, uid, "default", "net")]
    prepared = wired.kubelet.prepare(pod_uid, pod_claims)
    assert prepared[uid].error == "", prepared
    plugin = wired.k8s.nri
    assert isinstance(plugin, NRIPlugin)

    # The runtime drops the plugin; it dials again and registers, and the runtime keeps
    # it waiting before Configure: for the runtime's events, it is away.
    wired.runtime.hold_new_plugins()
    wired.runtime.disconnect(DRIVER)
    wired.runtime.wait_for_held(DRIVER, DEADLINE_S)
    netns = wired.node.sandbox().namespace.path
    ran = wired.runtime.run_pod_sandbox(SimSandbox("sandbox-2", "web", "default", pod_uid, netns))
    ungated = wired.runtime.create_container("sandbox-2", "app")
    assert (ran.proceeded, ran.answered) == (True, ()), ran  # fail-open: no plugin asked
    assert (ungated.proceeded, ungated.answered) == (True, ()), ungated
    assert ungated.container is not None

    # Back in: synchronized with the sandbox and the container, it has the container
    # evicted, and connects the pod's networks.
    wired.runtime.admit_new_plugins()
    info = wired.runtime.wait_for_plugin(DRIVER, DEADLINE_S)
    eviction = wired.runtime.wait_for_eviction(ungated.container.id, DEADLINE_S)
    assert (eviction.reason, eviction.plugin) == (EVICTION_REASON, info.name)
    assert wired.runtime.containers == ()
    assert not wired.runtime.ignored_evictions
    # Counted once the plugin's write returned, which may be after the runtime acted.
    assert plugin.wait_evictions_sent(1, DEADLINE_S)
    assert wired.k8s.pods.counters.evictions == 1

    # The kubelet recreates the container: the gate admits it now.
    recreated = wired.runtime.create_container("sandbox-2", "app")
    assert (recreated.refusal, recreated.answered) == (None, (info.name,)), recreated
    assert wired.k8s.pods.counters.gate_passes == 1
    status = (wired.api.claim("default", "net") or {}).get("status", {})
    devices = status.get("devices", [])
    assert devices, status
    assert all(d.get("networkData", {}).get("interfaceName") for d in devices), devices

    wired.runtime.stop_pod_sandbox("sandbox-2")
    assert wired.kubelet.unprepare(pod_uid, pod_claims) == {uid: ""}
    wired.runtime.remove_pod_sandbox("sandbox-2")
    assert wired.node.snapshot() == before
    assert not (wired.api.claim("default", "net") or {}).get("status", {}).get("devices")
    assert wired.runtime.evictions == (eviction,)  # the one eviction, nothing more
    # The recreation's answer carried it too; the runtime had nothing left to stop.
    again = Eviction(
        ungated.container.id,
        EVICTION_REASON,
        info.name,
        "CreateContainer",
        ignored=IGNORED_UNKNOWN_CONTAINER,
    )
    assert wired.runtime.ignored_evictions == (again,)
    assert plugin.evictions_sent == 2
