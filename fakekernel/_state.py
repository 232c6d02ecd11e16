"""The mutable state of the fake kernel: namespaces, links, PF VF tables.

Everything the model knows lives in one ``State``; the modules next to this one
implement the kernel's rules as functions over it. As in Linux, ifindexes are per
namespace (each namespace counts from 2, 1 being its loopback), so the same number
names different links in different namespaces. Links are therefore kept, and point
at each other (parent, master, peer, bond slaves), by an internal id that never
changes; ifindexes only appear at the interface.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field

from plugins.kernel import KernelError, LinkKind, NsRef, kernel_error

from ._nics import DRIVERS, NicProfile

NSFS_DEVICE = 4  # st_dev of nsfs is the same for every namespace on a boot
FIRST_INODE = 4026531840  # the kernel's first proc inode number (PROC_DYNAMIC_FIRST)
FIRST_IFINDEX = 2  # 1 is every namespace's loopback
LOOPBACK_IFINDEX = 1
LOOPBACK_MTU = 65536


def fail(code: int, what: str) -> KernelError:
    return kernel_error(code, what)


@dataclass
class Namespace:
    name: str  # "" for the host namespace
    ref: NsRef
    next_ifindex: int = FIRST_IFINDEX  # net->ifindex: where the next allocation starts


@dataclass
class BondState:
    mode: str
    miimon_ms: int
    updelay_ms: int
    downdelay_ms: int
    fail_over_mac: str = "none"  # none/active/follow: whose MAC the bond and slaves carry
    slaves: list[int] = field(default_factory=list)  # link ids, enslave order
    active: int | None = None  # link id
    # each slave's link as the bond sees it (slave->link): with miimon, what its link
    # monitor last saw; without, up from the enslave on (nothing watches it)
    link_up: dict[int, bool] = field(default_factory=dict)
    # VLAN 0 in the bond's VLAN filter: 8021q adds it as the bond goes up (NETDEV_UP),
    # which fails when a slave refuses it, and deletes it as it goes down; a slave
    # enslaved later gets it (vlan_vids_add_by_dev) only if it is there
    vid0: bool = False


@dataclass
class SlaveSave:
    """What bond_enslave saved to give back on release (original_mtu, perm_hwaddr)."""

    mtu: int
    mac: str


@dataclass
class LinkState:
    id: int  # internal identity, stable across moves and renames
    ifindex: int  # in its current namespace
    name: str
    kind: LinkKind
    ns: int  # inode of the namespace it is in
    mac: str
    # How the address was assigned (addr_assign_type): "perm" (device), "random",
    # "set" (by the user), "stolen" (a bond's from its first slave, a vlan's from its parent).
    mac_assign: str
    mtu: int
    min_mtu: int
    max_mtu: int  # 0: no upper bound (dev_validate_mtu checks max_mtu only if > 0)
    up: bool = False
    master: int | None = None  # link id
    parent: int | None = None  # link id
    alias: str | None = None
    perm_mac: str | None = None
    pci_address: str | None = None
    vf_of: tuple[str, int] | None = None
    bond: BondState | None = None
    saved: SlaveSave | None = None  # set while enslaved to a bond
    vlan_id: int | None = None
    vlan_protocol: str | None = None
    mode: str | None = None  # macvlan mode (ipvlan's mode lives on its parent's port)
    ipvlan_port_mode: str | None = None  # set while this link is an ipvlan port
    # the port's isolation flag, private or vepa (None: bridge, or no ipvlan port)
    ipvlan_port_flag: str | None = None
    peer: int | None = None  # link id
    br_mtu_set_by_user: bool = False  # bridges: BROPT_MTU_SET_BY_USER (no MTU auto-adjust)
    # the perm_addr of the macvlan port on this lower, kept while a passthru macvlan is on it
    passthru_perm_mac: str | None = None
    loopback: bool = False  # a namespace's lo (IFF_LOOPBACK, NETIF_F_NETNS_LOCAL)
    # a VF's own hardware address register (igbvf: hw.mac.addr), which its next reset
    # makes its address and permanent address; None: its permanent address
    vf_hw_mac: str | None = None


@dataclass
class VfState:
    mac: str = "00:00:00:00:00:00"
    vlan: int = 0
    qos: int = 0
    vlan_proto: str = "802.1Q"
    spoofchk: bool = True
    trust: bool = False
    min_tx_rate: int = 0
    max_tx_rate: int = 0
    link_state: str = "auto"


@dataclass
class PfState:
    pci: str
    capabilities: frozenset[str]
    vfs: list[VfState]
    nic: NicProfile = field(default_factory=lambda: DRIVERS["generic"])
    name: str = ""  # the PF netdev's name at probe: its VFs are named after it (<name>v<i>)
    vf_mtu: int = 1500
    cable: bool = True  # False: the port never has link
    # the port's link status stays set while the PF is down, once it has had link
    # (QEMU's emulated igb: a real 82576 powers its PHY down, igb_reset); a lab that
    # sets it has opened each PF once (the VM lab's agent does, at boot)
    link_kept: bool = False
    # mac_address_policy "persistent": the address udev gives each VF index (it derives
    # it from the netdev's name, <pf>v<i>), the same for every VF made at that index
    vf_hw_memory: dict[int, str] = field(default_factory=dict)
    # NIC profiles with a VF mailbox (igb): the VF indexes the PF answers (IGB_VF_FLAG_CTS:
    # set by a VF's reset while the PF is up, cleared when the PF goes down), and those
    # whose MAC the PF set (IGB_VF_FLAG_PF_SET_MAC). Kept here, not in VfState, because
    # the VF table's snapshot is what get_vfs reports.
    vf_cts: set[int] = field(default_factory=set)
    vf_pf_set_mac: set[int] = field(default_factory=set)


@dataclass
class State:
    boot_id: str
    host_path: str
    live_rename: bool  # Linux >= 6.2 lets an UP link be renamed; older kernels say EBUSY
    loopback: bool = False  # every namespace has its lo (off: the model leaves lo out)
    mac_address_policy: str = "none"  # udev's for random-address VF netdevs (FakeKernelModel)
    namespaces: dict[int, Namespace] = field(default_factory=dict)
    links: dict[int, LinkState] = field(default_factory=dict)  # by link id
    pfs: dict[str, PfState] = field(default_factory=dict)
    next_id: int = 1
    next_inode: int = FIRST_INODE
    next_mac: int = 1

    # -- allocation -------------------------------------------------------------------

    def new_namespace(self, name: str, path: str) -> Namespace:
        ref = NsRef(NSFS_DEVICE, self.next_inode, self.boot_id, path)
        self.next_inode += 1
        ns = Namespace(name, ref)
        self.namespaces[ref.inode] = ns
        if self.loopback:
            # loopback_net_init: ifindex 1 (LOOPBACK_IFINDEX), down until someone opens it
            lo = LinkState(
                id=self.new_id(),
                ifindex=LOOPBACK_IFINDEX,
                name="lo",
                kind="device",
                ns=ref.inode,
                mac="00:00:00:00:00:00",
                mac_assign="perm",
                mtu=LOOPBACK_MTU,
                min_mtu=0,
                max_mtu=0,
                loopback=True,
            )
            self.links[lo.id] = lo
        return ns

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def new_ifindex(self, ns: int) -> int:
        """dev_index_reserve: the next free index of the namespace, cyclically upwards."""
        space = self.namespaces[ns]
        while self.in_ns(ns, space.next_ifindex) is not None:
            space.next_ifindex += 1
        space.next_ifindex += 1
        return space.next_ifindex - 1

    def relocate(self, link: LinkState, ns: int, name: str) -> None:
        """Put ``link`` into ``ns``: it keeps its ifindex there unless that is taken."""
        ifindex = link.ifindex
        if self.in_ns(ns, ifindex) is not None:
            ifindex = self.new_ifindex(ns)  # __dev_change_net_namespace: "ifindex conflict"
        link.ns, link.name, link.ifindex = ns, name, ifindex

    def add(self, link: LinkState, ifindex: int | None = None) -> LinkState:
        """Register a new link: give it an id and an ifindex in its namespace (``ifindex``
        if asked for: the caller checked it is free; the next allocation's start stays)."""
        link.id = self.new_id()
        link.ifindex = self.new_ifindex(link.ns) if ifindex is None else ifindex
        self.links[link.id] = link
        return link

    def random_mac(self) -> str:
        """eth_hw_addr_random: deterministic here, unicast and locally administered."""
        n = self.next_mac
        self.next_mac += 1
        return "0e:fa:" + ":".join(f"{(n >> s) & 0xFF:02x}" for s in (24, 16, 8, 0))

    # -- lookup -----------------------------------------------------------------------

    @property
    def host(self) -> Namespace:
        return self.namespaces[FIRST_INODE]

    def namespace(self, ref: NsRef) -> Namespace:
        if ref.boot_id != self.boot_id:
            raise fail(errno.ESTALE, f"namespace {ref.path or ref.inode} is from another boot")
        ns = self.namespaces.get(ref.inode)
        if ns is None or ref.device != NSFS_DEVICE:
            if ref.path and any(n.ref.path == ref.path for n in self.namespaces.values()):
                # As on Linux, where every call stats the path again (LinuxKernel._resolve):
                # a path that now names another namespace is ESTALE, a path that is gone ENOENT.
                raise fail(errno.ESTALE, f"{ref.path} now names a different namespace")
            raise fail(errno.ENOENT, f"namespace {ref.path or ref.inode} is gone")
        return ns

    def by_name(self, ns: int, name: str) -> LinkState | None:
        return next((lk for lk in self.links.values() if lk.ns == ns and lk.name == name), None)

    def in_ns(self, ns: int, ifindex: int) -> LinkState | None:
        return next(
            (lk for lk in self.links.values() if lk.ns == ns and lk.ifindex == ifindex), None
        )

    def require(self, ns: int, ifindex: int) -> LinkState:
        link = self.in_ns(ns, ifindex)
        if link is None:
            raise fail(errno.ENODEV, f"no link with ifindex {ifindex} in this namespace")
        return link

    def children(self, link: LinkState, kind: str | None = None) -> list[LinkState]:
        """Upper devices stacked on ``link`` (vlan/macvlan/ipvlan), in every namespace."""
        return [
            c
            for c in self.links.values()
            if c.parent == link.id and (kind is None or c.kind == kind)
        ]

    def path_of(self, inode: int) -> str:
        return self.namespaces[inode].ref.path
