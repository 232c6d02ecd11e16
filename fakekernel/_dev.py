"""Core netdev operations and the notifier side effects they have on stacked devices.

Each function mirrors one kernel entry point (dev_set_mtu, dev_set_mac_address,
dev_open, dev_close, dev_change_name, dev_set_alias) followed by what the upper
devices' netdevice notifiers do on NETDEV_CHANGEMTU / CHANGEADDR / UP / DOWN.
"""

from __future__ import annotations

import contextlib
import errno

from plugins.kernel import KernelError

from ._checks import ZERO_MAC, alias_policy, claim_name, require_valid_ether_addr
from ._state import LinkState, State, fail


def parent_of(state: State, link: LinkState) -> LinkState:
    assert link.parent is not None, f"{link.name} has no lower device"
    return state.links[link.parent]


# -- MTU -------------------------------------------------------------------------------


def dev_set_mtu(state: State, link: LinkState, mtu: int) -> None:
    if mtu == link.mtu:
        return  # dev_set_mtu_ext returns before validating when nothing changes
    # dev_validate_mtu
    if mtu < 0 or mtu < link.min_mtu:
        raise fail(errno.EINVAL, f"mtu {mtu} is below {link.name}'s minimum {link.min_mtu}")
    if link.max_mtu > 0 and mtu > link.max_mtu:
        raise fail(errno.EINVAL, f"mtu {mtu} is above {link.name}'s maximum {link.max_mtu}")
    # ndo_change_mtu
    if link.kind == "vlan" and mtu > parent_of(state, link).mtu:
        raise fail(errno.ERANGE, f"vlan mtu {mtu} above its parent's")  # vlan_dev_change_mtu
    if link.kind == "macvlan" and mtu > parent_of(state, link).mtu:
        raise fail(errno.EINVAL, f"macvlan mtu {mtu} above its lower's")  # macvlan_change_mtu
    if link.kind == "bond":
        _bond_change_mtu(state, link, mtu)
    if link.kind == "bridge":
        link.br_mtu_set_by_user = True  # br_change_mtu: no more auto-adjusting
    link.mtu = mtu
    if link.vf_of is not None:
        from ._vfs import vf_reset

        vf_reset(state, link)  # igbvf_change_mtu resets the VF
    _mtu_changed(state, link)


def _bond_change_mtu(state: State, bond: LinkState, mtu: int) -> None:
    """bond_change_mtu: every slave takes the new MTU, or none does."""
    assert bond.bond is not None
    done: list[tuple[LinkState, int]] = []
    try:
        for slave_id in bond.bond.slaves:
            slave = state.links[slave_id]
            old = slave.mtu
            dev_set_mtu(state, slave, mtu)
            done.append((slave, old))
    except KernelError:
        for slave, old in reversed(done):
            with contextlib.suppress(KernelError):
                dev_set_mtu(state, slave, old)
        raise


def _mtu_changed(state: State, link: LinkState) -> None:
    """NETDEV_CHANGEMTU on a lower device (or a bridge port)."""
    bridge = _bridge_of(state, link)
    if bridge is not None:
        br_mtu_auto_adjust(state, bridge)  # br_device_event
    for child in state.children(link):
        if child.kind == "ipvlan":
            child.mtu = link.mtu  # ipvlan_adjust_mtu: follows, up or down
        elif child.mtu > link.mtu:
            # vlan_device_event / macvlan_device_event clamp children that no longer fit
            with contextlib.suppress(KernelError):
                dev_set_mtu(state, child, link.mtu)


# -- MAC address -----------------------------------------------------------------------


def dev_set_mac(state: State, link: LinkState, mac: str) -> None:
    """dev_set_mac_address with the driver's ndo_set_mac_address."""
    if link.kind == "ipvlan":
        raise fail(errno.EOPNOTSUPP, "ipvlan has no ndo_set_mac_address")  # shares its lower's
    if (
        link.bond is not None
        and link.bond.mode == "active-backup"
        and link.bond.fail_over_mac != "none"
    ):
        # bond_set_mac_address: with fail_over_mac in active-backup it does nothing and
        # succeeds, whatever the address (an error would fail ifenslave); then
        # dev_set_mac_address marks the address as set all the same.
        link.mac_assign = "set"
        return
    mac = require_valid_ether_addr(mac)
    if link.vf_of is not None:
        from ._vfs import admin_mac_locks, vf_set_mac

        if mac != link.mac and admin_mac_locks(state, link):
            raise fail(errno.EADDRNOTAVAIL, f"{link.name}: its PF set its address")
        vf_set_mac(state, link, mac)  # igbvf_set_mac: the hardware address register too
    if link.kind == "macvlan" and mac != link.mac:
        lower = parent_of(state, link)
        if link.mode == "passthru":
            saved = lower.passthru_perm_mac
            dev_set_mac(state, lower, mac)  # macvlan_set_mac_address: passthru sets the lower's
            # macvlan_set_addr_change: a change made through the macvlan keeps perm_addr,
            # which the lower gets back when the port goes (macvlan_port_destroy)
            lower.passthru_perm_mac = saved
            return
        if _macvlan_addr_busy(state, lower, mac, exclude=link, up_only=True):
            raise fail(errno.EADDRINUSE, f"{mac} is in use on {lower.name}")
    if link.kind == "bond":
        _bond_set_mac(state, link, mac)
    # dev_set_mac_address sets NET_ADDR_SET; the model tracks the type only where it
    # changes behavior (bonds, vlans), so a device's stays "perm" and snapshots stay clean.
    set_mac_raw(state, link, mac, "perm" if link.kind == "device" else "set")


def _bond_set_mac(state: State, bond: LinkState, mac: str) -> None:
    """bond_set_mac_address: all slaves take the address (fail_over_mac=none), or none does."""
    assert bond.bond is not None
    done: list[tuple[LinkState, str]] = []
    try:
        for slave_id in bond.bond.slaves:
            slave = state.links[slave_id]
            old = slave.mac
            dev_set_mac(state, slave, mac)
            done.append((slave, old))
    except KernelError:
        for slave, old in reversed(done):
            with contextlib.suppress(KernelError):
                dev_set_mac(state, slave, old)
        raise


def set_mac_raw(state: State, link: LinkState, mac: str, assign: str) -> None:
    """An address change made by the kernel itself (bond, driver), then NETDEV_CHANGEADDR."""
    changed = mac != link.mac
    link.mac, link.mac_assign = mac, assign
    if changed:
        mac_changed(state, link)


def mac_changed(state: State, link: LinkState) -> None:
    """NETDEV_CHANGEADDR on a lower device (or a bridge port)."""
    bridge = _bridge_of(state, link)
    if bridge is not None:
        br_recalculate_bridge_id(state, bridge)  # br_device_event
    for child in state.children(link):
        if child.kind == "ipvlan":
            set_mac_raw(state, child, link.mac, "stolen")  # ipvlan_device_event
        elif child.kind == "vlan" and child.up and child.mac_assign == "stolen":
            set_mac_raw(state, child, link.mac, "stolen")  # vlan_sync_address, up vlans only
        elif child.kind == "macvlan" and child.mode == "passthru":
            set_mac_raw(state, child, link.mac, child.mac_assign)  # macvlan_sync_address
            link.passthru_perm_mac = link.mac  # ... which saves the lower's new address


def _macvlan_addr_busy(
    state: State, lower: LinkState, mac: str, *, exclude: LinkState, up_only: bool
) -> bool:
    """macvlan_addr_busy: the lower's own address or another (hashed, i.e. up) macvlan's."""
    if lower.mac == mac:
        return True
    return any(
        c is not exclude and c.mac == mac and (c.up or not up_only)
        for c in state.children(lower, "macvlan")
    )


# -- administrative state --------------------------------------------------------------


def dev_open(state: State, link: LinkState) -> None:
    if link.up:
        return
    if link.kind == "vlan":
        parent = parent_of(state, link)
        if not parent.up:
            raise fail(errno.ENETDOWN, f"{parent.name} is down")  # vlan_dev_open
        if link.mac_assign == "stolen":  # vlan_dev_open: vlan_dev_inherit_address
            set_mac_raw(state, link, parent.mac, "stolen")
    if link.kind == "macvlan" and link.mode != "passthru":  # macvlan_open: passthru skips it
        lower = parent_of(state, link)
        if _macvlan_addr_busy(state, lower, link.mac, exclude=link, up_only=True):
            raise fail(errno.EADDRINUSE, f"{link.mac} is in use on {lower.name}")  # macvlan_open
    link.up = True
    if link.bond is not None:
        from ._vfs import vlan_filter_refused

        link.bond.vid0 = not vlan_filter_refused(state, link)  # vlan_device_event NETDEV_UP
    for child in state.children(link, "vlan"):  # vlan_device_event NETDEV_UP
        with contextlib.suppress(KernelError):
            dev_open(state, child)


def dev_close(state: State, link: LinkState) -> None:
    if not link.up:
        return
    link.up = False
    if link.bond is not None:
        link.bond.vid0 = False  # vlan_device_event NETDEV_DOWN
    if link.vf_of is not None:
        from ._vfs import vf_reset

        vf_reset(state, link)  # igbvf_down ends with igbvf_reset
    elif link.pci_address is not None:
        from ._vfs import pf_down

        pf_down(state, link)
    for child in state.children(link, "vlan"):  # vlan_device_event NETDEV_DOWN
        dev_close(state, child)


# -- name and alias --------------------------------------------------------------------


def dev_change_name(state: State, link: LinkState, name: str) -> None:
    if link.up and not state.live_rename:
        # dev_change_name before Linux 6.2: "if (dev->flags & IFF_UP ...) return -EBUSY",
        # checked before the same-name shortcut.
        raise fail(errno.EBUSY, f"{link.name} is up; older kernels refuse to rename it")
    if name == link.name:
        return
    link.name = claim_name(state, link.ns, name, owner=link)


def dev_set_alias(link: LinkState, alias: str) -> None:
    alias_policy(alias)
    link.alias = alias or None  # an empty IFLA_IFALIAS clears it


# -- bridge: what a port change does to its bridge -------------------------------------

ETH_DATA_LEN = 1500


def _bridge_of(state: State, port: LinkState) -> LinkState | None:
    master = state.links.get(port.master) if port.master is not None else None
    return master if master is not None and master.kind == "bridge" else None


def br_ports_changed(state: State, bridge: LinkState) -> None:
    """br_add_if / br_del_if: the bridge's address and MTU follow its ports."""
    br_recalculate_bridge_id(state, bridge)
    br_mtu_auto_adjust(state, bridge)


def br_recalculate_bridge_id(state: State, bridge: LinkState) -> None:
    """br_stp_recalculate_bridge_id: unless the user set the bridge's address, it takes the
    lowest port address; with no ports left it is 00:00:00:00:00:00 (observed, Linux 6.18)."""
    if bridge.mac_assign == "set":
        return
    ports = [lk.mac for lk in state.links.values() if lk.master == bridge.id]
    set_mac_raw(state, bridge, min(ports, default=ZERO_MAC), bridge.mac_assign)


def br_mtu_auto_adjust(state: State, bridge: LinkState) -> None:
    """br_mtu_auto_adjust: unless the user set the bridge's MTU, it is its ports' minimum
    (br_mtu_min: ETH_DATA_LEN without ports); an MTU given at creation does not count."""
    if bridge.br_mtu_set_by_user:
        return
    ports = [lk.mtu for lk in state.links.values() if lk.master == bridge.id]
    with contextlib.suppress(KernelError):
        dev_set_mtu(state, bridge, min(ports, default=ETH_DATA_LEN))
    bridge.br_mtu_set_by_user = False
