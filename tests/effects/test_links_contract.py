"""The links plugin reads its capacity and names from the pinned descriptor, not from code:
a bundle that renames them changes what the handler checks and exports."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plugins import links
from plugins.sdk import (
    DEFAULT_BUNDLE_ROOT,
    BundleStore,
    ConnectCall,
    Hook,
    PrepareCall,
    PrerequisiteError,
    Registration,
    Registry,
    WrongStepKind,
)
from tests import factories as f

SLOTS = "example.com/macvlan-slots"


def repinned(tmp_path: Path, schema_id: str, edit: Callable[[dict[str, Any]], None]) -> Path:
    root = tmp_path / "contracts"
    shutil.copytree(DEFAULT_BUNDLE_ROOT, root)
    path = root / f"{schema_id}.json"
    data = json.loads(path.read_text())
    edit(data)
    raw = json.dumps(data).encode()
    path.write_bytes(raw)
    pins = json.loads((root / "pins.json").read_text())
    pins[schema_id] = "sha256:" + hashlib.sha256(raw).hexdigest()
    (root / "pins.json").write_text(json.dumps(pins))
    return root


def registration(root: Path, name: str) -> Registration:
    registry = Registry(BundleStore(root))
    links.register(registry)
    return next(r for r in registry.seal() if r.name == name)


def rename_macvlan_contract(data: dict[str, Any]) -> None:
    data["preparation"]["capacity"] = SLOTS
    data["preparation"]["outputs"][0]["name"] = "uplink"
    data["outputs"][0]["name"] = "iface"
    data["interfaceNames"] = ["iface"]


def test_a_share_consumes_the_capacity_and_exports_the_port_the_bundle_names(
    tmp_path: Path,
) -> None:
    reg = registration(repinned(tmp_path, "macvlan/v1alpha1", rename_macvlan_contract), "macvlan")
    plugin = reg.endpoint.handler
    config = json.dumps({"mode": "bridge", "mtu": 1500})

    def prepare(capacity: str) -> Any:
        allocation = f.parent_allocation(capacity_name=capacity)
        return plugin.node_prepare(
            PrepareCall(
                f.envelope(Hook.NODE_PREPARE), reg.descriptor, reg.validator, config, allocation
            )
        )

    plan = prepare(SLOTS)
    assert list(plan.exports) == ["uplink"]
    assert plan.effects[0].payload["capacity"] == SLOTS
    with pytest.raises(PrerequisiteError, match=f"consumes None of {SLOTS}"):
        prepare("dra.networking/macvlans")  # what the code used to hard-code

    connect = ConnectCall(
        f.envelope(Hook.CONNECT_NETWORK),
        reg.descriptor,
        reg.validator,
        config,
        sandbox=f.SANDBOX,
        interface_names={"iface": "net0"},
        prepared=f.prepared("macvlan", "mv0", "SharedParent/v1"),
        allocation=f.parent_allocation(capacity_name=SLOTS),
    )
    plan = plugin.connect_network(connect)
    assert list(plan.exports) == ["iface"]
    assert plan.effects[0].payload["name"] == "net0"


def test_a_vlan_takes_its_parent_from_the_input_port_the_bundle_names(tmp_path: Path) -> None:
    def rename(data: dict[str, Any]) -> None:
        data["inputs"][0]["name"] = "lower"

    reg = registration(repinned(tmp_path, "vlan/v1alpha1", rename), "vlan")
    call = ConnectCall(
        f.envelope(Hook.CONNECT_NETWORK),
        reg.descriptor,
        reg.validator,
        json.dumps({"vlanId": 100, "mtu": 1500}),
        sandbox=f.SANDBOX,
        interface_names={"interface": "data0"},
        inputs={"lower": (f.interface("h-parent", "pci:0000:03:00.2"),)},
    )
    plan = reg.endpoint.handler.connect_network(call)
    assert plan.effects[0].payload["parent"]["id"] == "h-parent"


def test_an_operation_only_contract_refuses_prepare() -> None:
    vlan = f.registrations()["vlan"]
    with pytest.raises(WrongStepKind, match="vlan: NodePrepare"):
        links.Plugin(links.Kind.VLAN).node_prepare(
            PrepareCall(f.envelope(Hook.NODE_PREPARE), vlan.descriptor, vlan.validator, "{}", None)
        )
