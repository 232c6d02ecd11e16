"""rtnetlink requests as pyroute2 messages, with the two encodings pyroute2 0.9 gets wrong.

Requests are built as pyroute2 ``ifinfmsg``/``nsidmsg`` objects and encoded by
pyroute2, except for two attributes whose stock encoding the kernel refuses or
misreads (``LinkRequest`` below; each fix has a test in ``tests/linux/test_codec.py``
that compares the bytes with the kernel's struct layout):

* ``struct ifla_vf_vlan_info`` is ``u32 vf, vlan, qos; __be16 vlan_proto`` and,
  being a C struct, 16 bytes long. pyroute2 encodes the 14 bytes of its fields, so
  ``IFLA_VF_VLAN_INFO`` is 2 bytes short of the kernel's minimum (``do_set_vf``
  answers EINVAL).
* ``IFLA_IFALIAS`` is a string *without* its NUL: the kernel takes ``nla_len`` as the
  alias length, so length 0 clears the alias and a 255-byte alias fits IFALIASZ.
  pyroute2 sends it NUL-terminated: "" then sets an alias of one NUL, and a 255-byte
  alias becomes 256 bytes (EINVAL).

Replies are decoded with pyroute2's own classes (``_decode.py``).
"""

from __future__ import annotations

import errno
from typing import Any

from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from ._errors import netlink_error

# <linux/netlink.h>
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
SOL_NETLINK = 270
NETLINK_EXT_ACK = 11

# <linux/rtnetlink.h>
RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_GETLINK = 18
RTM_SETLINK = 19
RTM_GETNSID = 90
RTEXT_FILTER_VF = 1 << 0
RTEXT_FILTER_SKIP_STATS = 1 << 3

# <linux/if.h>
IFF_UP = 0x1


class LinkRequest(ifinfmsg):  # type: ignore[misc]  # pyroute2 is untyped
    """``ifinfmsg`` for requests: the alias without NUL, a 16-byte ``ifla_vf_vlan_info``."""

    # pyroute2 compiles a class's attribute table once and marks the class compiled
    # (nlmsg_base.__compiled_nla). A subclass inherits that mark and would reuse its
    # parent's table, ignoring its own: every subclass with attributes clears it.
    _nlmsg_base__compiled_nla = False
    nla_map = tuple(
        (name, "string", *rest) if name == "IFLA_IFALIAS" else (name, kind, *rest)
        for name, kind, *rest in ifinfmsg.nla_map
    )

    class vflist(ifinfmsg.vflist):  # type: ignore[misc]  # looked up by name
        _nlmsg_base__compiled_nla = False

        class vfinfo(ifinfmsg.vflist.vfinfo):  # type: ignore[misc]
            _nlmsg_base__compiled_nla = False

            class vf_vlist(ifinfmsg.vflist.vfinfo.vf_vlist):  # type: ignore[misc]
                _nlmsg_base__compiled_nla = False

                class ivvi(ifinfmsg.vflist.vfinfo.vf_vlist.ivvi):  # type: ignore[misc]
                    fields = (*ifinfmsg.vflist.vfinfo.vf_vlist.ivvi.fields, ("__pad", "2x"))


def link_request(
    index: int = 0,
    attrs: list[tuple[str, Any]] | None = None,
    *,
    flags: int = 0,
    change: int = 0,
) -> Any:
    """An ``ifinfomsg`` request (family AF_UNSPEC) with pyroute2 attribute tuples."""
    msg = LinkRequest()
    msg["index"] = index
    msg["flags"] = flags
    msg["change"] = change
    msg["attrs"] = list(attrs or [])
    return msg


def nested(*attrs: tuple[str, Any]) -> dict[str, Any]:
    """The value of a nested attribute (pyroute2 encodes ``{"attrs": [...]}``)."""
    return {"attrs": list(attrs)}


def parse_mac(mac: str) -> str:
    """Six colon- or dash-separated hex bytes, as pyroute2 encodes them (aa:bb:...).

    Anything else is EINVAL, as a wrong IFLA_ADDRESS length is for the kernel.
    """
    parts = mac.strip().replace("-", ":").split(":")
    try:
        raw = bytes(int(p, 16) for p in parts if len(p) == 2)
    except ValueError:
        raw = b""
    if len(parts) != 6 or len(raw) != 6:
        raise netlink_error(errno.EINVAL, f"{mac!r} is not a 6-byte MAC address")
    return ":".join(f"{b:02x}" for b in raw)
