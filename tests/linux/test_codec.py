"""The Linux backend's wire codec, without root: request bytes, replies, errors.

Requests are encoded by pyroute2 with two fixes (``_messages.LinkRequest``). Each
fix is checked here against the kernel's struct layout, written out independently
with ``struct``; each has a companion test showing that stock pyroute2 still needs
it (when one of those fails after an upgrade, the fix can go). The attribute
layouts the host kernel cannot check here (vlan and bond need modules it lacks,
VFs need SR-IOV hardware) are compared byte for byte too.
"""

from __future__ import annotations

import errno
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_EXCL
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import RTM_DELLINK, RTM_GETLINK, RTM_GETNSID, RTM_NEWLINK, RTM_SETLINK
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from plugins.kernel import KernelError, VFConfig
from plugins.kernel.linux import _messages as m
from plugins.kernel.linux._decode import decode_link_msg, to_vfs
from plugins.kernel.linux._errors import kernel_errors
from plugins.kernel.linux._messages import link_request, nested

HDR = struct.Struct("=IHHII")
IFINFOMSG = struct.Struct("=BxHiII")
# <linux/if_link.h>
IFLA_IFNAME = 3
IFLA_LINKINFO = 18
IFLA_IFALIAS = 20
IFLA_VFINFO_LIST = 22
IFLA_INFO_DATA = 2
IFLA_VF_INFO = 1
IFLA_VF_MAC = 1
IFLA_VF_VLAN = 2
IFLA_VF_TX_RATE = 3
IFLA_VF_SPOOFCHK = 4
IFLA_VF_LINK_STATE = 5
IFLA_VF_RATE = 6
IFLA_VF_TRUST = 9
IFLA_VF_VLAN_LIST = 12
IFLA_VF_VLAN_INFO = 1


def nla(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def unpadded(kind: int, payload: bytes) -> bytes:
    """One attribute as ``attribute`` returns it: header and payload, no padding."""
    return struct.pack("=HH", 4 + len(payload), kind) + payload


def attributes(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, the attribute: header and payload, no padding) along a chain."""
    offset = 0
    while offset + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, offset)
        yield kind & 0x3FFF, data[offset : offset + length]
        offset += (length + 3) & ~3


def attribute(data: bytes, *path: int) -> bytes:
    """The attribute at ``path`` (types, outermost first), header included."""
    for depth, kind in enumerate(path):
        found = [a for t, a in attributes(data) if t == kind]
        assert len(found) == 1, f"attribute {path[: depth + 1]}: {len(found)} found"
        data = found[0] if depth == len(path) - 1 else found[0][4:]
    return data


def encoded(msg: Any) -> bytes:
    """The attribute chain of an encoded ifinfomsg request (after nlmsghdr+ifinfomsg)."""
    msg.encode()
    return bytes(msg.data[HDR.size + IFINFOMSG.size :])


def set_vf(msg_class: Any, *parts: tuple[str, Any]) -> bytes:
    msg = msg_class()
    msg["index"] = 7
    msg["attrs"] = [("IFLA_VFINFO_LIST", nested(("IFLA_VF_INFO", nested(*parts))))]
    return encoded(msg)


def vlan_info(vf: int, vlan: int, qos: int, proto: int) -> tuple[str, Any]:
    info = {"vf": vf, "vlan": vlan, "qos": qos, "proto": proto}
    return ("IFLA_VF_VLAN_LIST", nested(("IFLA_VF_VLAN_INFO", info)))


VLAN_INFO_PATH = (IFLA_VFINFO_LIST, IFLA_VF_INFO, IFLA_VF_VLAN_LIST, IFLA_VF_VLAN_INFO)


def test_constants_match_pyroute2() -> None:
    for ours, theirs in [
        (m.RTM_NEWLINK, RTM_NEWLINK),
        (m.RTM_DELLINK, RTM_DELLINK),
        (m.RTM_GETLINK, RTM_GETLINK),
        (m.RTM_SETLINK, RTM_SETLINK),
        (m.RTM_GETNSID, RTM_GETNSID),
        (m.NLM_F_ACK, NLM_F_ACK),
        (m.NLM_F_DUMP, NLM_F_DUMP),
        (m.NLM_F_DUMP_INTR, NLM_F_DUMP_INTR),
        (m.NLM_F_CREATE, NLM_F_CREATE),
        (m.NLM_F_EXCL, NLM_F_EXCL),
    ]:
        assert ours == theirs


# -- fix 1: struct ifla_vf_vlan_info is 16 bytes --------------------------------------


def test_vf_vlan_info_has_the_kernels_16_byte_layout() -> None:
    # struct ifla_vf_vlan_info { __u32 vf; __u32 vlan; __u32 qos; __be16 vlan_proto; }
    # sizeof == 16: the struct is padded to its 4-byte alignment.
    body = set_vf(m.LinkRequest, vlan_info(3, 10, 2, 0x88A8))
    expected = struct.pack("=III", 3, 10, 2) + struct.pack(">H", 0x88A8) + b"\0\0"
    assert attribute(body, *VLAN_INFO_PATH) == nla(IFLA_VF_VLAN_INFO, expected)


def test_stock_pyroute2_still_sends_a_short_vf_vlan_info() -> None:
    body = set_vf(ifinfmsg, vlan_info(3, 10, 2, 0x88A8))
    assert len(attribute(body, *VLAN_INFO_PATH)) == 4 + 14  # the kernel answers EINVAL


def test_every_vf_struct_has_the_kernels_size() -> None:
    body = set_vf(
        m.LinkRequest,
        ("IFLA_VF_MAC", {"vf": 3, "mac": "02:00:00:00:00:01"}),
        vlan_info(3, 10, 2, 0x8100),
        ("IFLA_VF_RATE", {"vf": 3, "min_tx_rate": 10, "max_tx_rate": 100}),
        ("IFLA_VF_SPOOFCHK", {"vf": 3, "spoofchk": 1}),
        ("IFLA_VF_LINK_STATE", {"vf": 3, "link_state": 2}),
        ("IFLA_VF_TRUST", {"vf": 3, "trust": 0}),
    )
    info = IFLA_VFINFO_LIST, IFLA_VF_INFO
    mac = struct.pack("=I32s", 3, bytes([2, 0, 0, 0, 0, 1]))  # struct ifla_vf_mac: u8 mac[32]
    assert attribute(body, *info, IFLA_VF_MAC) == nla(IFLA_VF_MAC, mac)
    assert attribute(body, *info, IFLA_VF_RATE) == nla(IFLA_VF_RATE, struct.pack("=3I", 3, 10, 100))
    for kind, value in [(IFLA_VF_SPOOFCHK, 1), (IFLA_VF_LINK_STATE, 2), (IFLA_VF_TRUST, 0)]:
        assert attribute(body, *info, kind) == nla(kind, struct.pack("=2I", 3, value))
    assert len(attribute(body, *info, IFLA_VF_VLAN_LIST, IFLA_VF_VLAN_INFO)) == 4 + 16


# -- fix 2: IFLA_IFALIAS without its NUL ----------------------------------------------


@pytest.mark.parametrize(("alias", "payload"), [("", b""), ("ab", b"ab"), ("a" * 255, b"a" * 255)])
def test_alias_is_sent_without_nul(alias: str, payload: bytes) -> None:
    # The kernel takes nla_len as the alias length: 0 clears it, 255 fits IFALIASZ.
    body = encoded(link_request(7, [("IFLA_IFALIAS", alias)]))
    assert attribute(body, IFLA_IFALIAS) == unpadded(IFLA_IFALIAS, payload)


def test_stock_pyroute2_still_sends_the_alias_with_a_nul() -> None:
    msg = ifinfmsg()
    msg["attrs"] = [("IFLA_IFALIAS", "")]
    assert attribute(encoded(msg), IFLA_IFALIAS) == unpadded(IFLA_IFALIAS, b"\0")


def test_the_fixes_do_not_change_pyroute2s_own_classes() -> None:
    stock = ifinfmsg()
    stock["attrs"] = [("IFLA_IFALIAS", "x")]
    assert attribute(encoded(stock), IFLA_IFALIAS) == unpadded(IFLA_IFALIAS, b"x\0")
    ours = encoded(link_request(7, [("IFLA_IFALIAS", "x"), ("IFLA_IFNAME", "eth0")]))
    assert attribute(ours, IFLA_IFALIAS) == unpadded(IFLA_IFALIAS, b"x")
    assert attribute(ours, IFLA_IFNAME) == unpadded(IFLA_IFNAME, b"eth0\0")  # a C string
    assert len(attribute(set_vf(ifinfmsg, vlan_info(0, 1, 0, 0x8100)), *VLAN_INFO_PATH)) == 18


FIXES_AFTER_STOCK = """
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from plugins.kernel.linux._messages import LinkRequest, link_request
from tests.linux.test_codec import encoded, set_vf, vlan_info

set_vf(ifinfmsg, vlan_info(0, 1, 0, 0x8100))  # the stock classes are compiled first
print(set_vf(LinkRequest, vlan_info(3, 10, 2, 0x88A8)).hex())
print(encoded(link_request(7, [("IFLA_IFALIAS", "")])).hex())
"""


def test_the_fixes_hold_when_pyroute2_compiled_its_classes_first() -> None:
    # pyroute2 compiles a class's attribute table on first use and a subclass inherits
    # the "compiled" mark: in a fresh interpreter, use the stock classes first.
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", FIXES_AFTER_STOCK],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    vf, alias = (bytes.fromhex(line) for line in done.stdout.split())
    assert len(attribute(vf, *VLAN_INFO_PATH)) == 4 + 16
    assert attribute(alias, IFLA_IFALIAS) == unpadded(IFLA_IFALIAS, b"")


# -- layouts the host kernel cannot check here ----------------------------------------


def linkinfo(kind: str, *data: tuple[str, Any]) -> bytes:
    info = nested(("IFLA_INFO_KIND", kind), ("IFLA_INFO_DATA", nested(*data)))
    return encoded(link_request(0, [("IFLA_LINKINFO", info)]))


def test_vlan_data_layout() -> None:
    body = linkinfo("vlan", ("IFLA_VLAN_ID", 7), ("IFLA_VLAN_PROTOCOL", 0x88A8))
    data = attribute(body, IFLA_LINKINFO, IFLA_INFO_DATA)[4:]
    assert data == nla(1, struct.pack("=H", 7)) + nla(5, struct.pack(">H", 0x88A8))


def test_bond_data_layout() -> None:
    body = linkinfo(
        "bond",
        ("IFLA_BOND_MODE", 1),
        ("IFLA_BOND_MIIMON", 100),
        ("IFLA_BOND_UPDELAY", 200),
        ("IFLA_BOND_DOWNDELAY", 300),
    )
    data = attribute(body, IFLA_LINKINFO, IFLA_INFO_DATA)[4:]
    assert data == (
        nla(1, struct.pack("=B", 1))
        + nla(3, struct.pack("=I", 100))
        + nla(4, struct.pack("=I", 200))
        + nla(5, struct.pack("=I", 300))
    )


# -- replies ---------------------------------------------------------------------------


def message(msg_type: int, body: bytes, *, flags: int = 0, seq: int = 1) -> bytes:
    return HDR.pack(HDR.size + len(body), msg_type, flags, seq, 0) + body


def _vf_info(index: int, *, spoofchk: int, trust: int, proto: int = 0x8100) -> bytes:
    def vf(*fields: int) -> bytes:
        return struct.pack(f"={len(fields) + 1}I", index, *fields)

    mac = struct.pack("=I32s", index, bytes([2, 0, 0, 0, 0, index]))
    vlan = vf(10 * index, index) + struct.pack(">H", proto) + b"\0\0"
    return nla(
        IFLA_VF_INFO,
        nla(IFLA_VF_MAC, mac)
        + nla(IFLA_VF_VLAN, vf(10 * index, index))
        + nla(IFLA_VF_TX_RATE, vf(0))
        + nla(IFLA_VF_SPOOFCHK, vf(spoofchk))
        + nla(IFLA_VF_LINK_STATE, vf(2))
        + nla(IFLA_VF_RATE, vf(5, 50))
        + nla(IFLA_VF_TRUST, vf(trust))
        + nla(IFLA_VF_VLAN_LIST, nla(IFLA_VF_VLAN_INFO, vlan)),
    )


def _link_reply(index: int, name: str, *attrs: bytes) -> bytes:
    body = IFINFOMSG.pack(0, 0, index, 0, 0) + nla(IFLA_IFNAME, name.encode() + b"\0")
    return message(m.RTM_NEWLINK, body + b"".join(attrs))


def test_vfinfo_list_decodes_to_vfconfig() -> None:
    vfs = nla(
        IFLA_VFINFO_LIST,
        _vf_info(1, spoofchk=0xFFFFFFFF, trust=0xFFFFFFFF, proto=0x88A8)
        + _vf_info(0, spoofchk=1, trust=0),
    )
    decoded = to_vfs(decode_link_msg(_link_reply(7, "pf0", vfs)))
    assert decoded == [
        VFConfig(
            vf_index=0,
            mac="02:00:00:00:00:00",
            vlan=0,
            qos=0,
            vlan_proto="802.1Q",
            spoofchk=True,
            trust=False,
            min_tx_rate=5,
            max_tx_rate=50,
            link_state="disable",
        ),
        VFConfig(
            vf_index=1,
            mac="02:00:00:00:00:01",
            vlan=10,
            qos=1,
            vlan_proto="802.1ad",
            spoofchk=None,  # the driver left the kernel's -1: not reported
            trust=None,
            min_tx_rate=5,
            max_tx_rate=50,
            link_state="disable",
        ),
    ]


def test_a_link_without_vfs_has_an_empty_list() -> None:
    assert to_vfs(decode_link_msg(_link_reply(2, "veth0"))) == []


# -- errors ----------------------------------------------------------------------------


def test_netlink_errors_keep_errno_and_message() -> None:
    with pytest.raises(KernelError) as exc, kernel_errors("set_link"):
        raise NetlinkError(errno.EINVAL, "mtu less than device minimum")
    assert exc.value.code == errno.EINVAL
    assert "mtu less than device minimum" in str(exc.value)


def test_os_errors_keep_their_errno() -> None:
    with pytest.raises(KernelError) as exc, kernel_errors("open"):
        open("/nonexistent/namespace", encoding="ascii")  # noqa: SIM115
    assert exc.value.code == errno.ENOENT


@pytest.mark.parametrize("mac", ["", "02:00:00:00:00", "02:00:00:00:00:0g", "0200.0000.0001"])
def test_malformed_macs_are_einval(mac: str) -> None:
    with pytest.raises(NetlinkError) as exc:
        m.parse_mac(mac)
    assert exc.value.code == errno.EINVAL


def test_macs_parse_to_pyroute2s_form() -> None:
    assert m.parse_mac("02-AA-bb-00-00-01") == "02:aa:bb:00:00:01"
