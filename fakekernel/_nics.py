"""NIC profiles: what a PF's driver (and its VFs' driver) accepts, reports and applies late.

A lab file says which driver a PF has (``nics: {x: {driver: igb}}``, or ``nic: igb``
directly); the profile fills in everything the kernel cannot know without the driver:
the VF-table controls (a missing ndo_set_vf_*: EOPNOTSUPP), what ``get_vfs`` reports
for controls the driver lacks, ``sriov_totalvfs``, the VFs' PCI routing ids and
netdev names, how a VF netdev gets its address, and whether an address set through the
PF reaches the VF netdev at once or only at the VF's next reset.

``generic`` is the model's historical behaviour (every control, addresses derived from
the PCI address, applied at once). ``igb`` is measured on Debian's 6.1 and 6.12 kernels
with QEMU's emulated 82576 (docs/fake-kernel-fidelity.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

CAPABILITIES = frozenset({"link_state", "trust", "spoofchk", "rate", "vlan_proto_8021ad"})


@dataclass(frozen=True)
class NicProfile:
    driver: str
    capabilities: frozenset[str] = CAPABILITIES
    max_mtu: int = 9702  # PF and VF netdevs
    min_mtu: int = 68
    totalvfs: int = 256  # sriov_totalvfs
    vf_offset: int = 128  # SR-IOV First VF Offset / VF Stride (routing ids)
    vf_stride: int = 2
    # "derived": a VF netdev's address comes from its PCI address and is also its
    # permanent address; "random": the VF driver makes one up (igbvf when the PF gave
    # none), and its permanent address is another random one (QEMU's 82576, 6.1 and 6.12;
    # recordings elsewhere saw the permanent address equal to the first one).
    vf_mac: str = "derived"
    # "immediate": a MAC set through the PF is the VF netdev's address at once;
    # "vf_reset": the VF driver takes it at its next reset (igbvf: when it goes down
    # after having been up), as its address and its permanent address.
    vf_admin_mac: str = "immediate"
    # get_vfs reports link_state "auto" although the driver has no control for it
    # (rtnl_fill_vfinfo leaves ivi.linkstate 0 unless the driver fills it in).
    reports_link_state: bool = False
    # ndo_set_vf_rate's rules: min_tx_rate must be 0 (igb); any rate needs the port's
    # link status (igb reads STATUS.LU, which a lab may keep while the PF is down: PfState
    # .link_kept), and a max at most the speed the PF's driver saw at its last link up,
    # none while it is down (igb_down zeroes link_speed) (Mbps; 0: no such check).
    rate_min_allowed: bool = True
    rate_needs_link: bool = False
    link_speed: int = 0
    # spoof checking on a PF without any VF: EOPNOTSUPP before the index's EINVAL
    # (igb_ndo_set_vf_spoofchk looks at vfs_allocated_count first)
    spoofchk_needs_vfs: bool = False
    # a QoS priority without a VLAN is refused (EINVAL) or taken (igb)
    qos_needs_vlan: bool = True
    # The VF driver asks its PF through a mailbox for VLAN filters, its MAC and its link
    # (igbvf). The PF answers only while it is up, and only a VF that has reset since
    # it was made or since the PF last went down (igb's IGB_VF_FLAG_CTS): until then a
    # VLAN id is refused (vlan_vid_add: EINVAL), the VF has no carrier, and the MAC it
    # programs does not reach the VF table. Once answered, the VF table reports the MAC
    # the VF programmed (at its resets and on set_mac). False: VLANs, carrier and the
    # VF table do not depend on the PF (the table shows administrative MACs only).
    vf_mailbox: bool = False
    # A VF made while its PF is up is clear to send at once, its address programmed into
    # the VF table by its probe's reset (measured on 6.12's igb). 6.1's igb takes that
    # back (its PF resets after enabling the VFs: igb_sriov_reinit), so there a VF
    # waits for its first reset with the PF up. The igb profile follows 6.1.
    vf_probe_answered: bool = False
    # a VF may change its own address after its PF set one (igb: no, EADDRNOTAVAIL)
    vf_mac_override: bool = True
    # the PF's port has link a moment after the PF opens (its PHY autonegotiates; QEMU's
    # igb takes 500 ms): a bond that enslaves it, which opens it, sees no carrier then
    port_link_after_open: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


DRIVERS: dict[str, NicProfile] = {
    "generic": NicProfile("generic"),
    "igb": NicProfile(
        "igb",
        capabilities=frozenset({"trust", "spoofchk", "rate"}),
        max_mtu=9216,
        totalvfs=7,
        vf_offset=128,
        vf_stride=2,
        vf_mac="random",
        vf_admin_mac="vf_reset",
        reports_link_state=True,
        rate_min_allowed=False,
        rate_needs_link=True,
        link_speed=1000,
        spoofchk_needs_vfs=True,
        qos_needs_vlan=False,
        vf_mailbox=True,
        vf_mac_override=False,
        port_link_after_open=True,
    ),
}


def profile(driver: str = "generic", **overrides: Any) -> NicProfile:
    """The built-in profile of ``driver`` with ``overrides`` (None values ignored)."""
    base = DRIVERS[driver]
    given = {k: v for k, v in overrides.items() if v is not None}
    if "capabilities" in given:
        given["capabilities"] = frozenset(given["capabilities"])
    return replace(base, **given)


def vf_pci(pf_pci: str, nic: NicProfile, index: int) -> str | None:
    """The PCI address of VF ``index`` (PF routing id + offset + stride * index);
    None when it runs past the bus range."""
    domain, bus, rest = pf_pci.rsplit(":", 2)
    slot, fn = rest.split(".")
    rid = int(bus, 16) << 8 | int(slot, 16) << 3 | int(fn)
    vf_rid = rid + nic.vf_offset + nic.vf_stride * index
    if vf_rid > 0xFFFF:
        return None
    return f"{domain}:{vf_rid >> 8:02x}:{(vf_rid >> 3) & 0x1F:02x}.{vf_rid & 7}"


def derived_mac(pci: str) -> str:
    """A stable, locally administered address per PCI function."""
    domain, bus, rest = pci.split(":")
    slot, fn = rest.split(".")
    return f"02:00:{int(domain, 16) & 0xFF:02x}:{bus}:{slot}:{int(fn):02x}"
