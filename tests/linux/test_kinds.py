"""Link kinds whose modules some kernels lack: bond, vlan, ipvlan, dummy.

Each test asks ``require_kind`` first, which skips with one line naming the
missing module when a probe in a scratch namespace could not create that kind.
"""

from __future__ import annotations

import errno
from collections.abc import Callable

import pytest

from plugins.kernel import BondInfo, KernelError, LinkChanges, LinkKind, LinkSpec, NsRef
from plugins.kernel.linux import LinuxKernel

pytestmark = pytest.mark.netns

Require = Callable[[LinkKind], None]


def test_dummy(kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef, require_kind: Require) -> None:
    require_kind("dummy")
    d = kernel.create_link(ns_a, LinkSpec(kind="dummy", name="d0", mtu=9000))
    assert (d.kind, d.mtu, d.parent, d.peer) == ("dummy", 9000, None, None)
    moved = kernel.move_link(ns_a, d.ifindex, ns_b, new_name="d1")
    assert (moved.name, moved.ns.key) == ("d1", ns_b.key)
    kernel.delete_link(ns_b, moved.ifindex)
    assert kernel.get_link(ns_b, name="d1") is None


def test_bond_create_enslave_release(
    kernel: LinuxKernel, ns_a: NsRef, require_kind: Require
) -> None:
    require_kind("bond")
    bond = kernel.create_link(
        ns_a,
        LinkSpec(
            kind="bond",
            name="bond0",
            bond=BondInfo(mode="active-backup", miimon_ms=100, updelay_ms=200, downdelay_ms=200),
        ),
    )
    assert bond.kind == "bond"
    assert bond.bond is not None
    assert (bond.bond.mode, bond.bond.miimon_ms) == ("active-backup", 100)
    assert (bond.bond.updelay_ms, bond.bond.downdelay_ms) == (200, 200)
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
    port = kernel.set_link(ns_a, va.ifindex, LinkChanges(master=bond.ifindex))
    assert port.master == bond.ifindex
    kernel.set_link(ns_a, bond.ifindex, LinkChanges(up=True))
    up = kernel.set_link(ns_a, va.ifindex, LinkChanges(up=True))
    assert up.master == bond.ifindex
    released = kernel.set_link(ns_a, va.ifindex, LinkChanges(master=0))
    assert released.master is None
    with pytest.raises(KernelError) as exc:
        kernel.create_link(ns_a, LinkSpec(kind="bond", name="b1", bond=BondInfo("nope", 0)))
    assert exc.value.code == errno.EINVAL


def test_vlan_on_a_parent_in_another_namespace(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef, require_kind: Require
) -> None:
    require_kind("vlan")
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
    vl = kernel.create_link(
        ns_b,
        LinkSpec(
            kind="vlan",
            name="va.10",
            parent=va.ifindex,
            parent_ns=ns_a,
            vlan_id=10,
            vlan_protocol="802.1ad",
        ),
    )
    assert (vl.kind, vl.vlan_id, vl.vlan_protocol) == ("vlan", 10, "802.1ad")
    assert vl.parent == va.ifindex
    assert vl.parent_ns is not None
    assert vl.parent_ns.key == ns_a.key
    assert vl.mac == va.mac  # a vlan takes its lower's address
    codes = []
    for spec in (
        LinkSpec(kind="vlan", name="v2", parent=va.ifindex, vlan_id=4095),
        LinkSpec(kind="vlan", name="v3", parent=va.ifindex),
        LinkSpec(kind="vlan", name="v4", parent=va.ifindex, vlan_id=5, vlan_protocol="802.1x"),
    ):
        with pytest.raises(KernelError) as exc:
            kernel.create_link(ns_a, spec)
        codes.append(exc.value.code)
    assert codes == [errno.ERANGE, errno.EINVAL, errno.EPROTONOSUPPORT]


def test_ipvlan_modes(kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef, require_kind: Require) -> None:
    require_kind("ipvlan")
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
    ip = kernel.create_link(
        ns_b, LinkSpec(kind="ipvlan", name="ip0", parent=va.ifindex, parent_ns=ns_a, mode="l2")
    )
    assert (ip.kind, ip.mode, ip.parent) == ("ipvlan", "l2", va.ifindex)
    assert ip.parent_ns is not None
    assert ip.parent_ns.key == ns_a.key
    assert ip.mac == va.mac  # ipvlan shares its lower's address
    with pytest.raises(KernelError) as exc:
        kernel.create_link(ns_a, LinkSpec(kind="macvlan", name="mv", parent=va.ifindex))
    assert exc.value.code == errno.EBUSY  # macvlan and ipvlan exclude each other on a parent
