"""The errno the real kernel gives for each failure (compared with the fake kernel's)."""

from __future__ import annotations

import errno
from collections.abc import Callable

import pytest

from plugins.kernel import KernelError, LinkChanges, LinkSpec, NsRef
from plugins.kernel.linux import LinuxKernel

pytestmark = pytest.mark.netns


def code_of(excinfo: pytest.ExceptionInfo[KernelError]) -> int:
    return excinfo.value.code


@pytest.fixture
def va(kernel: LinuxKernel, ns_a: NsRef) -> int:
    return kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1")).ifindex


def test_duplicate_name_is_eexist(kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef, va: int) -> None:
    with pytest.raises(KernelError) as same:
        kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="other"))
    with pytest.raises(KernelError) as peer:
        kernel.create_link(ns_b, LinkSpec(kind="veth", name="x", peer_name="va1", peer_ns=ns_a))
    with pytest.raises(KernelError) as rename:
        kernel.set_link(ns_a, va, LinkChanges(name="va1"))
    kernel.create_link(ns_b, LinkSpec(kind="veth", name="vb", peer_name="vb1"))
    with pytest.raises(KernelError) as move:
        kernel.move_link(ns_a, va, ns_b, new_name="vb")
    assert [code_of(e) for e in (same, peer, rename, move)] == [errno.EEXIST] * 4
    assert kernel.get_link(ns_b, name="x") is None  # a failed veth leaves no half pair
    # do_setlink moves first, then renames: the failed rename leaves it moved, old name.
    assert kernel.get_link(ns_a, ifindex=va) is None
    moved = kernel.get_link(ns_b, name="va")
    assert moved is not None
    assert moved.kind == "veth"


def test_a_refused_rename_sets_no_alias_from_the_same_message(
    kernel: LinuxKernel, ns_a: NsRef, va: int
) -> None:
    """The owned-link kit marks and renames in one RTM_SETLINK, relying on do_setlink to
    rename before it sets the alias: a taken name must leave the link unmarked."""
    with pytest.raises(KernelError) as exc:
        kernel.set_link(ns_a, va, LinkChanges(alias="dranp:test:marker", name="va1"))
    assert code_of(exc) == errno.EEXIST
    left = kernel.get_link(ns_a, ifindex=va)
    assert left is not None
    assert (left.name, left.alias) == ("va", None)
    both = kernel.set_link(ns_a, va, LinkChanges(alias="dranp:test:marker", name="net1"))
    assert (both.name, both.alias) == ("net1", "dranp:test:marker")


def test_a_move_whose_rename_fails_sets_no_alias(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef, va: int
) -> None:
    """do_setlink moves, renames, then sets the alias, and stops at the first error: a
    name taken in the target leaves the link moved, its old name, its old alias."""
    mac = kernel.set_link(ns_a, va, LinkChanges(alias="home")).mac
    kernel.create_link(ns_b, LinkSpec(kind="veth", name="vb", peer_name="vb1"))
    with pytest.raises(KernelError) as exc:
        kernel.move_link(ns_a, va, ns_b, new_name="vb", alias="dranp:test:marker")
    assert code_of(exc) == errno.EEXIST
    moved = kernel.get_link(ns_b, name="va")
    assert moved is not None
    assert (moved.mac, moved.alias) == (mac, "home")  # (renumbered: vb has its ifindex)


def test_a_move_with_a_too_long_alias_is_erange_and_moves_nothing(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef, va: int
) -> None:
    with pytest.raises(KernelError) as exc:
        kernel.move_link(ns_a, va, ns_b, new_name="eth0", alias="a" * 256)
    assert code_of(exc) == errno.ERANGE  # the attribute policy, before any part applies
    left = kernel.get_link(ns_a, ifindex=va)
    assert left is not None
    assert (left.name, left.alias) == ("va", None)


def test_move_into_a_clashing_name_without_rename_is_eexist(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef, va: int
) -> None:
    kernel.create_link(ns_b, LinkSpec(kind="veth", name="va", peer_name="vb1"))
    with pytest.raises(KernelError) as exc:
        kernel.move_link(ns_a, va, ns_b)
    assert code_of(exc) == errno.EEXIST


def test_unknown_ifindex_is_enodev(kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef) -> None:
    calls: list[Callable[[], object]] = [
        lambda: kernel.set_link(ns_a, 4242, LinkChanges(mtu=1400)),
        lambda: kernel.delete_link(ns_a, 4242),
        lambda: kernel.move_link(ns_a, 4242, ns_b),
        lambda: kernel.move_link(ns_a, 4242, ns_b, new_name="x"),
        lambda: kernel.get_vfs(ns_a, 4242),
        lambda: kernel.create_link(ns_a, LinkSpec(kind="macvlan", name="m", parent=4242)),
    ]
    codes = []
    for call in calls:
        with pytest.raises(KernelError) as exc:
            call()
        codes.append(code_of(exc))
    assert codes == [errno.ENODEV] * len(calls)


def test_bad_mtu_is_einval(kernel: LinuxKernel, ns_a: NsRef, va: int) -> None:
    with pytest.raises(KernelError) as low:
        kernel.set_link(ns_a, va, LinkChanges(mtu=67))
    with pytest.raises(KernelError) as high:
        kernel.set_link(ns_a, va, LinkChanges(mtu=65536))
    with pytest.raises(KernelError) as create:
        kernel.create_link(ns_a, LinkSpec(kind="veth", name="vz", peer_name="vz1", mtu=10))
    assert [code_of(e) for e in (low, high, create)] == [errno.EINVAL] * 3
    # the kernel's extended-ack text comes along (NETLINK_EXT_ACK)
    assert "mtu less than device minimum" in str(low.value)


def test_macvlan_mtu_above_the_parent_is_einval(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef, va: int
) -> None:
    kernel.set_link(ns_a, va, LinkChanges(mtu=1400))
    with pytest.raises(KernelError) as create:
        kernel.create_link(
            ns_b, LinkSpec(kind="macvlan", name="m", parent=va, parent_ns=ns_a, mtu=1500)
        )
    mv = kernel.create_link(ns_b, LinkSpec(kind="macvlan", name="m", parent=va, parent_ns=ns_a))
    assert mv.mtu == 1400
    with pytest.raises(KernelError) as change:
        kernel.set_link(ns_b, mv.ifindex, LinkChanges(mtu=1401))
    assert [code_of(e) for e in (create, change)] == [errno.EINVAL, errno.EINVAL]
    # Lowering the parent below the child drags the child down (NETDEV_CHANGEMTU).
    kernel.set_link(ns_a, va, LinkChanges(mtu=1300))
    child = kernel.get_link(ns_b, ifindex=mv.ifindex)
    assert child is not None
    assert child.mtu == 1300


def test_name_and_alias_limits_are_erange(kernel: LinuxKernel, ns_a: NsRef, va: int) -> None:
    with pytest.raises(KernelError) as name:
        kernel.create_link(ns_a, LinkSpec(kind="veth", name="n" * 16, peer_name="p"))
    with pytest.raises(KernelError) as rename:
        kernel.set_link(ns_a, va, LinkChanges(name="n" * 16))
    with pytest.raises(KernelError) as alias:
        kernel.set_link(ns_a, va, LinkChanges(alias="a" * 256))
    assert [code_of(e) for e in (name, rename, alias)] == [errno.ERANGE] * 3
    ok = kernel.set_link(ns_a, va, LinkChanges(alias="a" * 255))
    assert ok.alias == "a" * 255


def test_invalid_names_and_addresses(kernel: LinuxKernel, ns_a: NsRef, va: int) -> None:
    with pytest.raises(KernelError) as slash:
        kernel.set_link(ns_a, va, LinkChanges(name="a/b"))
    with pytest.raises(KernelError) as multicast:
        kernel.set_link(ns_a, va, LinkChanges(mac="01:00:5e:00:00:01"))
    with pytest.raises(KernelError) as garbage:
        kernel.set_link(ns_a, va, LinkChanges(mac="not-a-mac"))
    with pytest.raises(KernelError) as pattern:
        kernel.create_link(ns_a, LinkSpec(kind="veth", name="v%d%d"))  # one %d only
    assert [code_of(e) for e in (slash, multicast, garbage, pattern)] == [
        errno.EINVAL,
        errno.EADDRNOTAVAIL,
        errno.EINVAL,
        errno.EINVAL,
    ]


def test_macvlan_mode_and_missing_parent(kernel: LinuxKernel, ns_a: NsRef, va: int) -> None:
    with pytest.raises(KernelError) as mode:
        kernel.create_link(ns_a, LinkSpec(kind="macvlan", name="m", parent=va, mode="weird"))
    with pytest.raises(KernelError) as orphan:
        kernel.create_link(ns_a, LinkSpec(kind="macvlan", name="m"))
    kernel.create_link(ns_a, LinkSpec(kind="macvlan", name="m0", parent=va, mode="passthru"))
    with pytest.raises(KernelError) as second:
        kernel.create_link(ns_a, LinkSpec(kind="macvlan", name="m1", parent=va, mode="passthru"))
    assert [code_of(e) for e in (mode, orphan, second)] == [
        errno.EINVAL,
        errno.EINVAL,
        errno.EINVAL,
    ]


def test_device_delete_and_local_moves(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef, va: int
) -> None:
    with pytest.raises(KernelError) as lo:
        kernel.delete_link(ns_a, 1)
    br = kernel.create_link(ns_a, LinkSpec(kind="bridge", name="br0"))
    with pytest.raises(KernelError) as bridge:
        kernel.move_link(ns_a, br.ifindex, ns_b)
    with pytest.raises(KernelError) as loopback:
        kernel.move_link(ns_a, 1, ns_b)
    assert [code_of(e) for e in (lo, bridge, loopback)] == [
        errno.EOPNOTSUPP,
        errno.EINVAL,
        errno.EINVAL,
    ]


def test_enslaving_rules(kernel: LinuxKernel, ns_a: NsRef, va: int) -> None:
    br = kernel.create_link(ns_a, LinkSpec(kind="bridge", name="br0"))
    with pytest.raises(KernelError) as self_master:
        kernel.set_link(ns_a, br.ifindex, LinkChanges(master=br.ifindex))
    with pytest.raises(KernelError) as unknown:
        kernel.set_link(ns_a, va, LinkChanges(master=4242))
    with pytest.raises(KernelError) as not_a_master:
        kernel.set_link(ns_a, br.ifindex, LinkChanges(master=va))
    assert [code_of(e) for e in (self_master, unknown, not_a_master)] == [
        errno.ELOOP,
        errno.EINVAL,
        errno.EOPNOTSUPP,
    ]
