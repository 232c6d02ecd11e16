"""The Linux backend's wire codec, without root: request layout, replies, errors.

SR-IOV hardware is not needed to check that VF requests have the kernel's struct
sizes and that a PF's IFLA_VFINFO_LIST decodes to the right ``VFConfig``.
"""

from __future__ import annotations

import errno
import struct
import subprocess
import sys

import pytest
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.nsidmsg import nsidmsg

from plugins.kernel import KernelError, VFConfig
from plugins.kernel.linux import _wire as w
from plugins.kernel.linux._decode import decode_link, decode_nsid, to_vfs
from plugins.kernel.linux._errors import NetlinkError, kernel_errors

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
    decoded = to_vfs(decode_link(message(w.RTM_NEWLINK, body)))
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
    assert to_vfs(decode_link(message(w.RTM_NEWLINK, body))) == []


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


def _link_message(index: int, flags: int, attrs: list[bytes]) -> bytes:
    return message(w.RTM_NEWLINK, w.ifinfomsg(index, flags) + b"".join(attrs))


def _info(kind: str, data: list[bytes]) -> bytes:
    parts = [w.nla_str(w.IFLA_INFO_KIND, kind)]
    if data:
        parts.append(w.nest(w.IFLA_INFO_DATA, data))
    return w.nest(w.IFLA_LINKINFO, parts)


_COMMON = [
    w.nla_str(w.IFLA_IFNAME, "net1"),
    w.nla_mac(w.IFLA_ADDRESS, "02:aa:bb:cc:dd:0e"),
    w.nla_u32(w.IFLA_MTU, 1500),
    w.nla_u32(50, 68),  # IFLA_MIN_MTU
    w.nla_u32(51, 9000),  # IFLA_MAX_MTU
    w.nla_str(w.IFLA_IFALIAS, "dranp:0123abcd:ffee"),
]
_DEVICE = [
    w.nla(54, bytes.fromhex("0c42a1b2c3d4")),  # IFLA_PERM_ADDRESS
    w.nla_str(57, "pci"),  # IFLA_PARENT_DEV_BUS_NAME
    w.nla_str(56, "0000:03:00.1"),  # IFLA_PARENT_DEV_NAME
]
_LINK_MESSAGES = {
    "macvlan": [
        *_COMMON,
        w.nla_u32(w.IFLA_LINK, 7),
        w.nla_s32(w.IFLA_LINK_NETNSID, 3),
        _info("macvlan", [w.nla_u32(w.IFLA_MACVLAN_MODE, 4)]),
    ],
    "ipvlan": [*_COMMON, w.nla_u32(w.IFLA_LINK, 7), _info("ipvlan", [w.nla_u16(1, 0)])],
    "vlan": [
        *_COMMON,
        w.nla_u32(w.IFLA_LINK, 2),
        w.nla_u32(w.IFLA_MASTER, 9),
        _info("vlan", [w.nla_u16(w.IFLA_VLAN_ID, 100), w.nla_be16(w.IFLA_VLAN_PROTOCOL, 0x88A8)]),
    ],
    "bond": [
        *_COMMON,
        _info(
            "bond",
            [
                w.nla_u8(w.IFLA_BOND_MODE, 1),
                w.nla_u32(w.IFLA_BOND_ACTIVE_SLAVE, 4),
                w.nla_u32(w.IFLA_BOND_MIIMON, 100),
                w.nla_u32(w.IFLA_BOND_UPDELAY, 200),
                w.nla_u32(w.IFLA_BOND_DOWNDELAY, 300),
            ],
        ),
    ],
    "veth": [*_COMMON, w.nla_u32(w.IFLA_LINK, 12), _info("veth", [])],
    "device": [*_COMMON, *_DEVICE],
    "unknown kind": [*_COMMON, _info("vxlan", [w.nla_u32(1, 42)])],
    "bare": [w.nla_str(w.IFLA_IFNAME, "lo")],
}


@pytest.mark.parametrize("case", sorted(_LINK_MESSAGES))
def test_the_hot_path_decoder_gives_the_link_pyroute2_gives(case: str) -> None:
    from plugins.kernel import NsRef
    from plugins.kernel.linux._decode import to_link

    chunk = _link_message(5, w.IFF_UP if case != "bare" else 0, _LINK_MESSAGES[case])
    here = NsRef(1, 2, "boot")

    def resolve(nsid: int) -> NsRef:
        return NsRef(1, 100 + nsid, "boot")

    fast = to_link(decode_link(chunk), here, resolve)
    theirs = ifinfmsg(chunk)  # pyroute2's full decoding, every attribute it knows
    theirs.decode()
    assert fast == to_link(theirs, here, resolve)
    assert fast.ifindex == 5
    assert fast.name == ("lo" if case == "bare" else "net1")


@pytest.mark.parametrize("nsid", [0, 5, -1])
def test_nsid_answers_decode_as_pyroute2_decodes_them(nsid: int) -> None:
    body = struct.pack("=Bxxx", 0) + w.nla(w.NETNSA_NSID, struct.pack("=i", nsid))
    chunk = message(w.RTM_NEWNSID, body)
    theirs = nsidmsg(chunk)
    theirs.decode()
    # the kernel's s32 (-1: NETNSA_NSID_NOT_ASSIGNED), which pyroute2 reads as a u32
    assert decode_nsid(chunk) == nsid
    assert theirs.get_attr("NETNSA_NSID") == nsid % 2**32
    assert decode_nsid(message(w.RTM_NEWNSID, struct.pack("=Bxxx", 0))) is None


def test_vf_tables_decode_as_pyroute2_decodes_them() -> None:
    vfs = w.nest(w.IFLA_VFINFO_LIST, [_vf_info(0, spoofchk=1, trust=0, proto=0x88A8)])
    chunk = message(w.RTM_NEWLINK, w.ifinfomsg(7) + w.nla_str(w.IFLA_IFNAME, "pf0") + vfs)
    theirs = ifinfmsg(chunk)
    theirs.decode()
    (info,) = theirs.get_attr("IFLA_VFINFO_LIST").get_attrs("IFLA_VF_INFO")
    (ours,) = to_vfs(decode_link(chunk))
    vlan = info.get_attr("IFLA_VF_VLAN_LIST").get_attrs("IFLA_VF_VLAN_INFO")[0]
    rate = info.get_attr("IFLA_VF_RATE")
    assert (ours.mac, ours.vlan, ours.qos, ours.vlan_proto) == (
        info.get_attr("IFLA_VF_MAC")["mac"],
        vlan["vlan"],
        vlan["qos"],
        "802.1ad" if vlan["proto"] == 0x88A8 else hex(vlan["proto"]),
    )
    assert (ours.min_tx_rate, ours.max_tx_rate) == (rate["min_tx_rate"], rate["max_tx_rate"])
    assert ours.spoofchk == bool(info.get_attr("IFLA_VF_SPOOFCHK")["spoofchk"])


def test_the_product_never_imports_pyroute2() -> None:
    """Any pyroute2 module imports the whole package (370 modules, ~22 MB resident): the
    services and their Linux backend decode netlink themselves."""
    code = (
        "import sys, plugins.services, plugins.kernel.linux.kernel, plugins.coordinator;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyroute2'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", out
