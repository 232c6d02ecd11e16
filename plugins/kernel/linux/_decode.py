"""Kernel replies to the ``Link`` and ``VFConfig`` values.

Decoded here, attribute by attribute, with pyroute2's names and values (checked against
pyroute2 in tests/linux/test_codec.py) but without importing it: any pyroute2 module
imports the whole package (ndb, ipdb, conntrack, asyncio: 370 modules, about 22 MB of
a service's resident memory and 140 ms of its start; docs/benchmarks.md, P8)."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from typing import Any, cast

from plugins.sdk import PCI_ADDRESS

from .._types import FAIL_OVER_MAC, BondInfo, Link, LinkKind, NsRef, VFConfig
from ._wire import (
    IFF_UP,
    IFLA_VF_INFO,
    IFLA_VF_LINK_STATE,
    IFLA_VF_MAC,
    IFLA_VF_RATE,
    IFLA_VF_SPOOFCHK,
    IFLA_VF_TRUST,
    IFLA_VF_TX_RATE,
    IFLA_VF_VLAN,
    IFLA_VF_VLAN_INFO,
    IFLA_VF_VLAN_LIST,
    IFLA_VFINFO_LIST,
    NETNSA_NSID,
)

KINDS: frozenset[str] = frozenset({"veth", "dummy", "bond", "vlan", "macvlan", "ipvlan", "bridge"})
STACKED = frozenset({"vlan", "macvlan", "ipvlan"})  # IFLA_LINK names the lower device

BOND_MODES = (
    "balance-rr",
    "active-backup",
    "balance-xor",
    "broadcast",
    "802.3ad",
    "balance-tlb",
    "balance-alb",
)
MACVLAN_MODES = {"private": 1, "vepa": 2, "bridge": 4, "passthru": 8, "source": 16}
IPVLAN_MODES = {"l2": 0, "l3": 1, "l3s": 2}
IPVLAN_F_PRIVATE, IPVLAN_F_VEPA = 0x01, 0x02
VLAN_PROTOCOLS = {"802.1Q": 0x8100, "802.1ad": 0x88A8}
VF_LINK_STATES = {"auto": 0, "enable": 1, "disable": 2}
U32_UNSET = 0xFFFFFFFF  # ifla_vf_info's "-1": the driver does not report this setting

SYSFS_BUS = "/sys/bus"


def _by_value(table: dict[str, int], value: Any) -> str | None:
    """The name of an enum value; pyroute2 may already have mapped it to a name."""
    if isinstance(value, str):
        return value if value in table else None
    return next((k for k, v in table.items() if v == value), None)


# -- the hot path's decoding: only the attributes a Link is made of --------------------
#
# pyroute2 decodes every attribute of a link message (IFLA_AF_SPEC alone is hundreds
# of values), then looks each one up by a linear scan: a GETLINK answer took about as
# long to decode as the kernel took to answer it, and the service decodes a few dozen
# per attach+detach (docs/benchmarks.md). ``decode_link`` reads the rtattr chain once and
# decodes only what is asked for, with the same names and values as pyroute2 (checked
# against it in tests/linux/test_codec.py), the VF tables included.

_NLMSGHDR_SIZE = 16
_IFINFOMSG = struct.Struct("=BxHiII")  # family, pad, type, index, flags, change
_RTA = struct.Struct("=HH")
_NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER


def _asciiz(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _l2addr(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def _uint(fmt: str) -> Callable[[bytes], int]:
    unpack = struct.Struct(fmt).unpack_from
    return lambda raw: int(unpack(raw)[0])


_u8, _u16, _u32, _s32, _be16 = (_uint(f) for f in ("=B", "=H", "=I", "=i", ">H"))


def _rtattr_items(raw: bytes, offset: int = 0) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of each attribute of a chain, in order."""
    end = len(raw)
    while offset + _RTA.size <= end:
        length, kind = _RTA.unpack_from(raw, offset)
        if length < _RTA.size or offset + length > end:
            return  # truncated: what came before stands, as pyroute2 does
        yield kind & _NLA_TYPE_MASK, raw[offset + _RTA.size : offset + length]
        offset += (length + 3) & ~3


def _rtattrs(raw: bytes, offset: int = 0) -> dict[int, bytes]:
    """Type -> payload of each attribute of a chain (the first of a repeated type)."""
    attrs: dict[int, bytes] = {}
    for kind, payload in _rtattr_items(raw, offset):
        attrs.setdefault(kind, payload)
    return attrs


def _vfinfo_list(raw: bytes) -> list[dict[int, bytes]]:
    """IFLA_VFINFO_LIST: one attribute chain per IFLA_VF_INFO."""
    return [_rtattrs(payload) for kind, payload in _rtattr_items(raw) if kind == IFLA_VF_INFO]


Schema = dict[str, tuple[int, Callable[[bytes], Any]]]


class Attrs:
    """A chain of attributes, decoded on access by pyroute2's names (``get_attr``)."""

    __slots__ = ("_raw", "_schema")

    def __init__(self, raw: dict[int, bytes], schema: Schema) -> None:
        self._raw = raw
        self._schema = schema

    def get_attr(self, name: str) -> Any:
        kind, decode = self._schema[name]  # KeyError: a name this decoder does not know
        payload = self._raw.get(kind)
        return None if payload is None else decode(payload)


_INFO_DATA: dict[str, Schema] = {
    "macvlan": {"IFLA_MACVLAN_MODE": (1, _u32)},
    "ipvlan": {"IFLA_IPVLAN_MODE": (1, _u16), "IFLA_IPVLAN_FLAGS": (2, _u16)},
    "vlan": {"IFLA_VLAN_ID": (1, _u16), "IFLA_VLAN_PROTOCOL": (5, _be16)},
    "bond": {
        "IFLA_BOND_MODE": (1, _u8),
        "IFLA_BOND_ACTIVE_SLAVE": (2, _u32),
        "IFLA_BOND_MIIMON": (3, _u32),
        "IFLA_BOND_UPDELAY": (4, _u32),
        "IFLA_BOND_DOWNDELAY": (5, _u32),
        "IFLA_BOND_FAIL_OVER_MAC": (13, _u8),
    },
}


def _linkinfo(raw: bytes) -> Attrs:
    attrs = _rtattrs(raw)
    kind = _asciiz(attrs[1]) if 1 in attrs else None
    data_schema = _INFO_DATA.get(kind or "", {})
    schema: Schema = {
        "IFLA_INFO_KIND": (1, _asciiz),
        "IFLA_INFO_DATA": (2, lambda nested: Attrs(_rtattrs(nested), data_schema)),
    }
    return Attrs(attrs, schema)


_LINK_SCHEMA: Schema = {
    "IFLA_ADDRESS": (1, _l2addr),
    "IFLA_IFNAME": (3, _asciiz),
    "IFLA_MTU": (4, _u32),
    "IFLA_LINK": (5, _u32),
    "IFLA_MASTER": (10, _u32),
    "IFLA_LINKINFO": (18, _linkinfo),
    "IFLA_IFALIAS": (20, _asciiz),
    "IFLA_LINK_NETNSID": (37, _s32),
    "IFLA_MIN_MTU": (50, _u32),
    "IFLA_MAX_MTU": (51, _u32),
    "IFLA_PERM_ADDRESS": (54, _l2addr),
    "IFLA_PARENT_DEV_NAME": (56, _asciiz),
    "IFLA_PARENT_DEV_BUS_NAME": (57, _asciiz),
    "IFLA_VFINFO_LIST": (IFLA_VFINFO_LIST, _vfinfo_list),
}


class LinkMessage(Attrs):
    """One RTM_NEWLINK message: ``msg["index"]``, ``msg["flags"]`` and ``get_attr``."""

    __slots__ = ("_header",)

    def __init__(self, chunk: bytes) -> None:
        _, _, index, flags, _ = _IFINFOMSG.unpack_from(chunk, _NLMSGHDR_SIZE)
        self._header: dict[str, int] = {"index": int(index), "flags": int(flags)}
        super().__init__(_rtattrs(chunk, _NLMSGHDR_SIZE + _IFINFOMSG.size), _LINK_SCHEMA)

    def __getitem__(self, key: str) -> int:
        return self._header[key]


def decode_link(chunk: bytes) -> LinkMessage:
    """An RTM_NEWLINK message, decoded only as far as a ``Link`` needs."""
    return LinkMessage(chunk)


_RTGENMSG_SIZE = 4  # struct rtgenmsg, padded to NLMSG_ALIGNTO


def decode_nsid(chunk: bytes) -> int | None:
    """NETNSA_NSID of an RTM_NEWNSID answer (-1: none assigned), None without one."""
    payload = _rtattrs(chunk, _NLMSGHDR_SIZE + _RTGENMSG_SIZE).get(NETNSA_NSID)
    return None if payload is None else _s32(payload)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def link_netnsid(msg: Any) -> int | None:
    return _int(msg.get_attr("IFLA_LINK_NETNSID"))


def to_link(
    msg: Any,
    ns: NsRef,
    resolve_nsid: Callable[[int], NsRef],
) -> Link:
    """One RTM_NEWLINK answer as a ``Link`` of namespace ``ns``.

    ``resolve_nsid`` maps an IFLA_LINK_NETNSID (as seen from ``ns``) to a namespace.
    """
    ifindex = int(msg["index"])
    name = str(msg.get_attr("IFLA_IFNAME"))
    info = msg.get_attr("IFLA_LINKINFO")
    raw_kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
    data = info.get_attr("IFLA_INFO_DATA") if info is not None else None
    # Kinds outside LinkKind (loopback, ifb, tun, vxlan, ...) are reported as "device".
    kind = cast(LinkKind, raw_kind if raw_kind in KINDS else "device")
    iflink = _int(msg.get_attr("IFLA_LINK"))
    nsid = link_netnsid(msg)
    fields: dict[str, Any] = {}
    if kind in STACKED and iflink is not None:
        fields["parent"] = iflink
        if nsid is not None:
            fields["parent_ns"] = resolve_nsid(nsid)
    if kind == "veth" and iflink is not None:
        fields["peer"] = iflink
    if data is not None:
        fields.update(_kind_data(kind, data))
    min_mtu = _int(msg.get_attr("IFLA_MIN_MTU"))
    max_mtu = _int(msg.get_attr("IFLA_MAX_MTU"))
    if min_mtu is not None:
        fields["min_mtu"] = min_mtu
    if max_mtu is not None:
        fields["max_mtu"] = max_mtu
    if kind == "device":
        pci = pci_address_of(msg)
        fields["pci_address"] = pci
        fields["vf_of"] = vf_of(pci) if pci else None
    perm = msg.get_attr("IFLA_PERM_ADDRESS")
    alias = msg.get_attr("IFLA_IFALIAS")
    return Link(
        ifindex=ifindex,
        name=name,
        kind=kind,
        ns=ns,
        mac=str(msg.get_attr("IFLA_ADDRESS") or ""),
        mtu=int(msg.get_attr("IFLA_MTU") or 0),
        up=bool(int(msg["flags"]) & IFF_UP),
        master=_int(msg.get_attr("IFLA_MASTER")),
        alias=str(alias) if alias else None,
        perm_mac=str(perm).lower() if perm else None,
        **fields,
    )


def _kind_data(kind: str, data: Any) -> dict[str, Any]:
    if kind == "bond":
        mode = _int(data.get_attr("IFLA_BOND_MODE")) or 0
        return {
            "bond": BondInfo(
                mode=BOND_MODES[mode] if mode < len(BOND_MODES) else str(mode),
                miimon_ms=_int(data.get_attr("IFLA_BOND_MIIMON")) or 0,
                updelay_ms=_int(data.get_attr("IFLA_BOND_UPDELAY")) or 0,
                downdelay_ms=_int(data.get_attr("IFLA_BOND_DOWNDELAY")) or 0,
                active_slave=_int(data.get_attr("IFLA_BOND_ACTIVE_SLAVE")) or None,
                fail_over_mac=_by_index(FAIL_OVER_MAC, data.get_attr("IFLA_BOND_FAIL_OVER_MAC")),
            )
        }
    if kind == "vlan":
        proto = _int(data.get_attr("IFLA_VLAN_PROTOCOL"))
        return {
            "vlan_id": _int(data.get_attr("IFLA_VLAN_ID")),
            "vlan_protocol": _by_value(VLAN_PROTOCOLS, proto) or (proto and hex(proto)),
        }
    if kind == "macvlan":
        return {"mode": _by_value(MACVLAN_MODES, data.get_attr("IFLA_MACVLAN_MODE"))}
    if kind == "ipvlan":
        flags = _int(data.get_attr("IFLA_IPVLAN_FLAGS")) or 0
        return {
            "mode": _by_value(IPVLAN_MODES, data.get_attr("IFLA_IPVLAN_MODE")),
            "ipvlan_flag": _ipvlan_flag(flags),
        }
    return {}


def _by_index(names: tuple[str, ...], value: Any) -> str:
    """The name at ``value`` (absent: the first, the kernel's default), else the number."""
    index = _int(value) or 0
    return names[index] if index < len(names) else str(index)


def _ipvlan_flag(flags: int) -> str | None:
    """IFLA_IPVLAN_FLAGS as the one flag it holds (None: bridge, no flag); the kernel
    refuses private and vepa together."""
    if flags == IPVLAN_F_PRIVATE:
        return "private"
    if flags == IPVLAN_F_VEPA:
        return "vepa"
    return None if flags == 0 else hex(flags)


# -- PCI identity ----------------------------------------------------------------------


def pci_address_of(msg: Any) -> str | None:
    """The PCI function behind a netdev, from IFLA_PARENT_DEV_{BUS_,}NAME (Linux 5.15+).

    Netlink answers this in any namespace, unlike /sys/class/net which shows the
    namespace sysfs was mounted in. For a netdev whose parent is not a PCI function
    (virtio-net's parent is a virtio device) the PCI ancestor of the parent is read
    from /sys/bus/<bus>/devices, which is the same in every network namespace.
    """
    bus = msg.get_attr("IFLA_PARENT_DEV_BUS_NAME")
    dev = msg.get_attr("IFLA_PARENT_DEV_NAME")
    if not bus or not dev:
        return None
    if bus == "pci":
        return str(dev).lower()
    return pci_ancestor(os.path.join(SYSFS_BUS, str(bus), "devices", str(dev)))


def pci_ancestor(sysfs_path: str) -> str | None:
    try:
        real = os.path.realpath(sysfs_path, strict=True)
    except OSError:
        return None
    for part in reversed(real.split(os.sep)):
        if PCI_ADDRESS.match(part):
            return part
    return None


def vf_of(pci: str) -> tuple[str, int] | None:
    """(PF PCI address, VF index) for an SR-IOV VF, from /sys/bus/pci (namespace-neutral)."""
    dev = os.path.join(SYSFS_BUS, "pci", "devices", pci)
    try:
        pf = os.path.basename(os.readlink(os.path.join(dev, "physfn")))
        entries = os.listdir(os.path.join(SYSFS_BUS, "pci", "devices", pf))
    except OSError:
        return None
    for entry in entries:
        if not entry.startswith("virtfn"):
            continue
        try:
            target = os.path.basename(
                os.readlink(os.path.join(SYSFS_BUS, "pci", "devices", pf, entry))
            )
        except OSError:
            continue
        if target == pci and entry[len("virtfn") :].isdigit():
            return (pf, int(entry[len("virtfn") :]))
    return None


# -- VFs -------------------------------------------------------------------------------


def to_vfs(msg: Any) -> list[VFConfig]:
    """IFLA_VFINFO_LIST of a PF (asked for with RTEXT_FILTER_VF)."""
    vflist: list[dict[int, bytes]] | None = msg.get_attr("IFLA_VFINFO_LIST")
    if vflist is None:
        return []
    return sorted((_vf(info) for info in vflist), key=lambda vf: vf.vf_index)


# struct ifla_vf_*: each starts with the VF's index (u32); then u32 values, but for the
# MAC (u8[32], of which an Ethernet address is the first 6) and a VLAN's __be16 protocol
_VF_VLAN_INFO = struct.Struct("=III2s")  # vf, vlan, qos, vlan_proto (network order)
_ETH_ALEN = 6


def _vf_u32s(payload: bytes | None, count: int) -> tuple[int, ...] | None:
    """The ``count`` u32 values after the VF index, or None for an absent attribute."""
    if payload is None:
        return None
    return struct.unpack_from(f"={count}I", payload, 4)


def _vf(info: dict[int, bytes]) -> VFConfig:
    mac = info[IFLA_VF_MAC]
    fields: dict[str, Any] = {"vf_index": _u32(mac), "mac": _l2addr(mac[4 : 4 + _ETH_ALEN])}
    vlan_list = info.get(IFLA_VF_VLAN_LIST)
    vlan_info = [
        _VF_VLAN_INFO.unpack_from(payload)
        for kind, payload in _rtattr_items(vlan_list or b"")
        if kind == IFLA_VF_VLAN_INFO
    ]
    vlan = _vf_u32s(info.get(IFLA_VF_VLAN), 2)
    if vlan_info:
        _, vid, qos, raw_proto = vlan_info[0]
        proto = int.from_bytes(raw_proto, "big")
        fields["vlan"], fields["qos"] = vid, qos
        fields["vlan_proto"] = _by_value(VLAN_PROTOCOLS, proto) or hex(proto)
    elif vlan is not None:
        fields["vlan"], fields["qos"] = vlan
    spoofchk = _vf_u32s(info.get(IFLA_VF_SPOOFCHK), 1)
    if spoofchk is not None and spoofchk[0] != U32_UNSET:
        fields["spoofchk"] = bool(spoofchk[0])
    trust = _vf_u32s(info.get(IFLA_VF_TRUST), 1)
    if trust is not None and trust[0] != U32_UNSET:
        fields["trust"] = bool(trust[0])
    rate = _vf_u32s(info.get(IFLA_VF_RATE), 2)
    tx_rate = _vf_u32s(info.get(IFLA_VF_TX_RATE), 1)
    if rate is not None:
        fields["min_tx_rate"], fields["max_tx_rate"] = rate
    elif tx_rate is not None:
        fields["max_tx_rate"] = tx_rate[0]
    link_state = _vf_u32s(info.get(IFLA_VF_LINK_STATE), 1)
    if link_state is not None:
        fields["link_state"] = _by_value(VF_LINK_STATES, link_state[0])
    return VFConfig(**fields)
