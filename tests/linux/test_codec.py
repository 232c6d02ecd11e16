"""The Linux backend's wire codec, without root: request layout, replies, errors.

SR-IOV hardware is not needed to check that VF requests have the kernel's struct
sizes and that a PF's IFLA_VFINFO_LIST decodes to the right ``VFConfig``.
"""

from __future__ import annotations

import errno
import struct

import pytest
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from plugins.kernel import KernelError, VFConfig
from plugins.kernel.linux import _wire as w
from plugins.kernel.linux._decode import decode_link_msg, to_vfs
from plugins.kernel.linux._errors import kernel_errors

HDR = struct.Struct("=IHHII")


def message(msg_type: int, body: bytes, *, flags: int = 0, seq: int = 1) -> bytes:
    return HDR.pack(HDR.size + len(body), msg_type, flags, seq, 0) + body


def test_attribute_numbers_match_pyroute2() -> None:
    names = [entry[0] for entry in ifinfmsg.nla_map]
    for name in (
        "IFLA_ADDRESS",
        "IFLA_IFNAME",
        "IFLA_MTU",
        "IFLA_LINK",
        "IFLA_MASTER",
        "IFLA_LINKINFO",
        "IFLA_IFALIAS",
        "IFLA_VFINFO_LIST",
        "IFLA_NET_NS_FD",
        "IFLA_EXT_MASK",
        "IFLA_LINK_NETNSID",
    ):
        assert names.index(name) == getattr(w, name), name
    vf = [e[0] for e in ifinfmsg.vflist.vfinfo.nla_map]
    for name in ("IFLA_VF_MAC", "IFLA_VF_VLAN", "IFLA_VF_TX_RATE", "IFLA_VF_SPOOFCHK"):
        assert vf.index(name) == getattr(w, name), name
    for name in ("IFLA_VF_LINK_STATE", "IFLA_VF_RATE", "IFLA_VF_TRUST", "IFLA_VF_VLAN_LIST"):
        assert vf.index(name) == getattr(w, name), name


def test_vf_structs_have_the_kernels_sizes() -> None:
    assert len(w.vf_mac(3, "02:00:00:00:00:01")) == 36  # struct ifla_vf_mac
    assert len(w.vf_vlan_info(3, 10, 2, 0x88A8)) == 16  # struct ifla_vf_vlan_info
    assert w.vf_vlan_info(3, 10, 2, 0x88A8)[12:14] == b"\x88\xa8"  # __be16 vlan_proto
    assert len(w.vf_struct(3, 1)) == 8  # spoofchk, trust, link_state
    assert len(w.vf_struct(3, 10, 100)) == 12  # struct ifla_vf_rate


def test_alias_clear_is_a_zero_length_attribute() -> None:
    assert w.nla_raw_str(w.IFLA_IFALIAS, "") == struct.pack("=HH", 4, w.IFLA_IFALIAS)


def _vf_info(index: int, *, spoofchk: int, trust: int, proto: int = 0x8100) -> bytes:
    return w.nest(
        w.IFLA_VF_INFO,
        [
            w.nla(w.IFLA_VF_MAC, w.vf_mac(index, f"02:00:00:00:00:0{index}")),
            w.nla(w.IFLA_VF_VLAN, w.vf_struct(index, 10 * index, index)),
            w.nla(w.IFLA_VF_TX_RATE, w.vf_struct(index, 0)),
            w.nla(w.IFLA_VF_SPOOFCHK, w.vf_struct(index, spoofchk)),
            w.nla(w.IFLA_VF_LINK_STATE, w.vf_struct(index, 2)),
            w.nla(w.IFLA_VF_RATE, w.vf_struct(index, 5, 50)),
            w.nla(w.IFLA_VF_TRUST, w.vf_struct(index, trust)),
            w.nest(
                w.IFLA_VF_VLAN_LIST,
                [w.nla(w.IFLA_VF_VLAN_INFO, w.vf_vlan_info(index, 10 * index, index, proto))],
            ),
        ],
    )


def test_vfinfo_list_decodes_to_vfconfig() -> None:
    vfs = w.nest(
        w.IFLA_VFINFO_LIST,
        [
            _vf_info(1, spoofchk=0xFFFFFFFF, trust=0xFFFFFFFF, proto=0x88A8),
            _vf_info(0, spoofchk=1, trust=0),
        ],
    )
    body = w.ifinfomsg(7) + w.nla_str(w.IFLA_IFNAME, "pf0") + vfs
    decoded = to_vfs(decode_link_msg(message(w.RTM_NEWLINK, body)))
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
    body = w.ifinfomsg(2) + w.nla_str(w.IFLA_IFNAME, "veth0")
    assert to_vfs(decode_link_msg(message(w.RTM_NEWLINK, body))) == []


def test_error_answers_keep_errno_and_extack_message() -> None:
    extack = w.nla_str(w.NLMSGERR_ATTR_MSG, "mtu less than device minimum")
    request_header = HDR.pack(32, w.RTM_SETLINK, 5, 9, 0)
    body = struct.pack("=i", -errno.EINVAL) + request_header + extack
    chunk = message(w.NLMSG_ERROR, body, flags=w.NLM_F_CAPPED | w.NLM_F_ACK_TLVS, seq=9)
    with pytest.raises(NetlinkError) as raw:
        w._raise_if_error(chunk, w.NLM_F_CAPPED | w.NLM_F_ACK_TLVS)
    assert raw.value.code == errno.EINVAL
    with pytest.raises(KernelError) as translated, kernel_errors("set_link"):
        raise raw.value
    assert translated.value.code == errno.EINVAL
    assert "mtu less than device minimum" in str(translated.value)
    w._raise_if_error(message(w.NLMSG_ERROR, struct.pack("=i", 0) + request_header), 0)


def test_os_errors_keep_their_errno() -> None:
    with pytest.raises(KernelError) as exc, kernel_errors("open"):
        open("/nonexistent/namespace", encoding="ascii")  # noqa: SIM115
    assert exc.value.code == errno.ENOENT


@pytest.mark.parametrize("mac", ["", "02:00:00:00:00", "02:00:00:00:00:0g", "0200.0000.0001"])
def test_malformed_macs_are_einval(mac: str) -> None:
    with pytest.raises(NetlinkError) as exc:
        w.parse_mac(mac)
    assert exc.value.code == errno.EINVAL


def test_macs_parse() -> None:
    assert w.parse_mac("02-AA-bb-00-00-01") == bytes([2, 0xAA, 0xBB, 0, 0, 1])
