"""Namespace handles, moving links between namespaces, and namespace death."""

from __future__ import annotations

import errno
from dataclasses import replace

from fakekernel import FakeKernelModel
from plugins.kernel import BondInfo, CrashingKernel, LinkChanges, LinkSpec, NsRef
from plugins.sdk import NamespaceHandle
from plugins.sdk.runner import UNSCOPED, CrashPoint, CrashPoints, Phase, PhaseKind

from .helpers import kernel_error, link, mk


def handle(ref: NsRef) -> NamespaceHandle:
    return NamespaceHandle(ref.path, ref.device, ref.inode, ref.boot_id)


def test_namespaces_have_unique_nsfs_identities(m: FakeKernelModel, pod: NsRef) -> None:
    other = m.add_namespace("other")
    host = m.host_namespace()
    assert (pod.path, pod.device) == ("/run/netns/pod", host.device)
    assert len({host.inode, pod.inode, other.inode}) == 3
    assert host.inode == 4026531840
    assert m.namespaces() == [host, pod, other]
    assert m.namespace("pod") == pod


def test_namespace_names(m: FakeKernelModel, pod: NsRef) -> None:
    with kernel_error(errno.EEXIST):
        m.add_namespace("pod")
    for bad in ("", "a/b", ".", ".."):
        with kernel_error(errno.EINVAL):
            m.add_namespace(bad)
    with kernel_error(errno.ENOENT):
        m.delete_namespace("nope")


def test_open_namespace_verifies_identity_and_boot(m: FakeKernelModel, pod: NsRef) -> None:
    assert m.open_namespace(handle(pod)) == pod
    with kernel_error(errno.ESTALE):
        m.open_namespace(replace(handle(pod), boot_id="another-boot"))
    m.delete_namespace("pod")
    with kernel_error(errno.ENOENT):
        m.open_namespace(handle(pod))
    again = m.add_namespace("pod")  # same path, new namespace
    with kernel_error(errno.ESTALE):
        m.open_namespace(handle(pod))
    assert m.open_namespace(handle(again)) == again


def test_calls_on_a_dead_or_foreign_namespace(m: FakeKernelModel, pod: NsRef) -> None:
    m.delete_namespace("pod")
    with kernel_error(errno.ENOENT):
        m.list_links(pod)
    with kernel_error(errno.ESTALE):
        m.list_links(replace(m.host_namespace(), boot_id="another-boot"))


def test_a_move_keeps_the_ifindex_and_closes_the_link(
    m: FakeKernelModel, host: NsRef, pod: NsRef
) -> None:
    v0 = m.set_link(host, link(m, host, "enp3s0f0v0").ifindex, LinkChanges(up=True))
    moved = m.move_link(host, v0.ifindex, pod, new_name="eth0")
    assert (moved.ifindex, moved.ns, moved.name, moved.up) == (v0.ifindex, pod, "eth0", False)
    assert m.get_link(host, ifindex=v0.ifindex) is None


def test_moving_onto_a_taken_name(m: FakeKernelModel, host: NsRef, pod: NsRef) -> None:
    mk(m, pod, "dummy", "enp3s0f0v0")
    mk(m, pod, "dummy", "eth0")
    v0 = link(m, host, "enp3s0f0v0")
    with kernel_error(errno.EEXIST):
        m.move_link(host, v0.ifindex, pod)
    with kernel_error(errno.EEXIST):  # dev_prep_valid_name(..., EEXIST)
        m.move_link(host, v0.ifindex, pod, new_name="eth0")
    assert link(m, host, "enp3s0f0v0").ifindex == v0.ifindex  # not moved
    assert m.move_link(host, v0.ifindex, pod, new_name="eth1").name == "eth1"


def test_a_failed_rename_after_a_move_leaves_the_link_moved(
    m: FakeKernelModel, host: NsRef, pod: NsRef
) -> None:
    """The move and the rename are separate steps of one do_setlink."""
    mk(m, pod, "dummy", "eth0")
    v0 = link(m, host, "enp3s0f0v0")
    with kernel_error(errno.EEXIST):
        m.move_link(host, v0.ifindex, pod, new_name="eth0")
    assert link(m, pod, "enp3s0f0v0").ifindex == v0.ifindex


def test_a_move_sets_the_alias_after_the_name(m: FakeKernelModel, host: NsRef, pod: NsRef) -> None:
    """IFLA_IFALIAS in the move's message: the link arrives renamed and aliased; ""
    clears an alias it had at home."""
    v0, v1 = link(m, host, "enp3s0f0v0"), link(m, host, "enp3s0f0v1")
    moved = m.move_link(host, v0.ifindex, pod, new_name="eth0", alias="dranp:1234:marker")
    assert (moved.ns, moved.name, moved.alias) == (pod, "eth0", "dranp:1234:marker")
    assert link(m, pod, "eth0") == moved
    m.set_link(host, v1.ifindex, LinkChanges(alias="its own"))
    cleared = m.move_link(host, v1.ifindex, pod, alias="")  # no rename: the alias alone
    assert (cleared.ns, cleared.name, cleared.alias) == (pod, "enp3s0f0v1", None)
    home = m.move_link(pod, v0.ifindex, host, new_name="enp3s0f0v0", alias="back")
    assert (home.ns, home.name, home.alias) == (host, "enp3s0f0v0", "back")


def test_a_failed_rename_after_a_move_sets_no_alias(
    m: FakeKernelModel, host: NsRef, pod: NsRef
) -> None:
    """do_setlink stops at the rename's error: moved, its old name, its old alias."""
    mk(m, pod, "dummy", "eth0")
    v0 = m.set_link(host, link(m, host, "enp3s0f0v0").ifindex, LinkChanges(alias="home"))
    with kernel_error(errno.EEXIST):
        m.move_link(host, v0.ifindex, pod, new_name="eth0", alias="dranp:1234:marker")
    left = link(m, pod, "enp3s0f0v0")
    assert (left.ifindex, left.alias) == (v0.ifindex, "home")


def test_a_move_with_a_too_long_alias_changes_nothing(
    m: FakeKernelModel, host: NsRef, pod: NsRef
) -> None:
    """The attribute policy (IFALIASZ - 1 bytes) refuses the message before the move."""
    v0 = link(m, host, "enp3s0f0v0")
    before = m.snapshot()
    with kernel_error(errno.ERANGE):
        m.move_link(host, v0.ifindex, pod, new_name="eth0", alias="a" * 256)
    assert m.snapshot() == before


def test_a_move_with_an_alias_is_one_crash_point(
    m: FakeKernelModel, host: NsRef, pod: NsRef
) -> None:
    points = CrashPoints()
    k = CrashingKernel(m, points)
    v0 = link(m, host, "enp3s0f0v0")
    with points.scope("test", "op-1"):
        moved = k.move_link(host, v0.ifindex, pod, new_name="eth0", alias="marker")
    assert (moved.name, moved.alias) == ("eth0", "marker")
    assert points.reached == [
        CrashPoint(
            "test", "op-1", UNSCOPED, Phase.kernel(PhaseKind.BEFORE_KERNEL_CALL, 1, "move_link")
        ),
        CrashPoint(
            "test", "op-1", UNSCOPED, Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, 1, "move_link")
        ),
    ]


def test_renaming_in_place_through_move(m: FakeKernelModel, host: NsRef) -> None:
    d = mk(m, host, "dummy", "d0")
    assert m.move_link(host, d.ifindex, host, new_name="d1").name == "d1"


def test_moving_an_enslaved_link_releases_it(m: FakeKernelModel, host: NsRef, pod: NsRef) -> None:
    """As Linux (NETDEV_UNREGISTER on the port): released, its address and MTU given
    back, then moved (down)."""
    bond = mk(m, host, "bond", "bond0", bond=BondInfo("active-backup", 100), mtu=9000)
    v0 = link(m, host, "enp3s0f0v0")
    m.set_link(host, v0.ifindex, LinkChanges(master=bond.ifindex))
    moved = m.move_link(host, v0.ifindex, pod)
    assert (moved.master, moved.mtu, moved.mac, moved.up) == (None, v0.mtu, v0.mac, False)
    assert link(m, host, "bond0").bond == BondInfo("active-backup", 100, 0, 0, None)


def test_namespace_death_returns_devices_and_kills_virtual_links(
    m: FakeKernelModel, host: NsRef, pod: NsRef
) -> None:
    before = m.snapshot()
    v0, eth9 = link(m, host, "enp3s0f0v0"), link(m, host, "eth9")
    m.move_link(host, v0.ifindex, pod, new_name="net0")
    m.set_link(pod, v0.ifindex, LinkChanges(up=True))
    mk(m, pod, "vlan", "net0.7", parent=v0.ifindex, vlan_id=7)
    mk(m, pod, "macvlan", "mv0", parent=eth9.ifindex, parent_ns=host)
    mk(m, host, "veth", "host-end", peer_name="pod-end", peer_ns=pod)
    shared = mk(m, host, "veth", "a", peer_name="b")
    m.move_link(host, shared.ifindex, pod)
    child = mk(m, host, "macvlan", "on-a", parent=shared.ifindex, parent_ns=pod)

    m.delete_namespace("pod")

    back = link(m, host, "net0")  # keeps its name when it is free in the host
    assert (back.ifindex, back.up, back.mac) == (v0.ifindex, False, v0.mac)
    for gone in ("host-end", "b", "on-a"):
        assert m.get_link(host, name=gone) is None, gone
    assert m.get_link(host, ifindex=child.ifindex) is None
    assert [ns.path for ns in m.namespaces()] == [host.path]
    m.set_link(host, v0.ifindex, LinkChanges(name="enp3s0f0v0"))
    assert m.snapshot()["links"] == before["links"]


def test_a_returning_device_whose_name_is_taken_becomes_dev_ifindex(
    m: FakeKernelModel, host: NsRef, pod: NsRef
) -> None:
    v0 = link(m, host, "enp3s0f0v0")
    m.move_link(host, v0.ifindex, pod)
    mk(m, host, "dummy", "enp3s0f0v0")
    m.delete_namespace("pod")
    assert link(m, host, f"dev{v0.ifindex}").pci_address == v0.pci_address


def test_namespace_death_releases_bond_slaves(m: FakeKernelModel, host: NsRef, pod: NsRef) -> None:
    v0 = link(m, host, "enp3s0f0v0")
    m.move_link(host, v0.ifindex, pod)
    bond = mk(m, pod, "bond", "bond0", bond=BondInfo("active-backup", 100), mtu=9000)
    m.set_link(pod, v0.ifindex, LinkChanges(master=bond.ifindex))
    m.delete_namespace("pod")
    back = link(m, host, "enp3s0f0v0")
    assert (back.master, back.mtu, back.mac, back.up) == (None, 1500, v0.mac, False)


def test_the_host_namespace_cannot_be_deleted_by_name(m: FakeKernelModel) -> None:
    with kernel_error(errno.ENOENT):
        m.delete_namespace("")


def test_list_namespaces_follows_namespace_life(m: FakeKernelModel, host: NsRef) -> None:
    assert m.list_namespaces() == [host]
    zeta, pod, alpha = (m.add_namespace(n) for n in ("zeta", "pod", "alpha"))
    # the host first, then by mount path, as LinuxKernel lists a directory (not creation order)
    assert m.list_namespaces() == [host, alpha, pod, zeta]
    m.delete_namespace("pod")
    assert m.list_namespaces() == [host, alpha, zeta]
    again = m.add_namespace("pod")  # same path, a new namespace: listed under its new identity
    listed = m.list_namespaces()
    assert listed == [host, alpha, again, zeta]
    assert pod not in listed
    assert len({(ref.device, ref.inode) for ref in listed}) == len(listed)
    for ref in listed:  # each one usable as it is, and the same the other calls return
        m.list_links(ref)
        assert m.open_namespace(handle(ref)) == ref


def test_list_namespaces_puts_the_host_first_whatever_its_path() -> None:
    m = FakeKernelModel(host_path="/run/netns/zz-host")
    a = m.add_namespace("a")
    assert m.list_namespaces() == [m.host_namespace(), a]


def test_list_namespaces_is_not_a_crash_point(m: FakeKernelModel, host: NsRef) -> None:
    points = CrashPoints()
    k = CrashingKernel(m, points)
    with points.scope("test", "op-1"):
        assert k.list_namespaces() == m.list_namespaces()
        assert points.reached == []
        k.create_link(host, LinkSpec("dummy", "d0"))  # the first crash point of the effect
    assert points.reached == [
        CrashPoint(
            "test", "op-1", UNSCOPED, Phase.kernel(PhaseKind.BEFORE_KERNEL_CALL, 1, "create_link")
        ),
        CrashPoint(
            "test", "op-1", UNSCOPED, Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, 1, "create_link")
        ),
    ]
