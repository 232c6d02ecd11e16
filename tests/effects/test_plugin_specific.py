"""Blueprint 13.2, plugin by plugin, through the real runner: each test runs on the fake
kernel (``FakeNode``) and on every NIC lab's real kernel (``NicNode``: the VM lab's
guest, marked vm, and each host of a ``--lab sriov://`` inventory, marked sriov), one
body for both. A check needing what a NIC cannot do skips there, naming why."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from plugins.kernel import LinkChanges, LinkSpec
from plugins.sdk import (
    CleanupStatus,
    ConfigError,
    ConnectRequest,
    EffectState,
    FailedPrecondition,
    Grant,
    Hook,
    InvalidArgument,
    PrerequisiteError,
    ResourceHandle,
)
from plugins.sdk.runner import CrashPoint, CrashPoints, Phase, PhaseKind, SimulatedCrash

from .nic_node import NicNode, machine_of, node_kinds
from .node import BOND_CONFIG, FakeNode, PluginNode, envelope

NodeFactory = Callable[[CrashPoints | None], PluginNode]
# What the VF tests' prepare sets through the PF (VF_CONFIG), and what a bond of VFs
# needs (the refusals before any kernel call need only the VFs).
VF_SETTINGS = ("vf_spoofchk", "vf_trust")
BOND_OF_VFS = (*VF_SETTINGS, "bond_of_vfs")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "node_kind" in metafunc.fixturenames:
        metafunc.parametrize("node_kind", node_kinds(metafunc.config), scope="session")


@pytest.fixture
def make_node(
    node_kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[NodeFactory]:
    """Builds the test's node (with a crash plan, or None) on its kind's kernel; the
    node is closed at the end, a NIC node checking its machine ends as it began."""
    machine = None if node_kind == "fake" else machine_of(request, node_kind)
    made: list[PluginNode] = []

    def make(crash: CrashPoints | None = None) -> PluginNode:
        if machine is None:
            built: PluginNode = FakeNode(tmp_path, crash=crash)
        else:
            built = NicNode(machine, tmp_path, crash=crash)
        made.append(built)
        return built

    yield make
    for built in made:
        built.close()


@pytest.fixture
def node(make_node: NodeFactory) -> PluginNode:
    return make_node(None)


def journal_rows(node: PluginNode) -> int:
    return sum(
        len(s.read(lambda r: r.nonterminal_operations())) for s in node.services.stores.values()
    )


# -- VF ----------------------------------------------------------------------------------------


def test_vf_prepared_and_attached_snapshots_are_restored_in_turn(node: PluginNode) -> None:
    node.require(*VF_SETTINGS)
    original = node.snapshot()
    prepared = node.prepare_vf("vf0", node.vf0)
    after_prepare = node.snapshot()
    assert node.changes(original, after_prepare) != []
    node.connect_vf("vf0", node.vf0, prepared, "net1")
    assert "net1" in node.sandbox_links()
    assert node.remove("sriov", "vf0").status is CleanupStatus.CLEANED
    assert node.changes(after_prepare, node.snapshot()) == []  # back to prepared, not to original
    assert node.unprepare_vf("vf0").status is CleanupStatus.CLEANED
    assert node.changes(original, node.snapshot()) == []


def test_vf_changes_nothing_PF_global_or_on_other_vfs(node: PluginNode) -> None:
    node.require(*VF_SETTINGS)
    original = node.snapshot()
    node.connect_vf("vf0", node.vf0, node.prepare_vf("vf0", node.vf0), "net1")
    changes = node.changes(original, node.snapshot())
    assert changes
    pf = node.link(node.vf0["pfName"])
    assert pf is not None
    own_entry = f"vf {pf.pci_address}#{node.vf0['vfIndex']}:"
    for line in changes:
        # Only the VF's own netdev (now net1 in the sandbox) and its own VF-table entry.
        assert "enp3s0f0v0" in line or "'net1'" in line or own_entry in line, line
        assert "enp3s0f0'" not in line, line
        assert "enp3s0f1" not in line, line


def test_vf_unexpected_disappearance_is_quarantined_not_guessed(node: PluginNode) -> None:
    node.require(*VF_SETTINGS)
    prepared = node.prepare_vf("vf0", node.vf0)
    node.connect_vf("vf0", node.vf0, prepared, "net1")
    node.remove_vf(node.vf0)  # an administrator lowered sriov_numvfs
    receipt = node.remove("sriov", "vf0")
    assert receipt.status is CleanupStatus.QUARANTINED
    quarantined = [e for e in receipt.effects if e.state is EffectState.QUARANTINED]
    assert quarantined
    assert any("disappeared" in e.detail or "no netdev" in e.detail for e in quarantined)


def test_vf_partial_namespace_move_is_recovered(make_node: NodeFactory) -> None:
    moved = Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, 1, "move_link")
    point = CrashPoint("ConnectNetwork", "conn-vf0", "move-vf.move", moved)
    node = make_node(CrashPoints(armed=point))
    node.require(*VF_SETTINGS)
    original = node.snapshot()
    prepared = node.prepare_vf("vf0", node.vf0)
    after_prepare = node.snapshot()
    with pytest.raises(SimulatedCrash):
        node.connect_vf("vf0", node.vf0, prepared, "net1")
    node.crash()  # the VF sits in the sandbox under its temporary name; the service is gone
    assert node.remove("sriov", "vf0").status is CleanupStatus.CLEANED
    assert node.changes(after_prepare, node.snapshot()) == []
    assert node.unprepare_vf("vf0").status is CleanupStatus.CLEANED
    assert node.changes(original, node.snapshot()) == []
    node.close()


# -- bond --------------------------------------------------------------------------------------


def two_vfs(node: PluginNode) -> tuple[ResourceHandle, ResourceHandle]:
    node.require(*VF_SETTINGS)
    h0 = node.connect_vf("vf0", node.vf0, node.prepare_vf("vf0", node.vf0), "net1")
    h1 = node.connect_vf("vf1", node.vf1, node.prepare_vf("vf1", node.vf1), "net2")
    return h0, h1


def bond_request(node: PluginNode, members: tuple[ResourceHandle, ...]) -> ConnectRequest:
    return ConnectRequest(
        envelope(Hook.CONNECT_NETWORK, "conn-bond0", "att-1", "bond0"),
        node.pod,
        json.dumps(BOND_CONFIG),
        inputs={"members": members},
        interface_names={"interface": "bond0"},
        grants=tuple(Grant("linux/attach-member/v1", m.id) for m in members),
    )


def test_bond_without_a_member_grant_is_refused_by_the_runner_and_changes_nothing(
    node: PluginNode,
) -> None:
    """The bond plugin does not check grants itself: the runner does, for every plugin."""
    h0, h1 = two_vfs(node)
    request = dataclasses.replace(
        bond_request(node, (h0, h1)), grants=(Grant("linux/attach-member/v1", h0.id),)
    )
    before, rows = node.snapshot(), journal_rows(node)
    with pytest.raises(InvalidArgument, match=f"consumes input handle '{h1.id}'"):
        node.endpoints["bond"].connect_network(request)
    assert node.changes(before, node.snapshot()) == []
    assert journal_rows(node) == rows


@pytest.mark.parametrize("duplicate", ["same-handle", "same-physical-member"])
def test_bond_refuses_duplicate_members_and_changes_nothing(
    node: PluginNode, duplicate: str
) -> None:
    h0, _ = two_vfs(node)
    twin = (
        h0
        if duplicate == "same-handle"
        else ResourceHandle(
            "rh-twin",
            h0.type,
            h0.owner_scope,
            "other",
            h0.attachment_id,
            h0.boot_id,
            "x",
            h0.description_json,
        )
    )
    before, rows = node.snapshot(), journal_rows(node)
    with pytest.raises(PrerequisiteError, match="distinct-resources"):
        node.endpoints["bond"].connect_network(bond_request(node, (h0, twin)))
    assert node.changes(before, node.snapshot()) == []
    assert journal_rows(node) == rows


def test_bond_refuses_a_member_with_a_foreign_master(node: PluginNode) -> None:
    node.require(*BOND_OF_VFS)
    h0, h1 = two_vfs(node)
    ns = node.pod_ns
    foreign = node.kernel.create_link(ns, LinkSpec(kind="bond", name="theirs"))
    net2 = node.sandbox_links()["net2"]
    node.kernel.set_link(ns, net2.ifindex, LinkChanges(up=False))
    node.kernel.set_link(ns, net2.ifindex, LinkChanges(master=foreign.ifindex))
    with pytest.raises(FailedPrecondition, match="already has a master"):
        node.connect_bond((h0, h1))
    assert node.remove("bond", "bond0").status is CleanupStatus.CLEANED
    links = node.sandbox_links()
    assert links["net2"].master == foreign.ifindex  # never detached by force
    assert "bond0" not in links
    assert links["net1"].master is None


def test_bond_failure_on_the_second_member_is_undone_completely(node: PluginNode) -> None:
    node.require(*BOND_OF_VFS)
    h0, h1 = two_vfs(node)
    ns = node.pod_ns
    # The second member is refused at its own capture: it is suddenly someone else's port.
    foreign = node.kernel.create_link(ns, LinkSpec(kind="bond", name="theirs"))
    net2 = node.sandbox_links()["net2"]
    node.kernel.set_link(ns, net2.ifindex, LinkChanges(up=False))
    node.kernel.set_link(ns, net2.ifindex, LinkChanges(master=foreign.ifindex))
    enslaved_elsewhere = node.snapshot()
    with pytest.raises(FailedPrecondition, match="net2 already has a master"):
        node.connect_bond((h0, h1))
    inspected = node.endpoints["bond"].inspect("conn-bond0", "")
    states = {e.effect_id: e.state for e in inspected.effects}
    assert states["create-bond"] is EffectState.APPLIED
    assert states["attach-member-0"] is EffectState.APPLIED
    assert node.remove("bond", "bond0").status is CleanupStatus.CLEANED
    assert node.changes(enslaved_elsewhere, node.snapshot()) == []  # member 0 restored, bond gone


def test_bond_removal_restores_only_membership_owned_changes(node: PluginNode) -> None:
    node.require(*BOND_OF_VFS)
    h0, h1 = two_vfs(node)
    attached = node.snapshot()
    node.connect_bond((h0, h1))
    assert node.remove("bond", "bond0").status is CleanupStatus.CLEANED
    assert node.changes(attached, node.snapshot()) == []


# -- links -------------------------------------------------------------------------------------


def vlan_request(
    node: PluginNode, parent: ResourceHandle, config: dict[str, object], name: str = "data0"
) -> ConnectRequest:
    return ConnectRequest(
        envelope(Hook.CONNECT_NETWORK, "conn-vlan", "att-1", "data-vlan"),
        node.pod,
        json.dumps(config),
        inputs={"parent": (parent,)},
        interface_names={"interface": name},
        grants=(Grant("linux/create-vlan/v1", parent.id),),
    )


@pytest.mark.parametrize(
    ("config", "path", "rule"),
    [
        ({"vlanId": 5000, "mtu": 1500}, "$.vlanId", "range"),
        ({"vlanId": 10, "mode": "bridge", "mtu": 1500}, "$.mode", "cross-field:vlan-forbids-mode"),
    ],
)
def test_links_invalid_id_or_mode_changes_nothing(
    node: PluginNode, config: dict[str, object], path: str, rule: str
) -> None:
    h0, _ = two_vfs(node)
    before, rows = node.snapshot(), journal_rows(node)
    with pytest.raises(ConfigError) as info:
        node.endpoints["vlan"].connect_network(vlan_request(node, h0, config))
    assert (info.value.path, info.value.rule) == (path, rule)
    assert node.changes(before, node.snapshot()) == []
    assert journal_rows(node) == rows


def test_links_parent_in_the_wrong_namespace_is_refused(node: PluginNode) -> None:
    h0, _ = two_vfs(node)
    desc = h0.description()
    host = node.kernel.host_namespace()
    desc["netns"] = {"device": host.device, "inode": host.inode}
    elsewhere = ResourceHandle(
        h0.id,
        h0.type,
        h0.owner_scope,
        h0.owner_step,
        h0.attachment_id,
        h0.boot_id,
        h0.root_provenance,
        json.dumps(desc),
    )
    with pytest.raises(PrerequisiteError, match="not in sandbox"):
        node.endpoints["vlan"].connect_network(
            vlan_request(node, elsewhere, {"vlanId": 10, "mtu": 1500})
        )


def test_links_foreign_child_with_the_same_name_is_never_touched(node: PluginNode) -> None:
    h0, _ = two_vfs(node)
    node.kernel.create_link(node.pod_ns, LinkSpec(kind="dummy", name="data0", alias="someone"))
    with pytest.raises(
        FailedPrecondition, match="data0 already exists in the sandbox and is not ours"
    ):
        node.endpoints["vlan"].connect_network(vlan_request(node, h0, {"vlanId": 10, "mtu": 1500}))
    assert node.remove("vlan", "data-vlan").status is CleanupStatus.CLEANED
    assert node.sandbox_links()["data0"].alias == "someone"


def test_links_one_unit_entitlement(node: PluginNode) -> None:
    with pytest.raises(PrerequisiteError, match="not exactly 1"):
        node.prepare_share("macvlan", "mv0", quantity="2")
    prepared = node.prepare_share("macvlan", "mv0")
    node.connect_share("macvlan", "mv0", prepared, "sec0", attachment="att-1")
    with pytest.raises(FailedPrecondition, match="still attached as att-1"):
        node.connect_share("macvlan", "mv0", prepared, "sec1", attachment="att-2")
    assert "sec1" not in node.sandbox_links()


def test_links_shared_parent_mtu_mismatch_is_refused(node: PluginNode) -> None:
    parent = node.link("enp3s0f2")  # 9000 in the fake lab file; a NIC lab's: seeded
    assert parent is not None
    mtu = parent.mtu + 500
    with pytest.raises(FailedPrecondition, match=f"MTU {parent.mtu}, below the requested {mtu}"):
        node.prepare_share("macvlan", "mv0", mtu=mtu)
    assert node.link("enp3s0f2") == parent  # the parent is never reconfigured


def test_links_macvlan_and_ipvlan_cannot_share_a_parent(node: PluginNode) -> None:
    mac = node.prepare_share("macvlan", "mv0")
    node.connect_share("macvlan", "mv0", mac, "sec0")
    ip = node.prepare_share("ipvlan", "iv0")
    with pytest.raises(FailedPrecondition, match="EBUSY"):
        node.connect_share("ipvlan", "iv0", ip, "sec1", attachment="att-2")
    assert node.remove("ipvlan", "iv0", attachment="att-2").status is CleanupStatus.CLEANED
    assert "sec0" in node.sandbox_links()


def test_links_deleting_one_child_keeps_the_parent_and_its_siblings(node: PluginNode) -> None:
    a = node.prepare_share("macvlan", "mv0")
    b = node.prepare_share("macvlan", "mv1")
    node.connect_share("macvlan", "mv0", a, "sec0", attachment="att-1")
    node.connect_share("macvlan", "mv1", b, "sec1", attachment="att-2")
    parent_before = node.link("enp3s0f2")
    assert node.remove("macvlan", "mv0", attachment="att-1").status is CleanupStatus.CLEANED
    links = node.sandbox_links()
    assert "sec0" not in links
    assert "sec1" in links
    assert node.link("enp3s0f2") == parent_before
