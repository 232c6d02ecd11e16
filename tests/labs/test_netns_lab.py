"""NetnsLab: the kit's netns tier, on the running kernel in namespaces of its own.

The three real services start on it (as processes over its ``linux://`` URL, and
in this process over its kernel), a macvlan share and attachment go through them and
leave the kernel as it was (``fakekernel.model.diff`` and the rig's invariants read
the lab's snapshot unchanged), and a closed lab leaves no namespace behind.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest

import labs.netns
from fakekernel.model import diff
from harness.invariants import kernel_differences, leaks
from harness.pytest_plugin import require_lab
from labs import NetnsLab, Node
from labs.netns import NetnsLabUnavailable
from plugins.kernel import KernelError, Link, LinkSpec
from plugins.kernel.linux import LinuxKernel
from plugins.sdk import (
    AllocationBinding,
    CleanupRequest,
    CleanupResponse,
    CleanupStatus,
    ConnectRequest,
    ConnectResponse,
    Hook,
    OperationEnvelope,
    PrepareRequest,
    PrepareResponse,
    SandboxHandle,
    Sharing,
)

pytestmark = pytest.mark.netns

PLUGINS = ["bond", "ipvlan", "macvlan", "sriov", "vlan"]
PARENT, CHILD = "enp3s0f2", "net9"
CONFIG = json.dumps({"mode": "bridge", "mtu": 1500})
# The macvlan share of conformance/target.py's _share("macvlan"), on the lab's enp3s0f2.
SHARE = AllocationBinding(
    "root-1",
    "dra.networking",
    "node",
    f"{PARENT}-macvlan",
    "pf",
    Sharing.SHARED,
    {"ifName": PARENT},
    {"dra.networking/macvlans": "1"},
)


class Hooks(Protocol):
    """The four lifecycle calls, over a socket (PluginClient) or in this process."""

    def node_prepare(self, req: PrepareRequest) -> PrepareResponse: ...

    def connect_network(self, req: ConnectRequest) -> ConnectResponse: ...

    def remove_network(self, req: CleanupRequest) -> CleanupResponse: ...

    def node_unprepare(self, req: CleanupRequest) -> CleanupResponse: ...


def envelope(hook: Hook, op: str, scope: str) -> OperationEnvelope:
    return OperationEnvelope(op, hook, scope, "step-1", 1, 1)


@pytest.fixture
def make_lab(request: pytest.FixtureRequest) -> Iterator[Callable[[], NetnsLab]]:
    """New labs, each closed after the test even when it fails (close is idempotent)."""
    made: list[NetnsLab] = []

    def make() -> NetnsLab:
        try:
            lab = NetnsLab()
        except NetnsLabUnavailable as exc:
            require_lab(request.config, "netns", str(exc))
            raise
        made.append(lab)
        return lab

    yield make
    for lab in made:
        lab.close()


def child_in_pod(lab: NetnsLab) -> Link | None:
    return lab.kernel.get_link(lab.kernel.namespace("pod-a"), name=CHILD)


def macvlan_cycle(hooks: Hooks, sandbox: SandboxHandle, lab: NetnsLab) -> None:
    """NodePrepare + ConnectNetwork (the child appears in the pod, on the node's parent,
    carrying our marker) + RemoveNetwork + NodeUnprepare (it is gone)."""
    before = lab.snapshot()
    prepared = hooks.node_prepare(
        PrepareRequest(envelope(Hook.NODE_PREPARE, "prep-1", "prep-1"), SHARE, CONFIG)
    ).prepared_state
    hooks.connect_network(
        ConnectRequest(
            envelope(Hook.CONNECT_NETWORK, "conn-1", "att-1"),
            sandbox,
            CONFIG,
            interface_names={"interface": CHILD},
            prepared=prepared,
            allocation=SHARE,
        )
    )
    child = child_in_pod(lab)
    assert child is not None, f"no {CHILD} in the pod after ConnectNetwork"
    host = lab.kernel.host_namespace()
    parent = lab.kernel.get_link(host, name=PARENT)
    assert parent is not None
    assert (child.kind, child.mtu, child.up, child.parent) == (
        "macvlan",
        1500,
        True,
        parent.ifindex,
    )
    assert child.parent_ns is not None
    assert child.parent_ns.key == host.key
    # What the checks below rely on can fail: the attachment shows in both.
    assert f"+ link {CHILD!r} (macvlan, ifindex {child.ifindex}) in " in "\n".join(
        diff(before, lab.snapshot())
    )
    assert [f"{CHILD} in {child.ns.path} still carries our marker"] == leaks(lab.kernel)
    removed = hooks.remove_network(CleanupRequest(envelope(Hook.REMOVE_NETWORK, "rm-1", "att-1")))
    assert removed.status is CleanupStatus.CLEANED, removed.detail
    unprepared = hooks.node_unprepare(
        CleanupRequest(envelope(Hook.NODE_UNPREPARE, "unprep-1", "prep-1"))
    )
    assert unprepared.status is CleanupStatus.CLEANED, unprepared.detail
    assert child_in_pod(lab) is None


def test_services_as_processes_attach_and_detach_a_macvlan(
    make_lab: Callable[[], NetnsLab], tmp_path: Path
) -> None:
    lab = make_lab()
    with Node(lab, tmp_path, processes=True, coordinator=False) as node:
        clients = node.clients()
        try:
            assert sorted(clients) == PLUGINS
            for plugin, client in clients.items():
                assert client.get_info().ready, f"{plugin} is not ready"
            before = lab.snapshot()
            macvlan_cycle(clients["macvlan"], node.sandbox(), lab)
            assert diff(before, lab.snapshot()) == []
            assert leaks(lab.kernel) == []
        finally:
            for client in clients.values():
                client.close()


def test_services_in_process_attach_and_detach_a_macvlan(
    make_lab: Callable[[], NetnsLab], tmp_path: Path
) -> None:
    lab = make_lab()
    with Node(lab, tmp_path) as node:
        assert sorted(node.endpoints) == PLUGINS
        assert all(e.info().ready for e in node.endpoints.values())
        before = lab.snapshot()
        macvlan_cycle(node.endpoints["macvlan"], node.sandbox(), lab)
        assert diff(before, lab.snapshot()) == []
        assert leaks(lab.kernel) == []
        # The rig's check: equal with the pod alive, and once its namespace is gone
        # (the services here share the lab's kernel, so nothing else holds the pod).
        assert kernel_differences(before, lab.kernel, "pod-a") == []
        assert not any(ns.path.endswith("/pod-a") for ns in lab.kernel.namespaces())


def test_the_node_holds_its_parents_and_the_snapshot_has_the_fake_kernels_shape(
    make_lab: Callable[[], NetnsLab],
) -> None:
    lab = make_lab()
    lab.sandbox()
    snap = lab.snapshot()
    node, wire, pod = (ns["path"] for ns in snap["namespaces"])
    assert [ns["name"] for ns in snap["namespaces"]] == ["", Path(wire).name, "pod-a"]
    by_id = {lk["id"]: lk for lk in snap["links"]}
    parents = [lk for lk in snap["links"] if lk["ns"] == node and lk["name"].startswith("enp")]
    assert [lk["name"] for lk in parents] == ["enp3s0f0", "enp3s0f1", "enp3s0f2"]
    for lk in parents:
        assert (lk["kind"], lk["mtu"], lk["up"]) == ("veth", 1500, True)
        assert by_id[lk["peer"]]["ns"] == wire
        assert by_id[lk["peer"]]["up"]
    for lk in snap["links"]:  # every veth's peer is in the snapshot and points back
        if lk["kind"] == "veth":
            assert by_id[lk["peer"]]["peer"] == lk["id"]
    (eth0,) = [lk for lk in snap["links"] if lk["ns"] == pod]
    assert eth0["name"] == "eth0"
    assert by_id[eth0["peer"]]["ns"] == node
    assert "lo" not in {lk["name"] for lk in snap["links"]}
    fake_link_keys = {
        *("alias", "bond", "br_mtu_set_by_user", "id", "ifindex", "ipvlan_port_mode", "kind"),
        *("mac", "mac_assign", "master", "max_mtu", "min_mtu", "mode", "mtu", "name", "ns"),
        *("parent", "passthru_perm_mac", "pci_address", "peer", "perm_mac", "saved", "up"),
        *("vf_of", "vlan_id", "vlan_protocol"),
    }
    assert all(set(lk) == fake_link_keys for lk in snap["links"])
    assert set(snap) == {"boot_id", "live_rename", "namespaces", "links", "pfs"}
    assert snap["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def test_a_deleted_namespace_is_dead_when_delete_returns(
    make_lab: Callable[[], NetnsLab],
) -> None:
    lab = make_lab()
    k = lab.kernel
    pod = k.add_namespace("pod-b")
    k.create_link(pod, LinkSpec(kind="veth", name="eth0", peer_name="vethpodb", peer_ns=k.wire))
    assert k.get_link(k.wire, name="vethpodb") is not None
    k.delete_namespace("pod-b")
    # The peer in the wire dies with the namespace: gone already, not eventually.
    assert k.get_link(k.wire, name="vethpodb") is None
    assert not Path(pod.path).exists()
    with pytest.raises(KernelError) as unknown:
        k.delete_namespace("pod-b")
    assert unknown.value.code == errno.ENOENT
    with pytest.raises(KernelError) as own:
        k.delete_namespace(Path(k.wire.path).name)
    assert own.value.code == errno.EPERM


def test_deleting_a_namespace_something_holds_times_out(
    make_lab: Callable[[], NetnsLab],
) -> None:
    lab = make_lab()
    k = lab.kernel
    pod = k.add_namespace("pod-held")
    held = os.open(pod.path, os.O_RDONLY | os.O_CLOEXEC)  # like a process still in it
    try:
        k.death_deadline_s = 0.3
        with pytest.raises(KernelError) as timed_out:
            k.delete_namespace("pod-held")
        assert timed_out.value.code == errno.ETIMEDOUT
    finally:
        os.close(held)


def _lab_identities(lab: NetnsLab) -> set[tuple[int, int]]:
    return {(ns.device, ns.inode) for ns in lab.kernel.namespaces()}


def _reachable_identities() -> set[tuple[int, int]]:
    """Every namespace this machine names: ``ip netns``' directories and /proc."""
    with LinuxKernel("/proc/self/ns/net") as machine:
        return {(ns.device, ns.inode) for ns in machine.list_namespaces()}


def test_close_leaves_no_namespace_of_the_lab(make_lab: Callable[[], NetnsLab]) -> None:
    lab = make_lab()
    lab.sandbox()
    mine = _lab_identities(lab)
    assert len(mine) == 3
    lab.close()
    lab.close()  # idempotent
    assert not lab.directory.exists()
    assert str(lab.directory) not in Path("/proc/self/mountinfo").read_text()
    assert mine.isdisjoint(_reachable_identities())


def test_two_labs_at_once_do_not_collide(make_lab: Callable[[], NetnsLab]) -> None:
    first, second = make_lab(), make_lab()
    assert first.directory != second.directory
    assert first.kernel_url != second.kernel_url
    first.sandbox()
    second.sandbox()
    assert _lab_identities(first).isdisjoint(_lab_identities(second))
    second_before = second.snapshot()
    first.close()
    assert diff(second_before, second.snapshot()) == []
    assert [p.name for p in second.parents] == ["enp3s0f0", "enp3s0f1", "enp3s0f2"]


def test_a_lab_that_cannot_run_says_what_is_missing_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(labs.netns.os, "geteuid", lambda: 1000)
    with pytest.raises(NetnsLabUnavailable) as refused:
        NetnsLab(pin_root=tmp_path)
    assert str(refused.value) == "NetnsLab needs root (to create network namespaces and links)"
    assert list(tmp_path.iterdir()) == []  # nothing made on the way
