"""IFLA_MASTER: do_set_master, bond_enslave / __bond_release_one, br_add_if / br_del_if."""

from __future__ import annotations

import contextlib
import errno

from plugins.kernel import KernelError

from ._checks import valid_ether_addr
from ._dev import br_ports_changed, dev_close, dev_open, dev_set_mac, dev_set_mtu, set_mac_raw
from ._state import LinkState, SlaveSave, State, fail
from ._vfs import mailbox_answers, vlan_filter_refused

USES_PRIMARY = ("active-backup", "balance-tlb", "balance-alb")  # bond_uses_primary
BOND_MODES = (
    "balance-rr",
    "active-backup",
    "balance-xor",
    "broadcast",
    "802.3ad",
    "balance-tlb",
    "balance-alb",
)


def rx_handler_busy(state: State, link: LinkState) -> bool:
    """netdev_is_rx_handler_busy: a bond/bridge port or a macvlan/ipvlan lower owns rx_handler."""
    if link.master is not None:
        return True
    return any(c.kind in ("macvlan", "ipvlan") for c in state.children(link))


def do_set_master(state: State, link: LinkState, master: int) -> None:
    """rtnetlink do_set_master: leave the current master first, then join the new one."""
    if link.master is not None:
        current = state.links[link.master]
        if current.ifindex == master:
            return
        release(state, current, link)
    if master == 0:
        return
    upper = state.in_ns(link.ns, master)
    if upper is None:
        # __dev_get_by_index(dev_net(dev), ifindex) fails: -EINVAL, not -ENODEV
        raise fail(errno.EINVAL, f"no master with ifindex {master} in {link.name}'s namespace")
    if upper.kind == "bond":
        _bond_enslave(state, upper, link)
    elif upper.kind == "bridge":
        _br_add_if(state, upper, link)
    else:
        raise fail(errno.EOPNOTSUPP, f"{upper.name} ({upper.kind}) has no ndo_add_slave")


def release(state: State, master: LinkState, slave: LinkState) -> None:
    """ndo_del_slave of the current master."""
    if master.kind == "bond":
        _bond_release(state, master, slave, restore=True)
    else:
        slave.master = None  # br_del_if
        br_ports_changed(state, master)


def _is_upper_of(state: State, upper: LinkState, dev: LinkState) -> bool:
    """Whether ``upper`` sits (transitively) above ``dev`` through master links."""
    cur = dev
    while cur.master is not None:
        cur = state.links[cur.master]
        if cur is upper:
            return True
    return False


def _bond_enslave(state: State, bond: LinkState, slave: LinkState) -> None:
    info = bond.bond
    assert info is not None
    # bond_enslave's order of checks (6.1)
    if rx_handler_busy(state, slave):
        raise fail(errno.EBUSY, f"{slave.name} is in use and cannot be enslaved")
    if slave is bond:
        raise fail(errno.EPERM, "cannot enslave a bond to itself")
    if (slave.loopback or slave.kind == "ipvlan") and state.children(bond, "vlan"):
        # NETIF_F_VLAN_CHALLENGED into a bond with a vlan on it
        raise fail(errno.EPERM, f"{slave.name} is VLAN challenged and {bond.name} has VLANs")
    if slave.up:
        raise fail(errno.EPERM, f"{slave.name} can not be enslaved while up")
    if slave.loopback:
        if info.slaves:
            # another dev->type than the slaves' (ARPHRD_LOOPBACK, not ARPHRD_ETHER)
            raise fail(errno.EINVAL, "the loopback device's type differs from the slaves'")
        if info.mode == "802.3ad":
            # the first slave of another type: refused before the bond takes its type
            raise fail(errno.EINVAL, "8023AD mode requires Ethernet devices")
        # bond_setup_by_slave takes lo's type, then its all-zero address is refused; the
        # unwind's ether_setup leaves an empty bond with ETH_DATA_LEN as its max MTU
        bond.max_mtu = 1500
        raise fail(errno.EADDRNOTAVAIL, "the loopback device has no valid address")
    if _is_upper_of(state, slave, bond):
        raise fail(errno.EBUSY, "enslaving would make a loop")  # __netdev_upper_dev_link
    first_takes_mac = not info.slaves and bond.mac_assign == "random"
    keeps_mac = _slaves_keep_their_macs(bond)
    if first_takes_mac:
        set_mac_raw(state, bond, slave.mac, "stolen")  # bond_set_dev_addr
    saved = SlaveSave(mtu=slave.mtu, mac=slave.mac)
    try:
        dev_set_mtu(state, slave, bond.mtu)
        if not keeps_mac:
            dev_set_mac(state, slave, bond.mac)
        dev_open(state, slave)
        if (info.vid0 or state.children(bond, "vlan")) and vlan_filter_refused(state, slave):
            # vlan_vids_add_by_dev: the bond's VLAN ids (VID 0 if 8021q could add it as
            # the bond went up: BondState.vid0) go to the new slave, whose driver refuses them
            raise fail(errno.EINVAL, f"{slave.name} refuses {bond.name}'s VLAN ids")
    except KernelError:
        # bond_enslave's unwind: err_close, err_restore_mac, err_restore_mtu, err_undo_flags
        dev_close(state, slave)
        with contextlib.suppress(KernelError):
            dev_set_mac(state, slave, saved.mac)
        with contextlib.suppress(KernelError):
            dev_set_mtu(state, slave, saved.mtu)
        if first_takes_mac:
            # err_undo_flags: the bond still has the slave's address: eth_hw_addr_random
            set_mac_raw(state, bond, state.random_mac(), "random")
        raise
    slave.master = bond.id
    slave.saved = saved
    info.slaves.append(slave.id)
    # with miimon the slave's link is its carrier now, without it is taken as up; a VF
    # whose driver learns its link from its PF (igbvf's watchdog), or a PF whose port
    # autonegotiates, has none yet: it was just opened (a down bond's monitor does not
    # run, so it stays without one until the bond comes up)
    if not info.miimon_ms:
        info.link_up[slave.id] = True
    else:
        info.link_up[slave.id] = link_ok(state, slave) and not _link_comes_later(state, slave)
    select_active(state, bond)


def _bond_release(state: State, bond: LinkState, slave: LinkState, *, restore: bool) -> None:
    """__bond_release_one; ``restore`` is False when the slave itself is being deleted."""
    info = bond.bond
    assert info is not None
    # only fail_over_mac=active leaves a released slave the address it has: follow
    # restores its own, as without the option
    keeps_mac = info.fail_over_mac == "active" and info.mode == "active-backup"
    info.slaves.remove(slave.id)
    info.link_up.pop(slave.id, None)
    if info.active == slave.id:
        info.active = None
        select_active(state, bond)  # bond_select_active_slave: the best one left
    if not info.slaves:
        set_mac_raw(state, bond, state.random_mac(), "random")  # eth_hw_addr_random
    saved, slave.master, slave.saved = slave.saved, None, None
    if not restore or saved is None:
        return
    dev_close(state, slave)  # "close slave before restoring its mac address"
    if not keeps_mac:
        with contextlib.suppress(KernelError):
            dev_set_mac(state, slave, saved.mac)  # perm_hwaddr: its address at enslave
    with contextlib.suppress(KernelError):
        dev_set_mtu(state, slave, saved.mtu)  # original_mtu


def carrier(state: State, link: LinkState) -> bool:
    """netif_carrier_ok: what the link's driver says about its link."""
    if link.loopback or link.kind == "dummy":
        return True  # never turned off
    if link.kind == "veth":
        peer = state.links.get(link.peer) if link.peer is not None else None
        return link.up and peer is not None and peer.up  # veth_open: both ends up
    if link.kind in ("vlan", "macvlan", "ipvlan"):
        parent = state.links.get(link.parent or 0)
        return link.up and parent is not None and carrier(state, parent)
    if link.kind == "bond":
        b = link.bond
        return b is not None and any(b.link_up.get(s, False) for s in b.slaves)
    if link.kind == "bridge":
        return any(p.master == link.id and p.up for p in state.links.values())
    if link.vf_of is not None:
        pf = next((lk for lk in state.links.values() if lk.pci_address == link.vf_of[0]), None)
        # igbvf's link check asks its PF through the mailbox (e1000_check_for_link_vf)
        answers = mailbox_answers(state, link)
        return link.up and pf is not None and pf_has_link(state, pf) and answers
    return link.up and pf_has_link(state, link)


def _link_comes_later(state: State, link: LinkState) -> bool:
    """A VF whose driver learns its link through its PF's mailbox (igbvf's watchdog,
    started by igbvf_open) has no carrier right after it was opened, nor has a PF whose
    port autonegotiates after an open."""
    if link.vf_of is not None:
        table = state.pfs.get(link.vf_of[0])
        return table is not None and table.nic.vf_mailbox
    own = state.pfs.get(link.pci_address or "")
    return own is not None and own.nic.port_link_after_open


def pf_has_link(state: State, device: LinkState) -> bool:
    """A PCI netdev's port has link once it is up and a cable is in (a lab says when not)."""
    table = state.pfs.get(device.pci_address or "")
    return device.up and (table is None or table.cable)


def link_ok(state: State, slave: LinkState) -> bool:
    """bond_check_dev_link from the MII monitor: running and with carrier."""
    return slave.up and carrier(state, slave)


def select_active(state: State, bond: LinkState) -> None:
    """bond_select_active_slave: keep the current one while its link is up, else the first
    slave (enslave order) whose link is up, else none; modes without one have none."""
    info = bond.bond
    assert info is not None
    if info.mode not in USES_PRIMARY:
        info.active = None
        return
    if info.active is not None and info.link_up.get(info.active, False):
        return
    old = info.active
    info.active = next((s for s in info.slaves if info.link_up.get(s, False)), None)
    if info.active is not None and info.active != old and _slaves_keep_their_macs(bond):
        _fail_over_mac(state, bond, None if old is None else state.links.get(old))


def _slaves_keep_their_macs(bond: LinkState) -> bool:
    """bond_enslave / __bond_release_one: with fail_over_mac in active-backup mode a
    slave keeps its own address (the bond's is not given to it, nor taken back)."""
    info = bond.bond
    return info is not None and info.fail_over_mac != "none" and info.mode == "active-backup"


def _fail_over_mac(state: State, bond: LinkState, old: LinkState | None) -> None:
    """bond_do_fail_over_mac, for the new active slave: ``active``, the bond takes its
    address; ``follow``, it takes the old active slave's (or the bond's), and the old
    active slave takes the one it had."""
    info = bond.bond
    assert info is not None
    assert info.active is not None
    new = state.links[info.active]
    if info.fail_over_mac == "active":
        set_mac_raw(state, bond, new.mac, bond.mac_assign)  # bond_set_dev_addr
        return
    if old is None:  # bond_get_old_active: another slave carrying the bond's address
        old = next(
            (state.links[s] for s in info.slaves if s != new.id and state.links[s].mac == bond.mac),
            None,
        )
    before = new.mac
    with contextlib.suppress(KernelError):
        dev_set_mac(state, new, bond.mac if old is None else old.mac)
    if old is not None:
        with contextlib.suppress(KernelError):
            dev_set_mac(state, old, before)


def monitor(state: State) -> None:
    """Every up bond's MII monitor, run to completion: each slave's link is what
    bond_check_dev_link says now, and a bond whose active slave lost its link fails over.
    The real monitor runs every miimon ms; the corpus waits for it (await_active)."""
    for link in list(state.links.values()):
        info = link.bond
        if info is None or not info.miimon_ms or not link.up:
            continue
        for slave_id in info.slaves:
            info.link_up[slave_id] = link_ok(state, state.links[slave_id])
        select_active(state, link)


def release_all(state: State, bond: LinkState, dying: set[int]) -> None:
    """bond_uninit: a dying bond lets every slave go, restoring the survivors (``dying``: ids)."""
    assert bond.bond is not None
    for slave_id in list(bond.bond.slaves):
        _bond_release(state, bond, state.links[slave_id], restore=slave_id not in dying)


def detach_dying(state: State, slave: LinkState) -> None:
    """A dying port leaves its master (NETDEV_UNREGISTER on the slave)."""
    if slave.master is None:
        return
    master = state.links[slave.master]
    if master.kind == "bond":
        _bond_release(state, master, slave, restore=False)
    else:
        slave.master = None  # br_del_if
        br_ports_changed(state, master)


def _br_add_if(state: State, bridge: LinkState, port: LinkState) -> None:
    if port.loopback:
        raise fail(errno.EINVAL, "the loopback device cannot be a bridge port")  # br_add_if
    if not valid_ether_addr(port.mac):
        # br_add_if refuses a port without a valid Ethernet address before anything else,
        # e.g. a bridge whose last port left (its address is then all zeros).
        raise fail(errno.EINVAL, f"{port.name} has no valid Ethernet address")
    if port.kind == "bridge":
        raise fail(errno.ELOOP, "a bridge cannot be a port of a bridge")  # br_add_if
    if rx_handler_busy(state, port):
        raise fail(errno.EBUSY, f"{port.name} is in use")  # netdev_rx_handler_register
    if _is_upper_of(state, port, bridge):
        raise fail(errno.EBUSY, "enslaving would make a loop")
    if vlan_filter_refused(state, port):
        # nbp_vlan_init: every new port gets the bridge's default PVID (VLAN 1) through
        # vlan_vid_add, which a VF's driver asks its PF for (igbvf_vlan_rx_add_vid)
        raise fail(errno.EINVAL, f"{port.name} refuses {bridge.name}'s default VLAN")
    port.master = bridge.id
    br_ports_changed(state, bridge)
