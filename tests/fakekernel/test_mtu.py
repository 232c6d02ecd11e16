"""MTU bounds, children against their lower device, propagation on lower changes."""

from __future__ import annotations

import errno

from fakekernel import FakeKernelModel
from plugins.kernel import LinkChanges, NsRef

from .helpers import kernel_error, link, mk


def test_mtu_outside_the_device_bounds_is_einval(m: FakeKernelModel, host: NsRef) -> None:
    vf = link(m, host, "enp3s0f0v0")
    assert (vf.min_mtu, vf.max_mtu) == (68, 9702)
    for mtu in (67, 9703):
        with kernel_error(errno.EINVAL):
            m.set_link(host, vf.ifindex, LinkChanges(mtu=mtu))
    assert m.set_link(host, vf.ifindex, LinkChanges(mtu=9702)).mtu == 9702
    with kernel_error(errno.EINVAL):
        mk(m, host, "veth", "v0", mtu=65536)


def test_dummy_mtu_has_no_upper_bound(m: FakeKernelModel, host: NsRef) -> None:
    d = mk(m, host, "dummy", "d0", mtu=100000)  # dummy_setup: max_mtu = 0
    assert (d.mtu, d.min_mtu, d.max_mtu) == (100000, 0, 0)


def test_children_inherit_their_lowers_mtu(m: FakeKernelModel, host: NsRef) -> None:
    eth9 = link(m, host, "eth9")
    for kind, extra in (("vlan", {"vlan_id": 5}), ("macvlan", {}), ("ipvlan", {})):
        child = mk(m, host, kind, f"c-{kind}", parent=eth9.ifindex, **extra)
        assert child.mtu == 9000, kind
        m.delete_link(host, child.ifindex)  # macvlan and ipvlan cannot share a lower


def test_vlan_above_parent_mtu_is_einval_at_creation_erange_on_change(
    m: FakeKernelModel, host: NsRef
) -> None:
    eth9 = link(m, host, "eth9")
    with kernel_error(errno.EINVAL):  # vlan_newlink
        mk(m, host, "vlan", "v5", parent=eth9.ifindex, vlan_id=5, mtu=9001)
    v = mk(m, host, "vlan", "v5", parent=eth9.ifindex, vlan_id=5, mtu=1500)
    with kernel_error(errno.ERANGE):  # vlan_dev_change_mtu
        m.set_link(host, v.ifindex, LinkChanges(mtu=9001))
    assert m.set_link(host, v.ifindex, LinkChanges(mtu=9000)).mtu == 9000


def test_macvlan_above_lower_mtu_is_einval(m: FakeKernelModel, host: NsRef) -> None:
    eth9 = link(m, host, "eth9")
    with kernel_error(errno.EINVAL):  # macvlan_common_newlink
        mk(m, host, "macvlan", "mv0", parent=eth9.ifindex, mtu=9001)
    mv = mk(m, host, "macvlan", "mv0", parent=eth9.ifindex, mtu=1500)
    assert mv.max_mtu == eth9.max_mtu  # 68 .. lowerdev->max_mtu
    with kernel_error(errno.EINVAL):  # macvlan_change_mtu
        m.set_link(host, mv.ifindex, LinkChanges(mtu=9001))


def test_ipvlan_mtu_is_not_bounded_by_its_lower_but_follows_it(
    m: FakeKernelModel, host: NsRef
) -> None:
    eth9 = link(m, host, "eth9")
    ipv = mk(m, host, "ipvlan", "ipv0", parent=eth9.ifindex, mtu=9500)  # no check in link_new
    assert ipv.mtu == 9500
    assert m.set_link(host, ipv.ifindex, LinkChanges(mtu=9600)).mtu == 9600  # no ndo_change_mtu
    m.set_link(host, eth9.ifindex, LinkChanges(mtu=4000))
    assert link(m, host, "ipv0").mtu == 4000  # ipvlan_adjust_mtu, even upwards later
    m.set_link(host, eth9.ifindex, LinkChanges(mtu=6000))
    assert link(m, host, "ipv0").mtu == 6000


def test_lowering_a_parent_mtu_clamps_vlans_and_macvlans(m: FakeKernelModel, host: NsRef) -> None:
    eth9 = link(m, host, "eth9")
    mk(m, host, "vlan", "v5", parent=eth9.ifindex, vlan_id=5)
    mk(m, host, "macvlan", "mv0", parent=eth9.ifindex, mtu=1400)
    m.set_link(host, eth9.ifindex, LinkChanges(mtu=1500))
    assert link(m, host, "v5").mtu == 1500
    assert link(m, host, "mv0").mtu == 1400  # already fits
    m.set_link(host, eth9.ifindex, LinkChanges(mtu=9000))
    assert link(m, host, "v5").mtu == 1500  # raising the parent does not raise children
