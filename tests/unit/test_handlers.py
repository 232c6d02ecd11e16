"""The five logical plugins plan what the blueprint says, and nothing else."""

from __future__ import annotations

import pytest

from plugins import bond, links, vf
from plugins.sdk import (
    PREPARED_VF,
    SHARED_PARENT,
    ConfigError,
    Hook,
    OutputRef,
    RemoveCall,
    UnprepareCall,
    WrongStepKind,
)
from tests import factories as f

VF_CONFIG = {
    "mtu": 1500,
    "vf": {"vlan": 0, "spoofCheck": False, "trust": True},
    "rdmaAccess": False,
}
BOND_CONFIG = {"mode": "active-backup", "monitorIntervalMs": 100, "mtu": 1500}
A = f.interface("h-a", "pci:0000:03:00.2", name="net1")
B = f.interface("h-b", "pci:0000:03:00.3", name="net2")


def test_sriov_prepare_changes_only_the_fields_set() -> None:
    plan = vf.Plugin().node_prepare(f.prepare_call("sriov", VF_CONFIG, f.vf_allocation()))
    assert [e.id for e in plan.effects] == ["prepare-vf.vf-config", "prepare-vf.mtu"]
    settings = plan.effects[0].payload["settings"]
    assert settings == {
        "vlan": 0,
        "spoofCheck": False,
        "trust": True,
    }  # omitted fields stay untouched
    assert plan.exports == {"vf": (OutputRef("prepare-vf.mtu", "vf"),)}


def test_sriov_rejects_rdma_access() -> None:
    call = f.prepare_call("sriov", {**VF_CONFIG, "rdmaAccess": True}, f.vf_allocation())
    with pytest.raises(ConfigError) as info:
        vf.Plugin().node_prepare(call)
    assert (info.value.path, info.value.rule) == ("$.rdmaAccess", "enum")


def test_sriov_connect_moves_the_prepared_vf() -> None:
    call = f.connect_call(
        "sriov",
        VF_CONFIG,
        prepared=f.prepared("sriov", "vf0", PREPARED_VF),
        allocation=f.vf_allocation(),
    )
    plan = vf.Plugin().connect_network(call)
    assert [e.id for e in plan.effects] == ["move-vf.move", "move-vf.up"]
    move = plan.effect("move-vf.move")
    assert (move.kind, move.payload["name"]) == ("linux/move-link/v2", "data0")
    assert plan.exports["interface"] == (OutputRef("move-vf.move", "link"),)


def test_bond_plan_matches_the_blueprint() -> None:
    call = f.connect_call(
        "bond",
        BOND_CONFIG,
        inputs={"members": (A, B)},
        grants=f.grants("linux/attach-member/v1", A, B),
    )
    plan = bond.Plugin().connect_network(call)
    assert [e.id for e in plan.effects] == [
        "create-bond",
        "attach-member-0",
        "attach-member-1",
        "activate-bond",
    ]
    assert list(plan.exports) == ["interface"]  # only the bond, never the members


def test_bond_refuses_the_same_physical_member_twice() -> None:
    twin = f.interface("h-c", "pci:0000:03:00.2", name="net3")
    call = f.connect_call(
        "bond",
        BOND_CONFIG,
        inputs={"members": (A, twin)},
        grants=f.grants("linux/attach-member/v1", A, twin),
    )
    with pytest.raises(Exception, match="distinct-resources"):
        bond.Plugin().connect_network(call)


@pytest.mark.parametrize("hook", ["node_prepare", "node_unprepare"])
@pytest.mark.parametrize(
    ("plugin", "name"), [(bond.Plugin(), "bond"), (links.Plugin(links.Kind.VLAN), "vlan")]
)
def test_operation_only_plugins_refuse_root_hooks(hook: str, plugin: object, name: str) -> None:
    reg = f.registrations()[name]
    env = f.envelope(Hook.NODE_PREPARE)
    call = (
        f.prepare_call(name, {}, None)
        if hook == "node_prepare"
        else UnprepareCall(env, reg.descriptor, reg.validator)
    )
    with pytest.raises(WrongStepKind):
        getattr(plugin, hook)(call)


def test_cleanup_hooks_target_the_recorded_plans() -> None:
    reg = f.registrations()["macvlan"]
    remove = links.Plugin(links.Kind.MACVLAN).remove_network(
        RemoveCall(f.envelope(Hook.REMOVE_NETWORK), reg.descriptor, reg.validator)
    )
    unprepare = links.Plugin(links.Kind.MACVLAN).node_unprepare(
        UnprepareCall(f.envelope(Hook.NODE_UNPREPARE), reg.descriptor, reg.validator, "op-7")
    )
    assert (remove.target_hook, unprepare.target_hook) == (Hook.CONNECT_NETWORK, Hook.NODE_PREPARE)
    assert unprepare.target_operation_id == "op-7"


def test_vlan_plan() -> None:
    call = f.connect_call("vlan", {"vlanId": 100, "mtu": 1500}, inputs={"parent": (A,)})
    plan = links.Plugin(links.Kind.VLAN).connect_network(call)
    assert [e.id for e in plan.effects] == ["create-child", "activate-child"]
    assert plan.effects[0].kind == "linux/create-vlan/v1"
    assert plan.effects[0].payload["vlanId"] == 100


def test_vlan_endpoint_cannot_be_switched_by_config() -> None:
    call = f.connect_call(
        "vlan", {"vlanId": 100, "mode": "bridge", "mtu": 1500}, inputs={"parent": (A,)}
    )
    with pytest.raises(ConfigError) as info:
        links.Plugin(links.Kind.VLAN).connect_network(call)
    assert info.value.rule == "cross-field:vlan-forbids-mode"


@pytest.mark.parametrize(
    ("kind", "mode", "capacity"),
    [
        (links.Kind.MACVLAN, "bridge", "dra.networking/macvlans"),
        (links.Kind.IPVLAN, "l2", "dra.networking/ipvlans"),
    ],
)
def test_shared_child_prepare_and_connect(kind: links.Kind, mode: str, capacity: str) -> None:
    plugin = links.Plugin(kind)
    config = {"mode": mode, "mtu": 1500}
    prep = plugin.node_prepare(
        f.prepare_call(kind.value, config, f.parent_allocation(capacity_name=capacity))
    )
    assert [(e.id, e.kind) for e in prep.effects] == [("hold-parent", "node/hold-shared-parent/v1")]
    assert prep.effects[0].payload["quantity"] == 1
    call = f.connect_call(
        kind.value,
        config,
        prepared=f.prepared(kind.value, "mv0", SHARED_PARENT),
        allocation=f.parent_allocation(capacity_name=capacity),
    )
    plan = plugin.connect_network(call)
    assert plan.effects[0].kind == "linux/create-shared-child/v1"
    assert plan.effects[0].payload["kind"] == kind.value


def test_every_planned_effect_is_allowed_by_the_descriptor() -> None:
    regs = f.registrations()
    plans = {
        ("sriov", "NodePrepare"): vf.Plugin().node_prepare(
            f.prepare_call("sriov", VF_CONFIG, f.vf_allocation())
        ),
        ("bond", "ConnectNetwork"): bond.Plugin().connect_network(
            f.connect_call(
                "bond",
                BOND_CONFIG,
                inputs={"members": (A, B)},
                grants=f.grants("linux/attach-member/v1", A, B),
            )
        ),
        ("vlan", "ConnectNetwork"): links.Plugin(links.Kind.VLAN).connect_network(
            f.connect_call("vlan", {"vlanId": 7, "mtu": 1500}, inputs={"parent": (A,)})
        ),
    }
    for (name, hook), plan in plans.items():
        allowed = regs[name].descriptor.allowed_effects[hook]
        assert {e.kind for e in plan.effects} <= set(allowed), name
