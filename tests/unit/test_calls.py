"""Call-view prerequisite checks (blueprint 4.2): each failure names its check."""

from __future__ import annotations

from typing import Any

import pytest

from plugins.sdk import (
    PREPARED_VF,
    SHARED_PARENT,
    PrerequisiteError,
    Sharing,
    check_interface_name,
)
from tests import factories as f

VF_CONFIG = {"mtu": 1500, "vf": {"vlan": 0}, "rdmaAccess": False}
MACVLAN_CONFIG = {"mode": "bridge", "mtu": 1500}
BOND_CONFIG = {"mode": "active-backup", "monitorIntervalMs": 100, "mtu": 1500}


def fails(check: str, fn: Any, *args: Any) -> str:
    with pytest.raises(PrerequisiteError) as info:
        fn(*args)
    assert info.value.check == check
    return str(info.value)


def test_exclusive_vf_accepts_a_vf_allocation() -> None:
    vf = f.prepare_call("sriov", VF_CONFIG, f.vf_allocation(index=3)).require_exclusive_vf()
    assert (vf.pf_name, vf.vf_index, vf.pci_address) == ("enp3s0f0", 3, "0000:03:00.5")


@pytest.mark.parametrize(
    ("allocation", "fragment"),
    [
        (None, "no allocation binding"),
        (f.vf_allocation(sharing=Sharing.SHARED), "not Exclusive"),
        (f.vf_allocation(device_type="pf"), "not a VF"),
        (
            f.vf_allocation(
                attributes={"pfName": "enp3s0f0", "vfIndex": "x", "pciAddress": "0000:03:00.2"}
            ),
            "vfIndex",
        ),
        (
            f.vf_allocation(
                attributes={"pfName": "", "vfIndex": "0", "pciAddress": "0000:03:00.2"}
            ),
            "pfName",
        ),
        (
            f.vf_allocation(
                attributes={"pfName": "enp3s0f0", "vfIndex": "0", "pciAddress": "03:00.2"}
            ),
            "pciAddress",
        ),
    ],
)
def test_exclusive_vf_rejections(allocation: Any, fragment: str) -> None:
    call = f.prepare_call("sriov", VF_CONFIG, allocation)
    assert fragment in fails("exclusive-vf", call.require_exclusive_vf)


def test_exclusive_vf_on_a_shared_plugin_is_refused() -> None:
    call = f.prepare_call("macvlan", MACVLAN_CONFIG, f.vf_allocation())
    assert "does not prepare exclusive devices" in fails("exclusive-vf", call.require_exclusive_vf)


def test_shared_unit_accepts_one_unit() -> None:
    unit = f.prepare_call("macvlan", MACVLAN_CONFIG, f.parent_allocation()).require_shared_unit(
        "macvlan", "dra.networking/macvlans"
    )
    assert (unit.parent_name, unit.quantity) == ("enp3s0f2", 1)


@pytest.mark.parametrize(
    ("plugin", "capacity", "allocation", "fragment"),
    [
        (
            "macvlan",
            "dra.networking/macvlans",
            f.parent_allocation(capacity_name="dra.networking/ipvlans"),
            "consumes None",
        ),
        (
            "macvlan",
            "dra.networking/macvlans",
            f.parent_allocation(capacity={"dra.networking/macvlans": "2"}),
            "not exactly 1",
        ),
        ("macvlan", "dra.networking/ipvlans", f.parent_allocation(), "is not this plugin's"),
        (
            "ipvlan",
            "dra.networking/ipvlans",
            f.parent_allocation(),
            "does not prepare 'ipvlan' shares",
        ),
        (
            "macvlan",
            "dra.networking/macvlans",
            f.parent_allocation(sharing=Sharing.EXCLUSIVE),
            "not Shared",
        ),
        ("macvlan", "dra.networking/macvlans", f.parent_allocation(device_type="vf"), "is a 'vf'"),
        ("macvlan", "dra.networking/macvlans", f.parent_allocation(attributes={}), "parent ifName"),
    ],
)
def test_shared_unit_rejections(plugin: str, capacity: str, allocation: Any, fragment: str) -> None:
    call = f.prepare_call("macvlan", MACVLAN_CONFIG, allocation)
    assert fragment in fails("shared-unit", call.require_shared_unit, plugin, capacity)


def test_prepared_root_accepts_its_own_preparation() -> None:
    call = f.connect_call(
        "macvlan",
        MACVLAN_CONFIG,
        prepared=f.prepared("macvlan", "mv0", SHARED_PARENT),
        allocation=f.parent_allocation(),
    )
    assert call.require_prepared_root("macvlan").root_id == "mv0"


@pytest.mark.parametrize(
    ("over", "plugin", "fragment"),
    [
        ({}, "macvlan", "no prepared state"),
        (
            {"prepared": f.prepared("ipvlan", "mv0", SHARED_PARENT)},
            "macvlan",
            "belongs to 'ipvlan'",
        ),
        (
            {"prepared": f.prepared("macvlan", "mv0", SHARED_PARENT)},
            "ipvlan",
            "belongs to 'macvlan'",
        ),
        (
            {"prepared": f.prepared("macvlan", "other", SHARED_PARENT)},
            "macvlan",
            "is not allocation mv0",
        ),
        ({"prepared": f.prepared("macvlan", "mv0", PREPARED_VF)}, "macvlan", "is not a"),
    ],
)
def test_prepared_root_rejections(over: dict[str, Any], plugin: str, fragment: str) -> None:
    fields = {"allocation": f.parent_allocation(), **over}
    if not over:
        fields = {}
    call = f.connect_call("macvlan", MACVLAN_CONFIG, **fields)
    assert fragment in fails("prepared-root", call.require_prepared_root, plugin)


def members(*handles: Any) -> dict[str, tuple[Any, ...]]:
    return {"members": tuple(handles)}


A = f.interface("h-a", "pci:0000:03:00.2", name="net1")
B = f.interface("h-b", "pci:0000:03:00.3", name="net2")


def test_local_interfaces_accepts_sandbox_members() -> None:
    call = f.connect_call("bond", BOND_CONFIG, inputs=members(A, B))
    assert call.require_local_interfaces("members", 2, 8) == (A, B)


@pytest.mark.parametrize(
    ("inputs", "port", "fragment"),
    [
        (members(A), "members", "has 1 handles, needs 2..8"),
        (
            members(*(f.interface(f"h{i}", f"pci:{i}") for i in range(9))),
            "members",
            "has 9 handles",
        ),
        (members(A, f.interface("h-x", "pci:x", ns=f.OTHER_NS)), "members", "not in sandbox pod-a"),
        (
            members(A, f.interface("h-x", "pci:x", attachment="att-2")),
            "members",
            "belongs to attachment 'att-2'",
        ),
        (
            members(A, f.interface("h-x", "pci:x", type_="SharedParent/v1")),
            "members",
            "is a SharedParent/v1",
        ),
        (members(A, B), "parent", "is not a declared KernelInterface/v1 input"),
    ],
)
def test_local_interfaces_rejections(inputs: Any, port: str, fragment: str) -> None:
    call = f.connect_call("bond", BOND_CONFIG, inputs=inputs)
    assert fragment in fails("local-interfaces", call.require_local_interfaces, port, 2, 8)


def test_distinct_resources_by_physical_identity() -> None:
    call = f.connect_call("bond", BOND_CONFIG)
    call.require_distinct_resources([A, B])
    same_vf = f.interface("h-c", "pci:0000:03:00.2", name="other-name")
    assert "are the same pci:0000:03:00.2" in fails(
        "distinct-resources", call.require_distinct_resources, [A, same_vf]
    )
    assert "given twice" in fails("distinct-resources", call.require_distinct_resources, [A, A])
    anonymous = f.interface("h-d", "")
    assert "no physical identity" in fails(
        "distinct-resources", call.require_distinct_resources, [A, anonymous]
    )


@pytest.mark.parametrize(
    ("names", "port", "fragment"),
    [
        ({}, "interface", "no name assigned"),
        ({"interface": "x" * 16}, "interface", "1..15 bytes"),
        ({"interface": ""}, "interface", "1..15 bytes"),
        ({"interface": "a/b"}, "interface", "contains"),
        ({"interface": "a b"}, "interface", "contains"),
        ({"interface": ".."}, "interface", "reserved"),
        ({"interface": "eth\u00e9"}, "interface", "printable ASCII"),
        ({"interface": "data0"}, "members", "takes no assigned name"),
    ],
)
def test_interface_name_rejections(names: dict[str, str], port: str, fragment: str) -> None:
    call = f.connect_call("bond", BOND_CONFIG, interface_names=names)
    assert fragment in fails("interface-name", call.interface_name, port)


def test_interface_name_check_accepts_fifteen_bytes() -> None:
    assert check_interface_name("x" * 15) is None
    assert f.connect_call("bond", BOND_CONFIG).interface_name("interface") == "data0"
