"""RTM_NEWLINK / RTM_SETLINK / RTM_DELLINK and namespace teardown.

Like rtnetlink, a set or move applies its parts in the kernel's order and stops at
the first error, keeping what it already changed (do_setlink is not atomic).
"""

from __future__ import annotations

import contextlib
import errno

from plugins.kernel import (
    FAIL_OVER_MAC,
    IPVLAN_FLAGS,
    BondInfo,
    KernelError,
    LinkChanges,
    LinkOptions,
    LinkSpec,
)

from ._bonding import (
    BOND_MODES,
    USES_PRIMARY,
    detach_dying,
    do_set_master,
    link_ok,
    release,
    release_all,
    select_active,
)
from ._bonding import rx_handler_busy as _rx_busy
from ._checks import (
    alias_policy,
    claim_name,
    name_policy,
    parse_mac,
    require_valid_ether_addr,
)
from ._dev import (
    dev_change_name,
    dev_close,
    dev_open,
    dev_set_alias,
    dev_set_mac,
    dev_set_mtu,
)
from ._state import BondState, LinkState, Namespace, State, fail
from ._vfs import vlan_filter_refused

ETH_MAX_MTU = 65535
ETH_DATA_LEN = 1500
# (min_mtu, max_mtu) each kind's setup() gives before newlink refines it; 0 max: unbounded.
SETUP_MTU_BOUNDS = {
    "veth": (68, ETH_MAX_MTU),
    "dummy": (0, 0),  # dummy_setup
    "bridge": (68, ETH_MAX_MTU),
    "bond": (68, ETH_MAX_MTU),
    "vlan": (0, ETH_MAX_MTU),  # vlan_setup
    "macvlan": (68, ETH_MAX_MTU),  # macvlan_common_setup; newlink narrows max to the lower's
    "ipvlan": (68, ETH_MAX_MTU),  # ipvlan_link_setup
}
MACVLAN_MODES = ("private", "vepa", "bridge", "passthru", "source")
IPVLAN_MODES = ("l2", "l3", "l3s")
VLAN_PROTOCOLS = ("802.1Q", "802.1ad")
NETNS_LOCAL = ("bond", "bridge")  # NETIF_F_NETNS_LOCAL / netns_immutable
# bonding's defaults for a bond made over netlink without options (6.1, 6.12: miimon 0)
DEFAULT_BOND = BondInfo(mode="balance-rr", miimon_ms=0)
DEFAULT_MIIMON_MS = 100  # BOND_DEFAULT_MIIMON
MII_ONLY_BOND_MODES = ("802.3ad", "balance-tlb", "balance-alb")  # !bond_mode_uses_arp


# -- RTM_NEWLINK -----------------------------------------------------------------------


def newlink(state: State, ns: Namespace, spec: LinkSpec) -> LinkState:
    name_policy(spec.name)
    if spec.peer_name is not None:
        name_policy(spec.peer_name)
    # no name: rtnl_newlink_create names it "<kind>%d"; a template (a "%d" in it) is
    # resolved by register_netdevice to its smallest free number
    name = spec.name or f"{spec.kind}%d"
    if spec.alias is not None:
        alias_policy(spec.alias)
    if spec.kind not in SETUP_MTU_BOUNDS:
        raise fail(errno.EOPNOTSUPP, f"no rtnl_link_ops for kind {spec.kind!r}")
    # ops->validate; ipvlan has no IFLA_ADDRESS check and overwrites it with its lower's
    mac = require_valid_ether_addr(spec.mac) if spec.mac and spec.kind != "ipvlan" else None
    _validate(spec)
    if spec.kind == "veth" and spec.peer_ns is not None:
        # veth_newlink gets the peer's namespace (rtnl_link_get_net) before it creates
        # either end: a dead one fails the call with nothing created.
        state.namespace(spec.peer_ns)
    target = ns.ref.inode
    if spec.ifindex is not None:
        # rtnl_newlink looks the link up by the asked index alone (NLM_F_EXCL: EEXIST);
        # a taken name is then found only by register_netdevice, after the kind's checks
        _ifindex_free(state, ns, spec)
    elif "%" not in name and state.by_name(target, name) is not None:
        raise fail(errno.EEXIST, f"interface {spec.name!r} already exists")  # NLM_F_EXCL
    min_mtu, max_mtu = SETUP_MTU_BOUNDS[spec.kind]
    if spec.mtu is not None and (
        spec.mtu < min_mtu or (max_mtu > 0 and spec.mtu > max_mtu)
    ):  # rtnl_create_link: dev_validate_mtu
        raise fail(errno.EINVAL, f"mtu {spec.mtu} outside {min_mtu}..{max_mtu or 'unbounded'}")
    link = LinkState(
        id=0,
        ifindex=0,
        name=name,
        kind=spec.kind,
        ns=target,
        mac=mac or "",
        mac_assign="set" if mac else "random",
        mtu=spec.mtu if spec.mtu is not None else 1500,
        min_mtu=min_mtu,
        max_mtu=max_mtu,
    )
    if spec.kind in ("vlan", "macvlan", "ipvlan"):
        _stack_on_lower(state, ns, spec, link)
    elif spec.kind == "bond":
        b = spec.bond or DEFAULT_BOND
        link.bond = BondState(
            b.mode,
            b.miimon_ms,
            _delay(b.updelay_ms, b.miimon_ms),
            _delay(b.downdelay_ms, b.miimon_ms),
            b.fail_over_mac,
        )
    peer_name = None
    if spec.kind == "veth":
        # veth_newlink registers the peer first: it gets its name first
        peer_ns = state.namespace(spec.peer_ns) if spec.peer_ns is not None else ns
        # an empty VETH_INFO_PEER IFLA_IFNAME is a name (invalid), unlike the first end's
        peer_pattern = "veth%d" if spec.peer_name is None else spec.peer_name
        peer_name = claim_name(state, peer_ns.ref.inode, peer_pattern)
        taken = {peer_name} if peer_ns is ns else set()
        link.name = claim_name(state, target, name, taken=taken)  # register_netdevice
    else:
        link.name = claim_name(state, target, name)  # register_netdevice
    if not link.mac:
        link.mac = state.random_mac()
    state.add(link, spec.ifindex)
    if spec.kind == "ipvlan":
        _ipvlan_set_port_mode(state, link, spec.mode or "l3")
        if spec.ipvlan_flag is not None:  # ipvlan_link_new: port->flags
            _ipvlan_set_port_flag(state, link, spec.ipvlan_flag)
    if peer_name is not None:
        _add_peer(state, ns, spec, link, peer_name)
    if spec.alias is not None:
        dev_set_alias(link, spec.alias)
    return link


def _ifindex_free(state: State, ns: Namespace, spec: LinkSpec) -> None:
    """rtnl_newlink with ifi_index > 0: the namespace the message is sent in (a child's
    parent's, when created across namespaces) looks the index up first (NLM_F_EXCL:
    EEXIST); register_netdevice in the target finds it taken there only: EBUSY."""
    assert spec.ifindex is not None
    if not 0 < spec.ifindex <= 0x7FFFFFFF:
        raise fail(errno.EINVAL, f"ifindex {spec.ifindex} is not a positive s32")
    asked = ns.ref.inode
    if spec.kind in ("vlan", "macvlan", "ipvlan") and spec.parent_ns is not None:
        asked = state.namespace(spec.parent_ns).ref.inode
    if state.in_ns(asked, spec.ifindex) is not None:
        raise fail(errno.EEXIST, f"a link has ifindex {spec.ifindex}")
    if state.in_ns(ns.ref.inode, spec.ifindex) is not None:
        raise fail(errno.EBUSY, f"ifindex {spec.ifindex} is taken in the target namespace")


def _delay(value: int, miimon: int) -> int:
    """bond_option_updelay_set / downdelay: kept in whole miimon periods (rounded down)."""
    return value // miimon * miimon if miimon else value


def _validate(spec: LinkSpec) -> None:
    if spec.kind == "vlan":
        if spec.vlan_id is None:
            raise fail(errno.EINVAL, "vlan id not specified")  # vlan_newlink
        if not 0 <= spec.vlan_id < 4095:
            raise fail(errno.ERANGE, f"invalid vlan id {spec.vlan_id}")  # vlan_validate
        if spec.vlan_protocol not in VLAN_PROTOCOLS:
            raise fail(errno.EPROTONOSUPPORT, f"vlan protocol {spec.vlan_protocol!r}")
    elif spec.kind == "veth" and spec.mtu is not None and not 68 <= spec.mtu <= ETH_MAX_MTU:
        # veth_validate (ops->validate, before a taken name's EEXIST; with the module not
        # loaded yet there is no validate: the model's kernel has its modules loaded)
        raise fail(errno.EINVAL, f"veth mtu {spec.mtu} outside 68..{ETH_MAX_MTU}")
    elif spec.kind == "macvlan" and spec.mode is not None and spec.mode not in MACVLAN_MODES:
        raise fail(errno.EINVAL, f"macvlan mode {spec.mode!r}")  # macvlan_validate
    elif spec.kind == "ipvlan" and spec.mode is not None and spec.mode not in IPVLAN_MODES:
        raise fail(errno.EINVAL, f"ipvlan mode {spec.mode!r}")  # ipvlan_nl_validate
    elif spec.kind == "ipvlan" and spec.ipvlan_flag not in (None, *IPVLAN_FLAGS):
        raise fail(errno.EINVAL, f"ipvlan flag {spec.ipvlan_flag!r}")  # ipvlan_nl_validate
    elif spec.kind == "bond" and spec.bond is not None:
        b = spec.bond
        if b.mode not in BOND_MODES:
            raise fail(errno.EINVAL, f"bond mode {b.mode!r}")  # bond option tables
        if b.fail_over_mac not in FAIL_OVER_MAC:
            raise fail(errno.EINVAL, f"bond fail_over_mac {b.fail_over_mac!r}")
        if min(b.miimon_ms, b.updelay_ms, b.downdelay_ms) < 0:
            raise fail(errno.EINVAL, "bond intervals must not be negative")
        if not b.miimon_ms and (b.updelay_ms or b.downdelay_ms):
            # _bond_option_delay_set: "MII monitoring is disabled"
            raise fail(errno.EPERM, "up/down delays need miimon")


def _stack_on_lower(state: State, ns: Namespace, spec: LinkSpec, link: LinkState) -> None:
    """The newlink of vlan, macvlan and ipvlan: find and check the lower device."""
    if spec.parent is None:
        raise fail(errno.EINVAL, f"{spec.kind} needs a lower device (IFLA_LINK)")
    lower_ns = state.namespace(spec.parent_ns) if spec.parent_ns is not None else ns
    lower = state.in_ns(lower_ns.ref.inode, spec.parent)
    if lower is None:
        raise fail(errno.ENODEV, f"no lower device with ifindex {spec.parent}")
    if lower.loopback:
        if spec.kind == "vlan":
            raise fail(errno.EOPNOTSUPP, "lo is VLAN challenged")  # vlan_check_real_dev
        # macvlan_port_create / ipvlan_port_create: not an Ethernet device, or loopback
        raise fail(errno.EINVAL, f"{spec.kind} cannot sit on the loopback device")
    if spec.kind == "vlan":
        _vlan_check(state, lower, spec)
        link.vlan_id, link.vlan_protocol = spec.vlan_id, spec.vlan_protocol
        if spec.mtu is not None and spec.mtu > lower.mtu:
            raise fail(errno.EINVAL, f"vlan mtu {spec.mtu} above {lower.name}'s")  # vlan_newlink
        if vlan_filter_refused(state, lower):
            # register_vlan_dev: vlan_vid_add, which the lower's driver refuses
            raise fail(errno.EINVAL, f"{lower.name} refuses the VLAN filter (its PF)")
        if not spec.mac:
            link.mac, link.mac_assign = lower.mac, "stolen"  # vlan_dev_init
    elif spec.kind == "macvlan":
        lower = _macvlan_check(state, lower, spec, link)
    else:
        lower = _ipvlan_check(state, lower)
        link.mac, link.mac_assign = lower.mac, "stolen"  # ipvlan shares its lower's address
        if not spec.mac:
            # ipvlan_init leaves addr_assign_type NET_ADDR_PERM (rtnl_create_link set
            # NET_ADDR_SET if an address was given), so register_netdevice copies the
            # address to perm_addr
            link.perm_mac = lower.mac
    if spec.mtu is None:
        link.mtu = lower.mtu  # a child without IFLA_MTU inherits its lower's
    link.parent = lower.id


def _vlan_check(state: State, lower: LinkState, spec: LinkSpec) -> None:
    """vlan_check_real_dev."""
    if lower.kind == "ipvlan":
        raise fail(errno.EOPNOTSUPP, "VLANs not supported on ipvlan")  # NETIF_F_VLAN_CHALLENGED
    for sibling in state.children(lower, "vlan"):
        if (sibling.vlan_protocol, sibling.vlan_id) == (spec.vlan_protocol, spec.vlan_id):
            raise fail(errno.EEXIST, f"vlan {spec.vlan_id} already exists on {lower.name}")


def _macvlan_check(state: State, lower: LinkState, spec: LinkSpec, link: LinkState) -> LinkState:
    """macvlan_common_newlink."""
    if lower.kind == "macvlan":
        lower = state.links[lower.parent or 0]  # stack on the real device instead
    if spec.mtu is not None and spec.mtu > lower.mtu:
        raise fail(errno.EINVAL, f"macvlan mtu {spec.mtu} above {lower.name}'s")
    link.max_mtu = lower.max_mtu
    siblings = state.children(lower, "macvlan")
    if not siblings and _rx_busy(state, lower):
        raise fail(errno.EBUSY, f"{lower.name} is in use")  # macvlan_port_create
    if not siblings and lower.kind == "ipvlan":
        # netdev_rx_handler_register: an ipvlan is IFF_NO_RX_HANDLER
        raise fail(errno.EINVAL, f"{lower.name} (an ipvlan) takes no rx handler")
    mode = spec.mode or "vepa"
    if any(s.mode == "passthru" for s in siblings) or (mode == "passthru" and siblings):
        raise fail(errno.EINVAL, "only one macvlan can be created in passthru mode")
    link.mode = mode
    if mode == "passthru":
        link.mac, link.mac_assign = lower.mac, "stolen"  # eth_hw_addr_inherit
        lower.passthru_perm_mac = lower.mac  # macvlan_port_create: port->perm_addr
    return lower


def _ipvlan_check(state: State, lower: LinkState) -> LinkState:
    """ipvlan_link_new: an ipvlan on an ipvlan joins the same port."""
    if lower.kind == "ipvlan":
        return state.links[lower.parent or 0]
    if lower.ipvlan_port_mode is None and _rx_busy(state, lower):
        raise fail(errno.EBUSY, f"{lower.name} is already in use")
    return lower


def _ipvlan_set_port_mode(state: State, link: LinkState, mode: str) -> None:
    """ipvlan_set_port_mode: the mode belongs to the port, so every ipvlan on it switches."""
    state.links[link.parent or 0].ipvlan_port_mode = mode


def _ipvlan_set_port_flag(state: State, link: LinkState, flag: str) -> None:
    """IFLA_IPVLAN_FLAGS: the port's too, so every ipvlan on it is private, vepa or not."""
    state.links[link.parent or 0].ipvlan_port_flag = None if flag == "bridge" else flag


def _add_peer(state: State, ns: Namespace, spec: LinkSpec, link: LinkState, name: str) -> None:
    peer_ns = state.namespace(spec.peer_ns) if spec.peer_ns is not None else ns
    if state.by_name(peer_ns.ref.inode, name) is not None:
        # the first end took the name the peer was given (the same name for both ends):
        # register_netdevice of the first end fails, and the peer is unregistered
        del state.links[link.id]
        raise fail(errno.EEXIST, f"interface {name!r} already exists in this namespace")
    peer = LinkState(
        id=0,
        ifindex=0,
        name=name,
        kind="veth",
        ns=peer_ns.ref.inode,
        mac=state.random_mac(),
        mac_assign="random",
        # veth_newlink builds the peer from VETH_INFO_PEER's attributes alone
        # (rtnl_create_link(..., tbp)); the backend sends no IFLA_MTU there, so the
        # peer keeps ether_setup's 1500 whatever the first end's MTU (Linux 6.18).
        mtu=ETH_DATA_LEN,
        min_mtu=link.min_mtu,
        max_mtu=link.max_mtu,
        peer=link.id,
    )
    link.peer = state.add(peer).id


# -- RTM_SETLINK -----------------------------------------------------------------------


def setlink(state: State, link: LinkState, changes: LinkChanges) -> None:
    """do_setlink's order: address, mtu, name, alias, flags, master."""
    if changes.name is not None:
        name_policy(changes.name)
    if changes.alias is not None:
        alias_policy(changes.alias)
    if changes.mac is not None:
        dev_set_mac(state, link, parse_mac(changes.mac))
    if changes.mtu is not None:
        dev_set_mtu(state, link, changes.mtu)
    if changes.name:  # an empty IFLA_IFNAME renames nothing
        dev_change_name(state, link, changes.name)
    if changes.alias is not None:
        dev_set_alias(link, changes.alias)
    # Since Linux 6.3 a master change runs before the flags, except that "down" goes first
    # so that a link can be put down and enslaved in one message.
    if changes.up is False:
        dev_close(state, link)
    if changes.master is not None:
        do_set_master(state, link, changes.master)
    if changes.up is True:
        dev_open(state, link)


# -- moving between namespaces ---------------------------------------------------------


def move(
    state: State,
    link: LinkState,
    target: Namespace,
    new_name: str | None,
    alias: str | None = None,
) -> None:
    """do_setlink with IFLA_NET_NS_FD (+ IFLA_IFNAME, + IFLA_IFALIAS):
    __dev_change_net_namespace, then rename, then the alias."""
    if new_name is not None:
        name_policy(new_name)
    new_name = new_name or None  # an empty IFLA_IFNAME renames nothing
    if alias is not None:
        alias_policy(alias)
    if link.kind in NETNS_LOCAL or link.loopback:
        raise fail(errno.EINVAL, f"{link.kind} {link.name} is local to its namespace")
    dest = target.ref.inode
    if link.ns != dest:
        name = link.name
        if state.by_name(dest, link.name) is not None:
            if new_name is None:
                raise fail(errno.EEXIST, f"{link.name!r} exists in the target namespace")
            name = claim_name(state, dest, new_name)  # dev_prep_valid_name(..., EEXIST)
        if link.master is not None:
            # NETDEV_UNREGISTER on the port: its bond or bridge lets it go (a bond gives
            # back its address and MTU), then it moves
            release(state, state.links[link.master], link)
        dev_close(state, link)  # "If device is running close it first."
        state.relocate(link, dest, name)
    if new_name is not None:
        # A separate step after the move: an error here leaves the link moved, old name
        # (and old alias: the alias comes after the name).
        dev_change_name(state, link, new_name)
    if alias is not None:
        dev_set_alias(link, alias)


# -- RTM_DELLINK and namespace teardown ------------------------------------------------


def unregister(state: State, roots: list[LinkState]) -> None:
    """Delete ``roots`` with everything that dies with them: veth peers and stacked children."""
    dying: dict[int, LinkState] = {}
    queue = list(roots)
    while queue:
        link = queue.pop(0)
        if link.id in dying:
            continue
        dying[link.id] = link
        if link.peer is not None:
            queue.append(state.links[link.peer])  # veth_dellink takes the peer along
        queue.extend(state.children(link))  # NETDEV_UNREGISTER on a lower kills its uppers
    for link in dying.values():
        if link.kind == "bond":
            release_all(state, link, set(dying))
        elif link.kind == "bridge":
            # br_dev_delete: del_nbp for every port; the ports that live on are released.
            for port in state.links.values():
                if port.master == link.id and port.id not in dying:
                    release(state, link, port)
    for link in dying.values():
        detach_dying(state, link)
    lowers = {lk.parent for lk in dying.values() if lk.kind == "ipvlan"}
    passthru = {
        lk.parent for lk in dying.values() if lk.kind == "macvlan" and lk.mode == "passthru"
    }
    for link_id in dying:
        del state.links[link_id]
    for lower_id in passthru:
        lower = state.links.get(lower_id or 0)
        if lower is not None and lower.passthru_perm_mac is not None:
            # macvlan_port_destroy: a lower whose address the passthru macvlan changed
            # gets its perm_addr back
            perm, lower.passthru_perm_mac = lower.passthru_perm_mac, None
            if perm != lower.mac:
                with contextlib.suppress(KernelError):
                    dev_set_mac(state, lower, perm)
    for lower_id in lowers:
        lower = state.links.get(lower_id or 0)
        if lower is not None and not state.children(lower, "ipvlan"):
            lower.ipvlan_port_mode = None  # ipvlan_port_destroy with the last ipvlan
            lower.ipvlan_port_flag = None


def destroy_namespace(state: State, ns: Namespace) -> None:
    """cleanup_net: devices go home (default_device_exit_net), virtual links die."""
    host = state.host.ref.inode
    inode = ns.ref.inode
    devices = [lk for lk in state.links.values() if lk.ns == inode and lk.kind == "device"]
    for link in [lk for lk in devices if not lk.loopback]:
        if link.master is not None:
            release(state, state.links[link.master], link)  # NETDEV_UNREGISTER on a port
        dev_close(state, link)
        name = link.name
        if state.by_name(host, name) is not None:
            name = f"dev{link.ifindex}"
            if state.by_name(host, name) is not None:
                name = claim_name(state, host, "dev%d")
        state.relocate(link, host, name)
    unregister(state, [lk for lk in state.links.values() if lk.ns == inode])
    del state.namespaces[inode]


# -- RTM_NEWLINK on an existing link: kind options (changelink) ------------------------

OPTIONS_OF_KIND = {
    # bond_changelink's order (IFLA_BOND_* numbers); ipvlan_nl_changelink: mode, flags
    "bond": ("bond_mode", "active_slave", "miimon_ms", "fail_over_mac"),
    "macvlan": ("mode",),
    "ipvlan": ("mode", "ipvlan_flag"),
}


def changelink(state: State, link: LinkState, options: LinkOptions) -> None:
    """rtnl_changelink: ``options`` handed to the kind's changelink. Like Linux, each
    option applies in the kind's order and the first that fails stops the rest, with
    those before it kept."""
    given = options.fields()
    known = OPTIONS_OF_KIND.get(options.kind, ())
    foreign = sorted(set(given) - set(known))
    if foreign:  # the sender's check (LinuxKernel): it would be read as another attribute
        raise fail(errno.EINVAL, f"a {options.kind} has no option {', '.join(foreign)}")
    if given and link.kind != options.kind:
        # rtnl_changelink: IFLA_INFO_DATA for another kind's ops (an empty one is no change)
        raise fail(errno.EOPNOTSUPP, f"{link.name} is a {link.kind}, not a {options.kind}")
    if options.kind == "ipvlan":
        if options.mode is not None and options.mode not in IPVLAN_MODES:
            raise fail(errno.EINVAL, f"ipvlan mode {options.mode!r}")  # ipvlan_nl_validate
        if options.ipvlan_flag not in (None, *IPVLAN_FLAGS):
            raise fail(errno.EINVAL, f"ipvlan flag {options.ipvlan_flag!r}")  # validate
        if options.mode is not None:
            _ipvlan_set_port_mode(state, link, options.mode)
        if options.ipvlan_flag is not None:
            _ipvlan_set_port_flag(state, link, options.ipvlan_flag)
    elif options.kind == "macvlan" and options.mode is not None:
        _macvlan_set_mode(link, options.mode)
    elif options.kind == "bond":
        for option in known:
            if option in given:
                _bond_option(state, link, option, given[option])


def _macvlan_set_mode(link: LinkState, mode: str) -> None:
    """macvlan_changelink: passthru is chosen at creation only."""
    if mode not in MACVLAN_MODES:
        raise fail(errno.EINVAL, f"macvlan mode {mode!r}")  # macvlan_validate
    if (link.mode == "passthru") != (mode == "passthru"):
        raise fail(errno.EINVAL, f"{link.name}: passthru mode cannot be changed to or from")
    link.mode = mode


def _bond_option(state: State, link: LinkState, option: str, value: object) -> None:
    bond = link.bond
    assert bond is not None
    if option == "bond_mode":
        # bond_opt_check_deps before the value is looked at
        if bond.slaves:
            raise fail(errno.ENOTEMPTY, f"{link.name} has slaves")  # BOND_OPTFLAG_NOSLAVES
        if link.up:
            raise fail(errno.EBUSY, f"{link.name} is up")  # BOND_OPTFLAG_IFDOWN
        if value not in BOND_MODES:
            raise fail(errno.EINVAL, f"bond mode {value!r}")
        bond.mode = str(value)
        if bond.mode in MII_ONLY_BOND_MODES and not bond.miimon_ms:
            # bond_option_mode_set: a mode without ARP monitoring gets the MII monitor
            # at its default interval (BOND_DEFAULT_MIIMON) when it has none
            bond.miimon_ms = DEFAULT_MIIMON_MS
    elif option == "fail_over_mac":
        if bond.slaves:
            raise fail(errno.ENOTEMPTY, f"{link.name} has slaves")  # BOND_OPTFLAG_NOSLAVES
        if value not in FAIL_OVER_MAC:
            raise fail(errno.EINVAL, f"bond fail_over_mac {value!r}")
        bond.fail_over_mac = str(value)
    elif option == "miimon_ms":
        assert isinstance(value, int)
        if value < 0:
            raise fail(errno.EINVAL, "miimon must not be negative")
        bond.miimon_ms = value
    else:
        assert isinstance(value, int)
        if value < 0:
            raise fail(errno.EINVAL, f"active slave {value} is out of range")
        slave = None if value == 0 else state.in_ns(link.ns, value)
        if value != 0 and slave is None:
            raise fail(errno.ENODEV, f"no link with ifindex {value}")  # __dev_get_by_index
        _bond_set_active(state, link, "" if slave is None else slave.name)


def _bond_set_active(state: State, bond_link: LinkState, name: str) -> None:
    """bond_option_active_slave_set."""
    bond = bond_link.bond
    assert bond is not None
    if bond.mode not in USES_PRIMARY:
        raise fail(errno.EACCES, f"{bond.mode} has no active slave")  # bond_opt_check_mode
    if not name:
        bond.active = None  # cleared: bond_select_active_slave picks the best one again
        select_active(state, bond_link)
        return
    slave = state.by_name(bond_link.ns, name)
    if slave is None:
        raise fail(errno.ENODEV, f"no link {name!r}")
    if slave.master != bond_link.id:
        raise fail(errno.EINVAL, f"{name} is not a slave of {bond_link.name}")
    if bond.active == slave.id:
        return  # already the current active slave
    if bond.active is None or not (bond.link_up.get(slave.id, False) and link_ok(state, slave)):
        # Changed only from another active slave, to one whose link the bond sees up
        # and which is running with carrier (bond_slave_is_up)
        raise fail(errno.EINVAL, f"{name} is down or its link is, or no slave is active")
    bond.active = slave.id
