"""Links on the real kernel: create across namespaces, set, move, delete, read back."""

from __future__ import annotations

import errno
import struct
from typing import Any

import pytest

from plugins.kernel import KernelError, LinkChanges, LinkSpec, NsRef, VFChanges
from plugins.kernel.linux import LinuxKernel
from plugins.kernel.linux import _wire as w

from .helpers import LinkEvents

pytestmark = pytest.mark.netns


def same_ns(a: NsRef | None, b: NsRef) -> bool:
    return a is not None and a.key == b.key


def test_veth_peer_is_born_in_the_other_namespace(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef
) -> None:
    events_a = LinkEvents(ns_a.path)
    try:
        va = kernel.create_link(
            ns_a, LinkSpec(kind="veth", name="va", peer_name="vb", peer_ns=ns_b)
        )
        seen_in_a = events_a.drain()
    finally:
        events_a.close()
    vb = kernel.get_link(ns_b, name="vb")
    assert vb is not None
    assert (va.kind, vb.kind) == ("veth", "veth")
    assert same_ns(va.ns, ns_a)
    assert same_ns(vb.ns, ns_b)
    assert va.peer == vb.ifindex
    assert vb.peer == va.ifindex
    assert va.parent is None
    assert va.parent_ns is None
    assert kernel.get_link(ns_a, name="vb") is None
    assert ("new", "vb") not in seen_in_a  # never existed in ns_a, not even briefly


def test_macvlan_is_born_in_the_target_namespace_with_a_foreign_parent(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef
) -> None:
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
    events_a = LinkEvents(ns_a.path)
    try:
        mv = kernel.create_link(
            ns_b,
            LinkSpec(kind="macvlan", name="mv0", parent=va.ifindex, parent_ns=ns_a, mode="bridge"),
        )
        seen_in_a = events_a.drain()
    finally:
        events_a.close()
    assert mv.kind == "macvlan"
    assert mv.mode == "bridge"
    assert same_ns(mv.ns, ns_b)
    assert mv.parent == va.ifindex
    assert mv.parent_ns is not None
    assert mv.parent_ns.key == ns_a.key
    assert mv.parent_ns.path == ns_a.path
    assert mv.mtu == va.mtu  # a child without IFLA_MTU inherits its lower's
    assert mv.max_mtu == va.max_mtu
    # One message: the child never appeared in the parent's namespace.
    assert all(name != "mv0" for _, name in seen_in_a)
    again = kernel.get_link(ns_b, ifindex=mv.ifindex)
    assert again == mv


def test_macvlan_default_mode_and_same_namespace_parent(kernel: LinuxKernel, ns_a: NsRef) -> None:
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
    mv = kernel.create_link(ns_a, LinkSpec(kind="macvlan", name="mv0", parent=va.ifindex))
    assert mv.mode == "vepa"
    assert mv.parent == va.ifindex
    assert mv.parent_ns is None


def test_move_with_rename_in_one_call(kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef) -> None:
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
    moved = kernel.move_link(ns_a, va.ifindex, ns_b, new_name="eth7")
    assert moved.name == "eth7"
    assert same_ns(moved.ns, ns_b)
    assert kernel.get_link(ns_a, name="va") is None
    assert kernel.get_link(ns_a, ifindex=va.ifindex) is None
    assert kernel.get_link(ns_b, name="eth7") == moved
    assert moved.mac == va.mac
    # and back without a rename
    back = kernel.move_link(ns_b, moved.ifindex, ns_a)
    assert back.name == "eth7"
    assert same_ns(back.ns, ns_a)


def _setlinks(sent: list[tuple[int, bytes]]) -> list[set[int]]:
    """The attribute types of each RTM_SETLINK request among ``sent``."""
    found = []
    for msg_type, body in sent:
        if msg_type != w.RTM_SETLINK:
            continue
        types, offset = set(), _IFINFOMSG_SIZE
        while offset + 4 <= len(body):
            length, kind = struct.unpack_from("=HH", body, offset)
            types.add(kind & 0x3FFF)
            offset += (length + 3) & ~3
        found.append(types)
    return found


_IFINFOMSG_SIZE = 16


def spy_requests(kernel: LinuxKernel, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bytes]]:
    """Every request ``kernel`` sends from now on: (message type, body)."""
    sent: list[tuple[int, bytes]] = []
    request = kernel._request

    def spy(space: Any, msg_type: int, flags: int, body: bytes) -> list[bytes]:
        sent.append((msg_type, body))
        return request(space, msg_type, flags, body)

    monkeypatch.setattr(kernel, "_request", spy)
    return sent


def test_move_with_rename_and_alias_is_one_setlink(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
    sent = spy_requests(kernel, monkeypatch)
    moved = kernel.move_link(ns_a, va.ifindex, ns_b, new_name="eth7", alias="dranp:test:marker")
    assert (moved.name, moved.alias) == ("eth7", "dranp:test:marker")
    assert same_ns(moved.ns, ns_b)
    assert kernel.get_link(ns_b, name="eth7") == moved
    assert kernel.get_link(ns_a, ifindex=va.ifindex) is None
    # Fails if the alias (or the name) were a second message.
    assert _setlinks(sent) == [{w.IFLA_NET_NS_FD, w.IFLA_IFNAME, w.IFLA_IFALIAS}]


def test_move_with_an_empty_alias_clears_it_on_the_way(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1", alias="m"))
    assert va.alias == "m"
    sent = spy_requests(kernel, monkeypatch)
    moved = kernel.move_link(ns_a, va.ifindex, ns_b, alias="")
    assert (moved.name, moved.alias) == ("va", None)
    assert kernel.get_link(ns_b, name="va") == moved
    assert _setlinks(sent) == [{w.IFLA_NET_NS_FD, w.IFLA_IFALIAS}]
    # and home again with an alias, no rename
    home = kernel.move_link(ns_b, va.ifindex, ns_a, alias="back")
    assert (home.name, home.alias) == ("va", "back")
    assert same_ns(home.ns, ns_a)


def test_a_listener_in_the_target_sees_each_part_announced_not_the_message(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef
) -> None:
    """do_setlink announces each part as it applies it: the move (__dev_change_net_namespace
    sends RTM_NEWLINK into the target there, with the name and alias the link had at
    home), then the rename; the alias of a link that is down (a move closes it) is not
    announced at all. So a listener in the target sees the link without its new alias
    whether the alias came in the same message or in a second one (the same events
    either way, checked here): what the one message gives is that no crash of the caller
    falls between the parts (the test above pins the one message), and a read, which
    answers after the call, sees all three."""
    outcomes = []
    for n, one_message in enumerate((True, False)):
        va = kernel.create_link(
            ns_a, LinkSpec(kind="veth", name=f"va{n}", peer_name=f"vp{n}", alias="home")
        )
        events = LinkEvents(ns_b.path)
        try:
            if one_message:
                moved = kernel.move_link(
                    ns_a, va.ifindex, ns_b, new_name=f"eth{n}", alias="dranp:test:marker"
                )
            else:
                kernel.move_link(ns_a, va.ifindex, ns_b, new_name=f"eth{n}")
                moved = kernel.set_link(ns_b, va.ifindex, LinkChanges(alias="dranp:test:marker"))
            events.drain()  # the kernel queues its announcements before it acks
            shown = [(e, name, alias) for e, i, name, alias in events.shown if i == va.ifindex]
        finally:
            events.close()
        assert (moved.name, moved.alias, moved.up) == (f"eth{n}", "dranp:test:marker", False)
        assert shown[0] == ("new", f"va{n}", "home")  # the move's announcement
        outcomes.append([(e, name.replace(str(n), "N"), alias) for e, name, alias in shown])
    assert outcomes[0] == outcomes[1]


def test_move_keeps_the_name_when_none_is_given(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef
) -> None:
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
    moved = kernel.move_link(ns_a, va.ifindex, ns_b)
    assert moved.name == "va"
    peer = kernel.get_link(ns_a, name="va1")
    assert peer is not None
    assert peer.peer == moved.ifindex


def test_set_mtu_mac_alias_and_up_in_one_call(kernel: LinuxKernel, ns_a: NsRef) -> None:
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
    assert not va.up
    assert va.alias is None
    changed = kernel.set_link(
        ns_a,
        va.ifindex,
        LinkChanges(mtu=1400, mac="02:00:00:00:00:aa", alias="np:owner", up=True),
    )
    assert (changed.mtu, changed.mac, changed.alias, changed.up) == (
        1400,
        "02:00:00:00:00:aa",
        "np:owner",
        True,
    )
    renamed = kernel.set_link(ns_a, va.ifindex, LinkChanges(name="renamed", up=False))
    assert (renamed.name, renamed.up) == ("renamed", False)
    cleared = kernel.set_link(ns_a, va.ifindex, LinkChanges(alias=""))
    assert cleared.alias is None


def test_create_with_name_mac_mtu_and_alias(kernel: LinuxKernel, ns_a: NsRef) -> None:
    va = kernel.create_link(
        ns_a,
        LinkSpec(
            kind="veth", name="va", peer_name="va1", mac="02:11:22:33:44:55", mtu=1300, alias="m"
        ),
    )
    assert (va.name, va.mac, va.mtu, va.alias) == ("va", "02:11:22:33:44:55", 1300, "m")
    peer = kernel.get_link(ns_a, name="va1")
    assert peer is not None
    # veth_newlink builds the peer from VETH_INFO_PEER's attributes alone: the peer keeps
    # the default MTU, and it is registered first (the lower ifindex).
    assert peer.mtu == 1500
    assert peer.ifindex < va.ifindex


def test_list_and_get(kernel: LinuxKernel, ns_a: NsRef) -> None:
    names = [lk.name for lk in kernel.list_links(ns_a)]
    assert names == ["lo"]
    lo = kernel.get_link(ns_a, name="lo")
    assert lo is not None
    assert (lo.ifindex, lo.kind, lo.pci_address) == (1, "device", None)
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
    listed = kernel.list_links(ns_a)
    assert [lk.ifindex for lk in listed] == sorted(lk.ifindex for lk in listed)
    assert {lk.name for lk in listed} == {"lo", "va", "va1"}
    assert va in listed
    assert kernel.get_link(ns_a, name="nope") is None
    assert kernel.get_link(ns_a, ifindex=4242) is None
    assert kernel.get_link(ns_a, name="x" * 40) is None


def test_get_link_needs_exactly_one_key(kernel: LinuxKernel, ns_a: NsRef) -> None:
    with pytest.raises(KernelError) as both:
        kernel.get_link(ns_a, name="lo", ifindex=1)
    with pytest.raises(KernelError) as neither:
        kernel.get_link(ns_a)
    assert both.value.code == neither.value.code == errno.EINVAL


def test_delete_takes_the_peer_in_the_other_namespace(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef
) -> None:
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="vb", peer_ns=ns_b))
    mv = kernel.create_link(ns_a, LinkSpec(kind="macvlan", name="mv0", parent=va.ifindex))
    kernel.delete_link(ns_a, va.ifindex)
    assert kernel.get_link(ns_b, name="vb") is None
    assert kernel.get_link(ns_a, ifindex=mv.ifindex) is None  # children die with the lower


def test_bridge_master_and_nomaster(kernel: LinuxKernel, ns_a: NsRef) -> None:
    br = kernel.create_link(ns_a, LinkSpec(kind="bridge", name="br0"))
    assert br.kind == "bridge"
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
    enslaved = kernel.set_link(ns_a, va.ifindex, LinkChanges(master=br.ifindex))
    assert enslaved.master == br.ifindex
    released = kernel.set_link(ns_a, va.ifindex, LinkChanges(master=0))
    assert released.master is None


def test_vf_calls_on_a_link_without_vfs(kernel: LinuxKernel, ns_a: NsRef) -> None:
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
    assert kernel.get_vfs(ns_a, va.ifindex) == []
    with pytest.raises(KernelError) as exc:
        kernel.set_vf(ns_a, va.ifindex, 0, VFChanges(trust=True))
    assert exc.value.code == errno.EOPNOTSUPP  # no ndo_set_vf_*
    with pytest.raises(KernelError) as gone:
        kernel.get_vfs(ns_a, 4242)
    assert gone.value.code == errno.ENODEV


def test_find_device_in_the_host_namespace(kernel: LinuxKernel) -> None:
    host = kernel.host_namespace()
    devices = [lk for lk in kernel.list_links(host) if lk.pci_address]
    if not devices:
        pytest.skip("netns tier: this host has no PCI network device to look up")
    device = devices[0]
    assert device.kind == "device"
    found = kernel.find_device(device.pci_address.upper() if device.pci_address else "")
    assert found is not None
    assert (found.ifindex, found.name, found.ns.key) == (device.ifindex, device.name, host.key)
    assert kernel.find_device("ffff:ff:1f.7") is None
