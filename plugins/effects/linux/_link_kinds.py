"""The kinds of link the project's plugins create, each only its spec on the owned-link kit."""

from __future__ import annotations

from plugins.effects import CREATE_BOND, CREATE_SHARED_CHILD, CREATE_VLAN
from plugins.kernel import BondInfo, Link, LinkSpec
from plugins.sdk import FailedPrecondition

from ._common import HANDLE_SCHEMA, MTU_SCHEMA, locate
from ._links import NewLink, OwnedLink, owned_link_payload


def bond_spec(new: NewLink) -> LinkSpec:
    p = new.payload
    bond = BondInfo(
        p["mode"], p["monitorIntervalMs"], p.get("upDelayMs", 0), p.get("downDelayMs", 0)
    )
    return LinkSpec(kind="bond", name=new.name, mtu=p["mtu"], bond=bond)


CreateBond = OwnedLink(
    effect_kind=CREATE_BOND,
    link_kind="bond",
    payload_schema=owned_link_payload(
        {
            "mode": {"const": "active-backup"},
            "monitorIntervalMs": {"type": "integer", "minimum": 1},
            "mtu": MTU_SCHEMA,
            "upDelayMs": {"type": "integer", "minimum": 0},
            "downDelayMs": {"type": "integer", "minimum": 0},
        },
        required=["mode", "monitorIntervalMs", "mtu"],
    ),
    spec=bond_spec,
)


def vlan_parent(new: NewLink) -> Link:
    """A VLAN is layer 2 only: its parent must already be in the sandbox."""
    parent = locate(new.kernel, new.payload["parent"]["description"])
    if parent is None or parent.ns.key != new.namespace.key:
        raise FailedPrecondition("the VLAN parent is not in the sandbox namespace")
    return parent


def vlan_spec(new: NewLink) -> LinkSpec:
    p = new.payload
    return LinkSpec(
        kind="vlan",
        name=new.name,
        mtu=p["mtu"],
        parent=vlan_parent(new).ifindex,
        vlan_id=p["vlanId"],
        vlan_protocol=p["protocol"],
    )


CreateVLAN = OwnedLink(
    effect_kind=CREATE_VLAN,
    link_kind="vlan",
    payload_schema=owned_link_payload(
        {
            "parent": HANDLE_SCHEMA,
            "vlanId": {"type": "integer", "minimum": 1, "maximum": 4094},
            "protocol": {"enum": ["802.1Q", "802.1ad"]},
            "mtu": MTU_SCHEMA,
        },
        required=["parent", "vlanId", "protocol", "mtu"],
    ),
    spec=vlan_spec,
)


def shared_parent(new: NewLink) -> Link:
    """The prepared host parent, by ifindex and name; it is only referenced, never changed."""
    desc = new.payload["parent"]["description"]
    host = new.kernel.host_namespace()
    parent = new.kernel.get_link(host, ifindex=int(desc["ifIndex"]))
    if parent is None or parent.name != desc["ifName"]:
        raise FailedPrecondition(f"shared parent {desc.get('ifName')} is not in the host namespace")
    return parent


def shared_child_spec(new: NewLink) -> LinkSpec:
    """A macvlan (bridge) or ipvlan (l2) child of the host parent, born in the sandbox."""
    p = new.payload
    parent = shared_parent(new)
    return LinkSpec(
        kind=p["kind"],
        name=new.name,
        mtu=p["mtu"],
        parent=parent.ifindex,
        parent_ns=parent.ns,
        mode=p["mode"],
    )


CreateSharedChild = OwnedLink(
    effect_kind=CREATE_SHARED_CHILD,
    link_kind=lambda payload: str(payload["kind"]),
    payload_schema=owned_link_payload(
        {
            "parent": HANDLE_SCHEMA,
            "kind": {"enum": ["macvlan", "ipvlan"]},
            "mode": {"enum": ["bridge", "l2"]},
            "mtu": MTU_SCHEMA,
        },
        required=["parent", "kind", "mode", "mtu"],
    ),
    spec=shared_child_spec,
)
