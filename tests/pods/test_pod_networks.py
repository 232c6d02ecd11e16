"""The coordinator's pod side on the fake lab: the kubelet's order end to end, the gate,
and the bad input it refuses without changing anything."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from plugins.coordinator import ClaimProblem, GateRefused
from plugins.sdk import NetworkPluginError, Unavailable

from .kit import pod_node, sandbox_of, scheduled

pytestmark = pytest.mark.fake


@pytest.mark.parametrize("topology", ["sdk-macvlan", "sdk-ipvlan", "sdk-vf-bond-vlan"])
def test_the_kubelet_order_connects_then_cleans_everything(tmp_path: Path, topology: str) -> None:
    with pod_node(tmp_path) as (node, pods, claims):
        before = node.snapshot()
        claim = scheduled(topology, "uid-1", pod="pod-1")
        claims.claims[("default", "net")] = claim
        devices = pods.prepare("default", "net", "uid-1")
        assert [d.request for d in devices] == [d.request for d in claim.devices]
        assert pods.prepare("default", "net", "uid-1") == devices  # idempotent
        sandbox = sandbox_of(node, "sb-1", "pod-1")
        pods.run_pod_sandbox(sandbox)
        pods.create_container(sandbox, "c-1")
        assert pods.counters.gate_passes == 1
        pods.stop_pod_sandbox(sandbox)
        pods.unprepare("default", "net", "uid-1")
        pods.remove_pod_sandbox(sandbox)
        after = node.snapshot()
        assert after == before


def test_the_gate_refuses_a_sandbox_whose_run_was_missed_then_passes(tmp_path: Path) -> None:
    with pod_node(tmp_path) as (node, pods, claims):
        claims.claims[("default", "net")] = scheduled("sdk-macvlan", "uid-1", pod="pod-1")
        pods.prepare("default", "net", "uid-1")
        sandbox = sandbox_of(node, "sb-1", "pod-1")
        with pytest.raises(GateRefused, match="never connected"):
            pods.create_container(sandbox, "c-1")
        pods.create_container(sandbox, "c-1")  # the kubelet's retry
        assert (pods.counters.gate_refusals, pods.counters.gate_passes) == (1, 1)


def test_a_pod_without_claims_is_not_ours(tmp_path: Path) -> None:
    with pod_node(tmp_path) as (node, pods, _claims):
        sandbox = sandbox_of(node, "sb-9", "pod-9")
        pods.run_pod_sandbox(sandbox)
        pods.create_container(sandbox, "c-9")
        assert pods.counters.gate_refusals == 0


def test_a_replaced_claim_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    with pod_node(tmp_path) as (node, pods, claims):
        claims.claims[("default", "net")] = scheduled("sdk-macvlan", "uid-2", pod="pod-1")
        before = node.snapshot()
        with pytest.raises(ClaimProblem, match="replaced"):
            pods.prepare("default", "net", "uid-1")
        assert node.snapshot() == before
        assert node.journal.units("kube-claim") == {}


def test_a_claim_outlives_its_pod_and_is_prepared_again_for_the_next(tmp_path: Path) -> None:
    """A ResourceClaim made on its own serves pods one after another: the kubelet
    unprepares it when the first pod is done and prepares it again for the next."""
    with pod_node(tmp_path) as (node, pods, claims):
        before = node.snapshot()
        for round_, pod in enumerate(("pod-1", "pod-2"), start=1):
            claims.claims[("default", "net")] = scheduled("sdk-macvlan", "uid-1", pod=pod)
            pods.prepare("default", "net", "uid-1")
            sandbox = sandbox_of(node, f"sb-{round_}", pod)
            pods.run_pod_sandbox(sandbox)
            pods.create_container(sandbox, f"c-{round_}")
            pods.stop_pod_sandbox(sandbox)
            pods.unprepare("default", "net", "uid-1")
            pods.remove_pod_sandbox(sandbox)
            assert node.snapshot() == before
        assert pods.counters.gate_passes == 2
        assert node.journal.unit("kube-claim:uid-1")[1]["key"] == "uid-1-r2"  # type: ignore[index]


@pytest.mark.parametrize(
    ("netns", "error"),
    [
        ("", "has no network namespace"),
        ("run/netns/relative", "is not absolute"),
        ("/run/netns/no-such-namespace", "does not exist"),
    ],
)
def test_a_sandbox_without_a_usable_namespace_is_refused_and_nothing_changes(
    tmp_path: Path, netns: str, error: str
) -> None:
    with pod_node(tmp_path) as (node, pods, claims):
        claims.claims[("default", "net")] = scheduled("sdk-macvlan", "uid-1", pod="pod-1")
        pods.prepare("default", "net", "uid-1")
        before, units = node.snapshot(), node.journal.units("sandbox")
        sandbox = replace(sandbox_of(node, "sb-1", "pod-1"), netns_path=netns)
        with pytest.raises(NetworkPluginError, match=error):
            pods.run_pod_sandbox(sandbox)
        assert (node.snapshot(), node.journal.units("sandbox")) == (before, units)
        pods.unprepare("default", "net", "uid-1")


def test_a_container_in_a_namespace_other_than_the_one_connected_is_refused(
    tmp_path: Path,
) -> None:
    """The gate checks the namespace's identity, not that a connection exists."""
    with pod_node(tmp_path) as (node, pods, claims):
        claims.claims[("default", "net")] = scheduled("sdk-macvlan", "uid-1", pod="pod-1")
        pods.prepare("default", "net", "uid-1")
        sandbox = sandbox_of(node, "sb-1", "pod-1")
        pods.run_pod_sandbox(sandbox)
        other = node.kernel.add_namespace("other-pod")
        with pytest.raises(GateRefused, match="not the one connected"):
            pods.create_container(replace(sandbox, netns_path=other.path), "c-1")
        pods.create_container(sandbox, "c-1")
        pods.stop_pod_sandbox(sandbox)
        pods.unprepare("default", "net", "uid-1")


class _DiesAfterConnecting:
    """A service that connects, dies before it answers, and stays down: every later call
    (the coordinator's undo among them) finds nothing on the socket."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def connect_network(self, req: Any) -> Any:
        self._real.connect_network(req)
        raise Unavailable("the service died before it answered")

    def __getattr__(self, name: str) -> Any:
        def down(*_args: Any) -> Any:
            raise Unavailable("nothing serves the socket")

        return down


def test_the_next_sandbox_finishes_a_removal_its_service_was_down_for(tmp_path: Path) -> None:
    """A connect whose service died is undone, and the undo fails while the service is
    down: the sandbox stays removing, its claim's root attached. The kubelet's next
    sandbox of the pod is refused, naming that, while the service is down, and connects
    once it is back; the node ends clean."""
    with pod_node(tmp_path) as (node, pods, claims):
        before = node.snapshot()
        claims.claims[("default", "net")] = scheduled("sdk-macvlan", "uid-1", pod="pod-1")
        pods.prepare("default", "net", "uid-1")
        endpoints: dict[str, Any] = node.services.endpoints  # the LocalClients look here
        real = endpoints["macvlan"]
        endpoints["macvlan"] = _DiesAfterConnecting(real)
        with pytest.raises(NetworkPluginError, match="died before it answered"):
            pods.run_pod_sandbox(sandbox_of(node, "sb-1", "pod-1"))
        assert node.journal.unit("sandbox:sb-1")[0] == "removing"  # type: ignore[index]
        retried = sandbox_of(node, "sb-2", "pod-1")
        with pytest.raises(NetworkPluginError, match="sandbox sb-1: networks not removed yet"):
            pods.run_pod_sandbox(retried)
        assert node.journal.unit("sandbox:sb-2") is None
        endpoints["macvlan"] = real  # the service is back
        pods.run_pod_sandbox(retried)
        assert node.journal.unit("sandbox:sb-1")[0] == "stopped"  # type: ignore[index]
        pods.create_container(retried, "c-1")
        for sandbox in (sandbox_of(node, "sb-1", "pod-1"), retried):
            pods.stop_pod_sandbox(sandbox)
            pods.remove_pod_sandbox(sandbox)
        pods.unprepare("default", "net", "uid-1")
        assert node.snapshot() == before
