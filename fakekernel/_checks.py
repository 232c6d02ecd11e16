"""Input rules the kernel applies before any driver code: names, aliases, addresses."""

from __future__ import annotations

import errno
import re

from plugins.kernel import IFNAMSIZ, check_interface_name

from ._state import LinkState, State, fail

IFALIASZ = 256
ZERO_MAC = "00:00:00:00:00:00"
_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


def name_policy(name: str) -> None:
    """IFLA_IFNAME is NLA_STRING with .len = IFNAMSIZ - 1; validate_nla says -ERANGE."""
    if len(name.encode()) > IFNAMSIZ - 1:
        raise fail(errno.ERANGE, f"interface name {name!r} is longer than {IFNAMSIZ - 1} bytes")


def alias_policy(alias: str) -> None:
    """IFLA_IFALIAS has .len = IFALIASZ - 1; longer is -ERANGE from validate_nla."""
    if len(alias.encode()) > IFALIASZ - 1:
        raise fail(errno.ERANGE, f"alias is longer than {IFALIASZ - 1} bytes")


def claim_name(
    state: State,
    ns: int,
    name: str,
    owner: LinkState | None = None,
    taken: set[str] | frozenset[str] = frozenset(),
) -> str:
    """dev_get_valid_name: the name ``name`` resolves to in ``ns`` (a "%d" pattern is allocated).

    EINVAL for an invalid name or pattern, EEXIST if taken by another link. A pattern
    skips every name in use, ``owner``'s own too (__dev_alloc_name scans every device of
    the namespace: renaming eth0 to "eth%d" gives eth1); ``taken``: names about to be.
    """
    if check_interface_name(name) is not None:  # dev_valid_name
        raise fail(errno.EINVAL, f"invalid interface name {name!r}")
    if "%" in name:
        # __dev_alloc_name: exactly one "%d", the smallest free number wins.
        head, _, tail = name.partition("%")
        if not tail.startswith("d") or "%" in tail[1:]:
            raise fail(errno.EINVAL, f"invalid interface name pattern {name!r}")
        for i in range(32768):
            candidate = f"{head}{i}{tail[1:]}"
            if len(candidate.encode()) >= IFNAMSIZ:
                break
            if candidate not in taken and state.by_name(ns, candidate) is None:
                return candidate
        raise fail(errno.ENFILE, f"no free name for pattern {name!r}")
    holder = state.by_name(ns, name)
    if name in taken or (holder is not None and holder is not owner):
        raise fail(errno.EEXIST, f"interface {name!r} already exists in this namespace")
    return name


def parse_mac(mac: str) -> str:
    """An IFLA_ADDRESS of six bytes; anything else is -EINVAL (wrong attribute length)."""
    norm = mac.strip().lower().replace("-", ":")
    if not _MAC.match(norm):
        raise fail(errno.EINVAL, f"{mac!r} is not a 6-byte MAC address")
    return norm


def is_multicast(mac: str) -> bool:
    return bool(int(mac[:2], 16) & 1)


def valid_ether_addr(mac: str) -> bool:
    """is_valid_ether_addr: unicast and not all zeros."""
    return not is_multicast(mac) and mac != ZERO_MAC


def require_valid_ether_addr(mac: str) -> str:
    """ops->validate and eth_prepare_mac_addr_change answer -EADDRNOTAVAIL."""
    norm = parse_mac(mac)
    if not valid_ether_addr(norm):
        raise fail(errno.EADDRNOTAVAIL, f"{norm} is not a unicast, non-zero MAC address")
    return norm
