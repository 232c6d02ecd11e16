"""CEL selectors on the lab inventory, and the scheduler stand-in."""

from __future__ import annotations

from typing import Any

import pytest

from plugins import vf
from plugins.coordinator import (
    AllocationError,
    Allocator,
    Device,
    Inventory,
    SelectorError,
    allocate,
    compile_selector,
    parse_inventory,
    publish,
)
from plugins.links import Kind
from plugins.links import Plugin as LinksPlugin
from plugins.sdk import InvalidArgument, Sharing
from tests import factories as f
from tests.coordinator.support import compile_doc, inventory, policies, raw, raw_policies, steps

VF_CONFIG = {
    "mtu": 1500,
    "vf": {"vlan": 0, "spoofCheck": False, "trust": True},
    "rdmaAccess": False,
}


def device(name: str, **attributes: Any) -> Device:
    return Device(name, {"dra.networking": attributes})


def small_inventory(*devices: dict[str, Any]) -> Inventory:
    return parse_inventory({"kind": "DeviceInventory", "pool": "tiny", "devices": list(devices)})


def vf_device(pf: str, index: int) -> dict[str, Any]:
    attrs = {"type": "vf", "pfName": pf, "vfIndex": index, "ifName": f"{pf}v{index}"}
    return {"name": f"{pf}v{index}", "attributes": {"dra.networking": attrs}}


# --- selectors -----------------------------------------------------------------------------


def test_blueprint_selector_matches_on_the_driver_attributes() -> None:
    sel = compile_selector(
        'device.attributes["dra.networking"].type == "vf" && '
        'device.attributes["dra.networking"].pfName == "enp3s0f0"',
        step="vf0",
    )
    assert sel.matches(device("a", type="vf", pfName="enp3s0f0"))
    assert not sel.matches(device("b", type="vf", pfName="enp3s0f1"))
    assert not sel.matches(device("c", type="pf", ifName="enp3s0f2"))  # short-circuits


def test_integer_and_bool_attributes_and_the_device_name() -> None:
    sel = compile_selector(
        'device.attributes["dra.networking"].vfIndex >= 2 && device.name.startsWith("enp")'
    )
    assert sel.matches(device("enp3s0f0v2", vfIndex=2))
    assert not sel.matches(device("enp3s0f0v1", vfIndex=1))
    assert compile_selector('device.attributes["dra.networking"].trusted').matches(
        device("x", trusted=True)
    )


def test_each_expression_is_compiled_once() -> None:
    text = 'device.name == "only-once"'
    assert compile_selector(text, step="a")._runner is compile_selector(text, step="b")._runner


def test_syntax_error_names_the_step() -> None:
    with pytest.raises(SelectorError) as info:
        compile_selector('device.attributes["dra.networking"].type ==', step="vf0")
    err = info.value
    assert (err.step, err.device) == ("vf0", None)
    assert "syntax error" in err.reason
    assert str(err).startswith("step 'vf0': selector")
    assert isinstance(err, InvalidArgument)


@pytest.mark.parametrize(
    ("expression", "got"),
    [
        ("device.name", "string"),
        ('device.attributes["dra.networking"].vfIndex', "int"),
        ('device.attributes["dra.networking"]', "map"),
    ],
)
def test_non_boolean_result_is_refused(expression: str, got: str) -> None:
    sel = compile_selector(expression, step="vf1")
    with pytest.raises(SelectorError) as info:
        sel.matches(device("enp3s0f0v0", vfIndex=0))
    assert info.value.step == "vf1"
    assert info.value.device == "enp3s0f0v0"
    assert f"must evaluate to a bool, got {got}" in info.value.reason


@pytest.mark.parametrize(
    "expression",
    [
        'device.attributes["dra.networking"].pfName == "enp3s0f0"',
        'devise.name == "x"',
        'device.attributes["dra.networking"].vfIndex / 0 == 1',
    ],
)
def test_evaluation_errors_name_the_step_and_device(expression: str) -> None:
    sel = compile_selector(expression, step="vf0")
    with pytest.raises(SelectorError) as info:
        sel.matches(device("enp3s0f2", type="pf", vfIndex=1))
    assert (info.value.step, info.value.device) == ("vf0", "enp3s0f2")
    assert "evaluation failed" in info.value.reason
    assert "activation" not in str(info.value)  # celpy's internals are not in the message


def test_has_guards_a_missing_attribute() -> None:
    sel = compile_selector(
        'has(device.attributes["dra.networking"].pfName) && '
        'device.attributes["dra.networking"].pfName == "enp3s0f0"'
    )
    assert not sel.matches(device("enp3s0f2", type="pf"))


# --- publication -----------------------------------------------------------------------------


def test_policies_publish_one_device_per_persona() -> None:
    published = {d.name: d for d in publish(inventory(), policies())}
    assert list(published) == [
        *(f"enp3s0f{pf}v{i}" for pf in (0, 1) for i in range(4)),
        "enp3s0f2-macvlan",
        "enp3s0f2-ipvlan",
    ]
    mv = published["enp3s0f2-macvlan"]
    assert mv.shared
    assert mv.source.name == "enp3s0f2"
    assert dict(mv.capacity) == {"dra.networking/macvlans": 64}
    assert not published["enp3s0f0v0"].shared
    sel = compile_selector(
        'has(device.capacity["dra.networking"]) && '
        'device.capacity["dra.networking"].macvlans == 64 && '
        'device.attributes["dra.networking"].supportedNetworkPlugins == "macvlan"'
    )
    assert [name for name, d in published.items() if sel.matches(d)] == ["enp3s0f2-macvlan"]


def test_without_policies_the_parent_is_published_as_is() -> None:
    names = [d.name for d in publish(inventory())]
    assert names[-1] == "enp3s0f2"


def test_policy_selector_errors_name_the_policy() -> None:
    docs = raw_policies()
    docs[0]["spec"]["selector"]["cel"] = 'device.attributes["dra.networking"].pfName == "x"'
    with pytest.raises(SelectorError) as info:
        publish(inventory(), policies(docs))
    assert info.value.policy == "sdk-parent-macvlan"
    assert str(info.value).startswith("policy 'sdk-parent-macvlan'")


# --- allocation ------------------------------------------------------------------------------


def test_vf_bond_vlan_allocates_one_vf_on_each_pf() -> None:
    got = allocate(compile_doc(raw("vf-bond-vlan")), inventory(), policies())
    assert {step: a.device for step, a in got.items()} == {"vf0": "enp3s0f0v0", "vf1": "enp3s0f1v0"}
    vf0 = got["vf0"]
    assert vf0.sharing is Sharing.EXCLUSIVE
    assert vf0.consumed == {}
    assert vf0.policy is None
    assert vf0.attributes["pciAddress"] == "0000:03:10.0"


def test_binding_feeds_the_real_sriov_node_prepare() -> None:
    got = allocate(compile_doc(raw("vf-bond-vlan")), inventory(), policies())
    binding = got["vf1"].binding("root-vf1")
    assert (binding.device, binding.pool, binding.device_type) == (
        "enp3s0f1v0",
        "fake-node-1",
        "vf",
    )
    call = f.prepare_call("sriov", VF_CONFIG, binding)
    assert call.require_exclusive_vf().pci_address == "0000:03:10.1"
    assert [e.id for e in vf.Plugin().node_prepare(call).effects]


def test_binding_feeds_the_real_macvlan_node_prepare() -> None:
    got = allocate(compile_doc(raw("macvlan")), inventory(), policies())
    alloc = got["secondary"]
    assert (alloc.device, alloc.policy) == ("enp3s0f2-macvlan", "sdk-parent-macvlan")
    assert dict(alloc.consumed) == {"dra.networking/macvlans": 1}
    call = f.prepare_call("macvlan", {"mode": "bridge", "mtu": 1500}, alloc.binding("mv-1"))
    unit = call.require_shared_unit("macvlan", "dra.networking/macvlans")
    assert (unit.parent_name, unit.quantity) == ("enp3s0f2", 1)
    assert LinksPlugin(Kind.MACVLAN).node_prepare(call).effects


def test_exclusive_devices_are_used_once_across_topologies() -> None:
    allocator = Allocator(inventory(), policies())
    compiled = compile_doc(raw("vf-bond-vlan"))
    first = [allocator.allocate(compiled) for _ in range(4)]
    assert [a["vf0"].device for a in first] == [f"enp3s0f0v{i}" for i in range(4)]
    assert [a["vf1"].device for a in first] == [f"enp3s0f1v{i}" for i in range(4)]
    with pytest.raises(AllocationError) as info:
        allocator.allocate(compiled)
    assert info.value.step == "vf0"
    assert 'pfName == "enp3s0f0"' in info.value.selector
    assert "enp3s0f0v3: in exclusive use" in str(info.value)
    allocator.release(first[2])
    again = allocator.allocate(compiled)
    assert (again["vf0"].device, again["vf1"].device) == ("enp3s0f0v2", "enp3s0f1v2")


def test_a_second_exclusive_use_within_one_topology_is_refused() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["vf1"]["allocation"] = steps(raw("vf-bond-vlan"))["vf0"]["allocation"]
    compiled = compile_doc(doc)
    one_vf = small_inventory(vf_device("enp3s0f0", 0))
    with pytest.raises(AllocationError) as info:
        allocate(compiled, one_vf)
    assert info.value.step == "vf1"
    assert info.value.reasons == ("enp3s0f0v0: in exclusive use (as enp3s0f0v0)",)
    two_vfs = small_inventory(vf_device("enp3s0f0", 0), vf_device("enp3s0f0", 1))
    assert [a.device for a in allocate(compiled, two_vfs).values()] == ["enp3s0f0v0", "enp3s0f0v1"]


def test_failed_allocation_keeps_nothing() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["vf1"]["allocation"]["selector"]["cel"] = 'device.name == "missing"'
    allocator = Allocator(inventory(), policies())
    with pytest.raises(AllocationError, match="no device matches the selector"):
        allocator.allocate(compile_doc(doc))
    assert allocator.allocate(compile_doc(raw("vf-bond-vlan")))["vf0"].device == "enp3s0f0v0"


def test_shared_parent_allocates_up_to_its_capacity() -> None:
    allocator = Allocator(inventory(), policies())
    compiled = compile_doc(raw("macvlan"))
    shares = [allocator.allocate(compiled)["secondary"] for _ in range(64)]
    assert {s.device for s in shares} == {"enp3s0f2-macvlan"}
    with pytest.raises(AllocationError) as info:
        allocator.allocate(compiled)
    assert info.value.step == "secondary"
    assert "dra.networking/macvlans exhausted (64 of 64 in use)" in str(info.value)
    allocator.release(shares[:1])
    assert allocator.allocate(compiled)["secondary"].device == "enp3s0f2-macvlan"


def test_policy_capacity_value_is_the_limit() -> None:
    docs = raw_policies()
    docs[0]["spec"]["exposure"]["capacity"]["macvlans"]["value"] = "2"
    allocator = Allocator(inventory(), policies(docs))
    compiled = compile_doc(raw("macvlan"), policies(docs))
    allocator.allocate(compiled)
    allocator.allocate(compiled)
    with pytest.raises(AllocationError, match="exhausted"):
        allocator.allocate(compiled)


def test_macvlan_and_ipvlan_never_share_the_parent() -> None:
    allocator = Allocator(inventory(), policies())
    macvlan, ipvlan = compile_doc(raw("macvlan")), compile_doc(raw("ipvlan"))
    shares = [allocator.allocate(macvlan), allocator.allocate(macvlan)]
    with pytest.raises(AllocationError) as info:
        allocator.allocate(ipvlan)
    assert "interface-mode on interface 'enp3s0f2' is held by ['macvlan']" in str(info.value)
    for share in shares:
        allocator.release(share)
    assert allocator.allocate(ipvlan)["secondary"].device == "enp3s0f2-ipvlan"
    with pytest.raises(AllocationError, match="held by \\['ipvlan'\\]"):
        allocator.allocate(macvlan)


def test_shared_step_never_gets_an_exclusive_device_and_vice_versa() -> None:
    # Without policies the parent is an exclusive device: no shared step can have it.
    with pytest.raises(AllocationError):
        allocate(compile_doc(raw("macvlan"), ()), inventory())
    doc = raw("vf-bond-vlan")
    steps(doc)["vf0"]["allocation"]["selector"]["cel"] = 'device.name.startsWith("enp3s0f2")'
    with pytest.raises(AllocationError) as info:
        allocate(compile_doc(doc), inventory(), policies())
    assert info.value.step == "vf0"


def test_non_boolean_selector_fails_allocation_naming_the_step() -> None:
    doc = raw("vf-bond-vlan")
    steps(doc)["vf1"]["allocation"]["selector"]["cel"] = (
        'device.attributes["dra.networking"].pfName'
    )
    with pytest.raises(SelectorError) as info:
        allocate(compile_doc(doc), inventory(), policies())
    assert info.value.step == "vf1"
    assert info.value.device == "enp3s0f0v0"
    assert "must evaluate to a bool, got string" in info.value.reason


def test_release_refuses_what_is_not_allocated() -> None:
    allocator = Allocator(inventory(), policies())
    got = allocator.allocate(compile_doc(raw("vf-bond-vlan")))
    allocator.release(got)
    with pytest.raises(ValueError, match="not allocated"):
        allocator.release(got)
