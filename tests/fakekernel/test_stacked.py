"""vlan, macvlan and ipvlan on a lower device, possibly in another namespace."""

from __future__ import annotations

import errno

import pytest

from fakekernel import FakeKernelModel
from plugins.kernel import LinkChanges, NsRef

from .helpers import kernel_error, link, mk


@pytest.mark.parametrize("kind", ["vlan", "macvlan", "ipvlan"])
def test_children_need_an_existing_lower(m: FakeKernelModel, host: NsRef, kind: str) -> None:
    extra = {"vlan_id": 5} if kind == "vlan" else {}
    with kernel_error(errno.EINVAL):  # no IFLA_LINK
        mk(m, host, kind, "c0", **extra)
    with kernel_error(errno.ENODEV):
        mk(m, host, kind, "c0", parent=999, **extra)


def test_a_child_is_created_straight_into_another_namespace(
    m: FakeKernelModel, host: NsRef, pod: NsRef
) -> None:
    eth9 = link(m, host, "eth9")
    mv = mk(m, pod, "macvlan", "eth0", parent=eth9.ifindex, parent_ns=host, mode="bridge")
    assert (mv.ns, mv.parent, mv.parent_ns, mv.mode) == (pod, eth9.ifindex, host, "bridge")
    with kernel_error(errno.ENODEV):  # without parent_ns the lower is looked up in the pod
        mk(m, pod, "macvlan", "eth1", parent=eth9.ifindex)


def test_deleting_a_lower_deletes_its_children_in_every_namespace(
    m: FakeKernelModel, host: NsRef, pod: NsRef
) -> None:
    a = mk(m, host, "veth", "a", peer_name="b")
    mk(m, pod, "macvlan", "mv0", parent=a.ifindex, parent_ns=host)
    mk(m, host, "vlan", "a.5", parent=a.ifindex, vlan_id=5)
    m.delete_link(host, a.ifindex)
    assert [ln.name for ln in m.list_links(pod)] == []
    assert m.get_link(host, name="a.5") is None


def test_moving_a_lower_keeps_its_children(m: FakeKernelModel, host: NsRef, pod: NsRef) -> None:
    v0 = link(m, host, "enp3s0f0v0")
    vl = mk(m, host, "vlan", "v0.5", parent=v0.ifindex, vlan_id=5)
    m.move_link(host, v0.ifindex, pod)
    still = link(m, host, "v0.5")
    assert (still.ifindex, still.parent, still.parent_ns) == (vl.ifindex, v0.ifindex, pod)


def test_macvlan_and_ipvlan_exclude_each_other_on_a_lower(m: FakeKernelModel, host: NsRef) -> None:
    eth9, v0 = link(m, host, "eth9"), link(m, host, "enp3s0f0v0")
    mk(m, host, "macvlan", "mv0", parent=eth9.ifindex)
    with kernel_error(errno.EBUSY):  # ipvlan_link_new: rx_handler busy
        mk(m, host, "ipvlan", "ipv0", parent=eth9.ifindex)
    mk(m, host, "ipvlan", "ipv0", parent=v0.ifindex)
    with kernel_error(errno.EBUSY):  # macvlan_port_create
        mk(m, host, "macvlan", "mv1", parent=v0.ifindex)


def test_ipvlan_mode_belongs_to_the_lower_port(m: FakeKernelModel, host: NsRef) -> None:
    eth9 = link(m, host, "eth9")
    first = mk(m, host, "ipvlan", "ipv0", parent=eth9.ifindex, mode="l2")
    assert first.mode == "l2"
    mk(m, host, "ipvlan", "ipv1", parent=eth9.ifindex, mode="l3")
    assert link(m, host, "ipv0").mode == "l3"  # ipvlan_set_port_mode switched everyone
    assert mk(m, host, "ipvlan", "ipv2", parent=eth9.ifindex).mode == "l3"  # default l3
    on_child = mk(m, host, "ipvlan", "ipv3", parent=first.ifindex, mode="l2")
    assert on_child.parent == eth9.ifindex  # an ipvlan on an ipvlan joins the same port
    assert {link(m, host, n).mode for n in ("ipv0", "ipv1", "ipv2", "ipv3")} == {"l2"}
    with kernel_error(errno.EINVAL):
        mk(m, host, "ipvlan", "ipv4", parent=eth9.ifindex, mode="l4")


def test_ipvlan_shares_its_lowers_address(m: FakeKernelModel, host: NsRef) -> None:
    eth9 = link(m, host, "eth9")
    ipv = mk(m, host, "ipvlan", "ipv0", parent=eth9.ifindex, mac="02:cc:00:00:00:01")
    assert ipv.mac == eth9.mac
    with kernel_error(errno.EOPNOTSUPP):
        m.set_link(host, ipv.ifindex, LinkChanges(mac="02:cc:00:00:00:01"))
    m.set_link(host, eth9.ifindex, LinkChanges(mac="02:cc:00:00:00:02"))
    assert link(m, host, "ipv0").mac == "02:cc:00:00:00:02"


@pytest.mark.parametrize(("vlan_id", "code"), [(4095, errno.ERANGE), (-1, errno.ERANGE)])
def test_vlan_id_range(m: FakeKernelModel, host: NsRef, vlan_id: int, code: int) -> None:
    eth9 = link(m, host, "eth9")
    with kernel_error(code):  # vlan_validate: id >= VLAN_VID_MASK
        mk(m, host, "vlan", "v", parent=eth9.ifindex, vlan_id=vlan_id)


def test_vlan_needs_an_id_and_a_known_protocol(m: FakeKernelModel, host: NsRef) -> None:
    eth9 = link(m, host, "eth9")
    with kernel_error(errno.EINVAL):
        mk(m, host, "vlan", "v", parent=eth9.ifindex)
    with kernel_error(errno.EPROTONOSUPPORT):
        mk(m, host, "vlan", "v", parent=eth9.ifindex, vlan_id=5, vlan_protocol="802.1X")
    assert mk(m, host, "vlan", "v0", parent=eth9.ifindex, vlan_id=0).vlan_id == 0


def test_duplicate_vlan_on_one_lower_is_eexist(m: FakeKernelModel, host: NsRef) -> None:
    eth9 = link(m, host, "eth9")
    mk(m, host, "vlan", "v5", parent=eth9.ifindex, vlan_id=5)
    with kernel_error(errno.EEXIST):  # vlan_check_real_dev
        mk(m, host, "vlan", "v5b", parent=eth9.ifindex, vlan_id=5)
    qinq = mk(m, host, "vlan", "s5", parent=eth9.ifindex, vlan_id=5, vlan_protocol="802.1ad")
    assert qinq.vlan_protocol == "802.1ad"


def test_vlans_follow_their_lowers_up_and_down(m: FakeKernelModel, host: NsRef) -> None:
    eth9 = link(m, host, "eth9")
    v5 = mk(m, host, "vlan", "v5", parent=eth9.ifindex, vlan_id=5)
    with kernel_error(errno.ENETDOWN):  # vlan_dev_open
        m.set_link(host, v5.ifindex, LinkChanges(up=True))
    m.set_link(host, eth9.ifindex, LinkChanges(up=True))
    assert link(m, host, "v5").up  # NETDEV_UP brings every vlan up
    m.set_link(host, eth9.ifindex, LinkChanges(up=False))
    assert not link(m, host, "v5").up


def test_a_vlan_keeps_following_its_lowers_address(m: FakeKernelModel, host: NsRef) -> None:
    eth9 = m.set_link(host, link(m, host, "eth9").ifindex, LinkChanges(up=True))
    v5 = mk(m, host, "vlan", "v5", parent=eth9.ifindex, vlan_id=5)
    assert v5.mac == eth9.mac
    m.set_link(host, v5.ifindex, LinkChanges(up=True))
    m.set_link(host, eth9.ifindex, LinkChanges(mac="02:dd:00:00:00:01"))
    assert link(m, host, "v5").mac == "02:dd:00:00:00:01"
    m.set_link(host, v5.ifindex, LinkChanges(mac="02:dd:00:00:00:02"))
    m.set_link(host, eth9.ifindex, LinkChanges(mac="02:dd:00:00:00:03"))
    assert link(m, host, "v5").mac == "02:dd:00:00:00:02"  # an explicit address stays


def test_macvlan_modes_and_passthru(m: FakeKernelModel, host: NsRef) -> None:
    eth9, v0 = link(m, host, "eth9"), link(m, host, "enp3s0f0v0")
    with kernel_error(errno.EINVAL):
        mk(m, host, "macvlan", "mv0", parent=eth9.ifindex, mode="bogus")
    assert mk(m, host, "macvlan", "mv0", parent=eth9.ifindex).mode == "vepa"  # the default
    with kernel_error(errno.EINVAL):  # only alone
        mk(m, host, "macvlan", "mv1", parent=eth9.ifindex, mode="passthru")
    pt = mk(m, host, "macvlan", "pt0", parent=v0.ifindex, mode="passthru")
    assert pt.mac == v0.mac
    with kernel_error(errno.EINVAL):
        mk(m, host, "macvlan", "pt1", parent=v0.ifindex)


def test_macvlan_on_a_macvlan_stacks_on_the_real_device(m: FakeKernelModel, host: NsRef) -> None:
    eth9 = link(m, host, "eth9")
    mv0 = mk(m, host, "macvlan", "mv0", parent=eth9.ifindex)
    assert mk(m, host, "macvlan", "mv1", parent=mv0.ifindex).parent == eth9.ifindex


def test_macvlan_addresses_must_differ_on_one_lower(m: FakeKernelModel, host: NsRef) -> None:
    eth9 = link(m, host, "eth9")
    a = mk(m, host, "macvlan", "mv0", parent=eth9.ifindex, mac="02:ee:00:00:00:01")
    m.set_link(host, a.ifindex, LinkChanges(up=True))
    b = mk(m, host, "macvlan", "mv1", parent=eth9.ifindex)
    with kernel_error(errno.EADDRINUSE):  # macvlan_set_mac_address
        m.set_link(host, b.ifindex, LinkChanges(mac="02:ee:00:00:00:01"))
    c = mk(m, host, "macvlan", "mv2", parent=eth9.ifindex, mac=eth9.mac)
    with kernel_error(errno.EADDRINUSE):  # macvlan_open
        m.set_link(host, c.ifindex, LinkChanges(up=True))


def test_no_vlans_on_an_ipvlan(m: FakeKernelModel, host: NsRef) -> None:
    ipv = mk(m, host, "ipvlan", "ipv0", parent=link(m, host, "eth9").ifindex)
    with kernel_error(errno.EOPNOTSUPP):  # NETIF_F_VLAN_CHALLENGED
        mk(m, host, "vlan", "ipv0.5", parent=ipv.ifindex, vlan_id=5)
