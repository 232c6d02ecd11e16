"""Values of the one kernel interface: links, VF settings, errors with real errno."""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass, field
from typing import Any, Literal

IFNAMSIZ = 16
"""Linux's interface-name buffer, NUL included: a name is 1 to ``IFNAMSIZ - 1`` bytes."""

PCI_ADDRESS = re.compile(r"\A[0-9a-f]{4,8}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]\Z")
"""A PCI function as the kernel names it (``pci_name``: ``"%04x:%02x:%02x.%d"``).

The domain is printed with a *minimum* width of four hex digits: domains above 0xffff
exist (Intel VMD puts its devices in 0x10000 and up) and are five or more digits, up
to the eight of a 32-bit domain number. The slot is five bits (00-1f), the function
three (0-7); sysfs prints lowercase hex. Anchored with ``\\Z``, not ``$``, so
``match`` refuses a trailing newline.
"""

# isspace() in the kernel's C locale; Python's str.isspace() also counts \x1c-\x1f.
_C_SPACE = frozenset(" \t\n\v\f\r")


def check_interface_name(name: str) -> str | None:
    """Why Linux refuses ``name`` as an interface name, or None if it accepts it.

    The kernel's own rule (``dev_valid_name``, net/core/dev.c): 1 to ``IFNAMSIZ - 1``
    bytes, not ``.`` or ``..``, no ``/``, ``:`` or whitespace.
    """
    if not 1 <= len(name.encode()) < IFNAMSIZ:
        return f"{name!r} must be 1..{IFNAMSIZ - 1} bytes"
    if name in (".", ".."):
        return f"{name!r} is reserved"
    if any(c in "/:" or c in _C_SPACE for c in name):
        return f"{name!r} contains '/', ':' or whitespace"
    return None


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


@dataclass(frozen=True)
class BondInfo:
    mode: str  # "active-backup", ...
    miimon_ms: int
    updelay_ms: int = 0
    downdelay_ms: int = 0
    active_slave: int | None = None  # ifindex in the bond's namespace


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
