"""The VF table a PF driver keeps (IFLA_VFINFO_LIST) and do_setvfinfo's rules.

Which settings a NIC supports is a per-PF capability set: a missing capability is
a missing ndo_set_vf_* callback, so rtnetlink answers -EOPNOTSUPP before the driver
looks at the VF index. Range checks are the drivers' (ixgbe, i40e, ice, mlx5 agree).
"""

from __future__ import annotations

import errno

from plugins.kernel import VFChanges, VFConfig

from ._checks import ZERO_MAC, is_multicast, parse_mac
from ._dev import set_mac_raw
from ._state import LinkState, PfState, State, VfState, fail

CAPABILITIES = frozenset({"link_state", "trust", "spoofchk", "rate", "vlan_proto_8021ad"})
LINK_STATES = ("auto", "enable", "disable")


def get_vfs(state: State, pf: LinkState) -> list[VFConfig]:
    table = state.pfs.get(pf.pci_address or "")
    if table is None:
        return []  # a netdev without VFs reports no IFLA_VFINFO_LIST
    caps = table.capabilities
    reported = "link_state" in caps or table.nic.reports_link_state
    return [
        VFConfig(
            vf_index=i,
            mac=vf.mac,
            vlan=vf.vlan,
            qos=vf.qos,
            vlan_proto=vf.vlan_proto,
            spoofchk=vf.spoofchk if "spoofchk" in caps else None,
            trust=vf.trust if "trust" in caps else None,
            min_tx_rate=vf.min_tx_rate if "rate" in caps else None,
            max_tx_rate=vf.max_tx_rate if "rate" in caps else None,
            link_state=vf.link_state if reported else None,
        )
        for i, vf in enumerate(table.vfs)
    ]


def set_vf(state: State, pf: LinkState, index: int, changes: VFChanges) -> None:
    """do_setvfinfo: MAC, VLAN, rate, spoofchk, link state, trust, in that order; each
    attribute is applied on its own, so an error leaves the earlier ones applied."""
    table = state.pfs.get(pf.pci_address or "")
    if table is None:
        raise fail(errno.EOPNOTSUPP, f"{pf.name} is not an SR-IOV PF (no ndo_set_vf_*)")
    if changes.mac is not None:
        vf = _vf(table, index)
        mac = parse_mac(changes.mac)
        if is_multicast(mac):
            raise fail(errno.EINVAL, f"VF MAC {mac} is multicast")
        vf.mac = mac
        if mac == ZERO_MAC:  # igb_ndo_set_vf_mac: "remove administratively set MAC"
            table.vf_pf_set_mac.discard(index)
        else:
            table.vf_pf_set_mac.add(index)
        netdev = vf_netdev(state, table.pci, index)
        if netdev is not None and mac != ZERO_MAC and table.nic.vf_admin_mac == "immediate":
            set_mac_raw(state, netdev, mac, netdev.mac_assign)  # the VF driver takes it at once
    if changes.vlan is not None or changes.qos is not None or changes.vlan_proto is not None:
        _set_vlan(table, index, changes)
    if changes.min_tx_rate is not None or changes.max_tx_rate is not None:
        _require(table, "rate")
        vf = _vf(table, index)
        lo = vf.min_tx_rate if changes.min_tx_rate is None else changes.min_tx_rate
        hi = vf.max_tx_rate if changes.max_tx_rate is None else changes.max_tx_rate
        if lo < 0 or hi < 0 or (hi != 0 and lo > hi):
            raise fail(errno.EINVAL, f"tx rate min {lo} / max {hi}")
        nic = table.nic
        if lo and not nic.rate_min_allowed:
            raise fail(errno.EINVAL, f"{nic.driver} has no minimum VF rate")  # igb_ndo_set_vf_bw
        has_link = _has_link(state, pf)
        if nic.rate_needs_link and not (has_link or table.link_kept):
            raise fail(errno.EINVAL, f"{pf.name} has no link: no VF rate")
        speed = nic.link_speed if has_link or not nic.rate_needs_link else 0
        if nic.link_speed and hi > speed:
            raise fail(errno.EINVAL, f"VF rate {hi} above the link speed {speed}")
        vf.min_tx_rate, vf.max_tx_rate = lo, hi
    if changes.spoofchk is not None:
        _require(table, "spoofchk")
        if table.nic.spoofchk_needs_vfs and not table.vfs:
            raise fail(errno.EOPNOTSUPP, f"{pf.name} has no VFs: no spoof checking")
        _vf(table, index).spoofchk = changes.spoofchk
    if changes.link_state is not None:
        _require(table, "link_state")
        vf = _vf(table, index)
        if changes.link_state not in LINK_STATES:
            raise fail(errno.EINVAL, f"VF link state {changes.link_state!r}")
        vf.link_state = changes.link_state
    if changes.trust is not None:
        _require(table, "trust")
        _vf(table, index).trust = changes.trust


def _set_vlan(table: PfState, index: int, changes: VFChanges) -> None:
    """IFLA_VF_VLAN_LIST carries vlan, qos and protocol together; what the change leaves
    out keeps its current value."""
    proto = changes.vlan_proto
    if proto is not None and proto not in ("802.1Q", "802.1ad"):
        raise fail(errno.EPROTONOSUPPORT, f"VF vlan protocol {proto!r}")  # do_setvfinfo
    vf = _vf(table, index)
    vlan = vf.vlan if changes.vlan is None else changes.vlan
    qos = vf.qos if changes.qos is None else changes.qos
    proto = proto or vf.vlan_proto
    if not 0 <= vlan <= 4095 or not 0 <= qos <= 7:
        raise fail(errno.EINVAL, f"VF vlan {vlan} qos {qos}")
    if qos and not vlan and table.nic.qos_needs_vlan:
        raise fail(errno.EINVAL, "VF qos needs a vlan")
    if proto == "802.1ad" and "vlan_proto_8021ad" not in table.capabilities:
        raise fail(errno.EPROTONOSUPPORT, "this NIC only tags VFs with 802.1Q")
    vf.vlan, vf.qos, vf.vlan_proto = vlan, qos, proto


def _has_link(state: State, pf: LinkState) -> bool:
    """The PF's port has link: it is up, and the lab has a cable in (its driver saw the
    link come up: carrier, and igb's link_speed)."""
    table = state.pfs.get(pf.pci_address or "")
    return pf.up and (table is None or table.cable)


def admin_mac_locks(state: State, vf: LinkState) -> bool:
    """Whether the VF's PF set an address for it that the VF may not override (igb).
    Only a PF that is up says so: igb reads its VFs' mailboxes in its interrupt, and a
    VF whose request times out keeps the address it asked for (e1000_rar_set_vf looks
    for a NACK only in an answer)."""
    assert vf.vf_of is not None
    table = state.pfs.get(vf.vf_of[0])
    if table is None or table.nic.vf_mac_override or vf.vf_of[1] >= len(table.vfs):
        return False
    pf = pf_of(state, table)
    return vf.vf_of[1] in table.vf_pf_set_mac and pf is not None and pf.up


def _table_of(state: State, vf: LinkState) -> PfState | None:
    """The VF table of ``vf``'s PF, when ``vf`` is a VF whose entry exists."""
    if vf.vf_of is None:
        return None
    table = state.pfs.get(vf.vf_of[0])
    return table if table is not None and vf.vf_of[1] < len(table.vfs) else None


def pf_of(state: State, table: PfState) -> LinkState | None:
    return next((lk for lk in state.links.values() if lk.pci_address == table.pci), None)


def mailbox_answers(state: State, vf: LinkState) -> bool:
    """Whether ``vf``'s PF answers its mailbox (a profile with one): the PF is up and the
    VF is clear to send (it reset while the PF was up, and the PF has not gone down
    since: igb_rcv_msg_from_vf refuses everything else)."""
    table = _table_of(state, vf)
    if table is None or not table.nic.vf_mailbox:
        return True  # no mailbox in the way
    pf = pf_of(state, table)
    return pf is not None and pf.up and (vf.vf_of or ("", -1))[1] in table.vf_cts


def vlan_filter_refused(state: State, link: LinkState) -> bool:
    """vlan_vid_add on ``link`` fails (EINVAL): a VF whose PF does not answer it
    (igbvf_vlan_rx_add_vid), a bond with such a slave (bond_vlan_rx_add_vid passes
    the id to every slave), or a macvlan or ipvlan over such a device (their
    ndo_vlan_rx_add_vid passes it to the lower device)."""
    if link.vf_of is not None:
        table = _table_of(state, link)
        return table is not None and table.nic.vf_mailbox and not mailbox_answers(state, link)
    if link.bond is not None:
        return any(vlan_filter_refused(state, state.links[s]) for s in link.bond.slaves)
    if link.kind in ("macvlan", "ipvlan") and link.parent is not None:
        return vlan_filter_refused(state, state.links[link.parent])
    return False


def pf_down(state: State, pf: LinkState) -> None:
    """igb_down ends with igb_reset, which takes every VF's clear-to-send away."""
    table = state.pfs.get(pf.pci_address or "")
    if table is not None:
        table.vf_cts.clear()


def vf_set_mac(state: State, vf: LinkState, mac: str) -> None:
    """igbvf_set_mac on a profile whose VF resets take its hardware address: the
    address is its hardware address, and reaches the VF table if the PF answers
    (E1000_VF_SET_MAC_ADDR)."""
    table = _table_of(state, vf)
    if table is None or table.nic.vf_admin_mac != "vf_reset":
        return
    assert vf.vf_of is not None
    vf.vf_hw_mac = mac
    if table.nic.vf_mailbox and mailbox_answers(state, vf):
        table.vfs[vf.vf_of[1]].mac = mac


def vf_reset(state: State, vf: LinkState) -> None:
    """The VF driver's reset (igbvf_reset: on its way down, and on any MTU change): it asks
    its PF (answered only while the PF is up), which makes it clear to send; an address
    the PF set for it then becomes its hardware address, else the VF programs its own
    into the VF table (init_hw's rar_set); the hardware address becomes its address and
    its permanent address (an address set on the VF itself is its hardware address too)."""
    table = _table_of(state, vf)
    if table is None or table.nic.vf_admin_mac != "vf_reset":
        return
    assert vf.vf_of is not None
    index = vf.vf_of[1]
    pf = pf_of(state, table)
    answered = pf is not None and pf.up
    if answered and table.nic.vf_mailbox:
        table.vf_cts.add(index)
    if answered and index in table.vf_pf_set_mac:
        vf.vf_hw_mac = table.vfs[index].mac
    hw = vf.vf_hw_mac or vf.perm_mac or vf.mac
    vf.perm_mac = hw
    set_mac_raw(state, vf, hw, vf.mac_assign)
    if answered and table.nic.vf_mailbox and index not in table.vf_pf_set_mac:
        table.vfs[index].mac = hw


def _require(table: PfState, capability: str) -> None:
    if capability not in table.capabilities:
        raise fail(errno.EOPNOTSUPP, f"this NIC has no VF {capability} control")


def _vf(table: PfState, index: int) -> VfState:
    if not 0 <= index < len(table.vfs):
        raise fail(errno.EINVAL, f"VF {index} out of range (0..{len(table.vfs) - 1})")
    return table.vfs[index]


def vf_netdev(state: State, pf_pci: str, index: int) -> LinkState | None:
    return next((lk for lk in state.links.values() if lk.vf_of == (pf_pci, index)), None)
