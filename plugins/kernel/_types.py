"""Values of the one kernel interface: links, VF settings, errors with real errno."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from plugins.sdk import added_field

LinkKind = Literal["device", "veth", "dummy", "bond", "vlan", "macvlan", "ipvlan", "bridge"]


class KernelError(OSError):
    """A kernel call failed; ``errno`` is the value Linux gives for the same call."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, f"{errno.errorcode.get(code, str(code))}: {message}")

    @property
    def code(self) -> int:
        return int(self.errno or 0)


def kernel_error(code: int, what: str) -> KernelError:
    return KernelError(code, f"{what}: {os.strerror(code)}")


@dataclass(frozen=True)
class NsRef:
    """An opened, verified network namespace: nsfs (device, inode) on one boot."""

    device: int
    inode: int
    boot_id: str
    path: str = ""

    @property
    def key(self) -> tuple[int, int, str]:
        return (self.device, self.inode, self.boot_id)


FAIL_OVER_MAC = ("none", "active", "follow")
"""A bond's fail_over_mac policies, in the kernel's order (IFLA_BOND_FAIL_OVER_MAC)."""
IPVLAN_FLAGS = ("bridge", "private", "vepa")
"""An ipvlan's isolation: bridge (no flag), private or vepa (IFLA_IPVLAN_FLAGS)."""


@dataclass(frozen=True)
class BondInfo:
    mode: str  # "active-backup", ...
    miimon_ms: int
    updelay_ms: int = 0
    downdelay_ms: int = 0
    active_slave: int | None = None  # ifindex in the bond's namespace
    # whose MAC the bond and its slaves carry at failover: one of FAIL_OVER_MAC
    fail_over_mac: str = added_field("none")


@dataclass(frozen=True)
class Link:
    """What a netlink dump (plus sysfs for the PCI address) shows of one link."""

    ifindex: int
    name: str
    kind: LinkKind
    ns: NsRef
    mac: str
    mtu: int
    up: bool  # administrative state (IFF_UP)
    min_mtu: int = 68
    max_mtu: int = 65535
    master: int | None = None  # ifindex of the master, same namespace
    parent: int | None = None  # IFLA_LINK: ifindex of the lower device ...
    parent_ns: NsRef | None = None  # ... in this namespace (None: same namespace as the link)
    alias: str | None = None
    perm_mac: str | None = None  # permanent address, devices only
    pci_address: str | None = None  # devices (PFs and VFs)
    vf_of: tuple[str, int] | None = None  # (PF PCI address, VF index) for a VF netdev
    bond: BondInfo | None = None
    vlan_id: int | None = None
    vlan_protocol: str | None = None
    mode: str | None = None  # macvlan/ipvlan mode
    peer: int | None = None  # veth peer ifindex (may be in another namespace)
    ipvlan_flag: str | None = added_field(None)  # ipvlan "private"/"vepa"; None: bridge


@dataclass(frozen=True)
class LinkSpec:
    """A link to create in ``ns`` (see Kernel.create_link)."""

    kind: LinkKind
    name: str
    mac: str | None = None
    mtu: int | None = None
    parent: int | None = None  # lower device ifindex, in ``parent_ns`` (default: the target ns)
    parent_ns: NsRef | None = None
    alias: str | None = None
    bond: BondInfo | None = None
    vlan_id: int | None = None
    vlan_protocol: str = "802.1Q"
    mode: str | None = None  # macvlan: bridge/private/vepa/passthru; ipvlan: l2/l3/l3s
    peer_name: str | None = None  # veth
    peer_ns: NsRef | None = None  # veth peer namespace (default: same)
    # the ifindex to register it at (EBUSY if taken); None: the kernel's next free one
    ifindex: int | None = added_field(None)
    ipvlan_flag: str | None = added_field(None)  # one of IPVLAN_FLAGS; None: bridge


@dataclass(frozen=True)
class VFConfig:
    """Per-VF settings kept by the PF driver. None: the NIC does not report or support it."""

    vf_index: int
    mac: str | None = None
    vlan: int = 0
    qos: int = 0
    vlan_proto: str = "802.1Q"
    spoofchk: bool | None = None
    trust: bool | None = None
    min_tx_rate: int | None = None  # Mbps
    max_tx_rate: int | None = None
    link_state: str | None = None  # "auto" / "enable" / "disable"

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class VFChanges:
    """A partial update of one VF's settings; None leaves the field alone."""

    mac: str | None = None
    vlan: int | None = None
    qos: int | None = None
    vlan_proto: str | None = None
    spoofchk: bool | None = None
    trust: bool | None = None
    min_tx_rate: int | None = None
    max_tx_rate: int | None = None
    link_state: str | None = None

    def fields(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class LinkChanges:
    """A partial update of one link (see Kernel.set_link); None leaves the field alone."""

    name: str | None = None
    mtu: int | None = None
    mac: str | None = None
    up: bool | None = None
    master: int | None = field(default=None)  # ifindex to enslave to; 0 releases
    alias: str | None = None  # "" clears the alias


@dataclass(frozen=True)
class LinkOptions:
    """Options of an existing link to change (see Kernel.set_link_options); None leaves
    an option alone. ``kind`` names the link's kind: options of another kind are EINVAL.

    bond: ``bond_mode``, ``miimon_ms``, ``active_slave`` (a slave's ifindex in the
    bond's namespace; 0 clears it, and the bond picks its best slave again),
    ``fail_over_mac`` (one of FAIL_OVER_MAC; EPERM while the bond has slaves).
    macvlan: ``mode``. ipvlan: ``mode``, ``ipvlan_flag`` (one of IPVLAN_FLAGS).
    """

    kind: LinkKind
    bond_mode: str | None = None
    miimon_ms: int | None = None
    active_slave: int | None = None
    mode: str | None = None
    fail_over_mac: str | None = added_field(None)
    ipvlan_flag: str | None = added_field(None)

    def fields(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and k != "kind"}
