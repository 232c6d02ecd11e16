"""Bond membership: enslave rules, what enslaving induces, release restoring it."""

from __future__ import annotations

import errno
from typing import Any

import pytest

from fakekernel import FakeKernelModel
from plugins.kernel import BondInfo, Link, LinkChanges, NsRef

from .helpers import kernel_error, link, mk

AB = BondInfo(mode="active-backup", miimon_ms=100)


@pytest.fixture
def bond(m: FakeKernelModel, host: NsRef) -> Link:
    return mk(m, host, "bond", "bond0", bond=AB, mtu=9000)


def enslave(m: FakeKernelModel, ns: NsRef, slave: Link, master: Link) -> Link:
    return m.set_link(ns, slave.ifindex, LinkChanges(master=master.ifindex))


def test_enslaving_sets_mtu_mac_up_and_the_active_slave(
    m: FakeKernelModel, host: NsRef, bond: Link
) -> None:
    pf_up(m, host)  # the VFs get carrier once up
    v0, v1 = link(m, host, "enp3s0f0v0"), link(m, host, "enp3s0f0v1")
    s0 = enslave(m, host, v0, bond)
    assert (s0.master, s0.mtu, s0.up) == (bond.ifindex, 9000, True)
    b = link(m, host, "bond0")
    assert b.mac == v0.mac  # the bond had a random address: it takes its first slave's
    assert b.bond is not None
    assert b.bond.active_slave == v0.ifindex
    s1 = enslave(m, host, v1, bond)
    assert s1.mac == v0.mac  # later slaves take the bond's address (fail_over_mac=none)
    assert link(m, host, "bond0").bond == BondInfo("active-backup", 100, 0, 0, v0.ifindex)


def test_a_bond_with_an_explicit_mac_keeps_it(m: FakeKernelModel, host: NsRef) -> None:
    b = mk(m, host, "bond", "bond1", bond=AB, mac="02:bb:00:00:00:01")
    slave = enslave(m, host, link(m, host, "enp3s0f0v0"), b)
    assert slave.mac == link(m, host, "bond1").mac == "02:bb:00:00:00:01"


def test_an_up_link_cannot_be_enslaved(m: FakeKernelModel, host: NsRef, bond: Link) -> None:
    v0 = m.set_link(host, link(m, host, "enp3s0f0v0").ifindex, LinkChanges(up=True))
    with kernel_error(errno.EPERM):
        enslave(m, host, v0, bond)
    # one message "down + master": the down goes first, so this works
    m.set_link(host, v0.ifindex, LinkChanges(up=False, master=bond.ifindex))
    assert link(m, host, "enp3s0f0v0").master == bond.ifindex


def test_master_and_up_in_one_message_enslave_first(
    m: FakeKernelModel, host: NsRef, bond: Link
) -> None:
    v0 = link(m, host, "enp3s0f0v0")
    after = m.set_link(host, v0.ifindex, LinkChanges(master=bond.ifindex, up=True))
    assert (after.master, after.up) == (bond.ifindex, True)


def test_a_bond_cannot_enslave_itself(m: FakeKernelModel, host: NsRef, bond: Link) -> None:
    with kernel_error(errno.EPERM):
        enslave(m, host, bond, bond)


def test_the_master_is_looked_up_in_the_slaves_namespace(
    m: FakeKernelModel, host: NsRef, pod: NsRef
) -> None:
    v0 = link(m, host, "enp3s0f0v0")
    with kernel_error(errno.EINVAL):  # do_set_master: __dev_get_by_index fails
        m.set_link(host, v0.ifindex, LinkChanges(master=999))
    other = mk(m, pod, "bond", "bond0")
    same_number = link(m, host, "enp3s0f0")
    assert other.ifindex == same_number.ifindex  # ifindexes are per namespace
    with kernel_error(errno.EOPNOTSUPP):  # so this names the host's PF, not the pod's bond
        enslave(m, host, v0, other)


def test_only_bonds_and_bridges_are_masters(m: FakeKernelModel, host: NsRef) -> None:
    veth = mk(m, host, "veth", "a", peer_name="b")
    v0 = link(m, host, "enp3s0f0v0")
    with kernel_error(errno.EOPNOTSUPP):
        enslave(m, host, v0, veth)
    br = mk(m, host, "bridge", "br0")
    port = m.set_link(host, link(m, host, "b").ifindex, LinkChanges(up=True, master=br.ifindex))
    assert port.master == br.ifindex  # bridges take up ports and change nothing else
    with kernel_error(errno.ELOOP):
        enslave(m, host, mk(m, host, "bridge", "br1"), br)


def test_a_new_master_takes_the_slave_from_the_old_one(
    m: FakeKernelModel, host: NsRef, bond: Link
) -> None:
    """do_set_master releases from the current master first; refusing is the caller's job."""
    v0 = link(m, host, "enp3s0f0v0")
    enslave(m, host, v0, bond)
    other = mk(m, host, "bond", "bond1", bond=AB)
    moved = enslave(m, host, v0, other)
    assert moved.master == other.ifindex
    assert moved.mtu == 1500  # restored on release, then took bond1's MTU
    assert link(m, host, "bond0").bond == BondInfo("active-backup", 100, 0, 0, None)
    assert enslave(m, host, moved, other) == moved  # same master again: nothing to do


def test_a_macvlan_lower_is_busy(m: FakeKernelModel, host: NsRef, bond: Link) -> None:
    v0 = link(m, host, "enp3s0f0v0")
    mk(m, host, "macvlan", "mv0", parent=v0.ifindex)
    with kernel_error(errno.EBUSY):  # netdev_is_rx_handler_busy
        enslave(m, host, v0, bond)


def test_release_restores_mtu_and_mac_and_downs_the_slave(
    m: FakeKernelModel, host: NsRef, bond: Link
) -> None:
    v0, v1 = link(m, host, "enp3s0f0v0"), link(m, host, "enp3s0f0v1")
    enslave(m, host, v0, bond)
    enslave(m, host, v1, bond)
    bond_mac = link(m, host, "bond0").mac
    r1 = m.set_link(host, v1.ifindex, LinkChanges(master=0))
    assert (r1.master, r1.mtu, r1.mac, r1.up) == (None, 1500, v1.mac, False)
    assert link(m, host, "bond0").mac == bond_mac  # slaves remain
    r0 = m.set_link(host, v0.ifindex, LinkChanges(master=0))
    assert (r0.mtu, r0.mac, r0.up) == (1500, v0.mac, False)
    assert link(m, host, "bond0").mac != v0.mac  # last slave gone: a new random address


def pf_up(m: FakeKernelModel, host: NsRef) -> None:
    m.set_link(host, link(m, host, "enp3s0f0").ifindex, LinkChanges(up=True))


def test_a_slave_without_carrier_is_never_active(
    m: FakeKernelModel, host: NsRef, bond: Link
) -> None:
    """A VF of a down PF has no carrier: with miimon its link is down, and no slave is
    active (Linux 6.1/6.12, igbvf); once the PF is up the monitor picks it."""
    v0 = link(m, host, "enp3s0f0v0")
    enslave(m, host, v0, bond)
    b = link(m, host, "bond0").bond
    assert b is not None
    assert b.active_slave is None
    m.set_link(host, bond.ifindex, LinkChanges(up=True))
    pf_up(m, host)
    b = link(m, host, "bond0").bond
    assert b is not None
    assert b.active_slave == v0.ifindex


def test_the_active_slave_going_down_fails_over(
    m: FakeKernelModel, host: NsRef, bond: Link
) -> None:
    pf_up(m, host)
    v0, v1 = link(m, host, "enp3s0f0v0"), link(m, host, "enp3s0f0v1")
    enslave(m, host, v0, bond)
    enslave(m, host, v1, bond)
    m.set_link(host, bond.ifindex, LinkChanges(up=True))
    m.set_link(host, v0.ifindex, LinkChanges(up=False))
    b = link(m, host, "bond0").bond
    assert b is not None
    assert b.active_slave == v1.ifindex
    m.set_link(host, v0.ifindex, LinkChanges(up=True))  # no primary: v1 stays
    b = link(m, host, "bond0").bond
    assert b is not None
    assert b.active_slave == v1.ifindex


def test_the_next_slave_becomes_active(m: FakeKernelModel, host: NsRef, bond: Link) -> None:
    pf_up(m, host)
    v0, v1 = link(m, host, "enp3s0f0v0"), link(m, host, "enp3s0f0v1")
    enslave(m, host, v0, bond)
    enslave(m, host, v1, bond)
    m.set_link(host, v0.ifindex, LinkChanges(master=0))
    b = link(m, host, "bond0").bond
    assert b is not None
    assert b.active_slave == v1.ifindex


def test_deleting_a_bond_releases_and_restores_its_slaves(
    m: FakeKernelModel, host: NsRef, bond: Link
) -> None:
    before = m.snapshot()
    v0 = link(m, host, "enp3s0f0v0")
    enslave(m, host, v0, bond)
    v5 = mk(m, host, "vlan", "bond0.5", parent=bond.ifindex, vlan_id=5)
    m.delete_link(host, bond.ifindex)
    assert m.get_link(host, ifindex=v5.ifindex) is None  # children die with the bond
    back = link(m, host, "enp3s0f0v0")
    assert (back.master, back.mtu, back.mac, back.up) == (None, 1500, v0.mac, False)
    assert [ln for ln in before["links"] if ln["name"] != "bond0"] == m.snapshot()["links"]


def test_bond_mtu_reaches_every_slave_or_none(m: FakeKernelModel, host: NsRef, bond: Link) -> None:
    v0 = link(m, host, "enp3s0f0v0")
    enslave(m, host, v0, bond)
    m.set_link(host, bond.ifindex, LinkChanges(mtu=4000))
    assert link(m, host, "enp3s0f0v0").mtu == 4000
    with kernel_error(errno.EINVAL):  # the VF's max_mtu is 9702
        m.set_link(host, bond.ifindex, LinkChanges(mtu=9800))
    assert (link(m, host, "bond0").mtu, link(m, host, "enp3s0f0v0").mtu) == (4000, 4000)


def test_enslaving_fails_when_the_slave_cannot_take_the_bond_mtu(
    m: FakeKernelModel, host: NsRef
) -> None:
    big = mk(m, host, "bond", "big", bond=AB, mtu=9800)
    vf = link(m, host, "enp3s0f0v0")
    before = m.snapshot()
    with kernel_error(errno.EINVAL):
        enslave(m, host, vf, big)
    # bond_enslave unwinds; the bond, which took the slave's address first, gets a new
    # random one (err_undo_flags: eth_hw_addr_random)
    after = m.snapshot()
    assert link(m, host, "big").mac not in (big.mac, vf.mac)

    def without_big_mac(snap: dict[str, Any]) -> list[dict[str, Any]]:
        return [dict(lk, mac=None) if lk["name"] == "big" else lk for lk in snap["links"]]

    assert without_big_mac(after) == without_big_mac(before)
    assert {k: v for k, v in after.items() if k != "links"} == {
        k: v for k, v in before.items() if k != "links"
    }


def test_bonds_are_local_to_their_namespace(m: FakeKernelModel, host: NsRef, pod: NsRef) -> None:
    b = mk(m, host, "bond", "bond9")
    with kernel_error(errno.EINVAL):  # NETIF_F_NETNS_LOCAL
        m.move_link(host, b.ifindex, pod)
    with kernel_error(errno.EINVAL):
        m.move_link(host, mk(m, host, "bridge", "br0").ifindex, pod)


def test_bond_parameters_are_validated(m: FakeKernelModel, host: NsRef) -> None:
    with kernel_error(errno.EINVAL):
        mk(m, host, "bond", "b0", bond=BondInfo(mode="lacp-ish", miimon_ms=100))
    with kernel_error(errno.EINVAL):
        mk(m, host, "bond", "b0", bond=BondInfo(mode="active-backup", miimon_ms=-1))
    default = mk(m, host, "bond", "b0")
    assert default.bond == BondInfo("balance-rr", 0, 0, 0, None)  # no MII monitor
    with kernel_error(errno.EPERM):  # delays need the MII monitor
        mk(m, host, "bond", "b1", bond=BondInfo("active-backup", 0, updelay_ms=200))
    rounded = mk(m, host, "bond", "b2", bond=BondInfo("active-backup", 100, 250, 120))
    assert rounded.bond == BondInfo("active-backup", 100, 200, 100, None)  # whole periods
